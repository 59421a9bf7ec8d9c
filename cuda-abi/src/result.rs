//! `CUresult`: every result code of the 12.8 driver, with its enumerator name and the
//! driver's one-line description, declared once in [`result_codes!`]; and [`CuResult`] /
//! [`CuError`], to handle a code as a `Result` at no cost (both are the bare `u32`).

use core::ffi::CStr;
use core::num::NonZeroU32;

/// The driver's result code, as the C ABI passes it.
pub type CUresult = u32;

/// One result code: its value, its enumerator name and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultCode {
    pub value: CUresult,
    pub name: &'static CStr,
    pub text: &'static CStr,
}

/// A string literal as a `&'static CStr`, at compile time.
macro_rules! cstr {
    ($s:expr) => {
        match CStr::from_bytes_with_nul(concat!($s, "\0").as_bytes()) {
            Ok(c) => c,
            Err(_) => panic!("a result code's text holds a NUL"),
        }
    };
}

/// Declares each code once: `value NAME "description";`, in increasing value. Makes the
/// constant `NAME` and the entry of [`RESULT_CODES`].
macro_rules! result_codes {
    ($( $value:literal $name:ident $text:literal; )*) => {
        $(
            #[doc = concat!("`", $text, "`.")]
            pub const $name: CUresult = $value;
        )*

        /// Every result code, sorted by value (checked when compiling), for lookups.
        pub static RESULT_CODES: &[ResultCode] = &[$(
            ResultCode { value: $value, name: cstr!(stringify!($name)), text: cstr!($text) },
        )*];

        const _: () = assert!(
            strictly_increasing(&[$($value),*]),
            "result codes must be listed once each, by value"
        );
    };
}

const fn strictly_increasing(values: &[CUresult]) -> bool {
    let mut i = 1;
    while i < values.len() {
        if values[i - 1] >= values[i] {
            return false;
        }
        i += 1;
    }
    true
}

