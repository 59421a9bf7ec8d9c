//! Context overhead: a context costs device memory (hundreds of MiB on a real GPU) from
//! its creation until it is destroyed or, for a primary context, until the driver says it
//! is no longer active (its last release, or a reset).
//!
//! Reserve, then create: before the driver makes a context, its expected cost (what the
//! container's last context on the device was measured to cost, kept in the region; for the
//! container's first, a high guess within what the cap leaves) is reserved against the cap,
//! so that at no instant does the device hold more of the container's memory than the cap.
//! After it is made, the context is measured and the reservation trued up to the figure:
//!
//! 1. this process's own memory on the device by NVML (its per-process figure) before and
//!    after, less what the process itself allocated or freed meanwhile, so that other
//!    containers' allocations do not enter it. A real driver may list a process in NVML some
//!    time after its context exists, so the figure is polled for a while; NVML's device is
//!    found by the CUDA device's UUID (NVML numbers devices its own way, whatever
//!    `CUDA_VISIBLE_DEVICES` says), and its list is read at whatever entry size the driver
//!    writes ([`crate::nvml_list`]);
//! 2. where NVML does not list this process with a figure (another pid namespace, a figure
//!    NVML does not have), the device's whole memory in use before and after, read through a
//!    current context (`cuMemGetInfo`, which needs one) or through NVML, less what the
//!    container allocated or freed meanwhile;
//! 3. where neither can be read (no NVML and no context current before), the reservation
//!    stands: a guess, high rather than low, trued up later ([`true_up`]) once NVML lists the
//!    process.
//!
//! Over the cap the context is undone and the call fails with `CUDA_ERROR_OUT_OF_MEMORY`.
//!
//! A context also grows after it is made (modules loaded lazily, local memory for kernels,
//! the driver's rounding of allocations): near the cap, [`true_up`] compares NVML's figure
//! for this process with what the process counts and charges the difference to its context
//! before an allocation is admitted, so that NVML's reading of the container stays within
//! the cap.
//!
//! A primary context's charge is given back only when the driver reports the context
//! inactive (`cuDevicePrimaryCtxGetState`) after a release or reset, whoever's retains and
//! releases came before: the driver's own reference count decides, never one kept here.
//!
//! Context calls are rare and serialised here, so that two measurements in this process
//! never overlap.

use super::{current_device, forget_context};
use crate::container::{self, Container, Reservation};
use crate::fork_lock::{self, ForkGuard, ForkLock};
use crate::hooks::real;
use crate::nvml_list::{self, Held, ProcessList};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tessera_cuda_abi::nvml::code;
use tessera_cuda_abi::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};
use tessera_region::MAX_DEVICES;

/// A context this process counts, with its charge against the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Charge {
    /// Its overhead, held against the cap.
    bytes: u64,
    /// Whether `bytes` is a measured figure, not a guess.
    measured: bool,
}

/// A primary context this process counts: counted from the retain that made it active until
/// the driver reports it inactive.
#[derive(Clone, Copy)]
struct Primary {
    charge: Charge,
    /// Its handle, for the allocations that go with it.
    handle: usize,
}

/// What is reserved for a context whose cost nobody in the container has measured yet,
/// never more than what the cap leaves: high, as much as a context costs on the largest GPUs
/// and more (an H200's holds 518 MiB by NVML), since a guess too low lets the container pass
/// its cap and one too high only holds back memory until the context is measured.
const FIRST_CONTEXT_GUESS: u64 = 1 << 30;

/// How long a measurement waits for NVML to list this process after its context exists.
const LISTING_PATIENCE: Duration = Duration::from_secs(1);

/// What this process's contexts hold.
struct Book {
    /// The fork generation it describes; a fork child starts a new book.
    generation: u32,
    primary: [Option<Primary>; MAX_DEVICES],
    /// Created contexts: handle to (device, charge).
    created: HashMap<usize, (usize, Charge)>,
}

impl Book {
    /// The charge of a context of this process on `device`: the current context's if it is
    /// one of them, else the primary context's, else any.
    fn charge_on(&mut self, device: usize, current: usize) -> Option<&mut Charge> {
        if self
            .created
            .get(&current)
            .is_some_and(|(d, _)| *d == device)
        {
            return self.created.get_mut(&current).map(|(_, c)| c);
        }
        if self.primary[device].is_some() {
            return self.primary[device].as_mut().map(|p| &mut p.charge);
        }
        self.created
            .values_mut()
            .find(|(d, _)| *d == device)
            .map(|(_, c)| c)
    }

