//! Process slots: claim, release, and reaping the slots of dead processes.
//!
//! The protocol, for every slot:
//! - a claimer takes the slot's lock byte, checks that the slot is free, fills it, and only
//!   then publishes it as live; it holds the lock for as long as it lives;
//! - so a live slot's lock is held by its owner, and a reaper that can take a live slot's
//!   lock has proven the owner dead; holding the lock, it returns the slot's memory to the
//!   container and frees the slot;
//! - an owner releasing its slot returns its memory and frees the slot before it unlocks.
//!
//! OFD locks keep other processes out; the region's per-slot `local` bits keep the other
//! threads of this process out (to its own description, its own lock looks free).

use crate::layout::{ProcessEntry, MAX_DEVICES, MAX_PROCESSES, SLOT_FREE, SLOT_LIVE};
use crate::liveness;
use crate::memory::{give_back, reap, record_in_slot, MemoryCap, OverCap};
use crate::{Region, RegionError};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

/// A live process as the region records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Its slot.
    pub slot: usize,
    /// Its pid, in its own pid namespace.
    pub pid: u32,
    /// Bytes it holds on each device ([`MAX_DEVICES`] entries).
    pub memory: Vec<u64>,
}

/// This process's slot in a region: while it lives, the process's reservations are
/// recorded in it, and reaped if the process dies. Dropping it returns its memory and
/// frees the slot.
#[derive(Debug)]
pub struct ProcessSlot {
    region: &'static Region,
    index: usize,
    /// The region's fork generation when claimed: in a fork child the slot is the parent's.
    generation: u64,
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Region {
    fn entry(&self, slot: usize) -> &ProcessEntry {
        &self.layout().processes[slot]
    }

    /// Takes slot `slot` for one thread of this process; false when another thread of it
    /// owns or works on the slot.
    fn take_local(&self, slot: usize) -> bool {
        let bit = 1u64 << (slot % 64);
        // Acquire: like a try-lock, pairs with the Release in `drop_local`, so this thread
        // sees what the previous local holder did to the slot.
        self.local[slot / 64].fetch_or(bit, Ordering::Acquire) & bit == 0
    }

    fn drop_local(&self, slot: usize) {
        // Release: pairs with the Acquire in `take_local`.
        self.local[slot / 64].fetch_and(!(1u64 << (slot % 64)), Ordering::Release);
    }

    /// Claims a free process slot for this process, reaping dead processes' slots once if
    /// none is free. [`RegionError::Full`] when every slot belongs to a live process.
    pub fn claim_slot(&'static self) -> Result<ProcessSlot, RegionError> {
        // Relaxed: set only by a fork child's handler before it has other threads.
        if self.lock_lost.load(Ordering::Relaxed) {
            return Err(RegionError::Io {
                path: self.path.clone().unwrap_or_else(|| "anonymous".into()),
                source: std::io::Error::other(
                    "the region could not be reopened after fork, so this process cannot own a slot",
                ),
            });
        }
        let index = self.take_free_slot(std::process::id())?;
        Ok(ProcessSlot {
            region: self,
            index,
            // Relaxed: see `release_after_fork`.
            generation: self.generation.load(Ordering::Relaxed),
        })
    }

    /// Holds a slot on behalf of a process that keeps memory through another region
    /// (`controld`, for the live processes of a region it set aside): listed with `pid`,
    /// holding `memory` (bytes per device) counted in the container's usage whatever its
    /// cap, since that memory is held already. Nobody reaps it (its lock and local bit are
    /// this process's) until [`Region::release_held_slot`].
    pub fn hold_slot(&self, pid: u32, memory: &[u64]) -> Result<usize, RegionError> {
        let index = self.take_free_slot(pid)?;
        let p = self.entry(index);
        for (dev, &bytes) in memory.iter().enumerate().take(MAX_DEVICES) {
            if let Some(account) = self.account(dev) {
                // The container first, the slot second, as a reservation does.
                MemoryCap(account, None).count_held(bytes);
                // Relaxed: a counter with no data behind it.
                p.memory[dev].fetch_add(bytes, Ordering::Relaxed);
            }
        }
        Ok(index)
    }

    /// Frees a slot taken with [`Region::hold_slot`]: its memory goes back to the container.
    pub fn release_held_slot(&self, slot: usize) {
        if slot >= MAX_PROCESSES {
            return;
        }
        self.free(self.entry(slot));
        liveness::unlock(self.lock_file.as_fd(), liveness::slot_byte(slot));
        self.drop_local(slot);
    }

    /// Takes a free slot for `pid` (reaping dead processes' slots once if none is free):
    /// holding its lock byte and local bit, publishes it live with zeroed counters.
    fn take_free_slot(&self, pid: u32) -> Result<usize, RegionError> {
        let fd = self.lock_file.as_fd();
        for round in 0..2 {
            for slot in 0..MAX_PROCESSES {
                let p = self.entry(slot);
                // Relaxed: a hint only; the decisive check is made under the lock below.
                if p.state.load(Ordering::Relaxed) != SLOT_FREE || !self.take_local(slot) {
                    continue;
                }
                match liveness::try_lock(fd, liveness::slot_byte(slot)) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.drop_local(slot);
                        continue;
                    }
                    Err(source) => {
                        self.drop_local(slot);
                        return Err(RegionError::Io {
                            path: self.path.clone().unwrap_or_else(|| "anonymous".into()),
                            source,
                        });
                    }
                }
                // We hold the lock: no other process claims or reaps the slot now. Acquire:
                // pairs with the Release store that freed it (in `free` or `reap_slot`), so
                // its counters' final values are seen before we overwrite them.
                if p.state.load(Ordering::Acquire) != SLOT_FREE {
                    liveness::unlock(fd, liveness::slot_byte(slot));
                    self.drop_local(slot);
                    continue;
                }
                // Relaxed: published by the Release store of the state below.
                p.pid.store(pid, Ordering::Relaxed);
                for held in &p.memory {
                    held.store(0, Ordering::Relaxed);
                }
                // Release: pairs with the Acquire loads of readers (`processes`, the checks
                // of `open`) and reapers: a slot seen live has its pid and zeroed counters.
                p.state.store(SLOT_LIVE, Ordering::Release);
                return Ok(slot);
            }
            if round == 0 && self.reap_dead() == 0 {
                break;
            }
        }
        Err(RegionError::Full)
    }

    /// Frees the slots of processes that died: their memory goes back to the container.
    /// Returns how many it freed. Slots of this process are never reaped.
    pub fn reap_dead(&self) -> usize {
        (0..MAX_PROCESSES)
            .filter(|&slot| self.reap_slot(slot))
            .count()
    }

    fn reap_slot(&self, slot: usize) -> bool {
        let p = self.entry(slot);
        // Relaxed: a hint only, checked again under the lock.
        if p.state.load(Ordering::Relaxed) != SLOT_LIVE || !self.take_local(slot) {
            return false;
        }
        let fd = self.lock_file.as_fd();
        // A live slot whose lock we can take has no owner: it died. On doubt (the lock
        // cannot be queried), it lives.
        if !matches!(liveness::try_lock(fd, liveness::slot_byte(slot)), Ok(true)) {
            self.drop_local(slot);
            return false;
        }
        // Acquire: pairs with the claimer's Release store of SLOT_LIVE (or the Release store
        // of SLOT_FREE by whoever freed it meanwhile).
        let dead = p.state.load(Ordering::Acquire) == SLOT_LIVE;
        if dead {
            self.free(p);
        }
        liveness::unlock(fd, liveness::slot_byte(slot));
        self.drop_local(slot);
        dead
    }

    /// Returns a slot's memory to the container and frees the slot. The caller holds the
    /// slot's lock and local bit.
    fn free(&self, p: &ProcessEntry) {
        for (held, account) in p.memory.iter().zip(&self.layout().devices) {
            reap(&account.memory_used, held);
        }
        // Release: pairs with the Acquire load of the next claimer or reaper of the slot:
        // the counters are zero before the slot is seen free.
        p.state.store(SLOT_FREE, Ordering::Release);
    }

    /// The processes that hold slots (dead ones are reaped first).
    pub fn processes(&self) -> Vec<ProcessInfo> {
        self.reap_dead();
        self.layout()
            .processes
            .iter()
            .enumerate()
            // Acquire: pairs with the claimer's Release store, so pid and counters are its.
            .filter(|(_, p)| p.state.load(Ordering::Acquire) == SLOT_LIVE)
            .map(|(slot, p)| ProcessInfo {
                slot,
                // Relaxed: momentary figures for people and the daemon, validated by readers.
                pid: p.pid.load(Ordering::Relaxed),
                memory: p.memory.iter().map(|m| m.load(Ordering::Relaxed)).collect(),
            })
            .collect()
    }
}

