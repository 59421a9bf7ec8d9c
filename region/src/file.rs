//! Creating, opening, checking and mapping region files (and anonymous regions).
//!
//! A region file appears at its path only once it is whole: its creator writes it under a
//! temporary name in the same directory and links it into place, so an opener never sees a
//! half-made region, and a file that is empty, short or unfinished at the path was spoiled
//! by someone. It is refused, never made again over: that would hand whoever spoiled it a
//! region with the opener's caps. The path's last component is never followed if it is a
//! symbolic link. Slot liveness uses OFD byte locks on the file.

use crate::error::RegionError;
use crate::layout::{
    RegionLayout, ABI_VERSION, HEADER_SIZE, MAGIC, MAX_DEVICES, NAME_LEN, SLOT_FREE, SLOT_LIVE,
    TOTAL_SIZE,
};
use crate::name;
use crate::RegionInit;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::mem::offset_of;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// A region mapped shared, read-write.
pub(crate) struct Mapping {
    ptr: NonNull<RegionLayout>,
    /// Its slot in the list of mappings guarded against SIGBUS, where the process
    /// installed the guard (see `fault`).
    guard: Option<usize>,
}

// SAFETY: the mapping is shared memory whose fields are atomics or written only before
// `Header::ready` is published; a `Mapping` is only an address and may move between threads.
unsafe impl Send for Mapping {}
// SAFETY: as above; shared access goes through `&RegionLayout`, whose mutable fields are atomics.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The mapped layout.
    pub fn layout(&self) -> &RegionLayout {
        // SAFETY: `ptr` is a live MAP_SHARED mapping of TOTAL_SIZE bytes for as long as
        // `self`; every field written after creation is atomic, the rest are never written
        // again while mapped.
        unsafe { self.ptr.as_ref() }
    }

    /// Whether the file shrank under a guarded mapping, which now reads zeros.
    pub fn faulted(&self) -> bool {
        self.guard.is_some_and(crate::fault::faulted)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Some(slot) = self.guard {
            crate::fault::unguard(slot);
        }
        // SAFETY: unmaps exactly the mapping this value made; no reference outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), TOTAL_SIZE) };
    }
}

