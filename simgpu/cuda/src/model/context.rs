//! Contexts: one primary context per device, shared through a reference count, and created
//! ones; a per-thread stack of current contexts. A context costs device memory, as a real
//! driver's does, from creation until it is destroyed or, for a primary one, reset.

use crate::ffi::{code, write_out, CUcontext, CUdevice, CUresult, DriverResult};
use crate::model::driver;
use crate::model::exec::registry::Registry;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

/// `CUctx_flags` bits a context may carry (scheduling, host mapping, and the rest).
const CTX_FLAGS_MASK: u32 = 0xff;
/// Stream priorities: 0 is the least, lower numbers are greater.
pub(crate) const LEAST_PRIORITY: i32 = 0;
/// The greatest stream priority.
pub(crate) const GREATEST_PRIORITY: i32 = -5;
/// `cuCtxGetApiVersion`: contexts made through the `_v2` API report 3020.
pub(crate) const CTX_API_VERSION: u32 = 3020;

/// `CUlimit` values and their defaults, as a GPU of this generation reports them.
const LIMIT_DEFAULTS: [u64; 10] = [
    1024,    // STACK_SIZE
    1 << 20, // PRINTF_FIFO_SIZE
    8 << 20, // MALLOC_HEAP_SIZE
    2,       // DEV_RUNTIME_SYNC_DEPTH
    2048,    // DEV_RUNTIME_PENDING_LAUNCH_COUNT
    64,      // MAX_L2_FETCH_GRANULARITY
    0,       // PERSISTING_L2_CACHE_SIZE
    0,       // SHMEM_SIZE: read from the device when queried
    0,       // CIG_ENABLED: no context here shares a graphics context (CIG)
    0,       // CIG_SHMEM_FALLBACK_ENABLED
];
/// The limits (CUDA 12.7) that describe a context's place in a graphics context: the shared
/// memory its kernels may use, and whether it is such a context. They are queried, never set.
pub(crate) const LIMIT_SHMEM_SIZE: u32 = 7;
pub(crate) const LIMIT_CIG_ENABLED: u32 = 8;
/// `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: outside a graphics context, all
/// the shared memory a kernel may opt in to.
pub(crate) const ATTRIBUTE_SHARED_PER_BLOCK_OPTIN: i32 = 97;
pub(crate) const UNSUPPORTED_LIMIT: CUresult = 215;

/// A context.
pub(crate) struct Context {
    /// Its device.
    pub device: usize,
    /// Unique in the process (`cuCtxGetId`), never reused.
    pub id: u64,
    /// The device's primary context.
    pub primary: bool,
    pub(crate) flags: AtomicU32,
    pub(crate) limits: Mutex<[u64; 10]>,
    pub(crate) cache_config: AtomicU32,
    pub(crate) shared_mem_config: AtomicU32,
    destroyed: AtomicBool,
    /// The first error of asynchronous work (like an illegal address); 0 while none.
    sticky: AtomicU32,
    /// Its channel group in the RM (0: none), the unit the engine time-slices.
    group: AtomicU32,
}

/// The parts of the driver that keep something per context, in the order a context being
/// deactivated gives it back. Each part registers its step with [`teardown_step!`] when the
/// library is loaded; the context calls the steps and knows nothing else of the parts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Teardown {
    /// Its queued work, waited for before anything is given back (the executor's).
    Drain,
    /// The runtime's values stored for the context, whose destructors the runtime expects
    /// while the context is still usable (they may call back into the driver).
    RuntimeState,
    /// The context's created streams.
    Streams,
    /// Its modules, with their variables.
    Modules,
    /// Its events.
    Events,
    /// Peer access it gave or was given.
    Peers,
    /// Its queues on the device's executor (after it was synchronized).
    Queues,
    /// Its memory, all kinds: after the modules, which free their own variables.
    Memory,
}

const TEARDOWN_STEPS: usize = Teardown::Memory as usize + 1;

/// A part's teardown step: gives back what the part keeps for the context.
pub(crate) type TeardownStep = fn(&Arc<Context>);

/// The steps, by [`Teardown`] value; set once each, when the library is loaded.
static STEPS: [OnceLock<TeardownStep>; TEARDOWN_STEPS] =
    [const { OnceLock::new() }; TEARDOWN_STEPS];

/// Makes `run` the step `step` of every context's teardown.
pub(crate) fn register_teardown(step: Teardown, run: TeardownStep) {
    if STEPS[step as usize].set(run).is_err() {
        debug_assert!(false, "two parts registered the teardown step {step:?}");
    }
}

fn tear_down(step: Teardown, ctx: &Arc<Context>) {
    if let Some(run) = STEPS[step as usize].get() {
        run(ctx);
    }
}

/// Registers a part's teardown step: `teardown_step!(Streams, forget_context)` makes
/// `forget_context` (taking `&Context` or `&Arc<Context>`) step [`Teardown::Streams`], when
/// the loader loads the library, before any call into it can make a context.
macro_rules! teardown_step {
    ($step:ident, $run:path) => {
        const _: () = {
            extern "C" fn register() {
                $crate::model::context::register_teardown(
                    $crate::model::context::Teardown::$step,
                    |ctx| $run(ctx),
                );
            }
            // The loader calls the functions listed in `.init_array` when it loads the
            // library (and the test harness's binary, for unit tests).
            #[used]
            #[link_section = ".init_array"]
            static REGISTER: extern "C" fn() = register;
        };
    };
}
pub(crate) use teardown_step;