result_codes! {
    0 CUDA_SUCCESS "no error";
    1 CUDA_ERROR_INVALID_VALUE "invalid argument";
    2 CUDA_ERROR_OUT_OF_MEMORY "out of memory";
    3 CUDA_ERROR_NOT_INITIALIZED "initialization error";
    4 CUDA_ERROR_DEINITIALIZED "driver shutting down";
    5 CUDA_ERROR_PROFILER_DISABLED "profiler disabled while using external profiling tool";
    6 CUDA_ERROR_PROFILER_NOT_INITIALIZED "profiler not initialized";
    7 CUDA_ERROR_PROFILER_ALREADY_STARTED "profiler already started";
    8 CUDA_ERROR_PROFILER_ALREADY_STOPPED "profiler already stopped";
    34 CUDA_ERROR_STUB_LIBRARY "CUDA driver is a stub library";
    46 CUDA_ERROR_DEVICE_UNAVAILABLE "CUDA-capable device(s) is/are busy or unavailable";
    100 CUDA_ERROR_NO_DEVICE "no CUDA-capable device is detected";
    101 CUDA_ERROR_INVALID_DEVICE "invalid device ordinal";
    102 CUDA_ERROR_DEVICE_NOT_LICENSED "device doesn't have valid Grid license";
    200 CUDA_ERROR_INVALID_IMAGE "device kernel image is invalid";
    201 CUDA_ERROR_INVALID_CONTEXT "invalid device context";
    202 CUDA_ERROR_CONTEXT_ALREADY_CURRENT "context already current";
    205 CUDA_ERROR_MAP_FAILED "mapping of buffer object failed";
    206 CUDA_ERROR_UNMAP_FAILED "unmapping of buffer object failed";
    207 CUDA_ERROR_ARRAY_IS_MAPPED "array is mapped";
    208 CUDA_ERROR_ALREADY_MAPPED "resource already mapped";
    209 CUDA_ERROR_NO_BINARY_FOR_GPU "no kernel image is available for execution on the device";
    210 CUDA_ERROR_ALREADY_ACQUIRED "resource already acquired";
    211 CUDA_ERROR_NOT_MAPPED "resource not mapped";
    212 CUDA_ERROR_NOT_MAPPED_AS_ARRAY "resource not mapped as array";
    213 CUDA_ERROR_NOT_MAPPED_AS_POINTER "resource not mapped as pointer";
    214 CUDA_ERROR_ECC_UNCORRECTABLE "uncorrectable ECC error encountered";
    215 CUDA_ERROR_UNSUPPORTED_LIMIT "limit is not supported on this architecture";
    216 CUDA_ERROR_CONTEXT_ALREADY_IN_USE "exclusive-thread device already in use by a different thread";
    217 CUDA_ERROR_PEER_ACCESS_UNSUPPORTED "peer access is not supported between these two devices";
    218 CUDA_ERROR_INVALID_PTX "a PTX JIT compilation failed";
    219 CUDA_ERROR_INVALID_GRAPHICS_CONTEXT "invalid OpenGL or DirectX context";
    220 CUDA_ERROR_NVLINK_UNCORRECTABLE "uncorrectable NVLink error detected during the execution";
    221 CUDA_ERROR_JIT_COMPILER_NOT_FOUND "PTX JIT compiler library not found";
    222 CUDA_ERROR_UNSUPPORTED_PTX_VERSION "the provided PTX was compiled with an unsupported toolchain";
    223 CUDA_ERROR_JIT_COMPILATION_DISABLED "PTX JIT compilation was disabled";
    224 CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY "the provided execution affinity is not supported";
    225 CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC "the provided PTX contains an unsupported call to device-side synchronization";
    226 CUDA_ERROR_CONTAINED "an exception was contained on the device";
    300 CUDA_ERROR_INVALID_SOURCE "device kernel image is invalid";
    301 CUDA_ERROR_FILE_NOT_FOUND "file not found";
    302 CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND "shared object symbol not found";
    303 CUDA_ERROR_SHARED_OBJECT_INIT_FAILED "shared object initialization failed";
    304 CUDA_ERROR_OPERATING_SYSTEM "OS call failed or operation not supported on this OS";
    400 CUDA_ERROR_INVALID_HANDLE "invalid resource handle";
    401 CUDA_ERROR_ILLEGAL_STATE "the operation cannot be performed in the present state";
    402 CUDA_ERROR_LOSSY_QUERY "attempted introspection would be semantically lossy";
    500 CUDA_ERROR_NOT_FOUND "named symbol not found";
    600 CUDA_ERROR_NOT_READY "device not ready";
    700 CUDA_ERROR_ILLEGAL_ADDRESS "an illegal memory access was encountered";
    701 CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES "too many resources requested for launch";
    702 CUDA_ERROR_LAUNCH_TIMEOUT "the launch timed out and was terminated";
    703 CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING "launch uses incompatible texturing mode";
    704 CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED "peer access is already enabled";
    705 CUDA_ERROR_PEER_ACCESS_NOT_ENABLED "peer access has not been enabled";
    708 CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE "cannot set while device is active in this process";
    709 CUDA_ERROR_CONTEXT_IS_DESTROYED "context is destroyed";
    710 CUDA_ERROR_ASSERT "device-side assert triggered";
    711 CUDA_ERROR_TOO_MANY_PEERS "peer mapping resources exhausted";
    712 CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED "part or all of the requested memory range is already mapped";
    713 CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED "pointer does not correspond to a registered memory region";
    714 CUDA_ERROR_HARDWARE_STACK_ERROR "hardware stack error";
    715 CUDA_ERROR_ILLEGAL_INSTRUCTION "an illegal instruction was encountered";
    716 CUDA_ERROR_MISALIGNED_ADDRESS "misaligned address";
    717 CUDA_ERROR_INVALID_ADDRESS_SPACE "operation not supported on global/shared address space";
    718 CUDA_ERROR_INVALID_PC "invalid program counter";
    719 CUDA_ERROR_LAUNCH_FAILED "unspecified launch failure";
    720 CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE "too many blocks in cooperative launch";
    721 CUDA_ERROR_TENSOR_MEMORY_LEAK "tensor memory not completely freed";
    800 CUDA_ERROR_NOT_PERMITTED "operation not permitted";
    801 CUDA_ERROR_NOT_SUPPORTED "operation not supported";
    802 CUDA_ERROR_SYSTEM_NOT_READY "system not yet initialized";
    803 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH "system has unsupported display driver / cuda driver combination";
    804 CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE "forward compatibility was attempted on non supported HW";
    805 CUDA_ERROR_MPS_CONNECTION_FAILED "MPS client failed to connect to the MPS control daemon or the MPS server";
    806 CUDA_ERROR_MPS_RPC_FAILURE "the remote procedural call between the MPS server and the MPS client failed";
    807 CUDA_ERROR_MPS_SERVER_NOT_READY "MPS server is not ready to accept new MPS client requests";
    808 CUDA_ERROR_MPS_MAX_CLIENTS_REACHED "the hardware resources required to create MPS client have been exhausted";
    809 CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED "the hardware resources required to support device connections have been exhausted";
    810 CUDA_ERROR_MPS_CLIENT_TERMINATED "the MPS client has been terminated by the server";
    811 CUDA_ERROR_CDP_NOT_SUPPORTED "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it";
    812 CUDA_ERROR_CDP_VERSION_MISMATCH "the module uses a version of CUDA Dynamic Parallelism the driver does not support";
    900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED "operation not permitted when stream is capturing";
    901 CUDA_ERROR_STREAM_CAPTURE_INVALIDATED "operation failed due to a previous error during capture";
    902 CUDA_ERROR_STREAM_CAPTURE_MERGE "operation would result in a merge of separate capture sequences";
    903 CUDA_ERROR_STREAM_CAPTURE_UNMATCHED "capture was not ended in the same stream as it began";
    904 CUDA_ERROR_STREAM_CAPTURE_UNJOINED "capturing stream has unjoined work";
    905 CUDA_ERROR_STREAM_CAPTURE_ISOLATION "dependency created on uncaptured work in another stream";
    906 CUDA_ERROR_STREAM_CAPTURE_IMPLICIT "operation would make the legacy stream depend on a capturing blocking stream";
    907 CUDA_ERROR_CAPTURED_EVENT "operation not permitted on an event last recorded in a capturing stream";
    908 CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD "attempt to terminate a thread-local capture sequence from another thread";
    909 CUDA_ERROR_TIMEOUT "wait operation timed out";
    910 CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    911 CUDA_ERROR_EXTERNAL_DEVICE "an async error has occurred in external entity outside of CUDA";
    912 CUDA_ERROR_INVALID_CLUSTER_SIZE "a kernel launch error has occurred due to cluster misconfiguration";
    913 CUDA_ERROR_FUNCTION_NOT_LOADED "the function handle is not loaded when calling an API that requires a loaded function";
    914 CUDA_ERROR_INVALID_RESOURCE_TYPE "one or more resources passed in are not valid resource types for the operation";
    915 CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION "one or more resources are insufficient or non-applicable for the operation";
    916 CUDA_ERROR_KEY_ROTATION "an error happened during the key rotation sequence";
    999 CUDA_ERROR_UNKNOWN "unknown error";
}

