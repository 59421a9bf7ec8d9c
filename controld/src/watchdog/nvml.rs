//! NVML, loaded at run time: the few queries the watchdog makes, declared here from NVML's
//! documented C API (never from its header), so that `controld` builds and runs on machines
//! without NVIDIA's driver.

use std::ffi::{c_char, c_uint, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;

/// The library's name as the driver installs it.
pub const LIBRARY: &str = "libnvidia-ml.so.1";

/// `nvmlReturn_t`.
type NvmlReturn = c_uint;
/// `nvmlDevice_t`: an opaque handle, valid until `nvmlShutdown`.
type Device = *mut c_void;

const SUCCESS: NvmlReturn = 0;
const INSUFFICIENT_SIZE: NvmlReturn = 7;
/// `NVML_ERROR_NOT_FOUND`: for process utilization, no sample newer than the one asked from.
const NOT_FOUND: NvmlReturn = 6;
/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE` and `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
const NAME_BUFFER: usize = 96;
const UUID_BUFFER: usize = 96;
/// `NVML_VALUE_NOT_AVAILABLE`: NVML's "unknown" for a process's memory (e.g. without the
/// rights to see it).
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// `nvmlMemory_t`, in bytes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlUtilization_t`, in percent.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlProcessInfo_v2_t`, which `_v3_t` repeats: what `…GetComputeRunningProcesses_v2`
/// and `_v3` fill.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// `nvmlDeviceAttributes_t`: the SM count first, then shared-engine and MIG slice counts and
/// the memory in MiB.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct Attributes {
    multiprocessor_count: c_uint,
    shared_counts: [c_uint; 7],
    memory_size_mb: u64,
}

/// `nvmlProcessUtilizationSample_t`: one process's use of the engines over a sample
/// period, in percent, stamped in µs.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProcessUtilizationSample {
    pid: c_uint,
    time_stamp: u64,
    sm_util: c_uint,
    mem_util: c_uint,
    enc_util: c_uint,
    dec_util: c_uint,
}

const _: () = {
    assert!(std::mem::size_of::<ProcessUtilizationSample>() == 32);
    assert!(std::mem::offset_of!(ProcessUtilizationSample, time_stamp) == 8);
    assert!(std::mem::offset_of!(ProcessUtilizationSample, sm_util) == 16);
    assert!(std::mem::size_of::<Attributes>() == 40);
    assert!(std::mem::size_of::<Memory>() == 24);
    assert!(std::mem::size_of::<Utilization>() == 8);
    assert!(std::mem::size_of::<ProcessInfo>() == 24);
    assert!(std::mem::offset_of!(ProcessInfo, used_gpu_memory) == 8);
    assert!(std::mem::offset_of!(ProcessInfo, gpu_instance_id) == 16);
};

type InitFn = unsafe extern "C" fn() -> NvmlReturn;
type CountFn = unsafe extern "C" fn(*mut c_uint) -> NvmlReturn;
type HandleFn = unsafe extern "C" fn(c_uint, *mut Device) -> NvmlReturn;
type TextFn = unsafe extern "C" fn(Device, *mut c_char, c_uint) -> NvmlReturn;
type MemoryFn = unsafe extern "C" fn(Device, *mut Memory) -> NvmlReturn;
type UtilizationFn = unsafe extern "C" fn(Device, *mut Utilization) -> NvmlReturn;
type ProcessesFn = unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> NvmlReturn;
type ErrorStringFn = unsafe extern "C" fn(NvmlReturn) -> *const c_char;
type AttributesFn = unsafe extern "C" fn(Device, *mut Attributes) -> NvmlReturn;
type ProcessUtilizationFn =
    unsafe extern "C" fn(Device, *mut ProcessUtilizationSample, *mut c_uint, u64) -> NvmlReturn;

/// Why NVML cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    /// The library did not load.
    #[error("cannot load {0}: {1} (no NVIDIA driver on this node?)")]
    Load(String, String),
    /// The library lacks an entry point.
    #[error("{0} has no {1}: the driver is too old")]
    Symbol(String, &'static str),
    /// A call failed.
    #[error("{0} failed: {1}")]
    Call(&'static str, String),
}

/// A GPU as NVML describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    /// NVML index.
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Device memory, in bytes.
    pub memory_total: u64,
    /// Device memory in use by everyone, in bytes.
    pub memory_used: u64,
    /// Engine utilization in percent, when the device reports it.
    pub utilization_percent: Option<f64>,
    /// The compute processes on the device: host pid and the memory it holds, when NVML
    /// can tell.
    pub processes: Vec<(u32, Option<u64>)>,
}

