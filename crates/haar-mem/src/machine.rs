//! What the machine is: caches, memory, CPUs, file systems, persistent-memory and CXL devices.
//!
//! Every reader takes a `root` directory that stands for `/`, so tests point it at a fake
//! `/sys` and `/proc` tree; the parsers are pure functions of the files' text. This module only
//! reads; it never changes the machine (the one system call with an effect is none: `statvfs`,
//! `statfs` and `sched_getaffinity` only ask).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

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

fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel.trim_start_matches('/'))).ok()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
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

/// Parses `/proc/meminfo` into keyword → bytes.
pub fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, rest) = l.split_once(':')?;
            let mut it = rest.split_whitespace();
            let n: u64 = it.next()?.parse().ok()?;
            let mult = match it.next() {
                Some("kB") => 1024,
                _ => 1,
            };
            Some((k.trim().to_string(), n * mult))
        })
        .collect()
}

/// `MemTotal` and `MemAvailable` in bytes.
pub fn memory(root: &Path) -> (Option<u64>, Option<u64>) {
    let m = read(root, "proc/meminfo")
        .map(|t| parse_meminfo(&t))
        .unwrap_or_default();
    (m.get("MemTotal").copied(), m.get("MemAvailable").copied())
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

/// Space and kind of the file system holding `dir`.
#[derive(Debug, Clone, Serialize)]
pub struct FsInfo {
    /// Bytes an unprivileged writer may still allocate (`f_bavail * f_frsize`).
    pub available: u64,
    /// Whether it is tmpfs (its pages are memory, so `MemAvailable` bounds it too).
    pub tmpfs: bool,
    /// The file-system type name from the mount table, when found.
    pub fs_type: Option<String>,
    /// Whether the mount has a `dax` option.
    pub dax: bool,
    /// The mount point holding `dir`.
    pub mount_point: Option<PathBuf>,
}

/// `statvfs`/`statfs` of `dir`, plus its mount-table entry.
///
/// # Errors
/// The system call's error (for example, `dir` does not exist).
pub fn fs_info(dir: &Path) -> std::io::Result<FsInfo> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("path contains a NUL byte"))?;
    // SAFETY: zeroed statvfs/statfs are valid out-parameters; `c` is NUL-terminated.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut vfs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = read(Path::new("/"), "proc/mounts")
        .map(|t| parse_mounts(&t))
        .unwrap_or_default();
    let mount = mounts
        .iter()
        .filter(|m| canon.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len());
    Ok(FsInfo {
        available: vfs.f_bavail as u64 * vfs.f_frsize as u64,
        tmpfs: fs.f_type as i64 == TMPFS_MAGIC,
        fs_type: mount.map(|m| m.fs_type.clone()),
        dax: mount.is_some_and(|m| m.dax),
        mount_point: mount.map(|m| m.mount_point.clone()),
    })
}

/// One line of `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// Device (e.g. `/dev/pmem0`).
    pub device: String,
    /// Mount point.
    pub mount_point: PathBuf,
    /// File-system type.
    pub fs_type: String,
    /// Whether the options include `dax` (or `dax=always`); `dax=never` does not count.
    pub dax: bool,
}

/// Parses `/proc/mounts` (octal escapes such as `\040` in paths are decoded).
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    fn unescape(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'\\'
                && i + 3 < b.len()
                && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
            {
                out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
                i += 4;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 4 {
                return None;
            }
            let dax = f[3]
                .split(',')
                .any(|o| o == "dax" || o == "dax=always" || o == "dax=inode");
            Some(Mount {
                device: unescape(f[0]),
                mount_point: PathBuf::from(unescape(f[1])),
                fs_type: f[2].to_string(),
                dax,
            })
        })
        .collect()
}

/// A device found under `/sys/bus/nd`, `/sys/bus/cxl` or `/dev`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    /// Where it was found (`/sys/bus/nd/devices/namespace0.0`, `/dev/pmem0`…).
    pub path: String,
    /// What the kernel says about it (`mode=fsdax size=…`), when anything.
    pub detail: String,
}

