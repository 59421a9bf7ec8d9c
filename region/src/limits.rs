//! A container's limits where its processes can only read them ([`LimitsLayout`]): the
//! file `<region>.limits` beside its region. A region is shared memory that every process
//! of the container writes, so the caps in it are the container's to change; the caps in
//! this file are `controld`'s alone, and the library holds the container to the lower of
//! the two.

use crate::layout::{
    LimitsLayout, ABI_VERSION, COMPUTE_UNLIMITED, LIMITS_MAGIC, LIMITS_SIZE, UNLIMITED,
};
use crate::small_file::{io, Mapped, SharedLayout};
use crate::RegionError;
use std::fs::{File, Metadata, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

// Relaxed throughout the compute words: each is a single word read afresh at every launch,
// with nothing published under it; the daemon wakes the region's gate after a change that
// lets launches go, and a launch racing with a change may take either side, as it may with
// the region's own words.

/// What the limits file's name adds to its region's.
pub const LIMITS_SUFFIX: &str = ".limits";

/// The limits file of the region at `region`.
pub fn limits_path(region: &Path) -> PathBuf {
    let mut name = region.as_os_str().to_os_string();
    name.push(LIMITS_SUFFIX);
    PathBuf::from(name)
}

/// The mode a limits file keeps: readable by all, writable by nobody but through the
/// daemon's open descriptor (a container's processes that do not run as root cannot open
/// it for writing even where its directory is shared read-write).
const MODE: u32 = 0o444;

/// A mapped limits file.
pub struct Limits(Mapped<LimitsLayout>);

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits").finish_non_exhaustive()
    }
}

// SAFETY: the caps are atomics; the header's plain bytes are written by the daemon before
// it answers for the container, and a library refuses a file whose header is not complete.
unsafe impl SharedLayout for LimitsLayout {}

/// The file's metadata, if it is a regular file (else it is foreign).
fn regular(path: &Path, file: &File) -> Result<Metadata, RegionError> {
    let meta = file.metadata().map_err(io(path))?;
    if !meta.file_type().is_file() {
        return Err(RegionError::Foreign {
            path: path.to_path_buf(),
        });
    }
    Ok(meta)
}

const FLAGS: i32 = libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NOFOLLOW;

