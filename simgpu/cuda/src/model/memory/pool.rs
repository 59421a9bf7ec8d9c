//! Memory pools and stream-ordered allocation.
//!
//! An allocation from a pool is made at once (the pool keeps nothing in reserve: its release
//! threshold is honoured trivially, as if every free trimmed it), and a stream-ordered free
//! gives the memory back when the stream reaches it. Each device has a default pool, made on
//! first use, and a current pool that `cuMemAllocAsync` uses.

use super::linear::{self, Owner};
use super::location::{CUmemLocation, LOCATION_DEVICE};
use super::registry::{self, Kind};
use crate::ffi::{code, write_out, CUdeviceptr, CUresult, CUstream, DriverResult};
use crate::model::driver;
use crate::model::graph::HostKind;
use crate::model::stream;
use simgpu::device::MAX_DEVICES;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) use tessera_cuda_abi::CUmemoryPool;

/// `CUmemAllocationType::PINNED`.
pub(crate) const ALLOCATION_PINNED: u32 = 1;
/// `CUmemAccess_flags::PROT_READWRITE`.
pub(crate) const ACCESS_READWRITE: c_int = 3;

/// The leading fields of `CUmemPoolProps` (the rest is reserved or Windows-only).
#[repr(C)]
pub(crate) struct CUmemPoolPropsHead {
    pub(crate) alloc_type: u32,
    pub(crate) handle_types: u32,
    pub(crate) location: CUmemLocation,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_int,
}

pub(crate) struct Pool {
    device: usize,
    pub(crate) reuse: [c_int; 3],
    pub(crate) release_threshold: u64,
    pub(crate) used: u64,
    pub(crate) used_high: u64,
    pub(crate) default: bool,
}

impl Pool {
    fn new(device: usize, default: bool) -> Pool {
        Pool {
            device,
            reuse: [1, 1, 1],
            release_threshold: 0,
            used: 0,
            used_high: 0,
            default,
        }
    }
}

pub(crate) struct Pools {
    pub(crate) by_handle: HashMap<usize, Pool>,
    defaults: [usize; MAX_DEVICES],
    pub(crate) current: [usize; MAX_DEVICES],
    next: usize,
}

impl Default for Pools {
    fn default() -> Self {
        Pools {
            by_handle: HashMap::new(),
            defaults: [0; MAX_DEVICES],
            current: [0; MAX_DEVICES],
            next: 0,
        }
    }
}

/// Made on first use (a `HashMap` cannot be built in a static).
static POOLS: Mutex<Option<Pools>> = Mutex::new(None);

pub(crate) struct PoolsGuard(MutexGuard<'static, Option<Pools>>);

impl std::ops::Deref for PoolsGuard {
    type Target = Pools;
    fn deref(&self) -> &Pools {
        self.0.as_ref().expect("made by pools()")
    }
}

impl std::ops::DerefMut for PoolsGuard {
    fn deref_mut(&mut self) -> &mut Pools {
        self.0.as_mut().expect("made by pools()")
    }
}

pub(crate) fn pools() -> PoolsGuard {
    let mut guard = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    guard.get_or_insert_with(Pools::default);
    PoolsGuard(guard)
}

impl Pools {
    pub(crate) fn create(&mut self, device: usize, default: bool) -> usize {
        self.next += 1;
        // Handles are opaque to the program; an odd-looking, never-dereferenced address
        // tells a stray one apart from real memory in a debugger.
        let handle = 0x7e57_0000_0000 + self.next * 0x10;
        self.by_handle.insert(handle, Pool::new(device, default));
        handle
    }
    fn default_of(&mut self, device: usize) -> usize {
        if self.defaults[device] == 0 {
            self.defaults[device] = self.create(device, true);
        }
        self.defaults[device]
    }
    fn current_of(&mut self, device: usize) -> usize {
        match self.current[device] {
            0 => self.default_of(device),
            h => h,
        }
    }
    pub(crate) fn get(&mut self, pool: CUmemoryPool) -> Result<&mut Pool, CUresult> {
        self.by_handle
            .get_mut(&(pool as usize))
            .ok_or(code::CUDA_ERROR_INVALID_VALUE)
    }
}

/// The default pool of a (checked) device.
pub(crate) fn default_pool(device: usize) -> CUmemoryPool {
    pools().default_of(device) as CUmemoryPool
}

/// The pool `cuMemAllocAsync` uses on a (checked) device.
pub(crate) fn current_pool(device: usize) -> CUmemoryPool {
    pools().current_of(device) as CUmemoryPool
}

/// Makes `pool` the current pool of a (checked) device.
pub(crate) fn set_current_pool(device: usize, pool: CUmemoryPool) -> DriverResult {
    let mut p = pools();
    if p.get(pool)?.device != device {
        return Err(code::CUDA_ERROR_INVALID_DEVICE);
    }
    p.current[device] = pool as usize;
    Ok(())
}

/// Counts an allocation out of a pool.
fn on_alloc(pool: usize, bytes: u64) {
    if let Some(p) = pools().by_handle.get_mut(&pool) {
        p.used += bytes;
        p.used_high = p.used_high.max(p.used);
    }
}

/// Counts a free back into a pool (which may have been destroyed meanwhile).
pub(crate) fn on_free(pool: usize, bytes: u64) {
    if let Some(p) = pools().by_handle.get_mut(&pool) {
        p.used = p.used.saturating_sub(bytes);
    }
}

pub(crate) fn alloc_async(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: Option<CUmemoryPool>,
    stream: CUstream,
    per_thread: bool,
) -> DriverResult {
    driver::process()?;
    if dptr.is_null() || bytes == 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let stream_device = stream::stream_device(stream, per_thread)?;
    let (handle, device) = {
        let mut p = pools();
        let handle = match pool {
            Some(h) => h as usize,
            None => p.current_of(stream_device),
        };
        let device = p.get(handle as CUmemoryPool)?.device;
        (handle, device)
    };
    let base = linear::allocate(device, bytes as u64, Kind::Pool(handle), Owner::current())?;
    on_alloc(handle, bytes as u64);
    // SAFETY: dptr is non-null and, by the contract, points to a CUdeviceptr.
    unsafe { write_out(dptr, base) }
}

pub(crate) fn free_async(dptr: CUdeviceptr, stream: CUstream, per_thread: bool) -> DriverResult {
    driver::process()?;
    stream::stream_device(stream, per_thread)?;
    if dptr == 0 {
        return Ok(());
    }
    let a = linear::begin_free(dptr, Kind::freed_by_mem_free)?;
    let (base, id) = (a.base, a.id);
    let work: Arc<dyn Fn() + Send + Sync> = Arc::new(move || linear::finish_free(base, id));
    stream::enqueue_host_work(stream, per_thread, HostKind::Free, work).inspect_err(|_| {
        if let Some(a) = registry::write().get_mut(base) {
            a.free_pending = false;
        }
    })
}

/// Checks a location names a device of the node; returns the device.
pub(crate) fn location_device(location: &CUmemLocation) -> Result<usize, CUresult> {
    if location.kind != LOCATION_DEVICE {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    driver::check_device(location.id).map_err(|_| code::CUDA_ERROR_INVALID_VALUE)
}
