//! The CUDA driver's ABI as Tessera speaks it, declared once for the preload library
//! (`libtessera.so`), the simulated driver (`libcuda.so.1`) and the benchmarks.
//!
//! - [`types`]: handles, device pointers, the structures that cross the ABI by pointer;
//! - [`result`]: `CUresult` and every result code, with the driver's name and description
//!   of each, and [`CuResult`] / [`CuError`] to use them as a `Result`;
//! - [`entry`]: one module per entry point: its exported symbol, the base name and CUDA
//!   version `cuGetProcAddress` knows it by ([`ProcKey`]), whether it is the
//!   per-thread-default-stream variant, and, where declared, its C signature (`Pfn`);
//! - [`proc_address`]: the table of every revision and how a versioned lookup resolves;
//! - [`nvml`]: NVML's result codes, which the same three speak on NVML's side.
//!
//! Everything here is a fact of the protocol written down from its documentation; the crate
//! allocates nothing and depends on nothing, because it is linked into the exports of the
//! preload library, which run inside the application's CUDA calls.

#![no_std]

pub mod entry;
pub mod nvml;
pub mod proc_address;
pub mod proc_key;
pub mod result;
pub mod types;

pub use core::ffi::{c_char, c_int, c_uint, c_void};
pub use proc_address::{ProcEntry, ProcKey, QueryResult};
pub use result::*;
pub use types::*;

#[cfg(test)]
mod tests {
    use crate::*;

    /// Defines a function of the signature `signature!` hands over, for the test below.
    macro_rules! define {
        ($name:ident ( $($arg:ident : $ty:ty),* )) => {
            #[allow(non_snake_case)]
            unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
                $( let _ = $arg; )*
                CUDA_ERROR_NOT_READY
            }
        };
    }

    signature!(cuMemAlloc_v2 => define {});
    signature!(cuCtxSynchronize => define {});

    #[test]
    fn signature_defines_a_function_of_the_declared_type() {
        let f: entry::cuMemAlloc_v2::Pfn = cuMemAlloc_v2;
        let mut p: CUdeviceptr = 0;
        // SAFETY: the test's own function, which only returns.
        assert_eq!(unsafe { f(&mut p, 1) }, CUDA_ERROR_NOT_READY);
        let g: entry::cuCtxSynchronize::Pfn = cuCtxSynchronize;
        // SAFETY: as above.
        assert_eq!(unsafe { g() }, CUDA_ERROR_NOT_READY);
        const _: () = entry::assert_signature::<
            entry::cuInit::Declared,
            unsafe extern "C" fn(u32) -> CUresult,
        >();
    }
}
