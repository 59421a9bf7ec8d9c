//! The CUDA driver API as applications reach it: `dlopen("libcuda.so.1")`, one `dlsym` for
//! `cuGetProcAddress_v2`, and every other entry point resolved through it by base name for the
//! ABI of CUDA 12.0 — the path the CUDA runtime takes, so a preloaded interposer sees what it
//! sees for real applications. The table is declared once in [`driver_api!`].

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt;
use std::sync::OnceLock;

use tessera_cuda_abi::proc_address::{
    CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
};
use tessera_cuda_abi::{entry, nvml};
pub use tessera_cuda_abi::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUmodule,
    CUresult, CUstream, CUDA_ERROR_NOT_READY, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};

/// `CU_STREAM_PER_THREAD`: the calling thread's per-thread default stream, a handle valid
/// for every entry point.
pub const CU_STREAM_PER_THREAD: CUstream = tessera_cuda_abi::CU_STREAM_PER_THREAD as CUstream;
/// `cuStreamCreate` flag: the stream does not synchronize with the legacy default stream.
pub const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `CUstreamCaptureMode`: relaxed capture (other threads' unsafe calls are not checked).
pub const CU_STREAM_CAPTURE_MODE_RELAXED: c_uint = 2;

/// `cuEventCreate` flags.
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 0x1;
pub const CU_EVENT_DISABLE_TIMING: c_uint = 0x2;

/// The CUDA version whose ABI the entry points are requested for (12.0).
pub const CUDA_VERSION: c_int = 12000;
/// Legacy default-stream semantics, as a program built without per-thread default streams
/// gets.
const PROC_ADDRESS_FLAGS: u64 = CU_GET_PROC_ADDRESS_DEFAULT;
/// What a program built with `--default-stream per-thread` gets (the `_ptsz` entry points).
const PROC_ADDRESS_PER_THREAD: u64 = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

type GetProcAddress = entry::cuGetProcAddress_v2::Pfn;

/// Why the driver could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// `dlopen` failed.
    Open(String),
    /// The library has no `cuGetProcAddress_v2` (a driver older than CUDA 12.0).
    NoProcAddress,
    /// An entry point was not resolved.
    Missing {
        /// The base name.
        symbol: &'static str,
        /// What `cuGetProcAddress_v2` returned.
        result: CUresult,
        /// Its `CUdriverProcAddressQueryResult`.
        status: c_int,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Open(why) => write!(f, "cannot load libcuda.so.1: {why}; is the NVIDIA driver (or simgpu's lib-dir) on LD_LIBRARY_PATH?"),
            LoadError::NoProcAddress => write!(f, "libcuda.so.1 has no cuGetProcAddress_v2; a driver for CUDA 12.0 or newer is needed"),
            LoadError::Missing { symbol, result, status } => write!(
                f,
                "cuGetProcAddress_v2 did not resolve {symbol} for CUDA {CUDA_VERSION} (result {result}, symbol status {status})"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// A driver call that failed, with the driver's name and description of the code.
#[derive(Debug, Clone)]
pub struct DriverError {
    /// The entry point, by base name.
    pub call: &'static str,
    /// The result code.
    pub code: CUresult,
    /// `cuGetErrorName`'s answer.
    pub name: String,
    /// `cuGetErrorString`'s answer.
    pub text: String,
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {} ({})", self.call, self.name, self.text)
    }
}

impl std::error::Error for DriverError {}

/// Declares the entry points the workloads call, each by the symbol a program built for
/// [`CUDA_VERSION`] gets: a typed field of that name, of the ABI crate's signature, resolved
/// by the ABI crate's base name of the symbol.
macro_rules! driver_api {
    ($( $name:ident, )*) => {
        /// The resolved entry points.
        #[allow(non_snake_case)]
        pub struct Api {
            $( pub $name: entry::$name::Pfn, )*
        }

        impl Api {
            /// Resolves every entry point through `cuGetProcAddress_v2`.
            ///
            /// # Safety
            /// `get` must be the driver's `cuGetProcAddress_v2`.
            unsafe fn resolve(get: GetProcAddress) -> Result<Api, LoadError> {
                Ok(Api {
                    $( $name: {
                        let base = entry::$name::KEY.base;
                        // SAFETY: the caller passes the real cuGetProcAddress_v2.
                        let pfn = unsafe { proc_address(get, base, PROC_ADDRESS_FLAGS)? };
                        // SAFETY: the driver returns the entry point for this base name at
                        // CUDA_VERSION, which is this symbol (tested below), of this signature.
                        unsafe { std::mem::transmute::<*mut c_void, entry::$name::Pfn>(pfn) }
                    }, )*
                })
            }
        }

        /// The symbols of [`Api`], for the test that each is what its base name resolves to.
        #[cfg(test)]
        const API_SYMBOLS: &[&tessera_cuda_abi::ProcKey] = &[$( &entry::$name::KEY, )*];
    };
}

driver_api! {
    cuGetErrorName,
    cuGetErrorString,
    cuInit,
    cuDriverGetVersion,
    cuDeviceGetCount,
    cuDeviceGet,
    cuDeviceGetName,
    cuDeviceTotalMem_v2,
    cuDevicePrimaryCtxRetain,
    cuDevicePrimaryCtxRelease_v2,
    cuCtxSetCurrent,
    cuCtxSynchronize,
    cuMemGetInfo_v2,
    cuMemAlloc_v2,
    cuMemFree_v2,
    cuMemcpyHtoD_v2,
    cuMemcpyDtoH_v2,
    cuModuleLoadData,
    cuModuleUnload,
    cuModuleGetFunction,
    cuLaunchKernel,
    cuStreamCreate,
    cuStreamDestroy_v2,
    cuStreamSynchronize,
    cuStreamBeginCapture_v2,
    cuStreamEndCapture,
    cuGraphInstantiateWithFlags,
    cuGraphLaunch,
    cuGraphExecDestroy,
    cuGraphDestroy,
    cuEventCreate,
    cuEventDestroy_v2,
    cuEventRecord,
    cuEventQuery,
    cuEventSynchronize,
    cuEventElapsedTime,
}

/// Resolves one base name.
///
/// # Safety
/// `get` must be the driver's `cuGetProcAddress_v2`.
unsafe fn proc_address(
    get: GetProcAddress,
    symbol: &'static str,
    flags: u64,
) -> Result<*mut c_void, LoadError> {
    let name = CString::new(symbol).expect("entry point names have no NUL");
    let mut pfn: *mut c_void = std::ptr::null_mut();
    let mut status: c_int = -1;
    // SAFETY: `name` is a C string and both out-pointers are valid locals.
    let result = unsafe { get(name.as_ptr(), &mut pfn, CUDA_VERSION, flags, &mut status) };
    if result != CUDA_SUCCESS || pfn.is_null() {
        return Err(LoadError::Missing {
            symbol,
            result,
            status,
        });
    }
    Ok(pfn)
}

/// The loaded driver. The library stays loaded for the life of the process.
pub struct Driver {
    api: Api,
    per_thread: PerThread,
}

/// `cuLaunchKernel`'s C signature (and its `_ptsz` twin's).
pub type LaunchKernel = entry::cuLaunchKernel::Pfn;

/// The entry points a program built for per-thread default streams gets: with them the null
/// stream is the calling thread's own default stream.
#[allow(non_snake_case)]
pub struct PerThread {
    /// `cuLaunchKernel_ptsz`.
    pub cuLaunchKernel: LaunchKernel,
}

impl Driver {
    /// Loads `libcuda.so.1` once per process.
    pub fn get() -> Result<&'static Driver, &'static LoadError> {
        static DRIVER: OnceLock<Result<Driver, LoadError>> = OnceLock::new();
        // A failed load is reported, never retried.
        DRIVER.get_or_init(Driver::load).as_ref()
    }

    fn load() -> Result<Driver, LoadError> {
        // SAFETY: the name is a C string literal; dlopen has no other precondition.
        let lib =
            unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err(LoadError::Open(dl_error()));
        }
        // SAFETY: `lib` is a live handle from dlopen, the name a C string literal.
        let get = unsafe { libc::dlsym(lib, c"cuGetProcAddress_v2".as_ptr()) };
        if get.is_null() {
            return Err(LoadError::NoProcAddress);
        }
        // SAFETY: the driver exports cuGetProcAddress_v2 with the GetProcAddress signature.
        let get = unsafe { std::mem::transmute::<*mut c_void, GetProcAddress>(get) };
        // SAFETY: `get` is the driver's cuGetProcAddress_v2.
        let api = unsafe { Api::resolve(get)? };
        let base = entry::cuLaunchKernel_ptsz::KEY.base;
        // SAFETY: `get` is the driver's cuGetProcAddress_v2.
        let pfn = unsafe { proc_address(get, base, PROC_ADDRESS_PER_THREAD)? };
        // SAFETY: the driver answers the per-thread flavour, cuLaunchKernel_ptsz (tested
        // below), of this signature.
        let launch =
            unsafe { std::mem::transmute::<*mut c_void, entry::cuLaunchKernel_ptsz::Pfn>(pfn) };
        let per_thread = PerThread {
            cuLaunchKernel: launch,
        };
        Ok(Driver { api, per_thread })
    }

    /// The entry points, for calls this module has no wrapper for.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The per-thread default stream's entry points.
    pub fn per_thread(&self) -> &PerThread {
        &self.per_thread
    }

    /// Turns a result code into `Ok` or a [`DriverError`] naming `call`.
    pub fn check(&self, call: &'static str, code: CUresult) -> Result<(), DriverError> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        Err(DriverError {
            call,
            code,
            name: self
                .describe(self.api.cuGetErrorName, code)
                .unwrap_or_else(|| format!("CUresult {code}")),
            text: self
                .describe(self.api.cuGetErrorString, code)
                .unwrap_or_else(|| "no description".to_string()),
        })
    }

    fn describe(&self, lookup: entry::cuGetErrorName::Pfn, code: CUresult) -> Option<String> {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `text` is a valid out-pointer; the driver writes a static string or fails.
        let r = unsafe { lookup(code, &mut text) };
        if r != CUDA_SUCCESS || text.is_null() {
            return None;
        }
        // SAFETY: on success the driver points `text` at a NUL-terminated static string.
        Some(
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

fn dl_error() -> String {
    // SAFETY: dlerror has no preconditions; it returns null or a C string valid until the
    // next dl call on this thread, copied out at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown dlopen error".to_string();
    }
    // SAFETY: non-null, a C string as above.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// NVML (`libnvidia-ml.so.1`), for what the driver API does not tell: the driver's version
/// string and the device memory each process holds. Loaded on demand; nothing else of the
/// benchmarks needs it.
pub struct Nvml {
    get_handle: unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_uint,
    driver_version: unsafe extern "C" fn(*mut c_char, c_uint) -> c_uint,
    processes: unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut c_void) -> c_uint,
}

/// The nominal size of a `_v3` entry (`nvmlProcessInfo_t`: pid, memory, two instance ids).
const NOMINAL_ENTRY: usize = 24;
/// The largest entry [`Nvml::process_memory`] makes room for.
const MAX_ENTRY: usize = 64;
/// What the list's buffer holds before NVML writes: no field NVML writes is this pattern.
const PATTERN: u8 = 0xA5;

/// The size of the `count` entries NVML wrote into `buffer`: the span up to the last byte it
/// changed, over `count`, in whole 8-byte words, at least the nominal size.
fn entry_size(buffer: &[u8], count: usize) -> usize {
    if count == 0 {
        return NOMINAL_ENTRY;
    }
    let written = buffer
        .iter()
        .rposition(|&b| b != PATTERN)
        .map_or(0, |i| i + 1);
    (written.div_ceil(count).div_ceil(8) * 8).clamp(NOMINAL_ENTRY, MAX_ENTRY)
}

/// Why NVML could not answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NvmlError {
    /// `libnvidia-ml.so.1` did not load (no driver, or not on the library path).
    #[error("cannot load libnvidia-ml.so.1: {0}")]
    Load(String),
    /// The library lacks an entry point this program uses.
    #[error("libnvidia-ml.so.1 has no {0}")]
    Missing(String),
    /// A call returned an error.
    #[error("{call} failed (nvmlReturn_t {code})")]
    Call {
        /// The call, with its device index where it has one.
        call: String,
        /// NVML's `nvmlReturn_t`.
        code: c_uint,
    },
}

