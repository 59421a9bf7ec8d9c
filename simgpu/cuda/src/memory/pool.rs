//! Memory pools and stream-ordered allocation.
//!
//! An allocation from a pool is made at once (the pool keeps nothing in reserve: its release
//! threshold is honoured trivially, as if every free trimmed it), and a stream-ordered free
//! gives the memory back when the stream reaches it. Each device has a default pool, made on
//! first use, and a current pool that `cuMemAllocAsync` uses.

use super::linear::{self, Owner};
use super::registry::{self, Kind};
use crate::ffi::{code, write_out, CUdeviceptr, CUresult, CUstream, DriverResult};
use crate::graph::HostKind;
use crate::model::driver;
use crate::stream;
use simgpu::device::MAX_DEVICES;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

/// A pool handle, as the program sees it.
pub(crate) type CUmemoryPool = *mut c_void;

/// `CUmemAllocationType::PINNED`.
pub(super) const ALLOCATION_PINNED: u32 = 1;
/// `CUmemLocationType::DEVICE`.
pub(super) const LOCATION_DEVICE: u32 = 1;
/// `CUmemAccess_flags::PROT_READWRITE`.
const ACCESS_READWRITE: c_int = 3;

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CUmemLocation {
    pub kind: u32,
    pub id: c_int,
}

/// The leading fields of `CUmemPoolProps` (the rest is reserved or Windows-only).
#[repr(C)]
struct CUmemPoolPropsHead {
    alloc_type: u32,
    handle_types: u32,
    location: CUmemLocation,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_int,
}

