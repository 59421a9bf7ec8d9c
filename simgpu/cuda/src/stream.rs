//! The entry points of streams: create, synchronize, query, wait, callbacks and host functions.
//!
//! They check and translate the C arguments, call into [`crate::model::stream`], and
//! write its results out as the driver API does.

use crate::ffi::{write_out, CUcontext, CUdevice, CUstream};
use crate::model::context::LEAST_PRIORITY;
use crate::model::event::wait_event;
use crate::model::stream::*;
use std::ffi::c_void;

cuda_entry! {
    fn cuStreamCreate(out: *mut CUstream, flags: u32) {
        create(out, flags, LEAST_PRIORITY)
    }

    fn cuStreamCreateWithPriority(out: *mut CUstream, flags: u32, priority: i32) {
        create(out, flags, priority)
    }

    fn cuStreamDestroy(stream: CUstream) {
        destroy(stream)
    }

    fn cuStreamDestroy_v2(stream: CUstream) {
        destroy(stream)
    }

    fn cuStreamSynchronize(stream: CUstream) {
        resolve(stream, false)?.synchronize()
    }

    fn cuStreamSynchronize_ptsz(stream: CUstream) {
        resolve(stream, true)?.synchronize()
    }

    fn cuStreamQuery(stream: CUstream) {
        query(stream, false)
    }

    fn cuStreamQuery_ptsz(stream: CUstream) {
        query(stream, true)
    }

    fn cuStreamWaitEvent(stream: CUstream, event: crate::ffi::CUevent, flags: u32) {
        wait_event(stream, event, flags, false)
    }

    fn cuStreamWaitEvent_ptsz(stream: CUstream, event: crate::ffi::CUevent, flags: u32) {
        wait_event(stream, event, flags, true)
    }

    fn cuStreamGetPriority(stream: CUstream, priority: *mut i32) {
        let stream = resolve(stream, false)?;
        // SAFETY: write_out checks null; the caller provides an int to write.
        unsafe { write_out(priority, stream.priority) }
    }

    fn cuStreamGetPriority_ptsz(stream: CUstream, priority: *mut i32) {
        let stream = resolve(stream, true)?;
        // SAFETY: write_out checks null; the caller provides an int to write.
        unsafe { write_out(priority, stream.priority) }
    }

    fn cuStreamGetFlags(stream: CUstream, flags: *mut u32) {
        let stream = resolve(stream, false)?;
        // SAFETY: write_out checks null; the caller provides an unsigned int to write.
        unsafe { write_out(flags, stream.flags()) }
    }

    fn cuStreamGetFlags_ptsz(stream: CUstream, flags: *mut u32) {
        let stream = resolve(stream, true)?;
        // SAFETY: write_out checks null; the caller provides an unsigned int to write.
        unsafe { write_out(flags, stream.flags()) }
    }

    fn cuStreamGetCtx(stream: CUstream, ctx: *mut CUcontext) {
        write_ctx(stream, ctx, false)
    }

    fn cuStreamGetCtx_ptsz(stream: CUstream, ctx: *mut CUcontext) {
        write_ctx(stream, ctx, true)
    }

    /// Green contexts do not exist here: the green context out-pointer gets null.
    fn cuStreamGetCtx_v2(stream: CUstream, ctx: *mut CUcontext, green: *mut *mut c_void) {
        write_ctx(stream, ctx, false)?;
        if !green.is_null() {
            // SAFETY: non-null; the caller provides a CUgreenCtx to write.
            unsafe { write_out(green, std::ptr::null_mut())? };
        }
        Ok(())
    }

    fn cuStreamGetCtx_v2_ptsz(stream: CUstream, ctx: *mut CUcontext, green: *mut *mut c_void) {
        write_ctx(stream, ctx, true)?;
        if !green.is_null() {
            // SAFETY: non-null; the caller provides a CUgreenCtx to write.
            unsafe { write_out(green, std::ptr::null_mut())? };
        }
        Ok(())
    }

    fn cuStreamGetId(stream: CUstream, id: *mut u64) {
        let stream = resolve(stream, false)?;
        // SAFETY: write_out checks null; the caller provides an unsigned long long to write.
        unsafe { write_out(id, stream.id) }
    }

    fn cuStreamGetId_ptsz(stream: CUstream, id: *mut u64) {
        let stream = resolve(stream, true)?;
        // SAFETY: write_out checks null; the caller provides an unsigned long long to write.
        unsafe { write_out(id, stream.id) }
    }

    fn cuStreamGetDevice(stream: CUstream, device: *mut CUdevice) {
        let stream = resolve(stream, false)?;
        // SAFETY: write_out checks null; the caller provides a CUdevice to write.
        unsafe { write_out(device, stream.ctx.device as CUdevice) }
    }

    fn cuStreamGetDevice_ptsz(stream: CUstream, device: *mut CUdevice) {
        let stream = resolve(stream, true)?;
        // SAFETY: write_out checks null; the caller provides a CUdevice to write.
        unsafe { write_out(device, stream.ctx.device as CUdevice) }
    }

    fn cuStreamAddCallback(
        stream: CUstream,
        callback: Option<StreamCallback>,
        user_data: *mut c_void,
        flags: u32,
    ) {
        add_callback(stream, callback, user_data, flags, false)
    }

    fn cuStreamAddCallback_ptsz(
        stream: CUstream,
        callback: Option<StreamCallback>,
        user_data: *mut c_void,
        flags: u32,
    ) {
        add_callback(stream, callback, user_data, flags, true)
    }

    fn cuLaunchHostFunc(stream: CUstream, f: Option<HostFn>, user_data: *mut c_void) {
        launch_host_func(stream, f, user_data, false)
    }

    fn cuLaunchHostFunc_ptsz(stream: CUstream, f: Option<HostFn>, user_data: *mut c_void) {
        launch_host_func(stream, f, user_data, true)
    }
}
