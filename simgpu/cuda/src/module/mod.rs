//! The entry points of modules and libraries: C arguments in, calls into
//! [`crate::model::module`], result codes out.

mod link;
mod occupancy;

use crate::ffi::{code, write_out, CUdevice, CUfunction, CUmodule};
use crate::model::context::{self};
use crate::model::driver;
use crate::model::exec::registry::Registry;
use crate::model::module::*;
use std::ffi::{c_char, c_void};

cuda_entry! {
    fn cuModuleLoadData(out: *mut CUmodule, image: *const c_void) {
        // SAFETY: the caller passes an image as the driver API defines it.
        load_module(out, |cc| unsafe { image::code_from_image(image, cc) })
    }

    /// JIT options are accepted and ignored: there is nothing to compile.
    fn cuModuleLoadDataEx(
        out: *mut CUmodule,
        image: *const c_void,
        _num_options: u32,
        _options: *mut i32,
        _values: *mut *mut c_void,
    ) {
        // SAFETY: the caller passes an image as the driver API defines it.
        load_module(out, |cc| unsafe { image::code_from_image(image, cc) })
    }

    fn cuModuleLoadFatBinary(out: *mut CUmodule, fat: *const c_void) {
        // SAFETY: the caller passes a fat binary (or any image the driver accepts).
        load_module(out, |cc| unsafe { image::code_from_image(fat, cc) })
    }

    fn cuModuleLoad(out: *mut CUmodule, path: *const c_char) {
        load_module(out, |cc| image::code_from_bytes(&read_file(path)?, cc))
    }

    fn cuModuleUnload(handle: CUmodule) {
        driver::process()?;
        let m = MODULES.remove(handle).ok_or(code::CUDA_ERROR_INVALID_HANDLE)?;
        unload(&m);
        Ok(())
    }

    fn cuModuleGetFunction(out: *mut CUfunction, handle: CUmodule, name: *const c_char) {
        let m = module(handle)?;
        if out.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let f = m.function(name_arg(name)?)?;
        // SAFETY: checked non-null; the caller provides a CUfunction to write.
        unsafe { write_out(out, Registry::handle_of(f)) }
    }

    fn cuModuleGetFunctionCount(count: *mut u32, handle: CUmodule) {
        let m = module(handle)?;
        // SAFETY: write_out checks null; the caller provides an unsigned int to write.
        unsafe { write_out(count, m.functions.len() as u32) }
    }

    fn cuModuleEnumerateFunctions(out: *mut CUfunction, n: u32, handle: CUmodule) {
        let m = module(handle)?;
        enumerate(out, n, &m)
    }

    fn cuModuleGetGlobal_v2(dptr: *mut u64, bytes: *mut usize, handle: CUmodule, name: *const c_char) {
        module(handle)?.global(name_arg(name)?, dptr, bytes)
    }

    fn cuModuleGetLoadingMode(mode: *mut u32) {
        driver::process()?;
        // SAFETY: write_out checks null; the caller provides a CUmoduleLoadingMode to write.
        unsafe { write_out(mode, EAGER_LOADING) }
    }

    fn cuFuncGetAttribute(value: *mut i32, which: i32, f: CUfunction) {
        let f = function(f)?;
        let v = f.attribute(which)?;
        // SAFETY: write_out checks null; the caller provides an int to write.
        unsafe { write_out(value, v) }
    }

    fn cuFuncSetAttribute(f: CUfunction, which: i32, value: i32) {
        function(f)?.set_attribute(which, value)
    }

    fn cuFuncSetCacheConfig(f: CUfunction, config: u32) {
        let f = function(f)?;
        if config > 3 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        f.attrs().cache_config = config;
        Ok(())
    }

    fn cuFuncSetSharedMemConfig(f: CUfunction, config: u32) {
        function(f)?;
        if config > 2 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    }

    fn cuFuncGetName(name: *mut *const c_char, f: CUfunction) {
        write_name(name, f)
    }

    fn cuFuncGetModule(out: *mut CUmodule, f: CUfunction) {
        let f = registered(f)?;
        // SAFETY: write_out checks null; the caller provides a CUmodule to write.
        unsafe { write_out(out, f.module_handle()) }
    }

    fn cuFuncGetParamInfo(f: CUfunction, index: usize, offset: *mut usize, size: *mut usize) {
        param_info(f, index, offset, size)
    }

    fn cuFuncIsLoaded(state: *mut u32, f: CUfunction) {
        let loaded = if registered(f)?.runnable { LOADED } else { UNLOADED };
        // SAFETY: write_out checks null; the caller provides a CUfunctionLoadingState to write.
        unsafe { write_out(state, loaded) }
    }

    fn cuFuncLoad(f: CUfunction) {
        function(f).map(drop)
    }

    /// JIT and library options are accepted and ignored.
    fn cuLibraryLoadData(
        out: *mut CUlibrary,
        code_: *const c_void,
        _jit_options: *mut i32,
        _jit_values: *mut *mut c_void,
        _num_jit: u32,
        _lib_options: *mut i32,
        _lib_values: *mut *mut c_void,
        _num_lib: u32,
    ) {
        // SAFETY: the caller passes an image as the driver API defines it.
        load_library(out, |cc| unsafe { image::lazy_code_from_image(code_, cc) })
    }

    fn cuLibraryLoadFromFile(
        out: *mut CUlibrary,
        path: *const c_char,
        _jit_options: *mut i32,
        _jit_values: *mut *mut c_void,
        _num_jit: u32,
        _lib_options: *mut i32,
        _lib_values: *mut *mut c_void,
        _num_lib: u32,
    ) {
        load_library(out, |cc| image::lazy_code_from_bytes(&read_file(path)?, cc))
    }

    fn cuLibraryUnload(handle: CUlibrary) {
        driver::process()?;
        let lib = LIBRARIES.remove(handle).ok_or(code::CUDA_ERROR_INVALID_HANDLE)?;
        MODULES.remove(Registry::handle_of(&lib.module));
        unload(&lib.module);
        Ok(())
    }

    fn cuLibraryGetKernel(out: *mut CUkernel, handle: CUlibrary, name: *const c_char) {
        let lib = library(handle)?;
        if out.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let f = lib.module.function(name_arg(name)?)?;
        // SAFETY: checked non-null; the caller provides a CUkernel to write.
        unsafe { write_out(out, Registry::handle_of(f)) }
    }

    fn cuLibraryGetKernelCount(count: *mut u32, handle: CUlibrary) {
        let lib = library(handle)?;
        // SAFETY: write_out checks null; the caller provides an unsigned int to write.
        unsafe { write_out(count, lib.module.functions.len() as u32) }
    }

    fn cuLibraryEnumerateKernels(out: *mut CUkernel, n: u32, handle: CUlibrary) {
        enumerate(out, n, &library(handle)?.module)
    }

    fn cuLibraryGetModule(out: *mut CUmodule, handle: CUlibrary) {
        let lib = library(handle)?;
        // SAFETY: write_out checks null; the caller provides a CUmodule to write.
        unsafe { write_out(out, Registry::handle_of(&lib.module)) }
    }

    fn cuLibraryGetGlobal(dptr: *mut u64, bytes: *mut usize, handle: CUlibrary, name: *const c_char) {
        library(handle)?.module.global(name_arg(name)?, dptr, bytes)
    }

    /// A `__managed__` variable: its memory is reachable from the host and every device
    /// here, as managed memory is, so it is the variable's own.
    fn cuLibraryGetManaged(dptr: *mut u64, bytes: *mut usize, handle: CUlibrary, name: *const c_char) {
        library(handle)?.module.global(name_arg(name)?, dptr, bytes)
    }

    /// A kernel is its own function in every context.
    fn cuKernelGetFunction(out: *mut CUfunction, kernel: CUkernel) {
        function(kernel)?;
        context::current()?;
        // SAFETY: write_out checks null; the caller provides a CUfunction to write.
        unsafe { write_out(out, kernel) }
    }

    fn cuKernelGetLibrary(out: *mut CUlibrary, kernel: CUkernel) {
        let f = registered(kernel)?;
        let lib = f.library_handle().ok_or(code::CUDA_ERROR_INVALID_HANDLE)?;
        // SAFETY: write_out checks null; the caller provides a CUlibrary to write.
        unsafe { write_out(out, lib) }
    }

    fn cuKernelGetName(name: *mut *const c_char, kernel: CUkernel) {
        write_name(name, kernel)
    }

    fn cuKernelGetParamInfo(kernel: CUkernel, index: usize, offset: *mut usize, size: *mut usize) {
        param_info(kernel, index, offset, size)
    }

    fn cuKernelGetAttribute(value: *mut i32, which: i32, kernel: CUkernel, dev: CUdevice) {
        driver::check_device(dev)?;
        let v = function(kernel)?.attribute(which)?;
        // SAFETY: write_out checks null; the caller provides an int to write.
        unsafe { write_out(value, v) }
    }

    fn cuKernelSetAttribute(which: i32, value: i32, kernel: CUkernel, dev: CUdevice) {
        driver::check_device(dev)?;
        function(kernel)?.set_attribute(which, value)
    }

    fn cuKernelSetCacheConfig(kernel: CUkernel, config: u32, dev: CUdevice) {
        driver::check_device(dev)?;
        let f = function(kernel)?;
        if config > 3 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        f.attrs().cache_config = config;
        Ok(())
    }
}