struct Pool {
    device: usize,
    reuse: [c_int; 3],
    release_threshold: u64,
    used: u64,
    used_high: u64,
    default: bool,
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

struct Pools {
    by_handle: HashMap<usize, Pool>,
    defaults: [usize; MAX_DEVICES],
    current: [usize; MAX_DEVICES],
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

struct PoolsGuard(MutexGuard<'static, Option<Pools>>);

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

fn pools() -> PoolsGuard {
    let mut guard = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    guard.get_or_insert_with(Pools::default);
    PoolsGuard(guard)
}

impl Pools {
    fn create(&mut self, device: usize, default: bool) -> usize {
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
    fn get(&mut self, pool: CUmemoryPool) -> Result<&mut Pool, CUresult> {
        self.by_handle
            .get_mut(&(pool as usize))
            .ok_or(code::INVALID_VALUE)
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
        return Err(code::INVALID_DEVICE);
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
pub(super) fn on_free(pool: usize, bytes: u64) {
    if let Some(p) = pools().by_handle.get_mut(&pool) {
        p.used = p.used.saturating_sub(bytes);
    }
}

fn alloc_async(
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: Option<CUmemoryPool>,
    stream: CUstream,
    per_thread: bool,
) -> DriverResult {
    driver::process()?;
    if dptr.is_null() || bytes == 0 {
        return Err(code::INVALID_VALUE);
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

fn free_async(dptr: CUdeviceptr, stream: CUstream, per_thread: bool) -> DriverResult {
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
pub(super) fn location_device(location: &CUmemLocation) -> Result<usize, CUresult> {
    if location.kind != LOCATION_DEVICE {
        return Err(code::INVALID_VALUE);
    }
    driver::check_device(location.id).map_err(|_| code::INVALID_VALUE)
}

cuda_entry! {
    fn cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream) {
        alloc_async(dptr, bytesize, None, h_stream, false)
    }

    fn cuMemAllocAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, h_stream: CUstream) {
        alloc_async(dptr, bytesize, None, h_stream, true)
    }

    fn cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream) {
        alloc_async(dptr, bytesize, Some(pool), h_stream, false)
    }

    fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h_stream: CUstream) {
        alloc_async(dptr, bytesize, Some(pool), h_stream, true)
    }

    fn cuMemFreeAsync(dptr: CUdeviceptr, h_stream: CUstream) {
        free_async(dptr, h_stream, false)
    }

    fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, h_stream: CUstream) {
        free_async(dptr, h_stream, true)
    }

    fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const c_void) {
        driver::process()?;
        if pool.is_null() || props.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: props points to a CUmemPoolProps, whose leading fields these are.
        let head = unsafe { props.cast::<CUmemPoolPropsHead>().read() };
        if head.alloc_type != ALLOCATION_PINNED {
            return Err(code::INVALID_VALUE);
        }
        let device = location_device(&head.location)?;
        let _ = head.handle_types; // nothing is ever exported, whatever was asked for
        let handle = pools().create(device, false);
        // SAFETY: pool is non-null and points to a CUmemoryPool.
        unsafe { write_out(pool, handle as CUmemoryPool) }
    }

    fn cuMemPoolDestroy(pool: CUmemoryPool) {
        driver::process()?;
        let mut p = pools();
        if p.get(pool)?.default {
            return Err(code::INVALID_VALUE);
        }
        p.by_handle.remove(&(pool as usize));
        // A device whose current pool this was goes back to its default pool.
        for current in p.current.iter_mut().filter(|c| **c == pool as usize) {
            *current = 0;
        }
        Ok(())
    }

    fn cuMemPoolSetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) {
        driver::process()?;
        let mut p = pools();
        let pool = p.get(pool)?;
        if value.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let int = || {
            // SAFETY: value is non-null and, for these attributes, points to an int.
            unsafe { value.cast::<c_int>().read() }
        };
        let u64 = || {
            // SAFETY: value is non-null and, for these attributes, points to a cuuint64_t.
            unsafe { value.cast::<u64>().read() }
        };
        match attr {
            1..=3 => pool.reuse[attr as usize - 1] = int(),
            4 => pool.release_threshold = u64(),
            // The high-water marks can only be reset, by writing 0.
            6 | 8 if u64() == 0 => pool.used_high = pool.used,
            _ => return Err(code::INVALID_VALUE),
        }
        Ok(())
    }

    fn cuMemPoolGetAttribute(pool: CUmemoryPool, attr: c_int, value: *mut c_void) {
        driver::process()?;
        let mut p = pools();
        let pool = p.get(pool)?;
        if value.is_null() {
            return Err(code::INVALID_VALUE);
        }
        let wide = match attr {
            1..=3 => {
                // SAFETY: value is non-null and, for these attributes, points to an int.
                unsafe { value.cast::<c_int>().write(pool.reuse[attr as usize - 1]) };
                return Ok(());
            }
            4 => pool.release_threshold,
            // Nothing is kept in reserve: what the pool holds is what is in use.
            5 | 7 => pool.used,
            6 | 8 => pool.used_high,
            _ => return Err(code::INVALID_VALUE),
        };
        // SAFETY: value is non-null and, for these attributes, points to a cuuint64_t.
        unsafe { value.cast::<u64>().write(wide) };
        Ok(())
    }

    fn cuMemPoolTrimTo(pool: CUmemoryPool, _min_bytes_to_keep: usize) {
        driver::process()?;
        pools().get(pool)?;
        Ok(())
    }

    fn cuMemPoolSetAccess(pool: CUmemoryPool, map: *const CUmemAccessDesc, count: usize) {
        driver::process()?;
        pools().get(pool)?;
        if count > 0 && map.is_null() {
            return Err(code::INVALID_VALUE);
        }
        for i in 0..count {
            // SAFETY: map holds count descriptors, by the contract.
            let desc = unsafe { map.add(i).read() };
            location_device(&desc.location)?;
        }
        Ok(())
    }

    fn cuMemPoolGetAccess(flags: *mut c_int, pool: CUmemoryPool, location: *const CUmemLocation) {
        driver::process()?;
        pools().get(pool)?;
        if location.is_null() {
            return Err(code::INVALID_VALUE);
        }
        // SAFETY: location is non-null and points to a CUmemLocation.
        location_device(unsafe { &*location })?;
        // Every device reaches all memory of the node.
        // SAFETY: flags is null or points to a CUmemAccess_flags.
        unsafe { write_out(flags, ACCESS_READWRITE) }
    }
}
