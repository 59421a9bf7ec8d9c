//! Finding the hooks: by exported name (for `dlsym` routing and the debug counters) and by
//! `cuGetProcAddress`'s base name, version and flavour; no allocation, no panic.

use super::exports::HOOKS;
use super::hook::Hook;
use std::cmp::Ordering as Order;
use std::ffi::{c_char, CStr};
use std::sync::atomic::Ordering;

/// Compares a table name with a C string, byte by byte, without reading past either end.
///
/// # Safety
/// `c` is a NUL-terminated string.
unsafe fn compare(name: &str, c: *const c_char) -> Order {
    for (i, &b) in name.as_bytes().iter().enumerate() {
        // SAFETY: every byte before index i matched a non-NUL byte of `name`, so the string
        // at `c` is at least i + 1 bytes long including its NUL.
        let cb = unsafe { *c.add(i) } as u8;
        match b.cmp(&cb) {
            Order::Equal => {}
            other => return other,
        }
    }
    // SAFETY: as above, for i = name.len().
    if unsafe { *c.add(name.len()) } == 0 {
        Order::Equal
    } else {
        Order::Less
    }
}

/// The hook for an exported name: a binary search of [`HOOKS`], no allocation, no panic.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[inline]
pub(crate) unsafe fn find(name: *const c_char) -> Option<&'static Hook> {
    // Every hooked name starts with "cu" or "nvml": most lookups stop here.
    // SAFETY: a NUL-terminated string has at least one byte.
    let first = unsafe { *name } as u8;
    if first != b'c' && first != b'n' {
        return None;
    }
    HOOKS
        // SAFETY: `name` is NUL-terminated, by the contract.
        .binary_search_by(|h| unsafe { compare(h.name, name) })
        .ok()
        .and_then(|i| HOOKS.get(i))
}

/// The entry a versioned lookup of `base` resolves to among ours: the newest revision not
/// newer than `version`; with `per_thread`, the per-thread variant of that revision where
/// there is one. `None` when the driver's answer is not one of ours — in particular when
/// `version` predates every revision we hook (an older, unhooked revision applies).
///
/// This is only right if, for every base name, the table hooks every revision from its
/// oldest hooked one on, and the per-thread twin of each that has one; the coverage test
/// checks that against the simulated driver.
pub(crate) fn for_proc_address(
    hooks: &'static [Hook],
    base: &[u8],
    version: u32,
    per_thread: bool,
) -> Option<&'static Hook> {
    let newest = |pt: bool| {
        hooks
            .iter()
            .filter_map(|h| h.proc_key.map(|k| (h, k)))
            .filter(|(_, k)| k.base.as_bytes() == base && k.since <= version && k.per_thread == pt)
            .max_by_key(|(_, k)| k.since)
    };
    let legacy = newest(false);
    if per_thread {
        if let Some((h, k)) = newest(true) {
            if legacy.is_none_or(|(_, l)| k.since >= l.since) {
                return Some(h);
            }
        }
    }
    legacy.map(|(h, _)| h)
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
    match unsafe { find(name.as_ptr()) } {
        // Relaxed: see `count`.
        Some(hook) => hook.calls.load(Ordering::Relaxed),
        None => u64::MAX,
    }
}