/// What `haar advise --probe` found.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// CPU model.
    pub cpu: Option<String>,
    /// CPUs this process may use.
    pub cpus: usize,
    /// Running under a hypervisor.
    pub virtual_machine: bool,
    /// Data caches by level.
    pub caches: Vec<Cache>,
    /// `MemTotal`.
    pub mem_total: Option<u64>,
    /// `MemAvailable`.
    pub mem_available: Option<u64>,
    /// NUMA nodes: (node, MemTotal of the node, has CPUs).
    pub numa_nodes: Vec<(u32, u64, bool)>,
    /// NUMA nodes with memory and no CPUs: persistent memory onlined as system RAM (KMEM
    /// DAX) or CXL memory, with the `numactl` commands that place a program there.
    pub memory_only_nodes: Vec<MemoryOnlyNode>,
    /// `numactl -H`'s `available:` line when numactl is installed (probing `/` only).
    pub numactl: Option<String>,
    /// Installed memory devices from SMBIOS (type 17), where readable: (size bytes, kind).
    pub dimms: Vec<(u64, String)>,
    /// Regions, namespaces and DAX devices under `/sys/bus/nd/devices`.
    pub nvdimm: Vec<Device>,
    /// Devices under `/sys/bus/cxl/devices`.
    pub cxl: Vec<Device>,
    /// `/dev/pmem*` and `/dev/dax*`.
    pub dev_nodes: Vec<Device>,
    /// Mounts with the `dax` option.
    pub dax_mounts: Vec<Mount>,
    /// `/proc/iomem` lines naming persistent memory (names only; addresses need root).
    pub iomem_pmem: Vec<String>,
    /// Memory mode (2LM) verdict and its evidence.
    pub memory_mode: MemoryMode,
    /// What the findings imply, one sentence each.
    pub implications: Vec<String>,
}

/// A NUMA node with memory and no CPUs: the modern way to use persistent memory (or CXL
/// memory) as memory without Memory mode: `daxctl reconfigure-device --mode=system-ram`
/// onlines a device-dax namespace as such a node (KMEM DAX, Linux 5.1+), and `numactl`
/// places programs on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryOnlyNode {
    /// The node number.
    pub node: u32,
    /// Its MemTotal in bytes (0 when unreadable).
    pub bytes: u64,
    /// Every page of COMMAND on this node: `numactl --membind=N COMMAND`.
    pub membind: String,
    /// This node first, DRAM when it is full: `numactl --preferred=N COMMAND`.
    pub preferred: String,
}

/// Parses a kernel node or CPU list (`0-3,8,10-11`); malformed parts are skipped.
pub fn parse_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
                    out.extend(a..=b.min(a.saturating_add(4096)));
                }
            }
            None => out.extend(part.trim().parse::<u32>().ok()),
        }
    }
    out
}

/// The memory-only nodes: in `has_memory` and not in `has_cpu` (sysfs's node masks), or,
/// where those are not readable, the nodes with memory and an empty `cpulist`.
fn memory_only_nodes(root: &Path, nodes: &[(u32, u64, bool)]) -> Vec<MemoryOnlyNode> {
    let ids: Vec<u32> = match (
        read(root, "sys/devices/system/node/has_memory"),
        read(root, "sys/devices/system/node/has_cpu"),
    ) {
        (Some(mem), Some(cpu)) => {
            let cpu = parse_list(&cpu);
            parse_list(&mem)
                .into_iter()
                .filter(|n| !cpu.contains(n))
                .collect()
        }
        _ => nodes
            .iter()
            .filter(|n| !n.2 && n.1 > 0)
            .map(|n| n.0)
            .collect(),
    };
    ids.into_iter()
        .map(|node| MemoryOnlyNode {
            node,
            bytes: nodes.iter().find(|n| n.0 == node).map_or(0, |n| n.1),
            membind: format!("numactl --membind={node} COMMAND"),
            preferred: format!("numactl --preferred={node} COMMAND"),
        })
        .collect()
}

