//! Sizes as people write them: `4GiB`, `512m`, `1073741824`. Units are binary.

/// A size that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}; write bytes (1073741824) or a number with a unit: B, KiB, MiB, GiB, TiB or k, m, g, t (binary), e.g. 4GiB")]
pub struct SizeError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Bytes per unit; matched case-insensitively, longest spelling first in each family.
const UNITS: &[(&str, u64)] = &[
    ("tib", 1 << 40),
    ("gib", 1 << 30),
    ("mib", 1 << 20),
    ("kib", 1 << 10),
    ("t", 1 << 40),
    ("g", 1 << 30),
    ("m", 1 << 20),
    ("k", 1 << 10),
    ("b", 1),
    ("", 1),
];

/// Reads a size in bytes: a whole or decimal number, then optionally (after optional
/// spaces) one of B, KiB, MiB, GiB, TiB or k, m, g, t, in any case. The result must be a
/// whole number of bytes that fits in a `u64`.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let fail = |reason| SizeError {
        input: input.to_string(),
        reason,
    };
    let text = input.trim();
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let unit = unit.trim_start().to_ascii_lowercase();
    if number.is_empty() {
        return Err(fail("it does not start with a number"));
    }
    let multiplier = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|&(_, m)| m)
        .ok_or_else(|| fail("unknown unit"))?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if number.ends_with('.') || fraction.contains('.') {
        return Err(fail("the number is malformed"));
    }
    if fraction.len() > 12 {
        return Err(fail("too many decimals"));
    }
    let too_big = || fail("it does not fit in 64 bits");
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_big())?
    };
    let mut bytes = whole.checked_mul(multiplier).ok_or_else(too_big)?;
    if !fraction.is_empty() {
        // Exact: fraction × multiplier / 10^digits, computed in u128 (< 10^12 × 2^40).
        let scale = 10u128.pow(fraction.len() as u32);
        let part = fraction.parse::<u128>().map_err(|_| too_big())? * u128::from(multiplier);
        if part % scale != 0 {
            return Err(fail("it is not a whole number of bytes"));
        }
        let part = u64::try_from(part / scale).map_err(|_| too_big())?;
        bytes = bytes.checked_add(part).ok_or_else(too_big)?;
    }
    Ok(bytes)
}

/// Writes a size for people: the largest binary unit that divides it exactly, e.g. `4GiB`,
/// `1536MiB`, `100B`. [`parse_size`] reads it back to the same number.
pub fn format_size(bytes: u64) -> String {
    const NAMES: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in NAMES {
        if bytes != 0 && bytes.is_multiple_of(unit) {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_binary_and_case_blind() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("1073741824", 1 << 30),
            ("100B", 100),
            ("100 b", 100),
            ("1KiB", 1024),
            ("1k", 1024),
            ("1K", 1024),
            ("512MiB", 512 << 20),
            ("512m", 512 << 20),
            ("4GiB", 4 << 30),
            ("4gib", 4 << 30),
            ("4g", 4 << 30),
            ("4 G", 4 << 30),
            ("2TiB", 2 << 40),
            ("2t", 2 << 40),
            (" 1.5GiB ", 3 << 29),
            ("0.5k", 512),
            (".5k", 512),
            ("16777215TiB", 16777215 << 40),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_sizes_say_what_is_accepted() {
        for text in [
            "",
            "GiB",
            "-1",
            "1GB",
            "1 gigs",
            "1.5",
            "1.2.3k",
            "1e9",
            "0x10",
            "1.",
            ".",
            "16777216TiB",
            "99999999999999999999",
            "1.0000000000001k",
        ] {
            let err = parse_size(text).expect_err(text);
            let msg = err.to_string();
            assert!(msg.contains("KiB, MiB, GiB"), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn formatted_sizes_read_back() {
        for n in [0, 1, 1023, 1024, 1536 << 20, 4 << 30, 3 << 40, u64::MAX] {
            assert_eq!(parse_size(&format_size(n)), Ok(n), "{n}");
        }
        assert_eq!(format_size(4 << 30), "4GiB");
        assert_eq!(format_size(1536 << 20), "1536MiB");
    }
}
