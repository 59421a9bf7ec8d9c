//! Launched kernels: the checks a driver makes of a launch, the argument bytes copied out of
//! the caller's memory at launch time, and what each simulated kernel does when it runs.

use crate::ffi::{code, CUfunction, CUresult, DriverResult};
use crate::model::module::{self, Behaviour, Function};
use simgpu::config::NodeConfig;
use std::ffi::c_void;
use std::sync::Arc;

/// `CUDA_ERROR_MISALIGNED_ADDRESS`.
const MISALIGNED_ADDRESS: CUresult = 716;
/// `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`.
const COOPERATIVE_LAUNCH_TOO_LARGE: CUresult = 720;

/// `extra` keys: the end of the list, a pointer to the argument buffer, a pointer to its size.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;

/// Simulated memory bandwidth of a fill, in bytes per microsecond (1.5 TB/s).
const FILL_BYTES_PER_US: u64 = 1_500_000;
/// The shortest fill: a kernel launch has a fixed cost.
const MIN_FILL_NS: u64 = 2_000;
/// Resident threads per SM, for the size of a cooperative grid.
const THREADS_PER_SM: u32 = 2048;
/// Resident blocks per SM.
const BLOCKS_PER_SM: u32 = 32;

/// One launch: the kernel, its geometry (checked at launch; the simulated kernels do not
/// depend on it, a graph reports it) and its arguments as they were at launch.
pub(crate) struct KernelLaunch {
    function: Arc<Function>,
    geometry: Geometry,
    args: Vec<u8>,
}

