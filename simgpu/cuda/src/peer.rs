//! Peer access between contexts (`cuCtxEnablePeerAccess`, `cuCtxDisablePeerAccess`): which
//! contexts the current one has been allowed to reach, with the driver's errors for a peer
//! on the same device, a second enable and a disable of access never enabled. Every device's
//! memory here is this host's memory, so access needs nothing more than the record; cuBLAS
//! and NCCL look these entry points up and use them on multi-GPU nodes.

use crate::ffi::{code, CUcontext, CUresult, DriverResult};
use crate::model::context::{self, Context};
use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

/// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`: the two devices cannot reach each other.
const PEER_ACCESS_UNSUPPORTED: CUresult = 217;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
const PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
/// `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`.
const PEER_ACCESS_NOT_ENABLED: CUresult = 705;

/// Enabled accesses, as (the accessing context's id, the peer context's id).
static ENABLED: Mutex<BTreeSet<(u64, u64)>> = Mutex::new(BTreeSet::new());

fn enabled() -> MutexGuard<'static, BTreeSet<(u64, u64)>> {
    // A panic while holding the lock leaves the set itself consistent.
    ENABLED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The current context and the live peer behind `peer`, which must be another context.
fn pair(peer: CUcontext) -> Result<(u64, u64), CUresult> {
    let ctx = context::current()?;
    let peer = context::lookup(peer)?;
    if peer.is_destroyed() || std::sync::Arc::ptr_eq(&ctx, &peer) {
        return Err(code::CUDA_ERROR_INVALID_CONTEXT);
    }
    // As `cuDeviceCanAccessPeer` answers: distinct devices are peers, a device is not its
    // own.
    if ctx.device == peer.device {
        return Err(PEER_ACCESS_UNSUPPORTED);
    }
    Ok((ctx.id, peer.id))
}

fn enable(peer: CUcontext, flags: u32) -> DriverResult {
    let pair = pair(peer)?;
    if flags != 0 {
        return Err(code::CUDA_ERROR_INVALID_VALUE);
    }
    if !enabled().insert(pair) {
        return Err(PEER_ACCESS_ALREADY_ENABLED);
    }
    Ok(())
}

fn disable(peer: CUcontext) -> DriverResult {
    let pair = pair(peer)?;
    if !enabled().remove(&pair) {
        return Err(PEER_ACCESS_NOT_ENABLED);
    }
    Ok(())
}

/// Forgets the accesses of a context that is destroyed, or reset, both ways.
fn forget_context(ctx: &Context) {
    enabled().retain(|&(from, to)| from != ctx.id && to != ctx.id);
}

crate::model::context::teardown_step!(Peers, forget_context);

cuda_entry! {
    fn cuCtxEnablePeerAccess(peer: CUcontext, flags: u32) {
        enable(peer, flags)
    }

    fn cuCtxDisablePeerAccess(peer: CUcontext) {
        disable(peer)
    }
}
