//! Virtual memory management, accounted as the driver frees: a device-located physical
//! allocation (`cuMemCreate`) holds its bytes until it is both released (`cuMemRelease`, once
//! per handle the program holds: the creation and each `cuMemRetainAllocationHandle`) and
//! unmapped everywhere (`cuMemUnmap`, or `cuMemAddressFree` of the range it is mapped in).
//! PyTorch's expandable segments release each handle right after mapping it and keep using
//! the mapping, so counting only until the release would let a container pass its cap.
//!
//! Address reservations and mappings cost no device memory of their own. The book of
//! handles and mappings is kept under one lock held across the driver call it mirrors, so
//! that it changes in the driver's order: a handle the driver frees and hands out again at
//! once is never mistaken for the old one. VMM calls are rare and slow next to that lock.

use super::registry::Allocation;
use super::{admit, Admit};
use crate::container::{self, Container};
use crate::fork_lock::{self, ForkGuard, ForkLock};
use crate::hooks::real;
use std::collections::BTreeMap;
use std::ffi::c_void;

use tessera_cuda_abi::{CUmemAllocationProp, CU_MEM_LOCATION_TYPE_DEVICE};
use tessera_cuda_abi::{CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS};

/// The device a `CUmemAllocationProp` places its memory on; `None` for host memory (not
/// counted) or a null property (the driver refuses it).
///
/// # Safety
/// `prop` is null or points to a `CUmemAllocationProp`.
unsafe fn device_of(prop: *const CUmemAllocationProp) -> Option<usize> {
    if prop.is_null() {
        return None;
    }
    // SAFETY: non-null, and by the contract a CUmemAllocationProp; only its location is
    // read, unaligned in case the caller's struct is packed oddly.
    let location = unsafe { (&raw const (*prop).location).read_unaligned() };
    if location.kind != CU_MEM_LOCATION_TYPE_DEVICE {
        return None;
    }
    usize::try_from(location.id)
        .ok()
        .map(crate::visibility::account)
}

/// A counted physical allocation the driver has not freed yet.
#[derive(Debug)]
struct Physical {
    allocation: Allocation,
    /// Handles the program still holds: its creation and each retain, less the releases.
    refs: u32,
    /// Mappings of it that are still in place.
    mappings: u32,
}

/// One mapping of a counted physical allocation: `[base, base + size)`.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    size: u64,
    handle: u64,
}

/// What this process's counted physical allocations are doing, as the driver sees it.
/// Mappings of handles that were not counted (host memory, no container) are not kept.
#[derive(Debug, Default)]
struct Book {
    physical: BTreeMap<u64, Physical>,
    /// By base address.
    mapped: BTreeMap<u64, Mapping>,
}

impl Book {
    const fn new() -> Book {
        Book {
            physical: BTreeMap::new(),
            mapped: BTreeMap::new(),
        }
    }

    /// The driver made `handle`. Returns the record it replaces: the driver freed that one
    /// where we could not see it and has handed out the same value again.
    fn created(&mut self, handle: u64, allocation: Allocation) -> Option<Allocation> {
        let new = Physical {
            allocation,
            refs: 1,
            mappings: 0,
        };
        self.physical.insert(handle, new).map(|old| old.allocation)
    }

    /// The driver gave out one more handle to the allocation.
    fn retained(&mut self, handle: u64) {
        if let Some(p) = self.physical.get_mut(&handle) {
            p.refs = p.refs.saturating_add(1);
        }
    }

    /// The driver released one handle. Returns the allocation if that freed it.
    fn released(&mut self, handle: u64) -> Option<Allocation> {
        let p = self.physical.get_mut(&handle)?;
        p.refs = p.refs.saturating_sub(1);
        self.collect(handle)
    }

    /// The driver mapped `handle` at `[base, base + size)`. Returns the allocations freed
    /// by dropping stale mappings that overlapped (unmapped where we could not see it: the
    /// driver maps only over unmapped addresses).
    fn mapped(&mut self, base: u64, size: u64, handle: u64) -> Vec<Allocation> {
        let freed = self.unmapped(base, size);
        if let Some(p) = self.physical.get_mut(&handle) {
            p.mappings = p.mappings.saturating_add(1);
            self.mapped.insert(base, Mapping { size, handle });
        }
        freed
    }

    /// Everything mapped in `[base, base + size)` is gone: returns the allocations that
    /// freed. One unmap may cover several mappings, and `cuMemAddressFree` a whole range.
    fn unmapped(&mut self, base: u64, size: u64) -> Vec<Allocation> {
        let end = base.saturating_add(size);
        let mut gone: Vec<u64> = self.mapped.range(base..end).map(|(&b, _)| b).collect();
        // A mapping that starts before the range and reaches into it.
        if let Some((&b, m)) = self.mapped.range(..base).next_back() {
            if b.saturating_add(m.size) > base {
                gone.push(b);
            }
        }
        let mut freed = Vec::new();
        for b in gone {
            let Some(m) = self.mapped.remove(&b) else {
                continue;
            };
            if let Some(p) = self.physical.get_mut(&m.handle) {
                p.mappings = p.mappings.saturating_sub(1);
            }
            freed.extend(self.collect(m.handle));
        }
        freed
    }

