//! Context overhead: a context costs device memory (hundreds of MiB on a real GPU) from
//! its creation until it is destroyed or, for a primary context, until its last release or
//! a reset. The cost is measured, not guessed: the device's memory in use just before and
//! just after the driver makes the context, less what the container itself allocated or
//! freed meanwhile. Over the cap the context is undone and the call fails with
//! `CUDA_ERROR_OUT_OF_MEMORY`.
//!
//! Context calls are rare and serialised here, so that two measurements in this process
//! never overlap.

use super::{current_device, forget_context, real, OUT_OF_MEMORY, SUCCESS};
use crate::container::{self, Container};
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::{Mutex, MutexGuard, OnceLock};
use tessera_region::MAX_DEVICES;

/// A primary context as this process has retained it.
#[derive(Clone, Copy, Default)]
struct Primary {
    retained: u32,
    /// Counted while retained.
    bytes: u64,
    /// Its handle, for the allocations that go with it.
    handle: usize,
}

/// What the contexts of this process hold.
struct Book {
    /// The fork generation it describes; a fork child starts a new book.
    generation: u32,
    primary: [Primary; MAX_DEVICES],
    /// Created contexts: handle to (device, bytes).
    created: HashMap<usize, (usize, u64)>,
    /// The last overhead measured per device: used when a context's cannot be measured.
    last_overhead: [u64; MAX_DEVICES],
}

static BOOK: Mutex<Option<Book>> = Mutex::new(None);

