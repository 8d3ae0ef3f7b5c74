//! Byte sizes as people and the kernel write them: `65536`, `64KiB`, `800K`, `3.2MiB`, `1G`
//! (binary units, case-insensitive), and sysfs's `36608K`. One parser for every command-line
//! size and every size read from `/sys`.
//!
//! Pure: owns the grammar and its error messages, nothing else.

/// Parses a byte size: a number (decimals allowed) and an optional binary unit `B`, `K`/`KB`/
/// `KiB`, `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB`; surrounding blanks and a trailing newline are
/// ignored. The error says what was wrong and gives examples.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (e.g. 65536, 64KiB, 3.2MiB)"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (use B, KiB, MiB, GiB, TiB)"
            ));
        }
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(v.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_and_sysfs_sizes() {
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("800k").unwrap(), 819_200);
        assert_eq!(parse_size("3.2MiB").unwrap(), 3_355_443);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("3T").unwrap(), 3 << 40);
        assert_eq!(parse_size("36608K").unwrap(), 36608 << 10);
        assert_eq!(parse_size("2M\n").unwrap(), 2 << 20);
        assert!(
            parse_size("12 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_size("x").unwrap_err().contains("is not a size"));
    }
}
