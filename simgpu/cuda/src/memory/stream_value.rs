//! Stream memory operations (`cuStreamWriteValue*`, `cuStreamWaitValue*`, and a batch of them
//! through `cuStreamBatchMemOp`): a word of device memory written, or waited for, in stream
//! order. They run as the stream's host work: the
//! write when the stream reaches it; the wait holds the stream until the word satisfies the
//! condition, as the GPU's front end does.

use crate::ffi::{code, CUdeviceptr, CUstream, DriverResult};
use crate::model::graph::HostKind;
use crate::model::stream;
use std::sync::Arc;
use std::time::Duration;

/// `CUstreamWaitValue_flags`: the comparison in the low bits.
const WAIT_GEQ: u32 = 0x0;
const WAIT_EQ: u32 = 0x1;
const WAIT_AND: u32 = 0x2;
const WAIT_NOR: u32 = 0x3;
/// `CU_STREAM_WAIT_VALUE_FLUSH`: ordering the GPU's own writes; nothing to do here.
const WAIT_FLUSH: u32 = 1 << 30;
/// `CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER`: nothing to do here either.
const WRITE_NO_BARRIER: u32 = 0x1;
/// How long a waiting stream sleeps between two looks at the word.
const POLL: Duration = Duration::from_micros(50);

/// A word the driver knows, as a pointer for the stream's work.
fn word(addr: CUdeviceptr, bytes: u64) -> Result<usize, u32> {
    if !addr.is_multiple_of(bytes) {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    crate::model::memory::device_range(addr, bytes)
        .map(|p| p as usize)
        .ok_or(code::CUDA_ERROR_INVALID_VALUE)
}

fn write(
    stream: CUstream,
    per_thread: bool,
    addr: CUdeviceptr,
    value: u64,
    bytes: u64,
    flags: u32,
) -> DriverResult {
    if flags & !WRITE_NO_BARRIER != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let p = word(addr, bytes)?;
    let work = move || {
        // SAFETY: an aligned word of a live allocation, checked when the write was queued;
        // volatile, as other streams and the host may watch it.
        unsafe {
            if bytes == 4 {
                std::ptr::write_volatile(p as *mut u32, value as u32);
            } else {
                std::ptr::write_volatile(p as *mut u64, value);
            }
        }
    };
    stream::enqueue_host_work(
        stream,
        per_thread,
        HostKind::MemoryOperation,
        Arc::new(work),
    )
}

/// Whether `current` satisfies the wait condition of `flags` against `value`.
fn satisfied(current: u64, value: u64, flags: u32, bytes: u64) -> bool {
    let mask = if bytes == 4 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    let (current, value) = (current & mask, value & mask);
    match flags & 0x3 {
        WAIT_GEQ => {
            // Cyclic comparison, as the driver documents it: (current - value) as signed >= 0.
            if bytes == 4 {
                (current as u32).wrapping_sub(value as u32) as i32 >= 0
            } else {
                current.wrapping_sub(value) as i64 >= 0
            }
        }
        WAIT_EQ => current == value,
        WAIT_AND => current & value != 0,
        WAIT_NOR => !(current | value) & mask != 0,
        _ => unreachable!("two bits"),
    }
}

fn wait(
    stream: CUstream,
    per_thread: bool,
    addr: CUdeviceptr,
    value: u64,
    bytes: u64,
    flags: u32,
) -> DriverResult {
    if flags & !(0x3 | WAIT_FLUSH) != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let p = word(addr, bytes)?;
    let work = move || loop {
        // SAFETY: as in `write`.
        let current = unsafe {
            if bytes == 4 {
                u64::from(std::ptr::read_volatile(p as *const u32))
            } else {
                std::ptr::read_volatile(p as *const u64)
            }
        };
        if satisfied(current, value, flags, bytes) {
            break;
        }
        std::thread::sleep(POLL);
    };
    stream::enqueue_host_work(
        stream,
        per_thread,
        HostKind::MemoryOperation,
        Arc::new(work),
    )
}

/// `CUstreamBatchMemOpType`.
const OP_WAIT_VALUE_32: u32 = 1;
const OP_WRITE_VALUE_32: u32 = 2;
const OP_FLUSH_REMOTE_WRITES: u32 = 3;
const OP_WAIT_VALUE_64: u32 = 4;
const OP_WRITE_VALUE_64: u32 = 5;
const OP_BARRIER: u32 = 6;
/// `CU_STREAM_MEMORY_BARRIER_TYPE_GPU`, the wider of the two barrier scopes.
const BARRIER_GPU: u32 = 1;
/// A batch holds fewer operations than this, as the driver documents.
const BATCH_LIMIT: u32 = 256;

/// One `CUstreamBatchMemOpParams`: a union of 48 bytes whose every member starts with the
/// operation. For the wait and write members: the address at 8, the value (32 or 64 bits) at
/// 16, the flags at 24 and a word for the driver's own use at 32; for the flush and barrier
/// members, the flags at 4.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BatchMemOp {
    operation: u32,
    short_flags: u32,
    address: CUdeviceptr,
    value: u64,
    flags: u32,
    _pad: u32,
    _alias: u64,
    _rest: [u64; 1],
}
const _: () = assert!(std::mem::size_of::<BatchMemOp>() == 48);

