//! What the runtime shares with tools (profilers, debuggers) through the driver. No tool is
//! ever attached to this driver, so the answers say "nobody is listening".

use super::{index, unknown, Table, NONE};
use crate::ffi::{CUcontext, CUresult};
use std::ffi::c_void;
use std::sync::atomic::AtomicU32;

/// Per-thread state of tools: the runtime only needs the table to exist. cuBLASLt 13 calls
/// slot 2 with one out-pointer as it chooses a matrix product's kernel, and hands what it
/// gets to slot 4 of the runtime 13 interface, a context's id: the calling thread's current
/// context, which is what it is answered. Its other slots refuse, as no tool is attached.
pub(super) static TOOLS_THREAD_STATE: Table<4> = {
    const T: usize = index::TOOLS_THREAD_STATE;
    Table::sized([
        NONE,
        unknown::<T, 1>(),
        current_context as *const c_void,
        unknown::<T, 3>(),
    ])
};

/// Writes the calling thread's current context; fails, as the driver's entry points do,
/// when there is none.
unsafe extern "C" fn current_context(out: *mut CUcontext) -> CUresult {
    super::slot(|| {
        let ctx = crate::model::context::current()?;
        // SAFETY: write_out checks null; the caller passes a pointer to a context handle.
        unsafe { crate::ffi::write_out(out, ctx.handle()) }
    })
}

/// Where tools would subscribe to the runtime's callbacks.
pub(super) static TOOLS_CALLBACKS: Table<7> = {
    const T: usize = index::TOOLS_CALLBACKS;
    Table::sized([
        NONE,
        unknown::<T, 1>(),
        // 2: the array of per-callback enable words the runtime reads before each call.
        callback_enables as *const c_void,
        unknown::<T, 3>(),
        unknown::<T, 4>(),
        unknown::<T, 5>(),
        // 6: a smaller array of the same kind, for the runtime's own domain.
        domain_enables as *const c_void,
    ])
};

/// Words of [`CALLBACK_ENABLES`]: room for every callback id of the runtime's API.
const CALLBACK_WORDS: usize = 1024;
/// Words of [`DOMAIN_ENABLES`].
const DOMAIN_WORDS: usize = 14;

/// All zero, and never set: no callback is enabled. Atomics, because the runtime holds a
/// pointer to them and may write (a tool would).
static CALLBACK_ENABLES: [AtomicU32; CALLBACK_WORDS] =
    [const { AtomicU32::new(0) }; CALLBACK_WORDS];
static DOMAIN_ENABLES: [AtomicU32; DOMAIN_WORDS] = [const { AtomicU32::new(0) }; DOMAIN_WORDS];

/// Writes where a buffer is and its size in bytes.
///
/// # Safety
/// `ptr` and `size` are null or writable.
unsafe fn give(words: &'static [AtomicU32], ptr: *mut *mut c_void, size: *mut usize) {
    if !ptr.is_null() {
        // SAFETY: non-null and writable, by the contract.
        unsafe { ptr.write(words.as_ptr().cast_mut().cast()) };
    }
    if !size.is_null() {
        // SAFETY: as above.
        unsafe { size.write(std::mem::size_of_val(words)) };
    }
}

unsafe extern "C" fn callback_enables(ptr: *mut *mut c_void, size: *mut usize) {
    // SAFETY: the runtime passes writable out-pointers.
    unsafe { give(&CALLBACK_ENABLES, ptr, size) }
}

unsafe extern "C" fn domain_enables(ptr: *mut *mut c_void, size: *mut usize) {
    // SAFETY: the runtime passes writable out-pointers.
    unsafe { give(&DOMAIN_ENABLES, ptr, size) }
}
