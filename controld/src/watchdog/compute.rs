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
//!
//! What a container ran past its grant is its debt: each pass adds what it used over the
//! pass less what it was granted over it less [`LEAK`], never below zero. What it was
//! granted is the GPU time the scheduler's ticks granted it between the two passes
//! (`granted_ns`), not the share at either end: an offline container's share is nothing
//! while an online request runs and the whole GPU between requests, and a pass period in
//! step with the requests (250 ms beside 20 a second) would find it at nothing at both
//! ends for seconds and hold an honest container. Where the status carries no such count
//! (or the count started again), the larger of the shares at the pass's two ends stands
//! in for it: a share that just fell was still the share for part of the pass. A
//! container's first pass with a count is not weighed: the count runs from there.
//! Past [`HOLD_AFTER`] of debt, while it is named, the container is held (`compute_held`:
//! the daemon stops its launches through the limits file, which its processes cannot
//! write) until the debt is paid, at its grant, while it runs nothing: over time it gets
//! its grant, whatever it writes. An honest container's use stays at its grant, below it
//! by the leak, and is never named.

use super::nvml::EngineUse;
use crate::status::NodeStatus;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How much use the check looks back over.
const WINDOW: Duration = Duration::from_secs(1);
/// How far above its granted share a container may run by NVML before it is flagged: the
/// gate's own error and a driver's sampling stay well inside it.
pub const MARGIN: f64 = 0.10;
/// How much of the GPU's time per second the debt forgives: the gate's own error.
const LEAK: f64 = 0.02;
/// The debt, in seconds of GPU time, past which a container is held.
const HOLD_AFTER: f64 = 0.15;

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
    /// GPU time it ran past its grant and has not paid back, in seconds.
    debt: f64,
    /// Held until the debt is paid.
    held: bool,
    /// How often it was held.
    holds: u64,
    /// The grant at the last pass.
    granted: Option<f64>,
    /// The GPU time granted up to the last pass, and up to when (`granted_ns`,
    /// `granted_until_ns`).
    granted_time: Option<(u64, u64)>,
}

