//! What `status` shows of the node as the regions tell it: each container's memory,
//! compute figures, time slice, processes and problems.

use super::{Managed, State};
use crate::policy::Timeslice;
use crate::status::{ContainerDevice, ContainerProcess, ContainerStatus, NodeStatus};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use tessera_region::units::format_timeslice_us;
use tessera_region::{Region, TimesliceOutcome, MAX_DEVICES};

/// What `status` shows of a process's per-device memory: the devices of the layout.
const DEVICES: usize = MAX_DEVICES;

impl State {
    /// The node as the regions show it: containers, their memory and processes. GPU-wide
    /// figures, host pids and real usage are the watchdog's to add.
    pub fn node_status(&self) -> NodeStatus {
        let (_, members) = self.roster.snapshot();
        let containers = self
            .containers
            .iter()
            .map(|(name, m)| {
                let timeslice = self.timeslice(name, &m.spec);
                let mut status = container_status(name, m, &self.region_path(name), timeslice);
                let mine: Vec<_> = members
                    .iter()
                    .filter(|member| &member.name == name)
                    .collect();
                let tampering = mine
                    .iter()
                    .fold(0, |bits, member| bits | member.tampering());
                for device in &status.devices {
                    if mine.iter().any(|m| m.claims_ignored(device.gpu as usize)) {
                        status.problems.push(format!(
                            "it claims work on GPU {} that NVML shows it does not do: its claims and its board bit are ignored until it runs something",
                            device.gpu
                        ));
                    }
                }
                // The share granted as the daemon knows it, not as the region says.
                for device in &mut status.devices {
                    let gpu = device.gpu as usize;
                    if let Some(granted) = mine.iter().find_map(|m| m.granted(gpu)) {
                        device.share_target = Some(granted);
                    }
                    if let Some(time) = mine.iter().find_map(|m| m.granted_time(gpu)) {
                        device.granted_ns = Some(time.ns);
                        device.granted_until_ns = Some(time.until_ns);
                    }
                }
                status.problems.extend(
                    crate::scheduler::Tampering::describe(tampering)
                        .into_iter()
                        .map(String::from),
                );
                status
            })
            .collect();
        NodeStatus {
            taken_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            gpus: Vec::new(),
            containers,
            unmanaged: Vec::new(),
            problems: self.problems.clone(),
        }
    }
}

/// What a container's library reports of its time slice, in words, and the slice in force.
fn timeslice_words(outcome: TimesliceOutcome) -> (String, Option<u32>) {
    let refused = |why: String| format!("not available: {why}; the launch gate alone holds it");
    match outcome {
        TimesliceOutcome::Pending => (
            "not applied yet (no GPU work since it was asked)".into(),
            None,
        ),
        TimesliceOutcome::Set { us, groups } => (
            format!(
                "{} on {groups} channel group{}",
                format_timeslice_us(us),
                if groups == 1 { "" } else { "s" }
            ),
            Some(us),
        ),
        TimesliceOutcome::NoGroups => (
            refused("no channel group of the driver was seen".into()),
            None,
        ),
        TimesliceOutcome::RefusedStatus(status) => (
            refused(format!(
                "the driver refused it ({}, {status:#x})",
                tessera_nvrm::status::name(status)
            )),
            None,
        ),
        TimesliceOutcome::RefusedErrno(errno) => (
            refused(format!(
                "the driver's file refused it ({})",
                std::io::Error::from_raw_os_error(errno as i32)
            )),
            None,
        ),
        TimesliceOutcome::Unknown(state) => (
            format!("unknown (the region holds state {state}, which no library writes)"),
            None,
        ),
    }
}

/// A container's compute figures on one device, as the scheduler and the library wrote
/// them into its region.
struct ComputeFigures {
    target: Option<f64>,
    measured: Option<f64>,
    measured_until_ns: Option<u64>,
    throttled_ns: u64,
    preemptions: u64,
}

