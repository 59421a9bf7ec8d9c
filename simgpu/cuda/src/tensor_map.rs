//! Tensor maps (`cuTensorMapEncodeTiled`, `cuTensorMapReplaceAddress`): the 128-byte
//! descriptors through which Hopper's and later GPUs' tensor memory accelerator copies tiles.
//! cuBLASLt and cuSPARSELt look the encoder up when they load and build descriptors for their
//! kernels. The driver's checks of the arguments are made here as its documentation states
//! them; the descriptor's content is this driver's own (kernels are not computed here, so
//! nothing but `cuTensorMapReplaceAddress` reads it).

use crate::ffi::{code, CUresult, DriverResult};
use std::ffi::c_void;

/// A `CUtensorMap`: 128 bytes, aligned to 64.
#[repr(C, align(64))]
pub struct TensorMap {
    words: [u64; 16],
}

/// The most dimensions a tensor map has.
const MAX_RANK: u32 = 5;
/// Each global dimension is at most 2^32 elements.
const MAX_GLOBAL_DIM: u64 = 1 << 32;
/// Global strides are multiples of 16 bytes and below 2^40.
const STRIDE_ALIGN: u64 = 16;
const MAX_STRIDE: u64 = 1 << 40;
/// A box is at most 256 elements along each dimension.
const MAX_BOX_DIM: u32 = 256;
/// The largest element stride.
const MAX_ELEMENT_STRIDE: u32 = 8;
/// `CU_TENSOR_MAP_INTERLEAVE_*`: none, 16 bytes, 32 bytes.
const INTERLEAVE_NONE: u32 = 0;
const INTERLEAVE_32B: u32 = 2;
/// `CU_TENSOR_MAP_SWIZZLE_*`: none, 32, 64, 128 bytes, and the 128-byte swizzles with 32-
/// and 64-byte atoms (CUDA 12.8).
const SWIZZLE_LAST: u32 = 6;
/// `CU_TENSOR_MAP_L2_PROMOTION_*`: none, 64, 128, 256 bytes.
const L2_PROMOTION_LAST: u32 = 3;
/// `CU_TENSOR_MAP_FLOAT_OOB_FILL_*`: none, NaN as a request to zero.
const OOB_FILL_LAST: u32 = 1;

/// Bytes per element of each `CUtensorMapDataType` (uint8 … tfloat32_ftz), or `None` for the
/// packed 4- and 6-bit types of CUDA 12.8 (13 … 15), whose rows the hardware packs itself.
fn element_bytes(data_type: u32) -> Result<Option<u64>, CUresult> {
    const BYTES: [u64; 13] = [1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4];
    match data_type {
        t if (t as usize) < BYTES.len() => Ok(Some(BYTES[t as usize])),
        13..=15 => Ok(None),
        _ => Err(code::CUDA_ERROR_INVALID_VALUE),
    }
}

/// The span, in bytes, that a swizzle mode permutes within (0 for none).
fn swizzle_span(swizzle: u32) -> u64 {
    match swizzle {
        0 => 0,
        1 => 32,
        2 => 64,
        _ => 128,
    }
}

/// The arguments of `cuTensorMapEncodeTiled`, read from the caller's arrays.
struct Tiled {
    data_type: u32,
    address: u64,
    dims: Vec<u64>,
    strides: Vec<u64>,
    boxes: Vec<u32>,
    element_strides: Vec<u32>,
    interleave: u32,
    swizzle: u32,
    l2_promotion: u32,
    oob_fill: u32,
}

/// The alignment the global address needs under `interleave`.
fn address_align(interleave: u32) -> u64 {
    if interleave == INTERLEAVE_32B {
        32
    } else {
        16
    }
}

impl Tiled {
    /// The checks the driver documents for each argument.
    fn check(&self) -> DriverResult {
        let bytes = element_bytes(self.data_type)?;
        let rank = self.dims.len() as u32;
        let ok_rank = (1..=MAX_RANK).contains(&rank)
            && (self.interleave == INTERLEAVE_NONE || rank >= 3)
            && self.interleave <= INTERLEAVE_32B;
        let ok_modes = self.swizzle <= SWIZZLE_LAST
            && self.l2_promotion <= L2_PROMOTION_LAST
            && self.oob_fill <= OOB_FILL_LAST;
        let stride_align = if self.interleave == INTERLEAVE_32B {
            32
        } else {
            STRIDE_ALIGN
        };
        let ok_address =
            self.address != 0 && self.address.is_multiple_of(address_align(self.interleave));
        let ok_dims = self.dims.iter().all(|&d| (1..=MAX_GLOBAL_DIM).contains(&d));
        let ok_strides = self
            .strides
            .iter()
            .all(|&s| s.is_multiple_of(stride_align) && s < MAX_STRIDE);
        let ok_boxes = self.boxes.iter().all(|&b| (1..=MAX_BOX_DIM).contains(&b));
        let ok_element_strides = self
            .element_strides
            .iter()
            .all(|&e| (1..=MAX_ELEMENT_STRIDE).contains(&e));
        // Without interleave, a box's inner row is whole 16-byte units and, when swizzled,
        // fits the swizzle's span.
        let ok_inner = match (self.interleave, bytes) {
            (INTERLEAVE_NONE, Some(b)) => {
                let inner = u64::from(self.boxes[0]) * b;
                let span = swizzle_span(self.swizzle);
                inner.is_multiple_of(16) && (span == 0 || inner <= span)
            }
            _ => true,
        };
        if ok_rank
            && ok_modes
            && ok_address
            && ok_dims
            && ok_strides
            && ok_boxes
            && ok_element_strides
            && ok_inner
        {
            Ok(())
        } else {
            Err(code::CUDA_ERROR_INVALID_VALUE)
        }
    }

