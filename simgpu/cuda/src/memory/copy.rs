//! Copies and memsets. Synchronous ones run on the default stream and wait for it (so they
//! follow the work already queued there); asynchronous ones are queued on their stream.
//! Device ranges are checked against the allocation registry first: a copy that runs past
//! the allocation it starts in fails with `CUDA_ERROR_INVALID_VALUE` instead of touching
//! memory it does not own.

use crate::ffi::{code, CUcontext, CUdeviceptr, CUresult, CUstream, DriverResult};
use crate::memory::array;
use crate::model::driver;
use crate::model::graph::HostKind;
use crate::model::memory::aligned;
use crate::model::memory::registry::{self, Access};
use crate::model::stream;
use std::ffi::c_void;
use std::sync::Arc;

/// `CUmemorytype`.
const MEMORY_HOST: u32 = 1;
const MEMORY_DEVICE: u32 = 2;
const MEMORY_ARRAY: u32 = 3;
const MEMORY_UNIFIED: u32 = 4;

/// Where a copy reads from.
enum Source {
    /// Memory that stays valid until the copy runs.
    At(u64),
    /// Pageable host memory copied when the copy was issued, as the driver stages it, so
    /// the program may reuse its buffer at once. Rows are `width` apart.
    Staged(Arc<Vec<u8>>),
}

/// A rectangular copy: `height` rows of `width` bytes.
struct CopyPlan {
    dst: u64,
    dst_pitch: u64,
    src: Source,
    src_pitch: u64,
    width: u64,
    height: u64,
}

impl CopyPlan {
    fn linear(dst: u64, src: Source, bytes: u64) -> CopyPlan {
        CopyPlan {
            dst,
            dst_pitch: bytes,
            src,
            src_pitch: bytes,
            width: bytes,
            height: 1,
        }
    }

    fn run(&self) {
        let (src, src_pitch) = match &self.src {
            Source::At(a) => (*a, self.src_pitch),
            Source::Staged(v) => (v.as_ptr() as u64, self.width),
        };
        for row in 0..self.height {
            let d = (self.dst + row * self.dst_pitch) as *mut u8;
            let s = (src + row * src_pitch) as *const u8;
            // SAFETY: both ranges were checked when the copy was issued (device ranges
            // against the registry; host ranges are the caller's promise), and `copy`
            // allows them to overlap.
            unsafe { std::ptr::copy(s, d, self.width as usize) };
        }
    }
}

/// The bytes a rectangle spans from its first byte.
fn extent(pitch: u64, width: u64, height: u64) -> Result<u64, CUresult> {
    if height == 0 || width == 0 {
        return Ok(0);
    }
    (height - 1)
        .checked_mul(pitch)
        .and_then(|v| v.checked_add(width))
        .ok_or(code::CUDA_ERROR_INVALID_VALUE)
}

/// Checks that `[ptr, ptr + len)` lies inside one device allocation the program may access
/// as `need` requires.
fn check_device(ptr: u64, len: u64, need: Access) -> DriverResult {
    let ok = registry::read()
        .find_range(ptr, len)
        .is_some_and(|a| a.access >= need);
    ok.then_some(()).ok_or(code::CUDA_ERROR_INVALID_VALUE)
}

/// For memory that may be host or device (unified addressing): if the driver knows it, the
/// range must lie inside that allocation; returns whether it is memory the driver knows
/// (device or page-locked) rather than the program's pageable memory.
fn check_unified(ptr: u64, len: u64, need: Access) -> Result<bool, CUresult> {
    let reg = registry::read();
    match reg.find(ptr) {
        None => {
            if ptr == 0 {
                return Err(code::CUDA_ERROR_INVALID_VALUE);
            }
            Ok(false)
        }
        Some(_) => match reg.find_range(ptr, len) {
            Some(a) if a.access >= need => Ok(true),
            _ => Err(code::CUDA_ERROR_INVALID_VALUE),
        },
    }
}

