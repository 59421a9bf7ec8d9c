//! CUDA arrays and mipmapped arrays: opaque, formatted memory for textures and surfaces.
//! An array holds `width × height × depth` elements of its format, counted against its
//! device like any allocation; a plain array keeps its elements row after row, so that 2D
//! copies can reach them.

use crate::ffi::{code, write_out, CUresult, DriverResult};
use crate::model::driver;
use crate::model::memory::linear::current_device;
use crate::model::memory::{map_lazy, unmap};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

use tessera_cuda_abi::CUarray;
use tessera_cuda_abi::{
    CUDA_ARRAY3D_DESCRIPTOR as Array3dDescriptor, CUDA_ARRAY_DESCRIPTOR as ArrayDescriptor,
};

/// Bytes of one element of a `CUarray_format` with `channels` channels.
fn element_size(format: u32, channels: u32) -> Option<u64> {
    let per_channel = match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        // The normalized formats name their channel count; NumChannels must agree.
        0xc0..=0xcb => {
            let i = format - 0xc0;
            let (bytes, count) = ([1, 2, 1, 2][(i / 3) as usize], [1, 2, 4][(i % 3) as usize]);
            return (channels == count).then_some(bytes * count as u64);
        }
        _ => return None,
    };
    matches!(channels, 1 | 2 | 4).then_some(per_channel * channels as u64)
}

struct Array {
    desc: Array3dDescriptor,
    device: usize,
    /// Bytes counted against the device.
    bytes: u64,
    /// Where the elements are (plain arrays only; 0 for mipmapped ones).
    base: u64,
}

impl Array {
    fn row_bytes(&self) -> u64 {
        self.desc.width as u64 * element_size(self.desc.format, self.desc.num_channels).unwrap_or(0)
    }
    fn rows(&self) -> u64 {
        self.desc.height.max(1) as u64 * self.desc.depth.max(1) as u64
    }
}

#[derive(Default)]
struct Arrays {
    plain: HashMap<usize, Array>,
    mipmapped: HashMap<usize, Array>,
    next: usize,
}

static ARRAYS: Mutex<Option<Arrays>> = Mutex::new(None);

fn with_arrays<R>(f: impl FnOnce(&mut Arrays) -> R) -> R {
    let mut guard: MutexGuard<'_, Option<Arrays>> =
        ARRAYS.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(Arrays::default))
}

/// Where a plain array's elements are: (base, bytes per row, rows).
pub(super) fn layout(array: *mut c_void) -> Option<(u64, u64, u64)> {
    with_arrays(|a| {
        a.plain
            .get(&(array as usize))
            .map(|x| (x.base, x.row_bytes(), x.rows()))
    })
}

/// Counts and (for plain arrays) maps a new array; returns its handle.
fn create(desc: Array3dDescriptor, levels: u32, mipmapped: bool) -> Result<usize, CUresult> {
    let (device, _) = current_device()?;
    let elem =
        element_size(desc.format, desc.num_channels).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    if desc.width == 0 || (desc.height == 0 && desc.depth != 0) || levels == 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let mut bytes = 0u64;
    for level in 0..levels.min(64) {
        let dim = |d: usize| (d.max(1) as u64 >> level).max(1);
        let level_bytes = dim(desc.width)
            .checked_mul(dim(desc.height))
            .and_then(|v| v.checked_mul(dim(desc.depth)))
            .and_then(|v| v.checked_mul(elem))
            .ok_or(code::CUDA_ERROR_OUT_OF_MEMORY)?;
        bytes = bytes
            .checked_add(level_bytes)
            .ok_or(code::CUDA_ERROR_OUT_OF_MEMORY)?;
    }
    let process = driver::process()?;
    process
        .reserve_memory(device, bytes)
        .map_err(|_| code::CUDA_ERROR_OUT_OF_MEMORY)?;
    let base = if mipmapped {
        0
    } else {
        map_lazy(bytes).inspect_err(|_| process.release_memory(device, bytes))?
    };
    let array = Array {
        desc,
        device,
        bytes,
        base,
    };
    Ok(with_arrays(|a| {
        a.next += 1;
        let handle = 0x7e58_0000_0000 + a.next * 0x10;
        if mipmapped {
            a.mipmapped.insert(handle, array);
        } else {
            a.plain.insert(handle, array);
        }
        handle
    }))
}

