//! The exports of the hooked entries and [`HOOKS`]: the hook table expanded into the
//! functions the application calls, each of which calls its entry's handler with the real
//! function from [`super::real`].

use super::table::hook_table;
use crate::{compute, current, launch, memory, proc_address, visibility};
#[allow(unused_imports)] // the types of the NVML signatures
use std::ffi::{c_char, c_int, c_uint, c_void};

/// Expands the table (see `table::hook_table`): the hooked entries' exports, and [`HOOKS`].
/// Every function returns the library's 32-bit result code; the handler is
/// `unsafe fn(real, args…) -> u32` with `real` the real function of the variant called. A
/// CUDA export gets its parameters from the ABI crate (`signature!`), an NVML one from the
/// table.
macro_rules! declare_exports {
    (
        $( hook $lib:ident $name:ident [$($sig:tt)*] => $handler:path; )*
        $( call $clib:ident $cname:ident [$($csig:tt)*]; )*
    ) => {
        $( declare_exports!(@signature $lib $name [$($sig)*] $handler); )*

        /// Every hook, sorted by name.
        pub(crate) static HOOKS: [$crate::hooks::hook::Hook; [$(stringify!($name)),*].len()] = [$(
            $crate::hooks::hook::Hook {
                name: stringify!($name),
                lib: declare_exports!(@lib $lib),
                proc_key: declare_exports!(@key $lib $name),
                wrapper: $crate::hooks::hook::Wrapper::new($name as *const ::std::ffi::c_void),
                real: &$crate::hooks::real::$name::REAL,
                calls: &$crate::hooks::real::$name::CALLS,
            },
        )*];

        const _: () = assert!(
            $crate::hooks::hook::strictly_sorted(&[$(stringify!($name)),*]),
            "the hook table must list each name once, in byte order"
        );
    };
    (@signature cuda $name:ident [] $handler:path) => {
        ::tessera_cuda_abi::signature!($name => declare_exports { @export cuda [$handler] });
    };
    (@signature nvml $name:ident [($($arg:ident : $ty:ty),*)] $handler:path) => {
        declare_exports! { @export nvml [$handler] $name ($($arg: $ty),*) }
    };
    (@export $lib:ident [$handler:path] $name:ident ($($arg:ident : $ty:ty),*)) => {
        #[doc = concat!("Our `", stringify!($name), "`; see the hook table.")]
        ///
        /// # Safety
        /// Called from C with the library's contract for this entry point.
        #[no_mangle]
        #[allow(non_snake_case)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> u32 {
            use $crate::hooks::real::$name as entry;
            const CODES: (u32, u32) =
                $crate::hooks::hook::failure_codes(declare_exports!(@lib $lib));
            $crate::hooks::counters::count(&entry::CALLS);
            let Some(real) = entry::real() else {
                return CODES.0;
            };
            let call = ::std::panic::AssertUnwindSafe(move || {
                // SAFETY: the caller's arguments carry the entry point's contract, and
                // `real` is that entry point in the real library.
                unsafe { $handler(real, $($arg),*) }
            });
            ::std::panic::catch_unwind(call).unwrap_or(CODES.1)
        }
    };
    (@lib cuda) => { $crate::driver::Lib::Cuda };
    (@lib nvml) => { $crate::driver::Lib::Nvml };
    (@key cuda $name:ident) => { Some(::tessera_cuda_abi::entry::$name::KEY) };
    (@key nvml $name:ident) => { None };
}

hook_table!(declare_exports);
