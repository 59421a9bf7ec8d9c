//! The real driver functions the launch gate calls besides the ones it wraps: those the
//! memory module already looks up, and two more.

use crate::memory::real::real_fns;
pub(crate) use crate::memory::real::{
    ctx_get_current, ctx_get_device, event_create, event_query, event_record, stream_is_capturing,
};
use std::ffi::c_void;

real_fns! {
    Cuda c"cuEventSynchronize" fn event_synchronize: unsafe extern "C" fn(*mut c_void) -> u32;
    Cuda c"cuEventElapsedTime" fn event_elapsed: unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> u32;
}