fn destroy(handle: *mut c_void, mipmapped: bool) -> DriverResult {
    driver::process()?;
    let array = with_arrays(|a| {
        let map = if mipmapped {
            &mut a.mipmapped
        } else {
            &mut a.plain
        };
        map.remove(&(handle as usize))
    })
    .ok_or(code::CUDA_ERROR_INVALID_HANDLE)?;
    if array.base != 0 {
        // SAFETY: the array's elements were mapped by `create` and the handle is gone.
        unsafe { unmap(array.base, array.bytes) };
    }
    driver::process()?.release_memory(array.device, array.bytes);
    Ok(())
}

fn descriptor(handle: CUarray) -> Result<Array3dDescriptor, CUresult> {
    driver::process()?;
    with_arrays(|a| a.plain.get(&(handle as usize)).map(|x| x.desc))
        .ok_or(code::CUDA_ERROR_INVALID_HANDLE)
}

cuda_entry! {
    fn cuArrayCreate_v2(handle: *mut CUarray, desc: *const ArrayDescriptor) {
        driver::process()?;
        if handle.is_null() || desc.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: desc is non-null and points to a CUDA_ARRAY_DESCRIPTOR.
        let d = unsafe { desc.read() };
        let d3 = Array3dDescriptor {
            width: d.width,
            height: d.height,
            depth: 0,
            format: d.format,
            num_channels: d.num_channels,
            flags: 0,
        };
        let h = create(d3, 1, false)?;
        // SAFETY: handle is non-null and points to a CUarray.
        unsafe { write_out(handle, h as CUarray) }
    }

    fn cuArray3DCreate_v2(handle: *mut CUarray, desc: *const Array3dDescriptor) {
        driver::process()?;
        if handle.is_null() || desc.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: desc is non-null and points to a CUDA_ARRAY3D_DESCRIPTOR.
        let d = unsafe { desc.read() };
        let h = create(d, 1, false)?;
        // SAFETY: handle is non-null and points to a CUarray.
        unsafe { write_out(handle, h as CUarray) }
    }

    fn cuArrayGetDescriptor_v2(desc: *mut ArrayDescriptor, handle: CUarray) {
        let d = descriptor(handle)?;
        let d2 = ArrayDescriptor {
            width: d.width,
            height: d.height,
            format: d.format,
            num_channels: d.num_channels,
        };
        // SAFETY: desc is null or points to a CUDA_ARRAY_DESCRIPTOR.
        unsafe { write_out(desc, d2) }
    }

    fn cuArray3DGetDescriptor_v2(desc: *mut Array3dDescriptor, handle: CUarray) {
        let d = descriptor(handle)?;
        // SAFETY: desc is null or points to a CUDA_ARRAY3D_DESCRIPTOR.
        unsafe { write_out(desc, d) }
    }

    fn cuArrayDestroy(handle: CUarray) {
        destroy(handle, false)
    }

    fn cuMipmappedArrayCreate(handle: *mut *mut c_void, desc: *const Array3dDescriptor, num_levels: u32) {
        driver::process()?;
        if handle.is_null() || desc.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: desc is non-null and points to a CUDA_ARRAY3D_DESCRIPTOR.
        let d = unsafe { desc.read() };
        let h = create(d, num_levels, true)?;
        // SAFETY: handle is non-null and points to a CUmipmappedArray.
        unsafe { write_out(handle, h as *mut c_void) }
    }

    fn cuMipmappedArrayDestroy(handle: *mut c_void) {
        destroy(handle, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_sizes() {
        assert_eq!(element_size(0x01, 1), Some(1));
        assert_eq!(element_size(0x20, 4), Some(16));
        assert_eq!(element_size(0x10, 2), Some(4));
        assert_eq!(element_size(0x03, 3), None);
        assert_eq!(element_size(0xc2, 4), Some(4)); // UNORM_INT8X4
        assert_eq!(element_size(0xc5, 4), Some(8)); // UNORM_INT16X4
        assert_eq!(element_size(0xc5, 1), None);
        assert_eq!(element_size(0x77, 1), None);
    }
}