static CONTEXTS: Registry<Context> = Registry::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Primary context bookkeeping of one device.
#[derive(Default)]
pub(crate) struct Primary {
    retained: u32,
    pub(crate) flags: u32,
    /// Made on first retain and kept, so that its handle never changes.
    pub(crate) ctx: Option<Arc<Context>>,
}

static PRIMARY: Mutex<Vec<Primary>> = Mutex::new(Vec::new());

thread_local! {
    pub(crate) static STACK: RefCell<Vec<Arc<Context>>> = const { RefCell::new(Vec::new()) };
}

impl Context {
    fn new(device: usize, flags: u32, primary: bool) -> Arc<Context> {
        Arc::new(Context {
            device,
            id: NEXT_ID.fetch_add(1, Relaxed),
            primary,
            flags: AtomicU32::new(flags),
            limits: Mutex::new(LIMIT_DEFAULTS),
            cache_config: AtomicU32::new(0),
            shared_mem_config: AtomicU32::new(0),
            destroyed: AtomicBool::new(true),
            sticky: AtomicU32::new(0),
            group: AtomicU32::new(0),
        })
    }

    /// Makes a new or inactive context usable: reserves its device memory and starts from
    /// a clean state.
    fn activate(&self, flags: u32) -> DriverResult {
        let process = driver::process()?;
        process
            .reserve_memory(self.device, process.node().config().context_memory)
            .map_err(|_| code::CUDA_ERROR_OUT_OF_MEMORY)?;
        self.flags.store(flags, Relaxed);
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = LIMIT_DEFAULTS;
        self.cache_config.store(0, Relaxed);
        self.shared_mem_config.store(0, Relaxed);
        self.sticky.store(0, Relaxed);
        self.destroyed.store(false, Relaxed);
        self.group
            .store(crate::model::rm::make_group(self.device), Relaxed);
        Ok(())
    }

    /// A created (not primary) context, registered and usable.
    fn create(device: usize, flags: u32) -> Result<Arc<Context>, CUresult> {
        let ctx = Context::new(device, flags, false);
        ctx.activate(flags)?;
        CONTEXTS.insert(Arc::clone(&ctx));
        Ok(ctx)
    }

    /// The handle the application sees.
    pub(crate) fn handle(self: &Arc<Self>) -> CUcontext {
        Registry::handle_of(self)
    }

    /// Whether the context was destroyed (threads may still hold it as current).
    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Relaxed)
    }

    /// The first error of the context's asynchronous work, if any.
    pub(crate) fn sticky_error(&self) -> Option<CUresult> {
        // Relaxed: the error code is the only data; waits that report it are ordered by the
        // executor's lock.
        match self.sticky.load(Relaxed) {
            0 => None,
            e => Some(e),
        }
    }

    /// Fails with the context's sticky error, if it has one.
    pub(crate) fn check_sticky(&self) -> DriverResult {
        self.sticky_error().map_or(Ok(()), Err)
    }

    /// Records an asynchronous failure; the context stays failed, like a GPU context after a
    /// fault.
    pub(crate) fn fail(&self, error: CUresult) {
        let _ = self.sticky.compare_exchange(0, error, Relaxed, Relaxed);
    }

    /// Finishes the context's work and gives back what it holds. A primary context keeps
    /// its handle, to be made active again by the next retain, as with the driver.
    fn deactivate(self: &Arc<Self>) {
        tear_down(Teardown::Drain, self);
        // While the context is still usable: the runtime frees its state for it.
        tear_down(Teardown::RuntimeState, self);
        if self.destroyed.swap(true, Relaxed) {
            return;
        }
        if !self.primary {
            CONTEXTS.remove(self.handle());
            STACK.with(|s| s.borrow_mut().retain(|c| !Arc::ptr_eq(c, self)));
        }
        for step in [
            Teardown::Streams,
            Teardown::Modules,
            Teardown::Events,
            Teardown::Peers,
            Teardown::Queues,
            Teardown::Memory,
        ] {
            tear_down(step, self);
        }
        crate::model::rm::free_group(self.device, self.group.swap(0, Relaxed));
        if let Ok(process) = driver::process() {
            process.release_memory(self.device, process.node().config().context_memory);
        }
    }
}

/// The calling thread's current context.
pub(crate) fn current() -> Result<Arc<Context>, CUresult> {
    driver::process()?;
    let ctx = STACK
        .with(|s| s.borrow().last().cloned())
        .ok_or(code::CUDA_ERROR_INVALID_CONTEXT)?;
    if ctx.is_destroyed() {
        return Err(code::CUDA_ERROR_CONTEXT_IS_DESTROYED);
    }
    Ok(ctx)
}

