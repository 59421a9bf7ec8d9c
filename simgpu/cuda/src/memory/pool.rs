//! The entry points of memory pools and stream-ordered allocation.
//!
//! They check and translate the C arguments, call into [`crate::model::memory::pool`], and
//! write its results out as the driver API does.

use crate::ffi::{code, write_out, CUdeviceptr, CUstream};
use crate::model::driver;
use crate::model::memory::location::CUmemLocation;
use crate::model::memory::pool::*;
use std::ffi::{c_int, c_void};

cuda_entry! {
    fn cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream) {
        alloc_async(dptr, bytesize, None, h_stream, false)
    }

    fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream) {
        alloc_async(dptr, bytesize, None, h_stream, true)
    }

    fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream) {
        alloc_async(dptr, bytesize, Some(pool), h_stream, false)
    }

    fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream) {
        alloc_async(dptr, bytesize, Some(pool), h_stream, true)
    }

    fn cuMemFreeAsync(dptr: CUdeviceptr, h_stream: CUstream) {
        free_async(dptr, h_stream, false)
    }

    fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, h_stream: CUstream) {
        free_async(dptr, h_stream, true)
    }

    fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const c_void) {
        driver::process()?;
        if pool.is_null() || props.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: props points to a CUmemPoolProps, whose leading fields these are.
        let head = unsafe { props.cast::<CUmemPoolPropsHead>().read() };
        if head.alloc_type != ALLOCATION_PINNED {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let device = location_device(&head.location)?;
        let _ = head.handle_types; // nothing is ever exported, whatever was asked for
        let handle = pools().create(device, false);
        // SAFETY: pool is non-null and points to a CUmemoryPool.
        unsafe { write_out(pool, handle as CUmemoryPool) }
    }

    fn cuMemPoolDestroy(pool: CUmemoryPool) {
        driver::process()?;
        let mut p = pools();
        if p.get(pool)?.default {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        p.by_handle.remove(&(pool as usize));
        // A device whose current pool this was goes back to its default pool.
        for current in p.current.iter_mut().filter(|c| **c == pool as usize) {
            *current = 0;
        }
        Ok(())
    }

    fn cuMemPoolSetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) {
        driver::process()?;
        let mut p = pools();
        let pool = p.get(pool)?;
        if value.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let int = || {
            // SAFETY: value is non-null and, for these attributes, points to an int.
            unsafe { value.cast::<c_int>().read() }
        };
        let u64 = || {
            // SAFETY: value is non-null and, for these attributes, points to a cuuint64_t.
            unsafe { value.cast::<u64>().read() }
        };
        match attr {
            1..=3 => pool.reuse[attr as usize - 1] = int(),
            4 => pool.release_threshold = u64(),
            // The high-water marks can only be reset, by writing 0.
            6 | 8 if u64() == 0 => pool.used_high = pool.used,
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
        }
        Ok(())
    }

    fn cuMemPoolGetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) {
        driver::process()?;
        let mut p = pools();
        let pool = p.get(pool)?;
        if value.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let wide = match attr {
            1..=3 => {
                // SAFETY: value is non-null and, for these attributes, points to an int.
                unsafe { value.cast::<c_int>().write(pool.reuse[attr as usize - 1]) };
                return Ok(());
            }
            4 => pool.release_threshold,
            // Nothing is kept in reserve: what the pool holds is what is in use.
            5 | 7 => pool.used,
            6 | 8 => pool.used_high,
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
        };
        // SAFETY: value is non-null and, for these attributes, points to a cuuint64_t.
        unsafe { value.cast::<u64>().write(wide) };
        Ok(())
    }

    fn cuMemPoolTrimTo(pool: CUmemoryPool, _min_bytes_to_keep: usize) {
        driver::process()?;
        pools().get(pool)?;
        Ok(())
    }

    fn cuMemPoolSetAccess(pool: CUmemoryPool, map: *const CUmemAccessDesc, count: usize) {
        driver::process()?;
        pools().get(pool)?;
        if count > 0 && map.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..count {
            // SAFETY: map holds count descriptors, by the contract.
            let desc = unsafe { map.add(i).read() };
            location_device(&desc.location)?;
        }
        Ok(())
    }

    fn cuMemPoolGetAccess(flags: *mut c_int, pool: CUmemoryPool, location: *const CUmemLocation) {
        driver::process()?;
        pools().get(pool)?;
        if location.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: location is non-null and points to a CUmemLocation.
        location_device(unsafe { &*location })?;
        // Every device reaches all memory of the node.
        // SAFETY: flags is null or points to a CUmemAccess_flags.
        unsafe { write_out(flags, ACCESS_READWRITE) }
    }
}
