//! The state dir belongs to one daemon at a time: `controld.lock` in it, held with an
//! exclusive `flock` for the daemon's life and holding its pid. Two daemons on one dir
//! would both refill every bucket (doubling every share) and quarantine each other's
//! regions; the second refuses to start and names the first. The kernel drops the lock
//! when its holder dies, however it dies, so a stale file never blocks a restart.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name in the state dir.
pub const LOCK_FILE: &str = "controld.lock";

/// The held lock; dropping it lets another daemon take the dir.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// Why the state dir could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum DirLockError {
    /// Another process holds it.
    #[error("the state dir {dir} is in use by controld pid {holder}; stop that daemon first, or give this one another --state-dir")]
    Held {
        /// The state dir.
        dir: PathBuf,
        /// The holder's pid as it wrote it (`unknown` if unreadable).
        holder: String,
    },
    /// The lock file could not be opened or locked.
    #[error(
        "cannot lock the state dir through {path}: {source}; check that the state dir is writable"
    )]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
}

impl DirLock {
    /// Takes `dir` for this process, or says who holds it.
    pub fn take(dir: &Path) -> Result<DirLock, DirLockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| DirLockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(io)?;
        // SAFETY: flock on a descriptor that `file` keeps open; the result is checked.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::WouldBlock {
                return Err(io(e));
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = text.trim();
            return Err(DirLockError::Held {
                dir: dir.to_path_buf(),
                holder: if holder.is_empty() {
                    "unknown".to_string()
                } else {
                    holder.to_string()
                },
            });
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(io)?;
        Ok(DirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_told_the_holder_pid() {
        let dir = std::env::temp_dir().join(format!("controld-dirlock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let held = DirLock::take(&dir).unwrap();
        let err = DirLock::take(&dir).unwrap_err().to_string();
        assert!(
            err.contains(&format!("in use by controld pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        drop(DirLock::take(&dir).unwrap());
        let _ = std::fs::remove_dir_all(dir);
    }
}
