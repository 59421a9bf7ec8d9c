//! NVML memory queries: `nvidia-smi` and monitoring agents inside the container see the
//! container's slice of a limited device, as `cuMemGetInfo` does. NVML numbers devices by
//! their node index, which the caps are kept by.

use super::query::limited;
use crate::hooks::real;
use std::ffi::c_void;
use tessera_cuda_abi::nvml::code;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemoryV2 {
    version: u32,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// The node index of an NVML device, the index the caps are kept by: by UUID where the
/// region has the container's (a container runtime renumbers NVML's indexes), else NVML's
/// own index, which `CUDA_VISIBLE_DEVICES` does not change.
fn node_index(device: *mut c_void) -> Option<usize> {
    crate::visibility::nvml_account(device)
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetMemoryInfo`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn memory_info(
    real: real::nvmlDeviceGetMemoryInfo::Real,
    device: *mut c_void,
    memory: *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(device, memory) };
    if rc != code::SUCCESS || memory.is_null() {
        return rc;
    }
    let memory = memory.cast::<Memory>();
    // SAFETY: non-null, and NVML has just written an nvmlMemory_t there.
    let mut m = unsafe { memory.read_unaligned() };
    if let Some(s) = node_index(device).and_then(|d| limited(d, m.total, m.free)) {
        m = Memory {
            total: s.total,
            free: s.free,
            used: s.total - s.free,
        };
        // SAFETY: as above; the caller's nvmlMemory_t.
        unsafe { memory.write_unaligned(m) };
    }
    rc
}

/// # Safety
/// `real` is NVML's `nvmlDeviceGetMemoryInfo_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn memory_info_v2(
    real: real::nvmlDeviceGetMemoryInfo_v2::Real,
    device: *mut c_void,
    memory: *mut c_void,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(device, memory) };
    if rc != code::SUCCESS || memory.is_null() {
        return rc;
    }
    let memory = memory.cast::<MemoryV2>();
    // SAFETY: non-null, and NVML has just written an nvmlMemory_v2_t there (it checked the
    // version).
    let mut m = unsafe { memory.read_unaligned() };
    if let Some(s) = node_index(device).and_then(|d| limited(d, m.total, m.free)) {
        // What the driver reserves stays reserved, within the slice.
        let reserved = m.reserved.min(s.total - s.free);
        m.total = s.total;
        m.free = s.free;
        m.reserved = reserved;
        m.used = s.total - s.free - reserved;
        // SAFETY: as above; the caller's nvmlMemory_v2_t.
        unsafe { memory.write_unaligned(m) };
    }
    rc
}