impl Limits {
    /// Creates the limits file at `path` with `caps`, or takes over the one there
    /// (`controld`): its caps are written afresh. The file stays the same inode (a
    /// container's read-only mount of it keeps seeing every change) and keeps mode 0444.
    pub fn create(path: &Path, caps: &[Option<u64>]) -> Result<Limits, RegionError> {
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(MODE)
            .custom_flags(FLAGS)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                reopen_writable(path).map_err(io(path))?
            }
            Err(e) => return Err(io(path)(e)),
        };
        let meta = regular(path, &file)?;
        if meta.len() != LIMITS_SIZE as u64 {
            // Only the daemon writes this file: a wrong size is a leftover of another
            // build, made whole again (no library maps a file of the wrong size).
            file.set_len(0).map_err(io(path))?;
            file.set_len(LIMITS_SIZE as u64).map_err(io(path))?;
        }
        if meta.permissions().mode() & 0o7777 != MODE {
            file.set_permissions(std::fs::Permissions::from_mode(MODE))
                .map_err(io(path))?;
        }
        let limits = Limits(Mapped::map(path, file, true)?);
        for (dev, word) in limits.layout().memory_caps.iter().enumerate() {
            // Relaxed: see `set_memory_cap`.
            word.store(
                caps.get(dev).copied().flatten().unwrap_or(UNLIMITED),
                Ordering::Relaxed,
            );
        }
        // SAFETY: the mapping is writable and no reference to the layout is alive here;
        // nothing reads the header before it is complete except a library that then
        // refuses it (and fails closed) until the daemon has answered, which is after this.
        let layout = unsafe { limits.0.get_mut() };
        layout.magic = LIMITS_MAGIC;
        layout.abi_version = ABI_VERSION;
        Ok(limits)
    }

    /// Opens the limits file at `path` for reading (a container's library). `Ok(None)`:
    /// there is none (a region without a daemon). A file that is there but not a limits
    /// file of this version is an error: the caller fails closed.
    pub fn open(path: &Path) -> Result<Option<Limits>, RegionError> {
        let file = match OpenOptions::new().read(true).custom_flags(FLAGS).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(path)(e)),
        };
        let meta = regular(path, &file)?;
        if meta.len() != LIMITS_SIZE as u64 {
            return Err(RegionError::Truncated {
                path: path.to_path_buf(),
                len: meta.len(),
                expected: LIMITS_SIZE as u64,
            });
        }
        let limits = Limits(Mapped::map(path, file, false)?);
        let layout = limits.layout();
        if layout.magic != LIMITS_MAGIC {
            return Err(RegionError::Foreign {
                path: path.to_path_buf(),
            });
        }
        if layout.abi_version != ABI_VERSION {
            return Err(RegionError::Version {
                path: path.to_path_buf(),
                found: layout.abi_version,
                expected: ABI_VERSION,
            });
        }
        Ok(Some(limits))
    }

    fn layout(&self) -> &LimitsLayout {
        self.0.get()
    }

    /// The declared cap of device `dev`; `None` when unlimited, 0 past the last device.
    pub fn memory_cap(&self, dev: usize) -> Option<u64> {
        match self.cap_word(dev) {
            // Relaxed: see `set_memory_cap`.
            Some(w) => Some(w.load(Ordering::Relaxed)).filter(|&c| c != UNLIMITED),
            None => Some(0),
        }
    }

    /// The word holding device `dev`'s cap, for reservations that read it at every try.
    pub(crate) fn cap_word(&self, dev: usize) -> Option<&AtomicU64> {
        self.layout().memory_caps.get(dev)
    }

    /// Sets the declared cap of device `dev` (`controld`; ignored on a read-only mapping).
    pub fn set_memory_cap(&self, dev: usize, cap: Option<u64>) {
        if let (Some(w), true) = (self.cap_word(dev), self.0.writable()) {
            // Relaxed: a single word with no data published under it; a reservation
            // racing with a change is judged against either value, as with the region's.
            w.store(cap.unwrap_or(UNLIMITED), Ordering::Relaxed);
        }
    }

    /// Bit `d` set while the daemon limits device `d`'s compute.
    #[inline]
    pub fn compute_limited(&self) -> u32 {
        self.layout().compute_limited.load(Ordering::Relaxed)
    }

    /// Device `dev`'s compute mode as the daemon set it (`COMPUTE_*`); unlimited past the
    /// last device.
    pub fn compute_mode(&self, dev: usize) -> u32 {
        self.layout()
            .compute_mode
            .get(dev)
            .map_or(COMPUTE_UNLIMITED, |m| m.load(Ordering::Relaxed))
    }

    /// Why launches on device `dev` must wait (`HOLD_*` bits); 0 when they may go.
    pub fn compute_hold(&self, dev: usize) -> u32 {
        self.layout()
            .compute_hold
            .get(dev)
            .map_or(0, |h| h.load(Ordering::Relaxed))
    }

    /// Whether the daemon ticked within [`DAEMON_SILENT_NS`](crate::DAEMON_SILENT_NS) of
    /// `now_ns`: only then are its compute words obeyed (a dead daemon holds nobody).
    pub fn daemon_alive(&self, now_ns: u64) -> bool {
        let beat = self.layout().heartbeat_ns.load(Ordering::Relaxed);
        beat != 0 && now_ns.saturating_sub(beat) < crate::DAEMON_SILENT_NS
    }

    /// Sets device `dev`'s compute mode and its `compute_limited` bit (`controld`; ignored
    /// on a read-only mapping or past the last device).
    pub fn set_compute_mode(&self, dev: usize, mode: u32) {
        let (Some(word), true) = (self.layout().compute_mode.get(dev), self.0.writable()) else {
            return;
        };
        word.store(mode, Ordering::Relaxed);
        let bit = 1u32 << dev;
        if mode == COMPUTE_UNLIMITED {
            self.layout()
                .compute_limited
                .fetch_and(!bit, Ordering::Relaxed);
        } else {
            self.layout()
                .compute_limited
                .fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Sets or clears `hold` (a `HOLD_*` bit) on device `dev` (`controld`); returns whether
    /// the word changed. The caller wakes the region's gate when launches may go again.
    pub fn set_compute_hold(&self, dev: usize, hold: u32, on: bool) -> bool {
        let (Some(word), true) = (self.layout().compute_hold.get(dev), self.0.writable()) else {
            return false;
        };
        let before = if on {
            word.fetch_or(hold, Ordering::Relaxed)
        } else {
            word.fetch_and(!hold, Ordering::Relaxed)
        };
        (before & hold != 0) != on
    }

    /// The board bits of device `dev` that an offline container's library ignores.
    pub fn board_ignore(&self, dev: usize) -> u64 {
        self.layout()
            .board_ignore
            .get(dev)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Sets the board bits of device `dev` to ignore (`controld`; stored only when changed).
    pub fn set_board_ignore(&self, dev: usize, bits: u64) {
        if let (Some(word), true) = (self.layout().board_ignore.get(dev), self.0.writable()) {
            if word.load(Ordering::Relaxed) != bits {
                word.store(bits, Ordering::Relaxed);
            }
        }
    }

    /// Records a tick of the daemon at `now_ns` (`controld`).
    pub fn beat(&self, now_ns: u64) {
        if self.0.writable() {
            self.layout().heartbeat_ns.store(now_ns, Ordering::Relaxed);
        }
    }
}

/// Opens for writing a limits file whose 0444 mode refuses the daemon when it does not run
/// as root: its owner may change the mode of a descriptor it opened for reading, reopen it
/// through `/proc`, and put the mode back.
fn reopen_writable(path: &Path) -> std::io::Result<File> {
    let reader = OpenOptions::new()
        .read(true)
        .custom_flags(FLAGS)
        .open(path)?;
    reader.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    let writer = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", reader.as_raw_fd()));
    reader.set_permissions(std::fs::Permissions::from_mode(MODE))?;
    writer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tessera-limits-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_daemon_writes_and_a_reader_follows_on_the_same_file() {
        let d = dir("follow");
        let path = limits_path(&d.join("a.region"));
        assert!(Limits::open(&path).unwrap().is_none());
        let mut caps = [None; crate::MAX_DEVICES];
        caps[0] = Some(1 << 30);
        let daemon = Limits::create(&path, &caps).unwrap();
        let reader = Limits::open(&path).unwrap().unwrap();
        assert_eq!(reader.memory_cap(0), Some(1 << 30));
        assert_eq!(reader.memory_cap(1), None);
        assert_eq!(reader.memory_cap(crate::MAX_DEVICES), Some(0));
        daemon.set_memory_cap(0, Some(2 << 30));
        assert_eq!(reader.memory_cap(0), Some(2 << 30));
        // A reader cannot write, through this type or by opening the file.
        reader.set_memory_cap(0, None);
        assert_eq!(daemon.memory_cap(0), Some(2 << 30));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o444);
        // A daemon that starts again takes over the same file (same inode) with new caps.
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        drop(daemon);
        caps[0] = Some(3 << 30);
        let again = Limits::create(&path, &caps).unwrap();
        assert_eq!(reader.memory_cap(0), Some(3 << 30));
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap()),
            inode
        );
        drop(again);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_foreign_or_short_file_is_refused_and_a_link_is_not_followed() {
        let d = dir("foreign");
        let path = d.join("b.region.limits");
        std::fs::write(&path, vec![0u8; LIMITS_SIZE]).unwrap();
        assert!(matches!(
            Limits::open(&path),
            Err(RegionError::Foreign { .. })
        ));
        std::fs::write(&path, b"short").unwrap();
        assert!(matches!(
            Limits::open(&path),
            Err(RegionError::Truncated { .. })
        ));
        let link = d.join("c.region.limits");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(Limits::open(&link).is_err());
        assert!(Limits::create(&link, &[]).is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
