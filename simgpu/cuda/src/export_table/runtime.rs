//! The runtime's own interface to the driver: loading the fat binaries a program registered,
//! and reaching a device's primary context; with it, the runtime's private way to create a
//! context and the checks it makes of a context.

use super::{index, slot, unknown, Table, NONE};
use crate::ffi::{code, CUcontext, CUdevice, CUmodule, CUresult, DriverResult};
use std::ffi::c_void;

/// The runtime interface.
pub(super) static RUNTIME: Table<16> = {
    const T: usize = index::RUNTIME;
    Table::sized([
        NONE,
        // 1: a module from a registered fat binary wrapper (the oldest form).
        load_from_wrapper as *const c_void,
        // 2: the device's primary context, for the runtime to make current.
        primary_context as *const c_void,
        unknown::<T, 3>(),
        unknown::<T, 4>(),
        unknown::<T, 5>(),
        // 6: a module from a fat binary wrapper, with loading options.
        load_from_wrapper_with_options as *const c_void,
        // 7: a notice from the runtime (11.8 gives it as it unregisters a fat binary);
        //    nothing to do here.
        acknowledge as *const c_void,
        // 8: a module from a bare fat binary, with loading options.
        load_from_fatbin_with_options as *const c_void,
        unknown::<T, 9>(),
        unknown::<T, 10>(),
        unknown::<T, 11>(),
        // 12: asked by the 13.x runtime as it starts, with nothing it sets up for it, and
        //     its answer checked for success; nothing to do here.
        ready as *const c_void,
        unknown::<T, 13>(),
        unknown::<T, 14>(),
        unknown::<T, 15>(),
    ])
};

unsafe extern "C" fn ready() -> CUresult {
    code::CUDA_SUCCESS
}

/// Loads a module from any image `cuModuleLoadData` accepts (a fat binary wrapper or a fat
/// binary: PTX inside is what runs here).
fn load(out: *mut CUmodule, image: *const c_void) -> DriverResult {
    if out.is_null() || image.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `out` is a writable module handle and `image` a fat binary (or its wrapper),
    // as the runtime passes them.
    match unsafe { crate::module::cuModuleLoadData(out, image) } {
        code::CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
}

unsafe extern "C" fn load_from_wrapper(out: *mut CUmodule, wrapper: *const c_void) -> CUresult {
    slot(|| load(out, wrapper))
}

/// The options (two pointers and a count, seen null and zero) are not needed: nothing is
/// compiled here.
unsafe extern "C" fn load_from_wrapper_with_options(
    out: *mut CUmodule,
    wrapper: *const c_void,
    _options: *mut c_void,
    _values: *mut c_void,
    _count: u32,
) -> CUresult {
    slot(|| load(out, wrapper))
}

/// Like [`load_from_wrapper_with_options`], with the fat binary first and the result second.
unsafe extern "C" fn load_from_fatbin_with_options(
    fatbin: *const c_void,
    out: *mut CUmodule,
    _options: *mut c_void,
    _values: *mut c_void,
    _count: u32,
) -> CUresult {
    slot(|| load(out, fatbin))
}

/// The primary context's handle. The runtime asks for it while it enumerates devices, and
/// retains the context itself (and releases it once at exit) when it first uses the device:
/// so the handle is made to exist (simgpu keeps a primary context's handle for good) but the
/// context is left as retained as it was.
///
/// Both steps are simgpu's own functions, not its exported entry points: a preloaded library
/// that interposes those must see only the application's calls, as with a real driver, whose
/// internal calls never pass through its exports.
unsafe extern "C" fn primary_context(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    slot(|| {
        crate::model::context::primary_retain(pctx, dev)?;
        crate::model::context::primary_release(dev)
    })
}

unsafe extern "C" fn acknowledge(_value: usize) -> CUresult {
    code::CUDA_SUCCESS
}

/// The runtime's private way to create a context (the same as `cuCtxCreate_v2`).
pub(super) static CONTEXT_CREATE: Table<2> = Table::sized([NONE, create_context as *const c_void]);

unsafe extern "C" fn create_context(pctx: *mut CUcontext, flags: u32, dev: CUdevice) -> CUresult {
    slot(|| crate::model::context::create_and_push(pctx, flags, dev))
}

/// Checks the runtime makes of a context before using it.
pub(super) static CONTEXT_CHECKS: Table<4> = {
    const T: usize = index::CONTEXT_CHECKS;
    Table::sized([
        NONE,
        unknown::<T, 1>(),
        // 2: whether the context is in a state the runtime must treat specially; never here.
        context_state as *const c_void,
        // 3: a process-wide condition of the same kind; never here.
        process_state as *const c_void,
    ])
};

unsafe extern "C" fn context_state(
    _ctx: CUcontext,
    state: *mut u32,
    _detail: *mut *const c_void,
) -> CUresult {
    if state.is_null() {
        return code::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, and a writable 32-bit word as the runtime passes it.
    unsafe { state.write(0) };
    code::CUDA_SUCCESS
}

unsafe extern "C" fn process_state() -> u32 {
    0
}

/// A table the 13.x runtime asks for as it starts, and without which it does not start. Of
/// its slots only 4 has been seen called (by cuBLASLt 13, with a context and a pointer to a
/// 64-bit value, which it then uses as the key of its per-context state); every other
/// refuses (and says so when tracing).
pub(super) static RUNTIME_13: Table<16> = {
    const T: usize = index::RUNTIME_13;
    Table::sized([
        NONE,
        unknown::<T, 1>(),
        unknown::<T, 2>(),
        unknown::<T, 3>(),
        // 4: a context's unique id (what `cuCtxGetId` answers), for the context that slot 2
        //    of the tools thread state gave; cuBLASLt keys its per-context state by it.
        context_id as *const c_void,
        unknown::<T, 5>(),
        unknown::<T, 6>(),
        unknown::<T, 7>(),
        unknown::<T, 8>(),
        unknown::<T, 9>(),
        unknown::<T, 10>(),
        unknown::<T, 11>(),
        unknown::<T, 12>(),
        unknown::<T, 13>(),
        unknown::<T, 14>(),
        unknown::<T, 15>(),
    ])
};

/// Writes the unique id of `ctx` (null: the current context).
unsafe extern "C" fn context_id(ctx: CUcontext, out: *mut u64) -> CUresult {
    slot(|| {
        let ctx = if ctx.is_null() {
            crate::model::context::current()?
        } else {
            crate::model::context::lookup(ctx)?
        };
        // SAFETY: write_out checks null; the caller passes a pointer to a 64-bit value.
        unsafe { crate::ffi::write_out(out, ctx.id) }
    })
}
