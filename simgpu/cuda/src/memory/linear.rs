//! Linear allocations: device, pitched, managed and page-locked host memory, host
//! registration, frees and `cuMemGetInfo`.

use super::pool::{CUmemLocation, LOCATION_DEVICE};
use super::registry::{self, Access, Allocation, Kind};
use super::{map_lazy, pool, round_up, unmap};
use crate::context;
use crate::ffi::{code, write_out, CUdeviceptr, CUresult, CUstream, DriverResult};
use crate::model::driver;
use crate::stream;
use std::ffi::c_void;

/// `cuMemAllocPitch` rounds rows to this many bytes.
const PITCH_ALIGNMENT: u64 = 512;

/// `cuMemHostAlloc` flags: PORTABLE, DEVICEMAP, WRITECOMBINED.
const HOST_ALLOC_FLAGS: u32 = 0x7;
/// `cuMemHostRegister` flags: PORTABLE, DEVICEMAP, IOMEMORY, READ_ONLY.
const HOST_REGISTER_FLAGS: u32 = 0xf;
/// `CU_MEM_ATTACH_GLOBAL`, `CU_MEM_ATTACH_HOST`.
const ATTACH_FLAGS: [u32; 2] = [0x1, 0x2];

const HOST_MEMORY_ALREADY_REGISTERED: CUresult = 712;
const HOST_MEMORY_NOT_REGISTERED: CUresult = 713;

