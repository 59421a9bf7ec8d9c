//! The environment simgpu reads, declared once, and the node-wide tunables kept in the state.

use crate::units::parse_size;
use std::path::PathBuf;
use thiserror::Error;

/// Devices of a new node: presets or `name:memory:sms[:cc]`, comma-separated.
pub const ENV_DEVICES: &str = "SIMGPU_DEVICES";
/// The node state file shared by every process of the node.
pub const ENV_STATE: &str = "SIMGPU_STATE";
/// Time slice of the execution engine between processes, in microseconds (default 1000).
pub const ENV_QUANTUM_US: &str = "SIMGPU_QUANTUM_US";
/// Device memory each context costs (default 300MiB).
pub const ENV_CONTEXT_MEMORY: &str = "SIMGPU_CONTEXT_MEMORY";
/// Duration of a kernel simgpu does not know by name, in nanoseconds (default 20000).
pub const ENV_KERNEL_NS: &str = "SIMGPU_KERNEL_NS";
/// A file of device indices that the simulated NVML reports lost (see simgpu-nvml's `faults`).
pub const ENV_FAULTS: &str = "SIMGPU_FAULTS";

/// Node-wide tunables, fixed when the node state is created so that all processes agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeConfig {
    /// The engine's time slice between processes.
    pub quantum_ns: u64,
    /// Device memory each context costs.
    pub context_memory: u64,
    /// Duration of a kernel simgpu does not know by name.
    pub default_kernel_ns: u64,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            quantum_ns: 1_000_000,
            context_memory: 300 << 20,
            default_kernel_ns: 20_000,
        }
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
    /// Reads the tunables from the environment, defaults for those unset.
    pub fn from_env() -> Result<NodeConfig, ConfigError> {
        let mut config = NodeConfig::default();
        let read = |name: &'static str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let err = |name: &'static str, value: &str, reason: &str| ConfigError {
            name,
            value: value.to_string(),
            reason: reason.to_string(),
        };
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
