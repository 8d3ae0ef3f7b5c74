//! `haar advise --probe`: [`probe`] gathers every reader of this module, and the persistent-
//! memory and CXL devices under `/sys/bus` and `/dev`, into one [`Probe`]; [`implications`]
//! says what the findings mean for haar.
//!
//! Only gathers and words; each finding is read by its own module.

use std::path::Path;

use serde::Serialize;

use super::cpu::{Cache, caches, cpu_model, is_virtual};
use super::memory::{MemoryMode, human, memory, memory_mode_verdict, parse_smbios_type17};
use super::mounts::{Mount, parse_mounts};
use super::numa::{MemoryOnlyNode, memory_only_nodes, numactl_available};
use super::sysfs::{entries, read};

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
    use std::path::PathBuf;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
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
}
