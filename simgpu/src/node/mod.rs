//! The node state: one shared-memory file that every process of the node maps, holding the
//! devices, what each process holds on each, and each device's engine.

mod file;
pub(crate) mod handoff;
mod layout;
mod seat;

use crate::config::{self, NodeConfig};
use crate::device::{parse_devices, DeviceSpec, DeviceSpecError, DEFAULT_DEVICES, MAX_DEVICES};
use file::{Mapping, Want};
pub(crate) use layout::{DeviceState, NodeState, MAX_PROCESSES};
use layout::{SLOT_FREE, SLOT_LIVE};
pub(crate) use seat::EngineSeat;
use serde::Serialize;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use tessera_region::liveness;
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
    /// The engine time of the kernels it completed, each counted whole (more than
    /// `busy_ns` where they ran at once): the work it got done.
    pub work_ns: u64,
    /// The time slice its context gets on the engine, in ns: the node's quantum unless a
    /// control on its channel group set another.
    pub timeslice_ns: u64,
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
    map: Mapping,
    /// The slot this process attached through this node, or `usize::MAX`: a process never
    /// reaps itself (its own lock byte looks free to its own file description).
    attached: AtomicUsize,
}

/// The device would exceed its memory.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("out of device memory")]
pub struct OutOfMemory;