impl ProcessSlot {
    /// The slot's index in the process table.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The region.
    pub fn region(&self) -> &'static Region {
        self.region
    }

    /// False in a fork child for a slot its parent claimed.
    fn current(&self) -> bool {
        // Relaxed: see `Region::release_after_fork`.
        self.generation == self.region.generation.load(Ordering::Relaxed)
    }

    fn entry(&self) -> &ProcessEntry {
        self.region.entry(self.index)
    }

    /// Reserves `bytes` on device `dev` for this process, or fails without changing
    /// anything: one compare-and-swap loop against the container's cap, then this slot's
    /// own count. When the cap is reached, dead processes are reaped once and the
    /// reservation tried again. Fails for a device past [`MAX_DEVICES`], and for a slot
    /// claimed before a `fork` (in the child).
    pub fn reserve_memory(&self, dev: usize, bytes: u64) -> Result<(), OverCap> {
        let Some(account) = self.region.account(dev) else {
            return Err(OverCap { cap: 0, used: 0 });
        };
        let cap = self.region.memory(account, dev);
        if !self.current() {
            return Err(OverCap {
                cap: cap.cap().unwrap_or(u64::MAX),
                used: cap.used(),
            });
        }
        let mut result = cap.reserve(bytes);
        if result.is_err() && self.region.reap_dead() > 0 {
            result = cap.reserve(bytes);
        }
        if result.is_ok() {
            record_in_slot(&self.entry().memory[dev], bytes);
        }
        result
    }

    /// Gives back `bytes` reserved earlier on device `dev` — never more than this slot
    /// holds, so a double free in the caller cannot hand out another process's memory.
    pub fn release_memory(&self, dev: usize, bytes: u64) {
        if dev >= MAX_DEVICES || !self.current() {
            return;
        }
        if let Some(account) = self.region.account(dev) {
            give_back(&account.memory_used, &self.entry().memory[dev], bytes);
        }
    }

    /// Bytes this process holds on device `dev`.
    pub fn memory_held(&self, dev: usize) -> u64 {
        if dev >= MAX_DEVICES || !self.current() {
            return 0;
        }
        // Relaxed: a momentary figure.
        self.entry().memory[dev].load(Ordering::Relaxed)
    }
}

impl Drop for ProcessSlot {
    /// Returns the slot's memory and frees the slot (nothing in a fork child for the
    /// parent's slot).
    fn drop(&mut self) {
        if !self.current() {
            return;
        }
        let region = self.region;
        region.free(self.entry());
        liveness::unlock(region.lock_file.as_fd(), liveness::slot_byte(self.index));
        region.drop_local(self.index);
    }
}
