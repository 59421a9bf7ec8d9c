//! Liveness without pids: each process slot is owned through an OFD lock on one byte of the
//! region file, past its end. The kernel drops the lock when the last descriptor of the
//! owning open file description closes — when the process dies, however it dies, and in
//! whatever pid namespace — so a slot lock that can be taken marks a dead owner.
//!
//! simgpu's node state owns its process slots the same way, through these functions.

use crate::layout::LOCK_BASE;
use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};
use std::os::fd::BorrowedFd;

/// The liveness byte of process slot `slot`.
pub fn slot_byte(slot: usize) -> i64 {
    LOCK_BASE + slot as i64
}

/// An OFD lock request of `kind` on the one byte at offset `byte`.
fn flock_for(byte: i64, kind: libc::c_int) -> libc::flock {
    // SAFETY: flock is a plain C struct for which all-zero bytes are valid; OFD locks
    // require l_pid to be 0.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = byte;
    fl.l_len = 1;
    fl
}

/// Tries to take the lock on `byte` through `fd`'s open file description, without
/// waiting. `Ok(true)` when taken (the byte was free, or already held by this description),
/// `Ok(false)` when another description holds it, `Err` when the file system cannot lock.
pub fn try_lock(fd: BorrowedFd<'_>, byte: i64) -> std::io::Result<bool> {
    let fl = flock_for(byte, libc::F_WRLCK);
    match fcntl(fd, FcntlArg::F_OFD_SETLK(&fl)) {
        Ok(_) => Ok(true),
        Err(Errno::EAGAIN | Errno::EACCES) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Releases the lock on `byte` held through `fd`'s open file description.
pub fn unlock(fd: BorrowedFd<'_>, byte: i64) {
    let fl = flock_for(byte, libc::F_UNLCK);
    let unlocked = fcntl(fd, FcntlArg::F_OFD_SETLK(&fl));
    debug_assert!(unlocked.is_ok(), "unlocking byte {byte}: {unlocked:?}");
}

/// Whether some open file description other than `fd`'s holds the lock on `byte`,
/// without taking it. A query that fails says "held": never reap on doubt.
pub fn held_by_other(fd: BorrowedFd<'_>, byte: i64) -> bool {
    let mut fl = flock_for(byte, libc::F_WRLCK);
    // F_OFD_GETLK writes the conflicting lock, if any, into `fl`.
    fcntl(fd, FcntlArg::F_OFD_GETLK(&mut fl)).is_err()
        || fl.l_type != libc::F_UNLCK as libc::c_short
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_lock_excludes_other_descriptions_only() {
        let path = std::env::temp_dir().join(format!("tessera-liveness-{}", std::process::id()));
        let a = std::fs::File::create(&path).unwrap();
        let b = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(try_lock(a.as_fd(), 3).unwrap());
        assert!(
            try_lock(a.as_fd(), 3).unwrap(),
            "re-taking our own lock succeeds"
        );
        assert!(!try_lock(b.as_fd(), 3).unwrap());
        assert!(
            try_lock(b.as_fd(), 4).unwrap(),
            "other slots are independent"
        );
        unlock(a.as_fd(), 3);
        assert!(try_lock(b.as_fd(), 3).unwrap());
        assert!(!try_lock(a.as_fd(), 3).unwrap());
        drop(b);
        assert!(
            try_lock(a.as_fd(), 3).unwrap(),
            "closing a description drops its locks"
        );
        assert!(try_lock(a.as_fd(), 4).unwrap());
        let c = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        assert!(held_by_other(c.as_fd(), 4));
        assert!(
            !held_by_other(a.as_fd(), 4),
            "our own lock is not another's"
        );
        assert!(!held_by_other(c.as_fd(), 5));
        let _ = std::fs::remove_file(path);
    }
}