    /// The charge of a context of this process on `device` that is a guess, if any.
    fn unmeasured_on(&mut self, device: usize) -> Option<&mut Charge> {
        if let Some(p) = self.primary[device].as_mut().filter(|p| !p.charge.measured) {
            return Some(&mut p.charge);
        }
        self.created
            .values_mut()
            .find(|(d, c)| *d == device && !c.measured)
            .map(|(_, c)| c)
    }
}

static BOOK: ForkLock<Option<Book>> = ForkLock::new(None);

/// The book, locked for the whole context operation.
struct Locked(ForkGuard<'static, Option<Book>>);

impl Locked {
    fn get() -> Locked {
        // A panic while locked leaves the book consistent: updates are single assignments.
        let mut guard = BOOK.lock();
        let generation = fork_lock::generation();
        if !matches!(guard.as_ref(), Some(b) if b.generation == generation) {
            *guard = Some(Book {
                generation,
                primary: [None; MAX_DEVICES],
                created: HashMap::new(),
            });
            UNMEASURED.store(0, Ordering::Relaxed);
        }
        Locked(guard)
    }

    fn book(&mut self) -> &mut Book {
        self.0.as_mut().expect("Locked::get fills the book")
    }
}

/// The devices (a bit each) on which this process counts a context at a guess, for
/// [`true_up`] to measure. Written under the book's lock; read without it on the
/// allocation path (Relaxed: a stale bit costs one look at the book, a missed one a
/// moment's delay).
static UNMEASURED: AtomicU32 = AtomicU32::new(0);
/// NVML's handle of each device this process made a context on, for [`true_up`].
static NVML_HANDLES: [AtomicPtr<c_void>; MAX_DEVICES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_DEVICES];
/// When [`true_up`] last read NVML for each device, in ms of [`epoch_ms`], plus one.
static LAST_TRUE_UP: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// How a device's memory in use is read: through the current context with the real
/// `cuMemGetInfo_v2`, or through NVML when no context is current on that device (as before
/// the first context of a process).
#[derive(Clone, Copy)]
enum Gauge {
    Cuda,
    Nvml(*mut c_void),
}

/// One reading of a device before a context is made: what is in use on it, what this
/// process uses on it (by NVML), what the container holds on it and what this process
/// holds on it.
struct Reading {
    gauge: Gauge,
    device_used: u64,
    /// NVML's handle of the device, where NVML has one.
    nvml: Option<*mut c_void>,
    /// `None` where NVML cannot say; `Some(0)` where it does not list this process, which
    /// holds nothing there yet (as before its first context).
    process_used: Option<u64>,
    /// The pids NVML listed on the device.
    listed: Vec<u32>,
    container_used: u64,
    process_held: u64,
}

/// How a context was measured, for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum By {
    /// NVML's figure for this process.
    Process,
    /// The device's memory in use.
    Device,
}

impl Reading {
    /// Reads CUDA device `dev` (node device `device`) before a context is made on it, while
    /// `reserved` bytes are reserved for the context; `Err` says why it cannot be read.
    fn before(c: &Container, dev: i32, device: usize, reserved: u64) -> Result<Reading, String> {
        let nvml = nvml_device(dev, device);
        // A current context on the device reads it through the driver; one that cannot (a
        // primary context released but still current) leaves it to NVML.
        let cuda = (current_device() == Some(device))
            .then(|| read(Gauge::Cuda, None).map(|used| (Gauge::Cuda, used)))
            .and_then(Result::ok);
        let (gauge, device_used) = match (cuda, &nvml) {
            (Some(c), _) => c,
            (None, Ok(h)) => (Gauge::Nvml(*h), read(Gauge::Nvml(*h), None)?),
            (None, Err(why)) => return Err(why.clone()),
        };
        let process_held = c.memory_held(device);
        let (process_used, listed) = match &nvml {
            Ok(h) => {
                // What this process held before the context's reservation: with nothing,
                // NVML not listing it means 0; with something, NVML has yet to list it.
                let holds = process_held.saturating_sub(reserved) > 0;
                // Relaxed: see `LISTS_ME`.
                let wait = if holds && LISTS_ME.load(Ordering::Relaxed) {
                    Wait::FromNow
                } else {
                    Wait::No
                };
                match own_figure(*h, wait) {
                    Some((figure, list)) => (figure.or((!holds).then_some(0)), list),
                    None => (None, Vec::new()),
                }
            }
            Err(_) => (None, Vec::new()),
        };
        Ok(Reading {
            gauge,
            device_used,
            nvml: nvml.ok(),
            process_used,
            listed,
            container_used: c.memory_used(device),
            process_held,
        })
    }

