//! This process's view of its container: the region shared with the container's other
//! processes (and with `controld`), this process's slot in it, and the memory caps.
//!
//! Everything here is made on first use by a hooked call, never while the dynamic linker
//! or `dlsym` is running: the first allocation, query or context call pays for it.

mod local_share;
mod timeslice;

use crate::fork_lock::{self, ForkLock};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tessera_region::layout::MEASURE_LOCK;
use tessera_region::liveness;
use tessera_region::{
    units, Board, OverCap, ProcessSlot, Region, RegionInit, BOARD_FILE, MAX_DEVICES,
};

/// Per-device memory caps: `None` is unlimited.
pub(crate) type MemoryCaps = [Option<u64>; MAX_DEVICES];

/// The container state of this process.
pub(crate) struct Container {
    region: &'static Region,
}

static REGION: OnceLock<Region> = OnceLock::new();
/// The node's priority board beside the region file, where `controld` keeps one.
static BOARD: OnceLock<Board> = OnceLock::new();
static CONTAINER: OnceLock<Option<Container>> = OnceLock::new();

/// This process's slot, leaked once claimed; null until the first reservation and again in
/// a fork child, which claims its own.
static SLOT: AtomicPtr<ProcessSlot> = AtomicPtr::new(std::ptr::null_mut());
/// Held while one thread claims the slot.
static CLAIMING: ForkLock<()> = ForkLock::new(());
/// Set once a slot claim failed, so that the error is reported once.
static CLAIM_FAILED: AtomicBool = AtomicBool::new(false);
/// Per device, the bytes this process has reserved for operations still in progress (live
/// [`Reservation`]s): counted already, perhaps not yet in the driver. A reading of the
/// driver's own figure for this process is compared with what the process counts less
/// these (see `memory::context::true_up`).
static IN_FLIGHT: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// The container state, made on first use; `None` only if not even a private region could
/// be mapped (then nothing is counted and every call goes straight to the driver).
pub(crate) fn get() -> Option<&'static Container> {
    CONTAINER.get_or_init(init).as_ref()
}

fn init() -> Option<Container> {
    let (caps, problems) = caps_from_env(|name| std::env::var_os(name), env_limit_names());
    for problem in &problems {
        crate::tlog!(error, "{problem}");
    }
    let region = open_region(&caps)?;
    let region = REGION.get_or_init(|| region);
    local_share::apply(region);
    timeslice::apply_env(region);
    Some(Container { region })
}

/// The container state if it was made already; never makes it (for calls inside other
/// libraries' requests, where opening files is not ours to do).
pub(crate) fn peek() -> Option<&'static Container> {
    CONTAINER.get().and_then(Option::as_ref)
}

/// The region named by the environment or, without one, a private region with the
/// environment's caps. A region file that cannot be used fails closed: a private region
/// with a cap of 0 bytes everywhere, unless `TESSERA_REGION_FALLBACK=env` asks for the
/// environment's caps.
fn open_region(caps: &MemoryCaps) -> Option<Region> {
    let path = std::env::var_os(crate::env::REGION).filter(|p| !p.is_empty());
    let mut caps = *caps;
    if let Some(path) = path {
        let path = Path::new(&path);
        // Any process of the container can shrink the region file under this one's
        // mapping: with the guard, that reads zeros (and fails closed, see
        // `memory::admit`) instead of killing this process with SIGBUS.
        if let Err(e) = tessera_region::fault::install() {
            crate::tlog!(
                warn,
                "cannot guard the region against being shrunk ({e}): a process of the container that shrinks it kills this one"
            );
        }
        let init = RegionInit {
            name: container_name(path),
            memory_caps: caps,
        };
        match Region::open_or_create(path, &init) {
            Ok(region) => {
                open_board(path);
                return Some(region);
            }
            Err(e) => match crate::env::var(crate::env::REGION_FALLBACK).as_deref() {
                Some(crate::env::REGION_FALLBACK_ENV) => crate::tlog!(
                    error,
                    "{e}; this process uses the memory limits of its environment ({}={})",
                    crate::env::REGION_FALLBACK,
                    crate::env::REGION_FALLBACK_ENV
                ),
                other => {
                    let odd = match other {
                        Some(v) if !v.is_empty() => {
                            format!(
                                " ({}={v:?} is not `{}`)",
                                crate::env::REGION_FALLBACK,
                                crate::env::REGION_FALLBACK_ENV
                            )
                        }
                        _ => String::new(),
                    };
                    crate::tlog!(
                        error,
                        "{e}; every allocation of this process fails with out-of-memory{odd}; set {}={} to use the memory limits of its environment instead",
                        crate::env::REGION_FALLBACK,
                        crate::env::REGION_FALLBACK_ENV
                    );
                    caps = [Some(0); MAX_DEVICES];
                }
            },
        }
    }
    let init = RegionInit {
        name: STANDALONE.to_string(),
        memory_caps: caps,
    };
    match Region::anonymous(&init) {
        Ok(region) => Some(region),
        Err(e) => {
            crate::tlog!(error, "{e}; memory is not limited in this process");
            None
        }
    }
}