impl ComputeCheck {
    /// Counts a pass at `now` on every GPU of `status` and judges the containers on it:
    /// `engine_use(gpu, since_us)` is what NVML says each process used of a GPU since a
    /// stamp; `mapping` holds each container's host pids (in `status.containers`' order).
    pub(super) fn observe(
        &mut self,
        now: Instant,
        engine_use: impl Fn(u32, u64) -> Option<EngineUse>,
        status: &mut NodeStatus,
        mapping: &[Vec<u32>],
    ) {
        let gpus: Vec<u32> = status.gpus.iter().map(|g| g.index).collect();
        for gpu in gpus {
            let Some(&(at, since)) = self.last.get(&gpu) else {
                if let Some(first) = engine_use(gpu, 0) {
                    self.last.insert(gpu, (now, first.latest_us));
                }
                continue;
            };
            let Some(mut used) = engine_use(gpu, since) else {
                continue;
            };
            if used.latest_us <= since {
                // No newer sample: the time since counts at the next pass that has one,
                // unless a whole window has gone by without one, when nobody ran anything
                // (a held container must be seen paying its debt).
                if now.duration_since(at) < WINDOW {
                    continue;
                }
                used.processes.clear();
            }
            self.last.insert(gpu, (now, used.latest_us.max(since)));
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
                let time = device.granted_ns.zip(device.granted_until_ns);
                let over_pass = match (track.granted_time, time) {
                    (Some((ns0, until0)), Some((ns, until))) if until > until0 && ns >= ns0 => {
                        Some(((ns - ns0) as f64 / (until - until0) as f64).min(1.0))
                    }
                    _ => None,
                };
                if over_pass.is_none() && time.is_some() && track.granted_time.is_none() {
                    // Its first pass with a count: what it was granted before is not known,
                    // so this pass is not weighed; the count runs from here.
                    track.granted = Some(granted);
                    track.granted_time = time;
                    continue;
                }
                let allowed =
                    over_pass.unwrap_or_else(|| track.granted.map_or(granted, |g| g.max(granted)));
                track.granted = Some(granted);
                track.granted_time = time;
                track.debt = (track.debt + (share - allowed - LEAK) * seconds).max(0.0);
                // Held only while it is also named (over its grant by the margin over the
                // window): a debt alone can be a driver's sampling of long kernels.
                if track.debt > HOLD_AFTER && track.over && !track.held {
                    track.held = true;
                    track.holds += 1;
                    tracing::warn!(
                        "container {}: held on GPU {gpu}: it ran {:.0} ms past its grant",
                        container.name,
                        track.debt * 1000.0
                    );
                } else if track.held && track.debt <= 0.0 {
                    track.held = false;
                }
                track.passes.push_back((
                    seconds,
                    share * seconds,
                    over_pass.unwrap_or(granted) * seconds,
                ));
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
                device.compute_held = track.held;
                device.compute_holds = track.holds;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::GpuStatus;

    /// A node with one GPU and containers `(name, granted share)` on it, pid `i + 1` each.
    fn node(containers: &[(&str, f64)]) -> (NodeStatus, Vec<Vec<u32>>) {
        let containers: Vec<serde_json::Value> = containers
            .iter()
            .map(|(name, granted)| {
                serde_json::json!({
                    "name": name, "compute": "fixed:30", "priority": "online",
                    "region": format!("/nonexistent/{name}.region"),
                    "devices": [{"gpu": 0, "memory_used": 0, "memory_cap": null,
                                 "real_memory_used": null, "share_target": granted,
                                 "share_measured": null, "throttled_ns": 0,
                                 "preemptions": 0}],
                    "processes": [], "problems": [],
                })
            })
            .collect();
        let mapping = (1..=containers.len() as u32).map(|pid| vec![pid]).collect();
        let status = NodeStatus {
            gpus: vec![GpuStatus {
                index: 0,
                name: "Simulated".into(),
                uuid: "GPU-0".into(),
                memory_total: 0,
                memory_used: 0,
                utilization_percent: None,
            }],
            containers: serde_json::from_value(serde_json::Value::Array(containers)).unwrap(),
            ..NodeStatus::default()
        };
        (status, mapping)
    }

    /// Counts pass number `pass` of `check` (passes 250 ms apart from `start`) over
    /// `status`, NVML having seen pid `i + 1` use `shares[i]` of the engine.
    fn observe_pass(
        check: &mut ComputeCheck,
        start: Instant,
        pass: usize,
        status: &mut NodeStatus,
        mapping: &[Vec<u32>],
        shares: &[f64],
    ) {
        let engine_use = |_: u32, _: u64| {
            Some(EngineUse {
                processes: shares
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| (i as u32 + 1, s))
                    .collect(),
                latest_us: 1 + pass as u64,
            })
        };
        let now = start + Duration::from_millis(250 * pass as u64);
        check.observe(now, engine_use, status, mapping);
    }

    /// Runs `passes` passes 250 ms apart in which pid `i + 1` used `used(held)[i]` of the
    /// engine, `held` being whether each container was held after the pass before; returns
    /// the held flags after each pass.
    fn run(
        grants: &[(&str, f64)],
        mut used: impl FnMut(&[bool]) -> Vec<f64>,
        passes: usize,
    ) -> Vec<Vec<bool>> {
        let mut check = ComputeCheck::default();
        let start = Instant::now();
        let mut held: Vec<Vec<bool>> = vec![vec![false; grants.len()]];
        for pass in 0..=passes {
            let (mut status, mapping) = node(grants);
            let shares = used(held.last().unwrap());
            observe_pass(&mut check, start, pass, &mut status, &mapping, &shares);
            held.push(
                status
                    .containers
                    .iter()
                    .map(|c| c.devices[0].compute_held)
                    .collect(),
            );
        }
        held.remove(0);
        held
    }

    #[test]
    fn a_container_past_its_grant_is_held_until_it_has_paid_it_back() {
        // 80 % of the engine on a 30 % grant while it may run, nothing while held.
        let mut ran = 0.0;
        let passes = 80;
        let held = run(
            &[("rogue", 0.3)],
            |held| {
                let share = if held[0] { 0.0 } else { 0.8 };
                ran += share;
                vec![share]
            },
            passes,
        );
        let flags: Vec<bool> = held.iter().map(|p| p[0]).collect();
        let first = flags.iter().position(|&h| h).expect("never held");
        // Named first (a window nearly whole), then held.
        assert!(first >= 3, "held before it was named: {flags:?}");
        assert!(
            flags[first..].iter().any(|&h| !h),
            "never let go: {flags:?}"
        );
        // Over the run it gets its grant, and the leak.
        let share = ran / (passes + 1) as f64;
        assert!((share - 0.32).abs() < 0.05, "{share}: {flags:?}");
    }

    /// Runs `passes` passes 250 ms apart of one container whose share is `at_ends` at every
    /// pass (a pass in step with its neighbour's requests) while the scheduler granted it
    /// `between` of the GPU's time in between, and which used `used` of the engine while
    /// not held; returns after each pass whether it was held, and whether it was named
    /// over its grant.
    fn run_swinging(
        at_ends: f64,
        between: f64,
        used: f64,
        passes: usize,
    ) -> (Vec<bool>, Vec<bool>) {
        let mut check = ComputeCheck::default();
        let start = Instant::now();
        let mut held = vec![false];
        let mut named = Vec::new();
        for pass in 0..=passes {
            let (mut status, mapping) = node(&[("offline", at_ends)]);
            let until_ns = 1_000_000_000 + 250_000_000 * pass as u64;
            status.containers[0].devices[0].granted_ns = Some((between * until_ns as f64) as u64);
            status.containers[0].devices[0].granted_until_ns = Some(until_ns);
            let share = if *held.last().unwrap() { 0.0 } else { used };
            observe_pass(&mut check, start, pass, &mut status, &mapping, &[share]);
            held.push(status.containers[0].devices[0].compute_held);
            named.push(!status.containers[0].problems.is_empty());
        }
        held.remove(0);
        (held, named)
    }

    #[test]
    fn what_a_container_uses_is_weighed_against_the_time_granted_between_passes() {
        // Offline beside an online service: nothing granted at each pass's ends (an online
        // request runs then), 80 % of the time granted in between, 70 % used. The shares
        // at the ends alone would hold it within a second.
        let (held, named) = run_swinging(0.0, 0.8, 0.7, 40);
        assert!(held.iter().all(|&h| !h), "{held:?}");
        assert!(named.iter().all(|&n| !n), "{named:?}");
        // And the other way: the whole GPU at each pass's ends, 30 % granted in between,
        // 80 % used: named, and held.
        let (held, named) = run_swinging(1.0, 0.3, 0.8, 40);
        assert!(named.iter().any(|&n| n), "{named:?}");
        assert!(held.iter().any(|&h| h), "{held:?}");
    }

    #[test]
    fn an_honest_container_or_a_falling_grant_is_never_held() {
        let held = run(&[("honest", 0.3), ("burst", 1.0)], |_| vec![0.31, 0.69], 40);
        assert!(held.iter().all(|p| !p[0] && !p[1]), "{held:?}");
        // A grant that falls from 100 % to 30 % between two passes: the pass before used
        // the old grant.
        let mut check = ComputeCheck::default();
        let start = Instant::now();
        for (pass, (granted, used)) in [(1.0, 1.0), (1.0, 1.0), (0.3, 1.0), (0.3, 0.3), (0.3, 0.3)]
            .into_iter()
            .enumerate()
        {
            let (mut status, mapping) = node(&[("burst", granted)]);
            observe_pass(&mut check, start, pass, &mut status, &mapping, &[used]);
            assert!(!status.containers[0].devices[0].compute_held, "pass {pass}");
        }
    }
}