/// Reserves `bytes` on `device`, maps them and registers the allocation.
pub(super) fn allocate(
    device: usize,
    bytes: u64,
    kind: Kind,
    context: Owner,
) -> Result<u64, CUresult> {
    if bytes == 0 {
        return Err(code::INVALID_VALUE);
    }
    let process = driver::process()?;
    let accounted = kind.counted();
    if accounted {
        process
            .reserve_memory(device, bytes)
            .map_err(|_| code::OUT_OF_MEMORY)?;
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

/// Gives back the memory of an allocation that has left the registry.
pub(super) fn release(a: &Allocation) {
    if matches!(a.kind, Kind::Registered(_) | Kind::Mapped(_)) {
        return;
    }
    // SAFETY: the allocation was mapped by `allocate` and has left the registry, so no
    // entry point can reach it any more; stream work that used it ran before (the caller
    // orders the release after it).
    unsafe { unmap(a.base, a.size) };
    if a.kind.counted() {
        if let Ok(process) = driver::process() {
            process.release_memory(a.device, a.size);
        }
    }
    if let Kind::Pool(p) = a.kind {
        pool::on_free(p, a.size);
    }
}

/// Frees the allocation at `base` if it is still the one with `id`.
pub(super) fn finish_free(base: u64, id: u64) {
    let gone = registry::write().remove_if_id(base, id);
    if let Some(a) = gone {
        release(&a);
    }
}

/// Marks the allocation at `ptr` as being freed, if `accept` takes its kind.
pub(super) fn begin_free(ptr: u64, accept: fn(Kind) -> bool) -> Result<Allocation, CUresult> {
    let mut reg = registry::write();
    match reg.get_mut(ptr) {
        Some(a) if accept(a.kind) && !a.free_pending => {
            a.free_pending = true;
            Ok(a.clone())
        }
        _ => Err(code::INVALID_VALUE),
    }
}

/// A synchronous free: after the work already queued on the legacy default stream (which
/// waits for the blocking streams), so that queued copies and kernels never touch unmapped
/// memory, as the driver's own free waits for them.
fn free_synchronously(ptr: u64, accept: fn(Kind) -> bool) -> DriverResult {
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
pub(super) struct Owner {
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
pub(super) fn current_device() -> Result<(usize, Owner), CUresult> {
    driver::process()?;
    let ctx = context::current()?;
    let owner = Owner {
        handle: ctx.handle() as usize,
        id: ctx.id,
    };
    Ok((ctx.device, owner))
}

fn alloc_on_current(out: *mut CUdeviceptr, bytes: u64, kind: Kind) -> DriverResult {
    let (device, ctx) = current_device()?;
    if out.is_null() {
        return Err(code::INVALID_VALUE);
    }
    let base = allocate(device, bytes, kind, ctx)?;
    // SAFETY: out is non-null and, by the contract, points to a CUdeviceptr.
    unsafe { write_out(out, base) }
}

fn host_alloc(out: *mut *mut c_void, bytes: usize, flags: u32) -> DriverResult {
    let (device, ctx) = current_device()?;
    if out.is_null() || flags & !HOST_ALLOC_FLAGS != 0 {
        return Err(code::INVALID_VALUE);
    }
    let base = allocate(device, bytes as u64, Kind::Host(flags), ctx)?;
    // SAFETY: out is non-null and points to a pointer.
    unsafe { write_out(out, base as *mut c_void) }
}

fn host_register(p: *mut c_void, bytes: usize, flags: u32) -> DriverResult {
    let (device, ctx) = current_device()?;
    if p.is_null() || bytes == 0 || flags & !HOST_REGISTER_FLAGS != 0 {
        return Err(code::INVALID_VALUE);
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

cuda_entry! {
    fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) {
        alloc_on_current(dptr, bytesize as u64, Kind::Device)
    }

    fn cuMemAllocPitch_v2(
        dptr: *mut CUdeviceptr,
        p_pitch: *mut usize,
        width_in_bytes: usize,
        height: usize,
        element_size_bytes: u32,
    ) {
        let (device, ctx) = current_device()?;
        if dptr.is_null() || p_pitch.is_null() || width_in_bytes == 0 || height == 0 {
            return Err(code::INVALID_VALUE);
        }
        if ![4, 8, 16].contains(&element_size_bytes) {
            return Err(code::INVALID_VALUE);
        }
        let pitch = round_up(width_in_bytes as u64, PITCH_ALIGNMENT).ok_or(code::INVALID_VALUE)?;
        let bytes = pitch.checked_mul(height as u64).ok_or(code::OUT_OF_MEMORY)?;
        let base = allocate(device, bytes, Kind::Device, ctx)?;
        // SAFETY: both out-pointers are non-null and point to their types.
        unsafe {
            write_out(p_pitch, pitch as usize)?;
            write_out(dptr, base)
        }
    }

    fn cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: u32) {
        if !ATTACH_FLAGS.contains(&flags) {
            driver::process()?;
            return Err(code::INVALID_VALUE);
        }
        alloc_on_current(dptr, bytesize as u64, Kind::Managed)
    }

    fn cuMemFree_v2(dptr: CUdeviceptr) {
        free_synchronously(dptr, Kind::freed_by_mem_free)
    }

    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let (device, _) = current_device()?;
        if free.is_null() || total.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let process = driver::process()?;
        let capacity = driver::devices()?[device].memory;
        let used = process.node().memory_used(process.node_index(device));
        // SAFETY: both out-pointers are non-null and point to size_t.
        unsafe {
            write_out(free, capacity.saturating_sub(used) as usize)?;
            write_out(total, capacity as usize)
        }
    }

    /// The 32-bit original: sizes over 4 GiB read as the largest value it can hold.
    fn cuMemGetInfo(free: *mut u32, total: *mut u32) {
        let mut f = 0usize;
        let mut t = 0usize;
        // SAFETY: both out-pointers are our locals.
        let rc = unsafe { cuMemGetInfo_v2(&mut f, &mut t) };
        if rc != code::SUCCESS {
            return Err(rc);
        }
        if free.is_null() || total.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let clamp = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        // SAFETY: both are non-null and point to unsigned ints.
        unsafe {
            write_out(free, clamp(f))?;
            write_out(total, clamp(t))
        }
    }

    fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) {
        host_alloc(pp, bytesize, 0)
    }

    fn cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: u32) {
        host_alloc(pp, bytesize, flags)
    }

    fn cuMemFreeHost(p: *mut c_void) {
        free_synchronously(p as u64, |k| matches!(k, Kind::Host(_)))
    }

    fn cuMemHostGetDevicePointer_v2(pdptr: *mut CUdeviceptr, p: *mut c_void, flags: u32) {
        driver::process()?;
        if pdptr.is_null() || flags != 0 {
            return Err(code::INVALID_VALUE);
        }
        let known = registry::read()
            .find(p as u64)
            .is_some_and(|a| !a.kind.on_device());
        if !known {
            return Err(code::INVALID_VALUE);
        }
        // Unified addressing: the device sees page-locked memory at its host address.
        // SAFETY: pdptr is non-null and points to a CUdeviceptr.
        unsafe { write_out(pdptr, p as u64) }
    }

    fn cuMemHostGetFlags(p_flags: *mut u32, p: *mut c_void) {
        driver::process()?;
        if p_flags.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let flags = match registry::read().find(p as u64).map(|a| a.kind) {
            Some(Kind::Host(f)) | Some(Kind::Registered(f)) => f,
            _ => return Err(code::INVALID_VALUE),
        };
        // SAFETY: p_flags is non-null and points to an unsigned int.
        unsafe { write_out(p_flags, flags) }
    }

    fn cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, flags: u32) {
        host_register(p, bytesize, flags)
    }

    /// The original has the same arguments.
    fn cuMemHostRegister(p: *mut c_void, bytesize: usize, flags: u32) {
        host_register(p, bytesize, flags)
    }

    fn cuMemHostUnregister(p: *mut c_void) {
        driver::process()?;
        let mut reg = registry::write();
        match reg.get_mut(p as u64) {
            Some(a) if matches!(a.kind, Kind::Registered(_)) => {
                reg.remove(p as u64);
                Ok(())
            }
            _ => Err(HOST_MEMORY_NOT_REGISTERED),
        }
    }

    fn cuMemGetAddressRange_v2(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr) {
        driver::process()?;
        let (base, size) = registry::read()
            .find(dptr)
            .map(|a| (a.base, a.size))
            .ok_or(code::NOT_FOUND)?;
        // Either out-pointer may be null: the caller wants only the other.
        if !pbase.is_null() {
            // SAFETY: non-null, points to a CUdeviceptr.
            unsafe { write_out(pbase, base)? };
        }
        if !psize.is_null() {
            // SAFETY: non-null, points to a size_t.
            unsafe { write_out(psize, size as usize)? };
        }
        Ok(())
    }
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
    managed.then_some(()).ok_or(code::INVALID_VALUE)
}

