//! Handle tables: what both C APIs hand out as a handle, and how a call on one becomes a
//! checked, counted reference that a concurrent close cannot pull away.
//!
//! A handle is not an address but a number shaped like a pointer: a tag for its type (top 8
//! bits), the generation of its slot (32 bits) and the slot's index (low 24 bits). C code
//! treats it as an opaque pointer and never dereferences it. Each type has one table of slots
//! that are never freed; a slot's state word holds its current generation (odd: live, even:
//! free) and the calls using it now. So:
//!
//! - a handle of another type, or any other number, is refused by its tag or index, without
//!   reading memory the library does not own;
//! - a closed (stale) handle is refused by its generation: closing bumps it, and so does the
//!   next handle made in that slot, so a stale handle never reaches another handle's state
//!   (until the same slot has been reused 2^31 times; freed slots are reused oldest first);
//! - a call holds its handle (a [`Shared`] or [`Exclusive`] guard) for its whole duration;
//!   closing marks the slot dead first (calls starting after that are refused) and then waits
//!   for the calls in flight to return before dropping the object: close while in use waits,
//!   never frees under another thread's feet;
//! - exclusive use (every handle type but `haar_t`, which serialises itself) is checked: a
//!   second thread calling on a handle in use is refused as busy instead of racing.
//!
//! No guard is held while the library calls back into C (watch callbacks, FDB5's failure
//! handler), so a callback may close any handle; a thread closing a handle it holds itself
//! would wait for ever, which debug builds catch as a panic.
//!
//! Owns the slots and the handle encoding; not what the objects are (`haar_api::handles`,
//! `fdb_api::object` and their messages).

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("haar's C handles encode a tag, generation and index in a 64-bit pointer");

/// Bits of a handle that index its slot.
const INDEX_BITS: u32 = 24;
/// Where the tag starts in a handle.
const TAG_SHIFT: u32 = 56;
/// Slots in the first segment; segment `k` holds `FIRST << k`.
const FIRST: usize = 64;
/// Segments: enough for every index of [`INDEX_BITS`].
const SEGMENTS: usize = 19;
/// In a slot's state word: set while one call holds the handle exclusively.
const EXCLUSIVE: u64 = 1 << 31;
/// In a slot's state word: the number of calls holding it shared.
const USERS: u64 = EXCLUSIVE - 1;
/// In a slot's state word: everything but the generation.
const LOW: u64 = u32::MAX as u64;

/// Why a handle was refused; each API words its own message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// NULL.
    Null,
    /// Not a handle of this type (another type's, or a number the library never made).
    Foreign,
    /// A handle of this type that was closed (freed) already, or is being closed.
    Closed,
    /// Another thread is using it and this use needs it alone (or it is held alone).
    Busy,
    /// Every slot of the type is live: 2^24 handles of one type at once.
    Full,
}

/// One handle's slot: its state word and its object (`Some` while live).
struct Slot<T> {
    state: AtomicU64,
    value: UnsafeCell<Option<T>>,
}

/// Slots of one handle type, grown by segments that never move or go away.
pub struct Table<T> {
    tag: u8,
    segments: [AtomicPtr<Slot<T>>; SEGMENTS],
    free: Mutex<Free>,
}

/// Slots to hand out: freed ones (oldest first), then never used ones from `next`.
struct Free {
    freed: VecDeque<u32>,
    next: u32,
}

// SAFETY: a slot's object is reached by one thread at a time (exclusive guards) or shared
// only through `Shared`, which requires `T: Sync`; objects move between threads (`T: Send`).
unsafe impl<T: Send> Sync for Table<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Table<T> {}

fn segment_of(index: u32) -> (usize, usize) {
    let n = index as usize + FIRST;
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize - FIRST.trailing_zeros() as usize;
    (k, n - (FIRST << k))
}

fn generation(state: u64) -> u32 {
    (state >> 32) as u32
}

