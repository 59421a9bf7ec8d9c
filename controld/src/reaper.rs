//! The reaper: a thread that frees the process slots of dead processes in every region, so
//! that a killed process's memory goes back to its container within a second even when no
//! other process of the container allocates. At every pass it holds the regions to the
//! daemon's record (caps and usage a container's processes wrote are put back), and once a
//! second it checks every region's header (quarantining a spoiled one) and removes retired
//! containers that have emptied.

use crate::shared::Core;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Time between two passes over the regions: 5 per second, so a death is reaped within
/// 200 ms plus one pass.
pub const PERIOD: Duration = Duration::from_millis(200);

/// How often regions are checked and retired containers swept.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// Starts the reaper; it ends when `stop` is set.
pub fn spawn(core: Arc<Core>, stop: Arc<AtomicBool>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || {
            let mut last_housekeeping = Instant::now();
            // Relaxed: a flag with no data behind it; the loop only needs to see it eventually.
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                // The regions are copied out so that reaping never holds the state's lock.
                for region in core.with_state(|s| s.regions()) {
                    let freed = region.reap_dead();
                    if freed > 0 {
                        tracing::debug!("reaped {freed} dead process(es) of {}", region.name());
                    }
                }
                for line in core.with_state(|s| s.guard_regions()) {
                    tracing::warn!("{line}");
                }
                if last_housekeeping.elapsed() >= HOUSEKEEPING {
                    last_housekeeping = Instant::now();
                    let (replaced, removed) =
                        core.with_state(|s| (s.verify_regions(), s.sweep_retired()));
                    for line in replaced {
                        tracing::error!("{line}");
                    }
                    for name in removed {
                        tracing::info!("removed retired container {name}");
                    }
                }
                std::thread::sleep(PERIOD.saturating_sub(started.elapsed()));
            }
        })
}
