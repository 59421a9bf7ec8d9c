//! Liveness without pids: each process slot is owned through an OFD lock on one byte of the
//! state file. The kernel drops the lock when the owning process dies, however it dies, so a
//! lock that can be taken marks a dead owner.

use super::layout::LOCK_BASE;
use std::os::fd::{AsRawFd, BorrowedFd};

fn flock_for(slot: usize, kind: libc::c_short) -> libc::flock {
    // SAFETY: flock is a plain C struct for which all-zero bytes are valid; OFD locks require
    // l_pid to be 0.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = LOCK_BASE + slot as i64;
    fl.l_len = 1;
    fl
}

/// Tries to take the lock byte of `slot` through `fd`'s open file description. True when
/// taken (the byte was free, or already ours).
pub fn try_lock(fd: BorrowedFd<'_>, slot: usize) -> bool {
    let fl = flock_for(slot, libc::F_WRLCK as libc::c_short);
    // SAFETY: fd is an open descriptor for the lifetime of the borrow; fl is a valid flock.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    rc == 0
}

/// Releases the lock byte of `slot` held through `fd`.
pub fn unlock(fd: BorrowedFd<'_>, slot: usize) {
    let fl = flock_for(slot, libc::F_UNLCK as libc::c_short);
    // SAFETY: as in `try_lock`.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    debug_assert_eq!(rc, 0);
}

/// Whether some open file description other than `fd`'s holds the lock byte of `slot`,
/// without taking it.
pub fn held_by_other(fd: BorrowedFd<'_>, slot: usize) -> bool {
    let mut fl = flock_for(slot, libc::F_WRLCK as libc::c_short);
    // SAFETY: as in `try_lock`; F_OFD_GETLK writes the conflicting lock (if any) into fl.
    let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    // If the query itself fails, say "held": never reap on doubt.
    rc != 0 || fl.l_type != libc::F_UNLCK as libc::c_short
}
