//! The time slice lever: every channel group of the process runs with the time slice the
//! container's region asks ([`Region::timeslice_us`]: `controld` asks a short one for an
//! offline container, so that the GPU switches to other work within that time), or with the
//! driver's own when none is asked.
//!
//! A group gets it as soon as it is made, and again right after the driver sets its own
//! (libcuda sets one on its groups after making them). A change of what is asked reaches
//! the groups at the next launch after the container was idle, or that waits in the gate
//! ([`sync`]). Each control is a
//! call into the GPU's firmware (0.1–0.7 ms on an H200), so none is made on a launch
//! otherwise. Whatever the driver answers, the application's own requests are untouched:
//! a refused control leaves the group as the driver made it, says so once in the log and in
//! the region's report, and the launch gate alone holds offline work back, as without the
//! lever.

use super::groups::{self, Group};
use std::ffi::{c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use tessera_nvrm::{control, params, status, Escape, Request};
use tessera_region::layout::{
    TIMESLICE_ERRNO, TIMESLICE_NO_GROUPS, TIMESLICE_REFUSED, TIMESLICE_SET,
};
use tessera_region::{Region, TimesliceReport};

/// What was asked when the groups were last brought in line; `UNSYNCED` before that.
static SYNCED: AtomicU32 = AtomicU32::new(UNSYNCED);
const UNSYNCED: u32 = u32::MAX;
/// Set once a refusal was logged.
static REFUSAL_SAID: AtomicBool = AtomicBool::new(false);

/// Why a control did not take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The driver answered with this RM status.
    Status(u32),
    /// The request failed with this errno.
    Errno(c_int),
    /// The group's file is gone (closed, its number reused): the group went with it.
    Gone,
}

/// What the region asks, once the container state exists: `Some(None)` for the driver's.
fn asked() -> Option<Option<u32>> {
    crate::container::peek().map(|c| c.region().timeslice_us())
}

/// A group the driver just made.
pub(super) fn group_made(group: Group) {
    if let Some(Some(us)) = asked() {
        let outcome = set(group, u64::from(us));
        report_one(us, outcome);
    }
}

/// A context was made: with a time slice asked and no channel group of the driver seen by
/// then (the driver makes a context's groups with it), the lever is not available here, and
/// the region says so.
pub(crate) fn context_made() {
    let Some(c) = crate::container::peek() else {
        return;
    };
    if c.region().timeslice_us().is_some() && groups::count() == 0 {
        c.region().report_timeslice(TimesliceReport {
            state: TIMESLICE_NO_GROUPS,
            ..TimesliceReport::default()
        });
    }
}

/// The driver set `us` on one of the process's groups itself.
pub(super) fn driver_set(group: Group, us: u64) {
    group.set_driver_us(us);
    match asked() {
        Some(Some(want)) if u64::from(want) != us => {
            let outcome = set(group, u64::from(want));
            report_one(want, outcome);
        }
        Some(Some(_)) => group.set_ours_us(Some(us)),
        _ => group.set_ours_us(None),
    }
}

/// Brings the groups in line with a change of what the region asks; called at a launch
/// that finds the container idle, so one load when nothing changed. With a time slice
/// asked and no group ever seen, reports that the lever is not available.
pub(crate) fn sync(region: &Region) {
    let asked = region.timeslice_us().unwrap_or(0);
    // Relaxed: a cache of a single word; racing threads at worst both apply.
    if SYNCED.load(Ordering::Relaxed) == asked {
        return;
    }
    SYNCED.store(asked, Ordering::Relaxed);
    let mut set_on = 0;
    let mut refused = None;
    groups::each(|g| {
        let target = match asked {
            // Back to the driver's, on the groups we changed, where we know it.
            0 => g.ours_us().and(g.driver_us()),
            us if g.ours_us() == Some(u64::from(us)) => {
                set_on += 1;
                None
            }
            us => Some(u64::from(us)),
        };
        match target.map(|us| set(g, us)) {
            Some(Ok(())) if asked != 0 => set_on += 1,
            Some(Ok(())) => g.set_ours_us(None),
            Some(Err(Refusal::Gone)) | None => {}
            Some(Err(r)) => refused = Some(r),
        }
    });
    let report = match (asked, refused) {
        (0, _) => TimesliceReport::default(),
        (_, Some(r)) => refusal_report(r),
        (_, None) if set_on == 0 => TimesliceReport {
            state: TIMESLICE_NO_GROUPS,
            ..TimesliceReport::default()
        },
        (us, None) => TimesliceReport {
            state: TIMESLICE_SET,
            detail: set_on,
            set_us: us,
        },
    };
    region.report_timeslice(report);
}

