//! Ctrl-C and friends: blocked while the demo runs and taken by its refresh wait, so that a
//! signal ends the demo in order — workloads stopped, daemon stopped, files removed.

use std::time::Duration;

/// SIGINT, SIGTERM and SIGHUP, blocked in this thread (and the threads it starts) until
/// dropped. Children start with an empty mask (std resets it), so they get them normally.
pub struct Signals {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl Signals {
    /// Blocks them.
    pub fn block() -> std::io::Result<Signals> {
        // SAFETY: sigset_t is plain data that sigemptyset initialises; only these sets and
        // this thread's mask are touched; the result is checked.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, sig);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc));
            }
            Ok(Signals { set, old })
        }
    }

    /// Waits up to `timeout` for one of them; the signal, if one came.
    pub fn wait(&self, timeout: Duration) -> Option<i32> {
        let timeout = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `set` was initialised in `block`; the info argument may be null; the
        // timeout is a valid timespec that outlives the call.
        let sig = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &timeout) };
        // -1 is the timeout (EAGAIN) or an interruption (EINTR): no signal either way.
        (sig > 0).then_some(sig)
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        // SAFETY: `old` is the mask `block` saved; restoring it touches only this thread.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}
