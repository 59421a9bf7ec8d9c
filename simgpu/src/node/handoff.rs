//! The engine's hand-off on the node's shared state: passing a device's engine from its
//! holder to the next waiter, and taking a dead process off it (the reaper's part).

use super::layout::{DeviceState, MAX_PROCESSES};
use crate::clock::now_ns;
use std::sync::atomic::Ordering::SeqCst;
use tessera_region::futex::{self, Sharing};

/// Passes the engine held by `slot` to the next waiting slot in round-robin order (or frees
/// it), recording `at` as the engine time it stopped: `slot` may start again from there, any
/// other process after the switch's dead time, `switch_ns` between two slices of `slice_ns`
/// or more (see `crate::engine`).
pub(crate) fn pass_engine(d: &DeviceState, slot: usize, at: u64, switch_ns: u64, slice_ns: u64) {
    let e = &d.engine;
    // SeqCst (all four): stored before the owner changes, loaded by the next holder after
    // it sees itself the owner.
    e.handoff_ns.store(at, SeqCst);
    e.switch_ns.store(switch_ns, SeqCst);
    e.last_slice_ns.store(slice_ns, SeqCst);
    e.last_holder.store(slot as u32 + 1, SeqCst);
    let next = next_waiter(d, slot).map_or(0, |s| s as u32 + 1);
    if e.owner
        .compare_exchange(slot as u32 + 1, next, SeqCst, SeqCst)
        .is_ok()
    {
        e.epoch.fetch_add(1, SeqCst);
        futex::wake_all(&e.epoch, Sharing::Shared);
    }
}

fn next_waiter(d: &DeviceState, after: usize) -> Option<usize> {
    let n = MAX_PROCESSES;
    (1..n)
        .map(|k| (after + k) % n)
        .find(|&s| d.engine.waiting[s / 64].load(SeqCst) & (1u64 << (s % 64)) != 0)
}

/// Removes a dead process from a device's engine: its waiting bit, and its hold.
pub(crate) fn forget(d: &DeviceState, slot: usize) {
    d.engine.waiting[slot / 64].fetch_and(!(1u64 << (slot % 64)), SeqCst);
    if d.engine.owner.load(SeqCst) == slot as u32 + 1 {
        pass_engine(d, slot, now_ns(), 0, 0);
    }
}
