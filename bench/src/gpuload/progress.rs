//! A workload's progress, published for the scenario runner: how much GPU time the kernels it
//! has seen complete held. On simgpu the runner reads each process's busy time from the node;
//! a real driver keeps no such per-process figure, so each workload counts its own.
//!
//! One file per process, `<dir>/<pid>.progress`, mapped shared by the workload (which writes
//! it) and by the runner's sampler (which reads it). Three native-endian `u64` words:
//!
//! | word | meaning |
//! |---:|---|
//! | 0 | GPU ns of the completed kernels: their count times their length |
//! | 1 | completed kernels |
//! | 2 | 1 once the workload has finished (it ran to the end, nothing more will run) |
//!
//! A kernel's length is what it holds the GPU for: `tessera_spin(ns)` holds it for `ns` of
//! GPU time even when another context's time slice interrupts it, so the count times the
//! length is the GPU time the process got.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable naming the directory a workload publishes its progress in;
/// unset, it publishes nothing.
pub const PROGRESS_DIR_ENV: &str = "GPULOAD_PROGRESS";

const WORDS: usize = 3;
const BUSY_NS: usize = 0;
const KERNELS: usize = 1;
const FINISHED: usize = 2;
const BYTES: usize = WORDS * std::mem::size_of::<u64>();

/// A mapped progress file.
pub struct Progress {
    words: NonNull<AtomicU64>,
}

// SAFETY: the mapping is shared memory accessed only through atomics; it lives until drop.
unsafe impl Send for Progress {}
// SAFETY: as above; every access is an atomic operation.
unsafe impl Sync for Progress {}

impl Progress {
    /// The file of process `pid` in `dir`.
    pub fn path(dir: &Path, pid: u32) -> PathBuf {
        dir.join(format!("{pid}.progress"))
    }

    /// The process id a progress file in a directory belongs to, from its name.
    pub fn pid_of(file_name: &str) -> Option<u32> {
        file_name.strip_suffix(".progress")?.parse().ok()
    }

    /// Creates this process's file in `dir` (all zeros) and maps it for writing.
    pub fn create(dir: &Path) -> io::Result<Progress> {
        let path = Progress::path(dir, std::process::id());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        file.set_len(BYTES as u64)?;
        Progress::map(&file, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Maps an existing progress file for reading.
    pub fn open(path: &Path) -> io::Result<Progress> {
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() < BYTES as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is shorter than a progress file", path.display()),
            ));
        }
        Progress::map(&file, libc::PROT_READ)
    }

    fn map(file: &std::fs::File, prot: libc::c_int) -> io::Result<Progress> {
        // SAFETY: a fresh shared mapping of an open file at least BYTES long (checked or set
        // by the callers); the kernel picks the address. The mapping outlives the file.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BYTES,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let words = NonNull::new(ptr.cast::<AtomicU64>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Progress { words })
    }

    /// This process's file in the directory [`PROGRESS_DIR_ENV`] names, if it names one. A
    /// file that cannot be made is reported on stderr and the workload runs unpublished.
    pub fn from_env() -> Option<Progress> {
        let dir = std::env::var_os(PROGRESS_DIR_ENV).filter(|d| !d.is_empty())?;
        match Progress::create(Path::new(&dir)) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!(
                    "gpuload: cannot publish progress in {}: {e}",
                    Path::new(&dir).display()
                );
                None
            }
        }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < WORDS);
        // SAFETY: the mapping holds WORDS page-aligned u64 words and lives as long as self;
        // AtomicU64 has the layout of u64.
        unsafe { &*self.words.as_ptr().add(i) }
    }

    /// Counts `kernels` more completed kernels that held the GPU for `ns` together.
    pub fn add(&self, kernels: u64, ns: u64) {
        // Relaxed: each word is a counter read on its own; a reader that sees one word ahead
        // of the other is off by one period at most.
        self.word(KERNELS).fetch_add(kernels, Ordering::Relaxed);
        self.word(BUSY_NS).fetch_add(ns, Ordering::Relaxed);
    }

    /// Says the workload ran to its end.
    pub fn finish(&self) {
        // Release: pairs with the Acquire in `finished`, so a reader that sees the flag sees
        // the last counts.
        self.word(FINISHED).store(1, Ordering::Release);
    }

    /// GPU ns of the completed kernels.
    pub fn busy_ns(&self) -> u64 {
        // Relaxed: see `add`.
        self.word(BUSY_NS).load(Ordering::Relaxed)
    }

    /// Completed kernels.
    pub fn kernels(&self) -> u64 {
        // Relaxed: see `add`.
        self.word(KERNELS).load(Ordering::Relaxed)
    }

    /// Whether the workload said it ran to its end.
    pub fn finished(&self) -> bool {
        // Acquire: pairs with the Release in `finish`.
        self.word(FINISHED).load(Ordering::Acquire) != 0
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once, here; no reference into it
        // outlives self.
        unsafe { libc::munmap(self.words.as_ptr().cast(), BYTES) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_what_the_writer_publishes() {
        let dir = std::env::temp_dir().join(format!("gpuload-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let writer = Progress::create(&dir).unwrap();
        let path = Progress::path(&dir, std::process::id());
        let reader = Progress::open(&path).unwrap();
        assert_eq!(
            (reader.busy_ns(), reader.kernels(), reader.finished()),
            (0, 0, false)
        );
        writer.add(3, 3_000_000);
        writer.add(1, 1_000_000);
        writer.finish();
        assert_eq!(reader.busy_ns(), 4_000_000);
        assert_eq!(reader.kernels(), 4);
        assert!(reader.finished());
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(Progress::pid_of(name), Some(std::process::id()));
        assert_eq!(Progress::pid_of("12.state"), None);
        drop((writer, reader));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
