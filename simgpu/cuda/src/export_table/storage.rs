//! Context-local storage: the runtime keeps its state for each context (its modules, streams,
//! the kernels it loaded) under a key of its own, in the driver, so that the state goes away
//! with the context.

use super::{slot, Table, NONE};
use crate::ffi::{code, CUcontext, CUresult};
use crate::model::context::Context;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Called with the context, the key and the value when the context goes away.
type Destructor = unsafe extern "C" fn(CUcontext, *mut c_void, *mut c_void);

/// This table has no size slot: its first slot is already a function.
pub(super) static CONTEXT_STORAGE: Table<4> = Table([
    // 0: store a value under a key for a context (null: the current one), with the function
    //    to call when the context is destroyed.
    put as *const c_void,
    // 1: forget a key of a context.
    remove as *const c_void,
    // 2: the value under a key for a context (null: the current one); fails when unset.
    get as *const c_void,
    NONE,
]);

struct Entry {
    value: usize,
    destructor: Option<Destructor>,
}

/// By context id (never reused, unlike handles) and key.
static ENTRIES: Mutex<Option<HashMap<(u64, usize), Entry>>> = Mutex::new(None);

fn with_entries<R>(f: impl FnOnce(&mut HashMap<(u64, usize), Entry>) -> R) -> R {
    let mut entries = ENTRIES.lock().unwrap_or_else(|e| e.into_inner());
    f(entries.get_or_insert_with(HashMap::new))
}

fn context(handle: CUcontext) -> Result<Arc<Context>, CUresult> {
    if handle.is_null() {
        crate::model::context::current()
    } else {
        crate::model::context::lookup(handle)
    }
}

unsafe extern "C" fn put(
    ctx: CUcontext,
    key: *mut c_void,
    value: *mut c_void,
    destructor: Option<Destructor>,
) -> CUresult {
    slot(|| {
        let ctx = context(ctx)?;
        let entry = Entry {
            value: value as usize,
            destructor,
        };
        with_entries(|e| e.insert((ctx.id, key as usize), entry));
        Ok(())
    })
}

unsafe extern "C" fn remove(ctx: CUcontext, key: *mut c_void) -> CUresult {
    slot(|| {
        let ctx = context(ctx)?;
        with_entries(|e| e.remove(&(ctx.id, key as usize)));
        Ok(())
    })
}

unsafe extern "C" fn get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> CUresult {
    slot(|| {
        if value.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let ctx = context(ctx)?;
        let found = with_entries(|e| e.get(&(ctx.id, key as usize)).map(|v| v.value));
        // SAFETY: non-null, and writable as the runtime passes it.
        unsafe { value.write(found.unwrap_or(0) as *mut c_void) };
        found.map(|_| ()).ok_or(code::CUDA_ERROR_INVALID_HANDLE)
    })
}

/// A context is being destroyed (or a primary context reset): its values are dropped and
/// their owners told, as the runtime expects to free its state for the context then.
fn forget_context(ctx: &Arc<Context>) {
    let gone: Vec<((u64, usize), Entry)> = with_entries(|e| {
        let keys: Vec<_> = e.keys().filter(|(id, _)| *id == ctx.id).copied().collect();
        keys.into_iter()
            .filter_map(|k| e.remove(&k).map(|v| (k, v)))
            .collect()
    });
    let handle = ctx.handle();
    for ((_, key), entry) in gone {
        if let Some(destructor) = entry.destructor {
            // SAFETY: the function the runtime registered for this value, called once with
            // what it registered, after the entry is gone (it may call back into the driver).
            unsafe { destructor(handle, key as *mut c_void, entry.value as *mut c_void) };
        }
    }
}
crate::model::context::teardown_step!(RuntimeState, forget_context);
