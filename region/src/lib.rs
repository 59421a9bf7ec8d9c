//! The shared-memory ABI between `libtessera.so` and `controld`: one region per container,
//! read and written only through this crate.
//!
//! A region holds the container's name, a memory account per device (cap and usage) and a
//! process table. Each process of the container claims a [`ProcessSlot`], owned through an
//! OFD lock that the kernel drops when the process dies; any process that needs a slot or
//! hits a cap reaps the slots of dead processes and takes back their memory.
//!
//! ```no_run
//! use tessera_region::{Region, RegionInit, MAX_DEVICES};
//! let mut caps = [None; MAX_DEVICES];
//! caps[0] = Some(4 << 30);
//! let init = RegionInit { name: "team-a".into(), memory_caps: caps };
//! let region: &'static Region = Box::leak(Box::new(
//!     Region::open_or_create("/run/tessera/team-a.region".as_ref(), &init)?,
//! ));
//! let me = region.claim_slot()?;
//! if me.reserve_memory(0, 1 << 30).is_ok() {
//!     // ... allocate; on failure: me.release_memory(0, 1 << 30)
//! }
//! # Ok::<(), tessera_region::RegionError>(())
//! ```

#![warn(missing_docs)]

pub mod board;
pub mod compute;
pub mod env;
mod error;
pub mod fault;
mod file;
pub mod futex;
pub mod layout;
pub mod limits;
pub mod liveness;
mod memory;
mod name;
pub mod slicing;
mod slot;
mod small_file;
pub mod spans;
pub mod timeslice;
pub mod units;
pub mod uuid;

pub use board::{Board, BOARD_FILE};
pub use compute::{
    monotonic_ns, Woken, DAEMON_SILENT_NS, LOCAL_BURST_NS, LOCAL_REFILL_NS, MAX_DEBT_NS,
};
pub use error::RegionError;
pub use layout::{MAX_DEVICES, MAX_PROCESSES};
pub use limits::{limits_path, Limits};
pub use memory::OverCap;
pub use slot::{ProcessInfo, ProcessSlot};
pub use spans::BusySpan;
pub use timeslice::{TimesliceOutcome, TimesliceReport};

use layout::{ComputeAccount, DeviceAccount, RegionLayout, COMPUTE_UNLIMITED};
use memory::MemoryCap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Whether `name` is a valid container name: 1 to 63 of `a-z`, `0-9` and `-`, not starting
/// with `-` (what [`RegionInit::name`] accepts).
pub fn is_valid_name(name: &str) -> bool {
    name::is_valid(name)
}

/// What a new region holds: the container's name and its caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInit {
    /// The container's name: 1 to 63 of `a-z`, `0-9` and `-`, not starting with `-`.
    pub name: String,
    /// The memory cap of each device in bytes; `None` is unlimited.
    pub memory_caps: [Option<u64>; MAX_DEVICES],
}

/// A container's region, mapped shared into this process. `Send + Sync`: all shared state
/// is atomic.
pub struct Region {
    mapping: file::Mapping,
    /// Owns this process's slot locks (OFD locks belong to this open file description).
    lock_file: File,
    /// `/proc/self/fd/<lock_file>` as a C string, built ahead so that a fork child can
    /// reopen the file without allocating.
    reopen_proc: [u8; 32],
    /// The region's path as a C string, the fork child's second way to reopen it.
    reopen_path: Option<CString>,
    /// Set in a fork child that could not reopen the file: it can no longer own slots.
    lock_lost: AtomicBool,
    path: Option<PathBuf>,
    name: String,
    /// One bit per slot that a thread of this process owns or is working on (claiming,
    /// releasing, reaping). OFD locks exclude other processes but not this one — its own
    /// lock byte looks free to its own description — so these bits exclude its threads.
    local: [AtomicU64; MAX_PROCESSES / 64],
    /// Bumped in a fork child: slots claimed before the fork are the parent's, and inert
    /// in the child.
    generation: AtomicU64,
    /// The container's limits file beside the region, read-only, where `controld` made one:
    /// the caps its processes cannot write.
    limits: Option<Limits>,
}