/// The device a `CUmemLocation` names for prefetches and advice (host kinds are the CPU).
fn location_target(location: CUmemLocation) -> Result<i32, CUresult> {
    match location.kind {
        LOCATION_DEVICE => Ok(location.id),
        2..=4 => Ok(DEVICE_CPU), // HOST, HOST_NUMA, HOST_NUMA_CURRENT
        _ => Err(code::INVALID_VALUE),
    }
}

fn prefetch(
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

fn advise(dptr: CUdeviceptr, count: usize, advice: i32, device: i32) -> DriverResult {
    check_managed(dptr, count, device)?;
    // CU_MEM_ADVISE_SET_READ_MOSTLY .. UNSET_ACCESSED_BY: hints with nothing to act on here.
    if (1..=6).contains(&advice) {
        Ok(())
    } else {
        Err(code::INVALID_VALUE)
    }
}

cuda_entry! {
    fn cuMemPrefetchAsync(dptr: CUdeviceptr, count: usize, dst_device: i32, h_stream: CUstream) {
        prefetch(dptr, count, dst_device, h_stream, false)
    }

    fn cuMemPrefetchAsync_ptsz(dptr: CUdeviceptr, count: usize, dst_device: i32, h_stream: CUstream) {
        prefetch(dptr, count, dst_device, h_stream, true)
    }

    fn cuMemPrefetchAsync_v2(dptr: CUdeviceptr, count: usize, location: CUmemLocation, _flags: u32, h_stream: CUstream) {
        prefetch(dptr, count, location_target(location)?, h_stream, false)
    }

    fn cuMemPrefetchAsync_v2_ptsz(dptr: CUdeviceptr, count: usize, location: CUmemLocation, _flags: u32, h_stream: CUstream) {
        prefetch(dptr, count, location_target(location)?, h_stream, true)
    }

    fn cuMemAdvise(dptr: CUdeviceptr, count: usize, advice: i32, device: i32) {
        advise(dptr, count, advice, device)
    }

    fn cuMemAdvise_v2(dptr: CUdeviceptr, count: usize, advice: i32, location: CUmemLocation) {
        advise(dptr, count, advice, location_target(location)?)
    }
}
