//! The JIT linker (`cuLink*`): PTX, cubins, relocatable objects, fat binaries and archives
//! of objects go in; a cubin for the target architecture comes out. Nothing is compiled
//! here: the output declares the kernels of every input, with their parameter layouts, in
//! the cubin format simgpu reads back ([`crate::model::module::cubin::write`]), so that the module loaded
//! from it has the kernels the inputs define and runs them as it runs any kernel.

use crate::ffi::{code, write_out, CUresult, DriverResult};
use crate::model::context;
use crate::model::exec::registry::Registry;
use crate::model::module::cubin::{self, Arch};
use crate::model::module::image::{self, Code};
use crate::model::module::ptx::{self, Entry};
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Mutex, OnceLock};

use tessera_cuda_abi::CUlinkState;

/// `CUjitInputType` values.
mod input {
    pub const CUBIN: u32 = 0;
    pub const PTX: u32 = 1;
    pub const FATBINARY: u32 = 2;
    pub const OBJECT: u32 = 3;
    pub const LIBRARY: u32 = 4;
    pub const NVVM: u32 = 5;
}

/// `CUjit_option` values the linker reads.
mod option {
    pub const INFO_LOG_BUFFER: u32 = 3;
    pub const INFO_LOG_BUFFER_SIZE_BYTES: u32 = 4;
    pub const ERROR_LOG_BUFFER: u32 = 5;
    pub const ERROR_LOG_BUFFER_SIZE_BYTES: u32 = 6;
    pub const TARGET: u32 = 9;
}

/// The first bytes of an archive of objects.
const ARCHIVE_MAGIC: &[u8] = b"!<arch>\n";
/// An archive member's header.
const MEMBER_HEADER: usize = 60;

struct LinkState {
    /// The architecture of the output.
    target: Arch,
    /// The kernels of every input so far.
    entries: Mutex<Vec<Entry>>,
    /// The output, once complete; owned by the state until it is destroyed.
    output: OnceLock<Vec<u8>>,
}

static LINKS: Registry<LinkState> = Registry::new();

/// The `(option, value)` pairs the caller passed.
///
/// # Safety
/// `options` and `values` are null or hold `n` entries each.
unsafe fn options(n: u32, options: *const u32, values: *const *mut c_void) -> Vec<(u32, usize)> {
    if options.is_null() || values.is_null() {
        return Vec::new();
    }
    (0..n as usize)
        // SAFETY: both arrays hold n entries, by the caller's contract.
        .map(|i| unsafe { (options.add(i).read(), values.add(i).read() as usize) })
        .collect()
}

/// Empties the log buffers the caller gave (nothing is logged here).
fn clear_logs(options: &[(u32, usize)]) {
    let find = |which| options.iter().find(|(o, _)| *o == which).map(|(_, v)| *v);
    for (buffer, size) in [
        (option::INFO_LOG_BUFFER, option::INFO_LOG_BUFFER_SIZE_BYTES),
        (
            option::ERROR_LOG_BUFFER,
            option::ERROR_LOG_BUFFER_SIZE_BYTES,
        ),
    ] {
        if let (Some(buffer), Some(size)) = (find(buffer), find(size)) {
            if buffer != 0 && size != 0 {
                // SAFETY: the caller gave a buffer of `size` (non-zero) bytes for the log.
                unsafe { (buffer as *mut c_char).write(0) };
            }
        }
    }
}

fn state(handle: CUlinkState) -> Result<std::sync::Arc<LinkState>, CUresult> {
    LINKS.get(handle).ok_or(code::CUDA_ERROR_INVALID_HANDLE)
}

/// The kernels of one input.
fn kernels(kind: u32, bytes: &[u8], target: Arch) -> Result<Vec<Entry>, CUresult> {
    let cc = (target.major, target.minor);
    match kind {
        input::PTX => {
            let text = bytes.split(|b| *b == 0).next().unwrap_or_default();
            let text = std::str::from_utf8(text).map_err(|_| code::CUDA_ERROR_INVALID_PTX)?;
            Ok(ptx::parse(text)
                .map_err(|_| code::CUDA_ERROR_INVALID_PTX)?
                .entries)
        }
        input::CUBIN | input::OBJECT => {
            let c = cubin::parse(bytes).map_err(|_| code::CUDA_ERROR_INVALID_IMAGE)?;
            if !c.arch.runs_on(cc) {
                return Err(image::NO_BINARY_FOR_GPU);
            }
            Ok(c.entries)
        }
        input::FATBINARY => match image::code_from_bytes(bytes, cc)? {
            Code::Ptx(text) => kernels(input::PTX, text.as_bytes(), target),
            Code::Sass(c) => Ok(c.entries),
        },
        input::LIBRARY => archive_kernels(bytes, target),
        input::NVVM => Err(code::CUDA_ERROR_NOT_SUPPORTED),
        _ => Err(code::CUDA_ERROR_INVALID_VALUE),
    }
}

