//! The C ABI as simgpu implements it: the driver's types and result codes (the ABI crate's,
//! re-exported), and the macro that declares each export once.

pub use tessera_cuda_abi::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream,
    CU_STREAM_LEGACY, CU_STREAM_PER_THREAD,
};

/// Result codes: the ABI crate's `CUDA_SUCCESS` and `CUDA_ERROR_*`.
pub use tessera_cuda_abi::result as code;

/// What a driver entry's body returns: `Ok` becomes `CUDA_SUCCESS`.
pub type DriverResult = Result<(), CUresult>;

/// Runs an entry's body, turning a panic into `CUDA_ERROR_UNKNOWN` so that no unwind crosses
/// into the caller's C frames.
pub fn guard(body: impl FnOnce() -> DriverResult) -> CUresult {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => code::CUDA_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => code::CUDA_ERROR_UNKNOWN,
    }
}

/// When set to a file name, every call of an entry point is appended to that file as a line
/// `<pid> <thread> <name> <result>`: the record of what a library (cuBLAS, a CUDA runtime)
/// asks of the driver and what it was answered, to find the call it stops at.
const ENV_TRACE_CALLS: &str = "SIMGPU_TRACE_CALLS";

/// An entry point's host cost under the node's profile, learnt at its first call after
/// `cuInit`: for a success (and any error) and for `CUDA_ERROR_NOT_READY`, in ns.
pub struct HostCost {
    done: std::sync::atomic::AtomicU32,
    not_ready: std::sync::atomic::AtomicU32,
}

impl HostCost {
    /// Not learnt yet.
    pub const UNKNOWN: u32 = u32::MAX;

    #[allow(clippy::new_without_default)] // a `const fn` for the entries' statics
    pub const fn new() -> HostCost {
        HostCost {
            done: std::sync::atomic::AtomicU32::new(Self::UNKNOWN),
            not_ready: std::sync::atomic::AtomicU32::new(Self::UNKNOWN),
        }
    }

    /// What the call of `name` that returned `result` costs.
    fn of(&self, costs: &simgpu::profile::HostCosts, name: &str, result: CUresult) -> u32 {
        use std::sync::atomic::Ordering::Relaxed;
        let slot = if result == code::CUDA_ERROR_NOT_READY {
            &self.not_ready
        } else {
            &self.done
        };
        // Relaxed (both): a cache of a pure function of the name; racing writers store the
        // same value.
        match slot.load(Relaxed) {
            Self::UNKNOWN => {
                let ns = costs.of(name, result);
                slot.store(ns, Relaxed);
                ns
            }
            ns => ns,
        }
    }
}

/// Runs an exported entry point's body under [`guard`], taking at least the host cost the
/// node's profile gives the call (see `simgpu::profile`: a real driver's calls cost the CPU
/// microseconds, simgpu's a fraction of that), and records the call when
/// `SIMGPU_TRACE_CALLS` names a file.
pub fn entry(name: &str, cost: &HostCost, body: impl FnOnce() -> DriverResult) -> CUresult {
    static FILE: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    let start = simgpu::clock::now_ns();
    let result = guard(body);
    if let Some(costs) = crate::init::host_costs() {
        let until = start + u64::from(cost.of(costs, name, result));
        while simgpu::clock::now_ns() < until {
            std::hint::spin_loop();
        }
    }
    let file = FILE.get_or_init(|| {
        let path = std::env::var_os(ENV_TRACE_CALLS).filter(|p| !p.is_empty())?;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    });
    if let Some(mut file) = file.as_ref() {
        let line = format!(
            "{} {:?} {name} {result}\n",
            std::process::id(),
            std::thread::current().id()
        );
        // One write of one short line to a file opened for appending: lines of concurrent
        // callers do not interleave. A trace that cannot be written is not the caller's error.
        let _ = std::io::Write::write_all(&mut file, line.as_bytes());
    }
    result
}

/// Writes `value` through an out-pointer, or fails with `CUDA_ERROR_INVALID_VALUE` when the
/// caller passed null, as the driver does.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub unsafe fn write_out<T>(out: *mut T, value: T) -> DriverResult {
    if out.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and the caller promises it is valid for a write of T.
    unsafe { out.write(value) };
    Ok(())
}

/// Declares driver entry points, each once: the exported `extern "C"` function whose body is
/// a block returning [`DriverResult`], run under [`entry`]. The name must be an entry point of
/// the ABI crate, and where the crate declares its C signature the export must have exactly
/// that one (both checked when compiling).
///
/// ```ignore
/// cuda_entry! {
///     fn cuDriverGetVersion(version: *mut i32) {
///         unsafe { write_out(version, 12080) }
///     }
/// }
/// ```
#[macro_export]
macro_rules! cuda_entry {
    ($( $(#[$meta:meta])* fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {
        $(
            $(#[$meta])*
            /// # Safety
            /// Called from C with the driver API's contract for this entry point.
            #[no_mangle]
            #[allow(non_snake_case, clippy::missing_safety_doc)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::ffi::CUresult {
                static COST: $crate::ffi::HostCost = $crate::ffi::HostCost::new();
                $crate::ffi::entry(stringify!($name), &COST, || $body)
            }

            const _: () = ::tessera_cuda_abi::entry::assert_signature::<
                ::tessera_cuda_abi::entry::$name::Declared,
                unsafe extern "C" fn($($ty),*) -> $crate::ffi::CUresult,
            >();
        )*
    };
}