/// `CUDA_KERNEL_NODE_PARAMS`: a kernel node's launch.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParams {
    pub func: CUfunction,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2`: the first form, then a kernel (used when `func` is null)
/// and a context.
#[repr(C)]
pub struct KernelNodeParamsV2 {
    pub v1: KernelNodeParams,
    pub kern: *mut c_void,
    pub ctx: *mut c_void,
}

impl KernelLaunch {
    /// A launch of `function` with `geometry` (checked) and its arguments as collected.
    pub(crate) fn new(function: Arc<Function>, geometry: Geometry, args: Vec<u8>) -> KernelLaunch {
        KernelLaunch {
            function,
            geometry,
            args,
        }
    }

    /// A kernel node's launch, checked as a launch is.
    ///
    /// # Safety
    /// `p`'s argument lists must be as the driver API defines them for its function.
    pub(crate) unsafe fn from_node_params(
        p: &KernelNodeParams,
        kernel: *mut c_void,
    ) -> Result<KernelLaunch, CUresult> {
        // A kernel is its own function in every context.
        let f = if p.func.is_null() { kernel } else { p.func };
        let function = module::function(f)?;
        let geometry = Geometry {
            grid: p.grid,
            block: p.block,
            shared: p.shared,
        };
        geometry.check(&function)?;
        // SAFETY: the caller passes the driver API's argument lists for this function.
        let args = unsafe { collect_args(&function, p.params, p.extra) }?;
        Ok(KernelLaunch {
            function,
            geometry,
            args,
        })
    }

    /// The launch as a kernel node's parameters, without its argument pointers.
    pub(crate) fn node_params(&self) -> KernelNodeParams {
        KernelNodeParams {
            func: crate::model::exec::registry::Registry::handle_of(&self.function),
            grid: self.geometry.grid,
            block: self.geometry.block,
            shared: self.geometry.shared,
            params: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
        }
    }

    /// The address of each argument in this launch's own copy of them.
    pub(crate) fn arg_addresses(&self) -> Vec<usize> {
        let base = self.args.as_ptr() as usize;
        self.function
            .params
            .iter()
            .map(|p| base + p.offset)
            .collect()
    }

    /// The device its function belongs to.
    pub(crate) fn device(&self) -> usize {
        self.function.device()
    }

    /// The `i`th argument as an unsigned integer (little-endian, its declared size).
    fn arg(&self, i: usize) -> u64 {
        let Some(p) = self.function.params.get(i) else {
            return 0;
        };
        let mut bytes = [0u8; 8];
        let n = p.size.min(8);
        bytes[..n].copy_from_slice(&self.args[p.offset..p.offset + n]);
        u64::from_le_bytes(bytes)
    }

    /// How long the kernel holds the engine: its own work, and the GPU's overhead of a
    /// kernel (the profile's).
    pub(crate) fn duration_ns(&self, config: &NodeConfig) -> u64 {
        config
            .kernel_overhead_ns
            .saturating_add(self.work_ns(config))
    }

    fn work_ns(&self, config: &NodeConfig) -> u64 {
        match self.function.behaviour {
            Behaviour::Spin => self.arg(0),
            Behaviour::FillU32 => {
                let bytes = self.arg(1).saturating_mul(4);
                (bytes.saturating_mul(1000) / FILL_BYTES_PER_US).max(MIN_FILL_NS)
            }
            Behaviour::Default => config.default_kernel_ns,
        }
    }

    /// The kernel's effect on memory, once its time has run. A bad address fails the
    /// context, as a fault does on a GPU.
    pub(crate) fn apply(&self) -> DriverResult {
        if self.function.behaviour != Behaviour::FillU32 {
            return Ok(());
        }
        let (ptr, count, value) = (self.arg(0), self.arg(1), self.arg(2) as u32);
        if count == 0 {
            return Ok(());
        }
        if ptr % 4 != 0 {
            return Err(MISALIGNED_ADDRESS);
        }
        let bytes = count
            .checked_mul(4)
            .ok_or(code::CUDA_ERROR_ILLEGAL_ADDRESS)?;
        let base = crate::model::memory::device_range(ptr, bytes)
            .ok_or(code::CUDA_ERROR_ILLEGAL_ADDRESS)?
            .cast::<u32>();
        for i in 0..count as usize {
            // SAFETY: device_range vouched that the `count` aligned words at `base` are a live
            // read-write allocation; the program orders other users of it through streams,
            // as on a GPU.
            unsafe { base.add(i).write(value) };
        }
        Ok(())
    }
}

/// Launch geometry.
#[derive(Clone, Copy)]
pub(crate) struct Geometry {
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) shared: u32,
}

impl Geometry {
    pub(crate) fn check(&self, f: &Function) -> DriverResult {
        let [gx, gy, gz] = self.grid;
        let [bx, by, bz] = self.block;
        let threads = bx as u64 * by as u64 * bz as u64;
        let ok = (1..=i32::MAX as u32).contains(&gx)
            && (1..=65535).contains(&gy)
            && (1..=65535).contains(&gz)
            && (1..=1024).contains(&bx)
            && (1..=1024).contains(&by)
            && (1..=64).contains(&bz)
            && threads <= f.max_threads as u64
            && self.shared as u64 <= f.max_dynamic_shared();
        if ok {
            Ok(())
        } else {
            Err(code::CUDA_ERROR_INVALID_VALUE)
        }
    }

    /// A cooperative grid must be resident all at once.
    pub(crate) fn check_cooperative(&self, device: usize) -> DriverResult {
        let sms = crate::model::driver::devices()?
            .get(device)
            .map_or(1, |d| d.sms);
        let threads = self.block.iter().product::<u32>().max(1);
        let per_sm = (THREADS_PER_SM / threads).clamp(1, BLOCKS_PER_SM);
        let blocks: u64 = self.grid.iter().map(|&g| g as u64).product();
        if blocks > sms as u64 * per_sm as u64 {
            return Err(COOPERATIVE_LAUNCH_TOO_LARGE);
        }
        Ok(())
    }
}

/// Copies the arguments out of `params` (one pointer per parameter) or `extra` (a key/value
/// list pointing to a packed buffer).
///
/// # Safety
/// `params` and `extra` must be null or as the driver API defines them for `f`.
pub(crate) unsafe fn collect_args(
    f: &Function,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Result<Vec<u8>, CUresult> {
    let mut args = vec![0u8; f.params_size];
    if !params.is_null() && !extra.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    if !params.is_null() {
        for (i, p) in f.params.iter().enumerate() {
            // SAFETY: the caller provides one pointer per kernel parameter.
            let src = unsafe { params.add(i).read() };
            if src.is_null() {
                return Err(code::CUDA_ERROR_INVALID_VALUE);
            }
            // SAFETY: each pointer points to a value of its parameter's size; the destination
            // range lies within `args` (offset + size <= params_size).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.cast::<u8>(),
                    args.as_mut_ptr().add(p.offset),
                    p.size,
                )
            };
        }
        return Ok(args);
    }
    if extra.is_null() {
        return if f.params.is_empty() {
            Ok(args)
        } else {
            Err(code::CUDA_ERROR_INVALID_VALUE)
        };
    }
    let (mut buffer, mut size): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut i = 0;
    loop {
        // SAFETY: the list is a sequence of pointer-sized keys and values ending with END.
        let key = unsafe { extra.add(i).read() } as usize;
        match key {
            PARAM_END => break,
            PARAM_BUFFER_POINTER => {
                // SAFETY: as above; a key is followed by its value.
                buffer = unsafe { extra.add(i + 1).read() }.cast();
            }
            PARAM_BUFFER_SIZE => {
                // SAFETY: as above; the value points to a size_t.
                let p = unsafe { extra.add(i + 1).read() }.cast::<usize>();
                if p.is_null() {
                    return Err(code::CUDA_ERROR_INVALID_VALUE);
                }
                // SAFETY: non-null pointer to the buffer's size.
                size = Some(unsafe { p.read() });
            }
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
        }
        i += 2;
    }
    if f.params_size == 0 {
        return Ok(args);
    }
    match size {
        Some(n) if !buffer.is_null() && n >= f.params_size => {
            // SAFETY: the buffer holds `n` >= params_size bytes.
            unsafe { std::ptr::copy_nonoverlapping(buffer, args.as_mut_ptr(), f.params_size) };
            Ok(args)
        }
        _ => Err(code::CUDA_ERROR_INVALID_VALUE),
    }
}
