//! `cuGetProcAddress`: resolving a driver function by base name, the CUDA version the
//! caller was built for, and whether it wants the per-thread default stream.
//!
//! The table below lists, for each base name, every ABI revision with the CUDA version that
//! introduced it (the version in the toolkit's `PFN_<name>_v<version>` typedefs) and the
//! symbol that implements it; per-thread-default-stream variants (`_ptds` for synchronous
//! entries, `_ptsz` for those taking a stream) are listed after a `|`. A request resolves,
//! like the driver's, to the highest revision not newer than the caller's version; the
//! per-thread flag picks the per-thread variant of that revision where one exists. Symbols
//! are looked up in this library itself, never in the global scope, so that a library
//! preloaded in front of the driver is never returned as the driver's own function.

use crate::ffi::{code, CUresult};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// One ABI revision of a driver function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    base: &'static str,
    version: u32,
    per_thread: bool,
    symbol: &'static str,
}

macro_rules! proc_table {
    ($( $base:ident : $($ver:literal $sym:ident),+ $(| $($pver:literal $psym:ident),+)? ; )*) => {
        &[ $(
            $( Entry { base: stringify!($base), version: $ver, per_thread: false, symbol: stringify!($sym) }, )+
            $($( Entry { base: stringify!($base), version: $pver, per_thread: true, symbol: stringify!($psym) }, )+)?
        )* ]
    };
}

