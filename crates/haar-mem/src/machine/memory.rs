//! Memory: `MemTotal`/`MemAvailable`, the installed DIMMs (SMBIOS type 17), the Memory mode
//! verdict drawn from the two, and [`human`], the byte figures every report of the crate prints.
//!
//! NUMA placement is [`super::numa`]'s.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::sysfs::read;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