    /// The overhead of the context made since this reading: `ctx` is pushed for a CUDA
    /// reading if it is not current.
    ///
    /// By this process's own figure where NVML lists the process now, less what its own
    /// allocations changed meanwhile: exact, whatever other processes do. Otherwise by the
    /// device's figure, less what the container's allocations changed meanwhile; then
    /// another container allocating at once makes the figure larger, and one freeing at once
    /// smaller (the serialisation of measurements keeps the container's own contexts out).
    fn overhead(
        &self,
        c: &Container,
        device: usize,
        ctx: Option<*mut c_void>,
    ) -> Result<(u64, By), String> {
        let own = self.process_used.and_then(|before| {
            let (after, _) = own_figure(self.nvml?, Wait::Since(&self.listed))?;
            let ours = i128::from(c.memory_held(device)) - i128::from(self.process_held);
            Some(i128::from(after?) - i128::from(before) - ours)
        });
        let (grown, by) = match own {
            Some(grown) => (grown, By::Process),
            None => {
                let device_used = read(self.gauge, ctx)?;
                let growth = i128::from(device_used) - i128::from(self.device_used);
                let ours = i128::from(c.memory_used(device)) - i128::from(self.container_used);
                (growth - ours, By::Device)
            }
        };
        Ok((u64::try_from(grown.max(0)).unwrap_or(u64::MAX), by))
    }
}

/// Whether NVML has listed this process with a figure: it lists it then, if late.
static LISTS_ME: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`own_figure`] waits for NVML to list this process.
#[derive(Clone, Copy)]
enum Wait<'a> {
    /// One reading.
    No,
    /// For as long as [`LISTING_PATIENCE`] and no pid appears that was not listed in this
    /// list (a newcomer is then likely this process under another pid namespace's number).
    Since(&'a [u32]),
    /// The same, from the pids of the first reading.
    FromNow,
}

