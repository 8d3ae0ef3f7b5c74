//! NUMA nodes with memory and no CPUs (persistent memory onlined as system RAM, or CXL memory)
//! and the `numactl` commands that place a program on them.

use std::path::Path;

use serde::Serialize;

use super::sysfs::read;

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
pub(super) fn memory_only_nodes(root: &Path, nodes: &[(u32, u64, bool)]) -> Vec<MemoryOnlyNode> {
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
pub(super) fn numactl_available() -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_list("0"), [0]);
        assert_eq!(parse_list(""), Vec::<u32>::new());
        assert_eq!(parse_list("x,2"), [2]);
    }
}
