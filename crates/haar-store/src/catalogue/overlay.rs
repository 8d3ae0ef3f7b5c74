//! The overlay (design §3.1): the state of the commits a database's runs do not hold yet,
//! replayed from its log and kept in the segments' own bytes.

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use std::hash::BuildHasher;

use super::state::{Dead, Slot};
use crate::format;

/// Encoded entry keys ([`format::RawEntry::key`]) → their state, in insertion order.
///
/// The overlay keeps the segments it replayed, and its table holds where each key lies in
/// them, so replaying a tail of thousands of entries copies no key and makes a few
/// allocations, not one per entry; dropping it frees those few. A fresh reader's first
/// retrieve pays both.
#[derive(Default)]
pub(crate) struct Overlay {
    segments: Vec<Vec<u8>>,
    entries: Vec<At>,
    table: HashTable<usize>,
}

/// Where an overlay key lies, and its state.
struct At {
    segment: usize,
    start: usize,
    len: usize,
    slot: Slot,
}

/// A replayed segment's entries, by position in its bytes: what [`Overlay::apply`] takes
/// once the decoded form (which borrows the bytes) is dropped.
pub(crate) struct Positions(Vec<(usize, usize, Slot)>);

impl Positions {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The positions of `seg`'s entries in `bytes`, the buffer it was decoded from.
    pub(crate) fn of(bytes: &[u8], seg: &format::RawSegment<'_>) -> Positions {
        let base = bytes.as_ptr() as usize;
        Positions(
            seg.entries
                .iter()
                .map(|e| (e.key.as_ptr() as usize - base, e.key.len(), e.slot))
                .collect(),
        )
    }
}

impl Overlay {
    fn hash(key: &[u8]) -> u64 {
        FxBuildHasher.hash_one(key)
    }

    fn key<'a>(segments: &'a [Vec<u8>], at: &At) -> &'a [u8] {
        &segments[at.segment][at.start..at.start + at.len]
    }

    fn find(&self, key: &[u8]) -> Option<usize> {
        self.table
            .find(Self::hash(key), |&i| {
                Self::key(&self.segments, &self.entries[i]) == key
            })
            .copied()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.segments.clear();
        self.entries.clear();
        self.table.clear();
    }

    /// The state of `key`, if the overlay holds it.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&Slot> {
        self.find(key).map(|i| &self.entries[i].slot)
    }

    /// Applies the entries at `positions` of the segment `bytes` in order, counting the
    /// fields they mask in `dead`.
    pub(crate) fn apply(&mut self, dead: &mut Dead, bytes: Vec<u8>, positions: &Positions) {
        let segment = self.segments.len();
        self.segments.push(bytes);
        let Overlay {
            segments,
            entries,
            table,
        } = self;
        let n = positions.0.len();
        entries.reserve(n);
        table.reserve(n, |&j| Self::hash(Self::key(segments, &entries[j])));
        for &(start, len, slot) in &positions.0 {
            let at = At {
                segment,
                start,
                len,
                slot,
            };
            let key = Self::key(segments, &at);
            let hash = Self::hash(key);
            match table.find(hash, |&i| Self::key(segments, &entries[i]) == key) {
                Some(&i) => {
                    if let Some(old) = std::mem::replace(&mut entries[i].slot, slot) {
                        dead.kill(&old);
                    }
                }
                None => {
                    table.insert_unique(hash, entries.len(), |&j| {
                        Self::hash(Self::key(segments, &entries[j]))
                    });
                    entries.push(at);
                }
            }
        }
    }

    /// Every (encoded key, state), in the order the keys were first inserted.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &Slot)> {
        self.entries
            .iter()
            .map(|at| (Self::key(&self.segments, at), &at.slot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{DataRef, Entry, SegmentBuilder};
    use haar_core::Key;

    fn segment(entries: &[(&str, Option<u64>)]) -> Vec<u8> {
        let db = Key::new().with("class", "od");
        let mut b = SegmentBuilder::new(0, 1, 1, &db).unwrap();
        for (step, object) in entries {
            let index = Key::new().with("type", "fc");
            let datum = Key::new().with("step", *step);
            b.push(&match object {
                Some(o) => Entry::Field {
                    index,
                    datum,
                    data: DataRef {
                        object: *o,
                        offset: 0,
                        length: 10,
                        crc: 0,
                    },
                },
                None => Entry::Tombstone { index, datum },
            })
            .unwrap();
        }
        b.finish()
    }

    fn apply(o: &mut Overlay, dead: &mut Dead, bytes: Vec<u8>) {
        let seg = format::decode_segment_raw(&bytes).unwrap();
        let at = Positions::of(&bytes, &seg);
        drop(seg);
        o.apply(dead, bytes, &at);
    }

    fn key(step: &str) -> Vec<u8> {
        format::raw_key(
            &Key::new().with("type", "fc"),
            &Key::new().with("step", step),
        )
    }

    #[test]
    fn overlay_keeps_the_newest_state_and_counts_what_it_masks() {
        let mut o = Overlay::default();
        let mut dead = Dead::default();
        apply(
            &mut o,
            &mut dead,
            segment(&[("0", Some(1)), ("6", Some(2))]),
        );
        // A later segment replaces step 0, removes step 6 and adds step 12; a tombstone
        // replaced again masks nothing more.
        apply(
            &mut o,
            &mut dead,
            segment(&[("0", Some(3)), ("6", None), ("12", Some(4)), ("6", None)]),
        );
        assert_eq!(o.get(&key("0")).unwrap().unwrap().object, 3);
        assert_eq!(o.get(&key("6")), Some(&None));
        assert_eq!(o.get(&key("12")).unwrap().unwrap().object, 4);
        assert_eq!(o.get(&key("18")), None);
        assert_eq!((dead.fields, dead.bytes), (2, 20));
        let order: Vec<Key> = o.iter().map(|(raw, _)| format::raw_keys(raw).1).collect();
        let steps: Vec<&str> = order.iter().map(|k| k.get("step").unwrap()).collect();
        assert_eq!(steps, ["0", "6", "12"]);
        o.clear();
        assert!(o.is_empty() && o.get(&key("0")).is_none());
    }
}