/// Reads [`ComputeFigures`] (untrusted: shares are clamped to the whole GPU). An unmetered
/// container that measured nothing has no measured share (its launches are not timed).
fn compute_figures(region: &Region, dev: usize) -> ComputeFigures {
    use std::sync::atomic::Ordering::Relaxed;
    use tessera_region::layout::{COMPUTE_UNLIMITED, PPM_ALL};
    let a = region.compute(dev);
    let share = |ppm: u32| f64::from(ppm.min(PPM_ALL)) / f64::from(PPM_ALL);
    // Relaxed (all): momentary figures for people; nothing is published under them.
    let measured = a.share_measured_ppm.load(Relaxed);
    let metered = a.mode.load(Relaxed) != COMPUTE_UNLIMITED;
    ComputeFigures {
        target: Some(share(a.share_target_ppm.load(Relaxed))),
        measured: (metered || measured > 0).then(|| share(measured)),
        measured_until_ns: Some(a.share_measured_until_ns.load(Relaxed)).filter(|&t| t > 0),
        throttled_ns: a.throttled_ns.load(Relaxed),
        preemptions: a.preemptions.load(Relaxed),
    }
}

/// One container's status from its region. Host pids are left to the watchdog, which
/// links them by the processes that map the region file.
fn container_status(name: &str, m: &Managed, path: &Path, timeslice: Timeslice) -> ContainerStatus {
    let mut problems = m.problems.clone();
    let processes: Vec<ContainerProcess> = m
        .region
        .processes()
        .into_iter()
        .map(|p| ContainerProcess {
            slot: p.slot,
            pid: p.pid,
            host_pids: Vec::new(),
            memory: p.memory.into_iter().take(DEVICES).collect(),
        })
        .collect();
    let devices = m
        .spec
        .gpus
        .as_slice()
        .iter()
        .map(|&gpu| {
            let dev = gpu as usize;
            // The daemon's record, not what the region says: its processes can write that.
            let cap = m.spec.memory_caps()[dev];
            let used = m.region.memory_used(dev);
            // Untrusted: the processes' own figures must add up to the container's.
            let held: u64 = processes
                .iter()
                .map(|p| p.memory.get(dev).copied().unwrap_or(0))
                .fold(0, u64::saturating_add);
            if held > used {
                problems.push(format!(
                    "GPU {gpu}: its processes claim {held} bytes but the container counts {used}; its region was tampered with"
                ));
            }
            if cap.is_some_and(|c| used > c) && m.region.memory_cap(dev) == cap {
                problems.push(format!(
                    "GPU {gpu}: {used} bytes in use, over its cap (lowered below its usage)"
                ));
            }
            let compute = compute_figures(&m.region, dev);
            ContainerDevice {
                gpu,
                memory_used: used,
                memory_cap: cap,
                real_memory_used: None,
                share_target: compute.target,
                share_measured: compute.measured,
                share_measured_until_ns: compute.measured_until_ns,
                real_share: None,
                granted_ns: None,
                granted_until_ns: None,
                compute_held: false,
                compute_holds: 0,
                throttled_ns: compute.throttled_ns,
                preemptions: compute.preemptions,
            }
        })
        .collect();
    let outcome = m.region.timeslice_report().outcome();
    let (timeslice_state, timeslice_set_us) = match timeslice {
        Timeslice::Driver => (String::new(), None),
        Timeslice::Us(_) => timeslice_words(outcome),
    };
    let timeslice_unavailable = timeslice != Timeslice::Driver
        && matches!(
            outcome,
            TimesliceOutcome::NoGroups
                | TimesliceOutcome::RefusedStatus(_)
                | TimesliceOutcome::RefusedErrno(_)
        );
    ContainerStatus {
        name: name.to_string(),
        compute: m.spec.compute.to_string(),
        priority: m.spec.priority.to_string(),
        timeslice: timeslice.to_string(),
        timeslice_state,
        timeslice_set_us,
        timeslice_unavailable,
        region: path.to_path_buf(),
        regions_set_aside: {
            let mut paths: Vec<PathBuf> = m
                .carried
                .iter()
                .filter_map(|c| c.source_path.clone())
                .collect();
            paths.sort();
            paths.dedup();
            paths
        },
        devices,
        processes,
        problems,
        region_quarantines: m.quarantines,
        watchdog_kills: 0,
    }
}
