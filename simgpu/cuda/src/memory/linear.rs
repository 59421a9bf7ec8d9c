//! The entry points of linear memory: allocations, host memory, registration, frees.
//!
//! They check and translate the C arguments, call into [`crate::model::memory::linear`], and
//! write its results out as the driver API does.

use crate::ffi::{code, write_out, CUdeviceptr, CUstream};
use crate::model::driver;
use crate::model::memory::linear::*;
use crate::model::memory::location::CUmemLocation;
use crate::model::memory::registry::{self, Kind};
use crate::model::memory::round_up;
use std::ffi::c_void;

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
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        if ![4, 8, 16].contains(&element_size_bytes) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let pitch = round_up(width_in_bytes as u64, PITCH_ALIGNMENT).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
        let bytes = pitch.checked_mul(height as u64).ok_or(code::CUDA_ERROR_OUT_OF_MEMORY)?;
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
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        alloc_on_current(dptr, bytesize as u64, Kind::Managed)
    }

    fn cuMemFree_v2(dptr: CUdeviceptr) {
        free_synchronously(dptr, Kind::freed_by_mem_free)
    }

    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
        let (device, _) = current_device()?;
        if free.is_null() || total.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
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
        if rc != code::CUDA_SUCCESS {
            return Err(rc);
        }
        if free.is_null() || total.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
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
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let known = registry::read()
            .find(p as u64)
            .is_some_and(|a| !a.kind.on_device());
        if !known {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // Unified addressing: the device sees page-locked memory at its host address.
        // SAFETY: pdptr is non-null and points to a CUdeviceptr.
        unsafe { write_out(pdptr, p as u64) }
    }

    fn cuMemHostGetFlags(p_flags: *mut u32, p: *mut c_void) {
        driver::process()?;
        if p_flags.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let flags = match registry::read().find(p as u64).map(|a| a.kind) {
            Some(Kind::Host(f)) | Some(Kind::Registered(f)) => f,
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
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
            .ok_or(code::CUDA_ERROR_NOT_FOUND)?;
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
