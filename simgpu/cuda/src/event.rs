//! The entry points of events: create, record, query, synchronize, elapsed time, destroy.
//!
//! They check and translate the C arguments, call into [`crate::model::event`], and
//! write its results out as the driver API does.

use crate::ffi::{code, write_out, CUevent, CUstream};
use crate::model::context::{self};
use crate::model::event::*;
use crate::model::exec::{self};
use std::sync::Arc;

cuda_entry! {
    fn cuEventCreate(out: *mut CUevent, flags: u32) {
        let ctx = context::current()?;
        if out.is_null()
            || flags & !(BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS) != 0
            || (flags & INTERPROCESS != 0 && flags & DISABLE_TIMING == 0)
        {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let handle = EVENTS.insert(Arc::new(Event::new(ctx, flags)));
        // SAFETY: checked non-null; the caller provides a CUevent to write.
        unsafe { write_out(out, handle) }
    }

    fn cuEventRecord(event: CUevent, stream: CUstream) {
        record(event, stream, 0, false)
    }

    fn cuEventRecord_ptsz(event: CUevent, stream: CUstream) {
        record(event, stream, 0, true)
    }

    fn cuEventRecordWithFlags(event: CUevent, stream: CUstream, flags: u32) {
        record(event, stream, flags, false)
    }

    fn cuEventRecordWithFlags_ptsz(event: CUevent, stream: CUstream, flags: u32) {
        record(event, stream, flags, true)
    }

    fn cuEventQuery(event: CUevent) {
        let event = lookup(event)?;
        if event.capture().is_some() {
            return Err(code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if event.records.complete_now() {
            Ok(())
        } else {
            Err(code::CUDA_ERROR_NOT_READY)
        }
    }

    fn cuEventSynchronize(event: CUevent) {
        let event = lookup(event)?;
        if event.capture().is_some() {
            return Err(code::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        if exec::on_executor_thread() {
            return Err(code::CUDA_ERROR_NOT_PERMITTED);
        }
        event.records.wait_all();
        event.ctx.check_sticky()
    }

    fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) {
        elapsed(ms, start, end)
    }

    fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) {
        elapsed(ms, start, end)
    }

    fn cuEventDestroy(event: CUevent) {
        destroy(event)
    }

    fn cuEventDestroy_v2(event: CUevent) {
        destroy(event)
    }
}
