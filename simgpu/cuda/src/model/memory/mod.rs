//! Device memory, backed lazily by host memory.
//!
//! A device allocation is an anonymous private mapping with `MAP_NORESERVE`: untouched pages
//! cost no host RAM, so a program can fill an 80 GiB device on a much smaller machine, and
//! data written through it is real. The device pointer is the host address (unified
//! addressing), so copies and kernels read and write it directly.
//!
//! Every allocation first reserves its bytes on its device in the node state
//! ([`simgpu::node::Process::reserve_memory`], exact bytes, atomic across the processes of
//! the node) and gives them back when freed; a device that would exceed its memory fails the
//! allocation with `CUDA_ERROR_OUT_OF_MEMORY` and nothing is held.

pub(crate) mod linear;
pub(crate) mod location;
pub(crate) mod pool;
pub(crate) mod registry;

use crate::ffi::{code, CUdeviceptr, CUresult};
use crate::model::context::Context;
use crate::model::driver;
use registry::{Access, Allocation, Kind};

/// Some if `[ptr, ptr + len)` lies inside one live device, managed, page-locked host or
/// mapped (read-write) allocation: the memory a kernel may touch.
pub(crate) fn device_range(ptr: CUdeviceptr, len: u64) -> Option<*mut u8> {
    registry::read()
        .find_range(ptr, len)
        .filter(|a| a.access == Access::ReadWrite)
        .map(|_| ptr as *mut u8)
}

/// Gives back everything a context allocated (device, managed, pool and page-locked host
/// memory) and drops its host registrations, as the driver does when a context is
/// destroyed or a primary context reset. The caller has synchronized the context, so no
/// queued work still uses the memory.
fn forget_context(ctx: &Context) {
    let gone = registry::write()
        .remove_where(|a| a.context_id == ctx.id && !matches!(a.kind, Kind::Mapped(_)));
    for a in &gone {
        release(a);
    }
}
crate::model::context::teardown_step!(Memory, forget_context);

/// Gives back the memory of an allocation that has left the registry, whatever its kind
/// (a pool's allocation also leaves its pool's count).
pub(crate) fn release(a: &Allocation) {
    if matches!(a.kind, Kind::Registered(_) | Kind::Mapped(_)) {
        return;
    }
    // SAFETY: the allocation was mapped by `linear::allocate` and has left the registry, so no
    // entry point can reach it any more; stream work that used it ran before (the caller
    // orders the release after it).
    unsafe { unmap(a.base, a.size) };
    if a.kind.counted() {
        if let Ok(process) = driver::process() {
            process.release_memory(a.device, a.size);
        }
    }
    if let Kind::Pool(p) = a.kind {
        pool::on_free(p, a.size);
    }
}

/// Device memory for a loaded module's variables, zero-filled, owned by the current context
/// when `in_context` (a library's module belongs to none); see [`Kind::counted`].
pub(crate) fn allocate_module_variables(
    device: usize,
    bytes: u64,
    in_context: bool,
) -> Result<u64, CUresult> {
    let owner = if in_context {
        linear::Owner::current()
    } else {
        linear::Owner::default()
    };
    linear::allocate(device, bytes, Kind::Module, owner)
}

/// Gives back a module's variables (already gone if their context was destroyed first).
pub(crate) fn free_module_variables(base: u64) {
    let gone = registry::write().remove(base);
    if let Some(a) = gone {
        release(&a);
    }
}

/// Maps `bytes` of lazily backed, zero-filled read-write memory.
pub(crate) fn map_lazy(bytes: u64) -> Result<u64, CUresult> {
    let len = usize::try_from(bytes).map_err(|_| code::CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(code::CUDA_ERROR_OUT_OF_MEMORY);
    }
    Ok(p as u64)
}

/// Unmaps memory from [`map_lazy`].
///
/// # Safety
/// `[base, base + bytes)` must be a mapping this module made that nothing uses any more.
pub(crate) unsafe fn unmap(base: u64, bytes: u64) {
    // SAFETY: the caller guarantees the range is ours and unused.
    let rc = unsafe { libc::munmap(base as *mut libc::c_void, bytes as usize) };
    debug_assert_eq!(rc, 0, "munmap of a mapping we made");
}

/// Whether `n` is a multiple of `to` (a power of two).
pub(crate) fn aligned(n: u64, to: u64) -> bool {
    n & (to - 1) == 0
}

/// Rounds `n` up to a multiple of `to` (a power of two).
pub(crate) fn round_up(n: u64, to: u64) -> Option<u64> {
    n.checked_add(to - 1).map(|v| v & !(to - 1))
}