// Both are shared between threads by the preload library.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Region>();
    shareable::<ProcessSlot>();
};

impl Region {
    /// Opens the region at `path`, creating it with `init` when no file is there. A new
    /// region is made whole under another name and linked into place, so concurrent
    /// callers agree on one region; an existing valid region keeps its own name and caps,
    /// and an existing spoiled file (empty, short, unfinished) is refused, never made again.
    /// A symbolic link at `path` is refused.
    pub fn open_or_create(path: &Path, init: &RegionInit) -> Result<Region, RegionError> {
        if !name::is_valid(&init.name) {
            return Err(RegionError::BadName(init.name.clone()));
        }
        Region::from_opened(file::open(path, Some(init))?, Some(path))
    }

    /// Opens an existing region; never creates or repairs one.
    pub fn open(path: &Path) -> Result<Region, RegionError> {
        Region::from_opened(file::open(path, None)?, Some(path))
    }

    /// A region in anonymous shared memory, seen only by this process and the children it
    /// forks: the fallback when there is no region file.
    pub fn anonymous(init: &RegionInit) -> Result<Region, RegionError> {
        if !name::is_valid(&init.name) {
            return Err(RegionError::BadName(init.name.clone()));
        }
        Region::from_opened(file::anonymous(init)?, None)
    }

    fn from_opened(opened: file::Opened, path: Option<&Path>) -> Result<Region, RegionError> {
        let file::Opened {
            mapping,
            lock_file,
            reopen,
        } = opened;
        let mut reopen_proc = [0u8; 32];
        let proc_path = format!("/proc/self/fd/{}", lock_file.as_raw_fd());
        reopen_proc[..proc_path.len()].copy_from_slice(proc_path.as_bytes());
        let name = name::from_field(&mapping.layout().header.name)
            .unwrap_or_default()
            .to_string();
        let limits = match path {
            Some(path) => Limits::open(&limits_path(path))?,
            None => None,
        };
        Ok(Region {
            mapping,
            lock_file,
            reopen_proc,
            reopen_path: reopen,
            lock_lost: AtomicBool::new(false),
            path: path.map(Path::to_path_buf),
            name,
            local: std::array::from_fn(|_| AtomicU64::new(0)),
            generation: AtomicU64::new(0),
            limits,
        })
    }

    pub(crate) fn layout(&self) -> &RegionLayout {
        self.mapping.layout()
    }

    /// A device's account as a cap with usage under it, held to the limits file's cap too.
    pub(crate) fn memory<'a>(&'a self, account: &'a DeviceAccount, dev: usize) -> MemoryCap<'a> {
        MemoryCap(account, self.limits.as_ref().and_then(|l| l.cap_word(dev)))
    }

    /// Whether the region has a limits file beside it (made by `controld`).
    pub fn has_limits(&self) -> bool {
        self.limits.is_some()
    }

    /// The cap that the region itself holds for device `dev`, whatever its limits file
    /// says (`controld` compares it with its own record); `None` when unlimited.
    pub fn own_memory_cap(&self, dev: usize) -> Option<u64> {
        match self.account(dev) {
            Some(a) => MemoryCap(a, None).cap(),
            None => Some(0),
        }
    }

    /// The device's account; `None` past [`MAX_DEVICES`].
    pub(crate) fn account(&self, dev: usize) -> Option<&DeviceAccount> {
        self.layout().devices.get(dev)
    }

    /// Device `dev`'s compute account (its launch gate, token bucket and busy bins).
    ///
    /// # Panics
    /// If `dev` is [`MAX_DEVICES`] or more.
    pub fn compute(&self, dev: usize) -> &ComputeAccount {
        &self.layout().compute[dev]
    }

