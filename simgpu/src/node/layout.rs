//! The byte layout of the node state file. Every process of the node maps it, so it is
//! `#[repr(C)]`, versioned, and holds only atomics once initialised: fields that look plain
//! are written once, under the file lock, before `Header::ready` is published.

use crate::device::MAX_DEVICES;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// First bytes of every node state file.
pub const MAGIC: [u8; 8] = *b"SIMGPU\0\0";
/// Bumped whenever the layout changes.
pub const VERSION: u32 = 3;
/// The most processes that hold a slot at once.
pub const MAX_PROCESSES: usize = 256;
/// Words of the per-device bitmask of processes waiting for the engine.
pub const WAIT_WORDS: usize = MAX_PROCESSES / 64;

/// Slot states.
pub const SLOT_FREE: u32 = 0;
/// The slot belongs to a process that held its lock byte when it published this.
pub const SLOT_LIVE: u32 = 1;

#[repr(C)]
pub struct Header {
    pub magic: [u8; 8],
    pub version: u32,
    pub device_count: u32,
    /// Size of the whole file; checked against `size_of::<NodeState>()`.
    pub size: u64,
    pub quantum_ns: u64,
    pub context_memory: u64,
    pub default_kernel_ns: u64,
    pub created_ns: u64,
    /// Set (Release) last during creation; readers check it (Acquire) before trusting the rest.
    pub ready: AtomicU32,
    /// The hardware profile, an index of `crate::profile::PROFILES`.
    pub profile: u32,
    pub switch_ns: u64,
    pub idle_switch_ns: u64,
    pub kernel_overhead_ns: u64,
    pub _pad: [u8; 40],
}

#[repr(C, align(64))]
pub struct DeviceState {
    pub name: [u8; 64],
    pub uuid: [u8; 16],
    pub memory: u64,
    pub sms: u32,
    pub cc_major: u32,
    pub cc_minor: u32,
    pub pci_bus: u32,
    /// Bytes reserved by all processes; never above `memory`.
    pub used: AtomicU64,
    /// Nanoseconds the engine ran kernels, all processes together.
    pub busy_ns: AtomicU64,
    pub engine: EngineState,
}

/// One device's execution engine: who holds it, and who waits.
#[repr(C, align(64))]
pub struct EngineState {
    /// Slot + 1 of the holder; 0 when free.
    pub owner: AtomicU32,
    /// Futex word: bumped at every change of `owner`, so a waiter that read it before
    /// looking at `owner` cannot sleep through a hand-off.
    pub epoch: AtomicU32,
    /// Engine time at which the engine was last handed off or freed: the next holder
    /// starts no earlier.
    pub handoff_ns: AtomicU64,
    /// Dead time a holder other than the last one starts after `handoff_ns`: the switch away
    /// from the last holder (cut in the middle of its kernels, or out of work).
    pub switch_ns: AtomicU64,
    /// Slot + 1 of the last holder: it starts again at `handoff_ns` without a switch.
    pub last_holder: AtomicU32,
    /// The last holder's time slice, in ns: a switch costs less between short slices
    /// (see `crate::engine`).
    pub last_slice_ns: AtomicU64,
    /// Slots waiting for the engine, one bit each.
    pub waiting: [AtomicU64; WAIT_WORDS],
}

#[repr(C, align(64))]
pub struct ProcessState {
    pub state: AtomicU32,
    pub pid: AtomicU32,
    /// The command name, NUL-padded, as two words so that it can be read while written.
    pub name: [AtomicU64; 2],
    pub memory: [AtomicU64; MAX_DEVICES],
    pub busy_ns: [AtomicU64; MAX_DEVICES],
    /// The engine time of the kernels it completed, each counted whole: more than
    /// `busy_ns` where its kernels ran at once.
    pub work_ns: [AtomicU64; MAX_DEVICES],
    /// The time slice of the process's context on each device, in ns, as a control on its
    /// channel group set it; 0 for the node's quantum.
    pub timeslice_ns: [AtomicU64; MAX_DEVICES],
}

#[repr(C)]
pub struct NodeState {
    pub header: Header,
    pub devices: [DeviceState; MAX_DEVICES],
    pub processes: [ProcessState; MAX_PROCESSES],
}

/// The size every node state file of this version has.
pub const STATE_SIZE: usize = std::mem::size_of::<NodeState>();

const _: () = assert!(std::mem::size_of::<Header>() == 128);
const _: () = assert!(std::mem::align_of::<NodeState>() == 64);
