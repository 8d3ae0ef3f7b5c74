//! What the machine is: caches, memory, CPUs, file systems, persistent-memory and CXL devices.
//!
//! Every reader takes a `root` directory that stands for `/`, so tests point it at a fake
//! `/sys` and `/proc` tree; the parsers are pure functions of the files' text. This module only
//! reads; it never changes the machine (the one system call with an effect is none: `statvfs`,
//! `statfs` and `sched_getaffinity` only ask).
//!
//! One file per concern: `cpu`, `memory`, `numa`, `mounts`, and `probe`, which
//! gathers them for `haar advise --probe`; `sysfs` is the one place that reads under `root`.
//! Every name is re-exported here, so callers write `machine::human` whichever file holds it.

mod cpu;
mod memory;
mod mounts;
mod numa;
mod probe;
mod sysfs;

pub use cpu::{
    Cache, allowed_cpus, caches, cpu_model, is_virtual, last_level_cache, parse_size, pin_to_cpu,
};
pub use memory::{
    MemoryMode, human, memory, memory_mode_verdict, parse_meminfo, parse_smbios_type17,
};
pub use mounts::{FsInfo, Mount, fs_info, parse_mounts};
pub use numa::{MemoryOnlyNode, parse_list};
pub use probe::{Device, Probe, implications, probe};

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn sizes_and_meminfo_parse() {
        assert_eq!(parse_size("36608K"), Some(36608 << 10));
        assert_eq!(parse_size("2M\n"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("x"), None);
        let m = parse_meminfo(
            "MemTotal:       24684096 kB\nMemAvailable:   100 kB\nHugePages_Total: 0\n",
        );
        assert_eq!(m["MemTotal"], 24684096 * 1024);
        assert_eq!(m["HugePages_Total"], 0);
    }

    #[test]
    fn real_machine_has_caches_and_memory() {
        let root = Path::new("/");
        let (total, avail) = memory(root);
        assert!(total.unwrap() > 0 && avail.unwrap() > 0);
        assert!(!allowed_cpus().is_empty());
        let tmp = std::env::temp_dir();
        let fs = fs_info(&tmp).unwrap();
        assert!(fs.available > 0);
        assert!(fs_info(Path::new("/definitely/not/here")).is_err());
    }
}
