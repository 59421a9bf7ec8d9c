//! The hook table: every entry point libtessera intercepts, declared once.
//!
//! Each line: the library, the exported symbol with its C signature (our own declaration of
//! the driver's ABI: CUresult and nvmlReturn_t are `u32`, CUdevice `i32`, CUdeviceptr and
//! CUmemGenericAllocationHandle `u64`, handles `*mut c_void`), for CUDA the base name and
//! first CUDA version of that ABI as `cuGetProcAddress` knows it (and `per_thread` for the
//! `_ptsz` twins), and the handler.
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
/// `hook lib name(arg: type, …) [base since flavour] => handler;` and
/// `call lib name(type, …);`. A hooked entry as written here:
///
/// ```text
/// cuda fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) [cuMemAlloc @ 3020] => handler;
/// cuda fn cuLaunchKernel_ptsz(…) [cuLaunchKernel @ 7000 per_thread] => handler;
/// nvml fn nvmlDeviceGetMemoryInfo(device: *mut c_void, memory: *mut c_void) => handler;
/// ```
///
/// A call-only entry: `cuda call cuEventQuery(event: *mut c_void);`. Every function returns
/// the library's 32-bit result code.
macro_rules! hook_table {
    (@normal $expand:ident
        hooks {$(
            $lib:ident fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? )
            $( [ $base:ident @ $since:literal $($flavour:ident)? ] )?
            => $handler:path;
        )*}
        calls {$( $clib:ident call $cname:ident ( $($carg:ident : $cty:ty),* $(,)? ); )*}
    ) => {
        $expand! {
            $( hook $lib $name ($($arg: $ty),*) [$($base $since $($flavour)?)?] => $handler; )*
            $( call $clib $cname ($($cty),*); )*
        }
    };
    // The table: the hooked entries, then the call-only ones.
    ($expand:ident) => { hook_table! { @normal $expand hooks {
    cuda fn cuArray3DCreate_v2(arr: *mut *mut c_void, desc: *const c_void)
        [cuArray3DCreate @ 3020] => memory::array::array3d_create;
    cuda fn cuArrayCreate_v2(arr: *mut *mut c_void, desc: *const c_void)
        [cuArrayCreate @ 3020] => memory::array::array_create;
    cuda fn cuArrayDestroy(arr: *mut c_void)
        [cuArrayDestroy @ 2000] => memory::array::array_destroy;
    cuda fn cuCtxCreate_v2(ctx: *mut *mut c_void, flags: u32, dev: i32)
        [cuCtxCreate @ 3020] => memory::context::ctx_create_v2;
    cuda fn cuCtxCreate_v3(
        ctx: *mut *mut c_void, params: *mut c_void, num_params: i32, flags: u32, dev: i32,
    ) [cuCtxCreate @ 11040] => memory::context::ctx_create_v3;
    cuda fn cuCtxCreate_v4(ctx: *mut *mut c_void, params: *mut c_void, flags: u32, dev: i32)
        [cuCtxCreate @ 12050] => memory::context::ctx_create_v4;
    cuda fn cuCtxDestroy_v2(ctx: *mut c_void)
        [cuCtxDestroy @ 4000] => memory::context::ctx_destroy;
    cuda fn cuCtxPopCurrent(ctx: *mut *mut c_void)
        [cuCtxPopCurrent @ 2000] => current::ctx_pop_current;
    cuda fn cuCtxPopCurrent_v2(ctx: *mut *mut c_void)
        [cuCtxPopCurrent @ 4000] => current::ctx_pop_current;
    cuda fn cuCtxPushCurrent(ctx: *mut c_void)
        [cuCtxPushCurrent @ 2000] => current::ctx_push_current;
    cuda fn cuCtxPushCurrent_v2(ctx: *mut c_void)
        [cuCtxPushCurrent @ 4000] => current::ctx_push_current;
    cuda fn cuCtxSetCurrent(ctx: *mut c_void)
        [cuCtxSetCurrent @ 4000] => current::ctx_set_current;
    cuda fn cuCtxSynchronize()
        [cuCtxSynchronize @ 2000] => compute::sync::ctx_synchronize;
    cuda fn cuDevicePrimaryCtxRelease(dev: i32)
        [cuDevicePrimaryCtxRelease @ 7000] => memory::context::primary_ctx_release;
    cuda fn cuDevicePrimaryCtxRelease_v2(dev: i32)
        [cuDevicePrimaryCtxRelease @ 11000] => memory::context::primary_ctx_release;
    cuda fn cuDevicePrimaryCtxReset(dev: i32)
        [cuDevicePrimaryCtxReset @ 7000] => memory::context::primary_ctx_reset;
    cuda fn cuDevicePrimaryCtxReset_v2(dev: i32)
        [cuDevicePrimaryCtxReset @ 11000] => memory::context::primary_ctx_reset;
    cuda fn cuDevicePrimaryCtxRetain(ctx: *mut *mut c_void, dev: i32)
        [cuDevicePrimaryCtxRetain @ 7000] => memory::context::primary_ctx_retain;
    cuda fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: i32)
        [cuDeviceTotalMem @ 3020] => memory::query::device_total_mem;
    cuda fn cuEventRecord(event: *mut c_void, stream: *mut c_void)
        [cuEventRecord @ 2000] => compute::sync::event_record::<false>;
    cuda fn cuEventRecordWithFlags(event: *mut c_void, stream: *mut c_void, flags: u32)
        [cuEventRecordWithFlags @ 11010] => compute::sync::event_record_with_flags::<false>;
    cuda fn cuEventRecordWithFlags_ptsz(event: *mut c_void, stream: *mut c_void, flags: u32)
        [cuEventRecordWithFlags @ 11010 per_thread]
        => compute::sync::event_record_with_flags::<true>;
    cuda fn cuEventRecord_ptsz(event: *mut c_void, stream: *mut c_void)
        [cuEventRecord @ 7000 per_thread] => compute::sync::event_record::<true>;
    cuda fn cuEventSynchronize(event: *mut c_void)
        [cuEventSynchronize @ 2000] => compute::sync::event_synchronize;
    cuda fn cuGetProcAddress(
        symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64,
    ) [cuGetProcAddress @ 11030] => proc_address::get_proc_address;
    cuda fn cuGetProcAddress_v2(
        symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64,
        symbol_status: *mut c_int,
    ) [cuGetProcAddress @ 12000] => proc_address::get_proc_address_v2;
    cuda fn cuGraphLaunch(exec: *mut c_void, stream: *mut c_void)
        [cuGraphLaunch @ 10000] => launch::graph_launch::<false>;
    cuda fn cuGraphLaunch_ptsz(exec: *mut c_void, stream: *mut c_void)
        [cuGraphLaunch @ 10000 per_thread] => launch::graph_launch::<true>;
    cuda fn cuInit(flags: u32) [cuInit @ 2000] => visibility::init;
    cuda fn cuLaunchCooperativeKernel(
        f: *mut c_void, grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32, shared_bytes: u32, stream: *mut c_void,
        params: *mut *mut c_void,
    ) [cuLaunchCooperativeKernel @ 9000] => launch::launch_cooperative_kernel::<false>;
    cuda fn cuLaunchCooperativeKernel_ptsz(
        f: *mut c_void, grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32, shared_bytes: u32, stream: *mut c_void,
        params: *mut *mut c_void,
    ) [cuLaunchCooperativeKernel @ 9000 per_thread] => launch::launch_cooperative_kernel::<true>;
    cuda fn cuLaunchKernel(
        f: *mut c_void, grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32, shared_bytes: u32, stream: *mut c_void,
        params: *mut *mut c_void, extra: *mut *mut c_void,
    ) [cuLaunchKernel @ 4000] => launch::launch_kernel::<false>;
    cuda fn cuLaunchKernelEx(
        config: *const c_void, f: *mut c_void, params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) [cuLaunchKernelEx @ 11060] => launch::launch_kernel_ex::<false>;
    cuda fn cuLaunchKernelEx_ptsz(
        config: *const c_void, f: *mut c_void, params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) [cuLaunchKernelEx @ 11060 per_thread] => launch::launch_kernel_ex::<true>;
    cuda fn cuLaunchKernel_ptsz(
        f: *mut c_void, grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32, shared_bytes: u32, stream: *mut c_void,
        params: *mut *mut c_void, extra: *mut *mut c_void,
    ) [cuLaunchKernel @ 7000 per_thread] => launch::launch_kernel::<true>;
    cuda fn cuMemAddressFree(ptr: u64, size: usize)
        [cuMemAddressFree @ 10020] => memory::vmm::mem_address_free;
    cuda fn cuMemAllocAsync(dptr: *mut u64, bytes: usize, stream: *mut c_void)
        [cuMemAllocAsync @ 11020] => memory::pool::mem_alloc_async;
    cuda fn cuMemAllocAsync_ptsz(dptr: *mut u64, bytes: usize, stream: *mut c_void)
        [cuMemAllocAsync @ 11020 per_thread] => memory::pool::mem_alloc_async;
    cuda fn cuMemAllocFromPoolAsync(
        dptr: *mut u64, bytes: usize, pool: *mut c_void, stream: *mut c_void,
    ) [cuMemAllocFromPoolAsync @ 11020] => memory::pool::mem_alloc_from_pool_async;
    cuda fn cuMemAllocFromPoolAsync_ptsz(
        dptr: *mut u64, bytes: usize, pool: *mut c_void, stream: *mut c_void,
    ) [cuMemAllocFromPoolAsync @ 11020 per_thread] => memory::pool::mem_alloc_from_pool_async;
    cuda fn cuMemAllocManaged(dptr: *mut u64, bytes: usize, flags: u32)
        [cuMemAllocManaged @ 6000] => memory::alloc::mem_alloc_managed;
    cuda fn cuMemAllocPitch_v2(
        dptr: *mut u64, pitch: *mut usize, width: usize, height: usize, elem: u32,
    ) [cuMemAllocPitch @ 3020] => memory::alloc::mem_alloc_pitch;
    cuda fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize)
        [cuMemAlloc @ 3020] => memory::alloc::mem_alloc;
    cuda fn cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64)
        [cuMemCreate @ 10020] => memory::vmm::mem_create;
    cuda fn cuMemFreeAsync(dptr: u64, stream: *mut c_void)
        [cuMemFreeAsync @ 11020] => memory::pool::mem_free_async;
    cuda fn cuMemFreeAsync_ptsz(dptr: u64, stream: *mut c_void)
        [cuMemFreeAsync @ 11020 per_thread] => memory::pool::mem_free_async;
    cuda fn cuMemFree_v2(dptr: u64)
        [cuMemFree @ 3020] => memory::alloc::mem_free;
    cuda fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize)
        [cuMemGetInfo @ 3020] => memory::query::mem_get_info;
    cuda fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64)
        [cuMemMap @ 10020] => memory::vmm::mem_map;
    cuda fn cuMemRelease(handle: u64)
        [cuMemRelease @ 10020] => memory::vmm::mem_release;
    cuda fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void)
        [cuMemRetainAllocationHandle @ 11000] => memory::vmm::mem_retain_allocation_handle;
    cuda fn cuMemUnmap(ptr: u64, size: usize)
        [cuMemUnmap @ 10020] => memory::vmm::mem_unmap;
    cuda fn cuMipmappedArrayCreate(arr: *mut *mut c_void, desc: *const c_void, levels: u32)
        [cuMipmappedArrayCreate @ 5000] => memory::array::mipmapped_array_create;
    cuda fn cuMipmappedArrayDestroy(arr: *mut c_void)
        [cuMipmappedArrayDestroy @ 5000] => memory::array::mipmapped_array_destroy;
    cuda fn cuStreamBeginCapture(stream: *mut c_void)
        [cuStreamBeginCapture @ 10000] => compute::capture::begin_capture::<false>;
    cuda fn cuStreamBeginCapture_ptsz(stream: *mut c_void)
        [cuStreamBeginCapture @ 10000 per_thread] => compute::capture::begin_capture::<true>;
    cuda fn cuStreamBeginCapture_v2(stream: *mut c_void, mode: u32)
        [cuStreamBeginCapture @ 10010] => compute::capture::begin_capture_v2::<false>;
    cuda fn cuStreamBeginCapture_v2_ptsz(stream: *mut c_void, mode: u32)
        [cuStreamBeginCapture @ 10010 per_thread] => compute::capture::begin_capture_v2::<true>;
    cuda fn cuStreamEndCapture(stream: *mut c_void, graph: *mut *mut c_void)
        [cuStreamEndCapture @ 10000] => compute::capture::end_capture::<false>;
    cuda fn cuStreamEndCapture_ptsz(stream: *mut c_void, graph: *mut *mut c_void)
        [cuStreamEndCapture @ 10000 per_thread] => compute::capture::end_capture::<true>;
    cuda fn cuStreamSynchronize(stream: *mut c_void)
        [cuStreamSynchronize @ 2000] => compute::sync::stream_synchronize::<false>;
    cuda fn cuStreamSynchronize_ptsz(stream: *mut c_void)
        [cuStreamSynchronize @ 7000 per_thread] => compute::sync::stream_synchronize::<true>;
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
    cuda call cuCtxGetCurrent(ctx: *mut *mut c_void);
    cuda call cuCtxGetDevice(dev: *mut i32);
    cuda call cuDeviceGetUuid_v2(uuid: *mut c_void, dev: i32);
    cuda call cuDevicePrimaryCtxGetState(dev: i32, flags: *mut u32, active: *mut i32);
    cuda call cuEventCreate(event: *mut *mut c_void, flags: u32);
    cuda call cuEventDestroy_v2(event: *mut c_void);
    cuda call cuEventElapsedTime(ms: *mut f32, start: *mut c_void, end: *mut c_void);
    cuda call cuEventQuery(event: *mut c_void);
    cuda call cuStreamIsCapturing(stream: *mut c_void, status: *mut u32);
    nvml call nvmlDeviceGetUUID(device: *mut c_void, uuid: *mut c_char, length: c_uint);
    nvml call nvmlInit_v2();
} } };
}
pub(crate) use hook_table;