/// `numactl -H`'s `available: N nodes (…)` line, when numactl is installed.
fn numactl_available() -> Option<String> {
    let out = std::process::Command::new("numactl")
        .arg("-H")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.starts_with("available:"))
        .map(|l| l.trim().to_string())
}

/// Whether the machine runs persistent memory in Memory mode (DRAM as a cache in front of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "verdict", content = "evidence")]
pub enum MemoryMode {
    /// Persistent-memory DIMMs are installed and MemTotal matches their capacity, not DRAM's.
    Likely(String),
    /// MemTotal matches the DRAM installed (1LM / AppDirect, or no persistent memory).
    No(String),
    /// Not enough information (DIMMs not visible, e.g. in a virtual machine).
    Unknown(String),
}

/// Parses one SMBIOS type 17 (Memory Device) structure: its size in bytes and memory
/// technology. `None` for an empty slot or a structure too short to say.
pub fn parse_smbios_type17(raw: &[u8]) -> Option<(u64, String)> {
    if raw.len() < 0x15 || raw[0] != 17 {
        return None;
    }
    let size = u16::from_le_bytes([raw[0x0C], raw[0x0D]]);
    let bytes = match size {
        0 | 0xFFFF => return None,
        0x7FFF if raw.len() >= 0x20 => {
            (u32::from_le_bytes([raw[0x1C], raw[0x1D], raw[0x1E], raw[0x1F]]) as u64 & 0x7FFF_FFFF)
                * (1 << 20)
        }
        s if s & 0x8000 != 0 => (s & 0x7FFF) as u64 * 1024,
        s => s as u64 * (1 << 20),
    };
    // Memory Technology (SMBIOS 3.2, offset 0x28).
    let kind = match raw.get(0x28) {
        Some(3) => "DRAM",
        Some(4) => "NVDIMM-N",
        Some(5) => "NVDIMM-F",
        Some(6) => "NVDIMM-P",
        Some(7) => "Intel Optane persistent memory",
        _ => "unknown",
    };
    Some((bytes, kind.to_string()))
}

fn is_pmem_kind(kind: &str) -> bool {
    kind.starts_with("NVDIMM") || kind.contains("Optane")
}

/// Decides Memory mode from MemTotal and the installed DIMMs.
pub fn memory_mode_verdict(mem_total: Option<u64>, dimms: &[(u64, String)]) -> MemoryMode {
    let Some(total) = mem_total else {
        return MemoryMode::Unknown("MemTotal not readable".into());
    };
    if dimms.is_empty() {
        return MemoryMode::Unknown(format!(
            "installed DIMMs are not visible (SMBIOS type 17 unreadable or empty, as in most \
             virtual machines); MemTotal is {}",
            human(total)
        ));
    }
    let dram: u64 = dimms
        .iter()
        .filter(|d| !is_pmem_kind(&d.1))
        .map(|d| d.0)
        .sum();
    let pmem: u64 = dimms
        .iter()
        .filter(|d| is_pmem_kind(&d.1))
        .map(|d| d.0)
        .sum();
    if pmem == 0 {
        return MemoryMode::No(format!(
            "no persistent-memory DIMMs installed; MemTotal {} vs {} of DRAM DIMMs",
            human(total),
            human(dram)
        ));
    }
    // The kernel reserves some memory, so MemTotal is a little below what is installed. In
    // Memory mode MemTotal approaches the Memory-mode share of the PMem and exceeds DRAM.
    if total > dram + dram / 8 {
        MemoryMode::Likely(format!(
            "MemTotal {} exceeds the {} of DRAM DIMMs: the {} of persistent memory serves (at \
             least partly) as main memory, with DRAM as its cache",
            human(total),
            human(dram),
            human(pmem)
        ))
    } else {
        MemoryMode::No(format!(
            "MemTotal {} matches the {} of DRAM DIMMs: the {} of persistent memory is in \
             AppDirect mode (or unconfigured)",
            human(total),
            human(dram),
            human(pmem)
        ))
    }
}

