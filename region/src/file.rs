//! Creating, opening, checking and mapping region files (and anonymous regions).
//!
//! Creation is serialised by a whole-file `flock`; slot liveness uses OFD byte locks, which
//! are a separate kind of lock on Linux and never conflict with it.

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
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long an opener waits for another process to finish creating a region before it
/// gives up: creation takes microseconds, so only a stuck or hostile holder gets this far.
const FLOCK_PATIENCE: Duration = Duration::from_secs(5);

/// A region mapped shared, read-write.
pub(crate) struct Mapping {
    ptr: NonNull<RegionLayout>,
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
}

impl Drop for Mapping {
    fn drop(&mut self) {
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

/// Opens the region at `path`; with `init`, creates it when the file is missing, empty or
/// was left half-created by a process that died.
pub(crate) fn open(path: &Path, init: Option<&RegionInit>) -> Result<Opened, RegionError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(init.is_some())
        .mode(0o600)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
        .map_err(io(path))?;
    let meta = file.metadata().map_err(io(path))?;
    if !meta.file_type().is_file() {
        return Err(RegionError::Foreign {
            path: path.to_path_buf(),
        });
    }
    let exclusive = init.is_some();
    lock_whole(&file, exclusive).map_err(io(path))?;
    let result = open_locked(path, &file, init);
    // Closing would drop the flock too, but the lock file stays open for the slot locks.
    unlock_whole(&file);
    let mapping = result?;
    let reopen = CString::new(path.as_os_str().as_bytes()).ok();
    Ok(Opened {
        mapping,
        lock_file: file,
        reopen,
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

fn lock_whole(file: &File, exclusive: bool) -> std::io::Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    let deadline = Instant::now() + FLOCK_PATIENCE;
    loop {
        // SAFETY: flock on a descriptor that `file` keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::WouldBlock {
            return Err(err);
        }
        if Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "another process has held the region's creation lock for over 5 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn unlock_whole(file: &File) {
    // SAFETY: flock on a descriptor that `file` keeps open.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
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

fn open_locked(
    path: &Path,
    file: &File,
    init: Option<&RegionInit>,
) -> Result<Mapping, RegionError> {
    let len = file.metadata().map_err(io(path))?.len();
    let truncated = || RegionError::Truncated {
        path: path.to_path_buf(),
        len,
        expected: TOTAL_SIZE as u64,
    };
    let raw = read_header(path, file, len)?;
    // A file that a creator left before writing its header: empty, or sized and all zero.
    let never_started = len == 0 || (len == TOTAL_SIZE as u64 && raw.magic == [0; 8]);
    if never_started {
        return match init {
            Some(init) => create(path, file, init),
            None if len == 0 => Err(truncated()),
            None => Err(corrupt(path, "its creation never finished")),
        };
    }
    if len < MAGIC.len() as u64 {
        return Err(truncated());
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
        // Nobody is creating it now (we hold the flock), so its creator died mid-way; a
        // region that never became ready was never used.
        return match init {
            Some(init) => {
                initialize(&mapping, init);
                Ok(mapping)
            }
            None => Err(corrupt(path, "its creation never finished")),
        };
    }
    check(path, &mapping)?;
    Ok(mapping)
}

fn create(path: &Path, file: &File, init: &RegionInit) -> Result<Mapping, RegionError> {
    file.set_len(TOTAL_SIZE as u64).map_err(io(path))?;
    let mapping = map(path, file)?;
    initialize(&mapping, init);
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
        .or_else(|_| OpenOptions::new().read(true).write(true).open(path))
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
    Ok(Mapping { ptr })
}

/// Writes a new region: zeroes, header, caps, then publishes it.
fn initialize(mapping: &Mapping, init: &RegionInit) {
    let raw = mapping.ptr.as_ptr();
    // SAFETY: the caller holds the exclusive flock (or the anonymous mapping is not yet
    // shared), and the region is not ready, so no process reads or writes it meanwhile;
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
        crate::memory::MemoryCap(account).set_cap(cap);
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
