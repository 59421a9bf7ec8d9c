//! Context overhead: a context costs device memory (hundreds of MiB on a real GPU) from
//! its creation until it is destroyed or, for a primary context, until the driver says it
//! is no longer active (its last release, or a reset).
//!
//! Reserve, then create: before the driver makes a context, its expected cost (what the
//! container's last context on the device was measured to cost, kept in the region) is
//! reserved against the cap, so that at no instant does the device hold more of the
//! container's memory than the cap. After it is made, the context is measured and the
//! reservation trued up to the figure: this process's own memory on the device (NVML's
//! per-process figure) before and after, less what the process itself allocated or freed
//! meanwhile, so that other containers' allocations do not enter it; where NVML does not list
//! this process (another pid namespace), the device's whole memory in use, less what the
//! container allocated or freed meanwhile. Over the cap the context is undone and the call
//! fails with `CUDA_ERROR_OUT_OF_MEMORY`.
//!
//! A primary context's charge is given back only when the driver reports the context
//! inactive (`cuDevicePrimaryCtxGetState`) after a release or reset, whoever's retains and
//! releases came before: the driver's own reference count decides, never one kept here.
//!
//! Context calls are rare and serialised here, so that two measurements in this process
//! never overlap.

use super::{current_device, forget_context, OUT_OF_MEMORY, SUCCESS};
use crate::container::{self, Container, Reservation};
use crate::fork_lock::{self, ForkGuard, ForkLock};
use crate::hooks::real;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::OnceLock;
use tessera_region::MAX_DEVICES;

/// A primary context this process counts: counted from the retain that made it active until
/// the driver reports it inactive.
#[derive(Clone, Copy)]
struct Primary {
    /// Its overhead, held against the cap.
    bytes: u64,
    /// Its handle, for the allocations that go with it.
    handle: usize,
}

/// What is reserved for a context whose cost nobody in the container has measured yet: as
/// much as a context costs on the largest GPUs (with lazy module loading), and never more
/// than what the cap leaves. Trued up to the measured figure as soon as the context exists.
const FIRST_CONTEXT_GUESS: u64 = 512 << 20;

/// What the contexts of this process hold.
struct Book {
    /// The fork generation it describes; a fork child starts a new book.
    generation: u32,
    primary: [Option<Primary>; MAX_DEVICES],
    /// Created contexts: handle to (device, bytes).
    created: HashMap<usize, (usize, u64)>,
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
        }
        Locked(guard)
    }

    fn book(&mut self) -> &mut Book {
        self.0.as_mut().expect("Locked::get fills the book")
    }
}

/// How a device's memory in use is read: through the current context with the real
/// `cuMemGetInfo_v2`, or through NVML when no context is current on that device (as before
/// the first context of a process).
#[derive(Clone, Copy)]
enum Gauge {
    Cuda,
    Nvml(*mut c_void),
}

/// One reading of a device: what is in use on it, what this process uses on it (by NVML),
/// what the container holds on it and what this process holds on it.
#[derive(Clone, Copy)]
struct Reading {
    gauge: Gauge,
    device_used: u64,
    /// `None` where NVML cannot say; `Some(0)` where it lists the device but not this process
    /// (as before its first context).
    process_used: Option<u64>,
    container_used: u64,
    process_held: u64,
}

