//! A small file of the node mapped shared as one layout (the priority board, a container's
//! limits): mapped, guarded and unmapped in one place. The guard is the SIGBUS guard of
//! [`crate::fault`], where the process installed it (`controld`: a container can truncate a
//! file that it may write).

use crate::RegionError;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

/// A layout that may be mapped as a [`Mapped`] and shared between threads.
///
/// # Safety
/// The layout is shared memory reached only through atomics, and plain bytes that are
/// written once, before any other process opens the file.
pub(crate) unsafe trait SharedLayout {}

/// A file mapped shared as one `T`.
pub(crate) struct Mapped<T: SharedLayout> {
    layout: NonNull<T>,
    writable: bool,
    /// Its slot among the mappings guarded against SIGBUS.
    guard: Option<usize>,
    /// Keeps the file open for as long as it is mapped (not needed by the mapping itself,
    /// but it names the file in `/proc/<pid>/fd` for people).
    _file: File,
}

// SAFETY: `T: SharedLayout` (its contract is what makes sharing the mapping sound).
unsafe impl<T: SharedLayout> Send for Mapped<T> {}
// SAFETY: as above.
unsafe impl<T: SharedLayout> Sync for Mapped<T> {}

/// The error for an I/O failure on the file at `path`.
pub(crate) fn io(path: &Path) -> impl Fn(std::io::Error) -> RegionError + '_ {
    move |source| RegionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl<T: SharedLayout> Mapped<T> {
    /// Maps the first `size_of::<T>()` bytes of `file` (at `path`, for errors), writable or
    /// read-only. The caller checked that the file is at least that long.
    pub(crate) fn map(path: &Path, file: File, writable: bool) -> Result<Mapped<T>, RegionError> {
        let len = size_of::<T>();
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: maps `len` bytes of an open file, shared; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io(path)(std::io::Error::last_os_error()));
        }
        let layout = NonNull::new(ptr.cast::<T>()).ok_or_else(|| RegionError::Foreign {
            path: path.to_path_buf(),
        })?;
        Ok(Mapped {
            layout,
            writable,
            guard: crate::fault::guard(ptr as usize, len),
            _file: file,
        })
    }

    /// The layout.
    pub(crate) fn get(&self) -> &T {
        // SAFETY: a live mapping of size_of::<T>() bytes, page-aligned (mmap), which covers
        // the layouts' alignment.
        unsafe { self.layout.as_ref() }
    }

    /// The layout, for writing its plain bytes where the caller alone can (a file it just
    /// made, before anyone else opens it).
    ///
    /// # Safety
    /// The mapping is writable and no other reference to the layout is alive.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn get_mut(&self) -> &mut T {
        // SAFETY: the caller's contract; the mapping is live and aligned (see `get`).
        unsafe { &mut *self.layout.as_ptr() }
    }

    /// Whether this process mapped it for writing.
    pub(crate) fn writable(&self) -> bool {
        self.writable
    }
}

impl<T: SharedLayout> Drop for Mapped<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.guard {
            crate::fault::unguard(slot);
        }
        // SAFETY: unmaps exactly the mapping made in `map`; nothing refers to it after drop.
        unsafe { libc::munmap(self.layout.as_ptr().cast(), size_of::<T>()) };
    }
}