    /// This driver's descriptor: the address, then each dimension's size, stride, box and
    /// element stride, then the modes.
    fn encode(&self) -> TensorMap {
        let mut words = [0u64; 16];
        words[0] = self.address;
        for (i, &d) in self.dims.iter().enumerate() {
            words[1 + i] = d;
        }
        for (i, &s) in self.strides.iter().enumerate() {
            words[6 + i] = s;
        }
        for (i, (&b, &e)) in self.boxes.iter().zip(&self.element_strides).enumerate() {
            words[10 + i] = u64::from(b) | u64::from(e) << 32;
        }
        words[15] = u64::from(self.data_type)
            | u64::from(self.dims.len() as u32) << 8
            | u64::from(self.interleave) << 16
            | u64::from(self.swizzle) << 24
            | u64::from(self.l2_promotion) << 32
            | u64::from(self.oob_fill) << 40;
        TensorMap { words }
    }
}

/// Reads `n` values from a caller's array.
///
/// # Safety
/// `p` must be null or point to `n` values.
unsafe fn array<T: Copy>(p: *const T, n: usize) -> Result<Vec<T>, CUresult> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null and holding n values, by the contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

/// Checks a descriptor's place: non-null and aligned to 64 bytes.
fn place(map: *mut TensorMap) -> DriverResult {
    if map.is_null() || !(map as usize).is_multiple_of(std::mem::align_of::<TensorMap>()) {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

cuda_entry! {
    fn cuTensorMapEncodeTiled(
        map: *mut TensorMap,
        data_type: u32,
        rank: u32,
        address: *mut c_void,
        dims: *const u64,
        strides: *const u64,
        boxes: *const u32,
        element_strides: *const u32,
        interleave: u32,
        swizzle: u32,
        l2_promotion: u32,
        oob_fill: u32,
    ) {
        place(map)?;
        if !(1..=MAX_RANK).contains(&rank) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let n = rank as usize;
        // SAFETY: the caller passes `rank` dimension sizes, by the contract.
        let dims = unsafe { array(dims, n) }?;
        // SAFETY: and `rank - 1` strides (the innermost is the element's size).
        let strides = unsafe { array(strides, n - 1) }?;
        // SAFETY: and `rank` box sizes.
        let boxes = unsafe { array(boxes, n) }?;
        // SAFETY: and `rank` element strides.
        let element_strides = unsafe { array(element_strides, n) }?;
        let tiled = Tiled {
            data_type,
            address: address as u64,
            dims,
            strides,
            boxes,
            element_strides,
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        };
        tiled.check()?;
        // SAFETY: checked non-null and aligned; the caller provides a CUtensorMap to write.
        unsafe { map.write(tiled.encode()) };
        Ok(())
    }

    /// Points an encoded descriptor at another tensor of the same shape.
    fn cuTensorMapReplaceAddress(map: *mut TensorMap, address: *mut c_void) {
        place(map)?;
        // SAFETY: checked non-null and aligned; the caller passes a descriptor it encoded.
        let mut encoded = unsafe { map.read() };
        let interleave = ((encoded.words[15] >> 16) & 0xff) as u32;
        let address = address as u64;
        if address == 0 || !address.is_multiple_of(address_align(interleave)) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        encoded.words[0] = address;
        // SAFETY: as above, for a write.
        unsafe { map.write(encoded) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiled() -> Tiled {
        // A 1024 x 512 half-precision matrix, rows 2 KiB apart, in 64 x 128 boxes.
        Tiled {
            data_type: 6,
            address: 0x7f00_0000_0000,
            dims: vec![1024, 512],
            strides: vec![2048],
            boxes: vec![64, 128],
            element_strides: vec![1, 1],
            interleave: 0,
            swizzle: 3,
            l2_promotion: 2,
            oob_fill: 0,
        }
    }

    #[test]
    fn a_well_formed_map_encodes_its_arguments() {
        let t = tiled();
        assert_eq!(t.check(), Ok(()));
        let m = t.encode();
        assert_eq!(m.words[0], 0x7f00_0000_0000);
        assert_eq!(&m.words[1..3], &[1024, 512]);
        assert_eq!(m.words[6], 2048);
        assert_eq!(m.words[10], 64 | 1 << 32);
    }

    #[test]
    fn the_documented_limits_are_refused() {
        let bad: [fn(&mut Tiled); 9] = [
            |t| t.address += 8,           // address not 16-byte aligned
            |t| t.strides[0] = 2056,      // stride not a multiple of 16
            |t| t.dims[1] = 0,            // empty dimension
            |t| t.boxes[1] = 257,         // box over 256
            |t| t.element_strides[0] = 9, // element stride over 8
            |t| t.boxes[0] = 4,           // inner box row of 8 bytes
            |t| t.swizzle = 1,            // 128-byte row beyond a 32-byte swizzle
            |t| t.interleave = 1,         // interleave needs rank 3 or more
            |t| t.data_type = 16,         // no such type
        ];
        for (i, spoil) in bad.iter().enumerate() {
            let mut t = tiled();
            spoil(&mut t);
            assert_eq!(t.check(), Err(code::CUDA_ERROR_INVALID_VALUE), "case {i}");
        }
    }
}