/// Every driver function this library exports, by base name.
static TABLE: &[Entry] = proc_table! {
    // Initialization, version, errors, entry points.
    cuInit: 2000 cuInit;
    cuDriverGetVersion: 2020 cuDriverGetVersion;
    cuGetErrorString: 6000 cuGetErrorString;
    cuGetErrorName: 6000 cuGetErrorName;
    cuGetProcAddress: 11030 cuGetProcAddress, 12000 cuGetProcAddress_v2;
    cuGetExportTable: 3000 cuGetExportTable;
    cuProfilerInitialize: 4000 cuProfilerInitialize;
    cuProfilerStart: 4000 cuProfilerStart;
    cuProfilerStop: 4000 cuProfilerStop;

    // Devices.
    cuDeviceGet: 2000 cuDeviceGet;
    cuDeviceGetCount: 2000 cuDeviceGetCount;
    cuDeviceGetName: 2000 cuDeviceGetName;
    cuDeviceGetUuid: 9020 cuDeviceGetUuid, 11040 cuDeviceGetUuid_v2;
    cuDeviceGetLuid: 10000 cuDeviceGetLuid;
    cuDeviceTotalMem: 2000 cuDeviceTotalMem, 3020 cuDeviceTotalMem_v2;
    cuDeviceGetTexture1DLinearMaxWidth: 11010 cuDeviceGetTexture1DLinearMaxWidth;
    cuDeviceGetAttribute: 2000 cuDeviceGetAttribute;
    cuDeviceGetNvSciSyncAttributes: 10020 cuDeviceGetNvSciSyncAttributes;
    cuDeviceSetMemPool: 11020 cuDeviceSetMemPool;
    cuDeviceGetMemPool: 11020 cuDeviceGetMemPool;
    cuDeviceGetDefaultMemPool: 11020 cuDeviceGetDefaultMemPool;
    cuDeviceGetProperties: 2000 cuDeviceGetProperties;
    cuDeviceComputeCapability: 2000 cuDeviceComputeCapability;
    cuDeviceGetByPCIBusId: 4010 cuDeviceGetByPCIBusId;
    cuDeviceGetPCIBusId: 4010 cuDeviceGetPCIBusId;
    cuDeviceCanAccessPeer: 4000 cuDeviceCanAccessPeer;
    cuDeviceGetP2PAttribute: 8000 cuDeviceGetP2PAttribute;
    cuDeviceGetExecAffinitySupport: 11040 cuDeviceGetExecAffinitySupport;

    // Primary contexts and contexts.
    cuDevicePrimaryCtxRetain: 7000 cuDevicePrimaryCtxRetain;
    cuDevicePrimaryCtxRelease: 7000 cuDevicePrimaryCtxRelease, 11000 cuDevicePrimaryCtxRelease_v2;
    cuDevicePrimaryCtxSetFlags: 7000 cuDevicePrimaryCtxSetFlags, 11000 cuDevicePrimaryCtxSetFlags_v2;
    cuDevicePrimaryCtxGetState: 7000 cuDevicePrimaryCtxGetState;
    cuDevicePrimaryCtxReset: 7000 cuDevicePrimaryCtxReset, 11000 cuDevicePrimaryCtxReset_v2;
    cuCtxCreate: 2000 cuCtxCreate, 3020 cuCtxCreate_v2, 11040 cuCtxCreate_v3, 12050 cuCtxCreate_v4;
    cuCtxDestroy: 2000 cuCtxDestroy, 4000 cuCtxDestroy_v2;
    cuCtxPushCurrent: 2000 cuCtxPushCurrent, 4000 cuCtxPushCurrent_v2;
    cuCtxPopCurrent: 2000 cuCtxPopCurrent, 4000 cuCtxPopCurrent_v2;
    cuCtxSetCurrent: 4000 cuCtxSetCurrent;
    cuCtxGetCurrent: 4000 cuCtxGetCurrent;
    cuCtxGetDevice: 2000 cuCtxGetDevice;
    cuCtxGetFlags: 7000 cuCtxGetFlags;
    cuCtxSetFlags: 12010 cuCtxSetFlags;
    cuCtxGetId: 12000 cuCtxGetId;
    cuCtxSynchronize: 2000 cuCtxSynchronize;
    cuCtxSetLimit: 3010 cuCtxSetLimit;
    cuCtxGetLimit: 3010 cuCtxGetLimit;
    cuCtxGetCacheConfig: 3020 cuCtxGetCacheConfig;
    cuCtxSetCacheConfig: 3020 cuCtxSetCacheConfig;
    cuCtxGetSharedMemConfig: 4020 cuCtxGetSharedMemConfig;
    cuCtxSetSharedMemConfig: 4020 cuCtxSetSharedMemConfig;
    cuCtxGetApiVersion: 3020 cuCtxGetApiVersion;
    cuCtxGetStreamPriorityRange: 5050 cuCtxGetStreamPriorityRange;
    cuCtxResetPersistingL2Cache: 11000 cuCtxResetPersistingL2Cache;
    cuCtxGetExecAffinity: 11040 cuCtxGetExecAffinity;
    cuCtxRecordEvent: 12050 cuCtxRecordEvent;
    cuCtxWaitEvent: 12050 cuCtxWaitEvent;
    cuCtxEnablePeerAccess: 4000 cuCtxEnablePeerAccess;
    cuCtxDisablePeerAccess: 4000 cuCtxDisablePeerAccess;

    // Modules, libraries, kernels.
    cuModuleLoad: 2000 cuModuleLoad;
    cuModuleLoadData: 2000 cuModuleLoadData;
    cuModuleLoadDataEx: 2010 cuModuleLoadDataEx;
    cuModuleLoadFatBinary: 2000 cuModuleLoadFatBinary;
    cuLinkCreate: 5050 cuLinkCreate, 6050 cuLinkCreate_v2;
    cuLinkAddData: 5050 cuLinkAddData, 6050 cuLinkAddData_v2;
    cuLinkAddFile: 5050 cuLinkAddFile, 6050 cuLinkAddFile_v2;
    cuLinkComplete: 5050 cuLinkComplete;
    cuLinkDestroy: 5050 cuLinkDestroy;
    cuModuleUnload: 2000 cuModuleUnload;
    cuModuleGetFunction: 2000 cuModuleGetFunction;
    cuModuleGetGlobal: 2000 cuModuleGetGlobal, 3020 cuModuleGetGlobal_v2;
    cuModuleGetLoadingMode: 11070 cuModuleGetLoadingMode;
    cuModuleGetFunctionCount: 12040 cuModuleGetFunctionCount;
    cuModuleEnumerateFunctions: 12040 cuModuleEnumerateFunctions;
    cuLibraryLoadData: 12000 cuLibraryLoadData;
    cuLibraryLoadFromFile: 12000 cuLibraryLoadFromFile;
    cuLibraryUnload: 12000 cuLibraryUnload;
    cuLibraryGetKernel: 12000 cuLibraryGetKernel;
    cuLibraryGetKernelCount: 12040 cuLibraryGetKernelCount;
    cuLibraryEnumerateKernels: 12040 cuLibraryEnumerateKernels;
    cuLibraryGetModule: 12000 cuLibraryGetModule;
    cuLibraryGetGlobal: 12000 cuLibraryGetGlobal;
    cuLibraryGetManaged: 12000 cuLibraryGetManaged;
    cuLibraryGetUnifiedFunction: 12000 cuLibraryGetUnifiedFunction;
    cuKernelGetFunction: 12000 cuKernelGetFunction;
    cuKernelGetLibrary: 12050 cuKernelGetLibrary;
    cuKernelGetAttribute: 12000 cuKernelGetAttribute;
    cuKernelSetAttribute: 12000 cuKernelSetAttribute;
    cuKernelSetCacheConfig: 12000 cuKernelSetCacheConfig;
    cuKernelGetName: 12030 cuKernelGetName;
    cuKernelGetParamInfo: 12040 cuKernelGetParamInfo;
    cuFuncGetAttribute: 2020 cuFuncGetAttribute;
    cuFuncSetAttribute: 9000 cuFuncSetAttribute;
    cuFuncSetCacheConfig: 3000 cuFuncSetCacheConfig;
    cuFuncSetSharedMemConfig: 4020 cuFuncSetSharedMemConfig;
    cuFuncGetModule: 11000 cuFuncGetModule;
    cuFuncGetName: 12030 cuFuncGetName;
    cuFuncGetParamInfo: 12040 cuFuncGetParamInfo;
    cuFuncIsLoaded: 12040 cuFuncIsLoaded;
    cuFuncLoad: 12040 cuFuncLoad;
    cuOccupancyMaxActiveBlocksPerMultiprocessor: 6050 cuOccupancyMaxActiveBlocksPerMultiprocessor;
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags: 7000 cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags;
    cuOccupancyMaxPotentialBlockSize: 6050 cuOccupancyMaxPotentialBlockSize;
    cuOccupancyMaxPotentialBlockSizeWithFlags: 7000 cuOccupancyMaxPotentialBlockSizeWithFlags;
    cuOccupancyAvailableDynamicSMemPerBlock: 10020 cuOccupancyAvailableDynamicSMemPerBlock;
    cuOccupancyMaxPotentialClusterSize: 11070 cuOccupancyMaxPotentialClusterSize;
    cuOccupancyMaxActiveClusters: 11070 cuOccupancyMaxActiveClusters;

    // Launches.
    cuLaunchKernel: 4000 cuLaunchKernel | 7000 cuLaunchKernel_ptsz;
    cuLaunchKernelEx: 11060 cuLaunchKernelEx | 11060 cuLaunchKernelEx_ptsz;
    cuLaunchCooperativeKernel: 9000 cuLaunchCooperativeKernel | 9000 cuLaunchCooperativeKernel_ptsz;
    cuLaunchHostFunc: 10000 cuLaunchHostFunc | 10000 cuLaunchHostFunc_ptsz;
    cuMulticastCreate: 12010 cuMulticastCreate;
    cuMulticastAddDevice: 12010 cuMulticastAddDevice;
    cuMulticastBindMem: 12010 cuMulticastBindMem;
    cuMulticastBindAddr: 12010 cuMulticastBindAddr;
    cuMulticastUnbind: 12010 cuMulticastUnbind;
    cuMulticastGetGranularity: 12010 cuMulticastGetGranularity;
    cuGreenCtxCreate: 12040 cuGreenCtxCreate;
    cuGreenCtxDestroy: 12040 cuGreenCtxDestroy;
    cuCtxFromGreenCtx: 12040 cuCtxFromGreenCtx;
    cuGreenCtxStreamCreate: 12050 cuGreenCtxStreamCreate;
    cuDeviceGetDevResource: 12040 cuDeviceGetDevResource;
    cuDevSmResourceSplitByCount: 12040 cuDevSmResourceSplitByCount;
    cuDevResourceGenerateDesc: 12040 cuDevResourceGenerateDesc;
    cuLogsRegisterCallback: 12090 cuLogsRegisterCallback;
    cuLogsUnregisterCallback: 12090 cuLogsUnregisterCallback;
    cuStreamWriteValue32: 8000 cuStreamWriteValue32, 11070 cuStreamWriteValue32_v2 | 8000 cuStreamWriteValue32_ptsz, 11070 cuStreamWriteValue32_v2_ptsz;
    cuStreamWriteValue64: 9000 cuStreamWriteValue64, 11070 cuStreamWriteValue64_v2 | 9000 cuStreamWriteValue64_ptsz, 11070 cuStreamWriteValue64_v2_ptsz;
    cuStreamWaitValue32: 8000 cuStreamWaitValue32, 11070 cuStreamWaitValue32_v2 | 8000 cuStreamWaitValue32_ptsz, 11070 cuStreamWaitValue32_v2_ptsz;
    cuTensorMapEncodeTiled: 12000 cuTensorMapEncodeTiled;
    cuTensorMapReplaceAddress: 12000 cuTensorMapReplaceAddress;
    cuStreamBatchMemOp: 8000 cuStreamBatchMemOp, 11070 cuStreamBatchMemOp_v2 | 8000 cuStreamBatchMemOp_ptsz, 11070 cuStreamBatchMemOp_v2_ptsz;
    cuStreamWaitValue64: 9000 cuStreamWaitValue64, 11070 cuStreamWaitValue64_v2 | 9000 cuStreamWaitValue64_ptsz, 11070 cuStreamWaitValue64_v2_ptsz;

    // Memory.
    cuMemGetInfo: 2000 cuMemGetInfo, 3020 cuMemGetInfo_v2;
    cuMemAlloc: 2000 cuMemAlloc, 3020 cuMemAlloc_v2;
    cuMemAllocPitch: 2000 cuMemAllocPitch, 3020 cuMemAllocPitch_v2;
    cuMemFree: 2000 cuMemFree, 3020 cuMemFree_v2;
    cuMemGetAddressRange: 2000 cuMemGetAddressRange, 3020 cuMemGetAddressRange_v2;
    cuMemAllocHost: 2000 cuMemAllocHost, 3020 cuMemAllocHost_v2;
    cuMemFreeHost: 2000 cuMemFreeHost;
    cuMemHostAlloc: 2020 cuMemHostAlloc;
    cuMemHostGetDevicePointer: 2020 cuMemHostGetDevicePointer, 3020 cuMemHostGetDevicePointer_v2;
    cuMemHostGetFlags: 2030 cuMemHostGetFlags;
    cuMemAllocManaged: 6000 cuMemAllocManaged;
    cuMemHostRegister: 4000 cuMemHostRegister, 6050 cuMemHostRegister_v2;
    cuMemHostUnregister: 4000 cuMemHostUnregister;
    cuMemcpy: 4000 cuMemcpy | 7000 cuMemcpy_ptds;
    cuMemcpyPeer: 4000 cuMemcpyPeer | 7000 cuMemcpyPeer_ptds;
    cuMemcpyHtoD: 2000 cuMemcpyHtoD, 3020 cuMemcpyHtoD_v2 | 7000 cuMemcpyHtoD_v2_ptds;
    cuMemcpyDtoH: 2000 cuMemcpyDtoH, 3020 cuMemcpyDtoH_v2 | 7000 cuMemcpyDtoH_v2_ptds;
    cuMemcpyDtoD: 2000 cuMemcpyDtoD, 3020 cuMemcpyDtoD_v2 | 7000 cuMemcpyDtoD_v2_ptds;
    cuMemcpy2D: 2000 cuMemcpy2D, 3020 cuMemcpy2D_v2 | 7000 cuMemcpy2D_v2_ptds;
    cuMemcpy2DUnaligned: 2000 cuMemcpy2DUnaligned, 3020 cuMemcpy2DUnaligned_v2 | 7000 cuMemcpy2DUnaligned_v2_ptds;
    cuMemcpyAsync: 4000 cuMemcpyAsync | 7000 cuMemcpyAsync_ptsz;
    cuMemcpyPeerAsync: 4000 cuMemcpyPeerAsync | 7000 cuMemcpyPeerAsync_ptsz;
    cuMemcpyHtoDAsync: 2000 cuMemcpyHtoDAsync, 3020 cuMemcpyHtoDAsync_v2 | 7000 cuMemcpyHtoDAsync_v2_ptsz;
    cuMemcpyDtoHAsync: 2000 cuMemcpyDtoHAsync, 3020 cuMemcpyDtoHAsync_v2 | 7000 cuMemcpyDtoHAsync_v2_ptsz;
    cuMemcpyDtoDAsync: 3000 cuMemcpyDtoDAsync, 3020 cuMemcpyDtoDAsync_v2 | 7000 cuMemcpyDtoDAsync_v2_ptsz;
    cuMemcpy2DAsync: 2000 cuMemcpy2DAsync, 3020 cuMemcpy2DAsync_v2 | 7000 cuMemcpy2DAsync_v2_ptsz;
    cuMemsetD8: 2000 cuMemsetD8, 3020 cuMemsetD8_v2 | 7000 cuMemsetD8_v2_ptds;
    cuMemsetD16: 2000 cuMemsetD16, 3020 cuMemsetD16_v2 | 7000 cuMemsetD16_v2_ptds;
    cuMemsetD32: 2000 cuMemsetD32, 3020 cuMemsetD32_v2 | 7000 cuMemsetD32_v2_ptds;
    cuMemsetD2D8: 2000 cuMemsetD2D8, 3020 cuMemsetD2D8_v2 | 7000 cuMemsetD2D8_v2_ptds;
    cuMemsetD2D16: 2000 cuMemsetD2D16, 3020 cuMemsetD2D16_v2 | 7000 cuMemsetD2D16_v2_ptds;
    cuMemsetD2D32: 2000 cuMemsetD2D32, 3020 cuMemsetD2D32_v2 | 7000 cuMemsetD2D32_v2_ptds;
    cuMemsetD8Async: 3020 cuMemsetD8Async | 7000 cuMemsetD8Async_ptsz;
    cuMemsetD16Async: 3020 cuMemsetD16Async | 7000 cuMemsetD16Async_ptsz;
    cuMemsetD32Async: 3020 cuMemsetD32Async | 7000 cuMemsetD32Async_ptsz;
    cuMemsetD2D8Async: 3020 cuMemsetD2D8Async | 7000 cuMemsetD2D8Async_ptsz;
    cuMemsetD2D16Async: 3020 cuMemsetD2D16Async | 7000 cuMemsetD2D16Async_ptsz;
    cuMemsetD2D32Async: 3020 cuMemsetD2D32Async | 7000 cuMemsetD2D32Async_ptsz;
    cuArrayCreate: 2000 cuArrayCreate, 3020 cuArrayCreate_v2;
    cuArrayGetDescriptor: 2000 cuArrayGetDescriptor, 3020 cuArrayGetDescriptor_v2;
    cuArrayDestroy: 2000 cuArrayDestroy;
    cuArray3DCreate: 2000 cuArray3DCreate, 3020 cuArray3DCreate_v2;
    cuArray3DGetDescriptor: 2000 cuArray3DGetDescriptor, 3020 cuArray3DGetDescriptor_v2;
    cuMipmappedArrayCreate: 5000 cuMipmappedArrayCreate;
    cuMipmappedArrayDestroy: 5000 cuMipmappedArrayDestroy;
    cuMemAddressReserve: 10020 cuMemAddressReserve;
    cuMemAddressFree: 10020 cuMemAddressFree;
    cuMemCreate: 10020 cuMemCreate;
    cuMemRelease: 10020 cuMemRelease;
    cuMemMap: 10020 cuMemMap;
    cuMemUnmap: 10020 cuMemUnmap;
    cuMemSetAccess: 10020 cuMemSetAccess;
    cuMemGetAccess: 10020 cuMemGetAccess;
    cuMemGetAllocationGranularity: 10020 cuMemGetAllocationGranularity;
    cuMemGetAllocationPropertiesFromHandle: 10020 cuMemGetAllocationPropertiesFromHandle;
    cuMemRetainAllocationHandle: 11000 cuMemRetainAllocationHandle;
    cuMemExportToShareableHandle: 10020 cuMemExportToShareableHandle;
    cuMemImportFromShareableHandle: 10020 cuMemImportFromShareableHandle;
    cuMemFreeAsync: 11020 cuMemFreeAsync | 11020 cuMemFreeAsync_ptsz;
    cuMemAllocAsync: 11020 cuMemAllocAsync | 11020 cuMemAllocAsync_ptsz;
    cuMemAllocFromPoolAsync: 11020 cuMemAllocFromPoolAsync | 11020 cuMemAllocFromPoolAsync_ptsz;
    cuMemPoolTrimTo: 11020 cuMemPoolTrimTo;
    cuMemPoolSetAttribute: 11020 cuMemPoolSetAttribute;
    cuMemPoolGetAttribute: 11020 cuMemPoolGetAttribute;
    cuMemPoolSetAccess: 11020 cuMemPoolSetAccess;
    cuMemPoolGetAccess: 11020 cuMemPoolGetAccess;
    cuMemPoolCreate: 11020 cuMemPoolCreate;
    cuMemPoolDestroy: 11020 cuMemPoolDestroy;
    cuPointerGetAttribute: 4000 cuPointerGetAttribute;
    cuPointerGetAttributes: 7000 cuPointerGetAttributes;
    cuPointerSetAttribute: 6000 cuPointerSetAttribute;
    cuMemPrefetchAsync: 8000 cuMemPrefetchAsync, 12020 cuMemPrefetchAsync_v2 | 8000 cuMemPrefetchAsync_ptsz, 12020 cuMemPrefetchAsync_v2_ptsz;
    cuMemAdvise: 8000 cuMemAdvise, 12020 cuMemAdvise_v2;

    // Streams.
    cuStreamCreate: 2000 cuStreamCreate;
    cuStreamCreateWithPriority: 5050 cuStreamCreateWithPriority;
    cuStreamGetPriority: 5050 cuStreamGetPriority | 7000 cuStreamGetPriority_ptsz;
    cuStreamGetFlags: 5050 cuStreamGetFlags | 7000 cuStreamGetFlags_ptsz;
    cuStreamGetId: 12000 cuStreamGetId | 12000 cuStreamGetId_ptsz;
    cuStreamGetDevice: 12080 cuStreamGetDevice | 12080 cuStreamGetDevice_ptsz;
    cuStreamGetCtx: 9020 cuStreamGetCtx | 9020 cuStreamGetCtx_ptsz;
    cuStreamGetCtx_v2: 12050 cuStreamGetCtx_v2 | 12050 cuStreamGetCtx_v2_ptsz;
    cuStreamWaitEvent: 3020 cuStreamWaitEvent | 7000 cuStreamWaitEvent_ptsz;
    cuStreamAddCallback: 5000 cuStreamAddCallback | 7000 cuStreamAddCallback_ptsz;
    cuStreamAttachMemAsync: 6000 cuStreamAttachMemAsync | 7000 cuStreamAttachMemAsync_ptsz;
    cuStreamQuery: 2000 cuStreamQuery | 7000 cuStreamQuery_ptsz;
    cuStreamSynchronize: 2000 cuStreamSynchronize | 7000 cuStreamSynchronize_ptsz;
    cuStreamDestroy: 2000 cuStreamDestroy, 4000 cuStreamDestroy_v2;
    cuStreamCopyAttributes: 11000 cuStreamCopyAttributes | 11000 cuStreamCopyAttributes_ptsz;
    cuStreamGetAttribute: 11000 cuStreamGetAttribute | 11000 cuStreamGetAttribute_ptsz;
    cuStreamSetAttribute: 11000 cuStreamSetAttribute | 11000 cuStreamSetAttribute_ptsz;
    cuStreamBeginCapture: 10000 cuStreamBeginCapture, 10010 cuStreamBeginCapture_v2 | 10000 cuStreamBeginCapture_ptsz, 10010 cuStreamBeginCapture_v2_ptsz;
    cuStreamEndCapture: 10000 cuStreamEndCapture | 10000 cuStreamEndCapture_ptsz;
    cuStreamIsCapturing: 10000 cuStreamIsCapturing | 10000 cuStreamIsCapturing_ptsz;
    cuStreamGetCaptureInfo: 10010 cuStreamGetCaptureInfo, 11030 cuStreamGetCaptureInfo_v2, 12030 cuStreamGetCaptureInfo_v3
        | 10010 cuStreamGetCaptureInfo_ptsz, 11030 cuStreamGetCaptureInfo_v2_ptsz, 12030 cuStreamGetCaptureInfo_v3_ptsz;
    cuStreamUpdateCaptureDependencies: 11030 cuStreamUpdateCaptureDependencies, 12030 cuStreamUpdateCaptureDependencies_v2
        | 11030 cuStreamUpdateCaptureDependencies_ptsz, 12030 cuStreamUpdateCaptureDependencies_v2_ptsz;
    cuThreadExchangeStreamCaptureMode: 10010 cuThreadExchangeStreamCaptureMode;

    // Events.
    cuEventCreate: 2000 cuEventCreate;
    cuEventRecord: 2000 cuEventRecord | 7000 cuEventRecord_ptsz;
    cuEventRecordWithFlags: 11010 cuEventRecordWithFlags | 11010 cuEventRecordWithFlags_ptsz;
    cuEventQuery: 2000 cuEventQuery;
    cuEventSynchronize: 2000 cuEventSynchronize;
    cuEventDestroy: 2000 cuEventDestroy, 4000 cuEventDestroy_v2;
    cuEventElapsedTime: 2000 cuEventElapsedTime, 12080 cuEventElapsedTime_v2;

    // Graphs. `cuGraphInstantiate` at 11.4 is the flags form, as bindings generated from the
    // 12.x headers (where the name is a macro for it) ask for it.
    cuGraphCreate: 10000 cuGraphCreate;
    cuGraphDestroy: 10000 cuGraphDestroy;
    cuGraphGetNodes: 10000 cuGraphGetNodes;
    cuGraphNodeGetType: 10000 cuGraphNodeGetType;
    cuGraphKernelNodeGetParams: 10000 cuGraphKernelNodeGetParams, 12000 cuGraphKernelNodeGetParams_v2;
    cuGraphExecKernelNodeSetParams: 10010 cuGraphExecKernelNodeSetParams, 12000 cuGraphExecKernelNodeSetParams_v2;
    cuGraphAddKernelNode: 10000 cuGraphAddKernelNode, 12000 cuGraphAddKernelNode_v2;
    cuGraphInstantiate: 10000 cuGraphInstantiate, 11000 cuGraphInstantiate_v2, 11040 cuGraphInstantiateWithFlags;
    cuGraphInstantiateWithFlags: 11040 cuGraphInstantiateWithFlags;
    cuGraphInstantiateWithParams: 12000 cuGraphInstantiateWithParams | 12000 cuGraphInstantiateWithParams_ptsz;
    cuGraphExecDestroy: 10000 cuGraphExecDestroy;
    cuGraphLaunch: 10000 cuGraphLaunch | 10000 cuGraphLaunch_ptsz;
    cuGraphUpload: 11010 cuGraphUpload | 11010 cuGraphUpload_ptsz;
};

