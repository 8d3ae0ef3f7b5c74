//! Simulated power loss (design §6.2): a recording layer under [`crate::PoolMapping`] that
//! keeps, beside the live mapping, the image a power cut would leave, and at a chosen
//! persistence point writes that image out and ends the process at once.
//!
//! It is a test facility, off unless `HAAR_POWER_LOSS` is set when a pool is opened:
//!
//! ```text
//! HAAR_POWER_LOSS=at=N,seed=S,evict=0|1,image=PATH
//! ```
//!
//! The *durable image* starts as the pool file's bytes at open. Every persistence point of
//! the mapping updates it the way the hardware would:
//! * [`crate::PoolMapping::persist`] — the cache lines (64 bytes) covering the range are
//!   written back: their current bytes become durable;
//! * [`crate::PoolMapping::fence`] — non-temporal stores issued through
//!   [`crate::PoolMapping::write_nt`] since the last fence reach the persistence domain;
//! * [`crate::PoolMapping::grow`] — the new zeroed bytes.
//!
//! Persistence points are counted from 1 in the process. The power goes just before point `N`
//! takes effect — after every store issued since point `N − 1`, which is where an ordering bug
//! shows (a commit record stored before the bytes it names are durable). The crash image is
//! the durable image, plus (with `evict=1`) each cache line whose live bytes differ from it
//! with probability ½, drawn from `seed` — as a cache may have evicted any dirty line, or any
//! unfenced non-temporal store may have landed, before the power went. It
//! writes the image to `PATH` (fsynced) and calls `_exit(86)`: no destructor, no later store.
//! With `at=0` nothing crashes and [`persist_points`] tells how many points a run has.
//!
//! One pool per process is recorded (the first opened; every mapping of that file in the
//! process records into it), and fences are process-wide (the tests write from one thread).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::CACHE_LINE;

/// The environment variable that turns recording on (see the module documentation).
pub const POWER_LOSS_ENV: &str = "HAAR_POWER_LOSS";

/// Exit status of a process whose simulated power went at the chosen point.
pub const POWER_LOSS_EXIT: i32 = 86;

/// What `HAAR_POWER_LOSS` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The persistence point at which the power goes (0: never).
    pub at: u64,
    /// Seed of the eviction draw.
    pub seed: u64,
    /// Whether dirty lines that were never persisted may survive.
    pub evict: bool,
    /// Where the crash image is written.
    pub image: PathBuf,
}

impl Plan {
    /// Parses `at=N,seed=S,evict=0|1,image=PATH` (`image` last: a path may hold commas).
    ///
    /// # Errors
    /// A message naming the part that is malformed.
    pub fn parse(s: &str) -> Result<Plan, String> {
        let (head, image) = s
            .split_once("image=")
            .ok_or_else(|| format!("{POWER_LOSS_ENV}={s}: no image=PATH"))?;
        let mut plan = Plan {
            at: 0,
            seed: 1,
            evict: false,
            image: PathBuf::from(image),
        };
        for part in head.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{POWER_LOSS_ENV}: `{part}` is not KEY=VALUE"))?;
            let num = || {
                v.parse::<u64>()
                    .map_err(|e| format!("{POWER_LOSS_ENV}: {k}={v}: {e}"))
            };
            match k {
                "at" => plan.at = num()?,
                "seed" => plan.seed = num()?,
                "evict" => plan.evict = num()? != 0,
                _ => return Err(format!("{POWER_LOSS_ENV}: unknown key `{k}`")),
            }
        }
        Ok(plan)
    }
}

/// The durable image of one pool file and the count of persistence points.
pub(crate) struct Recorder {
    path: PathBuf,
    plan: Plan,
    points: AtomicU64,
    state: Mutex<State>,
}

struct State {
    durable: Vec<u8>,
    /// Non-temporal stores not yet fenced: (offset, length).
    unfenced: Vec<(usize, usize)>,
}

static RECORDER: OnceLock<Option<Arc<Recorder>>> = OnceLock::new();
static POINTS: AtomicU64 = AtomicU64::new(0);

/// The persistence points recorded so far in this process (0 when recording is off).
pub fn persist_points() -> u64 {
    POINTS.load(Ordering::SeqCst)
}

/// The recorder for the pool file at `path` with `len` bytes, if recording is on and this is
/// the recorded pool.
pub(crate) fn attach(path: &Path, len: usize) -> io::Result<Option<Arc<Recorder>>> {
    let canonical = std::fs::canonicalize(path)?;
    let rec = RECORDER.get_or_init(|| {
        let plan = Plan::parse(&std::env::var(POWER_LOSS_ENV).ok()?).unwrap_or_else(|e| {
            // A test facility asked for and malformed: nothing sensible to go on with.
            eprintln!("haar: {e}");
            std::process::exit(2)
        });
        let mut durable = std::fs::read(&canonical).ok()?;
        durable.resize(len.max(durable.len()), 0);
        Some(Arc::new(Recorder {
            path: canonical.clone(),
            plan,
            points: AtomicU64::new(0),
            state: Mutex::new(State {
                durable,
                unfenced: Vec::new(),
            }),
        }))
    });
    Ok(rec.as_ref().filter(|r| r.path == canonical).cloned())
}

