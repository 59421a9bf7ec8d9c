//! Virtual memory management: physical allocations (`cuMemCreate`) mapped into reserved
//! address ranges (`cuMemAddressReserve`, `cuMemMap`), accessible once `cuMemSetAccess`
//! says so.
//!
//! A physical allocation is a memfd, so one allocation can be mapped at several addresses
//! and every mapping sees the same bytes; like anonymous memory, its pages cost host RAM
//! only once touched. Its bytes are counted against its device from `cuMemCreate` until it
//! is both released and unmapped everywhere.

use crate::ffi::{code, write_out, CUdeviceptr, CUresult};
use crate::model::driver;
use crate::model::memory::aligned;
use crate::model::memory::location::CUmemLocation;
use crate::model::memory::pool::{location_device, CUmemAccessDesc, ALLOCATION_PINNED};
use crate::model::memory::registry::{self, Access, Allocation, Kind};
use simgpu::device::MAX_DEVICES;
use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

/// `cuMemGetAllocationGranularity`, minimum and recommended alike: the large page of a GPU.
const GRANULARITY: u64 = 2 << 20;
/// The host page size: mappings and offsets must be multiples of it.
const PAGE: u64 = 4096;

use tessera_cuda_abi::{
    CUmemAllocationProp as AllocationProp, CUmemGenericAllocationHandle as Handle,
};

struct Physical {
    memory: OwnedFd,
    size: u64,
    device: usize,
    prop: AllocationProp,
    /// Handles the program holds: one from `cuMemCreate`, one per retain.
    refs: u32,
    mappings: u32,
}

struct Mapping {
    size: u64,
    handle: Handle,
    /// `CUmemAccess_flags` per device.
    access: [u32; MAX_DEVICES],
}

#[derive(Default)]
struct Vmm {
    physical: HashMap<Handle, Physical>,
    /// Reserved ranges: base to size.
    reserved: BTreeMap<u64, u64>,
    /// Mappings: base to mapping.
    mapped: BTreeMap<u64, Mapping>,
    next_handle: Handle,
}

static VMM: Mutex<Option<Vmm>> = Mutex::new(None);

fn vmm() -> MutexGuard<'static, Option<Vmm>> {
    VMM.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_vmm<R>(f: impl FnOnce(&mut Vmm) -> R) -> R {
    f(vmm().get_or_insert_with(Vmm::default))
}

impl Vmm {
    fn live(&mut self, handle: Handle) -> Result<&mut Physical, CUresult> {
        self.physical
            .get_mut(&handle)
            .filter(|p| p.refs > 0)
            .ok_or(code::CUDA_ERROR_INVALID_VALUE)
    }

    /// Frees a physical allocation nobody holds or maps any more.
    fn collect(&mut self, handle: Handle) {
        let done = self
            .physical
            .get(&handle)
            .is_some_and(|p| p.refs == 0 && p.mappings == 0);
        if done {
            if let Some(p) = self.physical.remove(&handle) {
                if let Ok(process) = driver::process() {
                    process.release_memory(p.device, p.size);
                }
            }
        }
    }

    /// The mappings that exactly tile `[ptr, ptr + size)`, or None.
    fn tiling(&self, ptr: u64, size: u64) -> Option<Vec<u64>> {
        let end = ptr.checked_add(size)?;
        let mut at = ptr;
        let mut bases = Vec::new();
        for (&base, m) in self.mapped.range(ptr..end) {
            if base != at {
                return None;
            }
            bases.push(base);
            at = base + m.size;
        }
        (at == end && !bases.is_empty()).then_some(bases)
    }

    /// Puts a mapped range back to reserved, inaccessible address space.
    fn unmap_one(&mut self, base: u64) {
        let Some(m) = self.mapped.remove(&base) else {
            return;
        };
        // SAFETY: the range is a mapping inside one of our reservations; replacing it with a
        // fresh inaccessible anonymous mapping keeps the reservation and drops the memfd's.
        unsafe {
            libc::mmap(
                base as *mut c_void,
                m.size as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                -1,
                0,
            );
        }
        registry::write().remove(base);
        if let Some(p) = self.physical.get_mut(&m.handle) {
            p.mappings -= 1;
        }
        self.collect(m.handle);
    }
}

