//! The compute check: what each container's processes really ran on each GPU, by NVML's
//! per-process utilization, against the share the scheduler granted it.
//!
//! Everything the scheduler reads of a container's compute (its spans, bucket, mode and
//! blocked words) is in its region, which its processes can write; NVML's figures are the
//! driver's. A container whose processes used more of a GPU over about a second than it was
//! granted, by more than [`MARGIN`], has gone around its launch gate (its region's compute
//! words rewritten, false spans, a process launching without the library): status says so
//! with both figures while it lasts, and the log once per episode. The granted share is the
//! daemon's own (`Member::granted`), never the region's copy.
//!
//! A pass counts only once NVML has a sample newer than the last one it counted (a driver
//! samples every sixth of a second or so, and a status asked for in between must not count
//! the time since as idle); each pass weighs what each process used over the time since
//! the previous one.

use super::nvml::Nvml;
use crate::status::NodeStatus;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How much use the check looks back over.
const WINDOW: Duration = Duration::from_secs(1);
/// How far above its granted share a container may run by NVML before it is flagged: the
/// gate's own error and a driver's sampling stay well inside it.
pub const MARGIN: f64 = 0.10;

/// The check's memory between passes.
#[derive(Debug, Default)]
pub(super) struct ComputeCheck {
    /// Per GPU: when its last counted pass was, and NVML's newest stamp then.
    last: HashMap<u32, (Instant, u64)>,
    /// Per container and GPU: the passes within the window.
    tracks: HashMap<(String, u32), Track>,
}

#[derive(Debug, Default)]
struct Track {
    /// (seconds, seconds used, seconds granted) per pass, oldest first.
    passes: VecDeque<(f64, f64, f64)>,
    /// Over its share at the last pass (so the log says it once per episode).
    over: bool,
}

impl ComputeCheck {
    /// Counts a pass on every GPU of `status` and judges the containers on it; `mapping`
    /// holds each container's host pids (in `status.containers`' order).
    pub(super) fn observe(&mut self, nvml: &Nvml, status: &mut NodeStatus, mapping: &[Vec<u32>]) {
        let now = Instant::now();
        let gpus: Vec<u32> = status.gpus.iter().map(|g| g.index).collect();
        for gpu in gpus {
            let Some(&(at, since)) = self.last.get(&gpu) else {
                if let Some(first) = nvml.engine_use(gpu, 0) {
                    self.last.insert(gpu, (now, first.latest_us));
                }
                continue;
            };
            let Some(used) = nvml.engine_use(gpu, since) else {
                continue;
            };
            if used.latest_us <= since {
                // No newer sample: the time since counts at the next pass that has one.
                continue;
            }
            self.last.insert(gpu, (now, used.latest_us));
            let seconds = now.duration_since(at).as_secs_f64();
            for (container, pids) in status.containers.iter_mut().zip(mapping) {
                let Some(device) = container.devices.iter_mut().find(|d| d.gpu == gpu) else {
                    continue;
                };
                let share: f64 = used
                    .processes
                    .iter()
                    .filter(|(pid, _)| pids.binary_search(pid).is_ok())
                    .map(|(_, share)| share)
                    .sum::<f64>()
                    .min(1.0);
                let granted = device.share_target.unwrap_or(1.0);
                let track = self
                    .tracks
                    .entry((container.name.clone(), gpu))
                    .or_default();
                track
                    .passes
                    .push_back((seconds, share * seconds, granted * seconds));
                while track.passes.len() > 1
                    && track.passes.iter().skip(1).map(|p| p.0).sum::<f64>() >= WINDOW.as_secs_f64()
                {
                    track.passes.pop_front();
                }
            }
        }
        // Containers gone, or no longer on a GPU, are forgotten.
        self.tracks.retain(|(name, gpu), _| {
            status
                .containers
                .iter()
                .any(|c| &c.name == name && c.devices.iter().any(|d| d.gpu == *gpu))
        });
        for container in &mut status.containers {
            let mut lines = Vec::new();
            for device in &mut container.devices {
                let Some(track) = self.tracks.get_mut(&(container.name.clone(), device.gpu)) else {
                    continue;
                };
                let (seconds, used, granted) = track
                    .passes
                    .iter()
                    .fold((0.0, 0.0, 0.0), |s, p| (s.0 + p.0, s.1 + p.1, s.2 + p.2));
                // A window nearly whole before anything is judged.
                if seconds < 0.75 * WINDOW.as_secs_f64() {
                    continue;
                }
                let (real, allowed) = (used / seconds, granted / seconds);
                device.real_share = Some(real);
                let over = real > allowed + MARGIN;
                if over {
                    let line = format!(
                        "its processes used {:.0} % of GPU {} over the last second by NVML, where it was granted {:.0} %: its region's compute words or spans were rewritten, or a process launches around libtessera.so",
                        real * 100.0,
                        device.gpu,
                        allowed * 100.0
                    );
                    if !track.over {
                        tracing::error!("container {}: {line}", container.name);
                    }
                    lines.push(line);
                }
                track.over = over;
            }
            container.problems.extend(lines);
        }
    }
}
