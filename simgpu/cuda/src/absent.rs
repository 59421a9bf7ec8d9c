//! Entry points of what a node of simulated GPUs does not have, present so that programs
//! that look them all up at start (PyTorch does, for every one its driver version has) find
//! them, and answer as a driver without the feature does: multicast objects (NVLink
//! switches), green contexts and the device resources that partition an SM set
//! (`CUDA_ERROR_NOT_SUPPORTED`); and the driver's log callbacks, which are accepted and
//! never called (this driver logs nothing).

use crate::ffi::{code, write_out, CUcontext, CUdevice, CUstream};
use crate::model::driver;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Handles given for log callbacks: never reused, never called.
static NEXT_CALLBACK: AtomicUsize = AtomicUsize::new(1);

cuda_entry! {
    fn cuMulticastCreate(_handle: *mut u64, _prop: *const c_void) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuMulticastAddDevice(_handle: u64, _dev: CUdevice) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuMulticastBindMem(_mc: u64, _mc_offset: usize, _mem: u64, _mem_offset: usize, _size: usize, _flags: u64) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuMulticastBindAddr(_mc: u64, _mc_offset: usize, _ptr: u64, _size: usize, _flags: u64) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuMulticastUnbind(_mc: u64, _dev: CUdevice, _mc_offset: usize, _size: usize) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuMulticastGetGranularity(_granularity: *mut usize, _prop: *const c_void, _option: u32) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuGreenCtxCreate(_out: *mut *mut c_void, _desc: *mut c_void, _dev: CUdevice, _flags: u32) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuGreenCtxDestroy(_ctx: *mut c_void) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuCtxFromGreenCtx(_out: *mut CUcontext, _ctx: *mut c_void) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuGreenCtxStreamCreate(_out: *mut CUstream, _ctx: *mut c_void, _flags: u32, _priority: i32) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuDeviceGetDevResource(_dev: CUdevice, _resource: *mut c_void, _kind: u32) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuDevSmResourceSplitByCount(
        _result: *mut c_void,
        _groups: *mut u32,
        _input: *const c_void,
        _remaining: *mut c_void,
        _flags: u32,
        _min_count: u32,
    ) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }
    fn cuDevResourceGenerateDesc(_desc: *mut *mut c_void, _resources: *mut c_void, _count: u32) {
        driver::process()?;
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuLogsRegisterCallback(_callback: *mut c_void, _user: *mut c_void, out: *mut usize) {
        driver::process()?;
        // Relaxed: a counter for unique handles; nothing is published with it.
        let handle = NEXT_CALLBACK.fetch_add(1, Relaxed);
        // SAFETY: write_out checks null; the caller provides a CUlogsCallbackHandle to write.
        unsafe { write_out(out, handle) }
    }
    fn cuLogsUnregisterCallback(_handle: usize) {
        driver::process().map(drop)
    }
}
