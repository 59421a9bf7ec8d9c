//! Liveness without pids: each process slot is owned through an OFD lock on one byte of the
//! region file, past its end. The kernel drops the lock when the last descriptor of the
//! owning open file description closes — when the process dies, however it dies, and in
//! whatever pid namespace — so a slot lock that can be taken marks a dead owner.

use crate::layout::LOCK_BASE;
use std::os::fd::{AsRawFd, BorrowedFd};

fn flock_for(slot: usize, kind: libc::c_short) -> libc::flock {
    // SAFETY: flock is a plain C struct for which all-zero bytes are valid; OFD locks
    // require l_pid to be 0.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = LOCK_BASE + slot as i64;
    fl.l_len = 1;
    fl
}

/// Tries to take the lock byte of `slot` through `fd`'s open file description, without
/// waiting. `Ok(true)` when taken (the byte was free, or already held by this description),
/// `Ok(false)` when another description holds it, `Err` when the file system cannot lock.
pub(crate) fn try_lock(fd: BorrowedFd<'_>, slot: usize) -> std::io::Result<bool> {
    let fl = flock_for(slot, libc::F_WRLCK as libc::c_short);
    // SAFETY: fd is open for the borrow; fl is a valid flock that fcntl only reads.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(err),
    }
}

/// Releases the lock byte of `slot` held through `fd`'s open file description.
pub(crate) fn unlock(fd: BorrowedFd<'_>, slot: usize) {
    let fl = flock_for(slot, libc::F_UNLCK as libc::c_short);
    // SAFETY: as in `try_lock`.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    debug_assert_eq!(rc, 0, "unlocking slot {slot}");
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
        let _ = std::fs::remove_file(path);
    }
}
