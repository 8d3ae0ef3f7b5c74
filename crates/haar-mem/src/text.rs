//! The human-readable forms of the probe and of the advice, as `haar advise` prints them.
//!
//! Formatting only: the probe and the trees are `machine`'s and `advise`'s; this module reads
//! their results and must not decide anything.

use std::fmt;

use crate::advise::Advice;
use crate::machine::{self, MemoryMode, Probe};

impl fmt::Display for Advice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = format!("Recommended configuration: {}\n", self.configuration);
        s.push_str("Path through the trees:\n");
        for step in &self.path {
            s.push_str(&format!(
                "  {:<8} {:<26} {}\n",
                step.figure,
                step.text,
                if step.answer { "yes" } else { "no" }
            ));
        }
        let leaf = match self.storage {
            Some(o) => format!("{} -> {}", self.platform.text(), o.text()),
            None => self.platform.text().to_string(),
        };
        s.push_str(&format!("  => {leaf}\n"));
        s.push_str(&format!("Why: {}.\n", self.reason));
        if !self.unused.is_empty() {
            let flags: Vec<&str> = self.unused.iter().map(|q| q.flag()).collect();
            s.push_str(&format!(
                "Not needed on this path (ignored): {}\n",
                flags.join(", ")
            ));
        }
        if !self.setup.is_empty() {
            s.push_str("Set-up:\n");
            for c in &self.setup {
                s.push_str(&format!("  {c}\n"));
            }
        }
        if let Some(heap) = &self.heap {
            s.push_str(
                "Without rebooting into Memory mode (App Direct; the heap on persistent memory, \
                 static data and stacks in DRAM, as libvmmalloc did; suits programs limited by \
                 DRAM capacity whose data is mostly malloc'ed and not latency bound):\n",
            );
            s.push_str(&format!("  {heap}\n"));
            s.push_str(
                "  or, with persistent memory onlined as a NUMA node (KMEM DAX): numactl \
                 --membind=N ./app (haar advise --probe finds N)\n",
            );
        }
        if let Some(cfg) = &self.haar_config {
            s.push_str("haar configuration (--config FILE or $HAAR_CONFIG):\n");
            for l in cfg.lines() {
                s.push_str(&format!("  {l}\n"));
            }
        }
        f.write_str(&s)
    }
}

impl fmt::Display for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let none = |v: bool| if v { "" } else { " none found" };
        let mut s = String::from("Machine probe\n");
        s.push_str(&format!(
            "  CPU: {} ({} CPUs{})\n",
            self.cpu.as_deref().unwrap_or("unknown"),
            self.cpus,
            if self.virtual_machine {
                ", virtual machine"
            } else {
                ""
            }
        ));
        for c in &self.caches {
            s.push_str(&format!(
                "  L{} cache: {} x {}\n",
                c.level,
                c.instances,
                machine::human(c.size)
            ));
        }
        s.push_str(&format!(
            "  DRAM (MemTotal): {}; available: {}\n",
            self.mem_total.map_or("unknown".into(), machine::human),
            self.mem_available.map_or("unknown".into(), machine::human)
        ));
        s.push_str(&format!("  NUMA nodes: {}\n", self.numa_nodes.len()));
        s.push_str(&format!(
            "  memory-only NUMA nodes (KMEM DAX, CXL):{}\n",
            none(!self.memory_only_nodes.is_empty())
        ));
        for n in &self.memory_only_nodes {
            s.push_str(&format!(
                "    node {}: {}  ->  {}  |  {}\n",
                n.node,
                machine::human(n.bytes),
                n.membind,
                n.preferred
            ));
        }
        s.push_str(&format!(
            "  numactl: {}\n",
            self.numactl.as_deref().unwrap_or("not installed")
        ));
        if self.dimms.is_empty() {
            s.push_str("  installed DIMMs (SMBIOS):  not visible\n");
        } else {
            for (size, kind) in &self.dimms {
                s.push_str(&format!("  DIMM: {} {kind}\n", machine::human(*size)));
            }
        }
        s.push_str(&format!(
            "  NVDIMM devices (/sys/bus/nd/devices):{}\n",
            none(!self.nvdimm.is_empty())
        ));
        for d in &self.nvdimm {
            s.push_str(&format!("    {} {}\n", d.path, d.detail));
        }
        s.push_str(&format!(
            "  CXL devices (/sys/bus/cxl/devices):{}\n",
            none(!self.cxl.is_empty())
        ));
        for d in &self.cxl {
            s.push_str(&format!("    {} {}\n", d.path, d.detail));
        }
        s.push_str(&format!(
            "  /dev/pmem*, /dev/dax*:{}\n",
            none(!self.dev_nodes.is_empty())
        ));
        for d in &self.dev_nodes {
            s.push_str(&format!("    {}\n", d.path));
        }
        s.push_str(&format!(
            "  DAX mounts (/proc/mounts):{}\n",
            none(!self.dax_mounts.is_empty())
        ));
        for m in &self.dax_mounts {
            s.push_str(&format!(
                "    {} on {} ({})\n",
                m.device,
                m.mount_point.display(),
                m.fs_type
            ));
        }
        let (verdict, evidence) = match &self.memory_mode {
            MemoryMode::Likely(e) => ("likely", e),
            MemoryMode::No(e) => ("no", e),
            MemoryMode::Unknown(e) => ("unknown", e),
        };
        s.push_str(&format!("  Memory mode: {verdict} ({evidence})\n"));
        s.push_str("What this implies:\n");
        for i in &self.implications {
            s.push_str(&format!("  - {i}\n"));
        }
        f.write_str(&s)
    }
}