/// Checks one member of a batch: for a wait or a write, whether it waits and its word's
/// size; `None` for a flush or a barrier.
fn check_op(op: &BatchMemOp) -> Result<Option<(bool, u64)>, u32> {
    let (waits, bytes) = match op.operation {
        OP_WAIT_VALUE_32 => (true, 4),
        OP_WAIT_VALUE_64 => (true, 8),
        OP_WRITE_VALUE_32 => (false, 4),
        OP_WRITE_VALUE_64 => (false, 8),
        OP_FLUSH_REMOTE_WRITES if op.short_flags == 0 => return Ok(None),
        OP_BARRIER if op.short_flags <= BARRIER_GPU => return Ok(None),
        _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
    };
    let allowed = if waits {
        0x3 | WAIT_FLUSH
    } else {
        WRITE_NO_BARRIER
    };
    if op.flags & !allowed != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    word(op.address, bytes)?;
    Ok(Some((waits, bytes)))
}

/// `cuStreamBatchMemOp`: every operation is checked before any is queued, so that a batch
/// with a bad member queues nothing.
///
/// # Safety
/// `ops` must be null or point to `count` operations.
unsafe fn batch(
    stream: CUstream,
    per_thread: bool,
    count: u32,
    ops: *const BatchMemOp,
    flags: u32,
) -> DriverResult {
    crate::model::driver::process()?;
    if flags != 0 || count >= BATCH_LIMIT || (count > 0 && ops.is_null()) {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    crate::model::stream::resolve(stream, per_thread)?;
    let ops = if count == 0 {
        &[][..]
    } else {
        // SAFETY: non-null, and holds `count` operations by the contract.
        unsafe { std::slice::from_raw_parts(ops, count as usize) }
    };
    let checked = ops.iter().map(check_op).collect::<Result<Vec<_>, _>>()?;
    for (op, word_op) in ops.iter().zip(checked) {
        // Host memory is coherent and stream work runs in order: flushes and barriers
        // have nothing left to order.
        let Some((waits, bytes)) = word_op else {
            continue;
        };
        let value = if bytes == 4 {
            op.value & 0xffff_ffff
        } else {
            op.value
        };
        if waits {
            wait(stream, per_thread, op.address, value, bytes, op.flags)?;
        } else {
            write(stream, per_thread, op.address, value, bytes, op.flags)?;
        }
    }
    Ok(())
}

cuda_entry! {
    fn cuStreamBatchMemOp(s: CUstream, count: u32, ops: *const BatchMemOp, flags: u32) {
        // SAFETY: the caller passes `count` operations, by the contract.
        unsafe { batch(s, false, count, ops, flags) }
    }
    fn cuStreamBatchMemOp_v2(s: CUstream, count: u32, ops: *const BatchMemOp, flags: u32) {
        // SAFETY: as above.
        unsafe { batch(s, false, count, ops, flags) }
    }
    fn cuStreamBatchMemOp_ptsz(s: CUstream, count: u32, ops: *const BatchMemOp, flags: u32) {
        // SAFETY: as above.
        unsafe { batch(s, true, count, ops, flags) }
    }
    fn cuStreamBatchMemOp_v2_ptsz(s: CUstream, count: u32, ops: *const BatchMemOp, flags: u32) {
        // SAFETY: as above.
        unsafe { batch(s, true, count, ops, flags) }
    }
    fn cuStreamWriteValue32(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        write(s, false, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWriteValue32_v2(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        write(s, false, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWriteValue32_ptsz(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        write(s, true, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWriteValue32_v2_ptsz(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        write(s, true, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWriteValue64(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        write(s, false, addr, value, 8, flags)
    }
    fn cuStreamWriteValue64_v2(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        write(s, false, addr, value, 8, flags)
    }
    fn cuStreamWriteValue64_ptsz(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        write(s, true, addr, value, 8, flags)
    }
    fn cuStreamWriteValue64_v2_ptsz(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        write(s, true, addr, value, 8, flags)
    }
    fn cuStreamWaitValue32(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        wait(s, false, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWaitValue32_v2(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        wait(s, false, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWaitValue32_ptsz(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        wait(s, true, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWaitValue32_v2_ptsz(s: CUstream, addr: CUdeviceptr, value: u32, flags: u32) {
        wait(s, true, addr, u64::from(value), 4, flags)
    }
    fn cuStreamWaitValue64(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        wait(s, false, addr, value, 8, flags)
    }
    fn cuStreamWaitValue64_v2(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        wait(s, false, addr, value, 8, flags)
    }
    fn cuStreamWaitValue64_ptsz(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        wait(s, true, addr, value, 8, flags)
    }
    fn cuStreamWaitValue64_v2_ptsz(s: CUstream, addr: CUdeviceptr, value: u64, flags: u32) {
        wait(s, true, addr, value, 8, flags)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_conditions() {
        assert!(satisfied(5, 5, WAIT_GEQ, 4) && satisfied(6, 5, WAIT_GEQ, 4));
        assert!(!satisfied(4, 5, WAIT_GEQ, 4));
        // Cyclic: just past the wrap is still "greater".
        assert!(satisfied(1, u64::from(u32::MAX), WAIT_GEQ, 4));
        assert!(satisfied(7, 7, WAIT_EQ, 8) && !satisfied(7, 8, WAIT_EQ, 8));
        assert!(satisfied(0b110, 0b010, WAIT_AND, 4) && !satisfied(0b100, 0b010, WAIT_AND, 4));
        assert!(
            satisfied(0b100, 0b010, WAIT_NOR, 4) && !satisfied(u64::from(u32::MAX), 0, WAIT_NOR, 4)
        );
    }
}