    /// Takes out `handle` if nothing holds or maps it any more.
    fn collect(&mut self, handle: u64) -> Option<Allocation> {
        let done = self
            .physical
            .get(&handle)
            .is_some_and(|p| p.refs == 0 && p.mappings == 0);
        if !done {
            return None;
        }
        self.physical.remove(&handle).map(|p| p.allocation)
    }

    /// Bytes still counted (for tests).
    #[cfg(test)]
    fn counted(&self) -> u64 {
        self.physical.values().map(|p| p.allocation.bytes).sum()
    }
}

static BOOK: ForkLock<Book> = ForkLock::new(Book::new());

fn book() -> ForkGuard<'static, Book> {
    // The book is consistent after every method, so a panic elsewhere cannot leave it torn.
    BOOK.lock()
}

fn give_back(c: &Container, freed: impl IntoIterator<Item = Allocation>) {
    for a in freed {
        c.release(a.device, a.bytes, a.generation);
    }
}

/// # Safety
/// `real` is the driver's `cuMemCreate`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_create(
    real: real::cuMemCreate::Real,
    handle: *mut u64,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> u32 {
    // SAFETY: the caller's arguments, passed on.
    let call = || unsafe { real(handle, size, prop, flags) };
    // SAFETY: prop is the caller's, null or a CUmemAllocationProp by the contract.
    let device = unsafe { device_of(prop) };
    let Some(device) = device.filter(|_| !handle.is_null()) else {
        return call();
    };
    let (c, reservation) = match admit(device, size as u64) {
        Admit::Go(c, r) => (c, r),
        Admit::Uncounted => return call(),
        Admit::OverCap => return CUDA_ERROR_OUT_OF_MEMORY,
    };
    let rc = call();
    if rc == CUDA_SUCCESS && reservation.is_counted() {
        // SAFETY: handle is non-null and the driver just wrote the new handle there.
        let h = unsafe { handle.read() };
        let allocation = Allocation {
            device,
            bytes: reservation.keep(),
            // Not tied to a context: physical allocations outlive the context that made them.
            context: 0,
            generation: fork_lock::generation(),
        };
        // The lock is taken after the driver call: a release of the same value that freed
        // it in the driver finishes its bookkeeping first (it holds the lock throughout).
        let stale = book().created(h, allocation);
        give_back(c, stale);
    }
    rc
}

/// Runs `call` (the driver's) with the book locked and, if it succeeds, lets `then` update
/// the book; gives back what that freed.
fn mirrored(call: impl FnOnce() -> u32, then: impl FnOnce(&mut Book) -> Vec<Allocation>) -> u32 {
    let Some(c) = container::get() else {
        return call();
    };
    let mut book = book();
    let rc = call();
    if rc == CUDA_SUCCESS {
        give_back(c, then(&mut book));
    }
    rc
}

/// # Safety
/// `real` is the driver's `cuMemRelease`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_release(real: real::cuMemRelease::Real, handle: u64) -> u32 {
    mirrored(
        // SAFETY: the caller's argument, passed on.
        || unsafe { real(handle) },
        |book| book.released(handle).into_iter().collect(),
    )
}

/// # Safety
/// `real` is the driver's `cuMemRetainAllocationHandle`; the arguments are the caller's,
/// unchanged.
pub(crate) unsafe fn mem_retain_allocation_handle(
    real: real::cuMemRetainAllocationHandle::Real,
    handle: *mut u64,
    addr: *mut c_void,
) -> u32 {
    mirrored(
        // SAFETY: the caller's arguments, passed on.
        || unsafe { real(handle, addr) },
        |book| {
            // SAFETY: the driver accepted the out-pointer (so it is non-null) and wrote it.
            book.retained(unsafe { handle.read() });
            Vec::new()
        },
    )
}

/// # Safety
/// `real` is the driver's `cuMemMap`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_map(
    real: real::cuMemMap::Real,
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> u32 {
    mirrored(
        // SAFETY: the caller's arguments, passed on.
        || unsafe { real(ptr, size, offset, handle, flags) },
        |book| book.mapped(ptr, size as u64, handle),
    )
}

/// # Safety
/// `real` is the driver's `cuMemUnmap`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_unmap(real: real::cuMemUnmap::Real, ptr: u64, size: usize) -> u32 {
    mirrored(
        // SAFETY: the caller's arguments, passed on.
        || unsafe { real(ptr, size) },
        |book| book.unmapped(ptr, size as u64),
    )
}

