//! Byte sizes as people write them: `16GiB`, `300MiB`, `512k`, `4096`.

use thiserror::Error;

/// Why a size string was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SizeError {
    /// The size is empty.
    #[error("empty size; write a number with an optional unit, like 16GiB")]
    Empty,
    /// The size is not a number followed by a known unit.
    #[error("`{0}` is not a size; write a number with an optional unit B, KiB, MiB, GiB, TiB (or k, m, g, t)")]
    Malformed(String),
    /// The size does not fit in 64 bits.
    #[error("`{0}` is too large")]
    Overflow(String),
}

/// Parses a byte size. Units are binary: `k`/`KiB` = 1024 and so on; no unit means bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(SizeError::Malformed(text.to_string()));
    }
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(SizeError::Malformed(text.to_string())),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| SizeError::Overflow(text.to_string()))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| SizeError::Overflow(text.to_string()))
}

/// Formats bytes for people: the largest binary unit that keeps one decimal.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16GiB"), Ok(16 << 30));
        assert_eq!(parse_size("300MiB"), Ok(300 << 20));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert_eq!(parse_size(" 1 g "), Ok(1 << 30));
        assert_eq!(parse_size("7B"), Ok(7));
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert!(matches!(parse_size("GiB"), Err(SizeError::Malformed(_))));
        assert!(matches!(
            parse_size("12 parsecs"),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(parse_size("-1"), Err(SizeError::Malformed(_))));
        assert!(matches!(
            parse_size("99999999999TiB"),
            Err(SizeError::Overflow(_))
        ));
    }

    #[test]
    fn formats() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(80 << 30), "80.0 GiB");
    }
}
