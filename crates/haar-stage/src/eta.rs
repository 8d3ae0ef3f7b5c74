//! A task's rate and ETA (design §13.3), as a pure model over a progress trace: no clock, no
//! I/O, so that tests replay traces deterministically.
//!
//! Progress is counted in **work units**: one per byte per [`Phase`] (copied, made durable,
//! read back and renamed), so every phase that takes time is in the progress the ETA is
//! computed from. Counting only committed bytes left out whatever ran before a commit (a
//! single output file's copy, or a batch's copies waiting for their syncfs) and made the ETA
//! jump with each burst of commits.
//!
//! Owns the arithmetic only; [`crate::task`] feeds it.

/// The phases every staged byte goes through, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Written to its temporary name (or into a store).
    Copied = 0,
    /// Made durable (syncfs, `sync_file_range` waited on, fdatasync).
    Durable = 1,
    /// Read back from the destination and checksummed (files: piece by piece as they are
    /// copied; a single output file: segment by segment once durable, on a memory file system
    /// 1 MiB at a time as written, by a thread beside the writer).
    Verified = 2,
}

/// Work units per byte: one per [`Phase`].
pub const PHASES: u64 = 3;

/// Seconds of measurement below which a rate is not trusted.
const MIN_SECONDS: f64 = 0.1;

/// Seconds of a task's own measurement that weigh as much as its dataspace pair's recorded
/// rate: until the task has measured itself for about that long, a transient of its first
/// second (a disk's first writeback, or its source's pages reclaimed and read again) moves the
/// ETA less than the pair's history does, as urd's recorded bandwidths did.
const PRIOR_SECONDS: f64 = 1.0;

/// The ETA model of one run of a task. Times are seconds since the run started.
#[derive(Debug, Clone, Default)]
pub struct Eta {
    /// Bytes this run has to stage (objects kept from an earlier run excluded).
    total: u64,
    /// Bytes through each phase.
    done: [u64; 3],
    /// When every phase had advanced for the first time, and the work done then: from there
    /// on every phase runs, so the rate measured since is the pipeline's steady rate, without
    /// the time it took to fill.
    steady: Option<(f64, u64)>,
    /// Bytes per second recorded for the dataspace pair by earlier tasks.
    prior_rate: Option<f64>,
}

impl Eta {
    /// A model for `total` bytes, seeded with the pair's recorded rate (bytes/s).
    pub fn new(total: u64, prior_rate: Option<f64>) -> Eta {
        Eta {
            total,
            prior_rate,
            ..Eta::default()
        }
    }

    /// Sets the bytes to stage (known once the task is planned).
    pub fn set_total(&mut self, total: u64) {
        self.total = total;
    }

    /// Takes `bytes` out of the work (an object kept from an earlier run: it costs this run
    /// nothing worth predicting).
    pub fn skip(&mut self, bytes: u64) {
        self.total = self.total.saturating_sub(bytes);
    }

    /// `bytes` more went through `phase` at time `t`.
    pub fn advance(&mut self, phase: Phase, bytes: u64, t: f64) {
        self.done[phase as usize] += bytes;
        if self.steady.is_none() && self.done.iter().all(|&d| d > 0) {
            self.steady = Some((t, self.work_done()));
        }
    }

    /// `bytes` more went through every phase at once at time `t` (a store that checks and
    /// persists as it archives).
    pub fn advance_all(&mut self, bytes: u64, t: f64) {
        self.advance(Phase::Copied, bytes, t);
        self.advance(Phase::Durable, bytes, t);
        self.advance(Phase::Verified, bytes, t);
    }

    /// Work units done.
    pub fn work_done(&self) -> u64 {
        self.done.iter().sum()
    }

    /// Work units in all.
    pub fn work_total(&self) -> u64 {
        self.total * PHASES
    }

