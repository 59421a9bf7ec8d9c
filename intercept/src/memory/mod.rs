//! Memory isolation: every driver entry point that allocates or frees device memory, and
//! every query that reports it, as handlers called from the hook table.
//!
//! Each handler receives the real function of the variant that was called, so one handler
//! serves an entry point and its per-thread-stream twin. Allocations reserve their bytes
//! against the container's cap before the driver runs and give them back if it fails
//! ([`crate::container::Reservation`]); frees give back what the registry recorded — once
//! the driver has really freed it: a stream-ordered free when it runs in its stream
//! (`pool`), a physical VMM allocation once released and unmapped everywhere (`vmm`).

pub(crate) mod alloc;
pub(crate) mod array;
pub(crate) mod context;
pub(crate) mod nvml;
pub(crate) mod pool;
pub(crate) mod query;
pub(crate) mod registry;
pub(crate) mod vmm;

use crate::container::{self, Container, Reservation};
use crate::fork_lock;
use registry::{Allocation, Key, Registry};
use std::sync::atomic::{AtomicBool, Ordering};
use tessera_cuda_abi::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};

/// What this process has allocated and not yet freed, for the frees.
static REGISTRY: Registry = Registry::new();

/// Where an allocation is made: the calling thread's current context and its device (its
/// node index, which the caps are kept by).
#[derive(Clone, Copy)]
pub(crate) struct Site {
    pub device: usize,
    pub context: usize,
}

impl Site {
    /// The calling thread's current context and device ([`crate::current`]); `None`
    /// without a usable context (the driver then fails the call itself).
    pub(crate) fn current() -> Option<Site> {
        crate::current::get().map(|c| Site {
            device: c.device,
            context: c.context,
        })
    }
}

/// The outcome of reserving before an allocation.
pub(crate) enum Admit {
    /// Go ahead, holding this reservation.
    Go(&'static Container, Reservation),
    /// Not counted (no container state): call the driver directly.
    Uncounted,
    /// Over the container's cap.
    OverCap,
}

/// Whether the loss of the region was said already (once a process).
static REGION_LOST_SAID: AtomicBool = AtomicBool::new(false);

/// Reserves `bytes` on `device`.
pub(crate) fn admit(device: usize, bytes: u64) -> Admit {
    let Some(c) = container::get() else {
        return Admit::Uncounted;
    };
    if c.region().faulted() {
        // Its file shrank under this process: what the mapping reads now is nobody's, so
        // nothing more is allocated (fail closed).
        if !REGION_LOST_SAID.swap(true, Ordering::Relaxed) {
            crate::tlog!(
                error,
                "the container's region file shrank under this process: every allocation fails with out-of-memory from now on"
            );
        }
        return Admit::OverCap;
    }
    // Frees that have run in their streams give their bytes back first.
    pool::settle();
    // A context counted at a guess, or one that has grown, is trued up to NVML's figure
    // first; NVML showing the container at its cap already refuses the allocation.
    if !context::true_up(c, device, bytes) {
        return Admit::OverCap;
    }
    match c.reserve(device, bytes) {
        Ok(r) => Admit::Go(c, r),
        Err(over) => {
            crate::tlog!(
                debug,
                "{bytes} bytes on device {device} refused: the container holds {} of {}",
                over.used,
                over.cap
            );
            Admit::OverCap
        }
    }
}

/// Records an allocation the driver made under `reservation`, which it now holds.
pub(crate) fn record(
    c: &Container,
    key: Key,
    device: usize,
    bytes: u64,
    context: usize,
    reservation: Reservation,
) {
    if !reservation.is_counted() {
        return;
    }
    reservation.keep();
    let allocation = Allocation {
        device,
        bytes,
        context,
        generation: fork_lock::generation(),
    };
    if let Some(stale) = REGISTRY.insert(key, allocation) {
        // The driver handed out the same pointer or handle again, so the old one was freed
        // where we could not see it.
        c.release(stale.device, stale.bytes, stale.generation);
    }
}

/// Frees `key` through `free` (the real driver call) and gives back its bytes if the
/// driver freed it. The record leaves the registry before the driver runs, so that another
/// thread given the same address at once records its own allocation safely.
pub(crate) fn forget(key: Key, free: impl FnOnce() -> u32) -> u32 {
    // After the driver's free: the cap never counts memory as free before it is.
    forget_then(key, free, |c, a| c.release(a.device, a.bytes, a.generation))
}

/// [`forget`], with `give_back` deciding when the bytes of a freed allocation go back.
pub(crate) fn forget_then(
    key: Key,
    free: impl FnOnce() -> u32,
    give_back: impl FnOnce(&Container, Allocation),
) -> u32 {
    let Some(c) = container::get() else {
        return free();
    };
    let known = REGISTRY.remove(key);
    let rc = free();
    if let Some(a) = known {
        if rc == CUDA_SUCCESS {
            give_back(c, a);
        } else if REGISTRY.insert(key, a).is_some() {
            // Cannot happen: the key was not freed, so nobody else could have it.
            crate::tlog!(warn, "allocation {key:?} recorded twice");
        }
    }
    rc
}

/// Gives back everything that belonged to a context the driver has just destroyed (or
/// reset): its linear allocations and arrays went with it, and its streams' pending frees
/// have run.
pub(crate) fn forget_context(context: usize) {
    if context == 0 {
        return;
    }
    let Some(c) = container::get() else { return };
    for (_, a) in REGISTRY.remove_where(|_, a| a.context == context) {
        c.release(a.device, a.bytes, a.generation);
    }
    pool::forget_context(c, context);
}

/// Reserves `bytes` of linear memory on the current device, lets `alloc` make the
/// allocation and records the pointer it wrote to `dptr`.
///
/// # Safety
/// `dptr` is null or points to a `CUdeviceptr` that `alloc` writes on success.
pub(crate) unsafe fn counted(dptr: *mut u64, bytes: u64, alloc: impl FnOnce() -> u32) -> u32 {
    let Some(site) = Site::current().filter(|_| !dptr.is_null()) else {
        return alloc();
    };
    let (c, reservation) = match admit(site.device, bytes) {
        Admit::Go(c, r) => (c, r),
        Admit::Uncounted => return alloc(),
        Admit::OverCap => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let rc = alloc();
    if rc == CUDA_SUCCESS {
        // SAFETY: dptr is non-null and the driver just wrote the new pointer there.
        let ptr = unsafe { dptr.read() };
        record(
            c,
            Key::Pointer(ptr),
            site.device,
            bytes,
            site.context,
            reservation,
        );
    }
    rc
}

/// The device of the calling thread's current context, as the caps know it (its node
/// index; see [`crate::current`]).
pub(super) fn current_device() -> Option<usize> {
    crate::current::get().map(|c| c.device)
}
