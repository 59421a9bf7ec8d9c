//! Per-hook call counters, for tests that must prove which wrapper a path reached.
//!
//! Off unless `TESSERA_DEBUG_COUNTERS=1`; when off, a hook pays one relaxed load.

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Counts one call of a hook, if counters are on.
#[inline(always)]
pub(crate) fn count(calls: &AtomicU64) {
    // Relaxed: the switch orders nothing; the counters are statistics read after the fact.
    let state = STATE.load(Ordering::Relaxed);
    if state == OFF {
        return;
    }
    if state == ON || read_switch() {
        // Relaxed: a count, read by the test after the calls it counts returned.
        calls.fetch_add(1, Ordering::Relaxed);
    }
}

#[cold]
fn read_switch() -> bool {
    let on = crate::env::var_raw(crate::env::DEBUG_COUNTERS).is_some_and(|v| v.to_bytes() == b"1");
    // Relaxed: see `count`; racing threads store the same value.
    STATE.store(if on { ON } else { OFF }, Ordering::Relaxed);
    on
}

/// How many times the hook exported as `name` ran (`TESSERA_DEBUG_COUNTERS=1`), e.g.
/// `"cuLaunchKernel_ptsz"`; 0 with counters off; `u64::MAX` for a name that is not hooked.
///
/// # Safety
/// `name` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tessera_debug_counter(name: *const c_char) -> u64 {
    if name.is_null() {
        return u64::MAX;
    }
    // SAFETY: non-null and NUL-terminated, by the contract.
    let name = unsafe { CStr::from_ptr(name) };
    // SAFETY: a CStr is NUL-terminated.
    match unsafe { super::find(name.as_ptr()) } {
        // Relaxed: see `count`.
        Some(hook) => hook.calls.load(Ordering::Relaxed),
        None => u64::MAX,
    }
}
