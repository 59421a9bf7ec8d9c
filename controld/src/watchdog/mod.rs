//! The watchdog: what really runs on the GPUs, by NVML, set against what the containers'
//! regions say.
//!
//! - A container's processes are found on the host as the processes that map its region
//!   file (the region records pids in the container's pid namespace; NVML names host pids).
//! - A process on a GPU that maps no region belongs to no container: it is *unmanaged*.
//! - A container whose processes hold more memory on a GPU than its cap allows, by NVML's
//!   count, has bypassed `libtessera.so` (a static binary, a process started without the
//!   preload that maps the region anyway): a problem for people to see. The cap is the one
//!   the daemon declared (the status carries it), never what the region says. With
//!   [`Enforce::Kill`], the container's processes on that GPU are stopped with `SIGKILL`
//!   once it has stayed over its cap plus the slack for the grace period.
//! - A container whose processes used more of a GPU's time than it was granted, by NVML's
//!   per-process utilization, has gone around its launch gate ([`compute`]).
//!
//! Without NVML (no NVIDIA driver) the watchdog only links host pids; it is not an error.

mod compute;
mod nvml;
mod procfs;

pub use nvml::{EngineUse, GpuSample, Nvml, NvmlError, LIBRARY};

use crate::status::{GpuStatus, NodeStatus, UnmanagedProcess};
use procfs::{FileId, ProcessMaps};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_region::units::format_size;

/// What the watchdog does about a container over its cap (`[daemon] enforce`).
///
/// `kill` by default: the memory a container holds past its cap is its neighbours' (their
/// allocations fail while it holds it), and a container gets there only by going around
/// the library (a process without the preload, a static binary) or by rewriting its own
/// region's counts; reporting alone would leave the neighbours short for as long as nobody
/// reads the status. The slack and the grace period keep a driver's rounding from counting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforce {
    /// Report it: a status line, a metric and a log line.
    Report,
    /// Report it and, once it has lasted the grace period, stop the container's processes
    /// that hold memory on that GPU.
    #[default]
    Kill,
}

/// How long a container may stay over its cap plus the slack before `kill` acts: longer
/// than a driver's momentary rounding, short enough that a neighbour's allocations soon
/// find their memory again.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// How far NVML's count of a container's memory may exceed its cap before the watchdog
/// reports it: the driver rounds allocations up to its page sizes and keeps per-process
/// state of its own, which the library's count cannot see.
pub const DEFAULT_SLACK: u64 = 64 << 20;

/// Watches the GPUs of the node; see the module's documentation. Keeps NVML initialised
/// while it lives.
#[derive(Debug)]
pub struct Watchdog {
    nvml: Option<Nvml>,
    maps: ProcessMaps,
    /// Processes never attributed: `controld` itself maps every region.
    ignore: Vec<u32>,
    slack: u64,
    enforce: Enforce,
    grace: Duration,
    /// Since when each (container, GPU) has been over its cap plus the slack.
    over_since: HashMap<(String, u32), Instant>,
    /// Processes stopped per container, and the last line that says why.
    kills: HashMap<String, (u64, String)>,
    /// The last NVML failure logged.
    last_error: Option<String>,
    /// What each container really ran, against what it was granted.
    compute: compute::ComputeCheck,
}

// The daemon shares it between its threads (behind a lock).
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Watchdog>();
};

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog::new()
    }
}

impl Watchdog {
    /// A watchdog on the node's NVML (`libnvidia-ml.so.1`). Without it, one log line says so
    /// and the watchdog only links host pids.
    pub fn new() -> Watchdog {
        match Watchdog::with_library(OsStr::new(LIBRARY)) {
            Ok(watchdog) => watchdog,
            Err(e) => {
                tracing::info!(
                    "watchdog off: {e}; GPUs, unmanaged processes and bypassed caps go unseen"
                );
                Watchdog::without_nvml()
            }
        }
    }

    /// A watchdog on the NVML at `library` (a name the dynamic loader searches for, or a
    /// path).
    pub fn with_library(library: &OsStr) -> Result<Watchdog, NvmlError> {
        Ok(Watchdog {
            nvml: Some(Nvml::load(library)?),
            ..Watchdog::without_nvml()
        })
    }

