//! Virtual memory management: `cuMemCreate` counts a device-located physical allocation on
//! its device; `cuMemRelease` gives it back. Address reservations and mappings cost no
//! device memory of their own.

use super::registry::Key;
use super::{admit, forget, record, Admit, OUT_OF_MEMORY, SUCCESS};
use std::ffi::c_void;

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: u32 = 1;

/// The start of `CUmemAllocationProp`: what decides where the memory lives.
#[repr(C)]
#[derive(Clone, Copy)]
struct PropHead {
    kind: u32,
    requested_handle_types: u32,
    location_kind: u32,
    location_id: i32,
}

/// The device a `CUmemAllocationProp` places its memory on; `None` for host memory (not
/// counted) or a null property (the driver refuses it).
///
/// # Safety
/// `prop` is null or points to a `CUmemAllocationProp`.
unsafe fn device_of(prop: *const c_void) -> Option<usize> {
    if prop.is_null() {
        return None;
    }
    // SAFETY: non-null, and by the contract a CUmemAllocationProp, which starts with these
    // four 32-bit fields; read unaligned in case the caller's struct is packed oddly.
    let head = unsafe { prop.cast::<PropHead>().read_unaligned() };
    if head.location_kind != LOCATION_DEVICE {
        return None;
    }
    usize::try_from(head.location_id).ok()
}

/// # Safety
/// `real` is the driver's `cuMemCreate`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_create(
    real: unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> u32,
    handle: *mut u64,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let call = || unsafe { real(handle, size, prop, flags) };
    // SAFETY: prop is the caller's, null or a CUmemAllocationProp by the contract.
    let device = unsafe { device_of(prop) };
    let Some(device) = device.filter(|_| !handle.is_null()) else {
        return call();
    };
    let (c, reservation) = match admit(device, size as u64) {
        Admit::Go(c, r) => (c, r),
        Admit::Uncounted => return call(),
        Admit::OverCap => return OUT_OF_MEMORY,
    };
    let rc = call();
    if rc == SUCCESS {
        // SAFETY: handle is non-null and the driver just wrote the new handle there.
        let h = unsafe { handle.read() };
        // Not tied to a context: physical allocations outlive the context that made them.
        record(c, Key::Physical(h), device, size as u64, 0, reservation);
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuMemRelease`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_release(real: unsafe extern "C" fn(u64) -> u32, handle: u64) -> u32 {
    // SAFETY: the caller's argument, passed on.
    forget(Key::Physical(handle), || unsafe { real(handle) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    struct Prop {
        kind: u32,
        handle_types: u32,
        location_kind: u32,
        location_id: i32,
        win32: *mut c_void,
        flags: [u8; 8],
    }

    fn prop(location_kind: u32, id: i32) -> Prop {
        Prop {
            kind: 1,
            handle_types: 0,
            location_kind,
            location_id: id,
            win32: std::ptr::null_mut(),
            flags: [0; 8],
        }
    }

    #[test]
    fn device_located_memory_names_its_device() {
        let p = prop(LOCATION_DEVICE, 3);
        // SAFETY: a valid property on the stack.
        assert_eq!(unsafe { device_of((&p as *const Prop).cast()) }, Some(3));
    }

    #[test]
    fn host_memory_and_null_are_not_counted() {
        let p = prop(2, 0);
        // SAFETY: a valid property on the stack; null is allowed.
        unsafe {
            assert_eq!(device_of((&p as *const Prop).cast()), None);
            assert_eq!(device_of(std::ptr::null()), None);
        }
        let p = prop(LOCATION_DEVICE, -1);
        // SAFETY: as above.
        assert_eq!(unsafe { device_of((&p as *const Prop).cast()) }, None);
    }
}
