//! The node state: one shared-memory file that every process of the node maps.
//! (API sketch; bodies arrive next.)

use crate::config::NodeConfig;
use crate::device::{DeviceSpec, DeviceSpecError};
use serde::Serialize;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why the node state could not be used.
#[derive(Debug, Error)]
pub enum NodeError {
    /// `SIMGPU_DEVICES` is malformed.
    #[error(transparent)]
    Devices(#[from] DeviceSpecError),
    /// Another environment variable is malformed.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The state file could not be opened, created or mapped.
    #[error("cannot use the simgpu state file {path}: {source}")]
    Io {
        /// The state file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// The state file exists but is not a simgpu node state of this version.
    #[error("the simgpu state file {path} is corrupt or foreign ({reason}); run `simgpu reset` or point SIMGPU_STATE elsewhere")]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What check failed.
        reason: String,
    },
    /// The state file does not exist (for readers that never create it).
    #[error("no simgpu node at {0}: no process has used the simulated GPU yet")]
    Missing(PathBuf),
    /// Every process slot is taken by a live process.
    #[error("the simgpu node has no free process slot ({0} processes hold the GPUs)")]
    Full(usize),
}

/// One device as the node describes it.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    /// Ordinal.
    pub index: usize,
    /// Marketing name.
    pub name: String,
    /// 16 bytes, stable for the life of the node state.
    pub uuid: [u8; 16],
    /// Device memory in bytes.
    pub memory: u64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Compute capability.
    pub compute_capability: (u32, u32),
    /// PCI bus number.
    pub pci_bus: u32,
}

impl DeviceInfo {
    /// The UUID as NVML and `nvidia-smi` print it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn uuid_string(&self) -> String {
        let h: Vec<String> = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "GPU-{}-{}-{}-{}-{}",
            h[0..4].concat(),
            h[4..6].concat(),
            h[6..8].concat(),
            h[8..10].concat(),
            h[10..16].concat()
        )
    }
}

/// What a process holds on one device.
#[derive(Debug, Clone, Copy, Serialize, Default)]
pub struct ProcessDeviceUsage {
    /// Device memory in bytes (allocations and context overhead).
    pub memory: u64,
    /// Nanoseconds the device's engine ran this process's kernels.
    pub busy_ns: u64,
}

/// One live process of the node.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessSnapshot {
    /// Its pid, in the namespace of the process that attached.
    pub pid: u32,
    /// Its command name.
    pub name: String,
    /// Per device, indexed by ordinal.
    pub devices: Vec<ProcessDeviceUsage>,
}

/// One device's state.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceSnapshot {
    /// The device.
    #[serde(flatten)]
    pub info: DeviceInfo,
    /// Memory in use by all processes.
    pub memory_used: u64,
    /// Nanoseconds the engine has run kernels, all processes together.
    pub busy_ns: u64,
    /// The pid of the process that holds the engine now, if any.
    pub engine_owner: Option<u32>,
}

/// The whole node at one moment.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// The state file.
    pub state: PathBuf,
    /// When, on the node clock.
    pub taken_ns: u64,
    /// The devices.
    pub devices: Vec<DeviceSnapshot>,
    /// The live processes.
    pub processes: Vec<ProcessSnapshot>,
}

/// The mapped node state.
pub struct Node {
    _private: (),
}

/// The device would exceed its memory.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("out of device memory")]
pub struct OutOfMemory;

impl Node {
    /// Opens the node of `SIMGPU_STATE`, creating it with `SIMGPU_DEVICES` and the tunables
    /// of the environment if it does not exist (or no live process uses a different one).
    pub fn open_from_env() -> Result<Node, NodeError> {
        todo!()
    }
    /// Opens or creates the node state at `path`.
    pub fn open_or_create(
        _path: &Path,
        _devices: &[DeviceSpec],
        _config: &NodeConfig,
    ) -> Result<Node, NodeError> {
        todo!()
    }
    /// Opens an existing node state, never creating one.
    pub fn open_existing(_path: &Path) -> Result<Node, NodeError> {
        todo!()
    }
    /// Rewrites the node state at `path` from scratch.
    pub fn reset(_path: &Path, _devices: &[DeviceSpec], _config: &NodeConfig) -> Result<(), NodeError> {
        todo!()
    }
    /// The state file.
    pub fn path(&self) -> &Path {
        todo!()
    }
    /// The node's tunables.
    pub fn config(&self) -> NodeConfig {
        todo!()
    }
    /// Number of devices.
    pub fn device_count(&self) -> usize {
        todo!()
    }
    /// Device `index` (panics past `device_count`).
    pub fn device(&self, _index: usize) -> DeviceInfo {
        todo!()
    }
    /// Memory in use on a device by all processes.
    pub fn memory_used(&self, _device: usize) -> u64 {
        todo!()
    }
    /// Returns the slots and memory of processes that died; how many it reaped.
    pub fn reap(&self) -> usize {
        todo!()
    }
    /// Devices and live processes now (reaps first).
    pub fn snapshot(&self) -> Snapshot {
        todo!()
    }
    /// Claims a process slot for the calling process; it is held until the process exits.
    pub fn attach(&'static self) -> Result<Process, NodeError> {
        todo!()
    }
}

/// The calling process's slot in the node.
pub struct Process {
    _private: (),
}

impl Process {
    /// The node.
    pub fn node(&self) -> &'static Node {
        todo!()
    }
    /// Reserves `bytes` on a device for this process, or fails without changing anything
    /// when the device would exceed its memory (after reaping dead processes once).
    pub fn reserve_memory(&self, _device: usize, _bytes: u64) -> Result<(), OutOfMemory> {
        todo!()
    }
    /// Returns `bytes` reserved earlier.
    pub fn release_memory(&self, _device: usize, _bytes: u64) {
        todo!()
    }
    /// Memory this process holds on a device.
    pub fn memory_held(&self, _device: usize) -> u64 {
        todo!()
    }
    /// The engine of a device, as this process sees it.
    pub fn engine(&self, _device: usize) -> crate::engine::Engine<'_> {
        todo!()
    }
}