/// # Safety
/// `real` is the driver's `cuMemAddressFree`; the arguments are the caller's, unchanged.
pub(crate) unsafe fn mem_address_free(
    real: real::cuMemAddressFree::Real,
    ptr: u64,
    size: usize,
) -> u32 {
    // What is still mapped in a freed range is unmapped with it.
    mirrored(
        // SAFETY: the caller's arguments, passed on.
        || unsafe { real(ptr, size) },
        |book| book.unmapped(ptr, size as u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use tessera_cuda_abi::CUmemLocation;

    fn prop(kind: u32, id: i32) -> CUmemAllocationProp {
        CUmemAllocationProp {
            kind: 1,
            requested_handle_types: 0,
            location: CUmemLocation { kind, id },
            win32_handle_meta_data: std::ptr::null_mut(),
            alloc_flags: [0; 8],
        }
    }

    #[test]
    fn device_located_memory_names_its_device() {
        let p = prop(CU_MEM_LOCATION_TYPE_DEVICE, 3);
        // SAFETY: a valid property on the stack.
        assert_eq!(unsafe { device_of(&p) }, Some(3));
    }

    #[test]
    fn host_memory_and_null_are_not_counted() {
        let p = prop(2, 0);
        // SAFETY: a valid property on the stack; null is allowed.
        unsafe {
            assert_eq!(device_of(&p), None);
            assert_eq!(device_of(std::ptr::null()), None);
        }
        let p = prop(CU_MEM_LOCATION_TYPE_DEVICE, -1);
        // SAFETY: as above.
        assert_eq!(unsafe { device_of(&p) }, None);
    }

    const MIB: u64 = 1 << 20;

    fn a(bytes: u64) -> Allocation {
        Allocation {
            device: 0,
            bytes,
            context: 0,
            generation: 0,
        }
    }

    fn bytes(freed: impl IntoIterator<Item = Allocation>) -> u64 {
        freed.into_iter().map(|a| a.bytes).sum()
    }

    #[test]
    fn unmapped_but_held_or_held_but_unmapped_stays_counted() {
        let mut b = Book::new();
        b.created(1, a(2 * MIB));
        assert_eq!(bytes(b.mapped(0x1000_0000, 2 * MIB, 1)), 0);
        // Expandable segments: released at once, used through the mapping.
        assert_eq!(b.released(1), None);
        assert_eq!(b.counted(), 2 * MIB);
        assert_eq!(bytes(b.unmapped(0x1000_0000, 2 * MIB)), 2 * MIB);
        assert_eq!(b.counted(), 0);

        // The other order: unmapped first, released last.
        b.created(2, a(4 * MIB));
        b.mapped(0x2000_0000, 4 * MIB, 2);
        assert_eq!(bytes(b.unmapped(0x2000_0000, 4 * MIB)), 0);
        assert_eq!(b.released(2).map(|a| a.bytes), Some(4 * MIB));
    }

    #[test]
    fn one_unmap_may_cover_several_mappings_of_several_handles() {
        let mut b = Book::new();
        for h in 1..=3 {
            b.created(h, a(2 * MIB));
            b.mapped(0x1000_0000 + (h - 1) * 2 * MIB, 2 * MIB, h);
            b.released(h);
        }
        // Handle 1 mapped a second time, elsewhere.
        b.mapped(0x9000_0000, 2 * MIB, 1);
        assert_eq!(bytes(b.unmapped(0x1000_0000, 6 * MIB)), 4 * MIB);
        assert_eq!(
            b.counted(),
            2 * MIB,
            "handle 1 is still mapped at 0x9000_0000"
        );
        assert_eq!(bytes(b.unmapped(0x9000_0000, 2 * MIB)), 2 * MIB);
    }

    #[test]
    fn retains_need_their_releases() {
        let mut b = Book::new();
        b.created(7, a(MIB));
        b.retained(7);
        assert_eq!(b.released(7), None);
        assert_eq!(b.released(7).map(|a| a.bytes), Some(MIB));
        assert_eq!(b.released(7), None, "a third release frees nothing twice");
    }

    #[test]
    fn address_free_unmaps_what_overlaps_the_range() {
        let mut b = Book::new();
        b.created(1, a(2 * MIB));
        b.mapped(0x1000_0000, 2 * MIB, 1);
        b.released(1);
        // A range that starts inside the mapping still takes it.
        assert_eq!(bytes(b.unmapped(0x1000_1000, 4096)), 2 * MIB);
        assert!(b.mapped.is_empty());
    }

    #[test]
    fn mappings_of_uncounted_handles_are_not_kept() {
        let mut b = Book::new();
        assert!(b.mapped(0x1000_0000, MIB, 99).is_empty());
        assert!(b.mapped.is_empty());
        assert_eq!(b.released(99), None);
    }

    #[test]
    fn a_handle_value_handed_out_again_replaces_the_stale_record() {
        let mut b = Book::new();
        b.created(5, a(MIB));
        assert_eq!(b.created(5, a(3 * MIB)).map(|a| a.bytes), Some(MIB));
        assert_eq!(b.counted(), 3 * MIB);
    }
}
