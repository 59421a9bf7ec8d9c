//! The fork generation, and [`ForkLock`]: the one lock this library holds anywhere a `fork`
//! may happen meanwhile.
//!
//! A child of `fork` has one thread, but a copy of every lock as the parent's threads held
//! it: a `std::sync::Mutex` that a parent thread held stays locked in the child for good,
//! and the child's first hooked call hangs. This library lives inside other people's
//! processes, which fork when they like (shells, Python's `multiprocessing`, data loaders),
//! so it cannot make that rule theirs. Its data about the parent (slot, records, events) is
//! the parent's anyway: the child starts afresh, which the fork generation tells apart.
//!
//! Hand-written rather than taken from a crate: it must hold no allocation, take over a lock
//! held by a thread that does not exist in the process (no mutex crate does: a held lock is
//! held), and need no work in the fork handler, which may only run async-signal-safe code.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};

/// Counts the forks this process descends from (since the library was loaded): what was
/// recorded under an older generation belongs to an ancestor.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// The fork generation that new records are made under.
#[inline]
pub(crate) fn generation() -> u32 {
    // Relaxed: only a fork child changes it, before any of its threads run.
    GENERATION.load(Ordering::Relaxed)
}

/// In a fork child, before anything else of the library runs there: a new generation.
/// Async-signal-safe: one atomic add.
pub(crate) fn after_fork_in_child() {
    // Relaxed: the child has one thread until it returns from fork.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The lock word when no thread holds the lock.
const FREE: u32 = 0;
/// Set in a held lock's word when a thread may be asleep waiting for it.
const SLEEPERS: u32 = 1;

/// What a [`ForkLock`] needs of its word: an atomic `u32` that threads can sleep on. The
/// library's is [`Futex`]; the tests put a model of one under the same lock code, so that
/// a model checker walks every interleaving of the code that ships.
pub(crate) trait LockWord {
    /// How often a thread looks again before it sleeps.
    const SPINS: u32;
    /// The word's value.
    fn load(&self, order: Ordering) -> u32;
    /// Stores `new` if the word holds `current`; returns what it held.
    fn compare_exchange(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32>;
    /// Stores `new`; returns what it held.
    fn swap(&self, new: u32, order: Ordering) -> u32;
    /// Sleeps while the word holds `expected` (or until a spurious wake-up).
    fn wait(&self, expected: u32);
    /// Wakes one thread sleeping on the word.
    fn wake_one(&self);
}

/// A word threads sleep on with a private futex.
pub(crate) struct Futex(AtomicU32);

impl LockWord for Futex {
    /// Critical sections here are mostly a map operation, shorter than a system call.
    const SPINS: u32 = 100;

    #[inline]
    fn load(&self, order: Ordering) -> u32 {
        self.0.load(order)
    }

    #[inline]
    fn compare_exchange(
        &self,
        current: u32,
        new: u32,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u32, u32> {
        self.0.compare_exchange(current, new, success, failure)
    }

    #[inline]
    fn swap(&self, new: u32, order: Ordering) -> u32 {
        self.0.swap(new, order)
    }

    fn wait(&self, expected: u32) {
        // SAFETY: a private futex wait on a live, aligned u32; no timeout. The kernel
        // returns at once if the word no longer holds `expected`. Raw, as it must allocate
        // nothing.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.0.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                std::ptr::null::<libc::timespec>(),
            );
        }
    }

    fn wake_one(&self) {
        // SAFETY: a private futex wake on a live, aligned u32.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.0.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            );
        }
    }
}

/// The word of a lock held by a thread of fork generation `generation`: never [`FREE`],
/// never with [`SLEEPERS`] set.
fn held_by(generation: u32) -> u32 {
    ((generation % (u32::MAX >> 1)) + 1) << 1
}

