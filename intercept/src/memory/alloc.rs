//! `cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemAllocManaged` and `cuMemFree_v2`: linear
//! memory on the current context's device.

use super::registry::Key;
use super::{admit, counted, forget, record, Admit, Site};
use crate::hooks::real;
use tessera_cuda_abi::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};

/// Rows of a pitched allocation are reserved at this alignment before the driver says what
/// pitch it chose (the common one); the reservation is corrected to the real pitch after.
const PITCH_GUESS: u64 = 512;

/// # Safety
/// `real` is the driver's `cuMemAlloc_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_alloc(
    real: real::cuMemAlloc_v2::Real,
    dptr: *mut u64,
    bytes: usize,
) -> u32 {
    // SAFETY: the caller's arguments, passed on; the driver writes dptr on success.
    unsafe { counted(dptr, bytes as u64, || real(dptr, bytes)) }
}

/// # Safety
/// `real` is the driver's `cuMemAllocManaged`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_alloc_managed(
    real: real::cuMemAllocManaged::Real,
    dptr: *mut u64,
    bytes: usize,
    flags: u32,
) -> u32 {
    // SAFETY: as in `mem_alloc`.
    unsafe { counted(dptr, bytes as u64, || real(dptr, bytes, flags)) }
}

/// Bytes a pitched allocation is reserved with before the driver chooses the pitch.
pub(crate) fn pitch_estimate(width: usize, height: usize) -> u64 {
    let row = (width as u64)
        .div_ceil(PITCH_GUESS)
        .saturating_mul(PITCH_GUESS);
    row.saturating_mul(height as u64)
}

/// # Safety
/// `real` is the driver's `cuMemAllocPitch_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_alloc_pitch(
    real: real::cuMemAllocPitch_v2::Real,
    dptr: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: u32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let call = || unsafe { real(dptr, pitch, width, height, elem) };
    let Some(site) = Site::current().filter(|_| !dptr.is_null() && !pitch.is_null()) else {
        return call();
    };
    let (c, mut reservation) = match admit(site.device, pitch_estimate(width, height)) {
        Admit::Go(c, r) => (c, r),
        Admit::Uncounted => return call(),
        Admit::OverCap => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let rc = call();
    if rc != CUDA_SUCCESS {
        return rc;
    }
    // SAFETY: both out-pointers are non-null and the driver just wrote them.
    let (ptr, row) = unsafe { (dptr.read(), pitch.read()) };
    let bytes = (row as u64).saturating_mul(height as u64);
    if reservation.resize(bytes).is_err() {
        // The driver chose a wider pitch than we could reserve: undo the allocation.
        if let Some(free) = real::cuMemFree_v2::real() {
            // SAFETY: ptr is the allocation the driver has just made for us.
            unsafe { free(ptr) };
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    record(
        c,
        Key::Pointer(ptr),
        site.device,
        bytes,
        site.context,
        reservation,
    );
    rc
}

/// # Safety
/// `real` is the driver's `cuMemFree_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_free(real: real::cuMemFree_v2::Real, dptr: u64) -> u32 {
    if dptr == 0 {
        // SAFETY: the caller's argument, passed on.
        return unsafe { real(dptr) };
    }
    // SAFETY: the caller's argument, passed on.
    forget(Key::Pointer(dptr), || unsafe { real(dptr) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitch_estimate_rounds_rows_up() {
        assert_eq!(pitch_estimate(1, 1), 512);
        assert_eq!(pitch_estimate(512, 3), 1536);
        assert_eq!(pitch_estimate(513, 2), 2048);
        assert_eq!(pitch_estimate(0, 10), 0);
        assert_eq!(pitch_estimate(usize::MAX, usize::MAX), u64::MAX);
    }
}
