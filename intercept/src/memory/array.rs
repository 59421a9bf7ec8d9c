//! CUDA arrays: `cuArrayCreate_v2`, `cuArray3DCreate_v2` and mipmapped arrays count the
//! bytes of their elements (every level's, for mipmapped ones) on the current device;
//! their destroys give them back.

use super::registry::Key;
use super::{admit, forget, record, Admit, Site};
use crate::hooks::real;
use std::ffi::c_void;
use tessera_cuda_abi::{
    CUDA_ARRAY3D_CUBEMAP, CUDA_ARRAY3D_DESCRIPTOR as Descriptor3d, CUDA_ARRAY3D_LAYERED,
    CUDA_ARRAY_DESCRIPTOR as Descriptor,
};
use tessera_cuda_abi::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};

/// Layered and cube-map arrays: the depth counts layers or faces, which mipmap levels do not
/// shrink.
const LAYERS_NOT_DEPTH: u32 = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP;

/// A format we do not know is counted as the widest element there is (four 32-bit
/// channels), so that it can never slip past the cap.
const WIDEST_ELEMENT: u64 = 16;

/// Bytes of one element of `format` with `channels` channels.
pub(crate) fn element_bytes(format: u32, channels: u32) -> u64 {
    let channel = match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        // The normalized formats name their channel count: 8-bit unsigned (x1, x2, x4),
        // 16-bit unsigned, 8-bit signed, 16-bit signed.
        0xc0..=0xcb => {
            let i = format - 0xc0;
            return [1, 2, 1, 2][(i / 3) as usize] * [1, 2, 4][(i % 3) as usize];
        }
        _ => return WIDEST_ELEMENT,
    };
    match channels {
        1 | 2 | 4 => channel * u64::from(channels),
        _ => WIDEST_ELEMENT,
    }
}

/// Bytes of an array of `levels` mipmap levels (1 for a plain array); saturates, so that
/// an absurd descriptor is refused by the cap if the driver would accept it.
pub(crate) fn array_bytes(d: &Descriptor3d, levels: u32) -> u64 {
    let element = element_bytes(d.format, d.num_channels);
    let layered = d.flags & LAYERS_NOT_DEPTH != 0;
    let mut total = 0u64;
    // Past 64 levels every dimension is 1; the driver refuses that many anyway.
    for level in 0..levels.clamp(1, 64) {
        let shrink = |n: usize| ((n.max(1) as u64) >> level).max(1);
        let depth = if layered {
            d.depth.max(1) as u64
        } else {
            shrink(d.depth)
        };
        let bytes = shrink(d.width)
            .saturating_mul(shrink(d.height))
            .saturating_mul(depth)
            .saturating_mul(element);
        total = total.saturating_add(bytes);
    }
    total
}

/// Reserves `bytes` on the current device, lets `create` make the array and records the
/// handle it wrote to `arr` under `key`.
///
/// # Safety
/// `arr` is non-null and points to a handle that `create` writes on success.
unsafe fn counted(
    arr: *mut *mut c_void,
    key: fn(usize) -> Key,
    bytes: u64,
    create: impl FnOnce() -> u32,
) -> u32 {
    let Some(site) = Site::current() else {
        return create();
    };
    let (c, reservation) = match admit(site.device, bytes) {
        Admit::Go(c, r) => (c, r),
        Admit::Uncounted => return create(),
        Admit::OverCap => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let rc = create();
    if rc == CUDA_SUCCESS {
        // SAFETY: arr is non-null and the driver just wrote the new handle there.
        let handle = unsafe { arr.read() } as usize;
        record(
            c,
            key(handle),
            site.device,
            bytes,
            site.context,
            reservation,
        );
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuArrayCreate_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn array_create(
    real: real::cuArrayCreate_v2::Real,
    arr: *mut *mut c_void,
    desc: *const Descriptor,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let call = || unsafe { real(arr, desc) };
    if arr.is_null() || desc.is_null() {
        return call();
    }
    // SAFETY: non-null, a CUDA_ARRAY_DESCRIPTOR by the contract.
    let d = unsafe { desc.read_unaligned() };
    let d3 = Descriptor3d {
        width: d.width,
        height: d.height,
        depth: 0,
        format: d.format,
        num_channels: d.num_channels,
        flags: 0,
    };
    // SAFETY: arr is non-null and the driver writes the handle on success.
    unsafe { counted(arr, Key::Array, array_bytes(&d3, 1), call) }
}

/// # Safety
/// `real` is the driver's `cuArray3DCreate_v2`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn array3d_create(
    real: real::cuArray3DCreate_v2::Real,
    arr: *mut *mut c_void,
    desc: *const Descriptor3d,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let call = || unsafe { real(arr, desc) };
    if arr.is_null() || desc.is_null() {
        return call();
    }
    // SAFETY: non-null, a CUDA_ARRAY3D_DESCRIPTOR by the contract.
    let d = unsafe { desc.read_unaligned() };
    // SAFETY: arr is non-null and the driver writes the handle on success.
    unsafe { counted(arr, Key::Array, array_bytes(&d, 1), call) }
}

/// # Safety
/// `real` is the driver's `cuArrayDestroy`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn array_destroy(real: real::cuArrayDestroy::Real, arr: *mut c_void) -> u32 {
    // SAFETY: the caller's argument, passed on.
    forget(Key::Array(arr as usize), || unsafe { real(arr) })
}

/// # Safety
/// `real` is the driver's `cuMipmappedArrayCreate`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mipmapped_array_create(
    real: real::cuMipmappedArrayCreate::Real,
    arr: *mut *mut c_void,
    desc: *const Descriptor3d,
    levels: u32,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let call = || unsafe { real(arr, desc, levels) };
    if arr.is_null() || desc.is_null() || levels == 0 {
        return call();
    }
    // SAFETY: non-null, a CUDA_ARRAY3D_DESCRIPTOR by the contract.
    let d = unsafe { desc.read_unaligned() };
    // SAFETY: arr is non-null and the driver writes the handle on success.
    unsafe { counted(arr, Key::Mipmapped, array_bytes(&d, levels), call) }
}