impl Nvml {
    /// Loads `libnvidia-ml.so.1` and initializes it.
    pub fn open() -> Result<Nvml, NvmlError> {
        // SAFETY: the name is a C string literal; dlopen has no other precondition.
        let lib = unsafe {
            libc::dlopen(
                c"libnvidia-ml.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            )
        };
        if lib.is_null() {
            return Err(NvmlError::Load(dl_error()));
        }
        let symbol = |name: &CStr| {
            // SAFETY: `lib` is a live handle from dlopen, `name` a C string.
            let f = unsafe { libc::dlsym(lib, name.as_ptr()) };
            if f.is_null() {
                Err(NvmlError::Missing(name.to_string_lossy().into_owned()))
            } else {
                Ok(f)
            }
        };
        let init = symbol(c"nvmlInit_v2")?;
        // SAFETY: each symbol is the NVML entry point of that name, whose C signature is the
        // one it is transmuted to.
        let nvml = unsafe {
            let init = std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_uint>(init);
            let r = init();
            if r != 0 {
                return Err(NvmlError::Call {
                    call: "nvmlInit_v2".into(),
                    code: r,
                });
            }
            Nvml {
                get_handle: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_uint,
                >(symbol(c"nvmlDeviceGetHandleByIndex_v2")?),
                driver_version: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut c_char, c_uint) -> c_uint,
                >(symbol(c"nvmlSystemGetDriverVersion")?),
                processes: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut c_void) -> c_uint,
                >(symbol(c"nvmlDeviceGetComputeRunningProcesses_v3")?),
            }
        };
        // The library stays loaded for the life of the process, as the driver does.
        Ok(nvml)
    }

    /// The driver's version, like `550.54.15`.
    pub fn driver_version(&self) -> Result<String, NvmlError> {
        let mut buf = [0 as c_char; 96];
        // SAFETY: `buf` holds the length passed.
        let r = unsafe { (self.driver_version)(buf.as_mut_ptr(), buf.len() as c_uint - 1) };
        if r != 0 {
            return Err(NvmlError::Call {
                call: "nvmlSystemGetDriverVersion".into(),
                code: r,
            });
        }
        // SAFETY: NVML NUL-terminates within the length given; the last byte stays 0.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// `(pid, bytes)` of each process with a compute context on device `index`, by pid;
    /// processes whose memory NVML does not show are left out. The entries are read at the
    /// size NVML writes them, whatever the header says (32 bytes from the 535 drivers' `_v3`,
    /// 24 from later ones): the buffer has room for entries of [`MAX_ENTRY`] bytes and is
    /// filled with [`PATTERN`] first, and the entry size is the span NVML wrote divided by
    /// the number of entries (as libtessera reads the list).
    pub fn process_memory(&self, index: u32) -> Result<Vec<(u32, u64)>, NvmlError> {
        let mut device: *mut c_void = std::ptr::null_mut();
        // SAFETY: `device` is a valid out-pointer.
        let r = unsafe { (self.get_handle)(index, &mut device) };
        if r != 0 {
            return Err(NvmlError::Call {
                call: format!("nvmlDeviceGetHandleByIndex_v2({index})"),
                code: r,
            });
        }
        let mut room = 64usize;
        loop {
            let mut bytes = vec![PATTERN; room * MAX_ENTRY];
            let mut count = room as c_uint;
            // SAFETY: `bytes` holds `room` entries of up to MAX_ENTRY bytes, more than NVML
            // writes for `room` entries; `device` is a handle NVML gave.
            let r = unsafe { (self.processes)(device, &mut count, bytes.as_mut_ptr().cast()) };
            if r == nvml::code::INSUFFICIENT_SIZE && (count as usize) > room {
                room = count as usize + 16;
                continue;
            }
            if r != 0 {
                return Err(NvmlError::Call {
                    call: "nvmlDeviceGetComputeRunningProcesses_v3".into(),
                    code: r,
                });
            }
            let count = (count as usize).min(room);
            let mut out: Vec<(u32, u64)> = bytes
                .chunks_exact(entry_size(&bytes, count))
                .take(count)
                .map(|e| {
                    let pid = u32::from_ne_bytes(e[0..4].try_into().expect("4 bytes"));
                    let used = u64::from_ne_bytes(e[8..16].try_into().expect("8 bytes"));
                    (pid, used)
                })
                .filter(|&(_, used)| used != nvml::VALUE_NOT_AVAILABLE)
                .collect();
            out.sort_unstable();
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_symbols_are_what_their_base_names_resolve_to() {
        for key in API_SYMBOLS
            .iter()
            .copied()
            .chain([&entry::cuLaunchKernel_ptsz::KEY])
        {
            let got = tessera_cuda_abi::proc_address::resolve(
                key.base.as_bytes(),
                CUDA_VERSION as u32,
                key.per_thread,
            )
            .map(|e| e.key);
            assert_eq!(got, Ok(*key), "{} at CUDA {CUDA_VERSION}", key.base);
        }
    }

    #[test]
    fn process_entries_are_read_at_the_size_nvml_wrote() {
        for size in [24, 32] {
            let mut buf = vec![PATTERN; 4 * MAX_ENTRY];
            for (i, pid) in [7u32, 9].iter().enumerate() {
                let e = &mut buf[i * size..(i + 1) * size];
                e[0..4].copy_from_slice(&pid.to_ne_bytes());
                e[8..16].copy_from_slice(&100u64.to_ne_bytes());
                e[16..24].fill(0xff);
                e[24..].fill(0);
            }
            assert_eq!(entry_size(&buf, 2), size);
        }
        assert_eq!(entry_size(&[PATTERN; 64], 0), NOMINAL_ENTRY);
    }
}
