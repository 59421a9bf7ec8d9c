//! Opening, creating and checking the node state file, and mapping it.

use super::layout::{NodeState, MAGIC, MAX_PROCESSES, SLOT_LIVE, STATE_SIZE, VERSION};
use super::NodeError;
use crate::config::NodeConfig;
use crate::device::{DeviceSpec, MAX_DEVICES, MAX_NAME_LEN};
use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use tessera_region::liveness;

/// What a process wants of a node it opens.
pub(super) enum Want<'a> {
    /// Only an existing node.
    Existing,
    /// Create the node if needed; rebuild it with `devices` and `config` when they differ
    /// from an existing node's and `insist` is set (the user named them) and no process
    /// lives on it.
    Create {
        devices: &'a [DeviceSpec],
        config: &'a NodeConfig,
        insist: bool,
    },
}

/// The state file, mapped shared.
pub(super) struct Mapping {
    state: NonNull<NodeState>,
    /// Kept open: its open file description owns this process's OFD locks (and only this
    /// descriptor refers to it; the mapping has a description of its own).
    pub file: File,
    pub path: PathBuf,
}

// SAFETY: the mapping is shared memory whose mutable fields are all atomics; the plain fields
// are written only before `ready` is published and never after.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub fn state(&self) -> &NodeState {
        // SAFETY: the pointer is a live MAP_SHARED mapping of STATE_SIZE bytes, as long as
        // `self`; every field written after creation is atomic.
        unsafe { self.state.as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference outlives `self`.
        unsafe { libc::munmap(self.state.as_ptr().cast(), STATE_SIZE) };
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> NodeError + '_ {
    move |source| NodeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, reason: impl Into<String>) -> NodeError {
    NodeError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(super) fn open(path: &Path, want: Want<'_>) -> Result<Mapping, NodeError> {
    let create = matches!(want, Want::Create { .. });
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if !create => NodeError::Missing(path.to_path_buf()),
            _ => io(path)(e),
        })?;
    // The whole-file flock serialises creation and checks; OFD byte locks are separate.
    file.lock().map_err(io(path))?;
    let result = open_locked(path, file, want);
    if let Ok(m) = &result {
        let _ = m.file.unlock();
    }
    result
}

fn open_locked(path: &Path, file: File, want: Want<'_>) -> Result<Mapping, NodeError> {
    let len = file.metadata().map_err(io(path))?.len();
    if len == 0 {
        if let Want::Create {
            devices, config, ..
        } = want
        {
            file.set_len(STATE_SIZE as u64).map_err(io(path))?;
            let m = map(path, file)?;
            initialize(&m, devices, config);
            return Ok(m);
        }
    }
    if len != STATE_SIZE as u64 {
        return Err(corrupt(
            path,
            format!("{len} bytes where a node state has {STATE_SIZE}"),
        ));
    }
    let m = map(path, file)?;
    check(&m)?;
    if let Want::Create {
        devices,
        config,
        insist: true,
    } = want
    {
        if !describes(&m, devices, config) && !anyone_alive(&m) {
            initialize(&m, devices, config);
        }
    }
    Ok(m)
}

fn map(path: &Path, file: File) -> Result<Mapping, NodeError> {
    use std::os::fd::AsRawFd;
    // A mapping keeps a reference to the open file description it was made from, and OFD
    // locks last as long as their description does. Mapping through `file` would let a
    // forked child, which inherits the mapping, keep this process's slot lock alive after
    // this process dies; so the mapping gets a description of its own, which holds no lock.
    let for_map = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(io(path))?;
    // SAFETY: maps the whole file (sized STATE_SIZE by the caller's check) shared and
    // read-write; the result is checked below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STATE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            for_map.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io(path)(std::io::Error::last_os_error()));
    }
    let state = NonNull::new(ptr.cast::<NodeState>()).expect("mmap never returns null");
    Ok(Mapping {
        state,
        file,
        path: path.to_path_buf(),
    })
}