/// What opening a region gives: its mapping and the descriptor that owns this process's
/// slot locks.
pub(crate) struct Opened {
    pub mapping: Mapping,
    /// Its open file description holds this process's OFD slot locks, and only this
    /// descriptor refers to it (the mapping was made through a description of its own).
    pub lock_file: File,
    /// A path that opens the same file again, for a forked child to get a description of
    /// its own (see `Region::release_after_fork`).
    pub reopen: Option<CString>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> RegionError + '_ {
    move |source| RegionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn corrupt(path: &Path, reason: impl Into<String>) -> RegionError {
    RegionError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Opens the region at `path`; with `init`, creates it when no file is there. An existing
/// file is used as it is or refused, never made again.
pub(crate) fn open(path: &Path, init: Option<&RegionInit>) -> Result<Opened, RegionError> {
    let file = loop {
        match open_existing(path) {
            Ok(file) => break file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let Some(init) = init else {
                    return Err(io(path)(e));
                };
                match create(path, init) {
                    Ok(opened) => return Ok(opened),
                    // Another creator linked its region first: open that one.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io(path)(e)),
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(RegionError::Foreign {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(io(path)(e)),
        }
    };
    let meta = file.metadata().map_err(io(path))?;
    if !meta.file_type().is_file() {
        return Err(RegionError::Foreign {
            path: path.to_path_buf(),
        });
    }
    let mapping = open_checked(path, &file)?;
    Ok(Opened {
        mapping,
        lock_file: file,
        reopen: CString::new(path.as_os_str().as_bytes()).ok(),
    })
}

fn open_existing(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(path)
}

/// Makes a whole region under a temporary name beside `path` and links it into place;
/// `AlreadyExists` when another file got there first.
fn create(path: &Path, init: &RegionInit) -> std::io::Result<Opened> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("the path names no file"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    // Relaxed: only makes names unique within this process; the pid does across processes.
    tmp_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp: PathBuf = path.with_file_name(tmp_name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(&tmp)?;
    let made = file.set_len(TOTAL_SIZE as u64).and_then(|()| {
        let mapping = map(&tmp, &file).map_err(|e| std::io::Error::other(e.to_string()))?;
        initialize(&mapping, init);
        std::fs::hard_link(&tmp, path)?;
        Ok(mapping)
    });
    let _ = std::fs::remove_file(&tmp);
    Ok(Opened {
        mapping: made?,
        lock_file: file,
        reopen: CString::new(path.as_os_str().as_bytes()).ok(),
    })
}

/// An anonymous region: shared memory that only this process and its forked children see.
/// Slot locks live on a memfd, which behaves as a file for OFD locks.
pub(crate) fn anonymous(init: &RegionInit) -> Result<Opened, RegionError> {
    let path = Path::new("anonymous");
    // SAFETY: the name is a NUL-terminated literal; the result is checked below.
    let fd = unsafe { libc::memfd_create(c"tessera-region-locks".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io(path)(std::io::Error::last_os_error()));
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let lock_file = unsafe { File::from_raw_fd(fd) };
    // SAFETY: a fresh shared anonymous mapping of TOTAL_SIZE bytes; checked below.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            TOTAL_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    let mapping = mapping_from(path, ptr)?;
    initialize(&mapping, init);
    Ok(Opened {
        mapping,
        lock_file,
        reopen: None,
    })
}

/// The header fields read with `pread`, before anything is mapped: mapping a short file and
/// touching it past its end would kill the process with SIGBUS.
struct RawHeader {
    magic: [u8; 8],
    abi_version: u32,
    header_size: u32,
    total_size: u64,
}

fn read_header(path: &Path, file: &File, len: u64) -> Result<RawHeader, RegionError> {
    let mut buf = [0u8; HEADER_SIZE];
    let n = (len as usize).min(HEADER_SIZE);
    file.read_exact_at(&mut buf[..n], 0).map_err(io(path))?;
    let u32_at = |off: usize| u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap());
    let u64_at = |off: usize| u64::from_ne_bytes(buf[off..off + 8].try_into().unwrap());
    use crate::layout::Header;
    Ok(RawHeader {
        magic: buf[..8].try_into().unwrap(),
        abi_version: u32_at(offset_of!(Header, abi_version)),
        header_size: u32_at(offset_of!(Header, header_size)),
        total_size: u64_at(offset_of!(Header, total_size)),
    })
}

fn open_checked(path: &Path, file: &File) -> Result<Mapping, RegionError> {
    let len = file.metadata().map_err(io(path))?.len();
    let truncated = || RegionError::Truncated {
        path: path.to_path_buf(),
        len,
        expected: TOTAL_SIZE as u64,
    };
    if len < MAGIC.len() as u64 {
        return Err(truncated());
    }
    let raw = read_header(path, file, len)?;
    if len == TOTAL_SIZE as u64 && raw.magic == [0; 8] {
        return Err(corrupt(path, "its creation never finished"));
    }
    if raw.magic != MAGIC {
        return Err(RegionError::Foreign {
            path: path.to_path_buf(),
        });
    }
    if len < HEADER_SIZE as u64 {
        return Err(truncated());
    }
    if raw.abi_version != ABI_VERSION {
        return Err(RegionError::Version {
            path: path.to_path_buf(),
            found: raw.abi_version,
            expected: ABI_VERSION,
        });
    }
    if raw.header_size != HEADER_SIZE as u32 {
        return Err(corrupt(
            path,
            format!("header of {} bytes, not {HEADER_SIZE}", raw.header_size),
        ));
    }
    if raw.total_size != TOTAL_SIZE as u64 {
        return Err(corrupt(
            path,
            format!("header says {} bytes, not {TOTAL_SIZE}", raw.total_size),
        ));
    }
    if len != TOTAL_SIZE as u64 {
        return Err(truncated());
    }
    let mapping = map(path, file)?;
    // Acquire: pairs with the Release store that ends `initialize`, so the plain header
    // fields written before it are visible below.
    if mapping.layout().header.ready.load(Ordering::Acquire) != 1 {
        return Err(corrupt(path, "its creation never finished"));
    }
    check(path, &mapping)?;
    Ok(mapping)
}

/// Maps the file through an open file description of its own. A mapping keeps a reference
/// to the description it was made from, and OFD locks last as long as their description; a
/// mapping made through the lock file would let a forked child, which inherits the mapping,
/// keep this process's slot locks alive after this process dies.
fn map(path: &Path, file: &File) -> Result<Mapping, RegionError> {
    let for_map = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        // Without /proc, the path itself (it was just opened, so it names this file unless
        // someone renames it in between, which the checks that follow would catch).
        .or_else(|_| open_existing(path))
        .map_err(io(path))?;
    // SAFETY: maps TOTAL_SIZE bytes of a file the caller made or checked to be exactly that
    // long, shared and read-write; the result is checked in `mapping_from`.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            TOTAL_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            for_map.as_raw_fd(),
            0,
        )
    };
    mapping_from(path, ptr)
}

fn mapping_from(path: &Path, ptr: *mut libc::c_void) -> Result<Mapping, RegionError> {
    if ptr == libc::MAP_FAILED {
        return Err(io(path)(std::io::Error::last_os_error()));
    }
    let ptr = NonNull::new(ptr.cast::<RegionLayout>())
        .ok_or_else(|| io(path)(std::io::Error::other("mmap returned a null address")))?;
    // Listed before anything reads it: the file may shrink at any moment.
    let guard = crate::fault::guard(ptr.as_ptr() as usize, TOTAL_SIZE);
    Ok(Mapping { ptr, guard })
}

/// Writes a new region: zeroes, header, caps, then publishes it.
fn initialize(mapping: &Mapping, init: &RegionInit) {
    let raw = mapping.ptr.as_ptr();
    // SAFETY: the file is not yet linked at its path (or the anonymous mapping is not yet
    // shared), so no other process reads or writes it, so no process reads or writes it meanwhile;
    // all-zero bytes are a valid RegionLayout (integers and atomics), and every write stays
    // inside the TOTAL_SIZE-byte mapping.
    unsafe {
        std::ptr::write_bytes(raw.cast::<u8>(), 0, TOTAL_SIZE);
        let h = &mut (*raw).header;
        h.magic = MAGIC;
        h.abi_version = ABI_VERSION;
        h.header_size = HEADER_SIZE as u32;
        h.total_size = TOTAL_SIZE as u64;
        h.device_count = MAX_DEVICES as u32;
        h.name[..init.name.len()].copy_from_slice(init.name.as_bytes());
    }
    let layout = mapping.layout();
    for (account, cap) in layout.devices.iter().zip(init.memory_caps) {
        crate::memory::MemoryCap(account, None).set_cap(cap);
    }
    // Release: publishes everything written above to each opener whose Acquire load of
    // `ready` (in `open_locked`) sees 1.
    layout.header.ready.store(1, Ordering::Release);
}

/// Checks what the header checks in `open_locked` could not: fields that are only
/// trustworthy once `ready` is seen.
fn check(path: &Path, mapping: &Mapping) -> Result<(), RegionError> {
    let layout = mapping.layout();
    let h = &layout.header;
    if h.device_count != MAX_DEVICES as u32 {
        return Err(corrupt(
            path,
            format!("{} devices, not {MAX_DEVICES}", h.device_count),
        ));
    }
    if name::from_field(&h.name).is_none() {
        let shown = String::from_utf8_lossy(&h.name[..NAME_LEN]);
        return Err(corrupt(
            path,
            format!(
                "container name {:?} is not [a-z0-9][a-z0-9-]{{0,62}}",
                shown.trim_end_matches('\0')
            ),
        ));
    }
    for (slot, p) in layout.processes.iter().enumerate() {
        // Acquire: pairs with the Release store that published the slot, so its pid is seen.
        match p.state.load(Ordering::Acquire) {
            SLOT_FREE => {}
            SLOT_LIVE if p.pid.load(Ordering::Relaxed) != 0 => {}
            SLOT_LIVE => return Err(corrupt(path, format!("process slot {slot} has no pid"))),
            other => {
                return Err(corrupt(
                    path,
                    format!("process slot {slot} has state {other}"),
                ))
            }
        }
    }
    Ok(())
}

/// Checks that the file under a live mapping is still whole and still the one at its path
/// (see `Region::verify`); `path` is `None` for an anonymous region.
pub(crate) fn verify_file(
    path: Option<&Path>,
    mapping: &Mapping,
    file: &File,
) -> Result<(), RegionError> {
    let shown = path.unwrap_or(Path::new("anonymous"));
    let len = file.metadata().map_err(io(shown))?.len();
    if mapping.faulted() {
        return Err(corrupt(
            shown,
            format!("its file shrank to {len} bytes under the mapping"),
        ));
    }
    let Some(path) = path else {
        return Ok(());
    };
    if len != TOTAL_SIZE as u64 {
        return Err(RegionError::Truncated {
            path: path.to_path_buf(),
            len,
            expected: TOTAL_SIZE as u64,
        });
    }
    let mapped = file.metadata().map_err(io(path))?;
    match std::fs::symlink_metadata(path) {
        Ok(at) if at.dev() == mapped.dev() && at.ino() == mapped.ino() => Ok(()),
        Ok(at) if at.file_type().is_symlink() => {
            Err(corrupt(path, "its path was replaced by a symbolic link"))
        }
        Ok(_) => Err(corrupt(path, "its path was replaced by another file")),
        Err(e) => Err(corrupt(path, format!("its path is gone ({e})"))),
    }
}

/// Checks the header of a live mapping again (see `Region::verify`).
pub(crate) fn verify(path: &Path, mapping: &Mapping, name: &str) -> Result<(), RegionError> {
    let h = &mapping.layout().header;
    // SAFETY: plain integer and byte fields inside the live mapping. They are written only at
    // creation, but a process of the container may overwrite them at any time; volatile
    // reads keep the compiler from assuming they are stable, and any bit pattern is a valid
    // value of these types, so a racing write gives a wrong value, which is what this
    // check exists to catch.
    let (magic, abi_version, header_size, total_size, device_count, stored_name) = unsafe {
        (
            std::ptr::read_volatile(&h.magic),
            std::ptr::read_volatile(&h.abi_version),
            std::ptr::read_volatile(&h.header_size),
            std::ptr::read_volatile(&h.total_size),
            std::ptr::read_volatile(&h.device_count),
            std::ptr::read_volatile(&h.name),
        )
    };
    if magic != MAGIC {
        return Err(RegionError::Foreign {
            path: path.to_path_buf(),
        });
    }
    if abi_version != ABI_VERSION {
        return Err(RegionError::Version {
            path: path.to_path_buf(),
            found: abi_version,
            expected: ABI_VERSION,
        });
    }
    if header_size != HEADER_SIZE as u32
        || total_size != TOTAL_SIZE as u64
        || device_count != MAX_DEVICES as u32
    {
        return Err(corrupt(path, "its header's sizes were overwritten"));
    }
    // Relaxed: only compared; nothing is read on the strength of it.
    if h.ready.load(Ordering::Relaxed) != 1 {
        return Err(corrupt(path, "its ready flag was cleared"));
    }
    if name::from_field(&stored_name) != Some(name) {
        return Err(corrupt(
            path,
            format!("its container name is no longer {name:?}"),
        ));
    }
    Ok(())
}