    /// A watchdog without NVML: it links host pids, nothing more.
    pub fn without_nvml() -> Watchdog {
        Watchdog {
            nvml: None,
            maps: ProcessMaps::new(Path::new("/proc")),
            ignore: vec![std::process::id()],
            slack: DEFAULT_SLACK,
            enforce: Enforce::Report,
            grace: DEFAULT_GRACE,
            over_since: HashMap::new(),
            kills: HashMap::new(),
            last_error: None,
            compute: compute::ComputeCheck::default(),
        }
    }

    /// Sets what is done about a container over its cap, and after how long.
    pub fn with_enforce(mut self, enforce: Enforce, grace: Duration) -> Watchdog {
        self.enforce = enforce;
        self.grace = grace;
        self
    }

    /// Sets how far real memory may exceed a cap unreported ([`DEFAULT_SLACK`]).
    pub fn with_slack(mut self, bytes: u64) -> Watchdog {
        self.slack = bytes;
        self
    }

    /// The memory of each GPU of the node, by index; `None` without NVML or when it fails.
    pub fn device_memory(&self) -> Option<Vec<u64>> {
        let gpus = self.nvml.as_ref()?.sample().ok()?;
        let mut memory = vec![0; gpus.len()];
        for g in gpus {
            *memory.get_mut(g.index as usize)? = g.memory_total;
        }
        Some(memory)
    }

    /// Each GPU's UUID, by index (`None` where NVML gives no `GPU-…` one); `None` without
    /// NVML.
    pub fn device_uuids(&self) -> Option<Vec<Option<[u8; 16]>>> {
        let gpus = self.nvml.as_ref()?.sample().ok()?;
        let mut uuids = vec![None; gpus.len()];
        for g in gpus {
            *uuids.get_mut(g.index as usize)? = tessera_region::uuid::parse(&g.uuid);
        }
        Some(uuids)
    }

    /// How each GPU time-slices contexts, by its model (NVML's name), by index; `None`
    /// without NVML.
    pub fn device_slicing(&self) -> Option<Vec<tessera_region::slicing::Slicing>> {
        let gpus = self.nvml.as_ref()?.sample().ok()?;
        let mut slicing = vec![tessera_region::slicing::H200; gpus.len()];
        for g in gpus {
            *slicing.get_mut(g.index as usize)? = tessera_region::slicing::for_model(&g.name);
        }
        Some(slicing)
    }

    /// Whether NVML is loaded.
    pub fn has_nvml(&self) -> bool {
        self.nvml.is_some()
    }

    /// Fills in what the watchdog sees: `gpus`, `unmanaged`, and per container the host pids
    /// of its processes, its real memory use per GPU, and a problem where that exceeds the
    /// cap. Everything else in `status` is read as the daemon built it. An NVML failure is
    /// logged (once until it changes) and leaves the GPU figures out.
    ///
    /// The first call reads every process of the node (about 0.1 s for a thousand); later
    /// ones read only new processes and a few due again: call it once when the daemon starts.
    pub fn observe(&mut self, status: &mut NodeStatus) {
        let gpus = match self.nvml.as_ref().map(Nvml::sample) {
            Some(Ok(gpus)) => {
                self.last_error = None;
                Some(gpus)
            }
            Some(Err(e)) => {
                // Once per kind of failure, not once per status.
                let e = e.to_string();
                if self.last_error.as_ref() != Some(&e) {
                    tracing::warn!("watchdog: {e}");
                    self.last_error = Some(e);
                }
                None
            }
            None => None,
        };
        // Its region, and those set aside whose processes live on through them.
        let files: Vec<Vec<FileId>> = status
            .containers
            .iter()
            .map(|c| {
                std::iter::once(&c.region)
                    .chain(&c.regions_set_aside)
                    .filter_map(|path| FileId::of(path).ok())
                    .collect()
            })
            .collect();
        self.maps.update(&self.ignore);
        let mut mapping = self.maps.mapping(&files);
        self.link_host_pids(status, &mapping);
        // Processes that may have mapped a region since they were last read: on a GPU but
        // in no container, or a container's process without a host pid (in a container
        // that shares the host's pid namespace, its pid is the host pid).
        let mut suspects: Vec<u32> = gpus
            .iter()
            .flatten()
            .flat_map(|g| g.processes.iter().map(|(pid, _)| *pid))
            .filter(|pid| !mapping.iter().any(|pids| pids.contains(pid)))
            .collect();
        for (container, pids) in status.containers.iter().zip(&mapping) {
            suspects.extend(
                container
                    .processes
                    .iter()
                    .filter(|p| p.host_pids.is_empty() && !pids.contains(&p.pid))
                    .map(|p| p.pid)
                    .filter(|&pid| self.maps.has(pid)),
            );
        }
        if !suspects.is_empty() {
            self.maps.reread(&suspects);
            mapping = self.maps.mapping(&files);
            self.link_host_pids(status, &mapping);
        }
        if let Some(gpus) = gpus {
            let over = judge(status, &gpus, &mapping, self.slack);
            self.enforce(status, over);
            if let Some(nvml) = &self.nvml {
                self.compute.observe(
                    Instant::now(),
                    |gpu, since| nvml.engine_use(gpu, since),
                    status,
                    &mapping,
                );
            }
        }
        for container in &mut status.containers {
            if let Some((count, why)) = self.kills.get(&container.name) {
                container.watchdog_kills = *count;
                container.problems.push(why.clone());
            }
        }
    }