impl Reading {
    /// Reads `device` before a context is made on it.
    fn before(c: &Container, device: usize) -> Option<Reading> {
        let gauge = if current_device() == Some(device) {
            Gauge::Cuda
        } else {
            Gauge::Nvml(nvml_device(device)?)
        };
        Some(Reading {
            gauge,
            device_used: read(gauge, None)?,
            process_used: nvml_device(device).and_then(|d| process_used(d, false)),
            container_used: c.memory_used(device),
            process_held: c.memory_held(device),
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
    fn overhead(&self, c: &Container, device: usize, ctx: Option<*mut c_void>) -> Option<u64> {
        let own = self.process_used.and_then(|before| {
            let after = process_used(nvml_device(device)?, true)?;
            let ours = i128::from(c.memory_held(device)) - i128::from(self.process_held);
            Some(i128::from(after) - i128::from(before) - ours)
        });
        let grown = match own {
            Some(grown) => grown,
            None => {
                let device_used = read(self.gauge, ctx)?;
                let growth = i128::from(device_used) - i128::from(self.device_used);
                let ours = i128::from(c.memory_used(device)) - i128::from(self.container_used);
                growth - ours
            }
        };
        Some(u64::try_from(grown.max(0)).unwrap_or(u64::MAX))
    }
}

/// `nvmlProcessInfo_v2_t`: what NVML's `_v3` running-process query writes per process.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: u32,
    used_gpu_memory: u64,
    gpu_instance_id: u32,
    compute_instance_id: u32,
}

/// Processes asked for at most: a node runs far fewer on one GPU.
const MAX_LISTED: usize = 256;

/// This process's memory on NVML device `device`: `Some(0)` when NVML lists other processes
/// only and `listed` is false (before this process's first context), `None` when NVML cannot
/// say or, with `listed`, does not list this process (another pid namespace).
fn process_used(device: *mut c_void, listed: bool) -> Option<u64> {
    let query = real::nvmlDeviceGetComputeRunningProcesses_v3::real()?;
    let mut infos = vec![ProcessInfo::default(); MAX_LISTED];
    let mut count = MAX_LISTED as u32;
    // SAFETY: infos holds `count` entries of nvmlProcessInfo_v2_t for NVML to fill; it
    // writes the number filled to our local.
    let rc = unsafe { query(device, &mut count, infos.as_mut_ptr().cast()) };
    if rc != SUCCESS {
        return None;
    }
    let pid = std::process::id();
    let found = infos
        .iter()
        .take(count as usize)
        .find(|i| i.pid == pid)
        .map(|i| i.used_gpu_memory);
    match found {
        Some(bytes) => Some(bytes),
        None if !listed => Some(0),
        None => None,
    }
}

/// Memory in use on a device by `gauge`; for CUDA, on the current context or on `ctx`,
/// made current for the reading.
fn read(gauge: Gauge, ctx: Option<*mut c_void>) -> Option<u64> {
    match gauge {
        Gauge::Cuda => {
            let info = real::cuMemGetInfo_v2::real()?;
            let pushed = match ctx {
                Some(ctx) => {
                    let push = real::cuCtxPushCurrent_v2::real()?;
                    // SAFETY: ctx is a live context the driver has just returned.
                    (unsafe { push(ctx) } == SUCCESS).then_some(true)?
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
            (rc == SUCCESS).then(|| total.saturating_sub(free) as u64)
        }
        Gauge::Nvml(device) => {
            let info = real::nvmlDeviceGetMemoryInfo::real()?;
            let mut memory = [0u64; 3]; // total, free, used
                                        // SAFETY: device is an NVML handle; writes an nvmlMemory_t to our local.
            let rc = unsafe { info(device, memory.as_mut_ptr().cast()) };
            (rc == SUCCESS).then(|| memory[0].saturating_sub(memory[1]))
        }
    }
}

/// NVML's handle of node device `device` (NVML numbers devices by their node index).
fn nvml_device(device: usize) -> Option<*mut c_void> {
    static NVML: OnceLock<bool> = OnceLock::new();
    let ready = *NVML.get_or_init(|| {
        // SAFETY: nvmlInit_v2 takes no arguments; NVML counts inits, so the application's
        // own init and shutdown pairs are unaffected.
        real::nvmlInit_v2::real().is_some_and(|init| unsafe { init() } == SUCCESS)
    });
    if !ready {
        return None;
    }
    let by_index = real::nvmlDeviceGetHandleByIndex_v2::real()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: writes one handle to our local.
    let rc = unsafe { by_index(u32::try_from(device).ok()?, &mut handle) };
    (rc == SUCCESS).then_some(handle)
}

/// Reserves the expected overhead of the context that `create` makes on `device`, makes it,
/// measures it and trues the reservation up; returns the context and the bytes held, or
/// `OUT_OF_MEMORY` over the cap (after `create` succeeded, the context is to be undone).
///
/// `created` reads the new context's handle after `create` succeeded; `current` says
/// whether the driver made it current (else it is pushed for the reading).
fn count_overhead(
    c: &Container,
    device: usize,
    create: impl FnOnce() -> u32,
    created: impl FnOnce() -> *mut c_void,
    current: bool,
) -> Result<(*mut c_void, u64), u32> {
    // Held until the overhead is trued up, so that no other context of the container is
    // made (unmeasured yet) while this one is measured.
    let _serialised = c.measurement_lock();
    let mut reservation = reserve_expected(c, device).ok_or(OUT_OF_MEMORY)?;
    let before = Reading::before(c, device);
    let rc = create();
    if rc != SUCCESS {
        return Err(rc);
    }
    let handle = created();
    let measured = before.and_then(|r| r.overhead(c, device, (!current).then_some(handle)));
    let bytes = match measured {
        Some(bytes) => {
            c.region().set_context_bytes(device, bytes);
            bytes
        }
        None => {
            let kept = c
                .region()
                .context_bytes(device)
                .unwrap_or(FIRST_CONTEXT_GUESS);
            crate::tlog!(
                warn,
                "could not measure the memory of a new context on device {device}; counting {kept} bytes",
            );
            kept
        }
    };
    match reservation.resize(bytes) {
        Ok(()) => Ok((handle, reservation.keep())),
        Err(over) => {
            crate::tlog!(
                debug,
                "a context on device {device} needs {bytes} bytes: the container holds {} of {}",
                over.used,
                over.cap
            );
            Err(OUT_OF_MEMORY)
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
    (rc == SUCCESS).then_some(active != 0)
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
    match count_overhead(c, device, create, created, true) {
        Ok((handle, bytes)) => {
            book.created.insert(handle as usize, (device, bytes));
            SUCCESS
        }
        Err(OUT_OF_MEMORY) => {
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
            OUT_OF_MEMORY
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
    if rc == SUCCESS {
        let generation = locked.book().generation;
        if let Some((device, bytes)) = locked.book().created.remove(&(ctx as usize)) {
            c.release(device, bytes, generation);
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
        if rc == SUCCESS {
            count_unseen_primary(c, book, device, ctx);
        }
        return rc;
    }
    // SAFETY: ctx is non-null and the driver has written it when this runs.
    let created = || unsafe { ctx.read() };
    match count_overhead(c, device, call, created, false) {
        Ok((handle, bytes)) => {
            book.primary[device] = Some(Primary {
                bytes,
                handle: handle as usize,
            });
            SUCCESS
        }
        Err(OUT_OF_MEMORY) => {
            // SAFETY: ctx is non-null and the driver wrote it, if it made the context.
            if !unsafe { ctx.read() }.is_null() {
                if let Some(release) = real::cuDevicePrimaryCtxRelease_v2::real() {
                    // SAFETY: gives back the retain the driver has just granted this call.
                    unsafe { release(dev) };
                }
            }
            OUT_OF_MEMORY
        }
        Err(rc) => rc,
    }
}

/// Counts a primary context found active without this library having seen it made.
fn count_unseen_primary(c: &Container, book: &mut Book, device: usize, ctx: *mut *mut c_void) {
    let bytes = c.region().context_bytes(device).unwrap_or(0);
    // SAFETY: ctx is non-null and the driver wrote it on the success this follows.
    let handle = unsafe { ctx.read() } as usize;
    match c.reserve(device, bytes) {
        Ok(r) => {
            book.primary[device] = Some(Primary {
                bytes: r.keep(),
                handle,
            })
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
        c.release(device, p.bytes, book.generation);
        forget_context(p.handle);
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
    if rc == SUCCESS {
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
    if rc == SUCCESS {
        settle_primary(c, locked.book(), dev, device, true);
    }
    rc
}