fn initialize(m: &Mapping, devices: &[DeviceSpec], config: &NodeConfig) {
    let seed = random_seed();
    let raw = m.state.as_ptr();
    // A rebuilt node keeps its devices' UUIDs, as a machine's cards keep theirs when its
    // driver is set up anew: what recorded a card by UUID (a daemon's regions) still finds
    // it after a process that named other tunables rebuilt the node.
    // SAFETY: as below (the caller holds the file lock, nobody lives on the node); plain
    // reads inside the mapping.
    let kept: [[u8; 16]; MAX_DEVICES] = unsafe {
        let h = &(*raw).header;
        let valid = h.magic == MAGIC && h.version == VERSION;
        std::array::from_fn(|i| {
            if valid {
                (*raw).devices[i].uuid
            } else {
                [0; 16]
            }
        })
    };
    // SAFETY: the caller holds the file lock and no process lives on the node, so nobody
    // reads or writes it meanwhile; all-zero bytes are a valid NodeState (atomics and
    // integers), and the writes stay inside the mapping.
    unsafe {
        std::ptr::write_bytes(raw.cast::<u8>(), 0, STATE_SIZE);
        let h = &mut (*raw).header;
        h.magic = MAGIC;
        h.version = VERSION;
        h.device_count = devices.len() as u32;
        h.size = STATE_SIZE as u64;
        h.profile = config.profile;
        h.quantum_ns = config.quantum_ns;
        h.switch_ns = config.switch_ns;
        h.idle_switch_ns = config.idle_switch_ns;
        h.kernel_overhead_ns = config.kernel_overhead_ns;
        h.context_memory = config.context_memory;
        h.default_kernel_ns = config.default_kernel_ns;
        h.created_ns = crate::clock::now_ns();
        for (i, spec) in devices.iter().enumerate() {
            let d = &mut (*raw).devices[i];
            let name = spec.name.as_bytes();
            d.name[..name.len()].copy_from_slice(name);
            d.uuid = if kept[i] != [0; 16] {
                kept[i]
            } else {
                uuid_for(seed, i)
            };
            d.memory = spec.memory;
            d.sms = spec.sms;
            d.cc_major = spec.compute_capability.0;
            d.cc_minor = spec.compute_capability.1;
            d.pci_bus = 0x17 + i as u32;
        }
    }
    // Release: publishes the plain fields written above to every process whose Acquire load
    // in `check` sees 1.
    m.state().header.ready.store(1, Ordering::Release);
}

fn check(m: &Mapping) -> Result<(), NodeError> {
    let s = m.state();
    let h = &s.header;
    let bad = |reason: String| Err(corrupt(&m.path, reason));
    if h.magic != MAGIC {
        return bad("bad magic".into());
    }
    if h.version != VERSION {
        return bad(format!(
            "layout version {}, this simgpu reads {VERSION}",
            h.version
        ));
    }
    if h.size != STATE_SIZE as u64 {
        return bad(format!("header says {} bytes", h.size));
    }
    // Acquire: pairs with the Release store at the end of `initialize`.
    if h.ready.load(Ordering::Acquire) != 1 {
        return bad("creation never finished".into());
    }
    if !(1..=MAX_DEVICES as u32).contains(&h.device_count) {
        return bad(format!("{} devices", h.device_count));
    }
    if !(10_000..=1_000_000_000).contains(&h.quantum_ns) {
        return bad(format!("quantum of {} ns", h.quantum_ns));
    }
    if h.switch_ns > h.quantum_ns
        || h.idle_switch_ns > h.quantum_ns
        || h.kernel_overhead_ns > h.quantum_ns
    {
        return bad(format!(
            "switches of {} and {} ns",
            h.switch_ns, h.idle_switch_ns
        ));
    }
    for (i, d) in s.devices[..h.device_count as usize].iter().enumerate() {
        let name_ok = d.name[MAX_NAME_LEN..].iter().all(|&b| b == 0)
            && d.name[0] != 0
            && std::str::from_utf8(name_bytes(&d.name)).is_ok();
        if !name_ok || d.memory == 0 || d.sms == 0 {
            return bad(format!("device {i} is malformed"));
        }
    }
    Ok(())
}

/// The bytes of a NUL-padded name.
pub(super) fn name_bytes(raw: &[u8]) -> &[u8] {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    &raw[..end]
}

fn describes(m: &Mapping, devices: &[DeviceSpec], config: &NodeConfig) -> bool {
    let s = m.state();
    let h = &s.header;
    h.device_count as usize == devices.len()
        && h.profile == config.profile
        && h.quantum_ns == config.quantum_ns
        && h.switch_ns == config.switch_ns
        && h.idle_switch_ns == config.idle_switch_ns
        && h.kernel_overhead_ns == config.kernel_overhead_ns
        && h.context_memory == config.context_memory
        && h.default_kernel_ns == config.default_kernel_ns
        && devices.iter().zip(&s.devices).all(|(spec, d)| {
            name_bytes(&d.name) == spec.name.as_bytes()
                && d.memory == spec.memory
                && d.sms == spec.sms
                && (d.cc_major, d.cc_minor) == spec.compute_capability
        })
}

/// Whether any slot belongs to a process that is still alive.
pub(super) fn anyone_alive(m: &Mapping) -> bool {
    (0..MAX_PROCESSES).any(|slot| {
        m.state().processes[slot].state.load(Ordering::Acquire) == SLOT_LIVE
            && liveness::held_by_other(m.file.as_fd(), liveness::slot_byte(slot))
    })
}

fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into the 8-byte buffer.
    let n = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), 8, 0) };
    if n != 8 {
        // Unique enough for a simulated UUID.
        return crate::clock::now_ns() ^ (std::process::id() as u64) << 32;
    }
    u64::from_ne_bytes(seed)
}

fn uuid_for(seed: u64, index: usize) -> [u8; 16] {
    // splitmix64: spreads the seed so that device UUIDs differ in every byte.
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let a = mix(seed ^ (index as u64) << 1);
    let b = mix(a);
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&a.to_be_bytes());
    uuid[8..].copy_from_slice(&b.to_be_bytes());
    uuid
}
