//! Pointer attributes: what the driver knows of an address.

use crate::ffi::{code, CUdeviceptr, CUresult};
use crate::model::driver;
use crate::model::memory::registry::{self, Allocation, Kind};
use std::ffi::{c_int, c_void};

/// `CUmemorytype`.
const MEMORY_HOST: u32 = 1;
const MEMORY_DEVICE: u32 = 2;
/// `CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE`.
const ACCESS_READWRITE: c_int = 0;
/// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS`, the one attribute a program may set.
const SYNC_MEMOPS: c_int = 6;

/// An attribute's value, in the C type the attribute is declared with.
enum Value {
    Pointer(u64),
    U32(u32),
    I32(c_int),
    U64(u64),
    /// Written as one byte, the size of the C `bool` bindings declare these with.
    Bool(bool),
}

impl Value {
    /// # Safety
    /// `data` must be valid for a write of the value's type.
    unsafe fn write(self, data: *mut c_void) {
        // SAFETY: the caller guarantees data fits the type written.
        unsafe {
            match self {
                Value::Pointer(v) | Value::U64(v) => data.cast::<u64>().write(v),
                Value::U32(v) => data.cast::<u32>().write(v),
                Value::I32(v) => data.cast::<c_int>().write(v),
                Value::Bool(v) => data.cast::<u8>().write(v as u8),
            }
        }
    }
}

/// One attribute of the allocation `a` holding `ptr`, or of memory the driver does not know
/// (`a` None).
fn known_attribute(attr: c_int, ptr: u64, a: Option<&Allocation>) -> Result<Value, CUresult> {
    use Value::*;
    let v = match (attr, a) {
        (1, Some(a)) => Pointer(a.context as u64), // CONTEXT
        (2, Some(a)) => U32(if a.kind.on_device() {
            MEMORY_DEVICE
        } else {
            MEMORY_HOST
        }), // MEMORY_TYPE
        (3, Some(_)) => Pointer(ptr),              // DEVICE_POINTER
        (4, Some(a)) if !matches!(a.kind, Kind::Device | Kind::Pool(_) | Kind::Mapped(_)) => {
            Pointer(ptr)
        } // HOST_POINTER
        (5, _) => return Err(code::CUDA_ERROR_NOT_SUPPORTED), // P2P_TOKENS
        (6, Some(_)) => Bool(true),                // SYNC_MEMOPS
        (7, Some(a)) => U64(a.id),                 // BUFFER_ID
        (8, a) => Bool(a.is_some_and(|a| a.kind == Kind::Managed)), // IS_MANAGED
        (9, Some(a)) => I32(a.device as c_int),    // DEVICE_ORDINAL
        (10, _) => Bool(false),                    // IS_LEGACY_CUDA_IPC_CAPABLE
        (11, Some(a)) => Pointer(a.base),          // RANGE_START_ADDR
        (12, Some(a)) => U64(a.size),              // RANGE_SIZE
        (13, a) => Bool(a.is_some()),              // MAPPED
        (14, Some(_)) => U64(0),                   // ALLOWED_HANDLE_TYPES
        (15, _) => Bool(false),                    // IS_GPU_DIRECT_RDMA_CAPABLE
        (16, Some(_)) => I32(ACCESS_READWRITE),    // ACCESS_FLAGS
        (17, Some(a)) => Pointer(match a.kind {
            // MEMPOOL_HANDLE
            Kind::Pool(p) => p as u64,
            _ => 0,
        }),
        (18, Some(a)) => U64(a.size),     // MAPPING_SIZE
        (19, Some(a)) => Pointer(a.base), // MAPPING_BASE_ADDR
        (20, Some(a)) => U64(a.id),       // MEMORY_BLOCK_ID
        (21, _) => Bool(false),           // IS_HW_DECOMPRESS_CAPABLE
        _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
    };
    Ok(v)
}

/// What `cuPointerGetAttributes` reports for memory the driver does not know: zeros (and
/// ordinal -2), no error, so that programs can tell host pointers apart.
fn unknown_attribute(attr: c_int) -> Result<Value, CUresult> {
    use Value::*;
    let v = match attr {
        1 | 3 | 4 | 11 | 17 | 19 => Pointer(0),
        2 => U32(0),
        16 => I32(0),
        7 | 12 | 14 | 18 | 20 => U64(0),
        9 => I32(-2),
        5 => return Err(code::CUDA_ERROR_NOT_SUPPORTED),
        6 | 8 | 10 | 13 | 15 | 21 => Bool(false),
        _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
    };
    Ok(v)
}

cuda_entry! {
    fn cuPointerGetAttribute(data: *mut c_void, attribute: c_int, ptr: CUdeviceptr) {
        driver::process()?;
        if data.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let value = known_attribute(attribute, ptr, registry::read().find(ptr))?;
        // SAFETY: data is non-null and, by the contract, fits the attribute's type.
        unsafe { value.write(data) };
        Ok(())
    }

    fn cuPointerGetAttributes(count: u32, attributes: *const c_int, data: *mut *mut c_void, ptr: CUdeviceptr) {
        driver::process()?;
        if count > 0 && (attributes.is_null() || data.is_null()) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let reg = registry::read();
        let a = reg.find(ptr);
        for i in 0..count as usize {
            // SAFETY: both arrays hold `count` entries, by the contract.
            let (attr, out) = unsafe { (attributes.add(i).read(), data.add(i).read()) };
            if out.is_null() {
                continue;
            }
            let value = match a {
                Some(_) => known_attribute(attr, ptr, a)?,
                None => unknown_attribute(attr)?,
            };
            // SAFETY: each out fits its attribute's type, by the contract.
            unsafe { value.write(out) };
        }
        Ok(())
    }

    fn cuPointerSetAttribute(_value: *const c_void, attribute: c_int, ptr: CUdeviceptr) {
        driver::process()?;
        if attribute != SYNC_MEMOPS {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // Every copy here is already synchronous where the attribute asks it to be.
        registry::read().find(ptr).map(|_| ()).ok_or(code::CUDA_ERROR_INVALID_VALUE)
    }
}
