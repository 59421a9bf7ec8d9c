//! Fork safety: a forked child is a new process of the container, with its own process slot.
//! The child handler only lets go of what belongs to the parent; the child claims its own
//! slot at its next hooked call.

/// Registers the child handler; called once, from the constructor.
pub(crate) fn register() {
    // SAFETY: `in_child` is an extern "C" function of this library; the C library drops the
    // handlers a library registered if that library is ever unloaded.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    if rc != 0 {
        crate::tlog!(
            warn,
            "cannot register the fork handler (error {rc}); forked children share their parent's process slot"
        );
    }
}

/// Runs in the child right after `fork`, where only async-signal-safe work is allowed.
extern "C" fn in_child() {
    crate::fork_lock::after_fork_in_child();
    crate::container::after_fork_in_child();
    crate::compute::after_fork_in_child();
    crate::rm::after_fork_in_child();
}
