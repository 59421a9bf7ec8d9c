//! The real driver and NVML functions the handlers need besides the one they wrap: looked
//! up once, in the real libraries (never our own exports), and kept.

use std::ffi::c_void;

/// Declares `fn name() -> Option<type>`: the real symbol, resolved on first use.
macro_rules! real_fns {
    ($($lib:ident $sym:literal fn $name:ident: $ty:ty;)*) => {$(
        pub(crate) fn $name() -> Option<$ty> {
            static SLOT: ::std::sync::OnceLock<Option<$ty>> = ::std::sync::OnceLock::new();
            *SLOT.get_or_init(|| {
                let p = $crate::driver::resolve($crate::driver::Lib::$lib, $sym)?;
                // SAFETY: the symbol is the driver's function of this name, whose C
                // signature `$ty` declares; a function pointer and a data pointer have the
                // same size and representation on the platforms the driver runs on.
                Some(unsafe { std::mem::transmute::<*mut c_void, $ty>(p.as_ptr()) })
            })
        }
    )*};
}
pub(crate) use real_fns;

real_fns! {
    Cuda c"cuCtxGetCurrent" fn ctx_get_current: unsafe extern "C" fn(*mut *mut c_void) -> u32;
    Cuda c"cuCtxGetDevice" fn ctx_get_device: unsafe extern "C" fn(*mut i32) -> u32;
    Cuda c"cuCtxPushCurrent_v2" fn ctx_push_current: unsafe extern "C" fn(*mut c_void) -> u32;
    Cuda c"cuCtxPopCurrent_v2" fn ctx_pop_current: unsafe extern "C" fn(*mut *mut c_void) -> u32;
    Cuda c"cuCtxDestroy_v2" fn ctx_destroy: unsafe extern "C" fn(*mut c_void) -> u32;
    Cuda c"cuDevicePrimaryCtxRelease_v2" fn primary_ctx_release: unsafe extern "C" fn(i32) -> u32;
    Cuda c"cuDevicePrimaryCtxGetState" fn primary_ctx_get_state: unsafe extern "C" fn(i32, *mut u32, *mut i32) -> u32;
    Cuda c"cuMemGetInfo_v2" fn mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> u32;
    Cuda c"cuMemFree_v2" fn mem_free: unsafe extern "C" fn(u64) -> u32;
    Cuda c"cuMemFreeAsync_ptsz" fn mem_free_async_ptsz: unsafe extern "C" fn(u64, *mut c_void) -> u32;
    Cuda c"cuEventCreate" fn event_create: unsafe extern "C" fn(*mut *mut c_void, u32) -> u32;
    Cuda c"cuEventRecord" fn event_record: unsafe extern "C" fn(*mut c_void, *mut c_void) -> u32;
    Cuda c"cuEventQuery" fn event_query: unsafe extern "C" fn(*mut c_void) -> u32;
    Cuda c"cuEventDestroy_v2" fn event_destroy: unsafe extern "C" fn(*mut c_void) -> u32;
    Cuda c"cuStreamIsCapturing" fn stream_is_capturing: unsafe extern "C" fn(*mut c_void, *mut u32) -> u32;
    Nvml c"nvmlInit_v2" fn nvml_init: unsafe extern "C" fn() -> u32;
    Nvml c"nvmlDeviceGetHandleByIndex_v2" fn nvml_device_by_index: unsafe extern "C" fn(u32, *mut *mut c_void) -> u32;
    Nvml c"nvmlDeviceGetIndex" fn nvml_device_index: unsafe extern "C" fn(*mut c_void, *mut u32) -> u32;
    Nvml c"nvmlDeviceGetComputeRunningProcesses_v3" fn nvml_compute_processes: unsafe extern "C" fn(*mut c_void, *mut u32, *mut super::context::ProcessInfo) -> u32;
    Nvml c"nvmlDeviceGetMemoryInfo" fn nvml_memory_info: unsafe extern "C" fn(*mut c_void, *mut [u64; 3]) -> u32;
}
