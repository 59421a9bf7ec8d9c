//! Module images, as the driver API takes them: PTX text, a cubin (ELF machine code for one
//! architecture), or a fat binary (or the wrapper compilers emit around one) holding PTX and
//! cubins for several architectures. As a driver does, a fat binary's cubin for the device's
//! architecture is taken first, then its PTX for an architecture the device has; an image
//! with neither is refused with `CUDA_ERROR_NO_BINARY_FOR_GPU`, and so is a cubin for another
//! architecture.
//!
//! A fat binary: a 16-byte header (magic, version, header size, the size of what follows),
//! then files, each a header — kind (1: PTX, 2: cubin) at 0, its header size at 4, its
//! padded size at 8 (the next file follows after both), its payload size at 16, its
//! architecture (`sm_<n>` as `n`) at 28, flags at 40 (0x2000: LZ4-compressed, 0x8000:
//! zstd-compressed), the size decompressed at 56 — then the payload.

use super::cubin::{self, Arch, Cubin, ANY_DEVICE};
use super::lz4;
use crate::ffi::{code, CUresult};
use std::ffi::{c_void, CStr};

/// `CUDA_ERROR_NO_BINARY_FOR_GPU`.
pub(crate) const NO_BINARY_FOR_GPU: CUresult = 209;

/// A fat binary starts with this (little-endian).
const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// The wrapper that compilers emit around a fat binary.
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// Fat binary file kinds.
const FILE_PTX: u16 = 1;
const FILE_CUBIN: u16 = 2;
/// The fat binary file flag of an LZ4-compressed payload.
const FILE_LZ4: u64 = 0x2000;
/// The fat binary file flag of a zstd-compressed payload.
const FILE_ZSTD: u64 = 0x8000;

/// The code a module is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Code {
    Ptx(String),
    Sass(Cubin),
}

/// The code of an image in memory, for a device of compute capability `cc`.
///
/// # Safety
/// `image` must be null or point to an image as the driver API defines it: NUL-terminated
/// text, a fat binary, a fat binary wrapper, or an ELF image, readable for its whole size.
pub(crate) unsafe fn code_from_image(
    image: *const c_void,
    cc: (u32, u32),
) -> Result<Code, CUresult> {
    if image.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
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
        code_in_fat_binary(bytes, cc)
    } else if is(&FATBIN_WRAPPER_MAGIC.to_le_bytes()) {
        // SAFETY: the wrapper is {magic: i32, version: i32, data: pointer, ...}.
        let data = unsafe { p.add(8).cast::<*const c_void>().read_unaligned() };
        if data.is_null() || data == image {
            return Err(code::CUDA_ERROR_INVALID_IMAGE);
        }
        // SAFETY: the wrapper's data is a fat binary.
        unsafe { code_from_image(data, cc) }
    } else if is(&ELF_MAGIC) {
        // SAFETY: an ELF image starts with its 64-byte header.
        let header = unsafe { p.cast::<[u8; 64]>().read_unaligned() };
        // SAFETY: the header places the section header table inside the image.
        let table =
            |at: usize, n: usize| unsafe { std::slice::from_raw_parts(p.add(at), n) }.to_vec();
        let len = cubin::image_len(&header, table).map_err(|_| code::CUDA_ERROR_INVALID_IMAGE)?;
        // SAFETY: the image spans its sections and section header table.
        sass(unsafe { std::slice::from_raw_parts(p, len) }, cc)
    } else {
        // SAFETY: not a binary: NUL-terminated text.
        ptx_text(unsafe { CStr::from_ptr(p.cast()) }.to_bytes()).map(Code::Ptx)
    }
}

/// Like [`code_from_image`], and where the image has no code for the device, the code it has
/// for another (its kernels known by name): with whether the code runs on the device.
///
/// # Safety
/// As for [`code_from_image`].
pub(crate) unsafe fn lazy_code_from_image(
    image: *const c_void,
    cc: (u32, u32),
) -> Result<(Code, bool), CUresult> {
    // SAFETY: the caller's image, as the driver API defines it.
    match unsafe { code_from_image(image, cc) } {
        Ok(code) => Ok((code, true)),
        // SAFETY: as above; any device will do for what is read of it.
        Err(NO_BINARY_FOR_GPU) => unsafe { code_from_image(image, ANY_DEVICE) }.map(|c| (c, false)),
        Err(e) => Err(e),
    }
}

