//! Linear allocations: device, pitched, managed and page-locked host memory, host
//! registration, frees and `cuMemGetInfo`.

use super::location::{CUmemLocation, LOCATION_DEVICE};
use super::registry::{self, Access, Allocation, Kind};
use super::{map_lazy, release};
use crate::ffi::{code, write_out, CUdeviceptr, CUresult, CUstream, DriverResult};
use crate::model::context;
use crate::model::driver;
use crate::model::stream;
use std::ffi::c_void;

/// `cuMemAllocPitch` rounds rows to this many bytes.
pub(crate) const PITCH_ALIGNMENT: u64 = 512;

/// `cuMemHostAlloc` flags: PORTABLE, DEVICEMAP, WRITECOMBINED.
const HOST_ALLOC_FLAGS: u32 = 0x7;
/// `cuMemHostRegister` flags: PORTABLE, DEVICEMAP, IOMEMORY, READ_ONLY.
const HOST_REGISTER_FLAGS: u32 = 0xf;
/// `CU_MEM_ATTACH_GLOBAL`, `CU_MEM_ATTACH_HOST`.
pub(crate) const ATTACH_FLAGS: [u32; 2] = [0x1, 0x2];

const HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
pub(crate) const HOST_MEMORY_NOT_REGISTERED: CUresult = 713;

/// Reserves `bytes` on `device`, maps them and registers the allocation.
pub(crate) fn allocate(
    device: usize,
    bytes: u64,
    kind: Kind,
    context: Owner,
) -> Result<u64, CUresult> {
    if bytes == 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let process = driver::process()?;
    let accounted = kind.counted();
    if accounted {
        process
            .reserve_memory(device, bytes)
            .map_err(|_| code::CUDA_ERROR_OUT_OF_MEMORY)?;
    }
    let base = map_lazy(bytes).inspect_err(|_| {
        if accounted {
            process.release_memory(device, bytes);
        }
    })?;
    registry::write().insert(Allocation {
        base,
        size: bytes,
        kind,
        device,
        id: registry::next_id(),
        context: context.handle,
        context_id: context.id,
        access: Access::ReadWrite,
        free_pending: false,
    });
    Ok(base)
}

/// Frees the allocation at `base` if it is still the one with `id`.
pub(crate) fn finish_free(base: u64, id: u64) {
    let gone = registry::write().remove_if_id(base, id);
    if let Some(a) = gone {
        release(&a);
    }
}

/// Marks the allocation at `ptr` as being freed, if `accept` takes its kind.
pub(crate) fn begin_free(ptr: u64, accept: fn(Kind) -> bool) -> Result<Allocation, CUresult> {
    let mut reg = registry::write();
    match reg.get_mut(ptr) {
        Some(a) if accept(a.kind) && !a.free_pending => {
            a.free_pending = true;
            Ok(a.clone())
        }
        _ => Err(code::CUDA_ERROR_INVALID_VALUE),
    }
}

/// A synchronous free: after the work already queued on the legacy default stream (which
/// waits for the blocking streams), so that queued copies and kernels never touch unmapped
/// memory, as the driver's own free waits for them.
pub(crate) fn free_synchronously(ptr: u64, accept: fn(Kind) -> bool) -> DriverResult {
    driver::process()?;
    if ptr == 0 {
        return Ok(());
    }
    let a = begin_free(ptr, accept)?;
    let (base, id) = (a.base, a.id);
    let finish = move || finish_free(base, id);
    if stream::run_synchronously(false, finish).is_err() {
        // No usable context (or stream) to order against: nothing of ours is queued.
        finish();
    }
    Ok(())
}

/// The context an allocation belongs to: its handle (for pointer attributes) and id.
#[derive(Clone, Copy, Default)]
pub(crate) struct Owner {
    handle: usize,
    id: u64,
}

impl Owner {
    /// The calling thread's current context, if any.
    pub(super) fn current() -> Owner {
        context::current().map_or(Owner::default(), |c| Owner {
            handle: c.handle() as usize,
            id: c.id,
        })
    }
}

