//! Futex wait and wake on a word of the shared node state. The mapping is shared between
//! processes, so these are the non-private futex operations.

use std::sync::atomic::AtomicU32;

/// Sleeps while `word` still holds `expected`, at most `timeout_ns`. Returns on a wake, a
/// changed value, a signal or the timeout; callers re-check their condition.
pub fn wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned 32-bit word for the duration of the call; FUTEX_WAIT
    // only reads it and sleeps; the timeout is a valid relative timespec.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every waiter sleeping on `word`, in any process.
pub fn wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned 32-bit word; FUTEX_WAKE does not access memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
