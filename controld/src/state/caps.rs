//! What the daemon writes into a container's region and limits file: its caps, its GPUs
//! and the node's GPU UUIDs.

use super::{ContainerSpec, State};
use std::path::Path;
use std::sync::Arc;
use tessera_region::{limits_path, Limits, Region, MAX_DEVICES};

impl State {
    /// Tells the state each GPU's UUID (by index), and writes them into every region: a
    /// container runtime may show a container its cards renumbered from 0, and the library
    /// finds which of its accounts a device is by these.
    pub fn set_device_uuids(&mut self, uuids: Vec<Option<[u8; 16]>>) {
        self.uuids = uuids;
        for m in self.containers.values() {
            write_uuids(&m.region, &self.uuids);
        }
    }

    /// Makes (or takes over) the limits file of the region at `path` with the caps of
    /// `spec`, before the region is opened; a failure is a problem of the container's (its
    /// processes are then held to the caps in the region alone).
    pub(super) fn make_limits(
        &self,
        path: &Path,
        spec: &ContainerSpec,
        problems: &mut Vec<String>,
    ) -> Option<Arc<Limits>> {
        match Limits::create(&limits_path(path), &spec.memory_caps()) {
            Ok(limits) => Some(Arc::new(limits)),
            Err(e) => {
                problems.push(format!(
                    "its limits file cannot be made ({e}); its processes can raise their own caps"
                ));
                None
            }
        }
    }
}

/// Writes a spec's caps and GPUs into its region and its limits file: the container's
/// processes see only its GPUs.
pub(super) fn apply_caps(
    region: &Region,
    limits: Option<&Limits>,
    spec: &ContainerSpec,
    uuids: &[Option<[u8; 16]>],
) {
    write_uuids(region, uuids);
    for (dev, cap) in spec.memory_caps().into_iter().enumerate() {
        if let Some(limits) = limits {
            if limits.memory_cap(dev) != cap {
                limits.set_memory_cap(dev, cap);
            }
        }
        if region.own_memory_cap(dev) != cap {
            region.set_memory_cap(dev, cap);
        }
    }
    let gpus = spec
        .gpus
        .as_slice()
        .iter()
        .fold(0u32, |mask, &g| mask | 1 << g);
    if region.gpus() != Some(gpus) {
        region.set_gpus(Some(gpus));
    }
}

/// Writes the node's GPU UUIDs (by index) into a region; the devices past them unknown.
fn write_uuids(region: &Region, uuids: &[Option<[u8; 16]>]) {
    for dev in 0..MAX_DEVICES {
        let uuid = uuids.get(dev).copied().flatten();
        if region.uuid(dev) != uuid {
            region.set_uuid(dev, uuid);
        }
    }
}