/// Reports the outcome of a control on one group.
fn report_one(asked: u32, outcome: Result<(), Refusal>) {
    let Some(c) = crate::container::peek() else {
        return;
    };
    let report = match outcome {
        Ok(()) => TimesliceReport {
            state: TIMESLICE_SET,
            detail: groups::count(),
            set_us: asked,
        },
        Err(Refusal::Gone) => return,
        Err(r) => refusal_report(r),
    };
    c.region().report_timeslice(report);
}

fn refusal_report(r: Refusal) -> TimesliceReport {
    let detail = match r {
        Refusal::Status(s) => s,
        Refusal::Errno(e) => TIMESLICE_ERRNO | (e as u32 & !TIMESLICE_ERRNO),
        Refusal::Gone => 0,
    };
    TimesliceReport {
        state: TIMESLICE_REFUSED,
        detail,
        set_us: 0,
    }
}

/// Sets `us` on `group`, learning the driver's own first so that it can be put back.
fn set(group: Group, us: u64) -> Result<(), Refusal> {
    if !group.file_is_current() {
        return Err(Refusal::Gone);
    }
    if group.driver_us().is_none() {
        if let Ok(driver) = timeslice(group, control::GET_TIMESLICE, 0) {
            group.set_driver_us(driver);
        }
    }
    let started = tessera_region::monotonic_ns();
    match timeslice(group, control::SET_TIMESLICE, us) {
        Ok(_) => {
            group.set_ours_us(Some(us));
            crate::tlog!(
                debug,
                "GPU time slice {us} µs on channel group {:#x} (the control took {} µs)",
                group.object,
                tessera_region::monotonic_ns().saturating_sub(started) / 1_000
            );
            Ok(())
        }
        Err(r) => {
            if !REFUSAL_SAID.swap(true, Ordering::Relaxed) {
                crate::tlog!(
                    warn,
                    "the driver refused a GPU time slice of {us} µs ({}); this process's work \
                     keeps the driver's time slice and is held back by the launch gate alone",
                    describe(r)
                );
            }
            Err(r)
        }
    }
}

fn describe(r: Refusal) -> String {
    match r {
        Refusal::Status(s) => format!("{} ({s:#x})", tessera_nvrm::status::name(s)),
        Refusal::Errno(e) => std::io::Error::from_raw_os_error(e).to_string(),
        Refusal::Gone => "the channel group is gone".to_string(),
    }
}

/// A `SET_TIMESLICE` or `GET_TIMESLICE` control on `group`: the time slice it holds after.
fn timeslice(group: Group, cmd: u32, us: u64) -> Result<u64, Refusal> {
    let mut t = params::Timeslice { us };
    let mut c = params::Control {
        client: group.client,
        object: group.object,
        cmd,
        flags: 0,
        params: (&raw mut t) as u64,
        params_size: size_of::<params::Timeslice>() as u32,
        status: status::OK,
    };
    let request = Request::encode(Escape::Control, size_of::<params::Control>());
    // SAFETY: an RM control with its parameters in our locals, which outlive the call, on
    // the file the group's client lives on.
    let rc =
        unsafe { super::rm_next()(group.fd, request as c_ulong, (&raw mut c).cast::<c_void>()) };
    if rc != 0 {
        return Err(Refusal::Errno(super::errno()));
    }
    if c.status != status::OK {
        return Err(Refusal::Status(c.status));
    }
    Ok(t.us)
}

#[cfg(test)]
pub(super) fn reset_for_tests() {
    SYNCED.store(UNSYNCED, Ordering::Relaxed);
}
