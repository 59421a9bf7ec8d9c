//! Sleeping on a 32-bit word until another thread or process changes it: the futex calls
//! every part uses, through rustix. A word in a shared file mapping (a region, simgpu's node
//! state) is waited on and woken with the shared operations; a word in one process's
//! private memory with the private ones, which the kernel resolves faster.
//!
//! None of these allocate, lock or touch anything but the word (the preload library's
//! throttled launches sleep here), except [`wait_any`], which builds the kernel's list.

use rustix::thread::futex::{self, Flags, Wait, WaitFlags, WaitPtr, WaitvFlags};
use rustix::time::{ClockId, Timespec};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Where a futex word lives, which decides the kind of futex operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// In a mapping other processes wait on and wake (a region, simgpu's node state).
    Shared,
    /// In this process's private memory.
    Private,
}

impl Sharing {
    fn flags(self) -> Flags {
        match self {
            Sharing::Shared => Flags::empty(),
            Sharing::Private => Flags::PRIVATE,
        }
    }

    fn wait_flags(self) -> WaitFlags {
        match self {
            Sharing::Shared => WaitFlags::SIZE_U32,
            Sharing::Private => WaitFlags::SIZE_U32 | WaitFlags::PRIVATE,
        }
    }
}

/// Why a wait returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// Woken, or the word had already moved from the value seen, or a signal came: callers
    /// look at their condition again.
    Woken,
    /// The timeout passed.
    TimedOut,
}

/// A duration as the kernel's relative timespec.
fn timespec(timeout: Duration) -> Timespec {
    Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    }
}

/// Sleeps while `word` still holds `seen`, at most `timeout`.
pub fn wait(word: &AtomicU32, sharing: Sharing, seen: u32, timeout: Duration) -> Woken {
    match futex::wait(word, sharing.flags(), seen, Some(&timespec(timeout))) {
        Err(rustix::io::Errno::TIMEDOUT) => Woken::TimedOut,
        // EAGAIN (the word moved), EINTR (a signal): look again.
        _ => Woken::Woken,
    }
}

/// Wakes every sleeper on `word`.
pub fn wake_all(word: &AtomicU32, sharing: Sharing) {
    // The count woken does not matter, and a wake on a live word cannot fail.
    let _ = futex::wake(word, sharing.flags(), i32::MAX as u32);
}

/// `FUTEX_WAITV_MAX`: the most words [`wait_any`] takes.
pub const MAX_WORDS: usize = 128;

/// A word to wait on and the value it is expected to hold.
#[derive(Debug, Clone, Copy)]
pub struct Watch<'a> {
    /// The word.
    pub word: &'a AtomicU32,
    /// The value it held when last looked at; the wait returns at once if it differs.
    pub expected: u32,
    /// Where it lives.
    pub sharing: Sharing,
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

/// Sleeps until one of `words` (at most [`MAX_WORDS`]) is woken or no longer holds its
/// expected value, or `timeout` passes (`futex_waitv`, Linux 5.16 and later).
pub fn wait_any(words: &[Watch<'_>], timeout: Duration) -> Waited {
    if words.is_empty() || words.len() > MAX_WORDS {
        std::thread::sleep(timeout);
        return Waited::TimedOut;
    }
    let waiters: Vec<Wait> = words
        .iter()
        .map(|w| {
            let mut wait = Wait::new();
            wait.val = u64::from(w.expected);
            wait.uaddr = WaitPtr::new(w.word.as_ptr().cast());
            wait.flags = w.sharing.wait_flags();
            wait
        })
        .collect();
    // futex_waitv takes an absolute deadline.
    let now = rustix::time::clock_gettime(ClockId::Monotonic);
    let nanos = now.tv_nsec + i64::from(timeout.subsec_nanos());
    let deadline = Timespec {
        tv_sec: now
            .tv_sec
            .saturating_add(i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX))
            .saturating_add(nanos / 1_000_000_000),
        tv_nsec: nanos % 1_000_000_000,
    };
    match futex::waitv(
        &waiters,
        WaitvFlags::empty(),
        Some(&deadline),
        ClockId::Monotonic,
    ) {
        Ok(_) => Waited::Woken,
        Err(rustix::io::Errno::TIMEDOUT) => Waited::TimedOut,
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM | rustix::io::Errno::INVAL) => {
            Waited::Unsupported
        }
        // EAGAIN (a word moved), EINTR: look again.
        Err(_) => Waited::Woken,
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
        let started = Instant::now();
        let waited = wait(&word, Sharing::Private, 0, Duration::from_secs(30));
        assert_eq!(waited, Woken::Woken);
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_eq!(
            wait(&word, Sharing::Shared, 1, Duration::from_millis(20)),
            Woken::TimedOut
        );
    }

    #[test]
    fn a_wake_ends_a_wait() {
        let word = Arc::new(AtomicU32::new(0));
        let w = Arc::clone(&word);
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.store(1, Ordering::SeqCst);
            wake_all(&w, Sharing::Shared);
        });
        // A long timeout that only a lost wake-up would reach.
        while word.load(Ordering::SeqCst) == 0 {
            let _ = wait(&word, Sharing::Shared, 0, Duration::from_secs(60));
        }
        waker.join().unwrap();
    }

    #[test]
    fn a_moved_word_among_many_returns_at_once_and_still_ones_time_out() {
        let word = AtomicU32::new(1);
        let watch = |expected| Watch {
            word: &word,
            expected,
            sharing: Sharing::Private,
        };
        let waited = wait_any(&[watch(0)], Duration::from_secs(30));
        if waited == Waited::Unsupported {
            return;
        }
        assert_eq!(waited, Waited::Woken);
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
            wake_all(&w[2], Sharing::Private);
        });
        let watches: Vec<Watch<'_>> = words
            .iter()
            .map(|word| Watch {
                word,
                expected: 0,
                sharing: Sharing::Private,
            })
            .collect();
        let started = Instant::now();
        let waited = wait_any(&watches, Duration::from_secs(60));
        waker.join().unwrap();
        if waited != Waited::Unsupported {
            assert_eq!(waited, Waited::Woken);
            assert!(started.elapsed() < Duration::from_secs(30));
        }
    }
}
