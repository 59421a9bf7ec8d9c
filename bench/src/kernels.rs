//! The workload kernels: hand-written PTX that a real driver JIT-compiles and simgpu
//! simulates (it knows them by name and reads their parameters from the `.entry` lines).

use crate::driver::{CUdeviceptr, CUfunction, CUmodule, CUstream, LaunchKernel};
use crate::gpu::{Gpu, Result, Stream};
use std::ffi::{c_uint, c_void, CStr};

/// The module text.
pub const PTX: &str = include_str!("../kernels/tessera.ptx");

/// `tessera_spin(u64 ns)`: busy on the GPU for `ns` nanoseconds.
pub const SPIN: &CStr = c"tessera_spin";
/// `tessera_fill_u32(u64 ptr, u64 count, u32 value)`: writes `value` to `count` words.
pub const FILL_U32: &CStr = c"tessera_fill_u32";

/// Threads per block of the fill kernel.
const FILL_BLOCK: u32 = 256;
/// The fill kernel's grid is capped; its grid-stride loop covers the rest.
const FILL_MAX_BLOCKS: u64 = 4096;

/// The loaded module and its kernels; unloaded on drop.
pub struct Kernels<'g> {
    gpu: &'g Gpu,
    module: CUmodule,
    spin: CUfunction,
    fill_u32: CUfunction,
}

// SAFETY: module and function handles are valid in every thread of the process that has
// their context current; the driver API is thread-safe.
unsafe impl Sync for Kernels<'_> {}

impl<'g> Kernels<'g> {
    /// Loads [`PTX`] into the current context.
    pub fn load(gpu: &'g Gpu) -> Result<Kernels<'g>> {
        let api = gpu.driver().api();
        let image = std::ffi::CString::new(PTX).expect("the PTX has no NUL");
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: `module` is a valid out-pointer; the image is NUL-terminated PTX text.
        let r = unsafe { (api.cuModuleLoadData)(&mut module, image.as_ptr().cast::<c_void>()) };
        gpu.check("cuModuleLoadData", r)?;
        let mut kernels = Kernels {
            gpu,
            module,
            spin: std::ptr::null_mut(),
            fill_u32: std::ptr::null_mut(),
        };
        kernels.spin = kernels.function(SPIN)?;
        kernels.fill_u32 = kernels.function(FILL_U32)?;
        Ok(kernels)
    }

    fn function(&self, name: &CStr) -> Result<CUfunction> {
        let mut f: CUfunction = std::ptr::null_mut();
        // SAFETY: `f` is a valid out-pointer, `module` a loaded module, `name` a C string.
        let r = unsafe {
            (self.gpu.driver().api().cuModuleGetFunction)(&mut f, self.module, name.as_ptr())
        };
        self.gpu.check("cuModuleGetFunction", r)?;
        Ok(f)
    }

    /// Queues `tessera_spin(ns)` on `stream`, one thread.
    pub fn spin(&self, stream: &Stream<'_>, ns: u64) -> Result<()> {
        self.spin_with(self.gpu.driver().api().cuLaunchKernel, stream.raw(), ns)
    }

    /// Queues `tessera_spin(ns)` through `launch` (a `cuLaunchKernel` of either
    /// default-stream flavour) on a raw stream handle: the null stream, or a special handle.
    pub fn spin_with(&self, launch: LaunchKernel, stream: CUstream, ns: u64) -> Result<()> {
        let mut ns = ns;
        let mut params = [std::ptr::from_mut(&mut ns).cast::<c_void>()];
        self.launch(launch, self.spin, 1, 1, stream, &mut params)
    }

    /// Queues `tessera_fill_u32(ptr, count, value)` on `stream`.
    pub fn fill_u32(
        &self,
        stream: &Stream<'_>,
        ptr: CUdeviceptr,
        count: u64,
        value: u32,
    ) -> Result<()> {
        let blocks = count.div_ceil(FILL_BLOCK as u64).clamp(1, FILL_MAX_BLOCKS) as c_uint;
        let (mut ptr, mut count, mut value) = (ptr, count, value);
        let mut params = [
            std::ptr::from_mut(&mut ptr).cast::<c_void>(),
            std::ptr::from_mut(&mut count).cast::<c_void>(),
            std::ptr::from_mut(&mut value).cast::<c_void>(),
        ];
        let launch = self.gpu.driver().api().cuLaunchKernel;
        self.launch(
            launch,
            self.fill_u32,
            blocks,
            FILL_BLOCK,
            stream.raw(),
            &mut params,
        )
    }

    fn launch(
        &self,
        launch: LaunchKernel,
        function: CUfunction,
        blocks: c_uint,
        threads: c_uint,
        stream: CUstream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        // SAFETY: `launch` is a cuLaunchKernel of this driver; `function` belongs to the
        // loaded module; `params` points at one value per kernel parameter, of the
        // parameter's type, alive for the call (the driver copies them before returning).
        let r = unsafe {
            launch(
                function,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.gpu.check("cuLaunchKernel", r)
    }
}

impl Drop for Kernels<'_> {
    fn drop(&mut self) {
        // SAFETY: `module` was loaded by `load` and is unloaded only here.
        unsafe { (self.gpu.driver().api().cuModuleUnload)(self.module) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signatures are a contract with simgpu; this pins them.
    #[test]
    fn ptx_declares_exactly_the_two_kernels() {
        let entries: Vec<&str> = PTX
            .lines()
            .filter(|l| l.trim_start().starts_with(".visible .entry"))
            .collect();
        assert_eq!(
            entries,
            [
                ".visible .entry tessera_spin(",
                ".visible .entry tessera_fill_u32("
            ]
        );
        let squeezed: String = PTX.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(squeezed.contains(".entry tessera_spin( .param .u64 ns )"));
        assert!(squeezed.contains(
            ".entry tessera_fill_u32( .param .u64 ptr, .param .u64 count, .param .u32 value )"
        ));
        assert!(PTX.contains("%globaltimer"));
        assert!(PTX.contains(".version 7.0") && PTX.contains(".target sm_70"));
    }
}