/// The result code `value`, if the driver has one.
pub fn lookup(value: CUresult) -> Option<&'static ResultCode> {
    RESULT_CODES
        .binary_search_by_key(&value, |r| r.value)
        .ok()
        .and_then(|i| RESULT_CODES.get(i))
}

/// A result code as a value to match on: `CuResult(rc).ok()?`. The same `u32` as
/// [`CUresult`] (`repr(transparent)`), so it costs nothing to wrap or unwrap.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CuResult(pub CUresult);

impl CuResult {
    /// `CUDA_SUCCESS`.
    pub const SUCCESS: CuResult = CuResult(CUDA_SUCCESS);

    /// `Ok` for `CUDA_SUCCESS`, else the error.
    #[inline(always)]
    pub const fn ok(self) -> Result<(), CuError> {
        match NonZeroU32::new(self.0) {
            None => Ok(()),
            Some(code) => Err(CuError(code)),
        }
    }

    /// Whether this is `CUDA_SUCCESS`.
    #[inline(always)]
    pub const fn is_success(self) -> bool {
        self.0 == CUDA_SUCCESS
    }

    /// The code's name and description, if the driver has this code.
    pub fn describe(self) -> Option<&'static ResultCode> {
        lookup(self.0)
    }
}

impl From<Result<(), CuError>> for CuResult {
    #[inline(always)]
    fn from(r: Result<(), CuError>) -> CuResult {
        match r {
            Ok(()) => CuResult::SUCCESS,
            Err(e) => CuResult(e.code()),
        }
    }
}

/// A result code other than `CUDA_SUCCESS` (never zero, so `Result<(), CuError>` is a bare
/// `u32` too).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CuError(NonZeroU32);

impl CuError {
    /// The error for `code`; `None` for `CUDA_SUCCESS`.
    #[inline(always)]
    pub const fn new(code: CUresult) -> Option<CuError> {
        match NonZeroU32::new(code) {
            Some(c) => Some(CuError(c)),
            None => None,
        }
    }

    /// The result code.
    #[inline(always)]
    pub const fn code(self) -> CUresult {
        self.0.get()
    }

    /// The code's name and description, if the driver has this code.
    pub fn describe(self) -> Option<&'static ResultCode> {
        lookup(self.code())
    }
}

impl core::fmt::Display for CuError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.describe() {
            Some(r) => write!(
                f,
                "{} ({})",
                r.name.to_str().unwrap_or("?"),
                r.text.to_str().unwrap_or("?")
            ),
            None => write!(f, "CUresult {}", self.code()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_constants() {
        let name = |v| lookup(v).and_then(|r| r.name.to_str().ok());
        assert_eq!(name(CUDA_SUCCESS), Some("CUDA_SUCCESS"));
        assert_eq!(
            name(CUDA_ERROR_OUT_OF_MEMORY),
            Some("CUDA_ERROR_OUT_OF_MEMORY")
        );
        assert_eq!(name(CUDA_ERROR_NOT_READY), Some("CUDA_ERROR_NOT_READY"));
        assert_eq!(name(CUDA_ERROR_UNKNOWN), Some("CUDA_ERROR_UNKNOWN"));
        assert_eq!(name(12345), None);
        assert!(RESULT_CODES
            .iter()
            .all(|r| r.name.to_bytes().starts_with(b"CUDA_")));
    }

    #[test]
    fn result_helpers() {
        assert_eq!(CuResult(CUDA_SUCCESS).ok(), Ok(()));
        let e = CuResult(CUDA_ERROR_NOT_READY).ok().unwrap_err();
        assert_eq!(e.code(), 600);
        assert_eq!(CuResult::from(Err::<(), _>(e)), CuResult(600));
        assert_eq!(CuError::new(0), None);
        assert_eq!(core::mem::size_of::<Result<(), CuError>>(), 4);
    }
}
