//! The driver's types. Handles are the driver's opaque pointers and plain integers are the
//! C integer types, as type aliases, so that a value crosses between this crate's users and
//! C with no conversion at all; the structures are `#[repr(C)]` with the driver's layout.

#![allow(non_camel_case_types)] // the driver's own names

use core::ffi::{c_int, c_void};

/// A device ordinal (`CUdevice`, a C `int`).
pub type CUdevice = c_int;
/// A device address (`CUdeviceptr`, 64 bits on every 64-bit platform).
pub type CUdeviceptr = u64;
/// A physical allocation of the virtual memory management API.
pub type CUmemGenericAllocationHandle = u64;
/// A device's 16-byte UUID (`CUuuid`, a struct of one `char[16]`: same layout).
pub type CUuuid = [u8; 16];

/// A context.
pub type CUcontext = *mut c_void;
/// A module.
pub type CUmodule = *mut c_void;
/// A kernel of a module.
pub type CUfunction = *mut c_void;
/// A library (context-independent module, CUDA 12).
pub type CUlibrary = *mut c_void;
/// A kernel of a library.
pub type CUkernel = *mut c_void;
/// A stream; null is the default stream the entry point's flavour names, see
/// [`CU_STREAM_LEGACY`] and [`CU_STREAM_PER_THREAD`].
pub type CUstream = *mut c_void;
/// An event.
pub type CUevent = *mut c_void;
/// A graph.
pub type CUgraph = *mut c_void;
/// A node of a graph.
pub type CUgraphNode = *mut c_void;
/// An instantiated graph.
pub type CUgraphExec = *mut c_void;
/// A memory pool.
pub type CUmemoryPool = *mut c_void;
/// A CUDA array.
pub type CUarray = *mut c_void;
/// A mipmapped CUDA array.
pub type CUmipmappedArray = *mut c_void;
/// A pending link of JIT inputs.
pub type CUlinkState = *mut c_void;

/// The legacy default stream, as a handle any entry point accepts.
pub const CU_STREAM_LEGACY: usize = 0x1;
/// The calling thread's per-thread default stream, as a handle any entry point accepts.
pub const CU_STREAM_PER_THREAD: usize = 0x2;

/// `CU_MEM_LOCATION_TYPE_DEVICE`: a [`CUmemLocation`] whose id is a device ordinal.
pub const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;

/// `CUDA_ARRAY3D_LAYERED`: the depth counts layers.
pub const CUDA_ARRAY3D_LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_CUBEMAP`: the depth counts cube faces.
pub const CUDA_ARRAY3D_CUBEMAP: u32 = 0x04;

/// `CUDA_ARRAY_DESCRIPTOR` (the `_v2` one, with `size_t` extents).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUDA_ARRAY_DESCRIPTOR {
    pub width: usize,
    pub height: usize,
    /// A `CUarray_format`.
    pub format: u32,
    pub num_channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (the `_v2` one).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUDA_ARRAY3D_DESCRIPTOR {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    /// A `CUarray_format`.
    pub format: u32,
    pub num_channels: u32,
    /// `CUDA_ARRAY3D_*` flags.
    pub flags: u32,
}

/// `CUmemLocation`: a kind (`CU_MEM_LOCATION_TYPE_*`) and an id within it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CUmemLocation {
    pub kind: u32,
    pub id: c_int,
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUmemAllocationProp {
    /// `CUmemAllocationType`.
    pub kind: u32,
    /// `CUmemAllocationHandleType` flags.
    pub requested_handle_types: u32,
    pub location: CUmemLocation,
    /// Windows only; never dereferenced on Linux.
    pub win32_handle_meta_data: *mut c_void,
    /// `allocFlags`: compression type, GPU-direct-RDMA capability, usage, reserved bytes.
    pub alloc_flags: [u8; 8],
}

// SAFETY: the only pointer, the Windows metadata, is never dereferenced on Linux; it is an
// opaque value that is only ever handed back as it came.
unsafe impl Send for CUmemAllocationProp {}

/// `CUlaunchAttribute`: an id (`CUlaunchAttributeID`) and a 64-byte value, 8-byte aligned.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUlaunchAttribute {
    pub id: u32,
    pub pad: [u8; 4],
    pub value: [u64; 8],
}

impl CUlaunchAttribute {
    /// The value's `i`th 32-bit word (dimensions and most scalars are 32-bit words), in the
    /// platform's byte order, as C reads the union.
    pub const fn word(&self, i: usize) -> u32 {
        let v = self.value[i / 2];
        let half = if cfg!(target_endian = "little") {
            i % 2
        } else {
            1 - i % 2
        };
        (v >> (32 * half)) as u32
    }
}

/// `CUlaunchConfig`: grid and block dimensions, dynamic shared memory, stream, attributes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUlaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub stream: CUstream,
    pub attrs: *const CUlaunchAttribute,
    pub num_attrs: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    #[test]
    fn layouts_are_the_drivers() {
        assert_eq!(size_of::<CUDA_ARRAY_DESCRIPTOR>(), 24);
        assert_eq!(size_of::<CUDA_ARRAY3D_DESCRIPTOR>(), 40);
        assert_eq!(size_of::<CUmemLocation>(), 8);
        assert_eq!(size_of::<CUmemAllocationProp>(), 32);
        assert_eq!(offset_of!(CUmemAllocationProp, location), 8);
        assert_eq!(size_of::<CUlaunchAttribute>(), 72);
        assert_eq!(align_of::<CUlaunchAttribute>(), 8);
        assert_eq!(offset_of!(CUlaunchConfig, stream), 32);
        assert_eq!(size_of::<CUlaunchConfig>(), 56);
    }

    #[test]
    fn attribute_words_read_like_the_union() {
        let mut a = CUlaunchAttribute {
            id: 4,
            pad: [0; 4],
            value: [0; 8],
        };
        let words: [u32; 3] = [2, 3, 5];
        // SAFETY: 12 bytes into the 64-byte value, both plain integers.
        unsafe {
            core::ptr::copy_nonoverlapping(words.as_ptr(), a.value.as_mut_ptr().cast::<u32>(), 3)
        };
        assert_eq!([a.word(0), a.word(1), a.word(2)], words);
    }
}
