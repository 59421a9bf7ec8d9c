//! `cuGetErrorName` and `cuGetErrorString`: every result code of the 12.8 driver, with its
//! name and a one-line description.

use crate::ffi::{code, CUresult};
use std::ffi::{c_char, CStr};

/// One result code: its value, its enumerator name and what it means.
struct ResultCode {
    value: CUresult,
    name: &'static CStr,
    text: &'static CStr,
}

const fn rc(value: CUresult, name: &'static CStr, text: &'static CStr) -> ResultCode {
    ResultCode { value, name, text }
}

/// Sorted by value, so that lookups can binary-search.
static RESULT_CODES: &[ResultCode] = &[
    rc(0, c"CUDA_SUCCESS", c"no error"),
    rc(1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    rc(2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    rc(3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    rc(4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    rc(5, c"CUDA_ERROR_PROFILER_DISABLED", c"profiler disabled while using external profiling tool"),
    rc(6, c"CUDA_ERROR_PROFILER_NOT_INITIALIZED", c"profiler not initialized"),
    rc(7, c"CUDA_ERROR_PROFILER_ALREADY_STARTED", c"profiler already started"),
    rc(8, c"CUDA_ERROR_PROFILER_ALREADY_STOPPED", c"profiler already stopped"),
    rc(34, c"CUDA_ERROR_STUB_LIBRARY", c"CUDA driver is a stub library"),
    rc(46, c"CUDA_ERROR_DEVICE_UNAVAILABLE", c"CUDA-capable device(s) is/are busy or unavailable"),
    rc(100, c"CUDA_ERROR_NO_DEVICE", c"no CUDA-capable device is detected"),
    rc(101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    rc(102, c"CUDA_ERROR_DEVICE_NOT_LICENSED", c"device doesn't have valid Grid license"),
    rc(200, c"CUDA_ERROR_INVALID_IMAGE", c"device kernel image is invalid"),
    rc(201, c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
    rc(202, c"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", c"context already current"),
    rc(205, c"CUDA_ERROR_MAP_FAILED", c"mapping of buffer object failed"),
    rc(206, c"CUDA_ERROR_UNMAP_FAILED", c"unmapping of buffer object failed"),
    rc(207, c"CUDA_ERROR_ARRAY_IS_MAPPED", c"array is mapped"),
    rc(208, c"CUDA_ERROR_ALREADY_MAPPED", c"resource already mapped"),
    rc(209, c"CUDA_ERROR_NO_BINARY_FOR_GPU", c"no kernel image is available for execution on the device"),
    rc(210, c"CUDA_ERROR_ALREADY_ACQUIRED", c"resource already acquired"),
    rc(211, c"CUDA_ERROR_NOT_MAPPED", c"resource not mapped"),
    rc(212, c"CUDA_ERROR_NOT_MAPPED_AS_ARRAY", c"resource not mapped as array"),
    rc(213, c"CUDA_ERROR_NOT_MAPPED_AS_POINTER", c"resource not mapped as pointer"),
    rc(214, c"CUDA_ERROR_ECC_UNCORRECTABLE", c"uncorrectable ECC error encountered"),
    rc(215, c"CUDA_ERROR_UNSUPPORTED_LIMIT", c"limit is not supported on this architecture"),
    rc(216, c"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", c"exclusive-thread device already in use by a different thread"),
    rc(217, c"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", c"peer access is not supported between these two devices"),
    rc(218, c"CUDA_ERROR_INVALID_PTX", c"a PTX JIT compilation failed"),
    rc(219, c"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", c"invalid OpenGL or DirectX context"),
    rc(220, c"CUDA_ERROR_NVLINK_UNCORRECTABLE", c"uncorrectable NVLink error detected during the execution"),
    rc(221, c"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", c"PTX JIT compiler library not found"),
    rc(222, c"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", c"the provided PTX was compiled with an unsupported toolchain"),
    rc(223, c"CUDA_ERROR_JIT_COMPILATION_DISABLED", c"PTX JIT compilation was disabled"),
    rc(224, c"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", c"the provided execution affinity is not supported"),
    rc(225, c"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", c"the provided PTX contains an unsupported call to device-side synchronization"),
    rc(226, c"CUDA_ERROR_CONTAINED", c"an exception was contained on the device"),
    rc(300, c"CUDA_ERROR_INVALID_SOURCE", c"device kernel image is invalid"),
    rc(301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found"),
    rc(302, c"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", c"shared object symbol not found"),
    rc(303, c"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", c"shared object initialization failed"),
    rc(304, c"CUDA_ERROR_OPERATING_SYSTEM", c"OS call failed or operation not supported on this OS"),
    rc(400, c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
    rc(401, c"CUDA_ERROR_ILLEGAL_STATE", c"the operation cannot be performed in the present state"),
    rc(402, c"CUDA_ERROR_LOSSY_QUERY", c"attempted introspection would be semantically lossy"),
    rc(500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    rc(600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    rc(700, c"CUDA_ERROR_ILLEGAL_ADDRESS", c"an illegal memory access was encountered"),
    rc(701, c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", c"too many resources requested for launch"),
    rc(702, c"CUDA_ERROR_LAUNCH_TIMEOUT", c"the launch timed out and was terminated"),
    rc(703, c"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", c"launch uses incompatible texturing mode"),
    rc(704, c"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", c"peer access is already enabled"),
    rc(705, c"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", c"peer access has not been enabled"),
    rc(708, c"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", c"cannot set while device is active in this process"),
    rc(709, c"CUDA_ERROR_CONTEXT_IS_DESTROYED", c"context is destroyed"),
    rc(710, c"CUDA_ERROR_ASSERT", c"device-side assert triggered"),
    rc(711, c"CUDA_ERROR_TOO_MANY_PEERS", c"peer mapping resources exhausted"),
    rc(712, c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", c"part or all of the requested memory range is already mapped"),
    rc(713, c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", c"pointer does not correspond to a registered memory region"),
    rc(714, c"CUDA_ERROR_HARDWARE_STACK_ERROR", c"hardware stack error"),
    rc(715, c"CUDA_ERROR_ILLEGAL_INSTRUCTION", c"an illegal instruction was encountered"),
    rc(716, c"CUDA_ERROR_MISALIGNED_ADDRESS", c"misaligned address"),
    rc(717, c"CUDA_ERROR_INVALID_ADDRESS_SPACE", c"operation not supported on global/shared address space"),
    rc(718, c"CUDA_ERROR_INVALID_PC", c"invalid program counter"),
    rc(719, c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure"),
    rc(720, c"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", c"too many blocks in cooperative launch"),
    rc(721, c"CUDA_ERROR_TENSOR_MEMORY_LEAK", c"tensor memory not completely freed"),
    rc(800, c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    rc(801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    rc(802, c"CUDA_ERROR_SYSTEM_NOT_READY", c"system not yet initialized"),
    rc(803, c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", c"system has unsupported display driver / cuda driver combination"),
    rc(804, c"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", c"forward compatibility was attempted on non supported HW"),
    rc(805, c"CUDA_ERROR_MPS_CONNECTION_FAILED", c"MPS client failed to connect to the MPS control daemon or the MPS server"),
    rc(806, c"CUDA_ERROR_MPS_RPC_FAILURE", c"the remote procedural call between the MPS server and the MPS client failed"),
    rc(807, c"CUDA_ERROR_MPS_SERVER_NOT_READY", c"MPS server is not ready to accept new MPS client requests"),
    rc(808, c"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", c"the hardware resources required to create MPS client have been exhausted"),
    rc(809, c"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", c"the hardware resources required to support device connections have been exhausted"),
    rc(810, c"CUDA_ERROR_MPS_CLIENT_TERMINATED", c"the MPS client has been terminated by the server"),
    rc(811, c"CUDA_ERROR_CDP_NOT_SUPPORTED", c"the module is using CUDA Dynamic Parallelism, but the current configuration does not support it"),
    rc(812, c"CUDA_ERROR_CDP_VERSION_MISMATCH", c"the module uses a version of CUDA Dynamic Parallelism the driver does not support"),
    rc(900, c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", c"operation not permitted when stream is capturing"),
    rc(901, c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", c"operation failed due to a previous error during capture"),
    rc(902, c"CUDA_ERROR_STREAM_CAPTURE_MERGE", c"operation would result in a merge of separate capture sequences"),
    rc(903, c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", c"capture was not ended in the same stream as it began"),
    rc(904, c"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", c"capturing stream has unjoined work"),
    rc(905, c"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", c"dependency created on uncaptured work in another stream"),
    rc(906, c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", c"operation would make the legacy stream depend on a capturing blocking stream"),
    rc(907, c"CUDA_ERROR_CAPTURED_EVENT", c"operation not permitted on an event last recorded in a capturing stream"),
    rc(908, c"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", c"attempt to terminate a thread-local capture sequence from another thread"),
    rc(909, c"CUDA_ERROR_TIMEOUT", c"wait operation timed out"),
    rc(910, c"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", c"the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
    rc(911, c"CUDA_ERROR_EXTERNAL_DEVICE", c"an async error has occurred in external entity outside of CUDA"),
    rc(912, c"CUDA_ERROR_INVALID_CLUSTER_SIZE", c"a kernel launch error has occurred due to cluster misconfiguration"),
    rc(913, c"CUDA_ERROR_FUNCTION_NOT_LOADED", c"the function handle is not loaded when calling an API that requires a loaded function"),
    rc(914, c"CUDA_ERROR_INVALID_RESOURCE_TYPE", c"one or more resources passed in are not valid resource types for the operation"),
    rc(915, c"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", c"one or more resources are insufficient or non-applicable for the operation"),
    rc(916, c"CUDA_ERROR_KEY_ROTATION", c"an error happened during the key rotation sequence"),
    rc(999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

fn lookup(value: CUresult) -> Option<&'static ResultCode> {
    RESULT_CODES
        .binary_search_by_key(&value, |r| r.value)
        .ok()
        .map(|i| &RESULT_CODES[i])
}

/// Writes the string `pick` chooses for `error` to `out`; an unknown code gets NULL and
/// `CUDA_ERROR_INVALID_VALUE`, as the driver does.
///
/// # Safety
/// `out` must be null or valid for a write of a pointer.
unsafe fn describe(
    error: CUresult,
    out: *mut *const c_char,
    pick: fn(&ResultCode) -> &'static CStr,
) -> Result<(), CUresult> {
    if out.is_null() {
        return Err(code::INVALID_VALUE);
    }
    let found = lookup(error);
    let text = found.map_or(std::ptr::null(), |r| pick(r).as_ptr());
    // SAFETY: non-null, and the caller promises it is valid for a write of a pointer.
    unsafe { out.write(text) };
    found.map(|_| ()).ok_or(code::INVALID_VALUE)
}

cuda_entry! {
    fn cuGetErrorName(error: CUresult, p_str: *mut *const c_char) {
        // SAFETY: the driver API's contract: p_str is null or points to a `const char *`.
        unsafe { describe(error, p_str, |r| r.name) }
    }

    fn cuGetErrorString(error: CUresult, p_str: *mut *const c_char) {
        // SAFETY: as for cuGetErrorName.
        unsafe { describe(error, p_str, |r| r.text) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_and_unique() {
        assert!(RESULT_CODES.windows(2).all(|w| w[0].value < w[1].value));
    }

    fn name(value: CUresult) -> Option<&'static str> {
        lookup(value).and_then(|r| r.name.to_str().ok())
    }

    #[test]
    fn names_match_the_ffi_constants() {
        assert_eq!(name(code::SUCCESS), Some("CUDA_SUCCESS"));
        assert_eq!(name(code::OUT_OF_MEMORY), Some("CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(
            name(code::INVALID_CONTEXT),
            Some("CUDA_ERROR_INVALID_CONTEXT")
        );
        assert_eq!(name(code::NOT_FOUND), Some("CUDA_ERROR_NOT_FOUND"));
        assert_eq!(
            name(code::STREAM_CAPTURE_WRONG_THREAD),
            Some("CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD")
        );
        assert_eq!(name(code::UNKNOWN), Some("CUDA_ERROR_UNKNOWN"));
        assert!(RESULT_CODES
            .iter()
            .all(|r| r.name.to_bytes().starts_with(b"CUDA_")));
    }

    #[test]
    fn entry_points_write_the_strings() {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: p is a valid out-pointer.
        assert_eq!(unsafe { cuGetErrorString(2, &mut p) }, code::SUCCESS);
        // SAFETY: the driver wrote a pointer to a static NUL-terminated string.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"out of memory");
        // SAFETY: as above.
        assert_eq!(unsafe { cuGetErrorName(201, &mut p) }, code::SUCCESS);
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(p) }, c"CUDA_ERROR_INVALID_CONTEXT");
    }

    #[test]
    fn unknown_code_is_invalid_value_with_null() {
        let mut p: *const c_char = c"sentinel".as_ptr();
        // SAFETY: p is a valid out-pointer.
        let rc = unsafe { cuGetErrorName(12345, &mut p) };
        assert_eq!(rc, code::INVALID_VALUE);
        assert!(p.is_null());
        let mut p: *const c_char = c"sentinel".as_ptr();
        // SAFETY: as above.
        let rc = unsafe { cuGetErrorString(717_000, &mut p) };
        assert_eq!(rc, code::INVALID_VALUE);
        assert!(p.is_null());
        // SAFETY: a null out-pointer is allowed by the contract and refused.
        let rc = unsafe { cuGetErrorString(0, std::ptr::null_mut()) };
        assert_eq!(rc, code::INVALID_VALUE);
    }
}
