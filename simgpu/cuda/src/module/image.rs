//! Module images: PTX text, or a fat binary (or its wrapper) that carries PTX text. Machine
//! code (cubin, SASS) cannot run here: an image that has nothing but that is refused the way
//! a driver refuses code for another GPU.

use crate::ffi::{code, CUresult};
use std::ffi::{c_void, CStr};

/// `CUDA_ERROR_NO_BINARY_FOR_GPU`.
const NO_BINARY_FOR_GPU: CUresult = 209;

/// A fat binary starts with this (little-endian).
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// The wrapper that compilers emit around a fat binary.
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];

/// The PTX text of an image in memory.
///
/// # Safety
/// `image` must be null or point to an image as the driver API defines it: NUL-terminated
/// text, a fat binary, a fat binary wrapper, or an ELF image, readable for its whole size.
pub(crate) unsafe fn ptx_from_image(image: *const c_void) -> Result<String, CUresult> {
    if image.is_null() {
        return Err(code::INVALID_VALUE);
    }
    let p = image.cast::<u8>();
    // SAFETY: the image is readable up to its end, and every magic is checked byte by byte,
    // stopping at the first byte that differs (a text's NUL differs from every magic byte).
    let is = |magic: &[u8]| unsafe { starts_with(p, magic) };
    if is(&FATBIN_MAGIC.to_le_bytes()) {
        // SAFETY: a fat binary header is 16 bytes: magic, version, header size and the size
        // of what follows.
        let header = unsafe { p.cast::<[u8; 16]>().read_unaligned() };
        let header_size = u16::from_le_bytes([header[6], header[7]]) as usize;
        let body = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
        let total = header_size.saturating_add(body as usize);
        // SAFETY: the header says how long the fat binary is.
        let bytes = unsafe { std::slice::from_raw_parts(p, total) };
        ptx_in_binary(bytes)
    } else if is(&FATBIN_WRAPPER_MAGIC.to_le_bytes()) {
        // SAFETY: the wrapper is {magic: i32, version: i32, data: pointer, ...}.
        let data = unsafe { p.add(8).cast::<*const c_void>().read_unaligned() };
        if data.is_null() || data == image {
            return Err(code::INVALID_IMAGE);
        }
        // SAFETY: the wrapper's data is a fat binary.
        unsafe { ptx_from_image(data) }
    } else if is(&ELF_MAGIC) {
        Err(NO_BINARY_FOR_GPU)
    } else {
        // SAFETY: not a binary: NUL-terminated text.
        ptx_text(unsafe { CStr::from_ptr(p.cast()) }.to_bytes())
    }
}

/// Whether the bytes at `p` start with `magic`, reading no further than the first mismatch.
///
/// # Safety
/// `p` must be readable up to the first byte that differs from `magic`, or its length.
unsafe fn starts_with(p: *const u8, magic: &[u8]) -> bool {
    // SAFETY: each byte is read only after all the earlier ones matched.
    magic
        .iter()
        .enumerate()
        .all(|(i, m)| unsafe { p.add(i).read() } == *m)
}

/// The PTX text of an image read from a file.
pub(crate) fn ptx_from_file_bytes(bytes: &[u8]) -> Result<String, CUresult> {
    if bytes.starts_with(&ELF_MAGIC) {
        return Err(NO_BINARY_FOR_GPU);
    }
    if bytes.starts_with(&FATBIN_MAGIC.to_le_bytes()) {
        return ptx_in_binary(bytes);
    }
    let text = bytes.split(|b| *b == 0).next().unwrap_or_default();
    ptx_text(text)
}

/// Text that should be PTX.
fn ptx_text(text: &[u8]) -> Result<String, CUresult> {
    match std::str::from_utf8(text) {
        Ok(s) if s.contains(".version") || s.contains(".entry") || s.contains(".target") => {
            Ok(s.to_string())
        }
        Ok(s) if s.trim().is_empty() => Err(code::INVALID_IMAGE),
        Ok(_) => Err(code::INVALID_PTX),
        Err(_) => Err(code::INVALID_IMAGE),
    }
}

/// The first uncompressed PTX text a binary carries.
fn ptx_in_binary(bytes: &[u8]) -> Result<String, CUresult> {
    const VERSION: &[u8] = b".version";
    let mut from = 0;
    while let Some(at) = bytes[from..]
        .windows(VERSION.len())
        .position(|w| w == VERSION)
    {
        let start = from + at;
        let text = bytes[start..].split(|b| *b == 0).next().unwrap_or_default();
        if let Ok(s) = std::str::from_utf8(text) {
            if super::ptx::parse(s).is_ok() {
                return Ok(s.to_string());
            }
        }
        from = start + VERSION.len();
    }
    Err(NO_BINARY_FOR_GPU)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = ".version 7.0\n.target sm_70\n.entry k(.param .u64 a) { ret; }";

    #[test]
    fn text_images() {
        let text = format!("{PTX}\0");
        // SAFETY: NUL-terminated text.
        let got = unsafe { ptx_from_image(text.as_ptr().cast()) };
        assert_eq!(got.as_deref(), Ok(PTX));
        // SAFETY: NUL-terminated text.
        let got = unsafe { ptx_from_image(c"not ptx at all".as_ptr().cast()) };
        assert_eq!(got, Err(code::INVALID_PTX));
        // SAFETY: NUL-terminated text.
        let got = unsafe { ptx_from_image(c"".as_ptr().cast()) };
        assert_eq!(got, Err(code::INVALID_IMAGE));
        // SAFETY: null is allowed.
        let got = unsafe { ptx_from_image(std::ptr::null()) };
        assert_eq!(got, Err(code::INVALID_VALUE));
    }

    fn fatbin(payload: &[u8]) -> Vec<u8> {
        let mut b = FATBIN_MAGIC.to_le_bytes().to_vec();
        b.extend(1u16.to_le_bytes());
        b.extend(16u16.to_le_bytes());
        b.extend((payload.len() as u64).to_le_bytes());
        b.extend(payload);
        b
    }

    #[test]
    fn fat_binaries_with_and_without_ptx() {
        let mut payload = vec![1u8, 0, 0, 0, 7, 7];
        payload.extend(PTX.as_bytes());
        payload.extend([0, 0, 0]);
        let bin = fatbin(&payload);
        // SAFETY: a fat binary of the size its header says.
        let got = unsafe { ptx_from_image(bin.as_ptr().cast()) };
        assert_eq!(got.as_deref(), Ok(PTX));
        assert_eq!(ptx_from_file_bytes(&bin).as_deref(), Ok(PTX));

        let wrapper: [usize; 4] = [
            FATBIN_WRAPPER_MAGIC as usize | (1 << 32),
            bin.as_ptr() as usize,
            0,
            0,
        ];
        // SAFETY: a wrapper pointing at a fat binary.
        let got = unsafe { ptx_from_image(wrapper.as_ptr().cast()) };
        assert_eq!(got.as_deref(), Ok(PTX));

        let sass_only = fatbin(&[2, 0, 0, 0, 0x7f, b'E', b'L', b'F', 9, 9]);
        // SAFETY: as above.
        let got = unsafe { ptx_from_image(sass_only.as_ptr().cast()) };
        assert_eq!(got, Err(NO_BINARY_FOR_GPU));
        assert_eq!(
            ptx_from_file_bytes(b"\x7fELF\x02\x01"),
            Err(NO_BINARY_FOR_GPU)
        );
    }
}