/// Why a base name did not resolve (`CUdriverProcAddressQueryResult`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum QueryResult {
    Success = 0,
    SymbolNotFound = 1,
    VersionNotSufficient = 2,
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`; `DEFAULT` (0) and `LEGACY_STREAM` (1)
/// both mean the legacy default stream here.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// The symbol implementing `base` for a caller built for `version`.
fn resolve(
    table: &[Entry],
    base: &str,
    version: u32,
    per_thread: bool,
) -> Result<&'static str, QueryResult> {
    let revisions = || {
        table
            .iter()
            .filter(|e| e.base == base && e.version <= version)
    };
    if !table.iter().any(|e| e.base == base) {
        return Err(QueryResult::SymbolNotFound);
    }
    let newest = |pt: bool| {
        revisions()
            .filter(|e| e.per_thread == pt)
            .max_by_key(|e| e.version)
    };
    let legacy = newest(false);
    if per_thread {
        // The per-thread variant of the newest revision: never one of an older ABI.
        if let Some(pt) = newest(true) {
            let same_abi = match legacy {
                Some(l) => pt.version >= l.version,
                None => true,
            };
            if same_abi {
                return Ok(pt.symbol);
            }
        }
    }
    legacy
        .map(|e| e.symbol)
        .ok_or(QueryResult::VersionNotSufficient)
}

/// This library's own handle, for looking its symbols up.
fn own_library() -> usize {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        // SAFETY: Dl_info is plain data; dladdr fills it for an address in a loaded object.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let here = own_library as *const c_void;
        // SAFETY: `here` is an address in this library; `info` is valid for writes.
        let found = unsafe { libc::dladdr(here, &mut info) } != 0 && !info.dli_fname.is_null();
        if !found {
            return 0;
        }
        // SAFETY: dli_fname names this loaded library; RTLD_NOLOAD only takes a reference
        // to it (never loads anything), which we keep for the life of the process.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) as usize }
    })
}

/// The address of one of this library's exported symbols.
fn own_symbol(symbol: &str) -> Option<*mut c_void> {
    let handle = own_library();
    if handle == 0 {
        return None;
    }
    let name = std::ffi::CString::new(symbol).ok()?;
    // SAFETY: handle is a live library handle and name a NUL-terminated string.
    let p = unsafe { libc::dlsym(handle as *mut c_void, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// When set to a file name, every request is appended to that file as a line
/// `<version> <flags> <name> <symbol>` (`-` for a request that does not resolve): the record
/// of what a program, like NVIDIA's runtime, asks the driver for.
const ENV_TRACE: &str = "SIMGPU_TRACE_PROC_ADDRESS";

fn trace(name: &str, version: c_int, flags: u64, symbol: Option<&str>) {
    static FILE: OnceLock<Option<std::ffi::OsString>> = OnceLock::new();
    let Some(path) = FILE.get_or_init(|| std::env::var_os(ENV_TRACE)) else {
        return;
    };
    let line = format!("{version} {flags} {name} {}\n", symbol.unwrap_or("-"));
    // One write of one short line to a file opened for appending: lines of concurrent
    // callers do not interleave.
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
}

/// Both revisions of `cuGetProcAddress`.
///
/// # Safety
/// `symbol` must be null or a NUL-terminated string; `pfn` null or valid for a write of a
/// pointer; `status` null or valid for a write of an int.
unsafe fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut QueryResult,
) -> Result<(), CUresult> {
    if symbol.is_null() || pfn.is_null() || flags > PER_THREAD_DEFAULT_STREAM {
        return Err(code::INVALID_VALUE);
    }
    // SAFETY: pfn is non-null and valid for a write, by the contract.
    unsafe { pfn.write(std::ptr::null_mut()) };
    // SAFETY: symbol is non-null and NUL-terminated, by the contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_str().unwrap_or("");
    let version = u32::try_from(cuda_version).unwrap_or(0);
    let found = resolve(TABLE, name, version, flags == PER_THREAD_DEFAULT_STREAM).and_then(|s| {
        own_symbol(s)
            .map(|p| (s, p))
            .ok_or(QueryResult::SymbolNotFound)
    });
    trace(
        name,
        cuda_version,
        flags,
        found.as_ref().ok().map(|(s, _)| *s),
    );
    let (result, outcome) = match found {
        Ok((_, p)) => {
            // SAFETY: as above.
            unsafe { pfn.write(p) };
            (QueryResult::Success, Ok(()))
        }
        Err(why) => (why, Err(code::NOT_FOUND)),
    };
    if !status.is_null() {
        // SAFETY: non-null, and valid for a write of an int by the contract.
        unsafe { status.write(result) };
    }
    outcome
}

cuda_entry! {
    fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) {
        // SAFETY: the arguments carry the driver API's contract for this entry point.
        unsafe { get_proc_address(symbol, pfn, cuda_version, flags, std::ptr::null_mut()) }
    }

    fn cuGetProcAddress_v2(
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        cuda_version: c_int,
        flags: u64,
        symbol_status: *mut c_int,
    ) {
        // SAFETY: as above; CUdriverProcAddressQueryResult is an int-sized enum.
        unsafe { get_proc_address(symbol, pfn, cuda_version, flags, symbol_status.cast()) }
    }

    fn cuProfilerInitialize(_config: *const c_char, _output: *const c_char, _mode: c_int) {
        Ok(())
    }

    fn cuProfilerStart() {
        Ok(())
    }

    fn cuProfilerStop() {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(base: &str, version: u32, per_thread: bool) -> Result<&'static str, QueryResult> {
        resolve(TABLE, base, version, per_thread)
    }

    #[test]
    fn picks_the_newest_revision_the_caller_knows() {
        assert_eq!(r("cuMemAlloc", 2000, false), Ok("cuMemAlloc"));
        assert_eq!(r("cuMemAlloc", 3019, false), Ok("cuMemAlloc"));
        assert_eq!(r("cuMemAlloc", 12000, false), Ok("cuMemAlloc_v2"));
        assert_eq!(r("cuCtxCreate", 12080, false), Ok("cuCtxCreate_v4"));
        assert_eq!(r("cuCtxCreate", 12000, false), Ok("cuCtxCreate_v3"));
        assert_eq!(
            r("cuGetProcAddress", 12000, false),
            Ok("cuGetProcAddress_v2")
        );
        assert_eq!(r("cuGetProcAddress", 11030, false), Ok("cuGetProcAddress"));
        assert_eq!(r("cuDeviceGetUuid", 12080, false), Ok("cuDeviceGetUuid_v2"));
        assert_eq!(
            r("cuGraphInstantiate", 11040, false),
            Ok("cuGraphInstantiateWithFlags")
        );
    }

    #[test]
    fn per_thread_flag_picks_ptds_and_ptsz() {
        assert_eq!(r("cuLaunchKernel", 12000, true), Ok("cuLaunchKernel_ptsz"));
        assert_eq!(r("cuLaunchKernel", 12000, false), Ok("cuLaunchKernel"));
        assert_eq!(r("cuMemcpyHtoD", 12000, true), Ok("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(
            r("cuMemcpyHtoDAsync", 12000, true),
            Ok("cuMemcpyHtoDAsync_v2_ptsz")
        );
        assert_eq!(
            r("cuStreamGetCaptureInfo", 11080, true),
            Ok("cuStreamGetCaptureInfo_v2_ptsz")
        );
        // Before per-thread streams existed, the legacy revision is all there is.
        assert_eq!(r("cuMemcpyHtoD", 6050, true), Ok("cuMemcpyHtoD_v2"));
        // Functions without a stream have no per-thread variant.
        assert_eq!(r("cuMemAlloc", 12000, true), Ok("cuMemAlloc_v2"));
    }

    #[test]
    fn unknown_names_and_old_versions() {
        assert_eq!(
            r("cuNoSuchThing", 12000, false),
            Err(QueryResult::SymbolNotFound)
        );
        assert_eq!(
            r("cuMemAllocAsync", 11000, false),
            Err(QueryResult::VersionNotSufficient)
        );
        assert_eq!(
            r("cuCtxCreate_v2", 12000, false),
            Err(QueryResult::SymbolNotFound)
        );
    }

    #[test]
    fn entry_point_reports_not_found_with_null() {
        let mut p: *mut c_void = std::ptr::dangling_mut();
        let mut status = QueryResult::Success;
        // SAFETY: all pointers are valid locals; the name is NUL-terminated.
        let rc =
            unsafe { get_proc_address(c"cuNoSuchThing".as_ptr(), &mut p, 12080, 0, &mut status) };
        assert_eq!(rc, Err(code::NOT_FOUND));
        assert!(p.is_null());
        assert_eq!(status, QueryResult::SymbolNotFound);
        // SAFETY: as above.
        let rc =
            unsafe { get_proc_address(c"cuMemAllocAsync".as_ptr(), &mut p, 11000, 0, &mut status) };
        assert_eq!(rc, Err(code::NOT_FOUND));
        assert_eq!(status, QueryResult::VersionNotSufficient);
        // SAFETY: as above.
        let rc = unsafe { get_proc_address(c"cuInit".as_ptr(), &mut p, 12080, 7, &mut status) };
        assert_eq!(rc, Err(code::INVALID_VALUE));
    }

    #[test]
    fn table_is_well_formed() {
        for e in TABLE {
            assert!(
                e.symbol.starts_with(e.base),
                "{} does not extend {}",
                e.symbol,
                e.base
            );
            let suffix = &e.symbol[e.base.len()..];
            assert_eq!(
                suffix.ends_with("_ptds") || suffix.ends_with("_ptsz"),
                e.per_thread,
                "{}",
                e.symbol
            );
            let twins = TABLE.iter().filter(|o| {
                o.base == e.base && o.version == e.version && o.per_thread == e.per_thread
            });
            assert_eq!(
                twins.count(),
                1,
                "{} has two revisions at {}",
                e.base,
                e.version
            );
        }
    }

    /// Every exported entry point (every `fn cu…` declared through `cuda_entry!` in this
    /// crate) is reachable through `cuGetProcAddress`.
    #[test]
    fn every_export_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut missing = Vec::new();
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for line in text.lines() {
                    let Some(rest) = line.trim_start().strip_prefix("fn cu") else {
                        continue;
                    };
                    if !rest.starts_with(|c: char| c.is_ascii_uppercase()) {
                        continue;
                    }
                    let name: String = format!("cu{}", rest.split('(').next().unwrap());
                    if !TABLE.iter().any(|e| e.symbol == name) {
                        missing.push(name);
                    }
                }
            }
        }
        assert!(
            missing.is_empty(),
            "exported but not in the cuGetProcAddress table: {missing:?}"
        );
    }
}
