//! The time slice of a container's channel groups on the GPU: what `controld` (or
//! `TESSERA_TIMESLICE`) asks in [`crate::layout::Header::timeslice_us`], and what the
//! container's library reports back of what it did.

use crate::layout::TIMESLICE_SET;
use crate::layout::{TIMESLICE_ERRNO, TIMESLICE_NONE, TIMESLICE_NO_GROUPS, TIMESLICE_REFUSED};

/// The library's report, as the region holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimesliceReport {
    /// One of the `TIMESLICE_*` states of [`crate::layout`].
    pub state: u32,
    /// With [`TIMESLICE_SET`], the channel groups set; with [`TIMESLICE_REFUSED`], the
    /// driver's status.
    pub detail: u32,
    /// The time slice in force on the groups set, in µs.
    pub set_us: u32,
}

/// What a report says, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimesliceOutcome {
    /// Nothing done yet.
    Pending,
    /// In force.
    Set {
        /// The time slice, in µs.
        us: u32,
        /// The channel groups it is set on.
        groups: u32,
    },
    /// No channel group of the driver was seen.
    NoGroups,
    /// The driver refused with an RM status.
    RefusedStatus(u32),
    /// The request failed with an errno.
    RefusedErrno(u32),
    /// A state no library writes (a spoiled region).
    Unknown(u32),
}

impl TimesliceReport {
    /// Reads the report.
    pub fn outcome(&self) -> TimesliceOutcome {
        match self.state {
            TIMESLICE_NONE => TimesliceOutcome::Pending,
            TIMESLICE_SET => TimesliceOutcome::Set {
                us: self.set_us,
                groups: self.detail,
            },
            TIMESLICE_NO_GROUPS => TimesliceOutcome::NoGroups,
            TIMESLICE_REFUSED if self.detail & TIMESLICE_ERRNO != 0 => {
                TimesliceOutcome::RefusedErrno(self.detail & !TIMESLICE_ERRNO)
            }
            TIMESLICE_REFUSED => TimesliceOutcome::RefusedStatus(self.detail),
            other => TimesliceOutcome::Unknown(other),
        }
    }
}
