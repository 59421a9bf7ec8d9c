//! The hook table's machinery: what one declaration in [`table`] turns into.
//!
//! For each entry `hook_table!` derives
//! - the exported `extern "C"` function, which counts the call (when asked), finds the real
//!   function, and runs the handler under `catch_unwind` — a panic returns
//!   `CUDA_ERROR_UNKNOWN` / `NVML_ERROR_UNKNOWN`, a missing real function
//!   `CUDA_ERROR_NOT_FOUND` / `NVML_ERROR_FUNCTION_NOT_FOUND` without running the handler;
//! - a module of the same name holding the real function's slot, resolved on first use with
//!   the C library's `dlsym` on the real library's handle, and the call counter;
//! - one [`Hook`] in [`HOOKS`], sorted by name (checked at compile time), from which `dlsym`
//!   routing, `cuGetProcAddress` substitution and `tessera_debug_counter` work.

mod counters;
mod table;

pub(crate) use counters::count;
pub(crate) use table::HOOKS;

use crate::driver::Lib;
use std::cmp::Ordering as Order;
use std::ffi::{c_char, c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

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

/// A real function's address, looked up on first use.
#[derive(Debug)]
pub(crate) struct RealSlot {
    /// Null: not looked up yet; [`MISSING`]: looked up and absent; else the address.
    ptr: AtomicPtr<c_void>,
    lib: Lib,
    name: &'static CStr,
}

/// A looked-up, absent function. Never a code address.
const MISSING: usize = 1;

impl RealSlot {
    pub(crate) const fn new(lib: Lib, name: &'static CStr) -> RealSlot {
        RealSlot {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
            lib,
            name,
        }
    }

    /// The real function, or `None` if the real library lacks it.
    #[inline(always)]
    pub(crate) fn get(&self) -> Option<NonNull<c_void>> {
        // Acquire pairs with the Release store in `resolve`: the address was found by a
        // `dlsym` that finished loading its library before the store.
        let p = self.ptr.load(Ordering::Acquire);
        if p as usize > MISSING {
            // SAFETY: just checked non-null.
            return Some(unsafe { NonNull::new_unchecked(p) });
        }
        if p as usize == MISSING {
            return None;
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> Option<NonNull<c_void>> {
        let found = crate::driver::resolve(self.lib, self.name);
        if found.is_none() {
            crate::tlog!(debug, "the real library has no {:?}", self.name);
        }
        let p = found.map_or(MISSING as *mut c_void, NonNull::as_ptr);
        // Release: see `get`. Racing threads store the same outcome.
        self.ptr.store(p, Ordering::Release);
        found
    }
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

/// Declares the hook table; see the module documentation. Each entry:
///
/// ```text
/// cuda fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) [cuMemAlloc @ 3020] => handler;
/// cuda fn cuLaunchKernel_ptsz(…) [cuLaunchKernel @ 7000 per_thread] => handler;
/// nvml fn nvmlDeviceGetMemoryInfo(device: *mut c_void, memory: *mut c_void) => handler;
/// ```
///
/// Every function returns the library's 32-bit result code; the handler is
/// `unsafe fn(real, args…) -> u32` with `real` the real function of the variant called.
macro_rules! hook_table {
    ($(
        $lib:ident fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? )
        $( [ $base:ident @ $since:literal $($flavour:ident)? ] )?
        => $handler:path;
    )*) => {
        $(
            #[allow(non_snake_case)]
            pub(crate) mod $name {
                #[allow(unused_imports)]
                use super::*;

                /// The real function's C signature.
                pub(crate) type Real = unsafe extern "C" fn($($ty),*) -> u32;

                pub(crate) static REAL: $crate::hooks::RealSlot = $crate::hooks::RealSlot::new(
                    $crate::hooks::hook_table!(@lib $lib),
                    match ::std::ffi::CStr::from_bytes_with_nul(
                        concat!(stringify!($name), "\0").as_bytes(),
                    ) {
                        Ok(name) => name,
                        Err(_) => panic!("a hook name holds a NUL"),
                    },
                );

                pub(crate) static CALLS: ::std::sync::atomic::AtomicU64 =
                    ::std::sync::atomic::AtomicU64::new(0);

                /// The real function, if the real library has it.
                #[inline(always)]
                pub(crate) fn real() -> Option<Real> {
                    // SAFETY: the slot only ever holds the address of this very symbol in the
                    // real library, whose C signature is the one declared in the table.
                    REAL.get().map(|p| unsafe {
                        ::std::mem::transmute::<*mut ::std::ffi::c_void, Real>(p.as_ptr())
                    })
                }
            }

            #[doc = concat!("Our `", stringify!($name), "`; see the hook table.")]
            ///
            /// # Safety
            /// Called from C with the library's contract for this entry point.
            #[no_mangle]
            #[allow(non_snake_case)]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
                const CODES: (u32, u32) =
                    $crate::hooks::failure_codes($crate::hooks::hook_table!(@lib $lib));
                $crate::hooks::count(&$name::CALLS);
                let Some(real) = $name::real() else {
                    return CODES.0;
                };
                let call = ::std::panic::AssertUnwindSafe(move || {
                    // SAFETY: the caller's arguments carry the entry point's contract, and
                    // `real` is that entry point in the real library.
                    unsafe { $handler(real, $($arg),*) }
                });
                ::std::panic::catch_unwind(call).unwrap_or(CODES.1)
            }
        )*

        /// Every hook, sorted by name.
        pub(crate) static HOOKS: [$crate::hooks::Hook; [$(stringify!($name)),*].len()] = [$(
            $crate::hooks::Hook {
                name: stringify!($name),
                lib: $crate::hooks::hook_table!(@lib $lib),
                proc_key: $crate::hooks::hook_table!(@key $( $base $since $($flavour)? )?),
                wrapper: $crate::hooks::Wrapper::new($name as *const ::std::ffi::c_void),
                real: &$name::REAL,
                calls: &$name::CALLS,
            },
        )*];

        const _: () = assert!(
            $crate::hooks::strictly_sorted(&[$(stringify!($name)),*]),
            "the hook table must list each name once, in byte order"
        );
    };
    (@lib cuda) => { $crate::driver::Lib::Cuda };
    (@lib nvml) => { $crate::driver::Lib::Nvml };
    (@key) => { None };
    (@key $base:ident $since:literal) => {
        Some($crate::hooks::ProcKey { base: stringify!($base), since: $since, per_thread: false })
    };
    (@key $base:ident $since:literal per_thread) => {
        Some($crate::hooks::ProcKey { base: stringify!($base), since: $since, per_thread: true })
    };
}
pub(crate) use hook_table;

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