/// Bytes as a short human figure (binary units).
pub fn human(b: u64) -> String {
    const U: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

fn sys_devices(root: &Path, bus: &str) -> Vec<Device> {
    let dir = root.join(format!("sys/bus/{bus}/devices"));
    entries(&dir)
        .into_iter()
        .map(|name| {
            let d = dir.join(&name);
            let mut detail = Vec::new();
            for attr in ["mode", "nstype", "size", "devtype", "align"] {
                if let Ok(v) = std::fs::read_to_string(d.join(attr)) {
                    let v = v.trim();
                    if v.is_empty() {
                        continue;
                    }
                    let v = match (attr, v.parse::<u64>()) {
                        ("size", Ok(n)) => human(n),
                        _ => v.to_string(),
                    };
                    detail.push(format!("{attr}={v}"));
                }
            }
            Device {
                path: format!("/sys/bus/{bus}/devices/{name}"),
                detail: detail.join(" "),
            }
        })
        .collect()
}

/// Inspects the machine under `root` (`/` for the real one).
pub fn probe(root: &Path) -> Probe {
    let (mem_total, mem_available) = memory(root);
    let mut numa_nodes = Vec::new();
    let node_dir = root.join("sys/devices/system/node");
    for n in entries(&node_dir) {
        let Some(id) = n.strip_prefix("node").and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let total = std::fs::read_to_string(node_dir.join(&n).join("meminfo"))
            .ok()
            .and_then(|t| {
                t.lines().find(|l| l.contains("MemTotal:")).and_then(|l| {
                    let kb = l.split_whitespace().rev().nth(1)?.parse::<u64>().ok()?;
                    Some(kb * 1024)
                })
            })
            .unwrap_or(0);
        let has_cpus = std::fs::read_to_string(node_dir.join(&n).join("cpulist"))
            .is_ok_and(|s| !s.trim().is_empty());
        numa_nodes.push((id, total, has_cpus));
    }
    let mut dimms = Vec::new();
    let dmi = root.join("sys/firmware/dmi/entries");
    for e in entries(&dmi) {
        if e.starts_with("17-")
            && let Ok(raw) = std::fs::read(dmi.join(&e).join("raw"))
            && let Some(d) = parse_smbios_type17(&raw)
        {
            dimms.push(d);
        }
    }
    let mut dev_nodes = Vec::new();
    for name in entries(&root.join("dev")) {
        if name.starts_with("pmem") || name.starts_with("dax") {
            dev_nodes.push(Device {
                path: format!("/dev/{name}"),
                detail: String::new(),
            });
        }
    }
    let dax_mounts: Vec<Mount> = read(root, "proc/mounts")
        .map(|t| parse_mounts(&t))
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.dax)
        .collect();
    let iomem_pmem: Vec<String> = read(root, "proc/iomem")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Persistent Memory") || l.contains("CXL"))
        .map(|l| l.trim().to_string())
        .collect();
    let memory_mode = memory_mode_verdict(mem_total, &dimms);
    let memory_only_nodes = memory_only_nodes(root, &numa_nodes);
    let numactl = if root == Path::new("/") {
        numactl_available()
    } else {
        None
    };
    let mut p = Probe {
        cpu: cpu_model(root),
        cpus: entries(&root.join("sys/devices/system/cpu"))
            .iter()
            .filter(|c| {
                c.len() > 3 && c.starts_with("cpu") && c[3..].bytes().all(|b| b.is_ascii_digit())
            })
            .count(),
        virtual_machine: is_virtual(root),
        caches: caches(root),
        mem_total,
        mem_available,
        numa_nodes,
        memory_only_nodes,
        numactl,
        dimms,
        nvdimm: sys_devices(root, "nd"),
        cxl: sys_devices(root, "cxl"),
        dev_nodes,
        dax_mounts,
        iomem_pmem,
        memory_mode,
        implications: Vec::new(),
    };
    p.implications = implications(&p);
    p
}