/// A lock around a `T`, safe in a fork child: a lock that a thread of an ancestor process
/// held when the process forked is taken over, and its value, which that thread may have
/// left half changed, is put aside (leaked, never read or dropped) for `T::default()`.
///
/// Uncontended, taking and leaving it is one compare-and-swap and one swap. A waiter spins
/// briefly, then sleeps on the lock word with a private futex; a holder that leaves while
/// someone may sleep wakes one waiter.
pub(crate) struct ForkLock<T, W = Futex> {
    /// [`FREE`], or [`held_by`] the holder's generation, with [`SLEEPERS`] perhaps set.
    word: W,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, which one thread at a time holds.
unsafe impl<T: Send, W: Sync> Sync for ForkLock<T, W> {}

impl<T: Default> ForkLock<T> {
    pub(crate) const fn new(value: T) -> ForkLock<T> {
        ForkLock {
            word: Futex(AtomicU32::new(FREE)),
            value: UnsafeCell::new(value),
        }
    }
}

impl<T: Default, W: LockWord> ForkLock<T, W> {
    /// A lock on `word`, which must hold [`FREE`].
    #[cfg(test)]
    fn with_word(value: T, word: W) -> ForkLock<T, W> {
        ForkLock {
            word,
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting for its holder in this process if there is one.
    #[inline]
    pub(crate) fn lock(&self) -> ForkGuard<'_, T, W> {
        let mine = held_by(generation());
        // Acquire: pairs with the Release swap in `ForkGuard::drop`, so that the previous
        // holder's changes to the value are seen.
        if self
            .word
            .compare_exchange(FREE, mine, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended(mine);
        }
        ForkGuard { lock: self }
    }

    #[cold]
    fn lock_contended(&self, mine: u32) {
        let mut spins = 0;
        // Once a thread has slept, it takes the lock with SLEEPERS set: other threads may
        // still sleep, and the next holder must wake one of them when it leaves.
        let mut slept = false;
        loop {
            // Relaxed: only decides what to try; every taking below is an Acquire CAS.
            let seen = self.word.load(Ordering::Relaxed);
            if seen == FREE {
                let take = if slept { mine | SLEEPERS } else { mine };
                // Acquire: as in `lock`.
                if self
                    .word
                    .compare_exchange(FREE, take, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            if seen & !SLEEPERS != mine {
                // Held by a thread of an ancestor process, which this process does not have:
                // no one will ever leave it. Threads of this process that sleep on it are
                // woken by whoever takes it over, when it leaves.
                // Acquire: as in `lock`; nothing of the value is read, but on this path,
                // taken once per lock and fork, the order costs nothing.
                if self
                    .word
                    .compare_exchange(seen, mine | SLEEPERS, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    // SAFETY: this thread holds the lock now; the old value may be torn, so
                    // it is overwritten without being read or dropped.
                    unsafe { self.value.get().write(T::default()) };
                    return;
                }
                continue;
            }
            if spins < W::SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            // Relaxed: the futex call below compares the word itself; a holder that leaves
            // before the bit lands makes the CAS fail and the loop look again.
            if seen & SLEEPERS == 0
                && self
                    .word
                    .compare_exchange(seen, seen | SLEEPERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            self.word.wait(seen | SLEEPERS);
            slept = true;
        }
    }
}

/// The lock, held: the value is this thread's until the guard is dropped.
pub(crate) struct ForkGuard<'a, T, W: LockWord = Futex> {
    lock: &'a ForkLock<T, W>,
}

impl<T, W: LockWord> Deref for ForkGuard<'_, T, W> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock, so no other thread reaches the value.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T, W: LockWord> DerefMut for ForkGuard<'_, T, W> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and the guard is borrowed mutably.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T, W: LockWord> Drop for ForkGuard<'_, T, W> {
    fn drop(&mut self) {
        // Release: publishes this holder's changes to the next holder's Acquire. Also runs
        // when a panic unwinds through the holder: every user leaves the value consistent
        // between single operations, as with a mutex whose poisoning is ignored.
        if self.lock.word.swap(FREE, Ordering::Release) & SLEEPERS != 0 {
            self.lock.word.wake_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_take_turns() {
        let lock = ForkLock::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), 80_000);
    }

    #[test]
    fn a_sleeping_waiter_is_woken() {
        let lock = ForkLock::new(Vec::<u32>::new());
        let held = lock.lock();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| lock.lock().push(2));
            // The waiter spins, then sleeps; either way it gets the lock once it is left.
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(held);
            waiter.join().unwrap();
        });
        assert_eq!(*lock.lock(), vec![2]);
    }

    #[test]
    fn a_lock_held_by_an_older_generation_is_taken_over_with_a_fresh_value() {
        let lock = ForkLock::new(vec![1u32]);
        // As a fork child finds a lock that a thread of its parent held: the word names the
        // parent's generation, and no thread of this process will leave it.
        lock.word.0.store(
            held_by(generation().wrapping_sub(1)) | SLEEPERS,
            Ordering::Relaxed,
        );
        let mut guard = lock.lock();
        assert!(guard.is_empty(), "the parent's value is put aside");
        guard.push(3);
        drop(guard);
        assert_eq!(*lock.lock(), vec![3]);
        assert_eq!(lock.word.0.load(Ordering::Relaxed), FREE);
    }