fn check_prop(prop: *const AllocationProp) -> Result<(AllocationProp, usize), CUresult> {
    if prop.is_null() {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: prop is non-null and, by the contract, points to a CUmemAllocationProp.
    let p = unsafe { prop.read() };
    if p.kind != ALLOCATION_PINNED {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    let device = location_device(&p.location)?;
    Ok((p, device))
}

/// Reserves `size` bytes of inaccessible address space aligned to `alignment`, at `hint`
/// if that is free.
fn reserve_address_space(size: u64, alignment: u64, hint: u64) -> Result<u64, CUresult> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    if hint != 0 && aligned(hint, alignment) {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
        let p = unsafe {
            libc::mmap(
                hint as *mut c_void,
                size as usize,
                libc::PROT_NONE,
                flags | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p as u64 == hint {
            return Ok(hint);
        }
        if p != libc::MAP_FAILED {
            // An old kernel ignored the flag and placed it elsewhere.
            // SAFETY: we just made this mapping.
            unsafe { libc::munmap(p, size as usize) };
        }
    }
    let padded = size
        .checked_add(alignment)
        .ok_or(code::CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: a fresh mapping at an address of the kernel's choosing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            padded as usize,
            libc::PROT_NONE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(code::CUDA_ERROR_OUT_OF_MEMORY);
    }
    let start = p as u64;
    let base = (start + alignment - 1) & !(alignment - 1);
    let (head, tail) = (base - start, start + padded - (base + size));
    // SAFETY: the head and tail are parts of the mapping just made, outside [base, base+size).
    unsafe {
        if head > 0 {
            libc::munmap(p, head as usize);
        }
        if tail > 0 {
            libc::munmap((base + size) as *mut c_void, tail as usize);
        }
    }
    Ok(base)
}

cuda_entry! {
    fn cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const AllocationProp, option: u32) {
        driver::process()?;
        check_prop(prop)?;
        if option > 1 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: granularity is null or points to a size_t.
        unsafe { write_out(granularity, GRANULARITY as usize) }
    }

    fn cuMemCreate(handle: *mut Handle, size: usize, prop: *const AllocationProp, flags: u64) {
        let process = driver::process()?;
        let (prop, device) = check_prop(prop)?;
        let size = size as u64;
        if handle.is_null() || flags != 0 || size == 0 || !aligned(size, GRANULARITY) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        process.reserve_memory(device, size).map_err(|_| code::CUDA_ERROR_OUT_OF_MEMORY)?;
        // SAFETY: memfd_create takes a NUL-terminated name and flags; the fd is checked next.
        let fd = unsafe { libc::memfd_create(c"simgpu-vmm".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            process.release_memory(device, size);
            return Err(code::CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: fd is a fresh descriptor we own.
        let memory = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sizes the memfd we own; its pages stay unallocated until touched.
        if unsafe { libc::ftruncate(memory.as_raw_fd(), size as libc::off_t) } != 0 {
            process.release_memory(device, size);
            return Err(code::CUDA_ERROR_OUT_OF_MEMORY);
        }
        let h = with_vmm(|v| {
            v.next_handle += 1;
            let h = 0x7e59_0000_0000 + v.next_handle;
            v.physical.insert(h, Physical { memory, size, device, prop, refs: 1, mappings: 0 });
            h
        });
        // SAFETY: handle is non-null and points to a CUmemGenericAllocationHandle.
        unsafe { write_out(handle, h) }
    }

    fn cuMemRelease(handle: Handle) {
        driver::process()?;
        with_vmm(|v| {
            v.live(handle)?.refs -= 1;
            v.collect(handle);
            Ok(())
        })
    }

    fn cuMemRetainAllocationHandle(handle: *mut Handle, addr: *mut c_void) {
        driver::process()?;
        if handle.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let h = with_vmm(|v| {
            let addr = addr as u64;
            let (_, m) = v.mapped.range(..=addr).next_back().filter(|(b, m)| addr < *b + m.size).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
            let h = m.handle;
            v.physical.get_mut(&h).ok_or(code::CUDA_ERROR_INVALID_VALUE)?.refs += 1;
            Ok::<_, CUresult>(h)
        })?;
        // SAFETY: handle is non-null and points to a CUmemGenericAllocationHandle.
        unsafe { write_out(handle, h) }
    }

    /// Memory is never shared with another process here: an allocation made without the
    /// handle type is refused as the driver refuses it, one made with it is not supported.
    fn cuMemExportToShareableHandle(shareable: *mut c_void, handle: Handle, kind: u32, flags: u64) {
        driver::process()?;
        if shareable.is_null() || flags != 0 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let prop = with_vmm(|v| v.live(handle).map(|p| p.prop))?;
        if prop.requested_handle_types & kind == 0 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }

    /// See `cuMemExportToShareableHandle`: there is nothing to import.
    fn cuMemImportFromShareableHandle(handle: *mut Handle, _os_handle: *mut c_void, _kind: u32) {
        driver::process()?;
        if handle.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        Err(code::CUDA_ERROR_NOT_SUPPORTED)
    }

    fn cuMemGetAllocationPropertiesFromHandle(prop: *mut AllocationProp, handle: Handle) {
        driver::process()?;
        let p = with_vmm(|v| v.live(handle).map(|p| p.prop))?;
        // SAFETY: prop is null or points to a CUmemAllocationProp.
        unsafe { write_out(prop, p) }
    }

    fn cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: u64) {
        driver::process()?;
        let (size, alignment) = (size as u64, alignment as u64);
        if ptr.is_null() || flags != 0 || size == 0 || !aligned(size, PAGE) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let alignment = match alignment {
            0 => GRANULARITY,
            a if a.is_power_of_two() => a.max(PAGE),
            _ => return Err(code::CUDA_ERROR_INVALID_VALUE),
        };
        let base = reserve_address_space(size, alignment, addr)?;
        with_vmm(|v| v.reserved.insert(base, size));
        // SAFETY: ptr is non-null and points to a CUdeviceptr.
        unsafe { write_out(ptr, base) }
    }

    fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) {
        driver::process()?;
        with_vmm(|v| {
            if v.reserved.get(&ptr) != Some(&(size as u64)) {
                return Err(code::CUDA_ERROR_INVALID_VALUE);
            }
            let inside: Vec<u64> = v.mapped.range(ptr..ptr + size as u64).map(|(b, _)| *b).collect();
            for base in inside {
                v.unmap_one(base);
            }
            v.reserved.remove(&ptr);
            // SAFETY: the whole range is our reservation, and nothing is mapped in it now.
            unsafe { libc::munmap(ptr as *mut c_void, size) };
            Ok(())
        })
    }

    fn cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: Handle, flags: u64) {
        driver::process()?;
        let (size, offset) = (size as u64, offset as u64);
        if flags != 0 || size == 0 || !aligned(ptr | size | offset, PAGE) {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        with_vmm(|v| {
            let end = ptr.checked_add(size).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
            let inside = v.reserved.range(..=ptr).next_back().is_some_and(|(b, s)| end <= b + s);
            let free = v.mapped.range(..end).next_back().filter(|(b, m)| *b + m.size > ptr).is_none();
            if !inside || !free {
                return Err(code::CUDA_ERROR_INVALID_VALUE);
            }
            let p = v.live(handle)?;
            if offset.checked_add(size).filter(|&e| e <= p.size).is_none() {
                return Err(code::CUDA_ERROR_INVALID_VALUE);
            }
            // SAFETY: [ptr, end) lies inside our reservation and overlaps no mapping, so
            // replacing it touches nothing else; the memfd covers [offset, offset + size).
            let r = unsafe {
                libc::mmap(
                    ptr as *mut c_void,
                    size as usize,
                    libc::PROT_NONE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    p.memory.as_raw_fd(),
                    offset as libc::off_t,
                )
            };
            if r == libc::MAP_FAILED {
                return Err(code::CUDA_ERROR_OUT_OF_MEMORY);
            }
            p.mappings += 1;
            let device = p.device;
            v.mapped.insert(ptr, Mapping { size, handle, access: [0; MAX_DEVICES] });
            registry::write().insert(Allocation {
                base: ptr,
                size,
                kind: Kind::Mapped(handle),
                device,
                id: registry::next_id(),
                context: 0,
                context_id: 0,
                access: Access::None,
                free_pending: false,
            });
            Ok(())
        })
    }

    fn cuMemUnmap(ptr: CUdeviceptr, size: usize) {
        driver::process()?;
        with_vmm(|v| {
            let bases = v.tiling(ptr, size as u64).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
            for base in bases {
                v.unmap_one(base);
            }
            Ok(())
        })
    }

    fn cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) {
        driver::process()?;
        if desc.is_null() || count == 0 {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        let mut grants = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: desc holds count descriptors, by the contract.
            let d = unsafe { desc.add(i).read() };
            let device = location_device(&d.location)?;
            let flags = u32::try_from(d.flags).ok().filter(|f| matches!(f, 0 | 1 | 3)).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
            grants.push((device, flags));
        }
        with_vmm(|v| {
            let bases = v.tiling(ptr, size as u64).ok_or(code::CUDA_ERROR_INVALID_VALUE)?;
            for base in bases {
                let m = v.mapped.get_mut(&base).expect("tiling returns mapped bases");
                for &(device, flags) in &grants {
                    m.access[device] = flags;
                }
                // The host is every device here: the most any device may do is allowed.
                let (prot, access) = match m.access.iter().max() {
                    Some(3) => (libc::PROT_READ | libc::PROT_WRITE, Access::ReadWrite),
                    Some(1) => (libc::PROT_READ, Access::Read),
                    _ => (libc::PROT_NONE, Access::None),
                };
                // SAFETY: the range is one of our mappings.
                if unsafe { libc::mprotect(base as *mut c_void, m.size as usize, prot) } != 0 {
                    return Err(code::CUDA_ERROR_OPERATING_SYSTEM);
                }
                if let Some(a) = registry::write().get_mut(base) {
                    a.access = access;
                }
            }
            Ok(())
        })
    }

    fn cuMemGetAccess(flags: *mut u64, location: *const CUmemLocation, ptr: CUdeviceptr) {
        driver::process()?;
        if location.is_null() {
            return Err(code::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: location is non-null and points to a CUmemLocation.
        let device = location_device(unsafe { &*location })?;
        let f = with_vmm(|v| {
            v.mapped
                .range(..=ptr)
                .next_back()
                .filter(|(b, m)| ptr < *b + m.size)
                .map(|(_, m)| m.access[device] as u64)
                .ok_or(code::CUDA_ERROR_INVALID_VALUE)
        })?;
        // SAFETY: flags is null or points to an unsigned long long.
        unsafe { write_out(flags, f) }
    }
}
