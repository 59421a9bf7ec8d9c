//! The hook table: every entry point libtessera intercepts, declared once.
//!
//! Each line: the library, the exported symbol and the handler. A CUDA entry's C signature
//! and its key for `cuGetProcAddress` (base name, first CUDA version of that ABI, `_ptsz`
//! flavour) are the driver's, declared in `tessera_cuda_abi` and taken from there; an NVML
//! entry carries its C signature here (our own declaration of NVML's ABI: `nvmlReturn_t` is
//! `u32`, handles `*mut c_void`).
//!
//! Below the hooked entries, the call-only ones: driver and NVML functions the handlers call
//! but do not intercept (a handler calls a hooked function through its entry too). They get a
//! real-function slot and a signature, no export.
//!
//! The list is kept in the `hook_table!` macro and expanded twice: by [`super::real`] into
//! each entry's signature (`Real`) and real-function slot, which handlers take their types
//! from, and by [`super::exports`] into the exports and [`super::HOOKS`], which call the
//! handlers. So imports run one way: exports → handlers → real.
//!
//! Names are in byte order (checked when compiling). A base name's revisions must be hooked
//! from the oldest one listed up to the newest, each with its per-thread twin where the driver
//! has one: `cuGetProcAddress` substitution relies on it, and the coverage test checks it.

