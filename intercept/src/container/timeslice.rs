//! `TESSERA_TIMESLICE`: a time slice for the channel groups of a container without a
//! daemon, put into the region when the container state is made (the time slice lever,
//! `rm::lever`, then finds it there as it would find the daemon's).

use std::sync::atomic::Ordering;
use tessera_region::layout::COMPUTE_DAEMON;
use tessera_region::{units, Region, MAX_DEVICES};

/// `TESSERA_TIMESLICE` for a container no daemon manages, into its region: called once per
/// process when the container state is made.
pub(crate) fn apply_env(region: &Region) {
    let Some(value) = crate::env::var(crate::env::TIMESLICE) else {
        return;
    };
    if value.trim().is_empty() {
        return;
    }
    let managed = (0..MAX_DEVICES).any(|d| {
        // Relaxed: a single word, set by the daemon before the container's processes run.
        region.compute(d).mode.load(Ordering::Relaxed) == COMPUTE_DAEMON
    });
    if managed {
        crate::tlog!(
            warn,
            "controld manages this container; {}={value} is ignored",
            crate::env::TIMESLICE
        );
        return;
    }
    match units::parse_timeslice_us(&value) {
        Ok(us) => region.set_timeslice_us(Some(us)),
        Err(e) => crate::tlog!(
            error,
            "{}: {e}; the driver's time slice stays",
            crate::env::TIMESLICE
        ),
    }
}