/// NVML, initialised: loaded with `dlopen`, shut down (never unloaded) on drop.
pub struct Nvml {
    library: String,
    count: CountFn,
    handle: HandleFn,
    name: TextFn,
    uuid: TextFn,
    memory: MemoryFn,
    utilization: UtilizationFn,
    processes: ProcessesFn,
    shutdown: InitFn,
    error_string: Option<ErrorStringFn>,
    /// Absent from old drivers.
    attributes: Option<AttributesFn>,
    /// Absent from old drivers.
    process_utilization: Option<ProcessUtilizationFn>,
}

/// What each process used of a GPU's engine since an earlier sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineUse {
    /// Host pid and its share of the engine (0 to 1), averaged over its samples.
    pub processes: Vec<(u32, f64)>,
    /// The newest sample's stamp (µs), to ask from next time.
    pub latest_us: u64,
}

// SAFETY: NVML is documented thread-safe; `Nvml` holds only function pointers into a library
// that is never unloaded.
unsafe impl Send for Nvml {}
// SAFETY: as above: every call may come from any thread, concurrently.
unsafe impl Sync for Nvml {}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml")
            .field("library", &self.library)
            .finish_non_exhaustive()
    }
}

/// The last `dlerror` message.
fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string owned by libc, valid until the
    // next dl* call on this thread; it is copied at once.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "unknown error".to_string();
    }
    // SAFETY: non-null and NUL-terminated, as above.
    unsafe { CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned()
}

/// Looks `name` up in `handle` as a function of type `F`.
///
/// # Safety
/// `handle` must come from `dlopen`, and `F` must be a function pointer type matching the
/// symbol's C prototype.
unsafe fn symbol<F: Copy>(
    handle: *mut c_void,
    library: &str,
    name: &'static CStr,
) -> Result<F, NvmlError> {
    // SAFETY: a live handle (the caller's promise) and a NUL-terminated name.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if address.is_null() {
        return Err(NvmlError::Symbol(
            library.to_string(),
            name.to_str().unwrap_or("?"),
        ));
    }
    debug_assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: `F` is a function pointer type of the symbol's prototype (the caller's
    // promise), the same size as the non-null address.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

impl Nvml {
    /// Loads `library` (a name the dynamic loader searches for, or a path) and initialises
    /// NVML.
    pub fn load(library: &OsStr) -> Result<Nvml, NvmlError> {
        let shown = library.to_string_lossy().into_owned();
        let c_library = CString::new(library.as_bytes())
            .map_err(|_| NvmlError::Load(shown.clone(), "a NUL in the name".to_string()))?;
        let flags = libc::RTLD_NOW | libc::RTLD_LOCAL;
        // SAFETY: a NUL-terminated name. The library is never closed: NVML keeps threads and
        // state that must not lose their code.
        let handle = unsafe { libc::dlopen(c_library.as_ptr(), flags) };
        if handle.is_null() {
            return Err(NvmlError::Load(shown, dl_error()));
        }
        let lib = shown.as_str();
        // Each entry's type is the field's (or the binding's) function pointer type.
        macro_rules! entry {
            ($name:literal) => {
                // SAFETY: a live handle, and every field's type is the entry's documented C
                // prototype.
                unsafe { symbol(handle, lib, $name) }
            };
        }
        let init: InitFn = entry!(c"nvmlInit_v2")?;
        // `_v2` fills the same layout as `_v3`, on drivers from before `_v3`.
        let processes = entry!(c"nvmlDeviceGetComputeRunningProcesses_v3")
            .or_else(|_| entry!(c"nvmlDeviceGetComputeRunningProcesses_v2"))?;
        let nvml = Nvml {
            library: shown.clone(),
            count: entry!(c"nvmlDeviceGetCount_v2")?,
            handle: entry!(c"nvmlDeviceGetHandleByIndex_v2")?,
            name: entry!(c"nvmlDeviceGetName")?,
            uuid: entry!(c"nvmlDeviceGetUUID")?,
            memory: entry!(c"nvmlDeviceGetMemoryInfo")?,
            utilization: entry!(c"nvmlDeviceGetUtilizationRates")?,
            processes,
            shutdown: entry!(c"nvmlShutdown")?,
            error_string: entry!(c"nvmlErrorString").ok(),
            attributes: entry!(c"nvmlDeviceGetAttributes_v2").ok(),
            process_utilization: entry!(c"nvmlDeviceGetProcessUtilization").ok(),
        };
        // SAFETY: no arguments; NVML counts inits, each matched by the shutdown in `drop`.
        let rc = unsafe { init() };
        if rc != SUCCESS {
            return Err(NvmlError::Call("nvmlInit_v2", nvml.describe(rc)));
        }
        Ok(nvml)
    }

