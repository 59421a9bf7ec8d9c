//! What `cuInit` established that every entry point reads before it runs: the host costs of
//! the node's profile. Kept apart from the attachment ([`crate::model::driver`]) so that the
//! entry point wrapper, below everything else, depends on nothing but this.

use std::sync::OnceLock;

/// The host costs of the node's profile, once `cuInit` attached this process.
static HOST_COSTS: OnceLock<simgpu::profile::HostCosts> = OnceLock::new();

/// What each driver call costs on the host, by the node's profile; `None` before `cuInit`.
pub(crate) fn host_costs() -> Option<&'static simgpu::profile::HostCosts> {
    HOST_COSTS.get()
}

/// Sets the host costs, once (the first attachment's).
pub(crate) fn set_host_costs(costs: simgpu::profile::HostCosts) {
    let _ = HOST_COSTS.set(costs);
}
