//! Byte sizes: formatting in binary units and parsing of budget sizes.

const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];

/// `1536` -> `1.50 KiB`; bytes below 1 KiB are printed exactly (`512 B`). Negative values
/// keep their sign.
pub fn fmt_bytes(bytes: i64) -> String {
    let sign = if bytes < 0 { "-" } else { "" };
    let abs = bytes.unsigned_abs();
    if abs < 1024 {
        return format!("{sign}{abs} B");
    }
    let mut value = abs as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{sign}{value:.2} {}", UNITS[unit])
}

/// Like [`fmt_bytes`] with an explicit `+` for positive values (for deltas).
pub fn fmt_delta(bytes: i64) -> String {
    if bytes > 0 {
        format!("+{}", fmt_bytes(bytes))
    } else {
        fmt_bytes(bytes)
    }
}

/// A range of sizes: `7.31-7.56 GiB` (one unit when both share it), `512.00 MiB-1.50 GiB`,
/// or one size when both ends are equal.
pub fn fmt_range(lo: i64, hi: i64) -> String {
    let (a, b) = (fmt_bytes(lo), fmt_bytes(hi));
    if a == b {
        return a;
    }
    match (a.split_once(' '), b.split_once(' ')) {
        (Some((x, ua)), Some((y, ub))) if ua == ub => format!("{x}-{y} {ub}"),
        _ => format!("{a}-{b}"),
    }
}

/// Optional sizes print as `-` when unknown.
pub fn fmt_opt(bytes: Option<i64>) -> String {
    bytes.map(fmt_bytes).unwrap_or_else(|| "-".into())
}

/// A percentage with one decimal, or `-` when the base is zero.
pub fn fmt_pct(part: i64, whole: i64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Parses `64MiB`, `1.5 GiB`, `2GB`, `4096`, `100B`, `-64MiB`. Binary units (KiB, MiB, GiB, TiB) are
/// powers of 1024, decimal ones (KB, MB, GB, TB) powers of 1000; no unit means bytes.
pub fn parse_size(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('-') {
        if rest.trim_start().starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return parse_size(rest).map(|v| -v);
        }
        return Err(format!("`{text}` is not a size (examples: 64MiB, 1.5GiB, 4096, -64MiB)"));
    }
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim();
    let factor: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024f64.powi(2),
        "GiB" => 1024f64.powi(3),
        "TiB" => 1024f64.powi(4),
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            // A unit in the wrong case (`gib`, `mib`) is meant as the one that matches.
            const UNITS: [&str; 9] = ["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"];
            let meant = UNITS.iter().find(|u| u.eq_ignore_ascii_case(other));
            return Err(match meant {
                Some(u) => format!("unknown unit `{other}` in `{text}`: did you mean `{u}`? (units are case-sensitive)"),
                None => format!("unknown unit `{other}` in `{text}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"),
            });
        }
    };
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a size (examples: 64MiB, 1.5GiB, 4096)"))?;
    let bytes = (value * factor).round();
    if !bytes.is_finite() || bytes > i64::MAX as f64 {
        return Err(format!("`{text}` is too large"));
    }
    Ok(bytes as i64)
}

/// `count(3, "process", "processes")` -> `3 processes`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_in_the_wrong_case_suggests_the_right_one() {
        let e = parse_size("2 gib").unwrap_err();
        assert_eq!(e, "unknown unit `gib` in `2 gib`: did you mean `GiB`? (units are case-sensitive)");
        assert!(parse_size("64mib").unwrap_err().contains("did you mean `MiB`?"));
        assert!(parse_size("1gb").unwrap_err().contains("did you mean `GB`?"));
        assert!(parse_size("3 parsecs").unwrap_err().contains("(use B, KiB, MiB, GiB"));
    }

    #[test]
    fn formats_binary_units_with_two_decimals() {
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1536), "1.50 KiB");
        assert_eq!(fmt_bytes(8 << 20), "8.00 MiB");
        assert_eq!(fmt_bytes(3 << 29), "1.50 GiB");
        assert_eq!(fmt_bytes(-(48 << 20)), "-48.00 MiB");
        assert_eq!(fmt_delta(48 << 20), "+48.00 MiB");
        assert_eq!(fmt_bytes(5 << 40), "5.00 TiB");
        assert_eq!(fmt_range(3 << 29, 3 << 29), "1.50 GiB");
        assert_eq!(fmt_range(3 << 29, 2 << 30), "1.50-2.00 GiB");
        assert_eq!(fmt_range(512 << 20, 3 << 29), "512.00 MiB-1.50 GiB");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("7KB"), Ok(7000));
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("1.2.3GiB").is_err());
        assert_eq!(parse_size("-64MiB"), Ok(-(64 << 20)));
        assert_eq!(parse_size("- 1 KiB"), Ok(-1024));
        assert!(parse_size("--1").is_err());
    }

    #[test]
    fn formats_percent() {
        assert_eq!(fmt_pct(1, 4), "25.0%");
        assert_eq!(fmt_pct(1, 0), "-");
    }
}
