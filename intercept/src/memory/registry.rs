//! What this process allocated and has not freed: for each device pointer or array (VMM
//! allocations have their own book, in `vmm`), the device and bytes it holds, so that its free gives back exactly
//! what its allocation reserved.
//!
//! Sharded by key so that threads allocating at once rarely meet on a lock; a lock is held
//! only for one map operation.

use crate::fork_lock::{ForkGuard, ForkLock};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// What an allocation is known by. Handles of different kinds may share values, so the
/// kind is part of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    /// Linear memory: `cuMemAlloc*`, managed and stream-ordered allocations.
    Pointer(u64),
    /// A `CUarray`.
    Array(usize),
    /// A `CUmipmappedArray`.
    Mipmapped(usize),
}

impl Key {
    fn bits(self) -> u64 {
        match self {
            Key::Pointer(v) => v,
            Key::Array(v) | Key::Mipmapped(v) => v as u64,
        }
    }
}

/// One live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Allocation {
    /// The device its bytes are counted on.
    pub device: usize,
    /// The bytes counted.
    pub bytes: u64,
    /// The context it belongs to (freed with it); 0 for none (VMM allocations).
    pub context: usize,
    /// The fork generation it was counted under (see `fork_lock::generation`).
    pub generation: u32,
}

const SHARDS: usize = 16;

/// Multiplicative hashing: keys are addresses and handles, already well spread in their
/// middle bits; SipHash would cost more than the rest of an allocation's bookkeeping.
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(FIBONACCI);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(FIBONACCI);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn write_isize(&mut self, v: isize) {
        // The enum discriminant.
        self.write_u64(v as u64);
    }
}

/// 2^64 / the golden ratio: spreads consecutive keys over the whole range.
const FIBONACCI: u64 = 0x9e37_79b9_7f4a_7c15;

type Shard = HashMap<Key, Allocation, BuildHasherDefault<KeyHasher>>;

/// The allocation registry.
pub(crate) struct Registry {
    shards: [ForkLock<Shard>; SHARDS],
}

impl Registry {
    pub(crate) const fn new() -> Registry {
        Registry {
            shards: [const { ForkLock::new(Shard::with_hasher(BuildHasherDefault::new())) };
                SHARDS],
        }
    }

    fn shard(&self, key: Key) -> ForkGuard<'_, Shard> {
        // The top bits of a Fibonacci hash are its best mixed; addresses differ in the middle.
        let i = (key.bits().wrapping_mul(FIBONACCI) >> 60) as usize % SHARDS;
        // A panic while a shard is locked leaves it consistent (single map operations).
        self.shards[i].lock()
    }

    /// Records a new allocation. Returns the record it replaces: one the driver freed
    /// without our seeing it, whose bytes the caller gives back.
    pub(crate) fn insert(&self, key: Key, allocation: Allocation) -> Option<Allocation> {
        self.shard(key).insert(key, allocation)
    }

    /// Takes the record of `key` out, if there is one.
    pub(crate) fn remove(&self, key: Key) -> Option<Allocation> {
        self.shard(key).remove(&key)
    }

    /// Takes out every record that `doomed` picks (the allocations a destroyed context took
    /// with it).
    pub(crate) fn remove_where(
        &self,
        doomed: impl Fn(&Key, &Allocation) -> bool,
    ) -> Vec<(Key, Allocation)> {
        let mut gone = Vec::new();
        for shard in &self.shards {
            let mut shard = shard.lock();
            shard.retain(|k, a| {
                if doomed(k, a) {
                    gone.push((*k, *a));
                    false
                } else {
                    true
                }
            });
        }
        gone
    }

    /// How many records there are (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(device: usize, bytes: u64, context: usize) -> Allocation {
        Allocation {
            device,
            bytes,
            context,
            generation: 0,
        }
    }

    #[test]
    fn insert_remove_round_trip() {
        let r = Registry::new();
        assert_eq!(r.insert(Key::Pointer(0x7000_0000), a(0, 100, 1)), None);
        assert_eq!(r.remove(Key::Pointer(0x7000_0000)), Some(a(0, 100, 1)));
        assert_eq!(r.remove(Key::Pointer(0x7000_0000)), None);
    }

    #[test]
    fn kinds_do_not_collide() {
        let r = Registry::new();
        r.insert(Key::Pointer(42), a(0, 1, 0));
        r.insert(Key::Array(42), a(2, 3, 0));
        r.insert(Key::Mipmapped(42), a(3, 4, 0));
        assert_eq!(r.len(), 3);
        assert_eq!(r.remove(Key::Array(42)).map(|x| x.bytes), Some(3));
        assert_eq!(r.remove(Key::Pointer(42)).map(|x| x.bytes), Some(1));
    }

    #[test]
    fn a_reused_key_returns_the_stale_record() {
        let r = Registry::new();
        r.insert(Key::Pointer(8), a(0, 10, 1));
        assert_eq!(r.insert(Key::Pointer(8), a(0, 20, 1)), Some(a(0, 10, 1)));
    }

    #[test]
    fn remove_where_takes_a_context_s_allocations() {
        let r = Registry::new();
        for i in 0..100u64 {
            r.insert(Key::Pointer(0x1000 * i), a(0, i, (i % 3) as usize));
        }
        let gone = r.remove_where(|_, x| x.context == 1);
        assert_eq!(gone.len(), 33);
        assert!(gone.iter().all(|(_, x)| x.context == 1));
        assert_eq!(r.len(), 67);
    }

    #[test]
    fn threads_do_not_lose_records() {
        let r = Registry::new();
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..1000u64 {
                        let k = Key::Pointer((t << 32) | (i << 12));
                        r.insert(k, a(0, i, 0));
                        if i % 2 == 0 {
                            assert!(r.remove(k).is_some());
                        }
                    }
                });
            }
        });
        assert_eq!(r.len(), 8 * 500);
    }
}
