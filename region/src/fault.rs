//! Surviving a region file that shrinks under its mapping.
//!
//! A container's processes can truncate their region file at any time. Touching a page of a
//! shared mapping past the file's end raises `SIGBUS`, which by default kills the process
//! that touched it: for `controld`, which maps every container's region, one container
//! could take down the node's daemon, and any process of a container could kill its
//! neighbours' processes under the preload library. Both call [`install`]: from then on
//! every region and board the process maps is listed here, and a `SIGBUS` inside one of
//! them replaces that mapping, in place, with private zero pages and marks it faulted. The
//! faulting access is retried on the zeros and the process goes on; the owner of a region
//! sees that it faulted (`Region::faulted`, `Region::verify`) and sets it aside.
//!
//! The handler only loads atomics and calls `mmap` (a plain system call on Linux) and
//! `sigaction`; it never allocates or locks. A fault at an address that is not a listed
//! mapping is the host application's business: it goes to the handler that was in place
//! before [`install`] (the preload library may install after the application), or, where
//! that was the default action, the default action is restored and the access faults again,
//! so the process dies as it would have without this module.
//!
//! These calls stay raw `libc` on purpose: the handler must be async-signal-safe and touch
//! nothing but the kernel, and the installer sets up that same handler's exact signature.
//! Signal masks and waits elsewhere (the daemon, `exec`) go through `nix`.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// How many mappings one process can have listed at once; a node runs far fewer containers.
const SLOTS: usize = 4096;

/// Set once the handler is in place; until then nothing is listed.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Taken by the one caller of [`install`] that installs the handler.
static INSTALLING: AtomicU8 = AtomicU8::new(0);
/// The action in place before the handler, for faults that are not ours.
static PREVIOUS: Previous = Previous(UnsafeCell::new(MaybeUninit::zeroed()));

/// The `SIGBUS` action [`install`] replaced: written once, by the caller that took
/// [`INSTALLING`], before the handler that reads it is in place.
struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: written once before the handler is installed (the `sigaction` call that installs
// it is the partner of every later read: the kernel runs the handler only after it), and
// only read afterwards.
unsafe impl Sync for Previous {}
/// The start address of each listed mapping; 0 is free.
static MAPPED: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// The length of the mapping listed in the same slot.
static LENGTH: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
/// Whether the mapping listed in the same slot has been replaced with zeros.
static FAULTED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];

/// Installs the `SIGBUS` handler for this process. Idempotent; regions mapped before the
/// first call are not guarded.
pub fn install() -> std::io::Result<()> {
    // Acquire: pairs with the Release store below (a second caller sees the handler set).
    if INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    // Relaxed: only who installs is decided here; a caller that loses the race returns at
    // once, its mappings unguarded until the handler is in place (as before any install).
    // Two installers would make the second save the first's handler as the one to chain
    // to, and a fault not ours would loop between them.
    if INSTALLING
        .compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return Ok(());
    }
    // SAFETY: sigaction is plain data, zeroed then filled; the handler has the
    // SA_SIGINFO signature; the old action is written into `PREVIOUS`, which this caller
    // alone writes (it took `INSTALLING`) and the handler reads only once installed by this
    // very call; the result is checked.
    let rc = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, (*PREVIOUS.0.get()).as_mut_ptr())
    };
    if rc != 0 {
        // Relaxed: as above; a later call tries again.
        INSTALLING.store(0, Ordering::Relaxed);
        return Err(std::io::Error::last_os_error());
    }
    // Release: pairs with the Acquire load in `guard`, so a mapping is listed only once the
    // handler that reads the list is in place.
    INSTALLED.store(true, Ordering::Release);
    Ok(())
}

/// Lists a shared file mapping of `len` bytes at `start`; returns its slot, or `None` when
/// no handler is installed (or, past [`SLOTS`] mappings, when the list is full).
pub(crate) fn guard(start: usize, len: usize) -> Option<usize> {
    // Acquire: pairs with the Release store in `install`.
    if !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    for (slot, entry) in MAPPED.iter().enumerate() {
        // Relaxed: a free slot only; the Release store below publishes it.
        if entry.load(Ordering::Relaxed) != 0 {
            continue;
        }
        // Acquire on success: pairs with the Release store in `unguard`, so the slot's old
        // flag and length are settled before they are written again. Relaxed on failure:
        // the slot is simply taken.
        if entry
            .compare_exchange(0, usize::MAX, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // Relaxed: published by the Release store of the start below.
            LENGTH[slot].store(len, Ordering::Relaxed);
            // Release: pairs with the Acquire load in `on_sigbus`, which then sees the
            // length above (and the flag `unguard` reset before it freed the slot).
            entry.store(start, Ordering::Release);
            return Some(slot);
        }
    }
    None
}

/// Takes a mapping off the list (before it is unmapped).
pub(crate) fn unguard(slot: usize) {
    // Relaxed: ordered before the slot is freed by the Release store below.
    FAULTED[slot].store(false, Ordering::Relaxed);
    // Release: pairs with the Acquire in `guard`'s compare_exchange of a later user of the
    // slot; nothing of this mapping is read after it.
    MAPPED[slot].store(0, Ordering::Release);
}

/// Whether the mapping in `slot` was replaced with zeros after a fault.
pub(crate) fn faulted(slot: usize) -> bool {
    // Acquire: pairs with the Release store in `on_sigbus`.
    FAULTED[slot].load(Ordering::Acquire)
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler; for SIGBUS
    // si_addr is the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    for (slot, entry) in MAPPED.iter().enumerate() {
        // Acquire: pairs with the Release compare_exchange in `guard`.
        let start = entry.load(Ordering::Acquire);
        // Relaxed: published by that Release store.
        let len = LENGTH[slot].load(Ordering::Relaxed);
        if start == 0 || start == usize::MAX || addr < start || addr - start >= len {
            continue;
        }
        // SAFETY: replaces exactly the listed mapping, which its owner keeps mapped until it
        // has taken it off the list (so the range is ours), with private zero pages of the
        // same size and protection; every byte pattern is a valid region layout, so the
        // owner's references stay valid and read zeros. mmap is a plain system call.
        let replaced = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced != libc::MAP_FAILED {
            // Release: pairs with the Acquire load in `faulted`.
            FAULTED[slot].store(true, Ordering::Release);
            return;
        }
        break;
    }
    pass_on(sig, info, ctx);
}

/// A fault that is not a region of ours (or one that could not be replaced): to the handler
/// in place before ours, else the default action, on the retry.
fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: written before this handler was installed, read-only since (see `Previous`).
    let previous = unsafe { (*PREVIOUS.0.get()).assume_init_ref() };
    let handler = previous.sa_sigaction;
    if handler != libc::SIG_DFL && handler != libc::SIG_IGN {
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            // SAFETY: an SA_SIGINFO action's handler has this signature; it gets the
            // arguments the kernel gave this one, as if it had been called directly.
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(handler) };
            handler(sig, info, ctx);
        } else {
            // SAFETY: a plain action's handler takes the signal number alone.
            let handler: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
            handler(sig);
        }
        return;
    }
    // The default action (an ignored SIGBUS from a fault kills the process all the same).
    // SAFETY: sigaction is plain data, zeroed (SIG_DFL); sigaction is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}
