//! The environment simgpu reads, declared once, and the node-wide tunables kept in the state.

use crate::device::DeviceSpec;
use crate::profile::{self, Profile};
use crate::units::parse_size;
use std::path::PathBuf;
use thiserror::Error;

/// Devices of a new node: presets or `name:memory:sms[:cc]`, comma-separated.
pub const ENV_DEVICES: &str = "SIMGPU_DEVICES";
/// The node state file shared by every process of the node.
pub const ENV_STATE: &str = "SIMGPU_STATE";
/// The devices a container runtime gave the process, as `NVIDIA_VISIBLE_DEVICES` names them
/// (node indexes or UUIDs, comma-separated): its driver and NVML see only these, numbered
/// from 0 in this order, as NVIDIA's runtime shows a container only the cards it mounted.
/// Unset, every device of the node.
pub const ENV_CONTAINER_DEVICES: &str = "SIMGPU_CONTAINER_DEVICES";
/// The hardware profile (`h200`, `a100`, `t4` or `free`; default: the first device's model's).
pub const ENV_PROFILE: &str = "SIMGPU_PROFILE";
/// Time slice of the execution engine between processes, in microseconds (default: the
/// profile's).
pub const ENV_QUANTUM_US: &str = "SIMGPU_QUANTUM_US";
/// Device memory each context costs (default: the profile's).
pub const ENV_CONTEXT_MEMORY: &str = "SIMGPU_CONTEXT_MEMORY";
/// Duration of a kernel simgpu does not know by name, in nanoseconds (default 20000).
pub const ENV_KERNEL_NS: &str = "SIMGPU_KERNEL_NS";
/// A file of device indices that the simulated NVML reports lost (see simgpu-nvml's `faults`).
pub const ENV_FAULTS: &str = "SIMGPU_FAULTS";
/// How the process's resource manager answers, as some real drivers do: `refuse-timeslice`
/// (a channel group's time slice cannot be changed: `NV_ERR_INSUFFICIENT_PERMISSIONS`) or
/// `hidden` (the driver's requests are not made through `ioctl`, so nothing sees its channel
/// groups). Read by each process at `cuInit`.
pub const ENV_RM: &str = "SIMGPU_RM";

/// Node-wide tunables, fixed when the node state is created so that all processes agree:
/// a hardware profile's figures ([`crate::profile`]), some of them overridden by the
/// environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeConfig {
    /// The profile, as an index of [`profile::PROFILES`]: its host costs per driver call.
    pub profile: u32,
    /// The engine's time slice between processes.
    pub quantum_ns: u64,
    /// Dead time of a switch away from a process cut in the middle of its kernels.
    pub switch_ns: u64,
    /// Dead time of a switch away from a process that had run out of work.
    pub idle_switch_ns: u64,
    /// Engine time each kernel takes beyond its own work.
    pub kernel_overhead_ns: u64,
    /// Device memory each context costs.
    pub context_memory: u64,
    /// Duration of a kernel simgpu does not know by name.
    pub default_kernel_ns: u64,
}

impl NodeConfig {
    /// The figures of the profile at `index` of [`profile::PROFILES`].
    pub fn of_profile(index: usize) -> NodeConfig {
        let p = profile::at(index as u32);
        NodeConfig {
            profile: index as u32,
            quantum_ns: p.slicing.timeslice_ns,
            switch_ns: p.slicing.switch_ns,
            idle_switch_ns: p.slicing.idle_switch_ns,
            kernel_overhead_ns: p.kernel_overhead_ns,
            context_memory: p.context_memory,
            default_kernel_ns: 20_000,
        }
    }

    /// The profile whose figures these are (before the environment's overrides).
    pub fn profile(&self) -> &'static Profile {
        profile::at(self.profile)
    }
}

/// Why the environment was refused.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("{name}=`{value}`: {reason}")]
pub struct ConfigError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What is wrong, and what is accepted.
    pub reason: String,
}

impl NodeConfig {
    /// Reads the tunables from the environment for a node of `devices`: the profile named by
    /// `SIMGPU_PROFILE`, else the first device's model's, with the figures the environment
    /// sets instead.
    pub fn from_env(devices: &[DeviceSpec]) -> Result<NodeConfig, ConfigError> {
        let read = |name: &'static str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let err = |name: &'static str, value: &str, reason: &str| ConfigError {
            name,
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let index = match read(ENV_PROFILE) {
            Some(v) => profile::by_name(&v).map(|(i, _)| i).ok_or_else(|| {
                let names: Vec<&str> = profile::PROFILES.iter().map(|p| p.name).collect();
                err(
                    ENV_PROFILE,
                    &v,
                    &format!("expected one of {}", names.join(", ")),
                )
            })?,
            None => profile::for_model(devices.first().map_or("", |d| d.name.as_str())).0,
        };
        let mut config = NodeConfig::of_profile(index);
        if let Some(v) = read(ENV_QUANTUM_US) {
            let us: u64 = v
                .trim()
                .parse()
                .ok()
                .filter(|us| (10..=1_000_000).contains(us))
                .ok_or_else(|| {
                    err(
                        ENV_QUANTUM_US,
                        &v,
                        "expected microseconds from 10 to 1000000",
                    )
                })?;
            config.quantum_ns = us * 1000;
        }
        if let Some(v) = read(ENV_CONTEXT_MEMORY) {
            config.context_memory =
                parse_size(&v).map_err(|e| err(ENV_CONTEXT_MEMORY, &v, &e.to_string()))?;
        }
        if let Some(v) = read(ENV_KERNEL_NS) {
            config.default_kernel_ns = v
                .trim()
                .parse()
                .ok()
                .filter(|ns| *ns <= 10_000_000_000)
                .ok_or_else(|| err(ENV_KERNEL_NS, &v, "expected nanoseconds up to 10000000000"))?;
        }
        Ok(config)
    }
}

/// The state file: `SIMGPU_STATE`, or a per-user file in `/dev/shm` (shared memory, so the
/// mapping never writes back to a disk).
pub fn state_path() -> PathBuf {
    match std::env::var_os(ENV_STATE) {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        // SAFETY: getuid has no preconditions and cannot fail.
        _ => PathBuf::from(format!("/dev/shm/simgpu-{}.state", unsafe {
            libc::getuid()
        })),
    }
}