impl Node {
    /// Opens the node of `SIMGPU_STATE`, creating it from `SIMGPU_DEVICES` and the tunables
    /// of the environment if it does not exist. When those variables are set and differ from
    /// an existing node that no live process uses, the node is rebuilt to match them.
    pub fn open_from_env() -> Result<Node, NodeError> {
        let named = std::env::var(config::ENV_DEVICES)
            .ok()
            .filter(|v| !v.trim().is_empty());
        let devices = parse_devices(named.as_deref().unwrap_or(DEFAULT_DEVICES))?;
        let config = NodeConfig::from_env(&devices)?;
        let tuned = [
            config::ENV_PROFILE,
            config::ENV_QUANTUM_US,
            config::ENV_CONTEXT_MEMORY,
            config::ENV_KERNEL_NS,
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
        let map = file::open(
            &config::state_path(),
            Want::Create {
                devices: &devices,
                config: &config,
                insist: named.is_some() || tuned,
            },
        )?;
        Ok(Node::from(map))
    }

    /// Opens or creates the node state at `path`, rebuilding it when it describes other
    /// devices or tunables and no live process uses it.
    pub fn open_or_create(
        path: &Path,
        devices: &[DeviceSpec],
        config: &NodeConfig,
    ) -> Result<Node, NodeError> {
        let map = file::open(
            path,
            Want::Create {
                devices,
                config,
                insist: true,
            },
        )?;
        Ok(Node::from(map))
    }

    /// Opens an existing node state, never creating one.
    pub fn open_existing(path: &Path) -> Result<Node, NodeError> {
        Ok(Node::from(file::open(path, Want::Existing)?))
    }

    /// Replaces the node state at `path` with a new one. Processes still running keep the
    /// old file (it is unlinked, not rewritten), so they cannot corrupt the new node.
    pub fn reset(
        path: &Path,
        devices: &[DeviceSpec],
        config: &NodeConfig,
    ) -> Result<(), NodeError> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(NodeError::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
        Node::open_or_create(path, devices, config).map(drop)
    }

    fn state(&self) -> &NodeState {
        self.map.state()
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.map.path
    }

    /// The node's tunables.
    pub fn config(&self) -> NodeConfig {
        let h = &self.state().header;
        NodeConfig {
            profile: h.profile,
            quantum_ns: h.quantum_ns,
            switch_ns: h.switch_ns,
            idle_switch_ns: h.idle_switch_ns,
            kernel_overhead_ns: h.kernel_overhead_ns,
            context_memory: h.context_memory,
            default_kernel_ns: h.default_kernel_ns,
        }
    }

    /// Number of devices.
    pub fn device_count(&self) -> usize {
        self.state().header.device_count as usize
    }

    pub(crate) fn device_state(&self, index: usize) -> &DeviceState {
        assert!(index < self.device_count(), "no device {index}");
        &self.state().devices[index]
    }

    /// Device `index` (panics past `device_count`).
    pub fn device(&self, index: usize) -> DeviceInfo {
        let d = self.device_state(index);
        DeviceInfo {
            index,
            name: String::from_utf8_lossy(file::name_bytes(&d.name)).into_owned(),
            uuid: d.uuid,
            memory: d.memory,
            sms: d.sms,
            compute_capability: (d.cc_major, d.cc_minor),
            pci_bus: d.pci_bus,
        }
    }

    /// Memory in use on a device by all processes. Memory of processes that have ended is
    /// returned first, as a real driver frees a process's memory when it ends.
    pub fn memory_used(&self, device: usize) -> u64 {
        self.reap();
        // Relaxed: a momentary figure; no other memory is read on the strength of it.
        self.device_state(device).used.load(Ordering::Relaxed)
    }

    /// Returns the slots and memory of processes that died; how many it reaped.
    pub fn reap(&self) -> usize {
        (0..MAX_PROCESSES)
            .filter(|&slot| self.reap_slot(slot))
            .count()
    }

    /// Reaps `slot` if its process is dead. The OFD lock of a live slot is held by its
    /// owner; taking it proves the owner gone, and holding it keeps other reapers and
    /// claimers off the slot while its memory is returned.
    fn reap_slot(&self, slot: usize) -> bool {
        let p = &self.state().processes[slot];
        // Acquire: pairs with the Release store that published the slot in `attach`.
        if p.state.load(Ordering::Acquire) != SLOT_LIVE {
            return false;
        }
        let fd = self.map.file.as_fd();
        if self.attached.load(Ordering::Relaxed) == slot
            || !matches!(liveness::try_lock(fd, liveness::slot_byte(slot)), Ok(true))
        {
            return false;
        }
        if p.state.load(Ordering::Acquire) != SLOT_LIVE {
            liveness::unlock(fd, liveness::slot_byte(slot));
            return false;
        }
        for dev in 0..self.device_count() {
            let d = self.device_state(dev);
            // AcqRel: the swap takes the dead process's figure exactly once, and the
            // subtraction is ordered after it.
            let held = p.memory[dev].swap(0, Ordering::AcqRel);
            d.used.fetch_sub(held, Ordering::AcqRel);
            handoff::forget(d, slot);
        }
        // Release: the returned memory and the engine are visible before the slot is free.
        p.state.store(SLOT_FREE, Ordering::Release);
        liveness::unlock(fd, liveness::slot_byte(slot));
        true
    }

    /// Devices and live processes now (reaps first).
    pub fn snapshot(&self) -> Snapshot {
        self.reap();
        let s = self.state();
        let quantum_ns = self.config().quantum_ns;
        let devices = (0..self.device_count())
            .map(|i| {
                let d = self.device_state(i);
                let owner = d.engine.owner.load(Ordering::Relaxed);
                DeviceSnapshot {
                    info: self.device(i),
                    memory_used: d.used.load(Ordering::Relaxed),
                    busy_ns: d.busy_ns.load(Ordering::Relaxed),
                    engine_owner: (owner != 0)
                        .then(|| s.processes[owner as usize - 1].pid.load(Ordering::Relaxed)),
                }
            })
            .collect();
        let processes = s
            .processes
            .iter()
            .filter(|p| p.state.load(Ordering::Acquire) == SLOT_LIVE)
            .map(|p| {
                let mut name = [0u8; 16];
                name[..8].copy_from_slice(&p.name[0].load(Ordering::Relaxed).to_ne_bytes());
                name[8..].copy_from_slice(&p.name[1].load(Ordering::Relaxed).to_ne_bytes());
                ProcessSnapshot {
                    pid: p.pid.load(Ordering::Relaxed),
                    name: String::from_utf8_lossy(file::name_bytes(&name)).into_owned(),
                    devices: (0..self.device_count())
                        .map(|d| ProcessDeviceUsage {
                            memory: p.memory[d].load(Ordering::Relaxed),
                            busy_ns: p.busy_ns[d].load(Ordering::Relaxed),
                            work_ns: p.work_ns[d].load(Ordering::Relaxed),
                            timeslice_ns: match p.timeslice_ns[d].load(Ordering::Relaxed) {
                                0 => quantum_ns,
                                ns => ns,
                            },
                        })
                        .collect(),
                }
            })
            .collect();
        Snapshot {
            state: self.path().to_path_buf(),
            taken_ns: crate::clock::now_ns(),
            devices,
            processes,
        }
    }

    /// Claims a process slot for the calling process, held until the process exits (or
    /// forks a child that uses the GPU: the child must attach on its own).
    pub fn attach(&'static self) -> Result<Process, NodeError> {
        let fd = self.map.file.as_fd();
        for round in 0..2 {
            for slot in 0..MAX_PROCESSES {
                let p = &self.state().processes[slot];
                if p.state.load(Ordering::Acquire) != SLOT_FREE
                    || !matches!(liveness::try_lock(fd, liveness::slot_byte(slot)), Ok(true))
                {
                    continue;
                }
                // We hold the lock: nobody else claims or reaps this slot now.
                if p.state.load(Ordering::Acquire) != SLOT_FREE {
                    liveness::unlock(fd, liveness::slot_byte(slot));
                    continue;
                }
                // Relaxed: published by the Release store of the state below.
                p.pid.store(std::process::id(), Ordering::Relaxed);
                let name = command_name();
                p.name[0].store(
                    u64::from_ne_bytes(name[..8].try_into().unwrap()),
                    Ordering::Relaxed,
                );
                p.name[1].store(
                    u64::from_ne_bytes(name[8..].try_into().unwrap()),
                    Ordering::Relaxed,
                );
                for dev in 0..MAX_DEVICES {
                    p.memory[dev].store(0, Ordering::Relaxed);
                    p.busy_ns[dev].store(0, Ordering::Relaxed);
                    p.work_ns[dev].store(0, Ordering::Relaxed);
                    p.timeslice_ns[dev].store(0, Ordering::Relaxed);
                }
                // Release: pairs with the Acquire loads of readers and reapers.
                p.state.store(SLOT_LIVE, Ordering::Release);
                // Relaxed: read only by this process's own reaps, which need no order with it.
                self.attached.store(slot, Ordering::Relaxed);
                return Ok(Process {
                    node: self,
                    slot,
                    seats: std::array::from_fn(|_| Mutex::new(EngineSeat::default())),
                    visible: (0..self.device_count()).collect(),
                });
            }
            if round == 0 && self.reap() == 0 {
                break;
            }
        }
        Err(NodeError::Full(MAX_PROCESSES))
    }

    /// Lets go of this process's hold on its slot in a child created by `fork`, from a
    /// `pthread_atfork` child handler. The child shares the parent's open file description,
    /// and with it the OFD lock that keeps the parent's slot alive; pointing the child's
    /// descriptor at `/dev/null` drops the child's reference, so the slot dies with the
    /// parent. The child keeps the mapping but must not attach or reap through this node.
    /// Only async-signal-safe calls are made.
    pub fn release_after_fork(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: open and dup2 are async-signal-safe; the path is a NUL-terminated literal;
        // dup2 atomically replaces the descriptor the node owns, which stays open (now on
        // /dev/null), so the File never closes a descriptor that is not its own.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
            if null >= 0 {
                libc::dup3(null, self.map.file.as_raw_fd(), libc::O_CLOEXEC);
                libc::close(null);
            }
        }
    }

