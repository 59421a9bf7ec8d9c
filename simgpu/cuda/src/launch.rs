//! The entry points of kernel launches.
//!
//! They check and translate the C arguments, call into [`crate::model::launch`], and
//! write its results out as the driver API does.

use crate::ffi::{CUfunction, CUstream};
use crate::model::kernel::Geometry;
use crate::model::launch::*;
use std::ffi::c_void;

cuda_entry! {
    fn cuLaunchKernel(
        f: CUfunction,
        grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32,
        shared: u32,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let geometry = Geometry { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared };
        // SAFETY: the caller passes the driver API's argument lists for this function.
        unsafe { launch(f, geometry, stream, params, extra, false, false) }
    }

    fn cuLaunchKernel_ptsz(
        f: CUfunction,
        grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32,
        shared: u32,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        let geometry = Geometry { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared };
        // SAFETY: the caller passes the driver API's argument lists for this function.
        unsafe { launch(f, geometry, stream, params, extra, true, false) }
    }

    fn cuLaunchCooperativeKernel(
        f: CUfunction,
        grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32,
        shared: u32,
        stream: CUstream,
        params: *mut *mut c_void,
    ) {
        let geometry = Geometry { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared };
        // SAFETY: the caller passes the driver API's argument list for this function.
        unsafe { launch(f, geometry, stream, params, std::ptr::null_mut(), false, true) }
    }

    fn cuLaunchCooperativeKernel_ptsz(
        f: CUfunction,
        grid_x: u32, grid_y: u32, grid_z: u32,
        block_x: u32, block_y: u32, block_z: u32,
        shared: u32,
        stream: CUstream,
        params: *mut *mut c_void,
    ) {
        let geometry = Geometry { grid: [grid_x, grid_y, grid_z], block: [block_x, block_y, block_z], shared };
        // SAFETY: the caller passes the driver API's argument list for this function.
        unsafe { launch(f, geometry, stream, params, std::ptr::null_mut(), true, true) }
    }

    fn cuLaunchKernelEx(
        config: *const LaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        // SAFETY: the caller passes a launch configuration and argument lists.
        unsafe { launch_ex(config, f, params, extra, false) }
    }

    fn cuLaunchKernelEx_ptsz(
        config: *const LaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) {
        // SAFETY: the caller passes a launch configuration and argument lists.
        unsafe { launch_ex(config, f, params, extra, true) }
    }
}