fn lines(off: usize, len: usize, file_len: usize) -> (usize, usize) {
    let start = off / CACHE_LINE * CACHE_LINE;
    let end = (off + len).div_ceil(CACHE_LINE) * CACHE_LINE;
    (start.min(file_len), end.min(file_len))
}

impl Recorder {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file grew to `len` (fallocate zeroes the new bytes).
    pub(crate) fn grow(&self, len: usize) {
        let mut s = self.state();
        if s.durable.len() < len {
            s.durable.resize(len, 0);
        }
    }

    /// Non-temporal stores to `off..off + len` were issued (durable at the next fence).
    pub(crate) fn nt(&self, off: usize, len: usize) {
        self.state().unfenced.push((off, len));
    }

    /// `off..off + len` was persisted: its cache lines are durable.
    ///
    /// # Safety
    /// `live` is the mapping's base and `file_len` bytes of it are mapped.
    pub(crate) unsafe fn persist(&self, live: *const u8, file_len: usize, off: usize, len: usize) {
        let mut s = self.state();
        // SAFETY: forwarded.
        unsafe { self.point(&s, live, file_len) };
        // Persisting also fences this thread's non-temporal stores.
        let mut ranges = std::mem::take(&mut s.unfenced);
        ranges.push((off, len));
        for (o, l) in ranges {
            // SAFETY: forwarded.
            unsafe { Self::copy_lines(&mut s.durable, live, file_len, o, l) };
        }
    }

    /// A store fence: the non-temporal stores issued so far are durable.
    ///
    /// # Safety
    /// As [`Recorder::persist`].
    pub(crate) unsafe fn fence(&self, live: *const u8, file_len: usize) {
        let mut s = self.state();
        // SAFETY: forwarded.
        unsafe { self.point(&s, live, file_len) };
        for (o, l) in std::mem::take(&mut s.unfenced) {
            // SAFETY: forwarded.
            unsafe { Self::copy_lines(&mut s.durable, live, file_len, o, l) };
        }
    }

    /// # Safety
    /// As [`Recorder::persist`].
    unsafe fn copy_lines(
        durable: &mut Vec<u8>,
        live: *const u8,
        file_len: usize,
        off: usize,
        len: usize,
    ) {
        let (start, end) = lines(off, len, file_len);
        if durable.len() < end {
            durable.resize(end, 0);
        }
        // SAFETY: `start..end` lies inside the first `file_len` mapped bytes.
        let src = unsafe { std::slice::from_raw_parts(live.add(start), end - start) };
        durable[start..end].copy_from_slice(src);
    }

    /// Counts a persistence point; at the planned one, the power goes just before the point
    /// takes effect: every store since the previous point has been issued, none of them is
    /// known durable.
    ///
    /// # Safety
    /// As [`Recorder::persist`].
    unsafe fn point(&self, s: &State, live: *const u8, file_len: usize) {
        let n = self.points.fetch_add(1, Ordering::SeqCst) + 1;
        POINTS.store(n, Ordering::SeqCst);
        if n != self.plan.at {
            return;
        }
        let mut image = s.durable.clone();
        image.resize(file_len.max(image.len()), 0);
        if self.plan.evict {
            // SAFETY: forwarded.
            let live = unsafe { std::slice::from_raw_parts(live, file_len) };
            let mut x = self.plan.seed | 1;
            for (l, line) in live.chunks(CACHE_LINE).enumerate() {
                let at = l * CACHE_LINE;
                if image[at..at + line.len()] == *line {
                    continue;
                }
                // xorshift64: a dirty line survives with probability ½.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x & 1 == 1 {
                    image[at..at + line.len()].copy_from_slice(line);
                }
            }
        }
        let written = std::fs::File::create(&self.plan.image)
            .and_then(|mut f| f.write_all(&image).and_then(|_| f.sync_all()));
        if let Err(e) = written {
            eprintln!(
                "haar: cannot write the power-loss image {}: {e}",
                self.plan.image.display()
            );
            // SAFETY: _exit ends the process without running anything else.
            unsafe { libc::_exit(3) };
        }
        // SAFETY: as above: the power went; nothing after this point may run.
        unsafe { libc::_exit(POWER_LOSS_EXIT) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_with_the_image_last() {
        let p = Plan::parse("at=17,seed=5,evict=1,image=/tmp/a,b.img").unwrap();
        assert_eq!(
            p,
            Plan {
                at: 17,
                seed: 5,
                evict: true,
                image: "/tmp/a,b.img".into()
            }
        );
        assert_eq!(Plan::parse("image=x").unwrap().at, 0);
        assert!(Plan::parse("at=1").is_err());
        assert!(Plan::parse("at=x,image=y").is_err());
        assert!(Plan::parse("when=1,image=y").is_err());
    }

    #[test]
    fn lines_cover_the_range_within_the_file() {
        assert_eq!(lines(0, 1, 4096), (0, 64));
        assert_eq!(lines(63, 2, 4096), (0, 128));
        assert_eq!(lines(4090, 100, 4096), (4032, 4096));
    }
}
