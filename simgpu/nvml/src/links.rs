//! NVLink and fabric queries: the simulated node's GPUs are linked by nothing but PCIe, so
//! each valid query answers `NVML_ERROR_NOT_SUPPORTED`, as NVML does on such a GPU.

use crate::ffi::{code, NvmlDevice, NvmlResult};
use crate::session;
use std::ffi::{c_uint, c_void};

/// The device must be one of the session's; then the feature is absent.
fn absent(device: NvmlDevice) -> NvmlResult {
    session::session()?.device(device)?;
    Err(code::NOT_SUPPORTED)
}

nvml_entry! {
    fn nvmlDeviceGetNvLinkRemoteDeviceType(device: NvmlDevice, _link: c_uint, _kind: *mut u32) {
        absent(device)
    }
    fn nvmlDeviceGetNvLinkRemotePciInfo_v2(device: NvmlDevice, _link: c_uint, _pci: *mut c_void) {
        absent(device)
    }
    fn nvmlDeviceGetNvLinkState(device: NvmlDevice, _link: c_uint, _active: *mut u32) {
        absent(device)
    }
    fn nvmlDeviceGetGpuFabricInfoV(device: NvmlDevice, _info: *mut c_void) {
        absent(device)
    }
}