    /// NVML's words for a result code.
    fn describe(&self, rc: NvmlReturn) -> String {
        if let Some(error_string) = self.error_string {
            // SAFETY: any code is accepted; the result is null or a static NUL-terminated
            // string.
            let text = unsafe { error_string(rc) };
            if !text.is_null() {
                // SAFETY: non-null, static and NUL-terminated, as above.
                let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
                return format!("{text} (NVML error {rc})");
            }
        }
        format!("NVML error {rc}")
    }

    fn check(&self, what: &'static str, rc: NvmlReturn) -> Result<(), NvmlError> {
        if rc == SUCCESS {
            Ok(())
        } else {
            Err(NvmlError::Call(what, self.describe(rc)))
        }
    }

    /// Every GPU with its figures and processes.
    pub fn sample(&self) -> Result<Vec<GpuSample>, NvmlError> {
        let mut count: c_uint = 0;
        // SAFETY: a valid out-pointer.
        self.check("nvmlDeviceGetCount_v2", unsafe { (self.count)(&mut count) })?;
        (0..count).map(|index| self.device(index)).collect()
    }

    /// Whether GPU `index` answers: its handle and memory query succeed. A lost GPU (fallen
    /// off the bus, needing a reset) fails here with NVML's reason.
    pub fn check_device(&self, index: u32) -> Result<(), NvmlError> {
        let mut device: Device = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; an index past the count is refused by NVML.
        let rc = unsafe { (self.handle)(index, &mut device) };
        self.check("nvmlDeviceGetHandleByIndex_v2", rc)?;
        let mut memory = Memory::default();
        // SAFETY: a handle NVML gave and a valid out-pointer.
        let rc = unsafe { (self.memory)(device, &mut memory) };
        self.check("nvmlDeviceGetMemoryInfo", rc)
    }

    /// The streaming multiprocessors of GPU `index`, where the driver tells.
    pub fn sms(&self, index: u32) -> Option<u32> {
        let attributes = self.attributes?;
        let mut device: Device = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; an index past the count is refused by NVML.
        if unsafe { (self.handle)(index, &mut device) } != SUCCESS {
            return None;
        }
        let mut a = Attributes::default();
        // SAFETY: a handle NVML gave and a valid out-pointer to an nvmlDeviceAttributes_t.
        let rc = unsafe { attributes(device, &mut a) };
        (rc == SUCCESS && a.multiprocessor_count > 0).then_some(a.multiprocessor_count)
    }

    /// What each process used of GPU `index`'s engine in the samples newer than `since_us`
    /// (0: all the driver keeps); `None` where the driver cannot tell.
    pub fn engine_use(&self, index: u32, since_us: u64) -> Option<EngineUse> {
        let query = self.process_utilization?;
        let mut device: Device = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; an index past the count is refused by NVML.
        if unsafe { (self.handle)(index, &mut device) } != SUCCESS {
            return None;
        }
        let mut room: c_uint = 0;
        for _ in 0..4 {
            let mut samples = vec![ProcessUtilizationSample::default(); room as usize];
            let mut count = room;
            let buffer = if samples.is_empty() {
                std::ptr::null_mut()
            } else {
                samples.as_mut_ptr()
            };
            // SAFETY: a handle NVML gave; `count` says how many entries `buffer` holds (none
            // with a null buffer, which asks for the count).
            let rc = unsafe { query(device, buffer, &mut count, since_us) };
            match rc {
                SUCCESS => {
                    samples.truncate(count.min(room) as usize);
                    return Some(engine_use(&samples, since_us));
                }
                NOT_FOUND => {
                    return Some(EngineUse {
                        processes: Vec::new(),
                        latest_us: since_us,
                    })
                }
                INSUFFICIENT_SIZE => room = count.saturating_add(8),
                _ => return None,
            }
        }
        None
    }