/// What the findings mean for running haar and its benchmarks here.
pub fn implications(p: &Probe) -> Vec<String> {
    let mut out = Vec::new();
    let pmem_found = !p.nvdimm.is_empty() || !p.dev_nodes.is_empty() || !p.dax_mounts.is_empty();
    if let Some(m) = p.dax_mounts.first() {
        out.push(format!(
            "a DAX file system is mounted at {}: haar's pmem backend there persists with \
             CLWB + SFENCE and no system call (roots: [{}/haar]); `haar stream --path {}` \
             measures App Direct bandwidth",
            m.mount_point.display(),
            m.mount_point.display(),
            m.mount_point.display()
        ));
    } else if pmem_found {
        out.push(
            "persistent-memory devices exist but no DAX file system is mounted: create an \
             fsdax namespace (ndctl create-namespace --mode=fsdax), make a file system and \
             mount it with -o dax to use it from haar"
                .into(),
        );
    } else {
        out.push(
            "no persistent memory found (no /sys/bus/nd devices, no /dev/pmem* or /dev/dax*, no \
             DAX mount): haar's pmem backend can only be emulated, e.g. on /dev/shm, where a \
             pool survives a process crash but not a power cut (msync on tmpfs is a no-op)"
                .into(),
        );
    }
    if !p.cxl.is_empty() {
        out.push(format!(
            "{} CXL device(s) found: CXL memory appears as a CPU-less NUMA node or a DAX \
             device; measure it with `numactl --membind` and `haar stream`",
            p.cxl.len()
        ));
    } else {
        out.push("no CXL devices found under /sys/bus/cxl/devices".into());
    }
    for n in &p.memory_only_nodes {
        out.push(format!(
            "NUMA node {} has {} of memory and no CPUs: persistent memory as system RAM (KMEM \
             DAX) or CXL memory. Place a whole program there with `{}`, or fill it first and \
             spill to DRAM with `{}`{}",
            n.node,
            human(n.bytes),
            n.membind,
            n.preferred,
            if p.numactl.is_some() {
                ""
            } else {
                " (numactl is not installed: apt-get install numactl)"
            }
        ));
    }
    if p.memory_only_nodes.is_empty() {
        out.push(if p.dax_mounts.is_empty() {
            "no NUMA node with memory and no CPUs (KMEM DAX or CXL): persistent memory in a \
             device-dax namespace becomes one with `daxctl reconfigure-device \
             --mode=system-ram dax0.0`, then `numactl --membind=N` places programs on it"
                .to_string()
        } else {
            format!(
                "no NUMA node with memory and no CPUs (KMEM DAX or CXL); to put an unmodified \
                 program's heap on the DAX mount without Memory mode: `haar run --heap {}:SIZE \
                 -- COMMAND`",
                p.dax_mounts[0].mount_point.display()
            )
        });
    }
    match &p.memory_mode {
        MemoryMode::Likely(_) => out.push(
            "Memory mode: all memory is persistent memory behind a DRAM cache; STREAM with \
             arrays larger than DRAM shows the cache cliff (`haar stream --sweep`)"
                .into(),
        ),
        MemoryMode::No(_) => {}
        MemoryMode::Unknown(_) => {
            if !pmem_found {
                out.push(
                    "Memory mode cannot be confirmed from MemTotal alone, but with no \
                     persistent-memory device at all the memory is DRAM"
                        .into(),
                );
            }
        }
    }
    if let Some(llc) = p.caches.iter().max_by_key(|c| c.level) {
        out.push(format!(
            "STREAM needs arrays of at least 4 x {} (all L{} caches) = {} each here",
            human(llc.total()),
            llc.level,
            human(4 * llc.total())
        ));
    }
    if p.virtual_machine {
        out.push(
            "running under a hypervisor: installed DIMMs and persistent-memory regions of the \
             host may be hidden; ask the host's administrator"
                .into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

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
    fn mounts_with_dax_are_recognised_and_escapes_decoded() {
        let m = parse_mounts(
            "/dev/pmem0 /mnt/pmem_fsdax0 ext4 rw,relatime,dax 0 0\n\
             /dev/pmem1 /mnt/pmem\\040x xfs rw,dax=always 0 0\n\
             /dev/vda / ext4 rw,relatime 0 0\n\
             /dev/pmem2 /mnt/n xfs rw,dax=never 0 0\n",
        );
        assert_eq!(m.len(), 4);
        assert!(m[0].dax && m[1].dax && !m[2].dax && !m[3].dax);
        assert_eq!(m[1].mount_point, PathBuf::from("/mnt/pmem x"));
    }

    #[test]
    fn smbios_type17_sizes_and_kinds() {
        let mut raw = vec![0u8; 0x29];
        raw[0] = 17;
        raw[0x0C..0x0E].copy_from_slice(&16384u16.to_le_bytes());
        raw[0x28] = 3;
        assert_eq!(parse_smbios_type17(&raw), Some((16 << 30, "DRAM".into())));
        raw[0x0C..0x0E].copy_from_slice(&0x7FFFu16.to_le_bytes());
        raw.resize(0x29, 0);
        raw[0x1C..0x20].copy_from_slice(&(256u32 * 1024).to_le_bytes());
        raw[0x28] = 7;
        let (size, kind) = parse_smbios_type17(&raw).unwrap();
        assert_eq!(size, 256 << 30);
        assert!(kind.contains("Optane"));
        raw[0x0C..0x0E].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(parse_smbios_type17(&raw), None);
    }

    #[test]
    fn memory_mode_from_memtotal_and_dimms() {
        // The NEXTGenIO node: 12 x 16 GB DRAM, 12 x 256 GB DCPMM.
        let mut dimms = vec![(16u64 << 30, "DRAM".to_string()); 12];
        dimms.extend(vec![
            (
                256u64 << 30,
                "Intel Optane persistent memory".to_string()
            );
            12
        ]);
        let two_lm = memory_mode_verdict(Some(3000 << 30), &dimms);
        assert!(matches!(two_lm, MemoryMode::Likely(_)), "{two_lm:?}");
        let one_lm = memory_mode_verdict(Some(187 << 30), &dimms);
        assert!(matches!(one_lm, MemoryMode::No(_)), "{one_lm:?}");
        assert!(matches!(
            memory_mode_verdict(Some(1 << 30), &[]),
            MemoryMode::Unknown(_)
        ));
    }

    #[test]
    fn probe_of_a_fake_pmem_machine_finds_everything() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(
            r,
            "proc/meminfo",
            "MemTotal: 196000000 kB\nMemAvailable: 190000000 kB\n",
        );
        write(
            r,
            "proc/mounts",
            "/dev/pmem0 /mnt/pmem_fsdax0 ext4 rw,dax 0 0\n",
        );
        write(
            r,
            "proc/cpuinfo",
            "model name\t: Xeon 8260M\nflags\t: fpu clwb\n",
        );
        write(r, "sys/devices/system/cpu/cpu0/cache/index3/level", "3\n");
        write(
            r,
            "sys/devices/system/cpu/cpu0/cache/index3/type",
            "Unified\n",
        );
        write(
            r,
            "sys/devices/system/cpu/cpu0/cache/index3/size",
            "36608K\n",
        );
        write(
            r,
            "sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list",
            "0-23\n",
        );
        write(r, "sys/devices/system/cpu/cpu24/cache/index3/level", "3\n");
        write(
            r,
            "sys/devices/system/cpu/cpu24/cache/index3/type",
            "Unified\n",
        );
        write(
            r,
            "sys/devices/system/cpu/cpu24/cache/index3/size",
            "36608K\n",
        );
        write(
            r,
            "sys/devices/system/cpu/cpu24/cache/index3/shared_cpu_list",
            "24-47\n",
        );
        write(r, "sys/bus/nd/devices/namespace0.0/mode", "fsdax\n");
        write(r, "sys/bus/nd/devices/namespace0.0/size", "1623497637888\n");
        write(r, "sys/bus/nd/devices/region0/nstype", "4\n");
        write(r, "sys/bus/cxl/devices/mem0/size", "0\n");
        write(r, "dev/pmem0", "");
        write(
            r,
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal: 1000 kB\n",
        );
        write(r, "sys/devices/system/node/node0/cpulist", "0-23\n");
        write(
            r,
            "sys/devices/system/node/node2/meminfo",
            "Node 2 MemTotal: 5000 kB\n",
        );
        write(r, "sys/devices/system/node/node2/cpulist", "\n");
        let p = probe(r);
        assert_eq!(p.cpu.as_deref(), Some("Xeon 8260M"));
        assert!(!p.virtual_machine);
        assert_eq!(
            p.caches,
            vec![Cache {
                level: 3,
                size: 36608 << 10,
                instances: 2
            }]
        );
        assert_eq!(p.nvdimm.len(), 2);
        assert!(
            p.nvdimm.iter().any(|d| d.detail.contains("mode=fsdax")),
            "{:?}",
            p.nvdimm
        );
        assert_eq!(p.cxl.len(), 1);
        assert_eq!(p.dev_nodes[0].path, "/dev/pmem0");
        assert_eq!(
            p.dax_mounts[0].mount_point,
            PathBuf::from("/mnt/pmem_fsdax0")
        );
        assert_eq!(
            p.numa_nodes,
            vec![(0, 1000 * 1024, true), (2, 5000 * 1024, false)]
        );
        let all = p.implications.join("\n");
        assert!(
            all.contains("DAX file system is mounted at /mnt/pmem_fsdax0"),
            "{all}"
        );
        assert!(all.contains("CPU-less") || all.contains("no CPUs"), "{all}");
        assert_eq!(
            p.memory_only_nodes,
            vec![MemoryOnlyNode {
                node: 2,
                bytes: 5000 * 1024,
                membind: "numactl --membind=2 COMMAND".into(),
                preferred: "numactl --preferred=2 COMMAND".into(),
            }]
        );
        assert!(all.contains("numactl --membind=2 COMMAND"), "{all}");
        assert!(all.contains("numactl --preferred=2 COMMAND"), "{all}");
        // sysfs's masks win over cpulist when present: node 2 onlined, node 3 offline.
        write(r, "sys/devices/system/node/has_memory", "0,2\n");
        write(r, "sys/devices/system/node/has_cpu", "0\n");
        write(r, "sys/devices/system/node/node3/cpulist", "\n");
        write(
            r,
            "sys/devices/system/node/node3/meminfo",
            "Node 3 MemTotal: 7 kB\n",
        );
        let nodes: Vec<u32> = probe(r).memory_only_nodes.iter().map(|n| n.node).collect();
        assert_eq!(nodes, [2]);
        assert!(all.contains("1 CXL device"), "{all}");
    }

    #[test]
    fn probe_of_an_empty_root_says_none_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = probe(dir.path());
        assert!(p.nvdimm.is_empty() && p.cxl.is_empty() && p.dax_mounts.is_empty());
        assert!(matches!(p.memory_mode, MemoryMode::Unknown(_)));
        assert!(p.implications[0].contains("no persistent memory found"));
        assert!(p.memory_only_nodes.is_empty());
        let all = p.implications.join("\n");
        assert!(
            all.contains("daxctl reconfigure-device --mode=system-ram"),
            "{all}"
        );
    }

    #[test]
    fn node_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_list("0"), [0]);
        assert_eq!(parse_list(""), Vec::<u32>::new());
        assert_eq!(parse_list("x,2"), [2]);
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
