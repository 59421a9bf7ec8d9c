//! Launches: a kernel, after the checks a driver makes at launch, or an instantiated graph,
//! put on a stream (or into the stream's capture).

use crate::ffi::{code, CUfunction, CUstream, DriverResult};
use crate::model::graph::{CUgraphExec, Node, EXECS};
use crate::model::kernel::{collect_args, Geometry, KernelLaunch};
use crate::model::module;
use crate::model::stream;
use std::ffi::c_void;
use std::sync::Arc;

/// Checks a launch and puts it on its stream (or into the stream's capture).
///
/// # Safety
/// As for [`collect_args`].
pub(crate) unsafe fn launch(
    f: CUfunction,
    geometry: Geometry,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    per_thread: bool,
    cooperative: bool,
) -> DriverResult {
    crate::model::driver::process()?;
    let function = module::function(f)?;
    let stream = stream::resolve(stream, per_thread)?;
    geometry.check(&function)?;
    if cooperative {
        geometry.check_cooperative(stream.ctx.device)?;
    }
    stream.ctx.check_sticky()?;
    // SAFETY: the caller passes the driver API's argument lists for this function.
    let args = unsafe { collect_args(&function, params, extra) }?;
    let launch = KernelLaunch::new(function, geometry, args);
    stream::submit_node(&stream, Node::Kernel(Arc::new(launch)))
}

pub use tessera_cuda_abi::{CUlaunchAttribute as LaunchAttribute, CUlaunchConfig as LaunchConfig};

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
const ATTRIBUTE_COOPERATIVE: u32 = 2;

/// `cuLaunchKernelEx`: attributes are accepted; a cooperative one is checked as such.
///
/// # Safety
/// `config` must be null or a valid launch configuration; the lists as for [`collect_args`].
pub(crate) unsafe fn launch_ex(
    config: *const LaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    per_thread: bool,
) -> DriverResult {
    crate::model::driver::process()?;
    if config.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller provides a launch configuration.
    let c = unsafe { &*config };
    if c.num_attrs > 0 && c.attrs.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let attrs: &[LaunchAttribute] = if c.num_attrs == 0 {
        &[]
    } else {
        // SAFETY: the configuration points to `num_attrs` attributes.
        unsafe { std::slice::from_raw_parts(c.attrs, c.num_attrs as usize) }
    };
    let cooperative = attrs
        .iter()
        .any(|a| a.id == ATTRIBUTE_COOPERATIVE && a.value[0] as u32 != 0);
    let geometry = Geometry {
        grid: c.grid,
        block: c.block,
        shared: c.shared,
    };
    // SAFETY: the caller passes the argument lists for this function.
    unsafe {
        launch(
            f,
            geometry,
            c.stream,
            params,
            extra,
            per_thread,
            cooperative,
        )
    }
}

/// Puts an instantiated graph's nodes on a stream, in order (or into the stream's capture).
pub(crate) fn launch_graph(exec: CUgraphExec, handle: CUstream, per_thread: bool) -> DriverResult {
    crate::model::driver::process()?;
    let exec = EXECS.get(exec).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    let stream = stream::resolve(handle, per_thread)?;
    stream.ctx.check_sticky()?;
    let nodes = exec.replay();
    for node in nodes {
        stream::submit_node(&stream, node)?;
    }
    Ok(())
}

/// Uploads an instantiated graph: nothing to do beyond the checks.
pub(crate) fn upload_graph(exec: CUgraphExec, handle: CUstream, per_thread: bool) -> DriverResult {
    crate::model::driver::process()?;
    EXECS.get(exec).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    stream::resolve(handle, per_thread).map(drop)
}