    #[test]
    fn a_fork_child_takes_a_lock_a_parent_thread_held() {
        static LOCK: ForkLock<Vec<u32>> = ForkLock::new(Vec::new());
        LOCK.lock().push(1);
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            s.spawn(move || {
                let guard = LOCK.lock();
                held_tx.send(()).unwrap();
                // Held until the parent has forked and the child has exited.
                done_rx.recv().unwrap();
                drop(guard);
            });
            held_rx.recv().unwrap();
            // SAFETY: the child runs only what follows, allocation-free, then _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                // The child: a hang here is a SIGALRM, which the parent sees as a failure.
                // SAFETY: alarm and _exit are async-signal-safe.
                unsafe { libc::alarm(10) };
                after_fork_in_child();
                let fresh = LOCK.lock().is_empty();
                // SAFETY: as above.
                unsafe { libc::_exit(if fresh { 0 } else { 3 }) };
            }
            let mut status = 0;
            // SAFETY: waits for the child just forked; writes its status to our local.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            done_tx.send(()).unwrap();
            assert_eq!(waited, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child did not take the lock with a fresh value (status {status:#x})"
            );
        });
        assert_eq!(*LOCK.lock(), vec![1], "the parent's value is the parent's");
    }

    #[test]
    fn a_lock_held_in_this_generation_is_not_taken_over() {
        let lock = ForkLock::new(1u32);
        let guard = lock.lock();
        std::thread::scope(|s| {
            let other = s.spawn(|| *lock.lock());
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!other.is_finished(), "a live holder's lock is waited for");
            drop(guard);
            assert_eq!(other.join().unwrap(), 1);
        });
    }

    #[test]
    fn words_of_held_locks_are_never_free_nor_marked() {
        for g in [0, 1, 2, u32::MAX >> 1, (u32::MAX >> 1) - 1, u32::MAX] {
            assert_ne!(held_by(g), FREE, "{g}");
            assert_eq!(held_by(g) & SLEEPERS, 0, "{g}");
        }
        assert_ne!(held_by(0), held_by(1));
    }
}

/// The lock's code under a model checker: every interleaving of two or three threads (to a
/// bound on preemptions), over a futex modelled as the kernel keeps one: the check of the
/// word and the going to sleep are one step against a wake-up.
#[cfg(test)]
mod model {
    use super::*;
    use loom::sync::atomic::AtomicU32 as ModelAtomic;
    use loom::sync::{Arc, Condvar, Mutex};

    /// A futex for the model: the kernel's hash bucket is the mutex.
    struct ModelFutex {
        word: ModelAtomic,
        bucket: Mutex<()>,
        sleepers: Condvar,
    }

    impl ModelFutex {
        fn new(value: u32) -> ModelFutex {
            ModelFutex {
                word: ModelAtomic::new(value),
                bucket: Mutex::new(()),
                sleepers: Condvar::new(),
            }
        }
    }

    impl LockWord for ModelFutex {
        /// One look before sleeping: the sleeping path is walked too.
        const SPINS: u32 = 1;

        fn load(&self, order: Ordering) -> u32 {
            self.word.load(order)
        }

        fn compare_exchange(
            &self,
            current: u32,
            new: u32,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u32, u32> {
            self.word.compare_exchange(current, new, success, failure)
        }

        fn swap(&self, new: u32, order: Ordering) -> u32 {
            self.word.swap(new, order)
        }

        fn wait(&self, expected: u32) {
            let bucket = self.bucket.lock().unwrap();
            // Relaxed: as the kernel reads the word, under the bucket's lock.
            if self.word.load(Ordering::Relaxed) == expected {
                drop(self.sleepers.wait(bucket).unwrap());
            }
        }

        fn wake_one(&self) {
            let _bucket = self.bucket.lock().unwrap();
            self.sleepers.notify_one();
        }
    }

    fn check(threads: usize, held_by_an_ancestor: bool) {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(move || {
            let word = if held_by_an_ancestor {
                held_by(generation().wrapping_add(1)) | SLEEPERS
            } else {
                FREE
            };
            let lock = Arc::new(ForkLock::with_word(0u32, ModelFutex::new(word)));
            // Counted inside the lock as a read and a separate write: two holders at once
            // lose a count in some interleaving.
            let inside = Arc::new(ModelAtomic::new(0));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (lock, inside) = (lock.clone(), inside.clone());
                    loom::thread::spawn(move || {
                        let mut guard = lock.lock();
                        // Relaxed (both): the lock alone must order them.
                        let n = inside.load(Ordering::Relaxed);
                        inside.store(n + 1, Ordering::Relaxed);
                        *guard += 1;
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(inside.load(Ordering::Relaxed), threads as u32);
            assert_eq!(*lock.lock(), threads as u32);
            assert_eq!(lock.word.load(Ordering::Relaxed), FREE);
        });
    }

    #[test]
    fn two_threads_never_hold_it_at_once_and_no_wake_up_is_lost() {
        check(2, false);
    }

    #[test]
    fn three_threads_never_hold_it_at_once_and_no_wake_up_is_lost() {
        check(3, false);
    }

    #[test]
    fn threads_taking_over_an_ancestors_lock_take_it_one_at_a_time() {
        check(2, true);
    }
}