/// The kernels of the objects in an archive (`ar` format); members that are not cubins
/// (the symbol index) are skipped.
fn archive_kernels(bytes: &[u8], target: Arch) -> Result<Vec<Entry>, CUresult> {
    if !bytes.starts_with(ARCHIVE_MAGIC) {
        return Err(code::CUDA_ERROR_INVALID_IMAGE);
    }
    let mut at = ARCHIVE_MAGIC.len();
    let mut entries = Vec::new();
    while at + MEMBER_HEADER <= bytes.len() {
        let header = &bytes[at..at + MEMBER_HEADER];
        let size: usize = std::str::from_utf8(&header[48..58])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or(code::CUDA_ERROR_INVALID_IMAGE)?;
        let start = at + MEMBER_HEADER;
        let member = bytes
            .get(start..start.saturating_add(size))
            .ok_or(code::CUDA_ERROR_INVALID_IMAGE)?;
        if cubin::is_cubin(member) {
            entries.extend(kernels(input::OBJECT, member, target)?);
        }
        // Members start on even offsets.
        at = start + size + (size & 1);
    }
    Ok(entries)
}

/// Adds an input's kernels to a link; a name already defined is an error, as with a linker.
fn add(handle: CUlinkState, kind: u32, bytes: &[u8]) -> DriverResult {
    let link = state(handle)?;
    if link.output.get().is_some() {
        return Err(code::CUDA_ERROR_INVALID_HANDLE);
    }
    let new = kernels(kind, bytes, link.target)?;
    let mut entries = link.entries.lock().unwrap_or_else(|e| e.into_inner());
    if new.iter().any(|n| entries.iter().any(|e| e.name == n.name)) {
        return Err(code::CUDA_ERROR_INVALID_IMAGE);
    }
    entries.extend(new);
    Ok(())
}

cuda_entry! {
    fn cuLinkCreate(n: u32, opts: *mut u32, values: *mut *mut c_void, out: *mut CUlinkState) {
        create(n, opts, values, out)
    }

    fn cuLinkCreate_v2(n: u32, opts: *mut u32, values: *mut *mut c_void, out: *mut CUlinkState) {
        create(n, opts, values, out)
    }

    fn cuLinkAddData(
        handle: CUlinkState,
        kind: u32,
        data: *mut c_void,
        size: usize,
        _name: *const c_char,
        n: u32,
        opts: *mut u32,
        values: *mut *mut c_void,
    ) {
        add_data(handle, kind, data, size, n, opts, values)
    }

    fn cuLinkAddData_v2(
        handle: CUlinkState,
        kind: u32,
        data: *mut c_void,
        size: usize,
        _name: *const c_char,
        n: u32,
        opts: *mut u32,
        values: *mut *mut c_void,
    ) {
        add_data(handle, kind, data, size, n, opts, values)
    }

    fn cuLinkAddFile(
        handle: CUlinkState,
        kind: u32,
        path: *const c_char,
        n: u32,
        opts: *mut u32,
        values: *mut *mut c_void,
    ) {
        add_file(handle, kind, path, n, opts, values)
    }

    fn cuLinkAddFile_v2(
        handle: CUlinkState,
        kind: u32,
        path: *const c_char,
        n: u32,
        opts: *mut u32,
        values: *mut *mut c_void,
    ) {
        add_file(handle, kind, path, n, opts, values)
    }

    fn cuLinkComplete(handle: CUlinkState, cubin_out: *mut *mut c_void, size_out: *mut usize) {
        let link = state(handle)?;
        if cubin_out.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let output = link.output.get_or_init(|| {
            let entries = link.entries.lock().unwrap_or_else(|e| e.into_inner());
            cubin::write(link.target, &entries)
        });
        // SAFETY: checked non-null; the caller provides a pointer to write. The output lives
        // in the state until cuLinkDestroy, as the driver documents.
        unsafe { write_out(cubin_out, output.as_ptr() as *mut c_void)? };
        if !size_out.is_null() {
            // SAFETY: non-null; the caller provides a size_t to write.
            unsafe { write_out(size_out, output.len())? };
        }
        Ok(())
    }

    fn cuLinkDestroy(handle: CUlinkState) {
        LINKS.remove(handle).map(drop).ok_or(code::CUDA_ERROR_INVALID_HANDLE)
    }
}