/// [`lazy_code_from_image`] for an image in a file.
pub(crate) fn lazy_code_from_bytes(bytes: &[u8], cc: (u32, u32)) -> Result<(Code, bool), CUresult> {
    match code_from_bytes(bytes, cc) {
        Ok(code) => Ok((code, true)),
        Err(NO_BINARY_FOR_GPU) => code_from_bytes(bytes, ANY_DEVICE).map(|c| (c, false)),
        Err(e) => Err(e),
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

/// The code of an image read from a file (or handed over with its size), for a device of
/// compute capability `cc`.
pub(crate) fn code_from_bytes(bytes: &[u8], cc: (u32, u32)) -> Result<Code, CUresult> {
    if bytes.starts_with(&ELF_MAGIC) {
        return sass(bytes, cc);
    }
    if bytes.starts_with(&FATBIN_MAGIC.to_le_bytes()) {
        return code_in_fat_binary(bytes, cc);
    }
    let text = bytes.split(|b| *b == 0).next().unwrap_or_default();
    ptx_text(text).map(Code::Ptx)
}

/// A cubin, if it runs on the device.
fn sass(bytes: &[u8], cc: (u32, u32)) -> Result<Code, CUresult> {
    let cubin = cubin::parse(bytes).map_err(|_| code::CUDA_ERROR_INVALID_IMAGE)?;
    if !cubin.arch.runs_on(cc) {
        return Err(NO_BINARY_FOR_GPU);
    }
    Ok(Code::Sass(cubin))
}

/// Text that should be PTX.
fn ptx_text(text: &[u8]) -> Result<String, CUresult> {
    match std::str::from_utf8(text) {
        Ok(s) if s.contains(".version") || s.contains(".entry") || s.contains(".target") => {
            Ok(s.to_string())
        }
        Ok(s) if s.trim().is_empty() => Err(code::CUDA_ERROR_INVALID_IMAGE),
        Ok(_) => Err(code::CUDA_ERROR_INVALID_PTX),
        Err(_) => Err(code::CUDA_ERROR_INVALID_IMAGE),
    }
}

/// One file of a fat binary.
struct FatFile<'a> {
    kind: u16,
    arch: u32,
    flags: u64,
    payload: &'a [u8],
    uncompressed: usize,
}

impl FatFile<'_> {
    /// Its contents, decompressed; `None` if they cannot be read.
    fn contents(&self) -> Option<Vec<u8>> {
        if self.flags & FILE_ZSTD != 0 {
            let mut out = vec![0u8; self.uncompressed];
            let n = ruzstd::decoding::FrameDecoder::new()
                .decode_all(self.payload, &mut out)
                .ok()?;
            out.truncate(n);
            return Some(out);
        }
        if self.flags & FILE_LZ4 != 0 {
            return lz4::decompress(self.payload, self.uncompressed);
        }
        Some(self.payload.to_vec())
    }
}

/// The files of a fat binary; `None` if its layout is broken.
fn fat_files(bytes: &[u8]) -> Option<Vec<FatFile<'_>>> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let header_size = usize::from(u16_at(6)?);
    let end = header_size.checked_add(usize::try_from(u64_at(8)?).ok()?)?;
    let end = end.min(bytes.len());
    let mut at = header_size;
    let mut files = Vec::new();
    while at + 64 <= end {
        let kind = u16_at(at)?;
        let file_header = u32_at(at + 4)? as usize;
        let padded = usize::try_from(u64_at(at + 8)?).ok()?;
        let payload_size = u32_at(at + 16)? as usize;
        let start = at.checked_add(file_header)?;
        files.push(FatFile {
            kind,
            arch: u32_at(at + 28)?,
            flags: u64_at(at + 40)?,
            payload: bytes.get(start..start.checked_add(payload_size)?)?,
            uncompressed: usize::try_from(u64_at(at + 56)?).ok()?,
        });
        let next = start.checked_add(padded)?;
        if next <= at {
            return None;
        }
        at = next;
    }
    Some(files)
}