    /// Whether the process in `slot` is alive (its lock byte is held by someone else).
    pub(crate) fn slot_alive(&self, slot: usize) -> bool {
        self.attached.load(Ordering::Relaxed) == slot
            || liveness::held_by_other(self.map.file.as_fd(), liveness::slot_byte(slot))
    }

    pub(crate) fn process_state(&self, slot: usize) -> &layout::ProcessState {
        &self.state().processes[slot]
    }
}

impl From<Mapping> for Node {
    fn from(map: Mapping) -> Node {
        Node {
            map,
            attached: AtomicUsize::new(usize::MAX),
        }
    }
}

fn command_name() -> [u8; 16] {
    let mut name = [0u8; 16];
    if let Ok(comm) = std::fs::read("/proc/self/comm") {
        let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
        let n = comm.len().min(15);
        name[..n].copy_from_slice(&comm[..n]);
    }
    name
}

/// The node devices a list names, in its order, as the driver reads `CUDA_VISIBLE_DEVICES`:
/// a comma-separated list of indexes into `all` or UUIDs (`GPU-` and a prefix of the UUID's
/// text long enough to name one device); the list ends at the first entry that names no
/// device, or one named already; unset, every device in order.
pub fn devices_named(setting: Option<&str>, all: &[DeviceInfo]) -> Vec<usize> {
    let Some(setting) = setting else {
        return (0..all.len()).collect();
    };
    let mut out = Vec::new();
    for entry in setting.split(',').map(str::trim) {
        let found = if let Ok(index) = entry.parse::<usize>() {
            (index < all.len()).then_some(index)
        } else {
            let prefix = entry.to_ascii_lowercase();
            let mut matching = all.iter().enumerate().filter(|(_, d)| {
                !prefix.is_empty() && d.uuid_string().to_ascii_lowercase().starts_with(&prefix)
            });
            match (matching.next(), matching.next()) {
                (Some((i, _)), None) => Some(i),
                _ => None,
            }
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            _ => break,
        }
    }
    out
}

