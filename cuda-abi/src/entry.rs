//! The entry points, each declared once in [`entry_points!`]: one module per exported
//! symbol, holding
//! - `SYMBOL`: the exported name;
//! - `KEY`: what `cuGetProcAddress` knows it by ([`ProcKey`]): the base name, the CUDA version
//!   that introduced this ABI revision (`1000 × major + 10 × minor`, the version in the
//!   toolkit's `PFN_<name>_v<version>` typedefs) and whether it is the
//!   per-thread-default-stream variant (`_ptds` for synchronous entries, `_ptsz` for those
//!   taking a stream);
//! - where the signature is declared: `Pfn`, its C function-pointer type, and `args`, one type
//!   per parameter, from which [`signature!`](crate::signature) hands a signature to a macro
//!   that defines a function of it (the preload library's exports);
//! - `Declared`: [`Exact<Pfn>`](Exact), or [`Unchecked`] where no signature is declared (the
//!   entries whose parameters are structures not declared in [`crate::types`]), for
//!   [`assert_signature`].
//!
//! The table in [`crate::proc_address`] is made from the same list.

use crate::proc_key::ProcKey;
use core::marker::PhantomData;

/// An entry point whose signature is not declared here: any implementation is accepted.
pub struct Unchecked;

/// An entry point whose C signature is `F`.
pub struct Exact<F>(PhantomData<F>);

/// Whether an implementation of type `F` agrees with the declaration.
pub trait Accepts<F> {}
impl<F> Accepts<F> for Unchecked {}
impl<F> Accepts<F> for Exact<F> {}

/// Fails to compile unless `F` is the declared signature `D` (an entry's `Declared`), or no
/// signature is declared: `const _: () = assert_signature::<entry::cuInit::Declared,
/// unsafe extern "C" fn(u32) -> CUresult>();` in an implementation of the driver.
pub const fn assert_signature<D: Accepts<F>, F>() {}

/// The list's grammar, one entry a line:
///
/// ```text
/// cuInit @ 2000 (flags: u32);                              // the base name is the symbol
/// cuMemAlloc_v2 cuMemAlloc @ 3020 (dptr: *mut CUdeviceptr, bytesize: usize);
/// cuLaunchKernel_ptsz cuLaunchKernel @ 7000 per_thread (…);
/// cuMemcpy2D_v2 cuMemcpy2D @ 3020;                         // no signature declared
/// ```
///
/// and, under `aliases`, a base name that resolves to a symbol of another base name from
/// some version on: `cuGraphInstantiate @ 11040 => cuGraphInstantiateWithFlags;`.
macro_rules! entry_points {
    (
        entries {$(
            $name:ident $($base:ident)? @ $since:literal $($flavour:ident)?
            $( ( $($arg:ident : $ty:ty),* $(,)? ) )? ;
        )*}
        aliases {$( $abase:ident @ $asince:literal => $aname:ident; )*}
    ) => {
        $(
            #[allow(non_snake_case)]
            #[doc = concat!("`", stringify!($name), "`.")]
            pub mod $name {
                #[allow(unused_imports)] // the types of the signatures
                use crate::*;

                /// The exported symbol.
                pub const SYMBOL: &str = stringify!($name);
                /// What `cuGetProcAddress` knows this symbol by.
                pub const KEY: ProcKey = ProcKey {
                    base: entry_points!(@base $name $($base)?),
                    since: $since,
                    per_thread: entry_points!(@per_thread $($flavour)?),
                };
                $(
                    /// The C function-pointer type.
                    pub type Pfn = unsafe extern "C" fn($($ty),*) -> CUresult;

                    /// The type of each parameter, by name.
                    #[allow(non_camel_case_types)]
                    pub mod args {
                        #[allow(unused_imports)]
                        use crate::*;
                        $( pub type $arg = $ty; )*
                    }
                )?
                /// The declared signature, for [`assert_signature`](crate::entry::assert_signature).
                pub type Declared = entry_points!(@declared $( ($($ty),*) )?);
            }
        )*

        /// Every revision of every entry point, for `cuGetProcAddress`: the list's entries in
        /// its order, then the aliases.
        pub(crate) static PROC_ADDRESS: &[crate::proc_key::ProcEntry] = &[
            $( crate::proc_key::ProcEntry { symbol: stringify!($name), key: $name::KEY }, )*
            $( crate::proc_key::ProcEntry {
                symbol: stringify!($aname),
                key: ProcKey { base: stringify!($abase), since: $asince, per_thread: false },
            }, )*
        ];

        entry_points!(@signature_macro ($) $( $name $( ($($arg),*) )?; )*);
    };
    (@base $name:ident) => { stringify!($name) };
    (@base $name:ident $base:ident) => { stringify!($base) };
    (@per_thread) => { false };
    (@per_thread per_thread) => { true };
    (@declared) => { super::Unchecked };
    (@declared ($($ty:ty),*)) => { super::Exact<Pfn> };
    (@signature_macro ($d:tt) $( $name:ident $( ($($arg:ident),*) )?; )*) => {
        /// Hands an entry point's declared signature to a macro: `signature!(cuMemAlloc_v2 =>
        /// m { tokens })` expands to `m! { tokens cuMemAlloc_v2(dptr: T, bytesize: U) }`,
        /// each type a path into this crate, so that the caller defines a function of exactly
        /// the declared signature. An entry without a declared signature does not match.
        #[macro_export]
        macro_rules! signature {
            $($(
                ($name => $d cb:path { $d ($d t:tt)* }) => {
                    $d cb! { $d ($d t)* $name ( $( $arg: $d crate::entry::$name::args::$arg ),* ) }
                };
            )?)*
        }
    };
}

