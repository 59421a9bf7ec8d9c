//! Sleeping on several futex words at once: `futex_waitv` (Linux 5.16 and later).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// `SYS_futex_waitv` (the same number on every architecture).
const SYS_FUTEX_WAITV: libc::c_long = 449;
/// `FUTEX2_SIZE_U32`: a 32-bit futex word.
const FUTEX_32: u32 = 2;
/// `FUTEX2_PRIVATE`: the word is in this process's private memory.
const FUTEX_PRIVATE: u32 = 128;
/// `FUTEX_WAITV_MAX`: the most words one call takes.
pub const MAX_WORDS: usize = 128;

/// One word to wait on, as the kernel reads it (`struct futex_waitv`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct FutexWaitv {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// Why [`wait_any`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// A word was woken, or one no longer held its expected value, or a signal came.
    Woken,
    /// The timeout passed.
    TimedOut,
    /// The kernel has no `futex_waitv` (older than 5.16, or a seccomp filter forbids it):
    /// poll instead.
    Unsupported,
}

/// A word to wait on and the value it is expected to hold.
pub struct Watch<'a> {
    /// The word.
    pub word: &'a AtomicU32,
    /// The value it held when last looked at; the wait returns at once if it differs.
    pub expected: u32,
    /// Whether the word lives in this process's private memory (`false` for a word in a
    /// shared file mapping that other processes wake).
    pub private: bool,
}

/// Sleeps until one of `words` (at most [`MAX_WORDS`]) is woken or no longer holds its
/// expected value, or `timeout` passes.
pub fn wait_any(words: &[Watch<'_>], timeout: Duration) -> Waited {
    if words.is_empty() || words.len() > MAX_WORDS {
        std::thread::sleep(timeout);
        return Waited::TimedOut;
    }
    let waiters: Vec<FutexWaitv> = words
        .iter()
        .map(|w| FutexWaitv {
            val: u64::from(w.expected),
            uaddr: w.word.as_ptr() as u64,
            flags: FUTEX_32 | if w.private { FUTEX_PRIVATE } else { 0 },
            reserved: 0,
        })
        .collect();
    let mut deadline = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to our local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut deadline) };
    let nanos = deadline.tv_nsec as u64 + u64::from(timeout.subsec_nanos());
    deadline.tv_sec += timeout.as_secs() as libc::time_t + (nanos / 1_000_000_000) as libc::time_t;
    deadline.tv_nsec = (nanos % 1_000_000_000) as libc::c_long;
    // SAFETY: `waiters` is a live array of `len` futex_waitv entries whose words are live,
    // aligned 4-byte atomics borrowed for the call (the kernel only reads them); the
    // deadline is an absolute CLOCK_MONOTONIC time on our stack.
    let rc = unsafe {
        libc::syscall(
            SYS_FUTEX_WAITV,
            waiters.as_ptr(),
            waiters.len() as libc::c_uint,
            0 as libc::c_uint,
            &deadline as *const libc::timespec,
            libc::CLOCK_MONOTONIC,
        )
    };
    if rc >= 0 {
        return Waited::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ETIMEDOUT) => Waited::TimedOut,
        Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EINVAL) => Waited::Unsupported,
        // EAGAIN (a word moved), EINTR: look again.
        _ => Waited::Woken,
    }
}

/// `FUTEX_WAKE` of every sleeper on a private word of this process.
pub fn wake_private(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 4-byte atomic; FUTEX_WAKE does not touch memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_moved_word_returns_at_once_and_a_still_one_times_out() {
        let word = AtomicU32::new(1);
        let watch = |expected| Watch {
            word: &word,
            expected,
            private: true,
        };
        let started = Instant::now();
        let waited = wait_any(&[watch(0)], Duration::from_secs(5));
        if waited == Waited::Unsupported {
            return;
        }
        assert_eq!(waited, Waited::Woken);
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            wait_any(&[watch(1)], Duration::from_millis(20)),
            Waited::TimedOut
        );
    }

    #[test]
    fn a_wake_on_any_word_ends_the_wait() {
        let words: Arc<[AtomicU32; 3]> = Arc::new(Default::default());
        let w = words.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w[2].store(1, Ordering::SeqCst);
            wake_private(&w[2]);
        });
        let watches: Vec<Watch<'_>> = words
            .iter()
            .map(|word| Watch {
                word,
                expected: 0,
                private: true,
            })
            .collect();
        let started = Instant::now();
        let waited = wait_any(&watches, Duration::from_secs(10));
        waker.join().unwrap();
        if waited != Waited::Unsupported {
            assert_eq!(waited, Waited::Woken);
            assert!(started.elapsed() < Duration::from_secs(5));
        }
    }
}