/// Maps the board in the region's directory, if `controld` made one there: for writing
/// where the file allows it (online containers), else for reading.
fn open_board(region: &Path) {
    let Some(path) = region.parent().map(|d| d.join(BOARD_FILE)) else {
        return;
    };
    if !path.exists() {
        return;
    }
    match Board::open(&path) {
        Ok(board) => {
            let _ = BOARD.set(board);
        }
        Err(e) => crate::tlog!(
            warn,
            "{e}; online work here stops offline work through controld alone"
        ),
    }
}

/// The node's priority board, if this container has one.
#[inline]
pub(crate) fn board() -> Option<&'static Board> {
    BOARD.get()
}

/// The name of a container that has no region file, or whose file name makes no name.
const STANDALONE: &str = "standalone";

/// The name a region created by the library gets: its file name, in the characters a
/// container name allows (a daemon-made region keeps the name the daemon gave it).
pub(crate) fn container_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .skip_while(|&c| c == '-')
        .take(63)
        .collect();
    if name.is_empty() {
        STANDALONE.to_string()
    } else {
        name
    }
}

/// The names of the environment variables that may set a cap: every `TESSERA_MEMORY_LIMIT*`.
fn env_limit_names() -> Vec<String> {
    std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| name.starts_with(crate::env::MEMORY_LIMIT))
        .collect()
}

/// The caps that `TESSERA_MEMORY_LIMIT` (every device) and `TESSERA_MEMORY_LIMIT_<i>`
/// (device i, winning over the former) set, and what is wrong with them, one line each. A
/// malformed value caps at zero: a mistyped limit must never mean "unlimited".
pub(crate) fn caps_from_env<V: AsRef<OsStr>>(
    lookup: impl Fn(&str) -> Option<V>,
    mut names: Vec<String>,
) -> (MemoryCaps, Vec<String>) {
    let mut problems = Vec::new();
    let parse = |name: &str, problems: &mut Vec<String>| -> Option<u64> {
        let value = lookup(name)?;
        let value = value.as_ref();
        match value.to_str().map(|v| units::parse_size(v.trim())) {
            Some(Ok(bytes)) => Some(bytes),
            _ => {
                problems.push(format!(
                    "{name}={value:?} is not a size (like 4GiB or 512MiB); the limit is 0 bytes"
                ));
                Some(0)
            }
        }
    };
    let mut caps = [parse(crate::env::MEMORY_LIMIT, &mut problems); MAX_DEVICES];
    names.sort();
    for name in &names {
        let Some(index) = name.strip_prefix(crate::env::MEMORY_LIMIT_DEVICE) else {
            continue;
        };
        match index.parse::<usize>() {
            Ok(i) if i < MAX_DEVICES && index == i.to_string() => {
                caps[i] = parse(name, &mut problems)
            }
            _ => problems.push(format!(
                "{name} names no device (use {limit}0 to {limit}{last}); it is ignored",
                limit = crate::env::MEMORY_LIMIT_DEVICE,
                last = MAX_DEVICES - 1
            )),
        }
    }
    (caps, problems)
}