fn create(n: u32, opts: *mut u32, values: *mut *mut c_void, out: *mut CUlinkState) -> DriverResult {
    let ctx = context::current()?;
    if out.is_null() || (n > 0 && (opts.is_null() || values.is_null())) {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: both arrays hold n entries, by the driver API's contract (checked non-null).
    let options = unsafe { options(n, opts, values) };
    clear_logs(&options);
    let (major, minor) = crate::model::module::device_cc(ctx.device);
    let target = options.iter().find(|(o, _)| *o == option::TARGET).map_or(
        Arch {
            major,
            minor,
            specific: false,
        },
        |(_, v)| Arch::of_number(*v as u32, false),
    );
    let handle = LINKS.insert(std::sync::Arc::new(LinkState {
        target,
        entries: Mutex::new(Vec::new()),
        output: OnceLock::new(),
    }));
    // SAFETY: checked non-null; the caller provides a CUlinkState to write.
    unsafe { write_out(out, handle) }
}

fn add_data(
    handle: CUlinkState,
    kind: u32,
    data: *mut c_void,
    size: usize,
    n: u32,
    opts: *mut u32,
    values: *mut *mut c_void,
) -> DriverResult {
    if data.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: both arrays hold n entries (or are null), by the driver API's contract.
    clear_logs(&unsafe { options(n, opts, values) });
    let bytes = if size == 0 && kind == input::PTX {
        // PTX may be passed as NUL-terminated text without its size.
        // SAFETY: the caller passes NUL-terminated text.
        unsafe { CStr::from_ptr(data.cast()) }.to_bytes()
    } else {
        // SAFETY: the caller passes `size` readable bytes.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }
    };
    add(handle, kind, bytes)
}

fn add_file(
    handle: CUlinkState,
    kind: u32,
    path: *const c_char,
    n: u32,
    opts: *mut u32,
    values: *mut *mut c_void,
) -> DriverResult {
    // SAFETY: both arrays hold n entries (or are null), by the driver API's contract.
    clear_logs(&unsafe { options(n, opts, values) });
    let bytes = crate::model::module::read_file(path)?;
    add(handle, kind, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = ".version 7.0\n.target sm_80\n.address_size 64\n\
        .visible .entry first(.param .u64 a, .param .u32 b) { ret; }\n";

    #[test]
    fn inputs_of_every_kind_give_their_kernels() {
        let target = Arch::of_number(80, false);
        let from_ptx = kernels(input::PTX, PTX.as_bytes(), target).unwrap();
        assert_eq!(from_ptx.len(), 1);
        assert_eq!(from_ptx[0].params_size(), 12);
        let cubin = cubin::write(target, &from_ptx);
        assert_eq!(kernels(input::CUBIN, &cubin, target).unwrap(), from_ptx);
        let other = cubin::write(Arch::of_number(90, false), &from_ptx);
        assert_eq!(
            kernels(input::OBJECT, &other, target),
            Err(image::NO_BINARY_FOR_GPU)
        );

        let mut archive = ARCHIVE_MAGIC.to_vec();
        for member in [&b"/ index"[..], &cubin] {
            let mut header = format!(
                "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n",
                "m.o/",
                0,
                0,
                0,
                644,
                member.len()
            );
            header.truncate(MEMBER_HEADER);
            archive.extend(header.as_bytes());
            archive.extend(member);
            if member.len() % 2 == 1 {
                archive.push(b'\n');
            }
        }
        assert_eq!(kernels(input::LIBRARY, &archive, target).unwrap(), from_ptx);
        assert_eq!(
            kernels(input::LIBRARY, b"not an archive", target),
            Err(code::CUDA_ERROR_INVALID_IMAGE)
        );
        assert_eq!(
            kernels(input::NVVM, b"", target),
            Err(code::CUDA_ERROR_NOT_SUPPORTED)
        );
    }
}