/// This process's memory on NVML device `device` and the pids listed, polling while NVML does
/// not list the process as `wait` says. `None` when NVML cannot list; a figure of `None` when
/// it does not list this process with one.
fn own_figure(device: *mut c_void, wait: Wait<'_>) -> Option<(Option<u64>, Vec<u32>)> {
    let me = std::process::id();
    let deadline = Instant::now() + LISTING_PATIENCE;
    let mut pause = Duration::from_millis(1);
    let mut first: Option<Vec<u32>> = None;
    loop {
        let list = process_list(device)?;
        let pids: Vec<u32> = list.pids().collect();
        match list.held_by(me) {
            Some(Held::Bytes(bytes)) => {
                // Relaxed: a hint for later measurements of this process.
                LISTS_ME.store(true, Ordering::Relaxed);
                return Some((Some(bytes), pids));
            }
            Some(Held::NotAvailable) => return Some((None, pids)),
            None => {}
        }
        let before: &[u32] = match wait {
            Wait::No => return Some((None, pids)),
            Wait::Since(before) => before,
            Wait::FromNow => first.get_or_insert_with(|| pids.clone()),
        };
        let newcomer = pids.iter().any(|p| !before.contains(p));
        if newcomer || Instant::now() >= deadline {
            return Some((None, pids));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// NVML's list of the processes on `device`.
fn process_list(device: *mut c_void) -> Option<ProcessList> {
    let query = real::nvmlDeviceGetComputeRunningProcesses_v3::real()?;
    // SAFETY: the real `_v3` query, whose entries are nominally `nvmlProcessInfo_t` (24
    // bytes); `device` is a handle NVML gave.
    unsafe { nvml_list::read(query, device, 24) }.ok()
}

/// Memory in use on a device by `gauge`; for CUDA, on the current context or on `ctx`,
/// made current for the reading.
fn read(gauge: Gauge, ctx: Option<*mut c_void>) -> Result<u64, String> {
    match gauge {
        Gauge::Cuda => {
            let info = real::cuMemGetInfo_v2::real().ok_or("the driver has no cuMemGetInfo_v2")?;
            let pushed = match ctx {
                Some(ctx) => {
                    let push = real::cuCtxPushCurrent_v2::real()
                        .ok_or("the driver has no cuCtxPushCurrent_v2")?;
                    // SAFETY: ctx is a live context the driver has just returned.
                    let rc = unsafe { push(ctx) };
                    if rc != CUDA_SUCCESS {
                        return Err(format!("cuCtxPushCurrent_v2 returned {rc}"));
                    }
                    true
                }
                None => false,
            };
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: writes two size_t to our locals.
            let rc = unsafe { info(&mut free, &mut total) };
            if pushed {
                if let Some(pop) = real::cuCtxPopCurrent_v2::real() {
                    let mut popped = std::ptr::null_mut();
                    // SAFETY: pops the context pushed above into our local.
                    unsafe { pop(&mut popped) };
                }
            }
            if rc != CUDA_SUCCESS {
                return Err(format!("cuMemGetInfo_v2 returned {rc}"));
            }
            Ok(total.saturating_sub(free) as u64)
        }
        Gauge::Nvml(device) => {
            let info = real::nvmlDeviceGetMemoryInfo::real()
                .ok_or("NVML has no nvmlDeviceGetMemoryInfo")?;
            let mut memory = [0u64; 3]; // total, free, used
                                        // SAFETY: device is an NVML handle; writes an nvmlMemory_t to our local.
            let rc = unsafe { info(device, memory.as_mut_ptr().cast()) };
            if rc != CUDA_SUCCESS {
                return Err(format!("nvmlDeviceGetMemoryInfo returned {rc}"));
            }
            Ok(memory[0].saturating_sub(memory[1]))
        }
    }
}

/// NVML, initialised once for this library (NVML counts initialisations, so the
/// application's own init and shutdown pairs are unaffected); `Err` says why not.
fn nvml_ready() -> Result<(), String> {
    static NVML: OnceLock<Result<(), String>> = OnceLock::new();
    NVML.get_or_init(|| {
        let init = real::nvmlInit_v2::real()
            .ok_or("NVML (libnvidia-ml.so.1) cannot be loaded or has no nvmlInit_v2")?;
        // SAFETY: nvmlInit_v2 takes no arguments.
        match unsafe { init() } {
            CUDA_SUCCESS => Ok(()),
            rc => Err(format!("nvmlInit_v2 returned {rc}")),
        }
    })
    .clone()
}

/// The text NVML names a device by, from CUDA's UUID: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`
/// (`MIG-` for a MIG device), NUL-terminated.
fn uuid_text(prefix: &str, uuid: &[u8; 16]) -> Vec<u8> {
    let hex = |range: std::ops::Range<usize>| -> String {
        uuid[range].iter().map(|b| format!("{b:02x}")).collect()
    };
    let text = format!(
        "{prefix}-{}-{}-{}-{}-{}\0",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    );
    text.into_bytes()
}

/// NVML's handle of CUDA device `dev` (node device `device`): by its UUID, which names the
/// same GPU to both whatever the order of their numbering and `CUDA_VISIBLE_DEVICES`; by the
/// node index where the driver gives no UUID. `Err` says why there is none.
fn nvml_device(dev: i32, device: usize) -> Result<*mut c_void, String> {
    nvml_ready()?;
    let mut uuid = [0u8; 16];
    let by_uuid = real::cuDeviceGetUuid_v2::real().filter(|get| {
        // SAFETY: writes a CUuuid (16 bytes) to our local.
        unsafe { get(uuid.as_mut_ptr().cast(), dev) == CUDA_SUCCESS }
    });
    if by_uuid.is_some() {
        if let Some(find) = real::nvmlDeviceGetHandleByUUID::real() {
            for prefix in ["GPU", "MIG"] {
                let text = uuid_text(prefix, &uuid);
                let mut handle = std::ptr::null_mut();
                // SAFETY: a NUL-terminated string; writes one handle to our local.
                if unsafe { find(text.as_ptr().cast(), &mut handle) } == code::SUCCESS {
                    return Ok(handle);
                }
            }
        }
    }
    let by_index = real::nvmlDeviceGetHandleByIndex_v2::real()
        .ok_or("NVML has no nvmlDeviceGetHandleByIndex_v2")?;
    let mut handle = std::ptr::null_mut();
    let index = u32::try_from(device).map_err(|_| format!("no NVML index {device}"))?;
    // SAFETY: writes one handle to our local.
    match unsafe { by_index(index, &mut handle) } {
        CUDA_SUCCESS => Ok(handle),
        rc => Err(format!(
            "NVML knows CUDA device {dev} neither by UUID nor as device {device} (error {rc})"
        )),
    }
}

/// Reserves the expected overhead of the context that `create` makes on CUDA device `dev`
/// (node device `device`), makes it, measures it and trues the reservation up; returns the
/// context and its charge, or `CUDA_ERROR_OUT_OF_MEMORY` over the cap (after `create` succeeded, the
/// context is to be undone).
///
/// `created` reads the new context's handle after `create` succeeded; `current` says
/// whether the driver made it current (else it is pushed for the reading).
fn count_overhead(
    c: &Container,
    dev: i32,
    device: usize,
    create: impl FnOnce() -> u32,
    created: impl FnOnce() -> *mut c_void,
    current: bool,
) -> Result<(*mut c_void, Charge), u32> {
    // Held until the overhead is trued up, so that no other context of the container is
    // made (unmeasured yet) while this one is measured.
    let _serialised = c.measurement_lock();
    let mut reservation = reserve_expected(c, device).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    let before = Reading::before(c, dev, device, reservation.bytes());
    if let Ok(r) = &before {
        if let (Some(h), Some(slot)) = (r.nvml, NVML_HANDLES.get(device)) {
            // Relaxed: a handle NVML gave, valid for the life of the process; read by
            // `true_up`, which only needs some handle of the device.
            slot.store(h, Ordering::Relaxed);
        }
    }
    let rc = create();
    if rc != CUDA_SUCCESS {
        return Err(rc);
    }
    let handle = created();
    let measured = before.and_then(|r| r.overhead(c, device, (!current).then_some(handle)));
    let charge = match measured {
        Ok((bytes, by)) => {
            crate::tlog!(
                debug,
                "a context on device {device} holds {bytes} bytes (by {})",
                match by {
                    By::Process => "NVML's figure for this process",
                    By::Device => "the device's memory in use",
                }
            );
            c.region().set_context_bytes(device, bytes);
            Charge {
                bytes,
                measured: true,
            }
        }
        Err(why) => {
            // The reservation stands: the container's last measured figure, or the guess.
            let kept = reservation.bytes();
            crate::tlog!(
                warn,
                "could not measure the memory of a new context on device {device} ({why}); counting {kept} bytes until NVML lists this process",
            );
            Charge {
                bytes: kept,
                measured: false,
            }
        }
    };
    match reservation.resize(charge.bytes) {
        Ok(()) => {
            let bytes = reservation.keep();
            Ok((handle, Charge { bytes, ..charge }))
        }
        Err(over) => {
            crate::tlog!(
                debug,
                "a context on device {device} needs {} bytes: the container holds {} of {}",
                charge.bytes,
                over.used,
                over.cap
            );
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
    }
}

/// Reserves what the next context on `device` is expected to cost: the container's last
/// measured figure, else [`FIRST_CONTEXT_GUESS`] or what the cap leaves, if less. `None`
/// over the cap.
fn reserve_expected(c: &Container, device: usize) -> Option<Reservation> {
    let expected = match c.region().context_bytes(device) {
        Some(bytes) => bytes,
        None => {
            let left = c
                .memory_cap(device)
                .map_or(u64::MAX, |cap| cap.saturating_sub(c.memory_used(device)));
            FIRST_CONTEXT_GUESS.min(left)
        }
    };
    match c.reserve(device, expected) {
        Ok(r) => Some(r),
        Err(over) => {
            crate::tlog!(
                debug,
                "a context on device {device} is expected to need {expected} bytes: the container holds {} of {}",
                over.used,
                over.cap
            );
            None
        }
    }
}

/// Records a context's charge in the book, and whether a guess awaits [`true_up`].
fn note_unmeasured(book: &Book) {
    let mut bits = 0u32;
    for (device, p) in book.primary.iter().enumerate() {
        if p.is_some_and(|p| !p.charge.measured) {
            bits |= 1 << device;
        }
    }
    for (device, charge) in book.created.values() {
        if !charge.measured {
            bits |= 1 << device;
        }
    }
    // Relaxed: see `UNMEASURED`; written under the book's lock.
    UNMEASURED.store(bits, Ordering::Relaxed);
}

/// How near its cap (in bytes left after an allocation) a container has this process compare
/// NVML's figure for it with what it counts: a sixteenth of the cap, at least 64 MiB.
fn near_cap(cap: u64) -> u64 {
    (cap / 16).max(64 << 20)
}

/// How often [`true_up`] reads NVML for one device, at most.
const TRUE_UP_PERIOD: Duration = Duration::from_millis(10);

/// Milliseconds since this library first asked.
fn epoch_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// What a context's charge becomes from NVML's figure for this process (`listed`), what
/// the process counts on the device (`counted`: its slot's bytes less those reserved for
/// operations in progress) and the context's charge now: where the charge is a guess, the
/// figure less everything else counted (up or down); else the charge raised by what NVML
/// shows beyond everything counted, never lowered (a measured context that NVML shows less
/// of is operations in progress NVML has not seen yet).
fn trued(listed: u64, counted: u64, charge: Charge) -> u64 {
    let others = counted.saturating_sub(charge.bytes);
    if charge.measured {
        charge.bytes + listed.saturating_sub(counted)
    } else {
        listed.saturating_sub(others)
    }
}

/// Before an allocation of `asking` bytes on node device `device`: where a context of this
/// process there is counted at a guess, or where the allocation brings the container near its
/// cap, reads NVML's figure for this process (at most every [`TRUE_UP_PERIOD`]) and trues the
/// context's charge up to it ([`trued`]). `false` when the charge has to grow and the cap
/// has no room left: NVML shows the container at its cap already, and the allocation is to
/// be refused.
pub(crate) fn true_up(c: &Container, device: usize, asking: u64) -> bool {
    if device >= MAX_DEVICES {
        return true;
    }
    // Relaxed: see `UNMEASURED`.
    let guessed = UNMEASURED.load(Ordering::Relaxed) & (1 << device) != 0;
    let near = c.memory_cap(device).is_some_and(|cap| {
        c.memory_used(device)
            .saturating_add(asking)
            .saturating_add(near_cap(cap))
            > cap
    });
    if !guessed && !near {
        return true;
    }
    // Relaxed: the handle was stored before the context it belongs to was counted, and this
    // thread learnt of the context through the allocation's own driver call.
    let handle = NVML_HANDLES[device].load(Ordering::Relaxed);
    if handle.is_null() {
        return true;
    }
    let now = epoch_ms() + 1;
    // Relaxed: only spaces the readings out; racing threads at worst read twice.
    let last = LAST_TRUE_UP[device].load(Ordering::Relaxed);
    if last != 0 && now.saturating_sub(last) < TRUE_UP_PERIOD.as_millis() as u64 {
        return true;
    }
    LAST_TRUE_UP[device].store(now, Ordering::Relaxed);
    let mut locked = Locked::get();
    let Some((Some(listed), _)) = own_figure(handle, Wait::No) else {
        return true;
    };
    let counted = c.memory_held(device).saturating_sub(c.in_flight(device));
    let current = super::Site::current().map_or(0, |s| s.context);
    let generation = locked.book().generation;
    let book = locked.book();
    let charge = if guessed {
        book.unmeasured_on(device)
    } else {
        book.charge_on(device, current)
    };
    let Some(charge) = charge else {
        return true;
    };
    let want = trued(listed, counted, *charge);
    let mut ok = true;
    if want > charge.bytes {
        match c.reserve(device, want - charge.bytes) {
            Ok(r) => charge.bytes += r.keep(),
            Err(over) => {
                crate::tlog!(
                    debug,
                    "NVML shows {listed} bytes for this process on device {device}, {} more than counted, and the container holds {} of {}: refused",
                    want - charge.bytes,
                    over.used,
                    over.cap
                );
                ok = false;
            }
        }
    } else if want < charge.bytes {
        c.release(device, charge.bytes - want, generation);
        charge.bytes = want;
    }
    if !charge.measured && ok {
        charge.measured = true;
        let bytes = charge.bytes;
        c.region().set_context_bytes(device, bytes);
        crate::tlog!(
            debug,
            "a context on device {device} holds {bytes} bytes (by NVML's figure for this process, once listed)"
        );
    }
    note_unmeasured(locked.book());
    ok
}

/// The node index of CUDA device `dev`, if it is one the container counts.
fn counted_device(dev: i32) -> Option<usize> {
    usize::try_from(dev)
        .ok()
        .map(crate::visibility::account)
        .filter(|&d| d < MAX_DEVICES)
}

/// Whether the driver reports device `dev`'s primary context active; `None` when it cannot
/// say.
fn primary_active(dev: i32) -> Option<bool> {
    let state = real::cuDevicePrimaryCtxGetState::real()?;
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: writes a flags word and an int to our locals.
    let rc = unsafe { state(dev, &mut flags, &mut active) };
    (rc == CUDA_SUCCESS).then_some(active != 0)
}

/// Counts a created context.
///
/// # Safety
/// `ctx` is null or points to a `CUcontext` that `create` writes on success.
unsafe fn create_counted(ctx: *mut *mut c_void, dev: i32, create: impl FnOnce() -> u32) -> u32 {
    let (Some(device), Some(c)) = (counted_device(dev), container::get()) else {
        return create();
    };
    if ctx.is_null() {
        return create();
    }
    let mut locked = Locked::get();
    let book = locked.book();
    // SAFETY: ctx is non-null and the driver has written it when this runs.
    let created = || unsafe { ctx.read() };
    match count_overhead(c, dev, device, create, created, true) {
        Ok((handle, charge)) => {
            book.created.insert(handle as usize, (device, charge));
            note_unmeasured(book);
            crate::rm::lever::context_made();
            CUDA_SUCCESS
        }
        Err(CUDA_ERROR_OUT_OF_MEMORY) => {
            // SAFETY: ctx is non-null; the driver wrote it if it made a context.
            let handle = unsafe { ctx.read() };
            if !handle.is_null() {
                if let Some(destroy) = real::cuCtxDestroy_v2::real() {
                    // SAFETY: undoes the context the driver has just made for this call.
                    unsafe { destroy(handle) };
                }
                // SAFETY: ctx is non-null; the caller gets no context.
                unsafe { ctx.write(std::ptr::null_mut()) };
            }
            CUDA_ERROR_OUT_OF_MEMORY
        }
        Err(rc) => rc,
    }
}

/// # Safety
/// `real` is the driver's `cuCtxCreate_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn ctx_create_v2(
    real: real::cuCtxCreate_v2::Real,
    ctx: *mut *mut c_void,
    flags: u32,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes ctx on success.
    let rc = unsafe { create_counted(ctx, dev, || real(ctx, flags, dev)) };
    // A new context is current on this thread.
    crate::current::changed_here();
    rc
}

/// # Safety
/// `real` is the driver's `cuCtxCreate_v3`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn ctx_create_v3(
    real: real::cuCtxCreate_v3::Real,
    ctx: *mut *mut c_void,
    params: *mut c_void,
    num_params: i32,
    flags: u32,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes ctx on success.
    let rc = unsafe { create_counted(ctx, dev, || real(ctx, params, num_params, flags, dev)) };
    // A new context is current on this thread.
    crate::current::changed_here();
    rc
}

/// # Safety
/// `real` is the driver's `cuCtxCreate_v4`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn ctx_create_v4(
    real: real::cuCtxCreate_v4::Real,
    ctx: *mut *mut c_void,
    params: *mut c_void,
    flags: u32,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes ctx on success.
    let rc = unsafe { create_counted(ctx, dev, || real(ctx, params, flags, dev)) };
    // A new context is current on this thread.
    crate::current::changed_here();
    rc
}

/// # Safety
/// `real` is the driver's `cuCtxDestroy_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn ctx_destroy(real: real::cuCtxDestroy_v2::Real, ctx: *mut c_void) -> u32 {
    // Its handle may name another context from now on, on any thread.
    crate::current::changed_everywhere();
    let Some(c) = container::get() else {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real(ctx) };
    };
    // Locked across the driver call, so that a context made at once with the same handle
    // is not taken for this one.
    let mut locked = Locked::get();
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(ctx) };
    if rc == CUDA_SUCCESS {
        let generation = locked.book().generation;
        if let Some((device, charge)) = locked.book().created.remove(&(ctx as usize)) {
            c.release(device, charge.bytes, generation);
            note_unmeasured(locked.book());
        }
        forget_context(ctx as usize);
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuDevicePrimaryCtxRetain`; the arguments are the caller's.
pub(crate) unsafe fn primary_ctx_retain(
    real: real::cuDevicePrimaryCtxRetain::Real,
    ctx: *mut *mut c_void,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let call = || unsafe { real(ctx, dev) };
    let (Some(device), Some(c)) = (counted_device(dev), container::get()) else {
        return call();
    };
    if ctx.is_null() {
        return call();
    }
    let mut locked = Locked::get();
    let book = locked.book();
    // The driver's word on whether the context exists, not a count kept here: retains and
    // releases may also reach the driver by paths this library does not see.
    let active = primary_active(dev);
    if book.primary[device].is_some() {
        if active != Some(false) {
            return call();
        }
        // Gone without this library seeing the call that ended it.
        give_back_primary(c, book, device);
    } else if active == Some(true) {
        // Active, but made by a path this library does not see: counted at the container's
        // measured cost of a context, as far as the cap allows (it exists already).
        let rc = call();
        if rc == CUDA_SUCCESS {
            count_unseen_primary(c, book, device, ctx);
        }
        return rc;
    }
    // SAFETY: ctx is non-null and the driver has written it when this runs.
    let created = || unsafe { ctx.read() };
    match count_overhead(c, dev, device, call, created, false) {
        Ok((handle, charge)) => {
            book.primary[device] = Some(Primary {
                charge,
                handle: handle as usize,
            });
            note_unmeasured(book);
            crate::rm::lever::context_made();
            CUDA_SUCCESS
        }
        Err(CUDA_ERROR_OUT_OF_MEMORY) => {
            // SAFETY: ctx is non-null and the driver wrote it, if it made the context.
            if !unsafe { ctx.read() }.is_null() {
                if let Some(release) = real::cuDevicePrimaryCtxRelease_v2::real() {
                    // SAFETY: gives back the retain the driver has just granted this call.
                    unsafe { release(dev) };
                }
            }
            CUDA_ERROR_OUT_OF_MEMORY
        }
        Err(rc) => rc,
    }
}

/// Counts a primary context found active without this library having seen it made.
fn count_unseen_primary(c: &Container, book: &mut Book, device: usize, ctx: *mut *mut c_void) {
    // Unknown to the container: counted at nothing for now, and trued up once NVML lists
    // this process.
    let known = c.region().context_bytes(device);
    let bytes = known.unwrap_or(0);
    // SAFETY: ctx is non-null and the driver wrote it on the success this follows.
    let handle = unsafe { ctx.read() } as usize;
    match c.reserve(device, bytes) {
        Ok(r) => {
            book.primary[device] = Some(Primary {
                charge: Charge {
                    bytes: r.keep(),
                    measured: known.is_some(),
                },
                handle,
            });
            note_unmeasured(book);
        }
        Err(over) => {
            crate::tlog!(
                warn,
                "the primary context of device {device} was made uncounted, and its {bytes} bytes pass the cap ({} of {} in use)",
                over.used,
                over.cap
            );
        }
    }
}

/// Gives back a primary context's overhead and the allocations that went with it.
fn give_back_primary(c: &Container, book: &mut Book, device: usize) {
    if let Some(p) = book.primary[device].take() {
        c.release(device, p.charge.bytes, book.generation);
        forget_context(p.handle);
        note_unmeasured(book);
    }
}

/// After a successful release or reset: gives the primary context's charge back if the
/// driver says it is gone. Where the driver cannot say, a reset has ended it for certain
/// and a release is assumed not to have (the charge stays: never memory given back that is
/// still held).
fn settle_primary(c: &Container, book: &mut Book, dev: i32, device: usize, reset: bool) {
    if book.primary[device].is_none() {
        return;
    }
    if !primary_active(dev).unwrap_or(!reset) {
        give_back_primary(c, book, device);
    }
}

/// # Safety
/// `real` is the driver's `cuDevicePrimaryCtxRelease_v2`; the arguments are the caller's.
pub(crate) unsafe fn primary_ctx_release(
    real: real::cuDevicePrimaryCtxRelease::Real,
    dev: i32,
) -> u32 {
    // The context may end, and its handle name another later, on any thread.
    crate::current::changed_everywhere();
    let (Some(device), Some(c)) = (counted_device(dev), container::get()) else {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real(dev) };
    };
    let mut locked = Locked::get();
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(dev) };
    if rc == CUDA_SUCCESS {
        settle_primary(c, locked.book(), dev, device, false);
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuDevicePrimaryCtxReset_v2`; the arguments are the caller's.
pub(crate) unsafe fn primary_ctx_reset(real: real::cuDevicePrimaryCtxReset::Real, dev: i32) -> u32 {
    // See `primary_ctx_release`.
    crate::current::changed_everywhere();
    let (Some(device), Some(c)) = (counted_device(dev), container::get()) else {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real(dev) };
    };
    let mut locked = Locked::get();
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(dev) };
    if rc == CUDA_SUCCESS {
        settle_primary(c, locked.book(), dev, device, true);
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_guess_becomes_what_nvml_shows_less_the_rest() {
        let guess = Charge {
            bytes: 1024 * MIB,
            measured: false,
        };
        // NVML: 518 MiB of context and 100 MiB of allocations; counted: the guess and 100.
        assert_eq!(trued(618 * MIB, 1124 * MIB, guess), 518 * MIB);
        // A guess too low grows.
        let low = Charge {
            bytes: 0,
            measured: false,
        };
        assert_eq!(trued(618 * MIB, 100 * MIB, low), 518 * MIB);
    }

    #[test]
    fn a_measured_context_only_grows() {
        let measured = Charge {
            bytes: 512 * MIB,
            measured: true,
        };
        // The context grew by 6 MiB since it was measured.
        assert_eq!(trued(618 * MIB, 612 * MIB, measured), 518 * MIB);
        // NVML shows less (operations it has not seen yet): unchanged.
        assert_eq!(trued(600 * MIB, 612 * MIB, measured), 512 * MIB);
    }

    #[test]
    fn nvml_names_devices_by_cuda_s_uuid() {
        let uuid: [u8; 16] = std::array::from_fn(|i| i as u8 * 17);
        assert_eq!(
            uuid_text("GPU", &uuid),
            b"GPU-00112233-4455-6677-8899-aabbccddeeff\0"
        );
        assert!(uuid_text("MIG", &uuid).starts_with(b"MIG-0011"));
    }
}
