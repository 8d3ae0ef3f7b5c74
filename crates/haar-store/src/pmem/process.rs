//! This process's own state over a pool, kept in memory only: its chunk of the heap, its pins
//! on the reclaim epoch, and its identity as a process-table owner (design §5.3, §5.4).
//!
//! A leaf: [`super::pool::Pool`] holds these, and `heap` and `reuse` work them.

/// A range of the heap reserved by this process, sub-allocated privately (design §5.3).
#[derive(Debug, Default)]
pub(super) struct Chunk {
    /// Where it starts (recorded for a killed writer's recovery, design §5.4).
    pub(super) start: u64,
    pub(super) next: u64,
    pub(super) end: u64,
}

/// This process's pins: its process table entry (claimed at the first pin) and how many pins
/// it holds at each epoch.
#[derive(Debug, Default)]
pub(super) struct Pins {
    pub(super) entry: Option<u64>,
    pub(super) counts: Vec<(u64, u32)>,
    pub(super) published: u64,
}

/// This process as a process-table owner: pid << 32 | low 32 bits of its start time.
pub(super) fn my_owner() -> u64 {
    let pid = std::process::id();
    (u64::from(pid) << 32) | start_time(pid).unwrap_or(0)
}

/// Low 32 bits of a process's start time (clock ticks since boot), `None` if it is gone (or
/// a zombie, which maps no memory any more).
pub(super) fn start_time(pid: u32) -> Option<u64> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        // Cannot tell (e.g. no permission): treat as running, which only delays reuse.
        Err(_) => return Some(u64::MAX),
    };
    // Field 22; the command name (field 2) may hold spaces, so count after its ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    let t: u64 = fields.nth(18)?.parse().ok()?;
    Some(t & 0xffff_ffff)
}
