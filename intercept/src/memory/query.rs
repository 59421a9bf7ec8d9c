//! What the application is told about memory: `cuMemGetInfo_v2` and `cuDeviceTotalMem_v2`
//! report a limited device as the container's slice of it. The real call runs first, so
//! that every error (a null out-pointer, no context) is the driver's own.

use super::current_device;
use crate::container;
use crate::hooks::real;
use tessera_cuda_abi::CUDA_SUCCESS;

/// The container's view of a device: its total and free memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub total: u64,
    pub free: u64,
}

/// The slice the container sees of a device with `real_total` and `real_free` bytes,
/// capped at `cap` with `used` held: never more than the device has.
pub(crate) fn slice(cap: u64, used: u64, real_total: u64, real_free: u64) -> Slice {
    let total = cap.min(real_total);
    Slice {
        total,
        free: total.saturating_sub(used).min(real_free),
    }
}

/// The slice of `device` if it is limited, from the driver's own figures. Dead processes
/// are reaped first when other processes hold memory on the device (a few system calls per
/// live process), so that what a process that exited held is reported free, as the driver
/// reports it; frees that have run in their streams are given back too.
pub(crate) fn limited(device: usize, real_total: u64, real_free: u64) -> Option<Slice> {
    let c = container::get()?;
    let cap = c.memory_cap(device)?;
    super::pool::settle();
    c.reap_dead_holding(device);
    Some(slice(cap, c.memory_used(device), real_total, real_free))
}

/// # Safety
/// `real` is the driver's `cuMemGetInfo_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_get_info(
    real: real::cuMemGetInfo_v2::Real,
    free: *mut usize,
    total: *mut usize,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(free, total) };
    if rc != CUDA_SUCCESS || free.is_null() || total.is_null() {
        return rc;
    }
    let Some(device) = current_device() else {
        return rc;
    };
    // SAFETY: both are non-null and the driver just wrote them.
    let (real_free, real_total) = unsafe { (free.read(), total.read()) };
    if let Some(s) = limited(device, real_total as u64, real_free as u64) {
        // SAFETY: both are non-null size_t out-pointers the driver accepted.
        unsafe {
            free.write(s.free as usize);
            total.write(s.total as usize);
        }
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuDeviceTotalMem_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn device_total_mem(
    real: real::cuDeviceTotalMem_v2::Real,
    bytes: *mut usize,
    dev: i32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let rc = unsafe { real(bytes, dev) };
    if rc != CUDA_SUCCESS || bytes.is_null() {
        return rc;
    }
    let Ok(device) = usize::try_from(dev).map(crate::visibility::account) else {
        return rc;
    };
    // SAFETY: non-null, and the driver just wrote it.
    let real_total = unsafe { bytes.read() } as u64;
    if let Some(s) = limited(device, real_total, real_total) {
        // SAFETY: non-null size_t out-pointer the driver accepted.
        unsafe { bytes.write(s.total as usize) };
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_cap_is_the_total() {
        assert_eq!(
            slice(GIB, GIB / 4, 80 * GIB, 70 * GIB),
            Slice {
                total: GIB,
                free: 3 * GIB / 4
            }
        );
    }

    #[test]
    fn free_is_never_more_than_the_device_has() {
        assert_eq!(slice(GIB, 0, 80 * GIB, GIB / 2).free, GIB / 2);
    }

    #[test]
    fn a_cap_over_the_device_is_the_device() {
        assert_eq!(
            slice(100 * GIB, 0, 80 * GIB, 80 * GIB),
            Slice {
                total: 80 * GIB,
                free: 80 * GIB
            }
        );
    }

    #[test]
    fn usage_over_the_cap_leaves_nothing_free() {
        assert_eq!(slice(GIB, 2 * GIB, 80 * GIB, 70 * GIB).free, 0);
    }
}