/// The live context behind a handle.
pub(crate) fn lookup(handle: CUcontext) -> Result<Arc<Context>, CUresult> {
    driver::process()?;
    CONTEXTS.get(handle).ok_or(code::CUDA_ERROR_INVALID_CONTEXT)
}

/// The context behind a handle, or the current one for null (as many entry points accept).
pub(crate) fn lookup_or_current(handle: CUcontext) -> Result<Arc<Context>, CUresult> {
    if handle.is_null() {
        current()
    } else {
        lookup(handle)
    }
}

fn primaries() -> std::sync::MutexGuard<'static, Vec<Primary>> {
    PRIMARY.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn with_primary<R>(
    dev: CUdevice,
    f: impl FnOnce(&mut Primary, usize) -> R,
) -> Result<R, CUresult> {
    let device = driver::check_device(dev)?;
    let mut table = primaries();
    if table.len() <= device {
        table.resize_with(device + 1, Primary::default);
    }
    Ok(f(&mut table[device], device))
}

pub(crate) fn check_flags(flags: u32) -> DriverResult {
    if flags & !CTX_FLAGS_MASK != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Creates a context and makes it current; the driver's own callers come here directly.
pub(crate) fn create_and_push(pctx: *mut CUcontext, flags: u32, dev: CUdevice) -> DriverResult {
    driver::process()?;
    if pctx.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    check_flags(flags)?;
    let device = driver::check_device(dev)?;
    let ctx = Context::create(device, flags)?;
    let handle = ctx.handle();
    STACK.with(|s| s.borrow_mut().push(ctx));
    // SAFETY: checked non-null above; the caller provides a CUcontext to write.
    unsafe { write_out(pctx, handle) }
}

pub(crate) fn destroy(handle: CUcontext) -> DriverResult {
    let ctx = lookup(handle)?;
    if ctx.primary {
        return Err(code::CUDA_ERROR_INVALID_CONTEXT);
    }
    ctx.deactivate();
    Ok(())
}

/// Retains the device's primary context, making it active if it was not, and writes its
/// handle. The driver's own callers (the runtime's export table) come here directly, never
/// through the exported symbol, which a preloaded library may have interposed.
pub(crate) fn primary_retain(pctx: *mut CUcontext, dev: CUdevice) -> DriverResult {
    driver::process()?;
    if pctx.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let ctx = with_primary(dev, |p, device| -> Result<Arc<Context>, CUresult> {
        let ctx = p
            .ctx
            .get_or_insert_with(|| {
                let ctx = Context::new(device, p.flags, true);
                CONTEXTS.insert(Arc::clone(&ctx));
                ctx
            })
            .clone();
        if ctx.is_destroyed() {
            ctx.activate(p.flags)?;
        }
        p.retained += 1;
        Ok(ctx)
    })??;
    // SAFETY: checked non-null above; the caller provides a CUcontext to write.
    unsafe { write_out(pctx, ctx.handle()) }
}

/// Gives back one retain of the device's primary context; the last makes it inactive.
/// Called directly by the driver's own callers, like [`primary_retain`].
pub(crate) fn primary_release(dev: CUdevice) -> DriverResult {
    driver::process()?;
    // Under the table's lock, so that a concurrent retain finds the context either active
    // or already inactive.
    with_primary(dev, |p, _| {
        if p.retained == 0 {
            return Err(code::CUDA_ERROR_INVALID_CONTEXT);
        }
        p.retained -= 1;
        if p.retained == 0 {
            if let Some(ctx) = &p.ctx {
                ctx.deactivate();
            }
        }
        Ok(())
    })?
}

pub(crate) fn primary_reset(dev: CUdevice) -> DriverResult {
    driver::process()?;
    with_primary(dev, |p, _| {
        p.retained = 0;
        if let Some(ctx) = &p.ctx {
            ctx.deactivate();
        }
    })
}

pub(crate) fn primary_set_flags(dev: CUdevice, flags: u32) -> DriverResult {
    driver::process()?;
    check_flags(flags)?;
    with_primary(dev, |p, _| {
        p.flags = flags;
        if let Some(ctx) = p.ctx.as_ref().filter(|c| !c.is_destroyed()) {
            ctx.flags.store(flags, Relaxed);
        }
    })
}

pub(crate) fn push(ctx: CUcontext) -> DriverResult {
    driver::process()?;
    if ctx.is_null() {
        return Err(code::CUDA_ERROR_INVALID_CONTEXT);
    }
    let ctx = lookup(ctx)?;
    STACK.with(|s| s.borrow_mut().push(ctx));
    Ok(())
}

pub(crate) fn pop(pctx: *mut CUcontext) -> DriverResult {
    driver::process()?;
    let ctx = STACK
        .with(|s| s.borrow_mut().pop())
        .ok_or(code::CUDA_ERROR_INVALID_CONTEXT)?;
    if pctx.is_null() {
        return Ok(());
    }
    // SAFETY: non-null; the caller provides a CUcontext to write.
    unsafe { write_out(pctx, ctx.handle()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_registered_its_teardown_step() {
        for (i, step) in STEPS.iter().enumerate() {
            assert!(step.get().is_some(), "teardown step {i} has no part");
        }
    }
}