/// # Safety
/// `real` is the driver's `cuMipmappedArrayDestroy`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mipmapped_array_destroy(
    real: real::cuMipmappedArrayDestroy::Real,
    arr: *mut c_void,
) -> u32 {
    // SAFETY: the caller's argument, passed on.
    forget(Key::Mipmapped(arr as usize), || unsafe { real(arr) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(width: usize, height: usize, depth: usize, format: u32, channels: u32) -> Descriptor3d {
        Descriptor3d {
            width,
            height,
            depth,
            format,
            num_channels: channels,
            flags: 0,
        }
    }

    #[test]
    fn element_sizes() {
        assert_eq!(element_bytes(0x01, 1), 1);
        assert_eq!(element_bytes(0x02, 2), 4);
        assert_eq!(element_bytes(0x20, 4), 16);
        assert_eq!(element_bytes(0x10, 1), 2);
        assert_eq!(element_bytes(0xc2, 4), 4); // UNORM_INT8X4
        assert_eq!(element_bytes(0xc5, 4), 8); // UNORM_INT16X4
        assert_eq!(element_bytes(0x20, 3), WIDEST_ELEMENT);
        assert_eq!(element_bytes(0x77, 1), WIDEST_ELEMENT);
    }

    #[test]
    fn zero_height_and_depth_count_as_one() {
        assert_eq!(array_bytes(&d(1000, 0, 0, 0x20, 1), 1), 4000);
        assert_eq!(array_bytes(&d(100, 10, 0, 0x01, 4), 1), 4000);
        assert_eq!(array_bytes(&d(64, 64, 8, 0x03, 2), 1), 64 * 64 * 8 * 8);
    }

    #[test]
    fn mipmapped_arrays_sum_their_levels() {
        // 8x8, 4x4, 2x2, 1x1 floats.
        assert_eq!(array_bytes(&d(8, 8, 0, 0x20, 1), 4), (64 + 16 + 4 + 1) * 4);
        // Levels past 1x1 stay 1x1.
        assert_eq!(array_bytes(&d(2, 1, 0, 0x01, 1), 4), 2 + 1 + 1 + 1);
        // A non-square 3D array shrinks each dimension to no less than 1.
        assert_eq!(array_bytes(&d(4, 2, 8, 0x01, 1), 3), 64 + 2 * 4 + 2);
    }

    #[test]
    fn layers_do_not_shrink() {
        let mut layered = d(8, 8, 6, 0x01, 1);
        layered.flags = 0x01;
        assert_eq!(array_bytes(&layered, 2), 6 * 64 + 6 * 16);
    }

    #[test]
    fn absurd_sizes_saturate() {
        assert_eq!(
            array_bytes(&d(usize::MAX, usize::MAX, 0, 0x20, 4), 1),
            u64::MAX
        );
    }
}