entry_points! {
entries {
    // Initialization, version, errors, entry points.
    cuInit @ 2000 (flags: u32);
    cuDriverGetVersion @ 2020 (version: *mut i32);
    cuGetErrorString @ 6000 (error: CUresult, p_str: *mut *const c_char);
    cuGetErrorName @ 6000 (error: CUresult, p_str: *mut *const c_char);
    cuGetProcAddress @ 11030 (
        symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64,
    );
    cuGetProcAddress_v2 cuGetProcAddress @ 12000 (
        symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64,
        symbol_status: *mut c_int,
    );
    cuGetExportTable @ 3000 (table: *mut *const c_void, id: *const CUuuid);
    cuProfilerInitialize @ 4000 (config: *const c_char, output: *const c_char, mode: c_int);
    cuProfilerStart @ 4000 ();
    cuProfilerStop @ 4000 ();
    // Devices.
    cuDeviceGet @ 2000 (out: *mut CUdevice, ordinal: c_int);
    cuDeviceGetCount @ 2000 (count: *mut c_int);
    cuDeviceGetName @ 2000 (name: *mut c_char, len: c_int, dev: CUdevice);
    cuDeviceGetUuid @ 9020 (uuid: *mut CUuuid, dev: CUdevice);
    cuDeviceGetUuid_v2 cuDeviceGetUuid @ 11040 (uuid: *mut CUuuid, dev: CUdevice);
    cuDeviceGetLuid @ 10000 (luid: *mut c_char, node_mask: *mut u32, dev: CUdevice);
    cuDeviceTotalMem @ 2000 (bytes: *mut u32, dev: CUdevice);
    cuDeviceTotalMem_v2 cuDeviceTotalMem @ 3020 (bytes: *mut usize, dev: CUdevice);
    cuDeviceGetTexture1DLinearMaxWidth @ 11010 (
        max_width: *mut usize, format: c_int, channels: u32, dev: CUdevice,
    );
    cuDeviceGetAttribute @ 2000 (value: *mut c_int, attrib: c_int, dev: CUdevice);
    cuDeviceGetNvSciSyncAttributes @ 10020 (list: *mut c_void, dev: CUdevice, flags: c_int);
    cuDeviceSetMemPool @ 11020 (dev: CUdevice, pool: CUmemoryPool);
    cuDeviceGetMemPool @ 11020 (pool_out: *mut CUmemoryPool, dev: CUdevice);
    cuDeviceGetDefaultMemPool @ 11020 (pool_out: *mut CUmemoryPool, dev: CUdevice);
    cuDeviceGetProperties @ 2000;
    cuDeviceComputeCapability @ 2000 (major: *mut c_int, minor: *mut c_int, dev: CUdevice);
    cuDeviceGetByPCIBusId @ 4010 (dev: *mut CUdevice, bus_id: *const c_char);
    cuDeviceGetPCIBusId @ 4010 (bus_id: *mut c_char, len: c_int, dev: CUdevice);
    cuDeviceCanAccessPeer @ 4000 (can_access: *mut c_int, dev: CUdevice, peer: CUdevice);
    cuDeviceGetP2PAttribute @ 8000 (value: *mut c_int, attrib: c_int, src: CUdevice, dst: CUdevice);
    cuDeviceGetExecAffinitySupport @ 11040;
    // Primary contexts and contexts.
    cuDevicePrimaryCtxRetain @ 7000 (pctx: *mut CUcontext, dev: CUdevice);
    cuDevicePrimaryCtxRelease @ 7000 (dev: CUdevice);
    cuDevicePrimaryCtxRelease_v2 cuDevicePrimaryCtxRelease @ 11000 (dev: CUdevice);
    cuDevicePrimaryCtxSetFlags @ 7000 (dev: CUdevice, flags: u32);
    cuDevicePrimaryCtxSetFlags_v2 cuDevicePrimaryCtxSetFlags @ 11000 (dev: CUdevice, flags: u32);
    cuDevicePrimaryCtxGetState @ 7000 (dev: CUdevice, flags: *mut u32, active: *mut i32);
    cuDevicePrimaryCtxReset @ 7000 (dev: CUdevice);
    cuDevicePrimaryCtxReset_v2 cuDevicePrimaryCtxReset @ 11000 (dev: CUdevice);
    cuCtxCreate @ 2000 (pctx: *mut CUcontext, flags: u32, dev: CUdevice);
    cuCtxCreate_v2 cuCtxCreate @ 3020 (pctx: *mut CUcontext, flags: u32, dev: CUdevice);
    cuCtxCreate_v3 cuCtxCreate @ 11040 (
        pctx: *mut CUcontext, params: *mut c_void, num_params: i32, flags: u32, dev: CUdevice,
    );
    cuCtxCreate_v4 cuCtxCreate @ 12050 (
        pctx: *mut CUcontext, params: *mut c_void, flags: u32, dev: CUdevice,
    );
    cuCtxDestroy @ 2000 (ctx: CUcontext);
    cuCtxDestroy_v2 cuCtxDestroy @ 4000 (ctx: CUcontext);
    cuCtxPushCurrent @ 2000 (ctx: CUcontext);
    cuCtxPushCurrent_v2 cuCtxPushCurrent @ 4000 (ctx: CUcontext);
    cuCtxPopCurrent @ 2000 (pctx: *mut CUcontext);
    cuCtxPopCurrent_v2 cuCtxPopCurrent @ 4000 (pctx: *mut CUcontext);
    cuCtxSetCurrent @ 4000 (ctx: CUcontext);
    cuCtxGetCurrent @ 4000 (pctx: *mut CUcontext);
    cuCtxGetDevice @ 2000 (dev: *mut CUdevice);
    cuCtxGetFlags @ 7000 (flags: *mut u32);
    cuCtxSetFlags @ 12010 (flags: u32);
    cuCtxGetId @ 12000 (ctx: CUcontext, id: *mut u64);
    cuCtxSynchronize @ 2000 ();
    cuCtxSetLimit @ 3010 (limit: u32, value: usize);
    cuCtxGetLimit @ 3010 (value: *mut usize, limit: u32);
    cuCtxGetCacheConfig @ 3020 (config: *mut u32);
    cuCtxSetCacheConfig @ 3020 (config: u32);
    cuCtxGetSharedMemConfig @ 4020 (config: *mut u32);
    cuCtxSetSharedMemConfig @ 4020 (config: u32);
    cuCtxGetApiVersion @ 3020 (ctx: CUcontext, version: *mut u32);
    cuCtxGetStreamPriorityRange @ 5050 (least: *mut i32, greatest: *mut i32);
    cuCtxResetPersistingL2Cache @ 11000 ();
    cuCtxGetExecAffinity @ 11040;
    cuCtxRecordEvent @ 12050;
    cuCtxWaitEvent @ 12050;
    cuCtxEnablePeerAccess @ 4000 (peer: CUcontext, flags: u32);
    cuCtxDisablePeerAccess @ 4000 (peer: CUcontext);
    // Modules, libraries, kernels.
    cuModuleLoad @ 2000 (out: *mut CUmodule, path: *const c_char);
    cuModuleLoadData @ 2000 (out: *mut CUmodule, image: *const c_void);
    cuModuleLoadDataEx @ 2010 (
        out: *mut CUmodule, image: *const c_void, num_options: u32, options: *mut i32,
        values: *mut *mut c_void,
    );
    cuModuleLoadFatBinary @ 2000 (out: *mut CUmodule, fat: *const c_void);
    cuLinkCreate @ 5050 (n: u32, opts: *mut u32, values: *mut *mut c_void, out: *mut CUlinkState);
    cuLinkCreate_v2 cuLinkCreate @ 6050 (
        n: u32, opts: *mut u32, values: *mut *mut c_void, out: *mut CUlinkState,
    );
    cuLinkAddData @ 5050 (
        handle: CUlinkState, kind: u32, data: *mut c_void, size: usize, name: *const c_char,
        n: u32, opts: *mut u32, values: *mut *mut c_void,
    );
    cuLinkAddData_v2 cuLinkAddData @ 6050 (
        handle: CUlinkState, kind: u32, data: *mut c_void, size: usize, name: *const c_char,
        n: u32, opts: *mut u32, values: *mut *mut c_void,
    );
    cuLinkAddFile @ 5050 (
        handle: CUlinkState, kind: u32, path: *const c_char, n: u32, opts: *mut u32,
        values: *mut *mut c_void,
    );
    cuLinkAddFile_v2 cuLinkAddFile @ 6050 (
        handle: CUlinkState, kind: u32, path: *const c_char, n: u32, opts: *mut u32,
        values: *mut *mut c_void,
    );
    cuLinkComplete @ 5050 (handle: CUlinkState, cubin_out: *mut *mut c_void, size_out: *mut usize);
    cuLinkDestroy @ 5050 (handle: CUlinkState);
    cuModuleUnload @ 2000 (handle: CUmodule);
    cuModuleGetFunction @ 2000 (out: *mut CUfunction, handle: CUmodule, name: *const c_char);
    cuModuleGetGlobal @ 2000;
    cuModuleGetGlobal_v2 cuModuleGetGlobal @ 3020 (
        dptr: *mut u64, bytes: *mut usize, handle: CUmodule, name: *const c_char,
    );
    cuModuleGetLoadingMode @ 11070 (mode: *mut u32);
    cuModuleGetFunctionCount @ 12040 (count: *mut u32, handle: CUmodule);
    cuModuleEnumerateFunctions @ 12040 (out: *mut CUfunction, n: u32, handle: CUmodule);
    cuLibraryLoadData @ 12000 (
        out: *mut CUlibrary, code_: *const c_void, jit_options: *mut i32,
        jit_values: *mut *mut c_void, num_jit: u32, lib_options: *mut i32,
        lib_values: *mut *mut c_void, num_lib: u32,
    );
    cuLibraryLoadFromFile @ 12000 (
        out: *mut CUlibrary, path: *const c_char, jit_options: *mut i32,
        jit_values: *mut *mut c_void, num_jit: u32, lib_options: *mut i32,
        lib_values: *mut *mut c_void, num_lib: u32,
    );
    cuLibraryUnload @ 12000 (handle: CUlibrary);
    cuLibraryGetKernel @ 12000 (out: *mut CUkernel, handle: CUlibrary, name: *const c_char);
    cuLibraryGetKernelCount @ 12040 (count: *mut u32, handle: CUlibrary);
    cuLibraryEnumerateKernels @ 12040 (out: *mut CUkernel, n: u32, handle: CUlibrary);
    cuLibraryGetModule @ 12000 (out: *mut CUmodule, handle: CUlibrary);
    cuLibraryGetGlobal @ 12000 (
        dptr: *mut u64, bytes: *mut usize, handle: CUlibrary, name: *const c_char,
    );
    cuLibraryGetManaged @ 12000 (
        dptr: *mut u64, bytes: *mut usize, handle: CUlibrary, name: *const c_char,
    );
    cuLibraryGetUnifiedFunction @ 12000;
    cuKernelGetFunction @ 12000 (out: *mut CUfunction, kernel: CUkernel);
    cuKernelGetLibrary @ 12050 (out: *mut CUlibrary, kernel: CUkernel);
    cuKernelGetAttribute @ 12000 (value: *mut i32, which: i32, kernel: CUkernel, dev: CUdevice);
    cuKernelSetAttribute @ 12000 (which: i32, value: i32, kernel: CUkernel, dev: CUdevice);
    cuKernelSetCacheConfig @ 12000 (kernel: CUkernel, config: u32, dev: CUdevice);
    cuKernelGetName @ 12030 (name: *mut *const c_char, kernel: CUkernel);
    cuKernelGetParamInfo @ 12040 (
        kernel: CUkernel, index: usize, offset: *mut usize, size: *mut usize,
    );
    cuFuncGetAttribute @ 2020 (value: *mut i32, which: i32, f: CUfunction);
    cuFuncSetAttribute @ 9000 (f: CUfunction, which: i32, value: i32);
    cuFuncSetCacheConfig @ 3000 (f: CUfunction, config: u32);
    cuFuncSetSharedMemConfig @ 4020 (f: CUfunction, config: u32);
    cuFuncGetModule @ 11000 (out: *mut CUmodule, f: CUfunction);
    cuFuncGetName @ 12030 (name: *mut *const c_char, f: CUfunction);
    cuFuncGetParamInfo @ 12040 (f: CUfunction, index: usize, offset: *mut usize, size: *mut usize);
    cuFuncIsLoaded @ 12040 (state: *mut u32, f: CUfunction);
    cuFuncLoad @ 12040 (f: CUfunction);
    cuOccupancyMaxActiveBlocksPerMultiprocessor @ 6050 (
        out: *mut c_int, f: CUfunction, block: c_int, dynamic: usize,
    );
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags @ 7000 (
        out: *mut c_int, f: CUfunction, block: c_int, dynamic: usize, flags: u32,
    );
    cuOccupancyMaxPotentialBlockSize @ 6050;
    cuOccupancyMaxPotentialBlockSizeWithFlags @ 7000;
    cuOccupancyAvailableDynamicSMemPerBlock @ 10020 (
        out: *mut usize, f: CUfunction, blocks: c_int, block: c_int,
    );
    cuOccupancyMaxPotentialClusterSize @ 11070 (
        out: *mut c_int, f: CUfunction, config: *const CUlaunchConfig,
    );
    cuOccupancyMaxActiveClusters @ 11070 (
        out: *mut c_int, f: CUfunction, config: *const CUlaunchConfig,
    );
    // Launches.
    cuLaunchKernel @ 4000 (
        f: CUfunction, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32,
        block_z: u32, shared: u32, stream: CUstream, params: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
    cuLaunchKernel_ptsz cuLaunchKernel @ 7000 per_thread (
        f: CUfunction, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32,
        block_z: u32, shared: u32, stream: CUstream, params: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
    cuLaunchKernelEx @ 11060 (
        config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
    cuLaunchKernelEx_ptsz cuLaunchKernelEx @ 11060 per_thread (
        config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void,
        extra: *mut *mut c_void,
    );
    cuLaunchCooperativeKernel @ 9000 (
        f: CUfunction, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32,
        block_z: u32, shared: u32, stream: CUstream, params: *mut *mut c_void,
    );
    cuLaunchCooperativeKernel_ptsz cuLaunchCooperativeKernel @ 9000 per_thread (
        f: CUfunction, grid_x: u32, grid_y: u32, grid_z: u32, block_x: u32, block_y: u32,
        block_z: u32, shared: u32, stream: CUstream, params: *mut *mut c_void,
    );
    cuLaunchHostFunc @ 10000;
    cuLaunchHostFunc_ptsz cuLaunchHostFunc @ 10000 per_thread;
    cuMulticastCreate @ 12010 (handle: *mut u64, prop: *const c_void);
    cuMulticastAddDevice @ 12010 (handle: u64, dev: CUdevice);
    cuMulticastBindMem @ 12010 (
        mc: u64, mc_offset: usize, mem: u64, mem_offset: usize, size: usize, flags: u64,
    );
    cuMulticastBindAddr @ 12010 (mc: u64, mc_offset: usize, ptr: u64, size: usize, flags: u64);
    cuMulticastUnbind @ 12010 (mc: u64, dev: CUdevice, mc_offset: usize, size: usize);
    cuMulticastGetGranularity @ 12010 (granularity: *mut usize, prop: *const c_void, option: u32);
    cuGreenCtxCreate @ 12040 (out: *mut *mut c_void, desc: *mut c_void, dev: CUdevice, flags: u32);
    cuGreenCtxDestroy @ 12040 (ctx: *mut c_void);
    cuCtxFromGreenCtx @ 12040 (out: *mut CUcontext, ctx: *mut c_void);
    cuGreenCtxStreamCreate @ 12050 (
        out: *mut CUstream, ctx: *mut c_void, flags: u32, priority: i32,
    );
    cuDeviceGetDevResource @ 12040 (dev: CUdevice, resource: *mut c_void, kind: u32);
    cuDevSmResourceSplitByCount @ 12040 (
        result: *mut c_void, groups: *mut u32, input: *const c_void, remaining: *mut c_void,
        flags: u32, min_count: u32,
    );
    cuDevResourceGenerateDesc @ 12040 (desc: *mut *mut c_void, resources: *mut c_void, count: u32);
    cuLogsRegisterCallback @ 12090 (callback: *mut c_void, user: *mut c_void, out: *mut usize);
    cuLogsUnregisterCallback @ 12090 (handle: usize);
    cuStreamWriteValue32 @ 8000 (s: CUstream, addr: CUdeviceptr, value: u32, flags: u32);
    cuStreamWriteValue32_v2 cuStreamWriteValue32 @ 11070 (
        s: CUstream, addr: CUdeviceptr, value: u32, flags: u32,
    );
    cuStreamWriteValue32_ptsz cuStreamWriteValue32 @ 8000 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u32, flags: u32,
    );
    cuStreamWriteValue32_v2_ptsz cuStreamWriteValue32 @ 11070 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u32, flags: u32,
    );
    cuStreamWriteValue64 @ 9000 (s: CUstream, addr: CUdeviceptr, value: u64, flags: u32);
    cuStreamWriteValue64_v2 cuStreamWriteValue64 @ 11070 (
        s: CUstream, addr: CUdeviceptr, value: u64, flags: u32,
    );
    cuStreamWriteValue64_ptsz cuStreamWriteValue64 @ 9000 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u64, flags: u32,
    );
    cuStreamWriteValue64_v2_ptsz cuStreamWriteValue64 @ 11070 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u64, flags: u32,
    );
    cuStreamWaitValue32 @ 8000 (s: CUstream, addr: CUdeviceptr, value: u32, flags: u32);
    cuStreamWaitValue32_v2 cuStreamWaitValue32 @ 11070 (
        s: CUstream, addr: CUdeviceptr, value: u32, flags: u32,
    );
    cuStreamWaitValue32_ptsz cuStreamWaitValue32 @ 8000 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u32, flags: u32,
    );
    cuStreamWaitValue32_v2_ptsz cuStreamWaitValue32 @ 11070 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u32, flags: u32,
    );
    cuTensorMapEncodeTiled @ 12000;
    cuTensorMapReplaceAddress @ 12000;
    cuStreamBatchMemOp @ 8000;
    cuStreamBatchMemOp_v2 cuStreamBatchMemOp @ 11070;
    cuStreamBatchMemOp_ptsz cuStreamBatchMemOp @ 8000 per_thread;
    cuStreamBatchMemOp_v2_ptsz cuStreamBatchMemOp @ 11070 per_thread;
    cuStreamWaitValue64 @ 9000 (s: CUstream, addr: CUdeviceptr, value: u64, flags: u32);
    cuStreamWaitValue64_v2 cuStreamWaitValue64 @ 11070 (
        s: CUstream, addr: CUdeviceptr, value: u64, flags: u32,
    );
    cuStreamWaitValue64_ptsz cuStreamWaitValue64 @ 9000 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u64, flags: u32,
    );
    cuStreamWaitValue64_v2_ptsz cuStreamWaitValue64 @ 11070 per_thread (
        s: CUstream, addr: CUdeviceptr, value: u64, flags: u32,
    );
    // Memory.
    cuMemGetInfo @ 2000 (free: *mut u32, total: *mut u32);
    cuMemGetInfo_v2 cuMemGetInfo @ 3020 (free: *mut usize, total: *mut usize);
    cuMemAlloc @ 2000;
    cuMemAlloc_v2 cuMemAlloc @ 3020 (dptr: *mut CUdeviceptr, bytesize: usize);
    cuMemAllocPitch @ 2000;
    cuMemAllocPitch_v2 cuMemAllocPitch @ 3020 (
        dptr: *mut CUdeviceptr, p_pitch: *mut usize, width_in_bytes: usize, height: usize,
        element_size_bytes: u32,
    );
    cuMemFree @ 2000;
    cuMemFree_v2 cuMemFree @ 3020 (dptr: CUdeviceptr);
    cuMemGetAddressRange @ 2000;
    cuMemGetAddressRange_v2 cuMemGetAddressRange @ 3020 (
        pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr,
    );
    cuMemAllocHost @ 2000;
    cuMemAllocHost_v2 cuMemAllocHost @ 3020 (pp: *mut *mut c_void, bytesize: usize);
    cuMemFreeHost @ 2000 (p: *mut c_void);
    cuMemHostAlloc @ 2020 (pp: *mut *mut c_void, bytesize: usize, flags: u32);
    cuMemHostGetDevicePointer @ 2020;
    cuMemHostGetDevicePointer_v2 cuMemHostGetDevicePointer @ 3020 (
        pdptr: *mut CUdeviceptr, p: *mut c_void, flags: u32,
    );
    cuMemHostGetFlags @ 2030 (p_flags: *mut u32, p: *mut c_void);
    cuMemAllocManaged @ 6000 (dptr: *mut CUdeviceptr, bytesize: usize, flags: u32);
    cuMemHostRegister @ 4000 (p: *mut c_void, bytesize: usize, flags: u32);
    cuMemHostRegister_v2 cuMemHostRegister @ 6050 (p: *mut c_void, bytesize: usize, flags: u32);
    cuMemHostUnregister @ 4000 (p: *mut c_void);
    cuMemcpy @ 4000 (dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpy_ptds cuMemcpy @ 7000 per_thread (dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyPeer @ 4000 (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize,
    );
    cuMemcpyPeer_ptds cuMemcpyPeer @ 7000 per_thread (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize,
    );
    cuMemcpyHtoD @ 2000;
    cuMemcpyHtoD_v2 cuMemcpyHtoD @ 3020 (dst: CUdeviceptr, src: *const c_void, n: usize);
    cuMemcpyHtoD_v2_ptds cuMemcpyHtoD @ 7000 per_thread (
        dst: CUdeviceptr, src: *const c_void, n: usize,
    );
    cuMemcpyDtoH @ 2000;
    cuMemcpyDtoH_v2 cuMemcpyDtoH @ 3020 (dst: *mut c_void, src: CUdeviceptr, n: usize);
    cuMemcpyDtoH_v2_ptds cuMemcpyDtoH @ 7000 per_thread (
        dst: *mut c_void, src: CUdeviceptr, n: usize,
    );
    cuMemcpyDtoD @ 2000;
    cuMemcpyDtoD_v2 cuMemcpyDtoD @ 3020 (dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyDtoD_v2_ptds cuMemcpyDtoD @ 7000 per_thread (
        dst: CUdeviceptr, src: CUdeviceptr, n: usize,
    );
    cuMemcpy2D @ 2000;
    cuMemcpy2D_v2 cuMemcpy2D @ 3020;
    cuMemcpy2D_v2_ptds cuMemcpy2D @ 7000 per_thread;
    cuMemcpy2DUnaligned @ 2000;
    cuMemcpy2DUnaligned_v2 cuMemcpy2DUnaligned @ 3020;
    cuMemcpy2DUnaligned_v2_ptds cuMemcpy2DUnaligned @ 7000 per_thread;
    cuMemcpyAsync @ 4000 (dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyAsync_ptsz cuMemcpyAsync @ 7000 per_thread (
        dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream,
    );
    cuMemcpyPeerAsync @ 4000 (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize,
        s: CUstream,
    );
    cuMemcpyPeerAsync_ptsz cuMemcpyPeerAsync @ 7000 per_thread (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize,
        s: CUstream,
    );
    cuMemcpyHtoDAsync @ 2000;
    cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync @ 3020 (
        dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream,
    );
    cuMemcpyHtoDAsync_v2_ptsz cuMemcpyHtoDAsync @ 7000 per_thread (
        dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream,
    );
    cuMemcpyDtoHAsync @ 2000;
    cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync @ 3020 (
        dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream,
    );
    cuMemcpyDtoHAsync_v2_ptsz cuMemcpyDtoHAsync @ 7000 per_thread (
        dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream,
    );
    cuMemcpyDtoDAsync @ 3000;
    cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync @ 3020 (
        dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream,
    );
    cuMemcpyDtoDAsync_v2_ptsz cuMemcpyDtoDAsync @ 7000 per_thread (
        dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream,
    );
    cuMemcpy2DAsync @ 2000;
    cuMemcpy2DAsync_v2 cuMemcpy2DAsync @ 3020;
    cuMemcpy2DAsync_v2_ptsz cuMemcpy2DAsync @ 7000 per_thread;
    cuMemsetD8 @ 2000;
    cuMemsetD8_v2 cuMemsetD8 @ 3020 (dst: CUdeviceptr, uc: u8, n: usize);
    cuMemsetD8_v2_ptds cuMemsetD8 @ 7000 per_thread (dst: CUdeviceptr, uc: u8, n: usize);
    cuMemsetD16 @ 2000;
    cuMemsetD16_v2 cuMemsetD16 @ 3020 (dst: CUdeviceptr, us: u16, n: usize);
    cuMemsetD16_v2_ptds cuMemsetD16 @ 7000 per_thread (dst: CUdeviceptr, us: u16, n: usize);
    cuMemsetD32 @ 2000;
    cuMemsetD32_v2 cuMemsetD32 @ 3020 (dst: CUdeviceptr, ui: u32, n: usize);
    cuMemsetD32_v2_ptds cuMemsetD32 @ 7000 per_thread (dst: CUdeviceptr, ui: u32, n: usize);
    cuMemsetD2D8 @ 2000;
    cuMemsetD2D8_v2 cuMemsetD2D8 @ 3020 (
        dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize,
    );
    cuMemsetD2D8_v2_ptds cuMemsetD2D8 @ 7000 per_thread (
        dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize,
    );
    cuMemsetD2D16 @ 2000;
    cuMemsetD2D16_v2 cuMemsetD2D16 @ 3020 (
        dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize,
    );
    cuMemsetD2D16_v2_ptds cuMemsetD2D16 @ 7000 per_thread (
        dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize,
    );
    cuMemsetD2D32 @ 2000;
    cuMemsetD2D32_v2 cuMemsetD2D32 @ 3020 (
        dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize,
    );
    cuMemsetD2D32_v2_ptds cuMemsetD2D32 @ 7000 per_thread (
        dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize,
    );
    cuMemsetD8Async @ 3020 (dst: CUdeviceptr, uc: u8, n: usize, s: CUstream);
    cuMemsetD8Async_ptsz cuMemsetD8Async @ 7000 per_thread (
        dst: CUdeviceptr, uc: u8, n: usize, s: CUstream,
    );
    cuMemsetD16Async @ 3020 (dst: CUdeviceptr, us: u16, n: usize, s: CUstream);
    cuMemsetD16Async_ptsz cuMemsetD16Async @ 7000 per_thread (
        dst: CUdeviceptr, us: u16, n: usize, s: CUstream,
    );
    cuMemsetD32Async @ 3020 (dst: CUdeviceptr, ui: u32, n: usize, s: CUstream);
    cuMemsetD32Async_ptsz cuMemsetD32Async @ 7000 per_thread (
        dst: CUdeviceptr, ui: u32, n: usize, s: CUstream,
    );
    cuMemsetD2D8Async @ 3020 (
        dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize, s: CUstream,
    );
    cuMemsetD2D8Async_ptsz cuMemsetD2D8Async @ 7000 per_thread (
        dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize, s: CUstream,
    );
    cuMemsetD2D16Async @ 3020 (
        dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize, s: CUstream,
    );
    cuMemsetD2D16Async_ptsz cuMemsetD2D16Async @ 7000 per_thread (
        dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize, s: CUstream,
    );
    cuMemsetD2D32Async @ 3020 (
        dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize, s: CUstream,
    );
    cuMemsetD2D32Async_ptsz cuMemsetD2D32Async @ 7000 per_thread (
        dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize, s: CUstream,
    );
    cuArrayCreate @ 2000;
    cuArrayCreate_v2 cuArrayCreate @ 3020 (
        handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR,
    );
    cuArrayGetDescriptor @ 2000;
    cuArrayGetDescriptor_v2 cuArrayGetDescriptor @ 3020 (
        desc: *mut CUDA_ARRAY_DESCRIPTOR, handle: CUarray,
    );
    cuArrayDestroy @ 2000 (handle: CUarray);
    cuArray3DCreate @ 2000;
    cuArray3DCreate_v2 cuArray3DCreate @ 3020 (
        handle: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    );
    cuArray3DGetDescriptor @ 2000;
    cuArray3DGetDescriptor_v2 cuArray3DGetDescriptor @ 3020 (
        desc: *mut CUDA_ARRAY3D_DESCRIPTOR, handle: CUarray,
    );
    cuMipmappedArrayCreate @ 5000 (
        handle: *mut *mut c_void, desc: *const CUDA_ARRAY3D_DESCRIPTOR, num_levels: u32,
    );
    cuMipmappedArrayDestroy @ 5000 (handle: *mut c_void);
    cuMemAddressReserve @ 10020 (
        ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: u64,
    );
    cuMemAddressFree @ 10020 (ptr: CUdeviceptr, size: usize);
    cuMemCreate @ 10020 (
        handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp,
        flags: u64,
    );
    cuMemRelease @ 10020 (handle: CUmemGenericAllocationHandle);
    cuMemMap @ 10020 (
        ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle,
        flags: u64,
    );
    cuMemUnmap @ 10020 (ptr: CUdeviceptr, size: usize);
    cuMemSetAccess @ 10020;
    cuMemGetAccess @ 10020 (flags: *mut u64, location: *const CUmemLocation, ptr: CUdeviceptr);
    cuMemGetAllocationGranularity @ 10020 (
        granularity: *mut usize, prop: *const CUmemAllocationProp, option: u32,
    );
    cuMemGetAllocationPropertiesFromHandle @ 10020 (
        prop: *mut CUmemAllocationProp, handle: CUmemGenericAllocationHandle,
    );
    cuMemRetainAllocationHandle @ 11000 (
        handle: *mut CUmemGenericAllocationHandle, addr: *mut c_void,
    );
    cuMemExportToShareableHandle @ 10020 (
        shareable: *mut c_void, handle: CUmemGenericAllocationHandle, kind: u32, flags: u64,
    );
    cuMemImportFromShareableHandle @ 10020 (
        handle: *mut CUmemGenericAllocationHandle, os_handle: *mut c_void, kind: u32,
    );
    cuMemFreeAsync @ 11020 (dptr: CUdeviceptr, h_stream: CUstream);
    cuMemFreeAsync_ptsz cuMemFreeAsync @ 11020 per_thread (dptr: CUdeviceptr, h_stream: CUstream);
    cuMemAllocAsync @ 11020 (dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream);
    cuMemAllocAsync_ptsz cuMemAllocAsync @ 11020 per_thread (
        dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream,
    );
    cuMemAllocFromPoolAsync @ 11020 (
        dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream,
    );
    cuMemAllocFromPoolAsync_ptsz cuMemAllocFromPoolAsync @ 11020 per_thread (
        dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream,
    );
    cuMemPoolTrimTo @ 11020 (pool: CUmemoryPool, min_bytes_to_keep: usize);
    cuMemPoolSetAttribute @ 11020 (pool: CUmemoryPool, attr: c_int, value: *mut c_void);
    cuMemPoolGetAttribute @ 11020 (pool: CUmemoryPool, attr: c_int, value: *mut c_void);
    cuMemPoolSetAccess @ 11020;
    cuMemPoolGetAccess @ 11020 (
        flags: *mut c_int, pool: CUmemoryPool, location: *const CUmemLocation,
    );
    cuMemPoolCreate @ 11020 (pool: *mut CUmemoryPool, props: *const c_void);
    cuMemPoolDestroy @ 11020 (pool: CUmemoryPool);
    cuPointerGetAttribute @ 4000 (data: *mut c_void, attribute: c_int, ptr: CUdeviceptr);
    cuPointerGetAttributes @ 7000 (
        count: u32, attributes: *const c_int, data: *mut *mut c_void, ptr: CUdeviceptr,
    );
    cuPointerSetAttribute @ 6000 (value: *const c_void, attribute: c_int, ptr: CUdeviceptr);
    cuMemPrefetchAsync @ 8000 (
        dptr: CUdeviceptr, count: usize, dst_device: i32, h_stream: CUstream,
    );
    cuMemPrefetchAsync_v2 cuMemPrefetchAsync @ 12020 (
        dptr: CUdeviceptr, count: usize, location: CUmemLocation, flags: u32, h_stream: CUstream,
    );
    cuMemPrefetchAsync_ptsz cuMemPrefetchAsync @ 8000 per_thread (
        dptr: CUdeviceptr, count: usize, dst_device: i32, h_stream: CUstream,
    );
    cuMemPrefetchAsync_v2_ptsz cuMemPrefetchAsync @ 12020 per_thread (
        dptr: CUdeviceptr, count: usize, location: CUmemLocation, flags: u32, h_stream: CUstream,
    );
    cuMemAdvise @ 8000 (dptr: CUdeviceptr, count: usize, advice: i32, device: i32);
    cuMemAdvise_v2 cuMemAdvise @ 12020 (
        dptr: CUdeviceptr, count: usize, advice: i32, location: CUmemLocation,
    );
    // Streams.
    cuStreamCreate @ 2000 (out: *mut CUstream, flags: u32);
    cuStreamCreateWithPriority @ 5050 (out: *mut CUstream, flags: u32, priority: i32);
    cuStreamGetPriority @ 5050 (stream: CUstream, priority: *mut i32);
    cuStreamGetPriority_ptsz cuStreamGetPriority @ 7000 per_thread (
        stream: CUstream, priority: *mut i32,
    );
    cuStreamGetFlags @ 5050 (stream: CUstream, flags: *mut u32);
    cuStreamGetFlags_ptsz cuStreamGetFlags @ 7000 per_thread (stream: CUstream, flags: *mut u32);
    cuStreamGetId @ 12000 (stream: CUstream, id: *mut u64);
    cuStreamGetId_ptsz cuStreamGetId @ 12000 per_thread (stream: CUstream, id: *mut u64);
    cuStreamGetDevice @ 12080 (stream: CUstream, device: *mut CUdevice);
    cuStreamGetDevice_ptsz cuStreamGetDevice @ 12080 per_thread (
        stream: CUstream, device: *mut CUdevice,
    );
    cuStreamGetCtx @ 9020 (stream: CUstream, ctx: *mut CUcontext);
    cuStreamGetCtx_ptsz cuStreamGetCtx @ 9020 per_thread (stream: CUstream, ctx: *mut CUcontext);
    cuStreamGetCtx_v2 @ 12050 (stream: CUstream, ctx: *mut CUcontext, green: *mut *mut c_void);
    cuStreamGetCtx_v2_ptsz cuStreamGetCtx_v2 @ 12050 per_thread (
        stream: CUstream, ctx: *mut CUcontext, green: *mut *mut c_void,
    );
    cuStreamWaitEvent @ 3020 (stream: CUstream, event: CUevent, flags: u32);
    cuStreamWaitEvent_ptsz cuStreamWaitEvent @ 7000 per_thread (
        stream: CUstream, event: CUevent, flags: u32,
    );
    cuStreamAddCallback @ 5000;
    cuStreamAddCallback_ptsz cuStreamAddCallback @ 7000 per_thread;
    cuStreamAttachMemAsync @ 6000;
    cuStreamAttachMemAsync_ptsz cuStreamAttachMemAsync @ 7000 per_thread;
    cuStreamQuery @ 2000 (stream: CUstream);
    cuStreamQuery_ptsz cuStreamQuery @ 7000 per_thread (stream: CUstream);
    cuStreamSynchronize @ 2000 (stream: CUstream);
    cuStreamSynchronize_ptsz cuStreamSynchronize @ 7000 per_thread (stream: CUstream);
    cuStreamDestroy @ 2000 (stream: CUstream);
    cuStreamDestroy_v2 cuStreamDestroy @ 4000 (stream: CUstream);
    cuStreamCopyAttributes @ 11000;
    cuStreamCopyAttributes_ptsz cuStreamCopyAttributes @ 11000 per_thread;
    cuStreamGetAttribute @ 11000;
    cuStreamGetAttribute_ptsz cuStreamGetAttribute @ 11000 per_thread;
    cuStreamSetAttribute @ 11000;
    cuStreamSetAttribute_ptsz cuStreamSetAttribute @ 11000 per_thread;
    cuStreamBeginCapture @ 10000 (stream: CUstream);
    cuStreamBeginCapture_v2 cuStreamBeginCapture @ 10010 (stream: CUstream, mode: u32);
    cuStreamBeginCapture_ptsz cuStreamBeginCapture @ 10000 per_thread (stream: CUstream);
    cuStreamBeginCapture_v2_ptsz cuStreamBeginCapture @ 10010 per_thread (
        stream: CUstream, mode: u32,
    );
    cuStreamEndCapture @ 10000 (stream: CUstream, graph: *mut CUgraph);
    cuStreamEndCapture_ptsz cuStreamEndCapture @ 10000 per_thread (
        stream: CUstream, graph: *mut CUgraph,
    );
    cuStreamIsCapturing @ 10000 (stream: CUstream, status: *mut u32);
    cuStreamIsCapturing_ptsz cuStreamIsCapturing @ 10000 per_thread (
        stream: CUstream, status: *mut u32,
    );
    cuStreamGetCaptureInfo @ 10010 (stream: CUstream, status: *mut u32, id: *mut u64);
    cuStreamGetCaptureInfo_v2 cuStreamGetCaptureInfo @ 11030 (
        stream: CUstream, status: *mut u32, id: *mut u64, graph: *mut CUgraph,
        deps: *mut *const c_void, num_deps: *mut usize,
    );
    cuStreamGetCaptureInfo_v3 cuStreamGetCaptureInfo @ 12030 (
        stream: CUstream, status: *mut u32, id: *mut u64, graph: *mut CUgraph,
        deps: *mut *const c_void, edges: *mut *const c_void, num_deps: *mut usize,
    );
    cuStreamGetCaptureInfo_ptsz cuStreamGetCaptureInfo @ 10010 per_thread (
        stream: CUstream, status: *mut u32, id: *mut u64,
    );
    cuStreamGetCaptureInfo_v2_ptsz cuStreamGetCaptureInfo @ 11030 per_thread (
        stream: CUstream, status: *mut u32, id: *mut u64, graph: *mut CUgraph,
        deps: *mut *const c_void, num_deps: *mut usize,
    );
    cuStreamGetCaptureInfo_v3_ptsz cuStreamGetCaptureInfo @ 12030 per_thread (
        stream: CUstream, status: *mut u32, id: *mut u64, graph: *mut CUgraph,
        deps: *mut *const c_void, edges: *mut *const c_void, num_deps: *mut usize,
    );
    cuStreamUpdateCaptureDependencies @ 11030;
    cuStreamUpdateCaptureDependencies_v2 cuStreamUpdateCaptureDependencies @ 12030;
    cuStreamUpdateCaptureDependencies_ptsz cuStreamUpdateCaptureDependencies @ 11030 per_thread;
    cuStreamUpdateCaptureDependencies_v2_ptsz cuStreamUpdateCaptureDependencies @ 12030 per_thread;
    cuThreadExchangeStreamCaptureMode @ 10010 (mode: *mut u32);
    // Events.
    cuEventCreate @ 2000 (out: *mut CUevent, flags: u32);
    cuEventRecord @ 2000 (event: CUevent, stream: CUstream);
    cuEventRecord_ptsz cuEventRecord @ 7000 per_thread (event: CUevent, stream: CUstream);
    cuEventRecordWithFlags @ 11010 (event: CUevent, stream: CUstream, flags: u32);
    cuEventRecordWithFlags_ptsz cuEventRecordWithFlags @ 11010 per_thread (
        event: CUevent, stream: CUstream, flags: u32,
    );
    cuEventQuery @ 2000 (event: CUevent);
    cuEventSynchronize @ 2000 (event: CUevent);
    cuEventDestroy @ 2000 (event: CUevent);
    cuEventDestroy_v2 cuEventDestroy @ 4000 (event: CUevent);
    cuEventElapsedTime @ 2000 (ms: *mut f32, start: CUevent, end: CUevent);
    cuEventElapsedTime_v2 cuEventElapsedTime @ 12080 (ms: *mut f32, start: CUevent, end: CUevent);
    // Graphs.
    cuGraphCreate @ 10000 (out: *mut CUgraph, flags: u32);
    cuGraphDestroy @ 10000 (graph: CUgraph);
    cuGraphGetNodes @ 10000 (graph: CUgraph, nodes: *mut CUgraphNode, count: *mut usize);
    cuGraphNodeGetType @ 10000 (node: CUgraphNode, kind: *mut u32);
    cuGraphKernelNodeGetParams @ 10000;
    cuGraphKernelNodeGetParams_v2 cuGraphKernelNodeGetParams @ 12000;
    cuGraphExecKernelNodeSetParams @ 10010;
    cuGraphExecKernelNodeSetParams_v2 cuGraphExecKernelNodeSetParams @ 12000;
    cuGraphAddKernelNode @ 10000;
    cuGraphAddKernelNode_v2 cuGraphAddKernelNode @ 12000;
    cuGraphInstantiate @ 10000 (
        out: *mut CUgraphExec, graph: CUgraph, error_node: *mut *mut c_void, log: *mut c_char,
        log_size: usize,
    );
    cuGraphInstantiate_v2 cuGraphInstantiate @ 11000 (
        out: *mut CUgraphExec, graph: CUgraph, error_node: *mut *mut c_void, log: *mut c_char,
        log_size: usize,
    );
    cuGraphInstantiateWithFlags @ 11040 (
        out: *mut CUgraphExec, graph: CUgraph, flags: u64,
    );
    cuGraphInstantiateWithParams @ 12000;
    cuGraphInstantiateWithParams_ptsz cuGraphInstantiateWithParams @ 12000 per_thread;
    cuGraphExecDestroy @ 10000 (exec: CUgraphExec);
    cuGraphLaunch @ 10000 (exec: CUgraphExec, stream: CUstream);
    cuGraphLaunch_ptsz cuGraphLaunch @ 10000 per_thread (exec: CUgraphExec, stream: CUstream);
    cuGraphUpload @ 11010 (exec: CUgraphExec, stream: CUstream);
    cuGraphUpload_ptsz cuGraphUpload @ 11010 per_thread (exec: CUgraphExec, stream: CUstream);
}
aliases {
    // `cuGraphInstantiate` at 11.4 is the flags form, as bindings generated from the 12.x
    // headers (where the name is a macro for it) ask for it.
    cuGraphInstantiate @ 11040 => cuGraphInstantiateWithFlags;
}
}
