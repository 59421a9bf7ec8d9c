//! `TESSERA_COMPUTE`: a compute share for a container without a daemon.

/// What `TESSERA_COMPUTE` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LocalShare {
    /// Not set: nothing to enforce locally.
    None,
    /// `fixed:Q`: Q% of every device's time, as parts per million.
    Fixed { ppm: u32 },
}

/// Parses a `TESSERA_COMPUTE` value: `fixed:Q` with Q a whole percentage from 1 to 100
/// (spaces around the parts allowed). Anything else is an error line that says what is
/// accepted; the caller then leaves compute unlimited.
pub(crate) fn parse(value: &str) -> Result<LocalShare, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(LocalShare::None);
    }
    let bad = || {
        format!(
            "{}={value:?} is not a compute share; use fixed:Q with Q a whole \
             percentage from 1 to 100 (like fixed:30); compute is not limited in this process",
            crate::env::COMPUTE
        )
    };
    let (kind, q) = value.split_once(':').ok_or_else(bad)?;
    if !kind.trim().eq_ignore_ascii_case("fixed") {
        return Err(bad());
    }
    let q: u32 = q.trim().parse().map_err(|_| bad())?;
    if !(1..=100).contains(&q) {
        return Err(bad());
    }
    Ok(LocalShare::Fixed { ppm: q * 10_000 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_shares_parse() {
        assert_eq!(parse("fixed:30"), Ok(LocalShare::Fixed { ppm: 300_000 }));
        assert_eq!(
            parse(" FIXED : 100 "),
            Ok(LocalShare::Fixed { ppm: 1_000_000 })
        );
        assert_eq!(parse("fixed:1"), Ok(LocalShare::Fixed { ppm: 10_000 }));
        assert_eq!(parse(""), Ok(LocalShare::None));
    }

    #[test]
    fn anything_else_is_one_clear_error() {
        for bad in [
            "fixed:0",
            "fixed:101",
            "fixed:",
            "fixed:30%",
            "burst:30",
            "30",
            "fixed:2.5",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("use fixed:Q"), "{bad}: {e}");
        }
    }
}