    /// At time `t`: the rate in bytes per second (work units per second over [`PHASES`]) and
    /// the seconds left, or `None` before anything can be said. The rate measured is the
    /// steady one once every phase runs, before that the rate of the work done so far; it is
    /// averaged with the pair's recorded rate, which weighs as much as `PRIOR_SECONDS` (1 s)
    /// of measurement, and used alone before `MIN_SECONDS` (0.1 s) of measurement.
    pub fn estimate(&self, t: f64) -> Option<(f64, f64)> {
        let work = self.work_done();
        let steady = self.steady.and_then(|(t0, w0)| {
            let (dt, dw) = (t - t0, work.saturating_sub(w0));
            (dt > MIN_SECONDS && dw > 0).then(|| (dw as f64 / dt, dt))
        });
        let so_far = (t > MIN_SECONDS && work > 0).then(|| (work as f64 / t, t));
        let prior = self.prior_rate.map(|r| r * PHASES as f64);
        let units_per_s = match (steady.or(so_far), prior) {
            (Some((rate, dt)), Some(prior)) => {
                (rate * dt + prior * PRIOR_SECONDS) / (dt + PRIOR_SECONDS)
            }
            (Some((rate, _)), None) => rate,
            (None, prior) => prior?,
        };
        if units_per_s <= 0.0 {
            return None;
        }
        let left = self.work_total().saturating_sub(work) as f64;
        Some((units_per_s / PHASES as f64, left / units_per_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event of a trace: at time `t`, `bytes` went through `phase` (if any), and
    /// `committed` more bytes became done (renamed into place).
    type Event = (f64, Option<Phase>, u64, u64);

    /// A deterministic trace of the file pipeline (design §13.3): one thread copies files of
    /// `file` bytes in four chunks each, every chunk read back as it is written, at `copy`
    /// s/byte, into batches of `batch` files; a second one, holding at most one batch
    /// waiting, makes each batch durable (`sync` s/byte, one syncfs) then renames its files.
    /// Returns the events in time order and the time the last one happened.
    fn file_pipeline(
        files: usize,
        file: u64,
        batch: usize,
        copy: f64,
        sync: f64,
    ) -> (Vec<Event>, f64) {
        let mut ev = Vec::new();
        let (mut t_copy, mut committer_free) = (0.0f64, 0.0f64);
        let mut batch_done_at: Vec<f64> = Vec::new();
        for b in 0..files.div_ceil(batch) {
            // The copier may not start a batch while one waits besides the one in commit.
            if b >= 2 {
                t_copy = t_copy.max(batch_done_at[b - 2]);
            }
            let n = batch.min(files - b * batch);
            for _ in 0..n * 4 {
                t_copy += copy * (file / 4) as f64;
                ev.push((t_copy, Some(Phase::Copied), file / 4, 0));
                ev.push((t_copy, Some(Phase::Verified), file / 4, 0));
            }
            let bytes = n as u64 * file;
            let t = t_copy.max(committer_free) + sync * bytes as f64;
            ev.push((t, Some(Phase::Durable), bytes, 0));
            ev.push((t, None, 0, bytes));
            committer_free = t;
            batch_done_at.push(t);
        }
        ev.sort_by(|a, b| a.0.total_cmp(&b.0));
        (ev, committer_free)
    }

    /// The error of the ETA reported when committed bytes first reach 10% (what
    /// `haar stage bench` measures), replaying `ev`.
    fn error_at_10pct(total: u64, ev: &[Event], end: f64) -> f64 {
        let mut eta = Eta::new(total, None);
        let mut committed = 0;
        for &(t, phase, bytes, done) in ev {
            if let Some(p) = phase {
                eta.advance(p, bytes, t);
            }
            committed += done;
            if committed * 10 >= total {
                let (_, left) = eta.estimate(t).expect("a rate by then");
                return (left - (end - t)).abs() / (end - t);
            }
        }
        panic!("never reached 10%");
    }

    #[test]
    fn the_eta_at_10_percent_counts_every_phase_of_the_file_pipeline() {
        // 256 files of 16 MiB in batches of 6, the shapes of the 4 GiB benchmark, at phase
        // costs like its host's: copy-bound (tmpfs target: syncfs nearly free), balanced, and
        // sync-bound (ext4 target: a batch's syncfs costs more than its copy).
        let (files, file) = (256, 16u64 << 20);
        let total = files as u64 * file;
        for (copy, sync) in [
            (1.0 / 2.0e9, 1.0 / 50.0e9),
            (1.0 / 2.0e9, 1.0 / 2.0e9),
            (1.0 / 3.0e9, 1.0 / 1.0e9),
        ] {
            let (ev, end) = file_pipeline(files, file, 6, copy, sync);
            let err = error_at_10pct(total, &ev, end);
            assert!(
                err <= 0.25,
                "copy {copy:e} sync {sync:e}: ETA error {err:.2}"
            );
        }
    }

    #[test]
    fn a_single_object_s_sync_and_read_back_are_in_the_eta() {
        // One output file written in segments, each made durable and read back while the
        // next is written (the fields path): the ETA at 10% is that of the whole.
        let (segments, seg) = (64u64, 64u64 << 20);
        let (copy, sync, verify) = (1.0 / 2.0e9, 1.0 / 4.0e9, 1.0 / 8.0e9);
        let mut ev: Vec<Event> = Vec::new();
        let mut t = 0.0;
        for _ in 0..segments {
            t += copy * seg as f64;
            ev.push((t, Some(Phase::Copied), seg, 0));
            t += sync * seg as f64;
            ev.push((t, Some(Phase::Durable), seg, 0));
            t += verify * seg as f64;
            ev.push((t, Some(Phase::Verified), seg, seg));
        }
        let err = error_at_10pct(segments * seg, &ev, t);
        assert!(err <= 0.05, "ETA error {err:.3}");
    }

    #[test]
    fn kept_objects_and_the_prior_rate() {
        let mut eta = Eta::new(1000, Some(100.0));
        // Nothing measured yet: the pair's recorded rate.
        assert_eq!(eta.estimate(0.0), Some((100.0, 10.0)));
        eta.skip(500);
        assert_eq!(eta.estimate(0.0), Some((100.0, 5.0)));
        eta.advance_all(250, 1.0);
        // Every phase advanced at once at t = 1: the steady window is not yet 0.1 s long, so
        // the rate so far (750 units in 1 s) is used, averaged with the recorded 300 units/s,
        // which weighs as much as 1 s of it: 525 units/s (175 bytes/s), 750 units left.
        let (rate, left) = eta.estimate(1.0).unwrap();
        assert!((rate - 175.0).abs() < 1e-9 && (left - 750.0 / 525.0).abs() < 1e-9);
        // Without a recorded rate the measured one alone.
        let mut alone = Eta::new(500, None);
        alone.advance_all(250, 1.0);
        assert_eq!(alone.estimate(1.0), Some((250.0, 1.0)));
        // A stall in the first second (40 bytes/s for 0.5 s, then the pair's recorded
        // 400 bytes/s again), 11% done at t = 1: the task's own rate says 10.2 s are left,
        // 2.3x the real 4.45 s; averaged with the record, 5.9 s (33% over).
        let feed = |eta: &mut Eta| {
            eta.advance_all(80, 0.2);
            eta.advance_all(20, 0.7);
            eta.advance_all(120, 1.0);
            eta.estimate(1.0).unwrap().1
        };
        let real = 1780.0 / 400.0;
        let own = feed(&mut Eta::new(2000, None));
        let with_record = feed(&mut Eta::new(2000, Some(400.0)));
        let err = |left: f64| (left - real).abs() / real;
        assert!(
            err(own) > 1.0 && err(with_record) < 0.35,
            "{own} {with_record} {real}"
        );
        assert_eq!(Eta::new(10, None).estimate(5.0), None);
    }
}