/// The source of an asynchronous copy from host memory at `ptr`: staged unless the memory
/// is page-locked (or otherwise known to the driver).
fn host_source(
    ptr: u64,
    pitch: u64,
    width: u64,
    height: u64,
    known: bool,
    asynchronous: bool,
) -> Source {
    if known || !asynchronous {
        return Source::At(ptr);
    }
    let mut staged = Vec::with_capacity((width * height) as usize);
    for row in 0..height {
        // SAFETY: the program promises `height` rows of `width` readable bytes, `pitch` apart.
        let r =
            unsafe { std::slice::from_raw_parts((ptr + row * pitch) as *const u8, width as usize) };
        staged.extend_from_slice(r);
    }
    Source::Staged(Arc::new(staged))
}

/// How a copy or memset is ordered.
#[derive(Clone, Copy)]
enum Order {
    /// Synchronous, on the legacy (false) or per-thread (true) default stream.
    Sync(bool),
    /// Queued on a stream, from a `_ptsz` entry (true) or not.
    Async(CUstream, bool),
}

impl Order {
    fn asynchronous(self) -> bool {
        matches!(self, Order::Async(..))
    }
    fn submit(self, kind: HostKind, work: impl Fn() + Send + Sync + 'static) -> DriverResult {
        match self {
            Order::Sync(per_thread) => stream::run_synchronously(per_thread, work),
            Order::Async(s, per_thread) => {
                stream::enqueue_host_work(s, per_thread, kind, Arc::new(work))
            }
        }
    }
}

/// One side of a copy, after validation: its first byte and row pitch, and whether the
/// driver knows the memory.
struct Side {
    addr: u64,
    pitch: u64,
    known: bool,
}