/// The current context's device, and the context as an owner.
pub(crate) fn current_device() -> Result<(usize, Owner), CUresult> {
    driver::process()?;
    let ctx = context::current()?;
    let owner = Owner {
        handle: ctx.handle() as usize,
        id: ctx.id,
    };
    Ok((ctx.device, owner))
}

pub(crate) fn alloc_on_current(out: *mut CUdeviceptr, bytes: u64, kind: Kind) -> DriverResult {
    let (device, ctx) = current_device()?;
    if out.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let base = allocate(device, bytes, kind, ctx)?;
    // SAFETY: out is non-null and, by the contract, points to a CUdeviceptr.
    unsafe { write_out(out, base) }
}

pub(crate) fn host_alloc(out: *mut *mut c_void, bytes: usize, flags: u32) -> DriverResult {
    let (device, ctx) = current_device()?;
    if out.is_null() || flags & !HOST_ALLOC_FLAGS != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let base = allocate(device, bytes as u64, Kind::Host(flags), ctx)?;
    // SAFETY: out is non-null and points to a pointer.
    unsafe { write_out(out, base as *mut c_void) }
}

pub(crate) fn host_register(p: *mut c_void, bytes: usize, flags: u32) -> DriverResult {
    let (device, ctx) = current_device()?;
    if p.is_null() || bytes == 0 || flags & !HOST_REGISTER_FLAGS != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let base = p as u64;
    let mut reg = registry::write();
    if reg.overlapping(base, bytes as u64).is_some() {
        return Err(HOST_MEMORY_ALREADY_REGISTERED);
    }
    reg.insert(Allocation {
        base,
        size: bytes as u64,
        kind: Kind::Registered(flags),
        device,
        id: registry::next_id(),
        context: ctx.handle,
        context_id: ctx.id,
        access: Access::ReadWrite,
        free_pending: false,
    });
    Ok(())
}

/// `CU_DEVICE_CPU`: the host, as a prefetch or advice target.
const DEVICE_CPU: i32 = -1;

/// Checks that `[dptr, dptr + count)` is managed memory and `device` the host or a device.
fn check_managed(dptr: CUdeviceptr, count: usize, device: i32) -> DriverResult {
    driver::process()?;
    if device != DEVICE_CPU {
        driver::check_device(device)?;
    }
    let managed = registry::read()
        .find_range(dptr, count as u64)
        .is_some_and(|a| a.kind == Kind::Managed);
    managed.then_some(()).ok_or(code::CUDA_ERROR_INVALID_VALUE)
}

/// The device a `CUmemLocation` names for prefetches and advice (host kinds are the CPU).
pub(crate) fn location_target(location: CUmemLocation) -> Result<i32, CUresult> {
    match location.kind {
        LOCATION_DEVICE => Ok(location.id),
        2..=4 => Ok(DEVICE_CPU), // HOST, HOST_NUMA, HOST_NUMA_CURRENT
        _ => Err(code::CUDA_ERROR_INVALID_VALUE),
    }
}

pub(crate) fn prefetch(
    dptr: CUdeviceptr,
    count: usize,
    device: i32,
    stream: CUstream,
    per_thread: bool,
) -> DriverResult {
    check_managed(dptr, count, device)?;
    // Managed memory lives in one place for every device and the host: nothing to move.
    stream::stream_device(stream, per_thread).map(|_| ())
}

pub(crate) fn advise(dptr: CUdeviceptr, count: usize, advice: i32, device: i32) -> DriverResult {
    check_managed(dptr, count, device)?;
    // CU_MEM_ADVISE_SET_READ_MOSTLY .. UNSET_ACCESSED_BY: hints with nothing to act on here.
    if (1..=6).contains(&advice) {
        Ok(())
    } else {
        Err(code::CUDA_ERROR_INVALID_VALUE)
    }
}