impl<T> Table<T> {
    /// An empty table whose handles carry `tag` (nonzero, distinct per type).
    pub const fn new(tag: u8) -> Table<T> {
        assert!(tag != 0, "a zero tag could make a NULL handle");
        Table {
            tag,
            segments: [const { AtomicPtr::new(ptr::null_mut()) }; SEGMENTS],
            free: Mutex::new(Free {
                freed: VecDeque::new(),
                next: 0,
            }),
        }
    }

    fn slot(&self, index: u32) -> Option<&Slot<T>> {
        let (k, at) = segment_of(index);
        let seg = self.segments.get(k)?.load(Ordering::Acquire);
        // SAFETY: a published segment holds `FIRST << k` initialised slots and is never freed.
        (!seg.is_null()).then(|| unsafe { &*seg.add(at) })
    }

    /// The slot a handle names, and its generation, if its tag is this table's.
    fn decode(&self, handle: usize) -> Result<(&Slot<T>, u32, u32), Refusal> {
        if handle == 0 {
            return Err(Refusal::Null);
        }
        let h = handle as u64;
        let generation = (h >> INDEX_BITS) as u32;
        let index = (h & ((1 << INDEX_BITS) - 1)) as u32;
        // A live handle's generation is odd: an even one was never handed out.
        if (h >> TAG_SHIFT) as u8 != self.tag || generation.is_multiple_of(2) {
            return Err(Refusal::Foreign);
        }
        let slot = self.slot(index).ok_or(Refusal::Foreign)?;
        Ok((slot, generation, index))
    }