/// What a fat binary holds for the device: its cubin for the device's architecture (the
/// latest that runs there), else its PTX for the latest architecture the device has.
fn code_in_fat_binary(bytes: &[u8], cc: (u32, u32)) -> Result<Code, CUresult> {
    let Some(files) = fat_files(bytes) else {
        return ptx_in_binary(bytes).map(Code::Ptx);
    };
    let mut cubins: Vec<&FatFile<'_>> = files
        .iter()
        .filter(|f| f.kind == FILE_CUBIN && Arch::of_number(f.arch, false).runs_on(cc))
        .collect();
    cubins.sort_by_key(|f| std::cmp::Reverse(f.arch));
    for f in cubins {
        if let Some(Ok(code)) = f.contents().map(|c| sass(&c, cc)) {
            return Ok(code);
        }
    }
    let device = cc.0.saturating_mul(10).saturating_add(cc.1);
    let mut ptx: Vec<&FatFile<'_>> = files
        .iter()
        .filter(|f| f.kind == FILE_PTX && f.arch <= device)
        .collect();
    ptx.sort_by_key(|f| std::cmp::Reverse(f.arch));
    for f in ptx {
        let Some(contents) = f.contents() else {
            continue;
        };
        let text = contents.split(|b| *b == 0).next().unwrap_or_default();
        if let Ok(s) = std::str::from_utf8(text) {
            if super::ptx::parse(s).is_ok() {
                return Ok(Code::Ptx(s.to_string()));
            }
        }
    }
    Err(NO_BINARY_FOR_GPU)
}