    /// Acts on the containers found over their caps: tracks how long each has been, and
    /// with [`Enforce::Kill`] stops the processes of those over for the grace period.
    fn enforce(&mut self, status: &mut NodeStatus, over: Vec<OverCap>) {
        let now = Instant::now();
        let seen: HashSet<(String, u32)> = over
            .iter()
            .map(|o| (status.containers[o.container].name.clone(), o.gpu))
            .collect();
        self.over_since.retain(|key, _| seen.contains(key));
        for o in over {
            let container = &mut status.containers[o.container];
            let key = (container.name.clone(), o.gpu);
            let since = *self.over_since.entry(key.clone()).or_insert_with(|| {
                // The moment it is seen, whoever reads the status or not.
                tracing::error!(
                    "container {}: its processes hold {}MiB on GPU {} by NVML, over its cap of {} plus {} slack: a process allocates around libtessera.so, or the container rewrote its region's counts; {}",
                    key.0,
                    (o.real + (1 << 19)) >> 20,
                    o.gpu,
                    format_size(o.cap),
                    format_size(self.slack),
                    match self.enforce {
                        Enforce::Kill => format!(
                            "its processes on GPU {} are stopped if it stays over for {:?} (enforce = kill)",
                            o.gpu, self.grace
                        ),
                        Enforce::Report => "nothing is done about it (enforce = report)".to_string(),
                    }
                );
                now
            });
            if self.enforce == Enforce::Report {
                continue;
            }
            if now.duration_since(since) < self.grace {
                container.problems.push(format!(
                    "enforce = kill: its processes on GPU {} are stopped if it stays over its cap for {:?}",
                    o.gpu, self.grace
                ));
                continue;
            }
            let mut stopped = Vec::new();
            for &pid in &o.pids {
                // SAFETY: kill has no memory effects. The pid was listed by NVML on this GPU
                // and found mapping this container's region moments ago; a pid reused in
                // between would have to be another process of the same container.
                if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } == 0 {
                    stopped.push(pid.to_string());
                }
            }
            self.over_since.remove(&key);
            if stopped.is_empty() {
                continue;
            }
            let why = format!(
                "controld stopped pid(s) {} (enforce = kill): they held {}MiB on GPU {}, over its cap of {} plus {} slack, for longer than {:?}",
                stopped.join(", "),
                (o.real + (1 << 19)) >> 20,
                o.gpu,
                format_size(o.cap),
                format_size(self.slack),
                self.grace
            );
            tracing::error!("container {}: {why}", container.name);
            let entry = self
                .kills
                .entry(container.name.clone())
                .or_insert((0, String::new()));
            entry.0 += stopped.len() as u64;
            entry.1 = why;
        }
    }

    /// Gives each container process the host pids whose namespace pid is its pid.
    fn link_host_pids(&mut self, status: &mut NodeStatus, mapping: &[Vec<u32>]) {
        for (container, host_pids) in status.containers.iter_mut().zip(mapping) {
            for process in &mut container.processes {
                process.host_pids.clear();
            }
            for &host_pid in host_pids {
                let Some(pid) = self.maps.namespace_pid(host_pid) else {
                    continue;
                };
                for process in container.processes.iter_mut().filter(|p| p.pid == pid) {
                    process.host_pids.push(host_pid);
                }
            }
        }
    }
}