/// Hands the table to `$expand`, one entry a line in a normal form:
/// `hook lib name [(arg: type, …)] => handler;` and `call lib name [(arg: type, …)];`, the
/// brackets empty for CUDA (whose signatures are the ABI crate's). As written here:
///
/// ```text
/// cuda fn cuMemAlloc_v2 => handler;
/// cuda fn cuLaunchKernel_ptsz => handler;
/// nvml fn nvmlDeviceGetMemoryInfo(device: *mut c_void, memory: *mut c_void) => handler;
/// ```
///
/// A call-only entry: `cuda call cuEventQuery;`. Every function returns the library's 32-bit
/// result code.
macro_rules! hook_table {
    (@normal $expand:ident
        hooks {$(
            $lib:ident fn $name:ident $( ( $($arg:ident : $ty:ty),* $(,)? ) )? => $handler:path;
        )*}
        calls {$(
            $clib:ident call $cname:ident $( ( $($carg:ident : $cty:ty),* $(,)? ) )?;
        )*}
    ) => {
        $expand! {
            $( hook $lib $name [$( ($($arg: $ty),*) )?] => $handler; )*
            $( call $clib $cname [$( ($($carg: $cty),*) )?]; )*
        }
    };
    // The table: the hooked entries, then the call-only ones.
    ($expand:ident) => { hook_table! { @normal $expand hooks {
    cuda fn cuArray3DCreate_v2 => memory::array::array3d_create;
    cuda fn cuArrayCreate_v2 => memory::array::array_create;
    cuda fn cuArrayDestroy => memory::array::array_destroy;
    cuda fn cuCtxCreate_v2 => memory::context::ctx_create_v2;
    cuda fn cuCtxCreate_v3 => memory::context::ctx_create_v3;
    cuda fn cuCtxCreate_v4 => memory::context::ctx_create_v4;
    cuda fn cuCtxDestroy_v2 => memory::context::ctx_destroy;
    cuda fn cuCtxPopCurrent => current::ctx_pop_current;
    cuda fn cuCtxPopCurrent_v2 => current::ctx_pop_current;
    cuda fn cuCtxPushCurrent => current::ctx_push_current;
    cuda fn cuCtxPushCurrent_v2 => current::ctx_push_current;
    cuda fn cuCtxSetCurrent => current::ctx_set_current;
    cuda fn cuCtxSynchronize => compute::sync::ctx_synchronize;
    cuda fn cuDevicePrimaryCtxRelease => memory::context::primary_ctx_release;
    cuda fn cuDevicePrimaryCtxRelease_v2 => memory::context::primary_ctx_release;
    cuda fn cuDevicePrimaryCtxReset => memory::context::primary_ctx_reset;
    cuda fn cuDevicePrimaryCtxReset_v2 => memory::context::primary_ctx_reset;
    cuda fn cuDevicePrimaryCtxRetain => memory::context::primary_ctx_retain;
    cuda fn cuDeviceTotalMem_v2 => memory::query::device_total_mem;
    cuda fn cuEventRecord => compute::sync::event_record::<false>;
    cuda fn cuEventRecordWithFlags => compute::sync::event_record_with_flags::<false>;
    cuda fn cuEventRecordWithFlags_ptsz => compute::sync::event_record_with_flags::<true>;
    cuda fn cuEventRecord_ptsz => compute::sync::event_record::<true>;
    cuda fn cuEventSynchronize => compute::sync::event_synchronize;
    cuda fn cuGetProcAddress => proc_address::get_proc_address;
    cuda fn cuGetProcAddress_v2 => proc_address::get_proc_address_v2;
    cuda fn cuGraphLaunch => launch::graph_launch::<false>;
    cuda fn cuGraphLaunch_ptsz => launch::graph_launch::<true>;
    cuda fn cuInit => visibility::init;
    cuda fn cuLaunchCooperativeKernel => launch::launch_cooperative_kernel::<false>;
    cuda fn cuLaunchCooperativeKernel_ptsz => launch::launch_cooperative_kernel::<true>;
    cuda fn cuLaunchKernel => launch::launch_kernel::<false>;
    cuda fn cuLaunchKernelEx => launch::launch_kernel_ex::<false>;
    cuda fn cuLaunchKernelEx_ptsz => launch::launch_kernel_ex::<true>;
    cuda fn cuLaunchKernel_ptsz => launch::launch_kernel::<true>;
    cuda fn cuMemAddressFree => memory::vmm::mem_address_free;
    cuda fn cuMemAllocAsync => memory::pool::mem_alloc_async;
    cuda fn cuMemAllocAsync_ptsz => memory::pool::mem_alloc_async;
    cuda fn cuMemAllocFromPoolAsync => memory::pool::mem_alloc_from_pool_async;
    cuda fn cuMemAllocFromPoolAsync_ptsz => memory::pool::mem_alloc_from_pool_async;
    cuda fn cuMemAllocManaged => memory::alloc::mem_alloc_managed;
    cuda fn cuMemAllocPitch_v2 => memory::alloc::mem_alloc_pitch;
    cuda fn cuMemAlloc_v2 => memory::alloc::mem_alloc;
    cuda fn cuMemCreate => memory::vmm::mem_create;
    cuda fn cuMemFreeAsync => memory::pool::mem_free_async;
    cuda fn cuMemFreeAsync_ptsz => memory::pool::mem_free_async;
    cuda fn cuMemFree_v2 => memory::alloc::mem_free;
    cuda fn cuMemGetInfo_v2 => memory::query::mem_get_info;
    cuda fn cuMemMap => memory::vmm::mem_map;
    cuda fn cuMemRelease => memory::vmm::mem_release;
    cuda fn cuMemRetainAllocationHandle => memory::vmm::mem_retain_allocation_handle;
    cuda fn cuMemUnmap => memory::vmm::mem_unmap;
    cuda fn cuMipmappedArrayCreate => memory::array::mipmapped_array_create;
    cuda fn cuMipmappedArrayDestroy => memory::array::mipmapped_array_destroy;
    cuda fn cuStreamBeginCapture => compute::capture::begin_capture::<false>;
    cuda fn cuStreamBeginCapture_ptsz => compute::capture::begin_capture::<true>;
    cuda fn cuStreamBeginCapture_v2 => compute::capture::begin_capture_v2::<false>;
    cuda fn cuStreamBeginCapture_v2_ptsz => compute::capture::begin_capture_v2::<true>;
    cuda fn cuStreamEndCapture => compute::capture::end_capture::<false>;
    cuda fn cuStreamEndCapture_ptsz => compute::capture::end_capture::<true>;
    cuda fn cuStreamSynchronize => compute::sync::stream_synchronize::<false>;
    cuda fn cuStreamSynchronize_ptsz => compute::sync::stream_synchronize::<true>;
    nvml fn nvmlDeviceGetComputeRunningProcesses(
        device: *mut c_void, count: *mut c_uint, infos: *mut c_void,
    ) => visibility::running_processes::<16>;
    nvml fn nvmlDeviceGetComputeRunningProcesses_v2(
        device: *mut c_void, count: *mut c_uint, infos: *mut c_void,
    ) => visibility::running_processes::<24>;
    nvml fn nvmlDeviceGetComputeRunningProcesses_v3(
        device: *mut c_void, count: *mut c_uint, infos: *mut c_void,
    ) => visibility::running_processes::<24>;
    nvml fn nvmlDeviceGetCount(count: *mut c_uint) => visibility::nvml_count;
    nvml fn nvmlDeviceGetCount_v2(count: *mut c_uint) => visibility::nvml_count;
    nvml fn nvmlDeviceGetGraphicsRunningProcesses(
        device: *mut c_void, count: *mut c_uint, infos: *mut c_void,
    ) => visibility::running_processes::<16>;
    nvml fn nvmlDeviceGetGraphicsRunningProcesses_v2(
        device: *mut c_void, count: *mut c_uint, infos: *mut c_void,
    ) => visibility::running_processes::<24>;
    nvml fn nvmlDeviceGetGraphicsRunningProcesses_v3(
        device: *mut c_void, count: *mut c_uint, infos: *mut c_void,
    ) => visibility::running_processes::<24>;
    nvml fn nvmlDeviceGetHandleByIndex(index: c_uint, device: *mut *mut c_void)
        => visibility::nvml_handle_by_index;
    nvml fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut *mut c_void)
        => visibility::nvml_handle_by_index;
    nvml fn nvmlDeviceGetHandleByPciBusId(bus_id: *const c_char, device: *mut *mut c_void)
        => visibility::nvml_handle_by_pci_bus_id;
    nvml fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, device: *mut *mut c_void)
        => visibility::nvml_handle_by_pci_bus_id;
    nvml fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut *mut c_void)
        => visibility::nvml_handle_by_uuid;
    nvml fn nvmlDeviceGetIndex(device: *mut c_void, index: *mut c_uint)
        => visibility::nvml_index;
    nvml fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
        device: *mut c_void, count: *mut c_uint, infos: *mut c_void,
    ) => visibility::running_processes::<24>;
    nvml fn nvmlDeviceGetMemoryInfo(device: *mut c_void, memory: *mut c_void)
        => memory::nvml::memory_info;
    nvml fn nvmlDeviceGetMemoryInfo_v2(device: *mut c_void, memory: *mut c_void)
        => memory::nvml::memory_info_v2;
} calls {
    cuda call cuCtxGetCurrent;
    cuda call cuCtxGetDevice;
    cuda call cuDeviceGetUuid_v2;
    cuda call cuDevicePrimaryCtxGetState;
    cuda call cuEventCreate;
    cuda call cuEventDestroy_v2;
    cuda call cuEventElapsedTime;
    cuda call cuEventQuery;
    cuda call cuStreamIsCapturing;
    nvml call nvmlDeviceGetUUID(device: *mut c_void, uuid: *mut c_char, length: c_uint);
    nvml call nvmlInit_v2();
} } };
}
pub(crate) use hook_table;
