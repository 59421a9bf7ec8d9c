//! Handle tables: a handle given to the application is the address of a live object, and
//! every handle it passes back is looked up here first, so that a stale or forged handle is
//! an error code instead of a dereference.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

/// The live objects of one kind, by handle.
pub(crate) struct Registry<T> {
    live: Mutex<BTreeMap<usize, Arc<T>>>,
}

impl<T> Registry<T> {
    pub(crate) const fn new() -> Self {
        Registry {
            live: Mutex::new(BTreeMap::new()),
        }
    }

    fn table(&self) -> MutexGuard<'_, BTreeMap<usize, Arc<T>>> {
        // A panic while holding the lock leaves the map itself consistent.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The handle of an object: its address, unique while the object is live.
    pub(crate) fn handle_of(obj: &Arc<T>) -> *mut c_void {
        Arc::as_ptr(obj) as *mut c_void
    }

    /// Makes `obj` live and returns its handle.
    pub(crate) fn insert(&self, obj: Arc<T>) -> *mut c_void {
        let handle = Self::handle_of(&obj);
        self.table().insert(handle as usize, obj);
        handle
    }

    /// The live object behind `handle`.
    pub(crate) fn get(&self, handle: *mut c_void) -> Option<Arc<T>> {
        self.table().get(&(handle as usize)).cloned()
    }

    /// Retires `handle`; the object lives on while work in flight holds it.
    pub(crate) fn remove(&self, handle: *mut c_void) -> Option<Arc<T>> {
        self.table().remove(&(handle as usize))
    }

    /// Retires every object `pred` selects.
    pub(crate) fn remove_where(&self, mut pred: impl FnMut(&T) -> bool) -> Vec<Arc<T>> {
        let mut table = self.table();
        let gone: Vec<usize> = table
            .iter()
            .filter(|(_, obj)| pred(obj))
            .map(|(h, _)| *h)
            .collect();
        gone.iter().filter_map(|h| table.remove(h)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_retire() {
        let reg: Registry<u64> = Registry::new();
        let h = reg.insert(Arc::new(7));
        assert_eq!(reg.get(h).as_deref(), Some(&7));
        assert!(reg.get(std::ptr::null_mut()).is_none());
        assert!(reg.remove(h).is_some());
        assert!(reg.get(h).is_none());
        assert!(reg.remove(h).is_none());
    }
}