/// The book, locked for the whole context operation.
struct Locked(MutexGuard<'static, Option<Book>>);

impl Locked {
    fn get() -> Locked {
        // A panic while locked leaves the book consistent: updates are single assignments.
        let mut guard = BOOK.lock().unwrap_or_else(|e| e.into_inner());
        let generation = container::current_generation();
        if !matches!(guard.as_ref(), Some(b) if b.generation == generation) {
            *guard = Some(Book {
                generation,
                primary: [Primary::default(); MAX_DEVICES],
                created: HashMap::new(),
                last_overhead: [0; MAX_DEVICES],
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

/// One reading of a device: what is in use on it, and what the container holds on it.
#[derive(Clone, Copy)]
struct Reading {
    gauge: Gauge,
    device_used: u64,
    container_used: u64,
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
            container_used: c.memory_used(device),
        })
    }

    /// The overhead of the context made since this reading: `ctx` is pushed for a CUDA
    /// reading if it is not current. What the container's own allocations changed meanwhile
    /// is taken out; every race left (another container allocating at once, or this one
    /// between reserving and allocating) can only make the figure larger, never smaller.
    fn overhead(&self, c: &Container, device: usize, ctx: Option<*mut c_void>) -> Option<u64> {
        let device_used = read(self.gauge, ctx)?;
        let container_used = c.memory_used(device);
        let growth = i128::from(device_used) - i128::from(self.device_used);
        let ours = i128::from(container_used) - i128::from(self.container_used);
        Some(u64::try_from((growth - ours).max(0)).unwrap_or(u64::MAX))
    }
}

/// Memory in use on a device by `gauge`; for CUDA, on the current context or on `ctx`,
/// made current for the reading.
fn read(gauge: Gauge, ctx: Option<*mut c_void>) -> Option<u64> {
    match gauge {
        Gauge::Cuda => {
            let info = real::mem_get_info()?;
            let pushed = match ctx {
                Some(ctx) => {
                    let push = real::ctx_push_current()?;
                    // SAFETY: ctx is a live context the driver has just returned.
                    (unsafe { push(ctx) } == SUCCESS).then_some(true)?
                }
                None => false,
            };
            let (mut free, mut total) = (0usize, 0usize);
            // SAFETY: writes two size_t to our locals.
            let rc = unsafe { info(&mut free, &mut total) };
            if pushed {
                if let Some(pop) = real::ctx_pop_current() {
                    let mut popped = std::ptr::null_mut();
                    // SAFETY: pops the context pushed above into our local.
                    unsafe { pop(&mut popped) };
                }
            }
            (rc == SUCCESS).then(|| total.saturating_sub(free) as u64)
        }
        Gauge::Nvml(device) => {
            let info = real::nvml_memory_info()?;
            let mut memory = [0u64; 3]; // total, free, used
                                        // SAFETY: device is an NVML handle; writes an nvmlMemory_t to our local.
            let rc = unsafe { info(device, &mut memory) };
            (rc == SUCCESS).then(|| memory[0].saturating_sub(memory[1]))
        }
    }
}

/// NVML's handle of CUDA device `device`, matched by UUID.
fn nvml_device(device: usize) -> Option<*mut c_void> {
    static NVML: OnceLock<bool> = OnceLock::new();
    let ready = *NVML.get_or_init(|| {
        // SAFETY: nvmlInit_v2 takes no arguments; NVML counts inits, so the application's
        // own init and shutdown pairs are unaffected.
        real::nvml_init().is_some_and(|init| unsafe { init() } == SUCCESS)
    });
    if !ready {
        return None;
    }
    let uuid = super::nvml::cuda_uuid(i32::try_from(device).ok()?)?;
    let text = super::nvml::uuid_text(&uuid);
    let by_uuid = real::nvml_device_by_uuid()?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: text is NUL-terminated; writes one handle to our local.
    let rc = unsafe { by_uuid(text.as_ptr().cast::<c_char>(), &mut handle) };
    (rc == SUCCESS).then_some(handle)
}

/// Measures and reserves the overhead of the context that `create` makes on `device`;
/// returns the bytes held, or `None` (the context is to be undone) over the cap.
///
/// `created` reads the new context's handle after `create` succeeded; `current` says
/// whether the driver made it current (else it is pushed for the reading).
fn count_overhead(
    c: &Container,
    book: &mut Book,
    device: usize,
    create: impl FnOnce() -> u32,
    created: impl FnOnce() -> *mut c_void,
    current: bool,
) -> Result<(*mut c_void, u64), u32> {
    // Held until the overhead is reserved, so that no other context of the container is
    // made (uncounted yet) while this one is measured.
    let _serialised = c.measurement_lock();
    let before = Reading::before(c, device);
    let rc = create();
    if rc != SUCCESS {
        return Err(rc);
    }
    let handle = created();
    let measured = before.and_then(|r| r.overhead(c, device, (!current).then_some(handle)));
    let bytes = match measured {
        Some(bytes) => {
            book.last_overhead[device] = bytes;
            bytes
        }
        None => {
            crate::tlog!(
                warn,
                "could not measure the memory of a new context on device {device}; counting {} bytes",
                book.last_overhead[device]
            );
            book.last_overhead[device]
        }
    };
    match c.reserve(device, bytes) {
        Ok(r) => Ok((handle, r.keep())),
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

/// The device of `dev` if it is one the container counts.
fn counted_device(dev: i32) -> Option<usize> {
    usize::try_from(dev).ok().filter(|&d| d < MAX_DEVICES)
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
    match count_overhead(c, book, device, create, created, true) {
        Ok((handle, bytes)) => {
            book.created.insert(handle as usize, (device, bytes));
            SUCCESS
        }
        Err(OUT_OF_MEMORY) => {
            // SAFETY: ctx is non-null and holds the context just made.
            let handle = unsafe { ctx.read() };
            if !handle.is_null() {
                if let Some(destroy) = real::ctx_destroy() {
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
    real: unsafe extern "C" fn(*mut *mut c_void, u32, i32) -> u32,
    ctx: *mut *mut c_void,
    flags: u32,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes ctx on success.
    unsafe { create_counted(ctx, dev, || real(ctx, flags, dev)) }
}

/// # Safety
/// `real` is the driver's `cuCtxCreate_v3`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn ctx_create_v3(
    real: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, i32, u32, i32) -> u32,
    ctx: *mut *mut c_void,
    params: *mut c_void,
    num_params: i32,
    flags: u32,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes ctx on success.
    unsafe { create_counted(ctx, dev, || real(ctx, params, num_params, flags, dev)) }
}

/// # Safety
/// `real` is the driver's `cuCtxCreate_v4`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn ctx_create_v4(
    real: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u32, i32) -> u32,
    ctx: *mut *mut c_void,
    params: *mut c_void,
    flags: u32,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes ctx on success.
    unsafe { create_counted(ctx, dev, || real(ctx, params, flags, dev)) }
}

/// # Safety
/// `real` is the driver's `cuCtxDestroy_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn ctx_destroy(
    real: unsafe extern "C" fn(*mut c_void) -> u32,
    ctx: *mut c_void,
) -> u32 {
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
    real: unsafe extern "C" fn(*mut *mut c_void, i32) -> u32,
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
    if book.primary[device].retained > 0 {
        let rc = call();
        if rc == SUCCESS {
            book.primary[device].retained += 1;
        }
        return rc;
    }
    // SAFETY: ctx is non-null and the driver has written it when this runs.
    let created = || unsafe { ctx.read() };
    match count_overhead(c, book, device, call, created, false) {
        Ok((handle, bytes)) => {
            book.primary[device] = Primary {
                retained: 1,
                bytes,
                handle: handle as usize,
            };
            SUCCESS
        }
        Err(OUT_OF_MEMORY) => {
            if let Some(release) = real::primary_ctx_release() {
                // SAFETY: gives back the retain the driver has just granted this call.
                unsafe { release(dev) };
            }
            OUT_OF_MEMORY
        }
        Err(rc) => rc,
    }
}

/// Gives back a primary context's overhead and the allocations that went with it.
fn give_back_primary(c: &Container, book: &mut Book, device: usize) {
    let p = std::mem::take(&mut book.primary[device]);
    c.release(device, p.bytes, book.generation);
    forget_context(p.handle);
}

/// # Safety
/// `real` is the driver's `cuDevicePrimaryCtxRelease_v2`; the arguments are the caller's.
pub(crate) unsafe fn primary_ctx_release(real: unsafe extern "C" fn(i32) -> u32, dev: i32) -> u32 {
    let (Some(device), Some(c)) = (counted_device(dev), container::get()) else {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real(dev) };
    };
    let mut locked = Locked::get();
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(dev) };
    let book = locked.book();
    if rc == SUCCESS && book.primary[device].retained > 0 {
        book.primary[device].retained -= 1;
        if book.primary[device].retained == 0 {
            give_back_primary(c, book, device);
        }
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuDevicePrimaryCtxReset_v2`; the arguments are the caller's.
pub(crate) unsafe fn primary_ctx_reset(real: unsafe extern "C" fn(i32) -> u32, dev: i32) -> u32 {
    let (Some(device), Some(c)) = (counted_device(dev), container::get()) else {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real(dev) };
    };
    let mut locked = Locked::get();
    // SAFETY: the caller's argument, passed on.
    let rc = unsafe { real(dev) };
    let book = locked.book();
    if rc == SUCCESS && book.primary[device].retained > 0 {
        give_back_primary(c, book, device);
    }
    rc
}
