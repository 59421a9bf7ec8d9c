//! Signals taken synchronously: blocked in the calling thread, and so in every thread it
//! starts afterwards, then waited for by one thread (the daemon's main loop, the demo's
//! refresh, `exec`'s forwarder). Nothing runs in a signal handler. Dropping the guard
//! restores the thread's mask as it was.

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::time::Duration;

/// A set of signals blocked in this thread until dropped.
pub struct BlockedSignals {
    set: SigSet,
    before: SigSet,
}

impl BlockedSignals {
    /// Blocks `signals` in this thread. Call it before starting the threads that must not
    /// take them.
    pub fn block(signals: &[Signal]) -> std::io::Result<BlockedSignals> {
        let mut set = SigSet::empty();
        for &signal in signals {
            set.add(signal);
        }
        let before = set.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
        Ok(BlockedSignals { set, before })
    }

    /// The set, for a thread that waits on a copy of it ([`wait_in`]).
    pub fn set(&self) -> SigSet {
        self.set
    }

    /// The mask this thread had before, for a child to start with.
    pub fn before(&self) -> SigSet {
        self.before
    }

    /// The next signal of the set (its number).
    pub fn wait(&self) -> i32 {
        wait_in(&self.set)
    }

    /// Waits up to `timeout` for a signal of the set; its number, if one came.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<i32> {
        let timeout = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // nix has no sigtimedwait. SAFETY: the set is an initialised sigset_t borrowed for
        // the call; the info argument may be null; the timeout outlives the call.
        let sig = unsafe { libc::sigtimedwait(self.set.as_ref(), std::ptr::null_mut(), &timeout) };
        // -1 is the timeout (EAGAIN) or an interruption (EINTR): no signal either way.
        (sig > 0).then_some(sig)
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // Restoring a mask saved by `block` cannot fail.
        let _ = self.before.thread_set_mask();
    }
}

/// The next signal of `set` (its number), which the calling thread has blocked.
pub fn wait_in(set: &SigSet) -> i32 {
    loop {
        // sigwait fails only on a set it cannot use; ours are valid, so this does not spin.
        if let Ok(signal) = set.wait() {
            return signal as i32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_waits_for_its_taker_and_the_mask_comes_back() {
        let outer = SigSet::thread_get_mask().unwrap();
        assert!(!outer.contains(Signal::SIGUSR2));
        let blocked = BlockedSignals::block(&[Signal::SIGUSR2]).unwrap();
        assert!(SigSet::thread_get_mask().unwrap().contains(Signal::SIGUSR2));
        assert_eq!(blocked.wait_timeout(Duration::from_millis(10)), None);
        // To this thread only (raise is pthread_kill of the caller).
        nix::sys::signal::raise(Signal::SIGUSR2).unwrap();
        assert_eq!(
            blocked.wait_timeout(Duration::from_secs(30)),
            Some(libc::SIGUSR2)
        );
        drop(blocked);
        assert!(!SigSet::thread_get_mask().unwrap().contains(Signal::SIGUSR2));
    }
}
