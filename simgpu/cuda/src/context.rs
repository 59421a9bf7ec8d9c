//! The entry points of contexts (primary and created) and the current-context stack.
//!
//! They check and translate the C arguments, call into [`crate::model::context`], and
//! write its results out as the driver API does.

use crate::ffi::{code, write_out, CUcontext, CUdevice};
use crate::model::context::*;
use crate::model::driver;
use crate::model::exec;
use std::sync::atomic::Ordering::Relaxed;

cuda_entry! {
    fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) {
        primary_retain(pctx, dev)
    }

    fn cuDevicePrimaryCtxRelease(dev: CUdevice) {
        primary_release(dev)
    }

    fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) {
        primary_release(dev)
    }

    fn cuDevicePrimaryCtxReset(dev: CUdevice) {
        primary_reset(dev)
    }

    fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) {
        primary_reset(dev)
    }

    fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: u32) {
        primary_set_flags(dev, flags)
    }

    fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: u32) {
        primary_set_flags(dev, flags)
    }

    fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut u32, active: *mut i32) {
        driver::process()?;
        if flags.is_null() || active.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let (f, a) = with_primary(dev, |p, _| {
            (p.flags, p.ctx.as_ref().is_some_and(|c| !c.is_destroyed()) as i32)
        })?;
        // SAFETY: both checked non-null; the caller provides them for writing.
        unsafe {
            write_out(flags, f)?;
            write_out(active, a)
        }
    }

    fn cuCtxCreate(pctx: *mut CUcontext, flags: u32, dev: CUdevice) {
        create_and_push(pctx, flags, dev)
    }

    fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: u32, dev: CUdevice) {
        create_and_push(pctx, flags, dev)
    }

    /// Execution-affinity parameters (SM partitions) are accepted and not applied.
    fn cuCtxCreate_v3(
        pctx: *mut CUcontext,
        params: *mut std::ffi::c_void,
        num_params: i32,
        flags: u32,
        dev: CUdevice,
    ) {
        if num_params < 0 || (num_params > 0 && params.is_null()) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        create_and_push(pctx, flags, dev)
    }

    /// Creation parameters (affinity, CIG) are accepted and not applied.
    fn cuCtxCreate_v4(
        pctx: *mut CUcontext,
        _params: *mut std::ffi::c_void,
        flags: u32,
        dev: CUdevice,
    ) {
        create_and_push(pctx, flags, dev)
    }

    fn cuCtxDestroy(ctx: CUcontext) {
        destroy(ctx)
    }

    fn cuCtxDestroy_v2(ctx: CUcontext) {
        destroy(ctx)
    }

    fn cuCtxSetCurrent(ctx: CUcontext) {
        driver::process()?;
        let ctx = if ctx.is_null() { None } else { Some(lookup(ctx)?) };
        STACK.with(|s| {
            let mut stack = s.borrow_mut();
            stack.pop();
            stack.extend(ctx);
        });
        Ok(())
    }

    fn cuCtxGetCurrent(pctx: *mut CUcontext) {
        driver::process()?;
        let handle = STACK
            .with(|s| s.borrow().last().map(Context::handle))
            .unwrap_or(std::ptr::null_mut());
        // SAFETY: write_out checks null; the caller provides a CUcontext to write.
        unsafe { write_out(pctx, handle) }
    }

    fn cuCtxPushCurrent(ctx: CUcontext) {
        push(ctx)
    }

    fn cuCtxPushCurrent_v2(ctx: CUcontext) {
        push(ctx)
    }

    fn cuCtxPopCurrent(pctx: *mut CUcontext) {
        pop(pctx)
    }

    fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) {
        pop(pctx)
    }

    fn cuCtxSynchronize() {
        let ctx = current()?;
        exec::synchronize(&ctx)
    }

    fn cuCtxGetDevice(dev: *mut CUdevice) {
        let ctx = current()?;
        // SAFETY: write_out checks null; the caller provides a CUdevice to write.
        unsafe { write_out(dev, ctx.device as CUdevice) }
    }

    fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut u32) {
        lookup_or_current(ctx)?;
        // SAFETY: write_out checks null; the caller provides an unsigned int to write.
        unsafe { write_out(version, CTX_API_VERSION) }
    }

    fn cuCtxGetFlags(flags: *mut u32) {
        let ctx = current()?;
        // SAFETY: write_out checks null; the caller provides an unsigned int to write.
        unsafe { write_out(flags, ctx.flags.load(Relaxed)) }
    }

    fn cuCtxSetFlags(flags: u32) {
        let ctx = current()?;
        check_flags(flags)?;
        ctx.flags.store(flags, Relaxed);
        Ok(())
    }

    fn cuCtxGetId(ctx: CUcontext, id: *mut u64) {
        let ctx = lookup_or_current(ctx)?;
        // SAFETY: write_out checks null; the caller provides an unsigned long long to write.
        unsafe { write_out(id, ctx.id) }
    }

    fn cuCtxSetLimit(limit: u32, value: usize) {
        let ctx = current()?;
        if limit == LIMIT_SHMEM_SIZE || limit == LIMIT_CIG_ENABLED {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let mut limits = ctx.limits.lock().unwrap_or_else(|e| e.into_inner());
        let slot = limits.get_mut(limit as usize).ok_or(UNSUPPORTED_LIMIT)?;
        *slot = value as u64;
        Ok(())
    }

    fn cuCtxGetLimit(value: *mut usize, limit: u32) {
        let ctx = current()?;
        if limit == LIMIT_SHMEM_SIZE {
            let bytes = crate::model::device::attribute_of(ctx.device, ATTRIBUTE_SHARED_PER_BLOCK_OPTIN)
                .ok_or(code::CUDA_ERROR_INVALID_DEVICE)?;
            // SAFETY: write_out checks null; the caller provides a size_t to write.
            return unsafe { write_out(value, bytes.max(0) as usize) };
        }
        let v = *ctx
            .limits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(limit as usize)
            .ok_or(UNSUPPORTED_LIMIT)?;
        // SAFETY: write_out checks null; the caller provides a size_t to write.
        unsafe { write_out(value, v as usize) }
    }

    fn cuCtxGetCacheConfig(config: *mut u32) {
        let ctx = current()?;
        // SAFETY: write_out checks null; the caller provides a CUfunc_cache to write.
        unsafe { write_out(config, ctx.cache_config.load(Relaxed)) }
    }

    fn cuCtxSetCacheConfig(config: u32) {
        let ctx = current()?;
        if config > 3 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        ctx.cache_config.store(config, Relaxed);
        Ok(())
    }

    fn cuCtxGetSharedMemConfig(config: *mut u32) {
        let ctx = current()?;
        // SAFETY: write_out checks null; the caller provides a CUsharedconfig to write.
        unsafe { write_out(config, ctx.shared_mem_config.load(Relaxed)) }
    }

    fn cuCtxSetSharedMemConfig(config: u32) {
        let ctx = current()?;
        if config > 2 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        ctx.shared_mem_config.store(config, Relaxed);
        Ok(())
    }

    fn cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) {
        current()?;
        // Either pointer may be null: the caller asks only for what it wants.
        if !least.is_null() {
            // SAFETY: non-null; the caller provides an int to write.
            unsafe { write_out(least, LEAST_PRIORITY)? };
        }
        if !greatest.is_null() {
            // SAFETY: non-null; the caller provides an int to write.
            unsafe { write_out(greatest, GREATEST_PRIORITY)? };
        }
        Ok(())
    }

    fn cuCtxResetPersistingL2Cache() {
        current().map(drop)
    }
}