/// A container over its cap plus the slack on one GPU, by NVML.
#[derive(Debug)]
struct OverCap {
    /// Its index in the status.
    container: usize,
    gpu: u32,
    /// What its processes hold there, by NVML.
    real: u64,
    /// Its declared cap.
    cap: u64,
    /// Its host processes that hold memory there.
    pids: Vec<u32>,
}

/// Sets the GPU figures, the unmanaged processes and, per container, real memory use and
/// problems, from NVML's `gpus` and the host pids that map each container's region.
/// Returns the containers over their cap plus `slack`.
fn judge(
    status: &mut NodeStatus,
    gpus: &[GpuSample],
    mapping: &[Vec<u32>],
    slack: u64,
) -> Vec<OverCap> {
    let mut over = Vec::new();
    status.gpus = gpus
        .iter()
        .map(|g| GpuStatus {
            index: g.index,
            name: g.name.clone(),
            uuid: g.uuid.clone(),
            memory_total: g.memory_total,
            memory_used: g.memory_used,
            utilization_percent: g.utilization_percent,
        })
        .collect();
    let managed: HashSet<u32> = mapping.iter().flatten().copied().collect();
    status.unmanaged = gpus
        .iter()
        .flat_map(|g| g.processes.iter().map(move |p| (g.index, p)))
        .filter(|(_, (pid, _))| !managed.contains(pid))
        .map(|(gpu, &(pid, memory))| UnmanagedProcess {
            gpu,
            pid,
            memory: memory.unwrap_or(0),
        })
        .collect();
    let by_index: HashMap<u32, &GpuSample> = gpus.iter().map(|g| (g.index, g)).collect();
    for (index, (container, host_pids)) in status.containers.iter_mut().zip(mapping).enumerate() {
        for device in &mut container.devices {
            let Some(gpu) = by_index.get(&device.gpu) else {
                device.real_memory_used = None;
                continue;
            };
            let real: u64 = gpu
                .processes
                .iter()
                .filter(|(pid, _)| host_pids.binary_search(pid).is_ok())
                .map(|(_, memory)| memory.unwrap_or(0))
                .sum();
            device.real_memory_used = Some(real);
            if let Some(cap) = device.memory_cap {
                if real > cap.saturating_add(slack) {
                    // NVML's figure is rarely a round number: MiB, rounded, for people.
                    container.problems.push(format!(
                        "its processes hold {}MiB on GPU {}, over its cap of {}: something \
                         allocates without libtessera.so, or its region's counts were rewritten",
                        (real + (1 << 19)) >> 20,
                        device.gpu,
                        format_size(cap)
                    ));
                    over.push(OverCap {
                        container: index,
                        gpu: device.gpu,
                        real,
                        cap,
                        pids: gpu
                            .processes
                            .iter()
                            .map(|&(pid, _)| pid)
                            .filter(|pid| host_pids.binary_search(pid).is_ok())
                            .collect(),
                    });
                }
            }
        }
    }
    over
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ContainerDevice, ContainerStatus};
    use std::path::PathBuf;

    fn container(name: &str, cap: Option<u64>) -> ContainerStatus {
        ContainerStatus {
            name: name.to_string(),
            compute: "best-effort".to_string(),
            priority: "offline".to_string(),
            timeslice: "100us".to_string(),
            timeslice_state: "100us on 1 channel group".to_string(),
            timeslice_set_us: Some(100),
            timeslice_unavailable: false,
            region: PathBuf::from(format!("/nonexistent/{name}.region")),
            devices: vec![ContainerDevice {
                gpu: 0,
                memory_used: 0,
                memory_cap: cap,
                real_memory_used: None,
                share_target: None,
                share_measured: None,
                share_measured_until_ns: None,
                real_share: None,
                granted_ns: None,
                granted_until_ns: None,
                compute_held: false,
                compute_holds: 0,
                throttled_ns: 0,
                preemptions: 0,
            }],
            processes: Vec::new(),
            problems: Vec::new(),
            region_quarantines: 0,
            regions_set_aside: Vec::new(),
            watchdog_kills: 0,
        }
    }

    fn gpu(processes: Vec<(u32, Option<u64>)>) -> GpuSample {
        GpuSample {
            index: 0,
            name: "Simulated".to_string(),
            uuid: "GPU-0".to_string(),
            memory_total: 80 << 30,
            memory_used: 3 << 30,
            utilization_percent: Some(12.0),
            processes,
        }
    }

    #[test]
    fn attributes_by_host_pid_and_flags_the_rest() {
        let mut status = NodeStatus {
            containers: vec![container("a", Some(1 << 30)), container("b", Some(1 << 30))],
            ..NodeStatus::default()
        };
        let gpus = [gpu(vec![
            (10, Some(600 << 20)),
            (11, Some(600 << 20)),
            (20, Some(512 << 20)),
            (30, Some(256 << 20)),
            (31, None),
        ])];
        let over = judge(&mut status, &gpus, &[vec![10, 11], vec![20]], DEFAULT_SLACK);
        assert_eq!(over.len(), 1, "{over:?}");
        assert_eq!((over[0].container, &over[0].pids), (0, &vec![10, 11]));
        assert_eq!(status.gpus.len(), 1);
        assert_eq!(status.gpus[0].utilization_percent, Some(12.0));
        let unmanaged: Vec<(u32, u64)> =
            status.unmanaged.iter().map(|u| (u.pid, u.memory)).collect();
        assert_eq!(unmanaged, vec![(30, 256 << 20), (31, 0)]);
        let a = &status.containers[0];
        assert_eq!(a.devices[0].real_memory_used, Some(1200 << 20));
        assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
        assert!(a.problems[0].contains("1200MiB on GPU 0, over its cap of 1GiB"));
        let b = &status.containers[1];
        assert_eq!(b.devices[0].real_memory_used, Some(512 << 20));
        assert!(b.problems.is_empty());
    }

    #[test]
    fn slack_and_unlimited_caps_are_quiet() {
        let mut status = NodeStatus {
            containers: vec![container("a", Some(1 << 30)), container("b", None)],
            ..NodeStatus::default()
        };
        let gpus = [gpu(vec![
            (10, Some((1 << 30) + (2 << 20))),
            (20, Some(70 << 30)),
        ])];
        judge(&mut status, &gpus, &[vec![10], vec![20]], DEFAULT_SLACK);
        assert!(status.containers.iter().all(|c| c.problems.is_empty()));
        assert!(status.unmanaged.is_empty());
    }

    #[test]
    fn a_gpu_nvml_does_not_know_has_no_real_figure() {
        let mut status = NodeStatus {
            containers: vec![container("a", Some(1))],
            ..NodeStatus::default()
        };
        status.containers[0].devices[0].gpu = 3;
        judge(
            &mut status,
            &[gpu(vec![(10, Some(5 << 30))])],
            &[vec![10]],
            0,
        );
        assert_eq!(status.containers[0].devices[0].real_memory_used, None);
        assert!(status.containers[0].problems.is_empty());
    }

    #[test]
    fn without_nvml_it_only_links_pids() {
        let mut status = NodeStatus {
            containers: vec![container("a", Some(1))],
            ..NodeStatus::default()
        };
        let mut watchdog = Watchdog::without_nvml();
        assert!(!watchdog.has_nvml());
        watchdog.observe(&mut status);
        assert!(status.gpus.is_empty() && status.unmanaged.is_empty());
        assert_eq!(status.containers[0].devices[0].real_memory_used, None);
    }

    #[test]
    fn a_missing_library_is_an_error_that_names_it() {
        let e = Watchdog::with_library(OsStr::new("libtessera-no-such-nvml.so.1")).unwrap_err();
        assert!(
            e.to_string().contains("libtessera-no-such-nvml.so.1"),
            "{e}"
        );
    }
}
