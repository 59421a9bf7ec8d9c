//! Per-hook call counters, for tests that must prove which wrapper a path reached.
//!
//! Off unless `TESSERA_DEBUG_COUNTERS=1`; when off, a hook pays one relaxed load.

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