impl Container {
    /// The container's region.
    #[inline(always)]
    pub(crate) fn region(&self) -> &'static Region {
        self.region
    }

    /// The container's cap on `device`, if it has one.
    pub(crate) fn memory_cap(&self, device: usize) -> Option<u64> {
        (device < MAX_DEVICES)
            .then(|| self.region.memory_cap(device))
            .flatten()
    }

    /// What the container's processes hold on `device`.
    pub(crate) fn memory_used(&self, device: usize) -> u64 {
        if device < MAX_DEVICES {
            self.region.memory_used(device)
        } else {
            0
        }
    }

    /// Returns the memory of the container's processes that died to the container, when
    /// some may hold memory on `device`: that is, unless everything the container holds
    /// there is this process's own (every slot's bytes are part of the container's figure,
    /// so then no other slot, dead or alive, holds any). Reaping visits every slot of the
    /// region (1024 cache lines), the most of a memory query's cost; a process alone in its
    /// container skips it.
    pub(crate) fn reap_dead_holding(&self, device: usize) {
        if !others_may_hold(self.memory_used(device), self.memory_held(device)) {
            return;
        }
        self.region.reap_dead();
    }

    /// What this process holds on `device`; 0 before it has a slot (never claims one).
    pub(crate) fn memory_held(&self, device: usize) -> u64 {
        // Acquire: pairs with the Release store in `claim_slot` (see `slot`).
        let slot = SLOT.load(Ordering::Acquire);
        if slot.is_null() {
            return 0;
        }
        // SAFETY: a non-null SLOT points to a leaked, never freed ProcessSlot.
        unsafe { &*slot }.memory_held(device)
    }

    /// This process's slot, claimed on first use (and again in a fork child).
    pub(crate) fn slot(&self) -> Option<&'static ProcessSlot> {
        // Acquire: pairs with the Release store in `claim_slot`, so that the slot's fields
        // are visible before it is used.
        let slot = SLOT.load(Ordering::Acquire);
        if slot.is_null() {
            return self.claim_slot();
        }
        // SAFETY: a non-null SLOT points to a leaked, never freed ProcessSlot.
        Some(unsafe { &*slot })
    }

    #[cold]
    fn claim_slot(&self) -> Option<&'static ProcessSlot> {
        // The lock orders the previous claim's SLOT store before the load below.
        let claiming = CLAIMING.lock();
        // Relaxed: CLAIMING's acquire already orders this load after the last claim.
        let mut slot = SLOT.load(Ordering::Relaxed);
        if slot.is_null() {
            match self.region.claim_slot() {
                Ok(s) => {
                    slot = Box::into_raw(Box::new(s));
                    // Release: publishes the slot to the Acquire loads in `slot`.
                    SLOT.store(slot, Ordering::Release);
                }
                Err(e) => {
                    // Relaxed: only decides whether to log.
                    if !CLAIM_FAILED.swap(true, Ordering::Relaxed) {
                        crate::tlog!(error, "{e}; allocations on limited devices fail");
                    }
                }
            }
        }
        drop(claiming);
        // SAFETY: non-null slots are leaked boxes, never freed.
        (!slot.is_null()).then(|| unsafe { &*slot })
    }

    /// Reserves `bytes` on `device` for this process, against the container's cap.
    pub(crate) fn reserve(&self, device: usize, bytes: u64) -> Result<Reservation, OverCap> {
        let cap = || OverCap {
            cap: self.memory_cap(device).unwrap_or(0),
            used: self.memory_used(device),
        };
        if device >= MAX_DEVICES {
            return Ok(Reservation::none());
        }
        let Some(slot) = self.slot() else {
            // Without a slot nothing can be counted: a limited device refuses, others run
            // uncounted.
            return match self.memory_cap(device) {
                Some(_) => Err(cap()),
                None => Ok(Reservation::none()),
            };
        };
        slot.reserve_memory(device, bytes)?;
        // Relaxed: a figure for readings that tolerate a moment's lag (see `IN_FLIGHT`).
        IN_FLIGHT[device].fetch_add(bytes, Ordering::Relaxed);
        Ok(Reservation {
            slot: Some(slot),
            device,
            bytes,
        })
    }

    /// The bytes on `device` this process has reserved for operations still in progress.
    pub(crate) fn in_flight(&self, device: usize) -> u64 {
        // Relaxed: a momentary figure, read beside the slot's, which is as momentary.
        IN_FLIGHT
            .get(device)
            .map_or(0, |b| b.load(Ordering::Relaxed))
    }

    /// Gives back `bytes` on `device` that this process reserved under `generation`.
    pub(crate) fn release(&self, device: usize, bytes: u64, generation: u32) {
        if generation != fork_lock::generation() || device >= MAX_DEVICES {
            return;
        }
        // Relaxed: this thread made the reservation being given back, or learnt of it
        // through the registry's lock, which orders the SLOT store before.
        let slot = SLOT.load(Ordering::Relaxed);
        if !slot.is_null() {
            // SAFETY: non-null slots are leaked boxes, never freed.
            unsafe { &*slot }.release_memory(device, bytes);
        }
    }
}

