//! What `controld status` shows and the metrics export: the node at one moment. Sent over the
//! control socket as JSON, so every field is plain data.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The node at one moment.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeStatus {
    /// When, in milliseconds since the Unix epoch.
    pub taken_unix_ms: u64,
    /// The GPUs of the node, as NVML sees them.
    pub gpus: Vec<GpuStatus>,
    /// The containers controld manages.
    pub containers: Vec<ContainerStatus>,
    /// Processes on a GPU that belong to no container (found by the watchdog).
    pub unmanaged: Vec<UnmanagedProcess>,
    /// Node-wide problems for people to read: quarantined region files, a config reload that
    /// failed (the running config stays in force).
    #[serde(default)]
    pub problems: Vec<String>,
}

/// One GPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuStatus {
    /// NVML index.
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Device memory in bytes.
    pub memory_total: u64,
    /// Device memory in use by every process, in bytes.
    pub memory_used: u64,
    /// Engine utilization over the last sample period, when NVML gives one.
    pub utilization_percent: Option<f64>,
}

/// One container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerStatus {
    /// Its name.
    pub name: String,
    /// Its compute policy, as written in the config (`fixed:30`, `burst:50`, `best-effort`).
    pub compute: String,
    /// `online` or `offline`.
    pub priority: String,
    /// Its channel groups' GPU time slice as asked (`100us`, `driver`).
    #[serde(default)]
    pub timeslice: String,
    /// What its processes did of it, in words: `100 µs on 2 channel groups`, or why it is
    /// not available; empty where the driver's is asked.
    #[serde(default)]
    pub timeslice_state: String,
    /// The time slice in force on its channel groups, in µs; `None` where Tessera set none
    /// (the driver's is asked, nothing is done yet, or it is not available).
    #[serde(default)]
    pub timeslice_set_us: Option<u32>,
    /// A time slice is asked and its processes could not set it (`timeslice_state` says
    /// why): the launch gate alone holds the container back.
    #[serde(default)]
    pub timeslice_unavailable: bool,
    /// Its region file.
    pub region: PathBuf,
    /// Region files of it set aside (quarantined) whose processes still live: they keep
    /// their memory through them, and are its processes all the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions_set_aside: Vec<PathBuf>,
    /// Per GPU it may use.
    pub devices: Vec<ContainerDevice>,
    /// Its live processes.
    pub processes: Vec<ContainerProcess>,
    /// What is wrong with it (a bypassed cap, a quarantined region), for people to read.
    pub problems: Vec<String>,
    /// How often its region was found spoiled (truncated, resized, replaced, overwritten)
    /// and set aside since the daemon started.
    #[serde(default)]
    pub region_quarantines: u64,
    /// How many of its processes the watchdog stopped for holding more than their cap
    /// (`enforce = "kill"`).
    #[serde(default)]
    pub watchdog_kills: u64,
}

/// A container on one GPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerDevice {
    /// NVML index of the GPU.
    pub gpu: u32,
    /// Memory the container's processes hold, by its region's count.
    pub memory_used: u64,
    /// Its cap as the daemon declared it (not as its region says); `None` is unlimited.
    pub memory_cap: Option<u64>,
    /// Memory its processes really hold, by NVML (the watchdog's figure).
    pub real_memory_used: Option<u64>,
    /// The share of GPU time it should get, 0–1.
    pub share_target: Option<f64>,
    /// The share of GPU time it got over the last second, 0–1.
    pub share_measured: Option<f64>,
    /// When that second ended, on the node clock (ns of `CLOCK_MONOTONIC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_measured_until_ns: Option<u64>,
    /// The share of GPU time its processes really used over about the last second, 0–1,
    /// by NVML's per-process utilization (the watchdog's figure; nothing it writes changes
    /// it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub real_share: Option<f64>,
    /// The GPU time the scheduler granted it so far, in ns: each tick's `share_target`
    /// over the time to the next, counted up to `granted_until_ns`. A share swings with
    /// every online request on the GPU; a use over a span of time is weighed against this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_ns: Option<u64>,
    /// Up to when `granted_ns` counts, on the node clock (ns of `CLOCK_MONOTONIC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_until_ns: Option<u64>,
    /// Held by the daemon until what it ran past its grant is paid back (the watchdog's
    /// verdict, enforced through the limits file).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compute_held: bool,
    /// How often the watchdog has held it on this GPU since the daemon started.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compute_holds: u64,
    /// Time its launches waited for tokens, in nanoseconds.
    pub throttled_ns: u64,
    /// How often online work preempted it.
    pub preemptions: u64,
}

/// A live process of a container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerProcess {
    /// Its slot in the region.
    pub slot: usize,
    /// Its pid in the container's pid namespace.
    pub pid: u32,
    /// Its pid(s) on the host: processes that map the region file.
    pub host_pids: Vec<u32>,
    /// Memory it holds, per device of the region.
    pub memory: Vec<u64>,
}

/// A process on a GPU outside every container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnmanagedProcess {
    /// NVML index of the GPU.
    pub gpu: u32,
    /// Host pid.
    pub pid: u32,
    /// Memory it holds on that GPU, in bytes.
    pub memory: u64,
}

/// Whether a count is zero (left out of the JSON then).
fn is_zero(n: &u64) -> bool {
    *n == 0
}
