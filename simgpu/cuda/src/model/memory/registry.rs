//! The process's registry of memory the driver knows: every live allocation, keyed by base
//! address, so that frees, address-range queries, pointer attributes and copy validation can
//! find the allocation holding any address.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// What kind of memory an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `cuMemAlloc`, `cuMemAllocPitch`.
    Device,
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemAllocAsync` / `cuMemAllocFromPoolAsync`, from the pool with this handle.
    Pool(usize),
    /// Page-locked host memory from `cuMemAllocHost` / `cuMemHostAlloc`, with its flags.
    Host(u32),
    /// Host memory the program owns, registered by `cuMemHostRegister`, with its flags.
    Registered(u32),
    /// A mapping of a `cuMemCreate` allocation (the handle) into a reserved range.
    Mapped(u64),
    /// A loaded module's variables (`__device__`, `__constant__`).
    Module,
}

impl Kind {
    /// Whether the memory lives on a device (as opposed to page-locked host memory).
    pub(crate) fn on_device(self) -> bool {
        !matches!(self, Kind::Host(_) | Kind::Registered(_))
    }
    /// Whether it counts against the device's memory on its own: a module's variables are
    /// part of what a context costs (`SIMGPU_CONTEXT_MEMORY` stands for a context and the
    /// code it loads), so they do not count again.
    pub(crate) fn counted(self) -> bool {
        self.on_device() && self != Kind::Module
    }
    /// Whether `cuMemFree` may free it.
    pub(crate) fn freed_by_mem_free(self) -> bool {
        matches!(self, Kind::Device | Kind::Managed | Kind::Pool(_))
    }
}

/// Access a program has to an allocation: mappings start inaccessible until
/// `cuMemSetAccess`, everything else is read-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Access {
    None,
    Read,
    ReadWrite,
}

/// One live allocation.
#[derive(Debug, Clone)]
pub(crate) struct Allocation {
    pub base: u64,
    pub size: u64,
    pub kind: Kind,
    /// The device whose memory it counts against (the context's device for host memory).
    pub device: usize,
    /// Unique for the life of the process (`CU_POINTER_ATTRIBUTE_BUFFER_ID`); also tells a
    /// stream-ordered free which allocation it was enqueued for.
    pub id: u64,
    /// The context current when it was allocated, as the program's handle.
    pub context: usize,
    /// That context's id (0 if none), which outlives its handle.
    pub context_id: u64,
    pub access: Access,
    /// A stream-ordered free is enqueued; no other free may be.
    pub free_pending: bool,
}

impl Allocation {
    pub(crate) fn end(&self) -> u64 {
        self.base + self.size
    }
    fn holds(&self, ptr: u64, len: u64) -> bool {
        ptr >= self.base && ptr.checked_add(len).is_some_and(|end| end <= self.end())
    }
}

/// Allocations by base address. Allocations never overlap.
#[derive(Default)]
pub(crate) struct Registry {
    by_base: BTreeMap<u64, Allocation>,
}

impl Registry {
    pub(crate) const fn new() -> Self {
        Registry {
            by_base: BTreeMap::new(),
        }
    }

    pub(crate) fn insert(&mut self, allocation: Allocation) {
        debug_assert!(self.overlapping(allocation.base, allocation.size).is_none());
        self.by_base.insert(allocation.base, allocation);
    }

    /// The allocation that contains `ptr`.
    pub(crate) fn find(&self, ptr: u64) -> Option<&Allocation> {
        self.by_base
            .range(..=ptr)
            .next_back()
            .map(|(_, a)| a)
            .filter(|a| ptr < a.end())
    }

    /// The allocation that contains all of `[ptr, ptr + len)`; for `len == 0`, the one that
    /// contains `ptr`.
    pub(crate) fn find_range(&self, ptr: u64, len: u64) -> Option<&Allocation> {
        self.find(ptr).filter(|a| a.holds(ptr, len))
    }

    /// An allocation overlapping `[ptr, ptr + len)`, if any.
    pub(crate) fn overlapping(&self, ptr: u64, len: u64) -> Option<&Allocation> {
        let end = ptr.saturating_add(len.max(1));
        self.by_base
            .range(..end)
            .next_back()
            .map(|(_, a)| a)
            .filter(|a| a.end() > ptr)
    }

    pub(crate) fn get_mut(&mut self, base: u64) -> Option<&mut Allocation> {
        self.by_base.get_mut(&base)
    }

    pub(crate) fn remove(&mut self, base: u64) -> Option<Allocation> {
        self.by_base.remove(&base)
    }

    /// Removes every allocation `doomed` picks.
    #[allow(dead_code)] // used by `forget_context`
    pub(crate) fn remove_where(&mut self, doomed: impl Fn(&Allocation) -> bool) -> Vec<Allocation> {
        let bases: Vec<u64> = self
            .by_base
            .values()
            .filter(|a| doomed(a))
            .map(|a| a.base)
            .collect();
        bases
            .iter()
            .filter_map(|b| self.by_base.remove(b))
            .collect()
    }

    /// Removes the allocation at `base` only if it is still the one with `id`.
    pub(crate) fn remove_if_id(&mut self, base: u64, id: u64) -> Option<Allocation> {
        match self.by_base.get(&base) {
            Some(a) if a.id == id => self.by_base.remove(&base),
            _ => None,
        }
    }
}

static REGISTRY: RwLock<Registry> = RwLock::new(Registry::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh allocation id.
pub(crate) fn next_id() -> u64 {
    // Relaxed: ids only need to be unique.
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Reads the registry. A panic while it was held poisons nothing we rely on: every update
/// is a single map operation.
pub(crate) fn read() -> RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(|e| e.into_inner())
}

/// Updates the registry.
pub(crate) fn write() -> RwLockWriteGuard<'static, Registry> {
    REGISTRY.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(base: u64, size: u64, kind: Kind) -> Allocation {
        Allocation {
            base,
            size,
            kind,
            device: 0,
            id: base,
            context: 0,
            context_id: 0,
            access: Access::ReadWrite,
            free_pending: false,
        }
    }

    #[test]
    fn finds_the_allocation_holding_an_address() {
        let mut r = Registry::new();
        r.insert(alloc(0x1000, 0x100, Kind::Device));
        r.insert(alloc(0x2000, 0x1000, Kind::Host(0)));
        assert_eq!(r.find(0x1000).map(|a| a.base), Some(0x1000));
        assert_eq!(r.find(0x10ff).map(|a| a.base), Some(0x1000));
        assert!(r.find(0x1100).is_none());
        assert!(r.find(0xfff).is_none());
        assert_eq!(r.find(0x2fff).map(|a| a.base), Some(0x2000));
        assert!(r.find(0x3000).is_none());
    }

    #[test]
    fn ranges_must_lie_inside_one_allocation() {
        let mut r = Registry::new();
        r.insert(alloc(0x1000, 0x100, Kind::Device));
        r.insert(alloc(0x1100, 0x100, Kind::Device));
        assert!(r.find_range(0x1000, 0x100).is_some());
        assert!(r.find_range(0x1080, 0x80).is_some());
        // Spans two adjacent allocations: not one allocation.
        assert!(r.find_range(0x1080, 0x100).is_none());
        assert!(r.find_range(0x1100, 0x101).is_none());
        assert!(r.find_range(0x10ff, 0).is_some());
        assert!(r.find_range(u64::MAX - 1, 10).is_none());
    }

    #[test]
    fn overlap_and_removal() {
        let mut r = Registry::new();
        r.insert(alloc(0x1000, 0x100, Kind::Device));
        assert!(r.overlapping(0xf00, 0x101).is_some());
        assert!(r.overlapping(0xf00, 0x100).is_none());
        assert!(r.overlapping(0x10ff, 1).is_some());
        assert!(r.overlapping(0x1100, 0x10).is_none());
        assert!(r.remove_if_id(0x1000, 7).is_none());
        assert!(r.remove_if_id(0x1000, 0x1000).is_some());
        assert!(r.find(0x1000).is_none());
    }

    #[test]
    fn kinds() {
        assert!(Kind::Pool(1).freed_by_mem_free());
        assert!(!Kind::Mapped(1).freed_by_mem_free());
        assert!(!Kind::Host(0).on_device());
        assert!(Kind::Managed.on_device());
    }
}
