//! Sizes as people write them: `4GiB`, `512m`, `1073741824`. Units are binary. And the
//! GPU time slices of channel groups: `100us`, `2ms`.

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
    if ["kb", "mb", "gb", "tb"].contains(&unit.as_str()) {
        return Err(fail(
            "KB, MB, GB and TB may be decimal or binary; write KiB, MiB, GiB or TiB",
        ));
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

/// The binary units sizes are written in, largest first.
const NAMES: [(&str, u64); 4] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

/// The largest unit not above `bytes`, if any.
fn unit_of(bytes: u64) -> Option<(&'static str, u64)> {
    NAMES.iter().copied().find(|&(_, unit)| bytes >= unit)
}

/// Writes a size exactly, in Tessera's one spelling: a number, at most three decimals, and a
/// binary unit with no space, the largest unit that keeps the number exact: `4GiB`,
/// `1.5GiB`, `1.125MiB`, `100B`. [`parse_size`] reads it back to the same number.
pub fn format_size(bytes: u64) -> String {
    for &(name, unit) in &NAMES {
        if bytes < unit {
            continue;
        }
        let thousandths = u128::from(bytes) * 1000;
        if thousandths % u128::from(unit) == 0 {
            return with_decimals(thousandths / u128::from(unit), 3, name);
        }
    }
    format!("{bytes}B")
}

/// Writes a size for a glance, in the same spelling as [`format_size`], rounded to one
/// decimal (none from 100 up) in the largest unit not above it: `1.2GiB`, `141GiB`, `0B`.
/// For tables and messages about usage; [`format_size`] for caps and anything read back.
pub fn format_size_rounded(bytes: u64) -> String {
    let Some((name, unit)) = unit_of(bytes) else {
        return format!("{bytes}B");
    };
    let decimals = if bytes / unit >= 100 { 0 } else { 1 };
    let scale = 10u128.pow(decimals);
    // Rounded half up, in integers: exact for every u64.
    let scaled = (u128::from(bytes) * scale + u128::from(unit) / 2) / u128::from(unit);
    with_decimals(scaled, decimals, name)
}

/// `value / 10^decimals` with its trailing zero decimals left out, then `unit`.
fn with_decimals(value: u128, decimals: u32, unit: &str) -> String {
    let scale = 10u128.pow(decimals);
    let (whole, mut fraction, mut digits) = (value / scale, value % scale, decimals as usize);
    while digits > 0 && fraction % 10 == 0 {
        fraction /= 10;
        digits -= 1;
    }
    if digits == 0 {
        format!("{whole}{unit}")
    } else {
        format!("{whole}.{fraction:0digits$}{unit}")
    }
}

/// The shortest time slice Tessera asks of a GPU, in µs.
pub const TIMESLICE_MIN_US: u32 = 1;
/// The longest, in µs: a second.
pub const TIMESLICE_MAX_US: u32 = 1_000_000;

/// A time slice that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid time slice {input:?}: {reason}; write a whole number with a unit, us, ms or s, from 1us to 1s, e.g. 100us")]
pub struct TimesliceError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Reads a channel group's time slice, in µs: a whole number, then (after optional spaces)
/// `us` (or `µs`), `ms` or `s`, from [`TIMESLICE_MIN_US`] to [`TIMESLICE_MAX_US`].
pub fn parse_timeslice_us(input: &str) -> Result<u32, TimesliceError> {
    let fail = |reason| TimesliceError {
        input: input.to_string(),
        reason,
    };
    let text = input.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    if number.is_empty() {
        return Err(fail("it does not start with a whole number"));
    }
    let per_unit: u64 = match unit.trim_start().to_ascii_lowercase().as_str() {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "" => return Err(fail("it has no unit")),
        _ => return Err(fail("unknown unit")),
    };
    let us = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(per_unit))
        .filter(|us| (u64::from(TIMESLICE_MIN_US)..=u64::from(TIMESLICE_MAX_US)).contains(us))
        .ok_or_else(|| fail("it is out of range"))?;
    Ok(us as u32)
}

/// Writes a time slice in µs in the largest unit that keeps it whole: `100us`, `2ms`, `1s`.
/// [`parse_timeslice_us`] reads it back to the same number.
pub fn format_timeslice_us(us: u32) -> String {
    match us {
        0 => "0us".to_string(),
        _ if us.is_multiple_of(1_000_000) => format!("{}s", us / 1_000_000),
        _ if us.is_multiple_of(1_000) => format!("{}ms", us / 1_000),
        _ => format!("{us}us"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_slices_read_and_write_back() {
        for (text, us) in [
            ("100us", 100),
            ("100 µs", 100),
            (" 2ms", 2_000),
            ("1s", 1_000_000),
            ("1us", 1),
            ("1500us", 1_500),
        ] {
            assert_eq!(parse_timeslice_us(text), Ok(us), "{text}");
            assert_eq!(parse_timeslice_us(&format_timeslice_us(us)), Ok(us));
        }
        assert_eq!(format_timeslice_us(2_000), "2ms");
        for bad in ["", "100", "0us", "2s", "1.5ms", "-1us", "100ns", "ms"] {
            let e = parse_timeslice_us(bad).unwrap_err();
            assert!(e.to_string().contains("e.g. 100us"), "{bad}: {e}");
        }
    }

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
    fn ambiguous_units_are_refused_with_their_binary_names() {
        for text in ["1GB", "512mb", "2 TB", "4kb"] {
            let msg = parse_size(text).expect_err(text).to_string();
            assert!(msg.contains("may be decimal or binary"), "{msg}");
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
        let odd = [1, 1023, 1024, 1025, 1536 << 20, 1_234_567_890, 1152 << 10];
        for n in [0, 4 << 30, 3 << 40, (1 << 40) + (1 << 30), u64::MAX]
            .into_iter()
            .chain(odd)
        {
            assert_eq!(parse_size(&format_size(n)), Ok(n), "{n}");
        }
        assert_eq!(format_size(0), "0B");
        assert_eq!(format_size(100), "100B");
        assert_eq!(format_size(4 << 30), "4GiB");
        assert_eq!(format_size(1536 << 20), "1.5GiB");
        assert_eq!(format_size(1152 << 10), "1.125MiB");
        assert_eq!(format_size(1_234_567_890), "1234567890B");
        assert_eq!(format_size(16 << 40), "16TiB");
    }

    #[test]
    fn rounded_sizes_read_at_a_glance_in_the_same_spelling() {
        assert_eq!(format_size_rounded(0), "0B");
        assert_eq!(format_size_rounded(1023), "1023B");
        assert_eq!(format_size_rounded(2 << 30), "2GiB");
        assert_eq!(format_size_rounded(3 << 29), "1.5GiB");
        assert_eq!(format_size_rounded(1_234_567_890), "1.1GiB");
        assert_eq!(format_size_rounded(141 << 30), "141GiB");
        assert_eq!(format_size_rounded((100 << 30) + (600 << 20)), "101GiB");
        assert_eq!(format_size_rounded(u64::MAX), "16777216TiB");
        // Where both are exact, both spell it alike.
        for n in [1 << 20, 3 << 29, 80 << 30] {
            assert_eq!(format_size_rounded(n), format_size(n));
        }
    }
}