    fn device(&self, index: u32) -> Result<GpuSample, NvmlError> {
        let mut device: Device = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; `index` below the count NVML gave.
        let rc = unsafe { (self.handle)(index, &mut device) };
        self.check("nvmlDeviceGetHandleByIndex_v2", rc)?;
        let mut memory = Memory::default();
        // SAFETY: a handle NVML gave and a valid out-pointer.
        let rc = unsafe { (self.memory)(device, &mut memory) };
        self.check("nvmlDeviceGetMemoryInfo", rc)?;
        let mut utilization = Utilization::default();
        // SAFETY: as above. Devices that do not sample utilization say so: `None`.
        let rc = unsafe { (self.utilization)(device, &mut utilization) };
        let utilization_percent = (rc == SUCCESS).then(|| f64::from(utilization.gpu.min(100)));
        Ok(GpuSample {
            index,
            name: self.text(device, self.name, NAME_BUFFER, "nvmlDeviceGetName")?,
            uuid: self.text(device, self.uuid, UUID_BUFFER, "nvmlDeviceGetUUID")?,
            memory_total: memory.total,
            memory_used: memory.used,
            utilization_percent,
            processes: self.processes(device)?,
        })
    }

    fn text(
        &self,
        device: Device,
        query: TextFn,
        size: usize,
        what: &'static str,
    ) -> Result<String, NvmlError> {
        let mut buffer = vec![0u8; size];
        // SAFETY: a handle NVML gave; the buffer holds `size` writable bytes.
        let rc = unsafe { query(device, buffer.as_mut_ptr().cast(), size as c_uint) };
        self.check(what, rc)?;
        let text = CStr::from_bytes_until_nul(&buffer)
            .map_err(|_| NvmlError::Call(what, "an unterminated string".to_string()))?;
        Ok(text.to_string_lossy().into_owned())
    }

    /// The compute processes on a device. The list can grow between the call that sizes it
    /// and the one that fills it: then NVML says so again, and the call is retried.
    fn processes(&self, device: Device) -> Result<Vec<(u32, Option<u64>)>, NvmlError> {
        let mut room: c_uint = 0;
        for _ in 0..4 {
            let mut infos = vec![ProcessInfo::default(); room as usize];
            let mut count = room;
            let buffer = if infos.is_empty() {
                std::ptr::null_mut()
            } else {
                infos.as_mut_ptr()
            };
            // SAFETY: a handle NVML gave; `count` says how many entries `buffer` holds (none
            // with a null buffer).
            let rc = unsafe { (self.processes)(device, &mut count, buffer) };
            match rc {
                SUCCESS => {
                    infos.truncate(count.min(room) as usize);
                    return Ok(infos
                        .iter()
                        .map(|p| {
                            let memory = (p.used_gpu_memory != VALUE_NOT_AVAILABLE)
                                .then_some(p.used_gpu_memory);
                            (p.pid, memory)
                        })
                        .collect());
                }
                // Room for a few more that may start meanwhile.
                INSUFFICIENT_SIZE => room = count.saturating_add(8),
                _ => {
                    return Err(NvmlError::Call(
                        "nvmlDeviceGetComputeRunningProcesses",
                        self.describe(rc),
                    ))
                }
            }
        }
        Err(NvmlError::Call(
            "nvmlDeviceGetComputeRunningProcesses",
            "the process list kept growing".to_string(),
        ))
    }
}

/// Each process's mean share of the engine over its samples, and the newest stamp.
fn engine_use(samples: &[ProcessUtilizationSample], since_us: u64) -> EngineUse {
    let mut sums: Vec<(u32, u64, u64)> = Vec::new();
    for s in samples {
        match sums.iter_mut().find(|(pid, ..)| *pid == s.pid) {
            Some((_, total, n)) => {
                *total += u64::from(s.sm_util.min(100));
                *n += 1;
            }
            None => sums.push((s.pid, u64::from(s.sm_util.min(100)), 1)),
        }
    }
    EngineUse {
        processes: sums
            .into_iter()
            .map(|(pid, total, n)| (pid, total as f64 / n as f64 / 100.0))
            .collect(),
        latest_us: samples
            .iter()
            .map(|s| s.time_stamp)
            .max()
            .unwrap_or(since_us)
            .max(since_us),
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: matches the successful init in `load`.
        unsafe { (self.shutdown)() };
    }
}