    /// Moves `value` into a free slot and returns its handle.
    pub fn insert(&self, value: T) -> Result<usize, Refusal> {
        let index = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            match free.freed.pop_front() {
                Some(i) => i,
                None => {
                    let i = free.next;
                    if i >= 1 << INDEX_BITS {
                        return Err(Refusal::Full);
                    }
                    let (k, at) = segment_of(i);
                    if at == 0 {
                        let seg: Box<[Slot<T>]> = (0..FIRST << k)
                            .map(|_| Slot {
                                state: AtomicU64::new(0),
                                value: UnsafeCell::new(None),
                            })
                            .collect();
                        let seg = Box::into_raw(seg).cast::<Slot<T>>();
                        self.segments[k].store(seg, Ordering::Release);
                    }
                    free.next = i + 1;
                    i
                }
            }
        };
        let slot = self.slot(index).expect("the segment was published above");
        // A free slot has an even generation and no users: no handle reaches it.
        let state = slot.state.load(Ordering::Acquire);
        debug_assert!(generation(state).is_multiple_of(2) && state & LOW == 0);
        // SAFETY: nobody can hold a free slot (its generation matches no handle).
        unsafe { *slot.value.get() = Some(value) };
        let live = generation(state).wrapping_add(1);
        slot.state.store(u64::from(live) << 32, Ordering::Release);
        Ok(((self.tag as usize) << TAG_SHIFT) | ((live as usize) << INDEX_BITS) | index as usize)
    }

    /// Holds the live handle for one call, shared with other shared holders.
    pub fn shared(&'static self, handle: usize) -> Result<Shared<T>, Refusal>
    where
        T: Sync,
    {
        let (slot, generation_of_handle, index) = self.decode(handle)?;
        let mut state = slot.state.load(Ordering::Relaxed);
        loop {
            if generation(state) != generation_of_handle {
                return Err(Refusal::Closed);
            }
            if state & EXCLUSIVE != 0 || state & USERS == USERS {
                return Err(Refusal::Busy);
            }
            match slot.state.compare_exchange_weak(
                state,
                state + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        held::enter(self, index);
        Ok(Shared {
            table: self,
            index,
            slot_state: &slot.state,
            value: slot.value.get(),
        })
    }

    /// Holds the live handle for one call, alone.
    pub fn exclusive(&'static self, handle: usize) -> Result<Exclusive<T>, Refusal> {
        let (slot, generation_of_handle, index) = self.decode(handle)?;
        let mut state = slot.state.load(Ordering::Relaxed);
        loop {
            if generation(state) != generation_of_handle {
                return Err(Refusal::Closed);
            }
            if state & LOW != 0 {
                return Err(Refusal::Busy);
            }
            match slot.state.compare_exchange_weak(
                state,
                state | EXCLUSIVE,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        held::enter(self, index);
        Ok(Exclusive {
            table: self,
            index,
            slot_state: &slot.state,
            value: slot.value.get(),
            _not_sync: PhantomData,
        })
    }

    /// Closes the handle: calls starting from now are refused, calls in flight are waited
    /// for, then the object is dropped and its slot freed. Returns the object so that the
    /// caller drops it (after the slot is dead, nobody else can reach it).
    pub fn remove(&'static self, handle: usize) -> Result<T, Refusal> {
        let (slot, generation_of_handle, index) = self.decode(handle)?;
        held::check_not_held(self, index);
        let mut state = slot.state.load(Ordering::Relaxed);
        loop {
            if generation(state) != generation_of_handle {
                return Err(Refusal::Closed);
            }
            let dead = (u64::from(generation_of_handle.wrapping_add(1)) << 32) | (state & LOW);
            match slot.state.compare_exchange_weak(
                state,
                dead,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        // This thread made the slot dead: nobody else removes it or starts using it; wait for
        // those using it to return.
        let mut rounds = 0u32;
        while slot.state.load(Ordering::Acquire) & LOW != 0 {
            rounds += 1;
            if rounds < 100 {
                std::hint::spin_loop();
            } else if rounds < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
        // SAFETY: dead and unused: this thread alone reaches the object.
        let value = unsafe { (*slot.value.get()).take() }.expect("a live slot holds its object");
        self.free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .freed
            .push_back(index);
        Ok(value)
    }

    #[cfg(debug_assertions)]
    fn table_id(&self) -> usize {
        self as *const Self as usize
    }
}

/// A call's shared hold on a live handle; released when dropped.
pub struct Shared<T: 'static> {
    table: &'static Table<T>,
    index: u32,
    slot_state: &'static AtomicU64,
    value: *const Option<T>,
}

impl<T> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: held: the slot is live or being closed, and its object is only taken once
        // every holder has released it.
        unsafe { &*self.value }
            .as_ref()
            .expect("a held slot holds its object")
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        held::leave(self.table, self.index);
        self.slot_state.fetch_sub(1, Ordering::Release);
    }
}

/// A call's exclusive hold on a live handle; released when dropped.
pub struct Exclusive<T: 'static> {
    table: &'static Table<T>,
    index: u32,
    slot_state: &'static AtomicU64,
    value: *mut Option<T>,
    _not_sync: PhantomData<*mut T>,
}

impl<T> Deref for Exclusive<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: held alone: as for `Shared`, and nobody else reaches the object.
        unsafe { &*self.value }
            .as_ref()
            .expect("a held slot holds its object")
    }
}

impl<T> DerefMut for Exclusive<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: held alone.
        unsafe { &mut *self.value }
            .as_mut()
            .expect("a held slot holds its object")
    }
}

impl<T> Drop for Exclusive<T> {
    fn drop(&mut self) {
        held::leave(self.table, self.index);
        self.slot_state.fetch_and(!EXCLUSIVE, Ordering::Release);
    }
}

