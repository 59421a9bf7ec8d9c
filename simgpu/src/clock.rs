//! The node clock: `CLOCK_MONOTONIC` nanoseconds, the same in every process on the node, so
//! that engine hand-offs and event timestamps written by one process mean the same to another.

use rustix::thread::clock_nanosleep_absolute;
use rustix::time::{ClockId, Timespec};

/// Nanoseconds on the node's monotonic clock (the clock of every time in a region, too).
pub use tessera_region::monotonic_ns as now_ns;

/// Sleeps until the node clock reads at least `deadline_ns` (absolute, so that lateness in
/// one step is not added to the next).
pub fn sleep_until(deadline_ns: u64) {
    let deadline = Timespec {
        tv_sec: i64::try_from(deadline_ns / 1_000_000_000).unwrap_or(i64::MAX),
        tv_nsec: (deadline_ns % 1_000_000_000) as i64,
    };
    while clock_nanosleep_absolute(ClockId::Monotonic, &deadline) == Err(rustix::io::Errno::INTR) {}
}
