//! The node's priority board ([`BoardLayout`]): one small file beside the regions through
//! which online work stops offline launches itself, with one store, instead of waiting for
//! `controld` to wake up and block the offline regions.

use crate::layout::{BoardLayout, ABI_VERSION, BOARD_MAGIC, BOARD_SIZE, MAX_DEVICES};
use crate::small_file::{io, Mapped, SharedLayout};
use crate::RegionError;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;

/// The board's file name in the directory of the regions.
pub const BOARD_FILE: &str = "board";

/// A mapped board.
pub struct Board(Mapped<BoardLayout>);

// SAFETY: the board is shared memory reached only through atomics and the header's plain
// bytes, which are written once, by the daemon that makes the file, before anyone else
// opens it.
unsafe impl SharedLayout for BoardLayout {}

impl Board {
    /// Creates the board at `path`, or opens the one there (`controld`, at start): a file
    /// of another kind or version is an error, and is left alone.
    pub fn create(path: &Path) -> Result<Board, RegionError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o644)
            .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(io(path))?;
        let len = file.metadata().map_err(io(path))?.len();
        if len == 0 {
            file.set_len(BOARD_SIZE as u64).map_err(io(path))?;
        }
        let board = Board(Mapped::map(path, file, true)?);
        if len == 0 {
            // SAFETY: the mapping is writable; a new file is all zeros until these writes,
            // only the daemon creates boards, and no reference to the layout is alive.
            let layout = unsafe { board.0.get_mut() };
            layout.magic = BOARD_MAGIC;
            layout.abi_version = ABI_VERSION;
        }
        board.check(path)?;
        Ok(board)
    }

    /// Opens the board at `path` (a container's library): for writing where the file lets
    /// it (an online container sets its bit), else for reading only.
    pub fn open(path: &Path) -> Result<Board, RegionError> {
        let open = |write: bool| {
            OpenOptions::new()
                .read(true)
                .write(write)
                .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(path)
        };
        let (file, writable) = match open(true) {
            Ok(f) => (f, true),
            Err(_) => (open(false).map_err(io(path))?, false),
        };
        let meta = file.metadata().map_err(io(path))?;
        if !meta.file_type().is_file() || meta.len() < BOARD_SIZE as u64 {
            return Err(RegionError::Foreign {
                path: path.to_path_buf(),
            });
        }
        let board = Board(Mapped::map(path, file, writable)?);
        board.check(path)?;
        Ok(board)
    }

    fn check(&self, path: &Path) -> Result<(), RegionError> {
        let layout = self.layout();
        if layout.magic != BOARD_MAGIC {
            return Err(RegionError::Foreign {
                path: path.to_path_buf(),
            });
        }
        if layout.abi_version != ABI_VERSION {
            return Err(RegionError::Corrupt {
                path: path.to_path_buf(),
                reason: format!(
                    "board version {} where {ABI_VERSION} is expected",
                    layout.abi_version
                ),
            });
        }
        Ok(())
    }

    fn layout(&self) -> &BoardLayout {
        self.0.get()
    }

    /// Whether this process may set and clear bits.
    pub fn writable(&self) -> bool {
        self.0.writable()
    }

    /// The online bits of `device` (0 for a device out of range): any bit means online
    /// work there.
    pub fn online(&self, device: usize) -> u64 {
        // SeqCst: an offline library counts its launch, then loads this; an online one
        // stores its bit, then launches. Either the load sees the bit, or the launch was
        // counted before the bit was set.
        self.layout()
            .online
            .get(device)
            .map_or(0, |w| w.load(Ordering::SeqCst))
    }

    /// Sets `bit` (0–63) of `device`'s word; returns whether the bit was clear before.
    /// Does nothing on a read-only board.
    pub fn set(&self, device: usize, bit: u32) -> bool {
        let (Some(word), true, true) =
            (self.layout().online.get(device), self.writable(), bit < 64)
        else {
            return false;
        };
        // SeqCst: see `online`.
        word.fetch_or(1 << bit, Ordering::SeqCst) & (1 << bit) == 0
    }

    /// Clears `bit` of `device`'s word. Does nothing on a read-only board.
    pub fn clear(&self, device: usize, bit: u32) {
        if let (Some(word), true, true) =
            (self.layout().online.get(device), self.writable(), bit < 64)
        {
            // SeqCst: as for `set`.
            word.fetch_and(!(1u64 << bit), Ordering::SeqCst);
        }
    }

    /// Keeps only the bits of `mask` in `device`'s word (`controld`: the bits of online
    /// containers that are still there and alive); returns the bits it dropped.
    pub fn retain(&self, device: usize, mask: u64) -> u64 {
        if !self.writable() || device >= MAX_DEVICES {
            return 0;
        }
        // SeqCst: as for `set`.
        self.layout().online[device].fetch_and(mask, Ordering::SeqCst) & !mask
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tessera-board-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn bits_set_by_one_mapping_are_seen_by_another() {
        let path = dir().join("shared");
        let _ = std::fs::remove_file(&path);
        let daemon = Board::create(&path).unwrap();
        let online = Board::open(&path).unwrap();
        assert!(online.writable());
        assert_eq!(daemon.online(3), 0);
        assert!(online.set(3, 5));
        assert!(!online.set(3, 5), "the bit was set already");
        assert!(online.set(3, 7));
        assert_eq!(daemon.online(3), (1 << 5) | (1 << 7));
        online.clear(3, 5);
        assert_eq!(daemon.online(3), 1 << 7);
        // The daemon drops the bits of containers that are gone.
        assert_eq!(daemon.retain(3, 0), 1 << 7);
        assert_eq!(online.online(3), 0);
        // Out of range: nothing, no panic.
        assert!(!online.set(MAX_DEVICES, 1));
        assert!(!online.set(0, 64));
        assert_eq!(online.online(MAX_DEVICES), 0);
        // Opening again keeps what is there.
        online.set(0, 1);
        drop(daemon);
        let again = Board::create(&path).unwrap();
        assert_eq!(again.online(0), 1 << 1);
    }

    #[test]
    fn a_read_only_board_reads_but_never_writes() {
        use std::os::unix::fs::PermissionsExt;
        let path = dir().join("read-only");
        let _ = std::fs::remove_file(&path);
        let _daemon = Board::create(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        let offline = Board::open(&path).unwrap();
        // Root opens anything for writing; elsewhere the mode makes it read-only.
        if !offline.writable() {
            assert!(!offline.set(0, 1));
            assert_eq!(offline.online(0), 0);
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    #[test]
    fn other_files_are_refused() {
        let d = dir();
        let foreign = d.join("foreign");
        std::fs::write(&foreign, vec![7u8; BOARD_SIZE]).unwrap();
        assert!(matches!(
            Board::open(&foreign),
            Err(RegionError::Foreign { .. })
        ));
        assert!(matches!(
            Board::create(&foreign),
            Err(RegionError::Foreign { .. })
        ));
        let short = d.join("short");
        std::fs::write(&short, b"TSRBOARD").unwrap();
        assert!(Board::open(&short).is_err());
        assert!(Board::open(&d.join("missing")).is_err());
    }
}
