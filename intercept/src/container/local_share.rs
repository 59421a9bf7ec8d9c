//! `TESSERA_COMPUTE`: a compute share for a container without a daemon, applied to the
//! region when the container state is made (the launch gate then finds the devices in
//! local mode, where the processes refill the bucket themselves).

use std::sync::atomic::Ordering;
use tessera_region::layout::{COMPUTE_DAEMON, COMPUTE_LOCAL};
use tessera_region::{Region, MAX_DEVICES};

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

/// Applies `TESSERA_COMPUTE` to a freshly opened region: local mode at the share asked on
/// every device that `controld` does not manage. Called once per process, when the
/// container state is made. A malformed value is one error line and leaves compute
/// unlimited: a bad setting never stops an application's kernels.
pub(crate) fn apply(region: &Region) {
    let Some(value) = crate::env::var(crate::env::COMPUTE) else {
        return;
    };
    let ppm = match parse(&value) {
        Ok(LocalShare::Fixed { ppm }) => ppm,
        Ok(LocalShare::None) => return,
        Err(line) => {
            crate::tlog!(error, "{line}");
            return;
        }
    };
    for device in 0..MAX_DEVICES {
        let acct = region.compute(device);
        // Relaxed: the daemon's mode is a single word; a daemon that takes the region over
        // later sets its own mode anyway.
        if acct.mode.load(Ordering::Relaxed) == COMPUTE_DAEMON {
            crate::tlog!(
                warn,
                "controld manages compute on device {device}; TESSERA_COMPUTE={value} is ignored there"
            );
            continue;
        }
        // Relaxed: read by refills, which take the mode set below as their go-ahead.
        acct.local_share_ppm.store(ppm, Ordering::Relaxed);
        region.set_compute_mode(device, COMPUTE_LOCAL);
    }
    crate::tlog!(
        info,
        "compute limited to {value} of each device by this container's processes"
    );
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
