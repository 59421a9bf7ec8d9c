//! The real functions of the hook table's entries, hooked and call-only: for each, a module
//! of the entry's name holding its C signature (`Real`), its slot, and `real()`. Handlers
//! take their function types from here and call the real libraries through here, never
//! through a declaration of their own.

use super::table::hook_table;
use crate::driver::Lib;
use std::ffi::{c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A real function's address, looked up on first use.
#[derive(Debug)]
pub(crate) struct RealSlot {
    /// Null: not looked up yet; [`MISSING`]: looked up and absent; else the address.
    ptr: AtomicPtr<c_void>,
    pub(super) lib: Lib,
    pub(super) name: &'static CStr,
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

/// Expands the table (see `table::hook_table`) into one module per entry.
macro_rules! declare_real {
    (
        $( hook $lib:ident $name:ident [$($sig:tt)*] => $handler:path; )*
        $( call $clib:ident $cname:ident [$($csig:tt)*]; )*
    ) => {
        $(
            declare_real!(@entry $lib $name [$($sig)*] {
                /// Calls of our export, when counted (`TESSERA_DEBUG_COUNTERS=1`).
                pub(crate) static CALLS: ::std::sync::atomic::AtomicU64 =
                    ::std::sync::atomic::AtomicU64::new(0);
            });
        )*
        $( declare_real!(@entry $clib $cname [$($csig)*] {}); )*

        /// The call-only entries' slots, for the test that each resolves.
        #[cfg(test)]
        pub(crate) static CALL_ONLY: [&RealSlot; [$(stringify!($cname)),*].len()] =
            [$(&$cname::REAL),*];
    };
    (@entry $lib:ident $name:ident [$($sig:tt)*] { $($extra:item)* }) => {
        #[allow(non_snake_case)]
        pub(crate) mod $name {
            #[allow(unused_imports)] // the types of the NVML signatures
            use ::std::ffi::{c_char, c_uint, c_void};

            /// The real function's C signature.
            pub(crate) type Real = declare_real!(@real $lib $name [$($sig)*]);

            pub(crate) static REAL: $crate::hooks::real::RealSlot =
                $crate::hooks::real::RealSlot::new(
                    declare_real!(@lib $lib),
                    match ::std::ffi::CStr::from_bytes_with_nul(
                        concat!(stringify!($name), "\0").as_bytes(),
                    ) {
                        Ok(name) => name,
                        Err(_) => panic!("a table name holds a NUL"),
                    },
                );

            /// The real function, if the real library has it.
            #[inline(always)]
            pub(crate) fn real() -> Option<Real> {
                // SAFETY: the slot only ever holds the address of this very symbol in the
                // real library, whose C signature is the one declared in the table.
                REAL.get().map(|p| unsafe {
                    ::std::mem::transmute::<*mut ::std::ffi::c_void, Real>(p.as_ptr())
                })
            }

            $($extra)*
        }
    };
    // A CUDA entry's signature is the ABI crate's; an NVML entry's is the table's.
    (@real cuda $name:ident []) => { ::tessera_cuda_abi::entry::$name::Pfn };
    (@real nvml $name:ident [($($arg:ident : $ty:ty),*)]) => {
        unsafe extern "C" fn($($ty),*) -> u32
    };
    (@lib cuda) => { $crate::driver::Lib::Cuda };
    (@lib nvml) => { $crate::driver::Lib::Nvml };
}

hook_table!(declare_real);
