//! One device as a workload uses it: its primary context (the one the CUDA runtime uses),
//! memory, streams and events, each released when dropped.

use crate::driver::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUresult, CUstream, Driver, DriverError, LoadError,
};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;

/// Why a workload could not use the GPU.
#[derive(Debug)]
pub enum Error {
    /// The driver library could not be loaded.
    Load(&'static LoadError),
    /// A driver call failed.
    Driver(DriverError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Load(e) => e.fmt(f),
            Error::Driver(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Error {
        Error::Driver(e)
    }
}

impl Error {
    /// The driver's result code, if a driver call failed.
    pub fn code(&self) -> Option<CUresult> {
        match self {
            Error::Driver(e) => Some(e.code),
            Error::Load(_) => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Free and total memory of the device, as `cuMemGetInfo` reports them.
#[derive(Debug, Clone, Copy)]
pub struct MemoryInfo {
    pub free: u64,
    pub total: u64,
}

/// A device with its primary context retained and current on the calling thread.
pub struct Gpu {
    driver: &'static Driver,
    ordinal: i32,
    device: CUdevice,
    context: CUcontext,
}

// SAFETY: the driver API is thread-safe, and a context handle names the same context from
// any thread of the process (a thread makes it current before using it: `make_current`).
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Loads the driver, initializes it and makes device `ordinal`'s primary context current.
    pub fn open(ordinal: i32) -> Result<Gpu> {
        let driver = Driver::get().map_err(Error::Load)?;
        let api = driver.api();
        // SAFETY: cuInit takes flags, which must be 0.
        driver.check("cuInit", unsafe { (api.cuInit)(0) })?;
        let mut device: CUdevice = 0;
        // SAFETY: `device` is a valid out-pointer.
        driver.check("cuDeviceGet", unsafe {
            (api.cuDeviceGet)(&mut device, ordinal)
        })?;
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: `context` is a valid out-pointer and `device` a device handle.
        let r = unsafe { (api.cuDevicePrimaryCtxRetain)(&mut context, device) };
        driver.check("cuDevicePrimaryCtxRetain", r)?;
        // From here on, dropping `gpu` releases the context.
        let gpu = Gpu {
            driver,
            ordinal,
            device,
            context,
        };
        // SAFETY: `context` is the primary context retained above.
        gpu.check("cuCtxSetCurrent", unsafe { (api.cuCtxSetCurrent)(context) })?;
        Ok(gpu)
    }

    /// The driver.
    pub fn driver(&self) -> &'static Driver {
        self.driver
    }

    /// The primary context, for making it current on another thread.
    pub fn context(&self) -> CUcontext {
        self.context
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// Maps a result code to `Ok` or an error naming `call`.
    pub fn check(&self, call: &'static str, code: CUresult) -> Result<()> {
        Ok(self.driver.check(call, code)?)
    }

    /// The device's name.
    pub fn name(&self) -> Result<String> {
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` holds the length passed.
        let r = unsafe {
            (self.driver.api().cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, self.device)
        };
        self.check("cuDeviceGetName", r)?;
        // SAFETY: the driver NUL-terminates within the length it was given; the last byte is
        // still 0 in any case.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// The driver's CUDA version, like 12080.
    pub fn driver_version(&self) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid out-pointer.
        self.check("cuDriverGetVersion", unsafe {
            (self.driver.api().cuDriverGetVersion)(&mut v)
        })?;
        Ok(v)
    }

    /// Free and total device memory, as the current context sees them.
    pub fn memory_info(&self) -> Result<MemoryInfo> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid out-pointers.
        let r = unsafe { (self.driver.api().cuMemGetInfo_v2)(&mut free, &mut total) };
        self.check("cuMemGetInfo", r)?;
        Ok(MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    /// Allocates `bytes` of device memory.
    pub fn alloc(&self, bytes: u64) -> Result<DeviceBuffer<'_>> {
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer.
        let r = unsafe { (self.driver.api().cuMemAlloc_v2)(&mut ptr, bytes as usize) };
        self.check("cuMemAlloc", r)?;
        Ok(DeviceBuffer {
            gpu: self,
            ptr,
            bytes,
        })
    }

    /// A new stream, ordered with the legacy default stream (flags 0).
    pub fn stream(&self) -> Result<Stream<'_>> {
        self.stream_with_flags(0)
    }

    /// A new stream with `cuStreamCreate` flags.
    pub fn stream_with_flags(&self, flags: c_uint) -> Result<Stream<'_>> {
        let mut raw: CUstream = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the driver checks the flags.
        self.check("cuStreamCreate", unsafe {
            (self.driver.api().cuStreamCreate)(&mut raw, flags)
        })?;
        Ok(Stream { gpu: self, raw })
    }

    /// Makes the primary context current on the calling thread (another thread than the
    /// one that opened the device).
    pub fn make_current(&self) -> Result<()> {
        // SAFETY: the primary context this value holds retained.
        self.check("cuCtxSetCurrent", unsafe {
            (self.driver.api().cuCtxSetCurrent)(self.context)
        })
    }

    /// Waits for all work queued in the context, on every stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: no arguments; the context is current on this thread.
        self.check("cuCtxSynchronize", unsafe {
            (self.driver.api().cuCtxSynchronize)()
        })
    }

    /// A new event with `cuEventCreate` flags.
    pub fn event(&self, flags: c_uint) -> Result<Event<'_>> {
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        self.check("cuEventCreate", unsafe {
            (self.driver.api().cuEventCreate)(&mut raw, flags)
        })?;
        Ok(Event { gpu: self, raw })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: the primary context was retained by `open`; this is the matching release.
        unsafe { (self.driver.api().cuDevicePrimaryCtxRelease_v2)(self.device) };
    }
}

/// Device memory, freed on drop.
pub struct DeviceBuffer<'g> {
    gpu: &'g Gpu,
    ptr: CUdeviceptr,
    bytes: u64,
}

impl DeviceBuffer<'_> {
    /// The device address.
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Its size.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Copies `src` to the start of the buffer (synchronous).
    pub fn copy_from_host(&self, src: &[u8]) -> Result<()> {
        assert!(
            src.len() as u64 <= self.bytes,
            "copy past the end of a device buffer"
        );
        // SAFETY: `src` is readable for its length, which fits in the allocation.
        let r = unsafe {
            (self.gpu.driver.api().cuMemcpyHtoD_v2)(
                self.ptr,
                src.as_ptr().cast::<c_void>(),
                src.len(),
            )
        };
        self.gpu.check("cuMemcpyHtoD", r)
    }

    /// Copies the start of the buffer into `dst` (synchronous).
    pub fn copy_to_host(&self, dst: &mut [u8]) -> Result<()> {
        assert!(
            dst.len() as u64 <= self.bytes,
            "copy past the end of a device buffer"
        );
        // SAFETY: `dst` is writable for its length, which fits in the allocation.
        let r = unsafe {
            (self.gpu.driver.api().cuMemcpyDtoH_v2)(
                dst.as_mut_ptr().cast::<c_void>(),
                self.ptr,
                dst.len(),
            )
        };
        self.gpu.check("cuMemcpyDtoH", r)
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemAlloc and is freed only here.
        unsafe { (self.gpu.driver.api().cuMemFree_v2)(self.ptr) };
    }
}

/// A stream, destroyed on drop.
pub struct Stream<'g> {
    gpu: &'g Gpu,
    raw: CUstream,
}

impl Stream<'_> {
    /// The handle.
    pub fn raw(&self) -> CUstream {
        self.raw
    }

    /// Waits for all work queued on the stream.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: `raw` is a live stream.
        let r = unsafe { (self.gpu.driver.api().cuStreamSynchronize)(self.raw) };
        self.gpu.check("cuStreamSynchronize", r)
    }
}

impl Drop for Stream<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from cuStreamCreate and is destroyed only here.
        unsafe { (self.gpu.driver.api().cuStreamDestroy_v2)(self.raw) };
    }
}

/// An event, destroyed on drop.
pub struct Event<'g> {
    gpu: &'g Gpu,
    raw: CUevent,
}

impl Event<'_> {
    /// The handle.
    pub fn raw(&self) -> CUevent {
        self.raw
    }

    /// Records the event at the current end of `stream`.
    pub fn record(&self, stream: &Stream<'_>) -> Result<()> {
        self.record_on(stream.raw)
    }

    /// Records the event on a raw stream handle: the null stream, or a special handle.
    pub(crate) fn record_on(&self, stream: CUstream) -> Result<()> {
        // SAFETY: a live event; the driver checks the stream handle.
        let r = unsafe { (self.gpu.driver.api().cuEventRecord)(self.raw, stream) };
        self.gpu.check("cuEventRecord", r)
    }

    /// Whether the work before the recorded point has run, without waiting.
    pub fn done(&self) -> Result<bool> {
        // SAFETY: a live event.
        let r = unsafe { (self.gpu.driver.api().cuEventQuery)(self.raw) };
        if r == crate::driver::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.gpu.check("cuEventQuery", r).map(|()| true)
    }

    /// Waits until the work before the recorded point has run.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: `raw` is a live event.
        let r = unsafe { (self.gpu.driver.api().cuEventSynchronize)(self.raw) };
        self.gpu.check("cuEventSynchronize", r)
    }

    /// Milliseconds of GPU time from `start` to this event (both recorded and complete,
    /// both created with timing).
    pub fn elapsed_ms_since(&self, start: &Event<'_>) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; both handles are live.
        let r = unsafe { (self.gpu.driver.api().cuEventElapsedTime)(&mut ms, start.raw, self.raw) };
        self.gpu.check("cuEventElapsedTime", r)?;
        Ok(ms)
    }
}

impl Drop for Event<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` came from cuEventCreate and is destroyed only here.
        unsafe { (self.gpu.driver.api().cuEventDestroy_v2)(self.raw) };
    }
}