/// How long a measurement waits for another process's before measuring anyway: a process
/// stopped in the middle of its own must not stop this one for good.
const MEASURE_LOCK_PATIENCE: Duration = Duration::from_secs(10);

impl Container {
    /// Excludes the context measurements of the container's other processes until dropped
    /// (see `memory::context`): two contexts made at once would each be measured with the
    /// other's memory. `None` for a region without a file (one process and its children,
    /// serialised by the caller) or after waiting too long.
    pub(crate) fn measurement_lock(&self) -> Option<MeasureLock> {
        let path = self.region.path()?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .ok()?;
        let deadline = Instant::now() + MEASURE_LOCK_PATIENCE;
        loop {
            match liveness::try_lock(file.as_fd(), MEASURE_LOCK) {
                Ok(true) => return Some(MeasureLock { file }),
                Ok(false) => {}
                Err(e) => {
                    crate::tlog!(debug, "cannot lock the region for a measurement: {e}");
                    return None;
                }
            }
            if Instant::now() >= deadline {
                crate::tlog!(
                    warn,
                    "another process of the container has been measuring a context for {}s; measuring anyway",
                    MEASURE_LOCK_PATIENCE.as_secs()
                );
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Held while a context is measured; see [`Container::measurement_lock`].
pub(crate) struct MeasureLock {
    file: std::fs::File,
}

impl Drop for MeasureLock {
    fn drop(&mut self) {
        // Unlocked explicitly, not only by closing: a child forked meanwhile shares the
        // open file description and would otherwise keep the lock alive.
        liveness::unlock(self.file.as_fd(), MEASURE_LOCK);
    }
}

/// Whether a container holding `used` bytes on a device, of which this process holds
/// `mine`, may have other processes — dead ones among them — holding some there.
///
/// `mine` is read before `used`. A thread of this process reserving meanwhile adds to the
/// container before its slot, a release takes from the slot first: either way `used` can
/// only look larger, which reaps (the safe answer). The one miss: other processes holding
/// exactly what a concurrent release of this process took from its slot but not yet from
/// the container; one query then shows them, and the next reaps.
fn others_may_hold(used: u64, mine: u64) -> bool {
    used != mine
}

/// Bytes held for an operation in progress: given back when dropped, unless kept.
#[must_use]
pub(crate) struct Reservation {
    slot: Option<&'static ProcessSlot>,
    device: usize,
    bytes: u64,
}

impl Reservation {
    /// Nothing reserved: the device is uncounted.
    fn none() -> Reservation {
        Reservation {
            slot: None,
            device: 0,
            bytes: 0,
        }
    }

    /// Whether bytes are held, so that the allocation must be recorded.
    pub(crate) fn is_counted(&self) -> bool {
        self.slot.is_some()
    }

    /// Changes the reservation to `bytes`, reserving more against the cap if needed.
    pub(crate) fn resize(&mut self, bytes: u64) -> Result<(), OverCap> {
        let Some(slot) = self.slot else {
            return Ok(());
        };
        // Relaxed throughout: see `IN_FLIGHT`.
        if bytes > self.bytes {
            slot.reserve_memory(self.device, bytes - self.bytes)?;
            IN_FLIGHT[self.device].fetch_add(bytes - self.bytes, Ordering::Relaxed);
        } else {
            slot.release_memory(self.device, self.bytes - bytes);
            settle_in_flight(self.device, self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }

    /// The bytes reserved.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The allocation succeeded: the bytes stay held until it is freed. Returns them (0 if
    /// nothing was counted).
    pub(crate) fn keep(mut self) -> u64 {
        match self.slot.take() {
            Some(_) => {
                settle_in_flight(self.device, self.bytes);
                self.bytes
            }
            None => 0,
        }
    }
}

/// A reservation of `bytes` on `device` is no longer in progress.
fn settle_in_flight(device: usize, bytes: u64) {
    // Relaxed: see `IN_FLIGHT`. Saturating: a fork child starts from zero while a
    // reservation the parent's thread made before the fork may still end in the child.
    let _ = IN_FLIGHT[device].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
        Some(v.saturating_sub(bytes))
    });
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            slot.release_memory(self.device, self.bytes);
            settle_in_flight(self.device, self.bytes);
        }
    }
}

/// Called by the fork child handler: the child claims its own slot at its next hooked call;
/// the parent's records stay the parent's.
///
/// Async-signal-safe: atomic stores and the region's own fork-safe release only.
pub(crate) fn after_fork_in_child() {
    // Relaxed throughout: the child has one thread until it returns from fork.
    SLOT.store(std::ptr::null_mut(), Ordering::Relaxed);
    CLAIM_FAILED.store(false, Ordering::Relaxed);
    for bytes in &IN_FLIGHT {
        bytes.store(0, Ordering::Relaxed);
    }
    if let Some(region) = REGION.get() {
        region.release_after_fork();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn caps(vars: &[(&str, &str)]) -> MemoryCaps {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let names = map.keys().cloned().collect();
        caps_from_env(|name| map.get(name).cloned(), names).0
    }

    #[test]
    fn no_limit_is_unlimited() {
        assert_eq!(caps(&[]), [None; MAX_DEVICES]);
    }

    #[test]
    fn one_limit_caps_every_device() {
        assert_eq!(
            caps(&[("TESSERA_MEMORY_LIMIT", "1GiB")]),
            [Some(1 << 30); MAX_DEVICES]
        );
    }

    #[test]
    fn a_device_limit_wins_over_the_global_one() {
        let c = caps(&[
            ("TESSERA_MEMORY_LIMIT", "1GiB"),
            ("TESSERA_MEMORY_LIMIT_1", "512MiB"),
        ]);
        assert_eq!(c[0], Some(1 << 30));
        assert_eq!(c[1], Some(512 << 20));
        assert_eq!(c[2], Some(1 << 30));
    }

    #[test]
    fn a_device_limit_alone_caps_only_its_device() {
        let c = caps(&[("TESSERA_MEMORY_LIMIT_3", "2g")]);
        assert_eq!(c[3], Some(2 << 30));
        assert_eq!(c[0], None);
    }

    #[test]
    fn malformed_limits_are_zero_never_unlimited() {
        for bad in ["", "lots", "1.5.GiB", "-1", "1 GiBs"] {
            let c = caps(&[("TESSERA_MEMORY_LIMIT", bad)]);
            assert_eq!(c, [Some(0); MAX_DEVICES], "{bad:?}");
        }
        let c = caps(&[
            ("TESSERA_MEMORY_LIMIT", "1GiB"),
            ("TESSERA_MEMORY_LIMIT_0", "x"),
        ]);
        assert_eq!(c[0], Some(0));
        assert_eq!(c[1], Some(1 << 30));
    }

    #[test]
    fn names_of_no_device_are_ignored() {
        let c = caps(&[
            ("TESSERA_MEMORY_LIMIT_16", "1GiB"),
            ("TESSERA_MEMORY_LIMIT_x", "1GiB"),
            ("TESSERA_MEMORY_LIMIT_01", "1GiB"),
            ("TESSERA_MEMORY_LIMITS", "1GiB"),
        ]);
        assert_eq!(c, [None; MAX_DEVICES]);
    }

    #[test]
    fn problems_name_the_variable() {
        let vars = [("TESSERA_MEMORY_LIMIT_2", "3 bananas")];
        let names = vec![vars[0].0.to_string()];
        let lookup = |n: &str| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        let (c, problems) = caps_from_env(lookup, names);
        assert_eq!(c[2], Some(0));
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("TESSERA_MEMORY_LIMIT_2"),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn only_a_container_holding_just_this_process_s_memory_skips_reaping() {
        assert!(!others_may_hold(0, 0));
        assert!(!others_may_hold(5 << 20, 5 << 20));
        assert!(others_may_hold(5 << 20, 0), "another process holds it all");
        assert!(
            others_may_hold(6 << 20, 5 << 20),
            "another process holds 1 MiB"
        );
        assert!(
            others_may_hold(4 << 20, 5 << 20),
            "a release in flight: reap"
        );
    }

    #[test]
    fn container_names_from_file_names() {
        assert_eq!(
            container_name(Path::new("/run/tessera/team-a.region")),
            "team-a"
        );
        assert_eq!(container_name(Path::new("/x/My_Box 2")), "my-box-2");
        assert_eq!(container_name(Path::new("/x/__")), STANDALONE);
        assert_eq!(container_name(Path::new("/")), STANDALONE);
        assert_eq!(container_name(Path::new(&"y".repeat(100))).len(), 63);
    }
}
