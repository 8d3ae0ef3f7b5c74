//! The CPUs: their caches (sysfs), model and hypervisor flag (`/proc/cpuinfo`), and this
//! process's affinity, which [`pin_to_cpu`] is the one call here to change.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

use super::sysfs::{entries, read};

/// One level of CPU cache as the kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cache {
    /// 1, 2, 3…
    pub level: u32,
    /// Bytes of one instance.
    pub size: u64,
    /// How many instances exist (distinct `shared_cpu_list` values across CPUs).
    pub instances: usize,
}

impl Cache {
    /// Bytes of all instances together (STREAM's rule counts every LLC used in the run).
    pub fn total(&self) -> u64 {
        self.size * self.instances as u64
    }
}

/// Parses a sysfs cache size such as `36608K`, `1024K`, `32M` or `512` (the grammar is
/// [`crate::units::parse_size`]'s, shared with the command line).
pub fn parse_size(s: &str) -> Option<u64> {
    crate::units::parse_size(s).ok()
}

/// The data caches of the machine, by level, read from `sys/devices/system/cpu/cpu*/cache`.
pub fn caches(root: &Path) -> Vec<Cache> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    // level -> (size, set of shared_cpu_list strings)
    let mut levels: BTreeMap<u32, (u64, BTreeSet<String>)> = BTreeMap::new();
    for cpu in entries(&cpu_dir) {
        if !cpu.starts_with("cpu") || !cpu[3..].chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cache_dir = cpu_dir.join(&cpu).join("cache");
        for idx in entries(&cache_dir) {
            if !idx.starts_with("index") {
                continue;
            }
            let d = cache_dir.join(&idx);
            let get = |f: &str| std::fs::read_to_string(d.join(f)).ok();
            let (Some(level), Some(kind), Some(size)) = (get("level"), get("type"), get("size"))
            else {
                continue;
            };
            if kind.trim() == "Instruction" {
                continue;
            }
            let (Ok(level), Some(size)) = (level.trim().parse::<u32>(), parse_size(&size)) else {
                continue;
            };
            let shared = get("shared_cpu_list").unwrap_or_else(|| cpu.clone());
            let e = levels.entry(level).or_insert((size, BTreeSet::new()));
            e.0 = e.0.max(size);
            e.1.insert(shared.trim().to_string());
        }
    }
    levels
        .into_iter()
        .map(|(level, (size, shared))| Cache {
            level,
            size,
            instances: shared.len().max(1),
        })
        .collect()
}

/// The last-level cache, if the kernel describes any.
pub fn last_level_cache(root: &Path) -> Option<Cache> {
    caches(root).into_iter().max_by_key(|c| c.level)
}

/// The CPU model name from `/proc/cpuinfo`.
pub fn cpu_model(root: &Path) -> Option<String> {
    read(root, "proc/cpuinfo")?
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// Whether `/proc/cpuinfo` shows the `hypervisor` flag (a virtual machine).
pub fn is_virtual(root: &Path) -> bool {
    read(root, "proc/cpuinfo").is_some_and(|t| {
        t.lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
    })
}

/// CPUs this process may run on (its affinity mask), ascending.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // `size_of::<cpu_set_t>()` bytes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return (0..n).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `i` is below CPU_SETSIZE, the capacity of `set`.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// Pins the calling thread to one CPU.
///
/// # Errors
/// The `sched_setaffinity` error (e.g. the CPU is outside the process's cpuset).
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    // SAFETY: as in `allowed_cpus`; CPU_SET bounds-checks `cpu` against the set's size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid, initialised cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