/// The node devices a container runtime shows this process ([`config::ENV_CONTAINER_DEVICES`]),
/// in the order it numbers them; every device where it names none.
pub fn container_devices(node: &Node) -> Vec<usize> {
    let all: Vec<DeviceInfo> = (0..node.device_count()).map(|i| node.device(i)).collect();
    let setting = std::env::var(config::ENV_CONTAINER_DEVICES).ok();
    devices_named(setting.as_deref().filter(|s| !s.trim().is_empty()), &all)
}

/// The calling process's slot in the node.
///
/// The devices a process names are its own ordinals: the node's devices it sees, in the
/// order it sees them (all of them, unless [`Process::see_only`] chose some, as
/// `CUDA_VISIBLE_DEVICES` does); every method here takes an ordinal and keeps its figures
/// under the node's index of that device.
pub struct Process {
    node: &'static Node,
    slot: usize,
    seats: [Mutex<EngineSeat>; MAX_DEVICES],
    /// The node index of each ordinal.
    visible: Vec<usize>,
}

impl Process {
    /// Sees only `devices` (node indexes, each once, all on the node), in that order.
    pub fn see_only(mut self, devices: Vec<usize>) -> Process {
        debug_assert!(devices.iter().all(|&d| d < self.node.device_count()));
        self.visible = devices;
        self
    }

    /// The node index of ordinal `device` (an ordinal past the visible ones is passed
    /// through, and fails where the node has no such device).
    pub fn node_index(&self, device: usize) -> usize {
        self.visible.get(device).copied().unwrap_or(device)
    }

    /// The node.
    pub fn node(&self) -> &'static Node {
        self.node
    }

    /// This process's slot number.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Reserves `bytes` on a device for this process, or fails without changing anything
    /// when the device would exceed its memory (after reaping dead processes once).
    pub fn reserve_memory(&self, device: usize, bytes: u64) -> Result<(), OutOfMemory> {
        let device = self.node_index(device);
        let d = self.node.device_state(device);
        for attempt in 0..2 {
            // AcqRel: the compare-and-swap is the only way `used` grows, so concurrent
            // reservations in any process can never together pass the device's memory.
            let fits = d
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(bytes).filter(|&n| n <= d.memory)
                })
                .is_ok();
            if fits {
                self.node.process_state(self.slot).memory[device]
                    .fetch_add(bytes, Ordering::AcqRel);
                return Ok(());
            }
            if attempt == 0 && self.node.reap() == 0 {
                break;
            }
        }
        Err(OutOfMemory)
    }

    /// Returns `bytes` reserved earlier.
    pub fn release_memory(&self, device: usize, bytes: u64) {
        let device = self.node_index(device);
        let mine = &self.node.process_state(self.slot).memory[device];
        // Never return more than this process holds: a double free in the caller must not
        // hand another process's memory out.
        let taken = match mine.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            Some(held.saturating_sub(bytes))
        }) {
            Ok(held) => held.min(bytes),
            Err(_) => 0,
        };
        self.node
            .device_state(device)
            .used
            .fetch_sub(taken, Ordering::AcqRel);
    }

    /// Memory this process holds on a device.
    pub fn memory_held(&self, device: usize) -> u64 {
        let device = self.node_index(device);
        self.node.process_state(self.slot).memory[device].load(Ordering::Relaxed)
    }

    /// Sets the time slice of this process's context on a device (an ordinal), in ns; 0
    /// for the node's quantum. What a control on the context's channel group does.
    pub fn set_timeslice(&self, device: usize, ns: u64) {
        let device = self.node_index(device);
        // Relaxed: a setting read afresh at each of the engine's slice boundaries.
        self.node.process_state(self.slot).timeslice_ns[device].store(ns, Ordering::Relaxed);
    }

    /// The time slice of this process's context on node device `device`, in ns.
    pub(crate) fn timeslice(&self, device: usize) -> u64 {
        // Relaxed: see `set_timeslice`.
        match self.node.process_state(self.slot).timeslice_ns[device].load(Ordering::Relaxed) {
            0 => self.node.config().quantum_ns,
            ns => ns,
        }
    }

    /// This process's hold on node device `device`'s engine.
    pub(crate) fn seat(&self, device: usize) -> &Mutex<EngineSeat> {
        &self.seats[device]
    }
}