/// Resolves one side of a copy given by memory type, checking the rectangle it spans.
#[allow(clippy::too_many_arguments)]
fn side(
    memory_type: u32,
    host: u64,
    device: u64,
    array: *mut c_void,
    pitch: u64,
    x: u64,
    y: u64,
    width: u64,
    height: u64,
    need: Access,
) -> Result<Side, CUresult> {
    if memory_type == MEMORY_ARRAY {
        let (base, row_bytes, rows) = array::layout(array).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
        let fits = x.checked_add(width).is_some_and(|e| e <= row_bytes)
            && y.checked_add(height).is_some_and(|e| e <= rows);
        if !fits {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        return Ok(Side {
            addr: base + y * row_bytes + x,
            pitch: row_bytes,
            known: true,
        });
    }
    if height > 1 && pitch < width {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let start = |base: u64| {
        y.checked_mul(pitch)
            .and_then(|o| o.checked_add(x))
            .and_then(|o| base.checked_add(o))
            .ok_or(code::CUDA_ERROR_INVALID_VALUE)
    };
    let span = extent(pitch, width, height)?;
    match memory_type {
        MEMORY_HOST => {
            let addr = start(host)?;
            if host == 0 {
                return Err(code::CUDA_ERROR_INVALID_VALUE);
            }
            let known = registry::read().find_range(addr, span).is_some();
            Ok(Side { addr, pitch, known })
        }
        MEMORY_DEVICE => {
            let addr = start(device)?;
            check_device(addr, span, need)?;
            Ok(Side {
                addr,
                pitch,
                known: true,
            })
        }
        MEMORY_UNIFIED => {
            let addr = start(device)?;
            let known = check_unified(addr, span, need)?;
            Ok(Side { addr, pitch, known })
        }
        _ => Err(code::CUDA_ERROR_INVALID_VALUE),
    }
}

/// `CUDA_MEMCPY2D` (v2).
#[repr(C)]
pub(crate) struct Memcpy2d {
    src_x_in_bytes: usize,
    src_y: usize,
    src_memory_type: u32,
    src_host: *const c_void,
    src_device: CUdeviceptr,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x_in_bytes: usize,
    dst_y: usize,
    dst_memory_type: u32,
    dst_host: *mut c_void,
    dst_device: CUdeviceptr,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width_in_bytes: usize,
    height: usize,
}

fn copy_2d(p: *const Memcpy2d, order: Order) -> DriverResult {
    driver::process()?;
    if p.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: p is non-null and, by the contract, points to a CUDA_MEMCPY2D.
    let c = unsafe { &*p };
    let (w, h) = (c.width_in_bytes as u64, c.height as u64);
    if w == 0 || h == 0 {
        return Ok(());
    }
    let src = side(
        c.src_memory_type,
        c.src_host as u64,
        c.src_device,
        c.src_array,
        c.src_pitch as u64,
        c.src_x_in_bytes as u64,
        c.src_y as u64,
        w,
        h,
        Access::Read,
    )?;
    let dst = side(
        c.dst_memory_type,
        c.dst_host as u64,
        c.dst_device,
        c.dst_array,
        c.dst_pitch as u64,
        c.dst_x_in_bytes as u64,
        c.dst_y as u64,
        w,
        h,
        Access::ReadWrite,
    )?;
    let plan = CopyPlan {
        dst: dst.addr,
        dst_pitch: dst.pitch,
        src: host_source(src.addr, src.pitch, w, h, src.known, order.asynchronous()),
        src_pitch: src.pitch,
        width: w,
        height: h,
    };
    order.submit(HostKind::Copy, move || plan.run())
}

/// A linear copy between memory of the given types (host or device; unified for `cuMemcpy`).
fn copy_linear(
    dst: u64,
    dst_type: u32,
    src: u64,
    src_type: u32,
    bytes: usize,
    order: Order,
) -> DriverResult {
    driver::process()?;
    if bytes == 0 {
        return Ok(());
    }
    let n = bytes as u64;
    let null = std::ptr::null_mut();
    let s = side(src_type, src, src, null, n, 0, 0, n, 1, Access::Read)?;
    let d = side(dst_type, dst, dst, null, n, 0, 0, n, 1, Access::ReadWrite)?;
    let source = host_source(s.addr, n, n, 1, s.known, order.asynchronous());
    let plan = CopyPlan::linear(d.addr, source, n);
    order.submit(HostKind::Copy, move || plan.run())
}

/// Writes `count` elements of `size` bytes (1, 2 or 4) of `value` at `p`.
///
/// # Safety
/// `[p, p + count * size)` must be writable memory aligned to `size`.
unsafe fn fill_row(p: u64, value: u32, size: u64, count: usize) {
    match size {
        // SAFETY: the caller guarantees the row is writable.
        1 => unsafe { std::ptr::write_bytes(p as *mut u8, value as u8, count) },
        // SAFETY: the caller guarantees the row is writable and aligned for u16.
        2 => unsafe { std::slice::from_raw_parts_mut(p as *mut u16, count) }.fill(value as u16),
        // SAFETY: the caller guarantees the row is writable and aligned for u32.
        _ => unsafe { std::slice::from_raw_parts_mut(p as *mut u32, count) }.fill(value),
    }
}

/// A 2D memset of `height` rows of `width` elements of `size` bytes, `pitch` bytes apart.
fn memset(
    dst: CUdeviceptr,
    pitch: usize,
    value: u32,
    size: u64,
    width: usize,
    height: usize,
    order: Order,
) -> DriverResult {
    driver::process()?;
    let (w, h) = (width as u64, height as u64);
    if w == 0 || h == 0 {
        return Ok(());
    }
    let row_bytes = w.checked_mul(size).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
    let pitch = if h == 1 { row_bytes } else { pitch as u64 };
    if !aligned(dst, size) || !aligned(pitch, size) || pitch < row_bytes {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    check_device(dst, extent(pitch, row_bytes, h)?, Access::ReadWrite)?;
    order.submit(HostKind::Set, move || {
        for row in 0..h {
            let p = dst + row * pitch;
            // SAFETY: the rows were checked to lie inside one read-write allocation, and `p`
            // is aligned to the element size.
            unsafe { fill_row(p, value, size, w as usize) };
        }
    })
}

const H: u32 = MEMORY_HOST;
const D: u32 = MEMORY_DEVICE;
const U: u32 = MEMORY_UNIFIED;

cuda_entry! {
    fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        copy_linear(dst, U, src, U, n, Order::Sync(false))
    }
    fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        copy_linear(dst, U, src, U, n, Order::Sync(true))
    }
    fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) {
        copy_linear(dst, U, src, U, n, Order::Async(s, false))
    }
    fn cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) {
        copy_linear(dst, U, src, U, n, Order::Async(s, true))
    }

    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) {
        copy_linear(dst, D, src as u64, H, n, Order::Sync(false))
    }
    fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, n: usize) {
        copy_linear(dst, D, src as u64, H, n, Order::Sync(true))
    }
    fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) {
        copy_linear(dst, D, src as u64, H, n, Order::Async(s, false))
    }
    fn cuMemcpyHtoDAsync_v2_ptsz(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) {
        copy_linear(dst, D, src as u64, H, n, Order::Async(s, true))
    }

    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        copy_linear(dst as u64, H, src, D, n, Order::Sync(false))
    }
    fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, n: usize) {
        copy_linear(dst as u64, H, src, D, n, Order::Sync(true))
    }
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) {
        copy_linear(dst as u64, H, src, D, n, Order::Async(s, false))
    }
    fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) {
        copy_linear(dst as u64, H, src, D, n, Order::Async(s, true))
    }

    fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        copy_linear(dst, D, src, D, n, Order::Sync(false))
    }
    fn cuMemcpyDtoD_v2_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
        copy_linear(dst, D, src, D, n, Order::Sync(true))
    }
    fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) {
        copy_linear(dst, D, src, D, n, Order::Async(s, false))
    }
    fn cuMemcpyDtoDAsync_v2_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) {
        copy_linear(dst, D, src, D, n, Order::Async(s, true))
    }

    // Every device's memory is this process's memory, so a peer copy is a device copy.
    fn cuMemcpyPeer(dst: CUdeviceptr, _dst_ctx: CUcontext, src: CUdeviceptr, _src_ctx: CUcontext, n: usize) {
        copy_linear(dst, D, src, D, n, Order::Sync(false))
    }
    fn cuMemcpyPeer_ptds(dst: CUdeviceptr, _dst_ctx: CUcontext, src: CUdeviceptr, _src_ctx: CUcontext, n: usize) {
        copy_linear(dst, D, src, D, n, Order::Sync(true))
    }
    fn cuMemcpyPeerAsync(dst: CUdeviceptr, _dst_ctx: CUcontext, src: CUdeviceptr, _src_ctx: CUcontext, n: usize, s: CUstream) {
        copy_linear(dst, D, src, D, n, Order::Async(s, false))
    }
    fn cuMemcpyPeerAsync_ptsz(dst: CUdeviceptr, _dst_ctx: CUcontext, src: CUdeviceptr, _src_ctx: CUcontext, n: usize, s: CUstream) {
        copy_linear(dst, D, src, D, n, Order::Async(s, true))
    }

    fn cuMemcpy2D_v2(p: *const Memcpy2d) {
        copy_2d(p, Order::Sync(false))
    }
    fn cuMemcpy2D_v2_ptds(p: *const Memcpy2d) {
        copy_2d(p, Order::Sync(true))
    }
    fn cuMemcpy2DUnaligned_v2(p: *const Memcpy2d) {
        copy_2d(p, Order::Sync(false))
    }
    fn cuMemcpy2DUnaligned_v2_ptds(p: *const Memcpy2d) {
        copy_2d(p, Order::Sync(true))
    }
    fn cuMemcpy2DAsync_v2(p: *const Memcpy2d, s: CUstream) {
        copy_2d(p, Order::Async(s, false))
    }
    fn cuMemcpy2DAsync_v2_ptsz(p: *const Memcpy2d, s: CUstream) {
        copy_2d(p, Order::Async(s, true))
    }

    fn cuMemsetD8_v2(dst: CUdeviceptr, uc: u8, n: usize) {
        memset(dst, 0, uc as u32, 1, n, 1, Order::Sync(false))
    }
    fn cuMemsetD8_v2_ptds(dst: CUdeviceptr, uc: u8, n: usize) {
        memset(dst, 0, uc as u32, 1, n, 1, Order::Sync(true))
    }
    fn cuMemsetD16_v2(dst: CUdeviceptr, us: u16, n: usize) {
        memset(dst, 0, us as u32, 2, n, 1, Order::Sync(false))
    }
    fn cuMemsetD16_v2_ptds(dst: CUdeviceptr, us: u16, n: usize) {
        memset(dst, 0, us as u32, 2, n, 1, Order::Sync(true))
    }
    fn cuMemsetD32_v2(dst: CUdeviceptr, ui: u32, n: usize) {
        memset(dst, 0, ui, 4, n, 1, Order::Sync(false))
    }
    fn cuMemsetD32_v2_ptds(dst: CUdeviceptr, ui: u32, n: usize) {
        memset(dst, 0, ui, 4, n, 1, Order::Sync(true))
    }
    fn cuMemsetD8Async(dst: CUdeviceptr, uc: u8, n: usize, s: CUstream) {
        memset(dst, 0, uc as u32, 1, n, 1, Order::Async(s, false))
    }
    fn cuMemsetD8Async_ptsz(dst: CUdeviceptr, uc: u8, n: usize, s: CUstream) {
        memset(dst, 0, uc as u32, 1, n, 1, Order::Async(s, true))
    }
    fn cuMemsetD16Async(dst: CUdeviceptr, us: u16, n: usize, s: CUstream) {
        memset(dst, 0, us as u32, 2, n, 1, Order::Async(s, false))
    }
    fn cuMemsetD16Async_ptsz(dst: CUdeviceptr, us: u16, n: usize, s: CUstream) {
        memset(dst, 0, us as u32, 2, n, 1, Order::Async(s, true))
    }
    fn cuMemsetD32Async(dst: CUdeviceptr, ui: u32, n: usize, s: CUstream) {
        memset(dst, 0, ui, 4, n, 1, Order::Async(s, false))
    }
    fn cuMemsetD32Async_ptsz(dst: CUdeviceptr, ui: u32, n: usize, s: CUstream) {
        memset(dst, 0, ui, 4, n, 1, Order::Async(s, true))
    }

    fn cuMemsetD2D8_v2(dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize) {
        memset(dst, pitch, uc as u32, 1, width, height, Order::Sync(false))
    }
    fn cuMemsetD2D8_v2_ptds(dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize) {
        memset(dst, pitch, uc as u32, 1, width, height, Order::Sync(true))
    }
    fn cuMemsetD2D16_v2(dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize) {
        memset(dst, pitch, us as u32, 2, width, height, Order::Sync(false))
    }
    fn cuMemsetD2D16_v2_ptds(dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize) {
        memset(dst, pitch, us as u32, 2, width, height, Order::Sync(true))
    }
    fn cuMemsetD2D32_v2(dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize) {
        memset(dst, pitch, ui, 4, width, height, Order::Sync(false))
    }
    fn cuMemsetD2D32_v2_ptds(dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize) {
        memset(dst, pitch, ui, 4, width, height, Order::Sync(true))
    }
    fn cuMemsetD2D8Async(dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize, s: CUstream) {
        memset(dst, pitch, uc as u32, 1, width, height, Order::Async(s, false))
    }
    fn cuMemsetD2D8Async_ptsz(dst: CUdeviceptr, pitch: usize, uc: u8, width: usize, height: usize, s: CUstream) {
        memset(dst, pitch, uc as u32, 1, width, height, Order::Async(s, true))
    }
    fn cuMemsetD2D16Async(dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize, s: CUstream) {
        memset(dst, pitch, us as u32, 2, width, height, Order::Async(s, false))
    }
    fn cuMemsetD2D16Async_ptsz(dst: CUdeviceptr, pitch: usize, us: u16, width: usize, height: usize, s: CUstream) {
        memset(dst, pitch, us as u32, 2, width, height, Order::Async(s, true))
    }
    fn cuMemsetD2D32Async(dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize, s: CUstream) {
        memset(dst, pitch, ui, 4, width, height, Order::Async(s, false))
    }
    fn cuMemsetD2D32Async_ptsz(dst: CUdeviceptr, pitch: usize, ui: u32, width: usize, height: usize, s: CUstream) {
        memset(dst, pitch, ui, 4, width, height, Order::Async(s, true))
    }
}