    /// Sets device `dev`'s compute mode (`layout::COMPUTE_*`; ignored past
    /// [`MAX_DEVICES`]) and its bit in the header's `compute_limited`, then wakes the
    /// device's gate so that sleeping launches look again. The only way to change a mode.
    pub fn set_compute_mode(&self, dev: usize, mode: u32) {
        let Some(account) = self.layout().compute.get(dev) else {
            return;
        };
        // Relaxed: the mode is a single word read afresh at each launch; the wake-up below
        // orders it before the sleepers' next check.
        account.mode.store(mode, Ordering::Relaxed);
        let bit = 1u32 << dev;
        let limited: &AtomicU32 = &self.layout().header.compute_limited;
        // Relaxed (both): a summary of the modes, read afresh at each launch; a launch racing
        // with a change may take either path, as it may with the mode itself.
        if mode == COMPUTE_UNLIMITED {
            limited.fetch_and(!bit, Ordering::Relaxed);
        } else {
            limited.fetch_or(bit, Ordering::Relaxed);
        }
        account.wake_gate();
    }

    /// Takes device `dev` over from a daemon that has gone silent: when the device is in
    /// [`COMPUTE_DAEMON`](layout::COMPUTE_DAEMON) mode and its bucket was last refilled at
    /// least [`DAEMON_SILENT_NS`] before `now_ns`, one process of the container (the one
    /// whose compare-and-swap moves the refill time) lifts the block no one would lift and
    /// puts the device in local mode at the share the daemon left in `local_share_ppm`, so
    /// that the processes refill the bucket themselves. A daemon that adopts the region
    /// again sets its own mode. Returns whether this call took over.
    pub fn take_over_if_daemon_silent(&self, dev: usize, now_ns: u64) -> bool {
        let Some(a) = self.layout().compute.get(dev) else {
            return false;
        };
        // Relaxed (both): settings and a timestamp read afresh; the compare-and-swap below
        // makes the take-over one process's.
        if a.mode.load(Ordering::Relaxed) != layout::COMPUTE_DAEMON {
            return false;
        }
        // The region's refill time is the container's to write; the daemon's heartbeat in
        // the limits file is not.
        if self.limits.as_ref().is_some_and(|l| l.daemon_alive(now_ns)) {
            return false;
        }
        let last = a.last_refill_ns.load(Ordering::Relaxed);
        if last == 0 || now_ns.saturating_sub(last) < DAEMON_SILENT_NS {
            return false;
        }
        // Relaxed (both): see above.
        if a.last_refill_ns
            .compare_exchange(last, now_ns, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // SeqCst: the refiller's "change the block, then wake" of the gate protocol; the
        // mode change below wakes the gate.
        a.blocked.store(0, Ordering::SeqCst);
        self.set_compute_mode(dev, layout::COMPUTE_LOCAL);
        true
    }

    /// Bit `d` set while device `d`'s compute is limited, by the region header or by the
    /// daemon's copy in the limits file (which the container cannot clear). Two loads: a
    /// launch in a container with no limit anywhere looks no further.
    #[inline]
    pub fn compute_limited(&self) -> u32 {
        // Relaxed: see `set_compute_mode`.
        let own = self.layout().header.compute_limited.load(Ordering::Relaxed);
        own | self.limits.as_ref().map_or(0, Limits::compute_limited)
    }

    /// The region header's own `compute_limited` bits, without the limits file's
    /// (`controld` compares them with what it set).
    pub fn header_compute_limited(&self) -> u32 {
        // Relaxed: see `set_compute_mode`.
        self.layout().header.compute_limited.load(Ordering::Relaxed)
    }

    /// Whether device `dev`'s launches go through the gate at `now_ns`: its account's mode
    /// says so, or the daemon's copy does while the daemon is alive.
    pub fn device_limited(&self, dev: usize, now_ns: u64) -> bool {
        let Some(a) = self.layout().compute.get(dev) else {
            return false;
        };
        a.is_limited()
            || self.limits.as_ref().is_some_and(|l| {
                l.daemon_alive(now_ns) && l.compute_mode(dev) != layout::COMPUTE_UNLIMITED
            })
    }

    /// Whether the daemon, alive at `now_ns`, meters device `dev` itself: then its
    /// processes never refill its bucket, whatever mode the region says.
    pub fn daemon_meters(&self, dev: usize, now_ns: u64) -> bool {
        self.limits.as_ref().is_some_and(|l| {
            l.daemon_alive(now_ns) && l.compute_mode(dev) == layout::COMPUTE_DAEMON
        })
    }

    /// The board bits of device `dev` the daemon, alive at `now_ns`, says to ignore.
    pub fn board_ignore(&self, dev: usize, now_ns: u64) -> u64 {
        self.limits
            .as_ref()
            .filter(|l| l.daemon_alive(now_ns))
            .map_or(0, |l| l.board_ignore(dev))
    }

    /// Why launches on device `dev` must wait at `now_ns` by the daemon's word in the limits
    /// file (`HOLD_*` bits; 0 when they may go, or when the daemon is not alive).
    pub fn compute_hold(&self, dev: usize, now_ns: u64) -> u32 {
        self.limits
            .as_ref()
            .filter(|l| l.daemon_alive(now_ns))
            .map_or(0, |l| l.compute_hold(dev))
    }

    /// The region file; `None` for an anonymous region.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The memory cap of device `dev` in bytes; `None` when unlimited. A device past
    /// [`MAX_DEVICES`] has no account and a cap of 0.
    pub fn memory_cap(&self, dev: usize) -> Option<u64> {
        match self.account(dev) {
            Some(a) => self.memory(a, dev).cap(),
            None => Some(0),
        }
    }

    /// Sets the memory cap of device `dev` (ignored past [`MAX_DEVICES`]). A cap below the
    /// current usage takes nothing back; it stops new reservations until usage drops.
    pub fn set_memory_cap(&self, dev: usize, cap: Option<u64>) {
        if let Some(a) = self.account(dev) {
            MemoryCap(a, None).set_cap(cap);
        }
    }

    /// Checks, on the live mapping, what opening it checked: its file still whole (never
    /// shrunk under the mapping, still [`layout::TOTAL_SIZE`] bytes) and still the file at
    /// its path, and its header still a finished region of this layout, for this container.
    /// Any process of the container can overwrite, resize or replace its region, so
    /// `controld` calls this to notice a spoiled region and quarantine it.
    pub fn verify(&self) -> Result<(), RegionError> {
        file::verify_file(self.path.as_deref(), &self.mapping, &self.lock_file)?;
        let path = self.path.as_deref().unwrap_or(Path::new("anonymous"));
        file::verify(path, &self.mapping, &self.name)
    }

    /// Whether the region's file shrank under this process and its mapping was replaced
    /// with zeros ([`fault`]): nothing read from it is the container's any more.
    pub fn faulted(&self) -> bool {
        self.mapping.faulted()
    }

    /// Bytes the container's processes hold on device `dev`, all of them together.
    pub fn memory_used(&self, dev: usize) -> u64 {
        self.account(dev).map_or(0, |a| MemoryCap(a, None).used())
    }

    /// Bytes that the process slots hold on device `dev`, all together.
    fn slots_memory(&self, dev: usize) -> u64 {
        self.layout()
            .processes
            .iter()
            // Relaxed: momentary figures; `restore_memory_used` reads them twice.
            .map(|p| p.memory.get(dev).map_or(0, |m| m.load(Ordering::Relaxed)))
            .fold(0, u64::saturating_add)
    }

    /// Puts the container's usage on device `dev` back up to what its process slots hold,
    /// where a process lowered the counter below it (`controld`: the container's processes
    /// can write its region). Returns the counter before and after, if it raised it.
    ///
    /// Every reservation counts the container first and the slot second, and every release
    /// takes from the slot first, so the slots never hold more than the counter. A reading
    /// of the slots, the counter and the slots again, with the slots unchanged, whose
    /// counter is lower, is tampering; the counter is raised only if it still holds what
    /// was read (a compare-and-swap), so no reservation or release is lost.
    pub fn restore_memory_used(&self, dev: usize) -> Option<(u64, u64)> {
        let account = self.account(dev)?;
        let before = self.slots_memory(dev);
        // Relaxed: the compare-and-swap below is what decides.
        let used = account.memory_used.load(Ordering::Relaxed);
        let after = self.slots_memory(dev);
        if before != after || after <= used {
            return None;
        }
        // Relaxed (both): a counter with no data behind it (see `MemoryCap::reserve`).
        account
            .memory_used
            .compare_exchange(used, after, Ordering::Relaxed, Ordering::Relaxed)
            .ok()
            .map(|_| (used, after))
    }

    /// The GPUs the container was given, as a bit per device; `None` for every device.
    pub fn gpus(&self) -> Option<u32> {
        // Relaxed: a single word of its own, written by controld before the container's
        // processes start; nothing else is read on the strength of it.
        let mask = self.layout().header.gpus.load(Ordering::Relaxed);
        (mask != 0).then_some(mask)
    }

    /// Gives the container `gpus` (a bit per device; `None` for every device).
    pub fn set_gpus(&self, gpus: Option<u32>) {
        // Relaxed: as in `gpus`.
        self.layout()
            .header
            .gpus
            .store(gpus.unwrap_or(0), Ordering::Relaxed);
    }

    /// The UUID of device `dev` (the 16 bytes of its `GPU-…` text), where `controld` wrote
    /// it; `None` where unknown.
    pub fn uuid(&self, dev: usize) -> Option<[u8; 16]> {
        let account = self.layout().devices.get(dev)?;
        // Relaxed: written by controld with the GPUs, before the container's processes
        // start; a torn read mid-change names no device and is refused by the driver.
        let halves = account.uuid.each_ref().map(|h| h.load(Ordering::Relaxed));
        if halves == [0, 0] {
            return None;
        }
        let mut uuid = [0u8; 16];
        uuid[..8].copy_from_slice(&halves[0].to_be_bytes());
        uuid[8..].copy_from_slice(&halves[1].to_be_bytes());
        Some(uuid)
    }

    /// Records the UUID of device `dev` (`None`: unknown).
    pub fn set_uuid(&self, dev: usize, uuid: Option<[u8; 16]>) {
        let Some(account) = self.layout().devices.get(dev) else {
            return;
        };
        let uuid = uuid.unwrap_or_default();
        let halves =
            [&uuid[..8], &uuid[8..]].map(|h| u64::from_be_bytes(h.try_into().expect("8 bytes")));
        for (word, value) in account.uuid.iter().zip(halves) {
            // Relaxed: as in `uuid`.
            word.store(value, Ordering::Relaxed);
        }
    }

    /// The time slice the container's channel groups should have, in µs; `None` for the
    /// driver's own ([`layout::Header::timeslice_us`]).
    pub fn timeslice_us(&self) -> Option<u32> {
        // Relaxed: a single word of its own, read afresh whenever it matters; nothing else
        // is read on the strength of it.
        let us = self.layout().header.timeslice_us.load(Ordering::Relaxed);
        (us != 0).then_some(us)
    }

    /// Asks for `us` as the time slice of the container's channel groups (`None`: the
    /// driver's own).
    pub fn set_timeslice_us(&self, us: Option<u32>) {
        // Relaxed: as in `timeslice_us`.
        self.layout()
            .header
            .timeslice_us
            .store(us.unwrap_or(0), Ordering::Relaxed);
    }

    /// What the container's library last reported about the time slice.
    pub fn timeslice_report(&self) -> TimesliceReport {
        let h = &self.layout().header;
        // Relaxed (all): a report for people, written by the library as a whole after the
        // fact; a torn read mixes two true reports at worst.
        TimesliceReport {
            state: h.timeslice_state.load(Ordering::Relaxed),
            detail: h.timeslice_detail.load(Ordering::Relaxed),
            set_us: h.timeslice_set_us.load(Ordering::Relaxed),
        }
    }

    /// Reports what the library did about the time slice.
    pub fn report_timeslice(&self, report: TimesliceReport) {
        let h = &self.layout().header;
        // Relaxed (all): see `timeslice_report`.
        h.timeslice_set_us.store(report.set_us, Ordering::Relaxed);
        h.timeslice_detail.store(report.detail, Ordering::Relaxed);
        h.timeslice_state.store(report.state, Ordering::Relaxed);
    }

    /// What a context costs on device `dev`, as last measured by a process of the container
    /// ([`DeviceAccount::context_bytes`]); `None` until one was. Untrusted, like all of a
    /// region: a hint for reserving, never a figure anything is given back by.
    pub fn context_bytes(&self, dev: usize) -> Option<u64> {
        // Relaxed: a single word of its own; no other data is read on the strength of it.
        let bytes = self.account(dev)?.context_bytes.load(Ordering::Relaxed);
        (bytes != 0).then_some(bytes)
    }

    /// Records what a context was measured to cost on device `dev`.
    pub fn set_context_bytes(&self, dev: usize, bytes: u64) {
        if let Some(a) = self.account(dev) {
            // Relaxed: as in `context_bytes`.
            a.context_bytes.store(bytes, Ordering::Relaxed);
        }
    }

    /// Lets go, in a child created by `fork`, of the parent's slot locks; call it from a
    /// `pthread_atfork` child handler. The child shares the parent's lock file description,
    /// and with it the locks that keep the parent's slots alive: the child's descriptor is
    /// pointed at a new description of the same file (or at `/dev/null` when the file
    /// cannot be reopened), so the parent's slots die with the parent. Slots claimed before
    /// the fork become inert in the child; it claims its own. Async-signal-safe: no
    /// allocation or lock, only `open`, `dup3`, `close` and atomic stores.
    pub fn release_after_fork(&self) {
        // Relaxed (both): the child is single-threaded here; threads it starts later
        // synchronise with this thread when they are spawned.
        self.generation.fetch_add(1, Ordering::Relaxed);
        for word in &self.local {
            word.store(0, Ordering::Relaxed);
        }
        let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOCTTY;
        // SAFETY: `reopen_proc` is NUL-terminated (32 zeroed bytes, a shorter path written);
        // open is async-signal-safe.
        let mut fd = unsafe { libc::open(self.reopen_proc.as_ptr().cast(), flags) };
        if fd < 0 {
            if let Some(path) = &self.reopen_path {
                // SAFETY: a CString built before the fork; open is async-signal-safe.
                fd = unsafe { libc::open(path.as_ptr(), flags) };
            }
        }
        if fd < 0 {
            // Relaxed: read by this (single) thread and threads spawned after it.
            self.lock_lost.store(true, Ordering::Relaxed);
            // SAFETY: a NUL-terminated literal; async-signal-safe.
            fd = unsafe { libc::open(c"/dev/null".as_ptr(), flags) };
        }
        if fd >= 0 {
            // SAFETY: dup3 atomically replaces the descriptor `lock_file` owns, which stays
            // open (now on the new description), so the File never closes a descriptor
            // that is not its own; then the temporary descriptor is closed.
            unsafe {
                libc::dup3(fd, self.lock_file.as_raw_fd(), libc::O_CLOEXEC);
                libc::close(fd);
            }
        }
    }
}
