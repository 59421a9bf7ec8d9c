//! The hook table's machinery: what one declaration in [`table`] turns into.
//!
//! For each hooked entry
//! - the exported `extern "C"` function ([`exports`]), which counts the call (when asked),
//!   finds the real function, and runs the handler under `catch_unwind` — a panic returns
//!   `CUDA_ERROR_UNKNOWN` / `NVML_ERROR_UNKNOWN`, a missing real function
//!   `CUDA_ERROR_NOT_FOUND` / `NVML_ERROR_FUNCTION_NOT_FOUND` without running the handler;
//! - a module of the same name in [`real`] holding the real function's C signature (`Real`),
//!   its slot, resolved on first use with the C library's `dlsym` on the real library's
//!   handle, and the call counter;
//! - one [`Hook`] in [`HOOKS`], sorted by name (checked at compile time), from which `dlsym`
//!   routing, `cuGetProcAddress` substitution and `tessera_debug_counter` work.
//!
//! A call-only entry gets its module in [`real`] (signature and slot) and nothing else.

mod counters;
pub(crate) mod exports;
pub(crate) mod real;
mod table;

pub(crate) use counters::count;
pub(crate) use exports::HOOKS;

use crate::driver::Lib;
use real::RealSlot;
use std::cmp::Ordering as Order;
use std::ffi::{c_char, c_void};
use std::sync::atomic::AtomicU64;

/// What `cuGetProcAddress` knows an entry by: the base name, the first CUDA version
/// (`1000 × major + 10 × minor`) with this ABI, and whether it is the per-thread-default-stream
/// variant (`_ptsz`/`_ptds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcKey {
    pub(crate) base: &'static str,
    pub(crate) since: u32,
    pub(crate) per_thread: bool,
}

/// The address of one of our exported functions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wrapper(*const c_void);

// SAFETY: the address of code in this library, never written through nor read as data.
unsafe impl Sync for Wrapper {}

impl Wrapper {
    pub(crate) const fn new(p: *const c_void) -> Wrapper {
        Wrapper(p)
    }

    pub(crate) fn as_ptr(self) -> *mut c_void {
        self.0.cast_mut()
    }
}

/// One hooked entry point.
#[derive(Debug)]
pub(crate) struct Hook {
    /// The exported symbol.
    pub(crate) name: &'static str,
    pub(crate) lib: Lib,
    /// `None` for NVML, which has no versioned lookup.
    pub(crate) proc_key: Option<ProcKey>,
    /// Our exported function.
    pub(crate) wrapper: Wrapper,
    #[cfg_attr(not(test), allow(dead_code))] // read by the coverage test
    pub(crate) real: &'static RealSlot,
    pub(crate) calls: &'static AtomicU64,
}

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

/// Whether names are strictly increasing, for the compile-time check on the table.
pub(crate) const fn strictly_sorted(names: &[&str]) -> bool {
    let mut i = 1;
    while i < names.len() {
        let (a, b) = (names[i - 1].as_bytes(), names[i].as_bytes());
        let mut j = 0;
        loop {
            if j == a.len() {
                if j == b.len() {
                    return false; // equal: a name declared twice
                }
                break;
            }
            if j == b.len() || a[j] > b[j] {
                return false;
            }
            if a[j] < b[j] {
                break;
            }
            j += 1;
        }
        i += 1;
    }
    true
}

/// The result code a library returns for a missing function and for a panic.
pub(crate) const fn failure_codes(lib: Lib) -> (u32, u32) {
    match lib {
        // CUDA_ERROR_NOT_FOUND, CUDA_ERROR_UNKNOWN
        Lib::Cuda => (500, 999),
        // NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_UNKNOWN
        Lib::Nvml => (13, 999),
    }
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

#[cfg(test)]
mod tests;