/// Debug builds remember which slots each thread holds, so that a close of a handle the
/// closing thread holds itself (which would wait for ever) is a panic naming the bug.
mod held {
    #[cfg(debug_assertions)]
    thread_local! {
        static HELD: std::cell::RefCell<Vec<(usize, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    #[inline]
    pub(super) fn enter<T>(_table: &super::Table<T>, _index: u32) {
        #[cfg(debug_assertions)]
        HELD.with(|h| h.borrow_mut().push((_table.table_id(), _index)));
    }

    #[inline]
    pub(super) fn leave<T>(_table: &super::Table<T>, _index: u32) {
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|&e| e == (_table.table_id(), _index)) {
                h.swap_remove(i);
            }
        });
    }

    #[inline]
    pub(super) fn check_not_held<T>(_table: &super::Table<T>, _index: u32) {
        #[cfg(debug_assertions)]
        HELD.with(|h| {
            assert!(
                !h.borrow().contains(&(_table.table_id(), _index)),
                "a handle closed by the thread holding it for a call (it would wait for ever)"
            )
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    static STRINGS: Table<String> = Table::new(0x71);
    static OTHERS: Table<String> = Table::new(0x72);

    #[test]
    fn segments_cover_every_index_in_order() {
        assert_eq!(segment_of(0), (0, 0));
        assert_eq!(segment_of(63), (0, 63));
        assert_eq!(segment_of(64), (1, 0));
        assert_eq!(segment_of(191), (1, 127));
        assert_eq!(segment_of(192), (2, 0));
        let (k, _) = segment_of((1 << INDEX_BITS) - 1);
        assert!(k < SEGMENTS);
    }

    #[test]
    fn a_closed_handle_never_reaches_the_next_one_in_its_slot() {
        let a = STRINGS.insert("a".into()).unwrap();
        assert_eq!(&*STRINGS.shared(a).unwrap(), "a");
        assert_eq!(STRINGS.remove(a).unwrap(), "a");
        assert_eq!(STRINGS.shared(a).err(), Some(Refusal::Closed));
        assert_eq!(STRINGS.remove(a).err(), Some(Refusal::Closed));
        // Fill the freed slots so that one of the new handles reuses a's slot.
        let many: Vec<usize> = (0..200)
            .map(|i| STRINGS.insert(i.to_string()).unwrap())
            .collect();
        assert!(many.iter().all(|&b| b != a));
        assert_eq!(STRINGS.exclusive(a).err(), Some(Refusal::Closed));
        for b in many {
            STRINGS.remove(b).unwrap();
        }
    }

    #[test]
    fn foreign_null_and_forged_handles_are_refused() {
        let o = OTHERS.insert("o".into()).unwrap();
        assert_eq!(STRINGS.shared(o).err(), Some(Refusal::Foreign));
        assert_eq!(STRINGS.shared(0).err(), Some(Refusal::Null));
        assert_eq!(
            STRINGS.shared(0x7100_0000_0000_0000).err(),
            Some(Refusal::Foreign)
        );
        assert_eq!(
            STRINGS.shared(0x7100_0001_00ff_ffff).err(),
            Some(Refusal::Foreign)
        );
        assert_eq!(STRINGS.shared(0xdead_beef).err(), Some(Refusal::Foreign));
        OTHERS.remove(o).unwrap();
    }

    #[test]
    fn exclusive_use_refuses_a_second_user() {
        let a = STRINGS.insert("x".into()).unwrap();
        let mut held = STRINGS.exclusive(a).unwrap();
        held.push('y');
        assert_eq!(STRINGS.exclusive(a).err(), Some(Refusal::Busy));
        assert_eq!(STRINGS.shared(a).err(), Some(Refusal::Busy));
        drop(held);
        let s1 = STRINGS.shared(a).unwrap();
        let s2 = STRINGS.shared(a).unwrap();
        assert_eq!(&*s1, "xy");
        assert_eq!(STRINGS.exclusive(a).err(), Some(Refusal::Busy));
        drop((s1, s2));
        STRINGS.remove(a).unwrap();
    }

    #[test]
    fn close_waits_for_the_calls_in_flight_and_refuses_new_ones() {
        let a = STRINGS.insert("busy".into()).unwrap();
        let started = Arc::new(Barrier::new(2));
        let done = Arc::new(AtomicBool::new(false));
        let user = {
            let (started, done) = (started.clone(), done.clone());
            std::thread::spawn(move || {
                let held = STRINGS.shared(a).unwrap();
                started.wait();
                std::thread::sleep(Duration::from_millis(100));
                assert_eq!(&*held, "busy");
                done.store(true, Ordering::SeqCst);
            })
        };
        started.wait();
        let value = STRINGS.remove(a).unwrap();
        assert!(done.load(Ordering::SeqCst), "close returned while in use");
        assert_eq!(value, "busy");
        user.join().unwrap();
        assert_eq!(STRINGS.shared(a).err(), Some(Refusal::Closed));
    }
}