/// The first uncompressed PTX text a binary carries, for fat binaries whose file headers
/// cannot be read.
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
    use super::super::ptx::{Entry, Param};
    use super::*;

    const PTX: &str = ".version 7.0\n.target sm_70\n.entry k(.param .u64 a) { ret; }";
    const A100: (u32, u32) = (8, 0);

    fn ptx(code: Result<Code, CUresult>) -> Result<String, CUresult> {
        code.map(|c| match c {
            Code::Ptx(s) => s,
            Code::Sass(c) => panic!("expected PTX, got {c:?}"),
        })
    }

    #[test]
    fn text_images() {
        let text = format!("{PTX}\0");
        // SAFETY: NUL-terminated text.
        let got = unsafe { code_from_image(text.as_ptr().cast(), A100) };
        assert_eq!(ptx(got).as_deref(), Ok(PTX));
        // SAFETY: NUL-terminated text.
        let got = unsafe { code_from_image(c"not ptx at all".as_ptr().cast(), A100) };
        assert_eq!(got, Err(code::CUDA_ERROR_INVALID_PTX));
        // SAFETY: NUL-terminated text.
        let got = unsafe { code_from_image(c"".as_ptr().cast(), A100) };
        assert_eq!(got, Err(code::CUDA_ERROR_INVALID_IMAGE));
        // SAFETY: null is allowed.
        let got = unsafe { code_from_image(std::ptr::null(), A100) };
        assert_eq!(got, Err(code::CUDA_ERROR_INVALID_VALUE));
    }

    /// A fat binary of `(kind, arch, flags, payload, uncompressed size)` files.
    fn fatbin(files: &[(u16, u32, u64, Vec<u8>, usize)]) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, flags, payload, uncompressed) in files {
            let padded = payload.len().next_multiple_of(8);
            let mut h = [0u8; 64];
            h[0..2].copy_from_slice(&kind.to_le_bytes());
            h[4..8].copy_from_slice(&64u32.to_le_bytes());
            h[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
            h[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
            h[28..32].copy_from_slice(&arch.to_le_bytes());
            h[40..48].copy_from_slice(&(flags | 0x11).to_le_bytes());
            h[56..64].copy_from_slice(&(*uncompressed as u64).to_le_bytes());
            body.extend(h);
            body.extend(payload);
            body.resize(body.len() + padded - payload.len(), 0);
        }
        let mut b = FATBIN_MAGIC.to_le_bytes().to_vec();
        b.extend(1u16.to_le_bytes());
        b.extend(16u16.to_le_bytes());
        b.extend((body.len() as u64).to_le_bytes());
        b.extend(body);
        b
    }

    fn kernel(name: &str) -> Entry {
        Entry {
            name: name.to_string(),
            params: vec![Param { offset: 0, size: 8 }],
            max_threads: None,
            max_registers: None,
            shared_bytes: 0,
        }
    }

    fn cubin_for(n: u32, name: &str) -> Vec<u8> {
        cubin::write(Arch::of_number(n, false), &[kernel(name)])
    }

    fn sass_name(code: Result<Code, CUresult>) -> String {
        match code {
            Ok(Code::Sass(c)) => c.entries[0].name.clone(),
            other => panic!("expected a cubin, got {other:?}"),
        }
    }

    #[test]
    fn a_fat_binary_gives_the_device_its_own_cubin_first() {
        let ptx_file = {
            let mut p = PTX.as_bytes().to_vec();
            p.push(0);
            p
        };
        let bin = fatbin(&[
            (FILE_CUBIN, 70, 0, cubin_for(70, "volta"), 0),
            (FILE_CUBIN, 80, 0, cubin_for(80, "ampere"), 0),
            (FILE_CUBIN, 86, 0, cubin_for(86, "ampere86"), 0),
            (FILE_CUBIN, 90, 0, cubin_for(90, "hopper"), 0),
            (FILE_PTX, 70, 0, ptx_file.clone(), 0),
        ]);
        // SAFETY: a fat binary of the size its header says.
        let got = unsafe { code_from_image(bin.as_ptr().cast(), (8, 0)) };
        assert_eq!(sass_name(got), "ampere");
        assert_eq!(sass_name(code_from_bytes(&bin, (8, 9))), "ampere86");
        assert_eq!(sass_name(code_from_bytes(&bin, (9, 0))), "hopper");
        // No cubin for 7.5's major version but 7.0's: the 7.0 cubin runs there.
        assert_eq!(sass_name(code_from_bytes(&bin, (7, 5))), "volta");
        // A device newer than every cubin takes the PTX.
        assert_eq!(ptx(code_from_bytes(&bin, (12, 0))).as_deref(), Ok(PTX));

        let wrapper: [usize; 4] = [
            FATBIN_WRAPPER_MAGIC as usize | (1 << 32),
            bin.as_ptr() as usize,
            0,
            0,
        ];
        // SAFETY: a wrapper pointing at a fat binary.
        let got = unsafe { code_from_image(wrapper.as_ptr().cast(), (9, 0)) };
        assert_eq!(sass_name(got), "hopper");
    }

    #[test]
    fn sass_only_for_other_gpus_is_refused_as_a_gpu_refuses_it() {
        let bin = fatbin(&[
            (FILE_CUBIN, 70, 0, cubin_for(70, "volta"), 0),
            (FILE_CUBIN, 90, 0, cubin_for(90, "hopper"), 0),
        ]);
        assert_eq!(code_from_bytes(&bin, (8, 0)), Err(NO_BINARY_FOR_GPU));
        let cubin = cubin_for(90, "hopper");
        assert_eq!(code_from_bytes(&cubin, (8, 0)), Err(NO_BINARY_FOR_GPU));
        // SAFETY: an ELF image of the size its section headers say.
        let got = unsafe { code_from_image(cubin.as_ptr().cast(), (9, 0)) };
        assert_eq!(sass_name(got), "hopper");
        assert_eq!(
            code_from_bytes(b"\x7fELF\x02\x01", (8, 0)),
            Err(code::CUDA_ERROR_INVALID_IMAGE)
        );
    }

    #[test]
    fn compressed_files_are_read() {
        let cubin = cubin_for(80, "packed");
        // An LZ4 block of literals only: the file as it is.
        let mut block = vec![0xf0];
        let mut n = cubin.len() - 15;
        while n >= 255 {
            block.push(255);
            n -= 255;
        }
        block.push(n as u8);
        block.extend(&cubin);
        let bin = fatbin(&[(FILE_CUBIN, 80, FILE_LZ4, block, cubin.len())]);
        assert_eq!(sass_name(code_from_bytes(&bin, (8, 0))), "packed");
        // A zstd frame of one raw block: the frame header (magic, a descriptor saying one
        // segment with a two-byte content size, stored less 256), then the last block, raw.
        let short = cubin_for(80, "z");
        assert!((256..65536 + 256).contains(&short.len()));
        let mut zstd = vec![0x28, 0xb5, 0x2f, 0xfd, 0x60];
        zstd.extend(((short.len() - 256) as u16).to_le_bytes());
        let header = ((short.len() as u32) << 3) | 1; // last block, raw
        zstd.extend(&header.to_le_bytes()[..3]);
        zstd.extend(&short);
        let bin = fatbin(&[(FILE_CUBIN, 80, FILE_ZSTD, zstd, short.len())]);
        assert_eq!(sass_name(code_from_bytes(&bin, (8, 0))), "z");
        let broken = fatbin(&[(FILE_CUBIN, 80, FILE_ZSTD, cubin.clone(), cubin.len())]);
        assert_eq!(code_from_bytes(&broken, (8, 0)), Err(NO_BINARY_FOR_GPU));
    }

    #[test]
    fn fat_binaries_without_readable_file_headers_still_give_their_ptx() {
        let mut payload = vec![1u8, 0, 0, 0, 7, 7];
        payload.extend(PTX.as_bytes());
        payload.extend([0, 0, 0]);
        let mut b = FATBIN_MAGIC.to_le_bytes().to_vec();
        b.extend(1u16.to_le_bytes());
        b.extend(16u16.to_le_bytes());
        b.extend((payload.len() as u64).to_le_bytes());
        b.extend(payload);
        assert_eq!(ptx(code_from_bytes(&b, A100)).as_deref(), Ok(PTX));
    }
}
