//! Allocate: what a container that got our IDs needs, decided from the IDs alone (the pod is
//! not known yet). The gpu-core answer carries everything; the gpu-memory answer nothing, so
//! the two never conflict.
//!
//! A share of a card (a core request below 100) gets:
//! - `TESSERA_REGION` naming its region, and the region mounted there, with its limits file
//!   beside it read-only. The region's file is named from the core IDs ([`container_name`])
//!   and made by controld at PreStart.
//! - the node's priority board beside it, through a link the plugin makes at PreStart:
//!   writable for online containers; offline ones get an empty file in its place, so their
//!   library leaves the board alone and controld stops them for online work.
//! - `libtessera.so` (read-only) and `/etc/ld.so.preload` naming it.
//! - `NVIDIA_VISIBLE_DEVICES` = the card's UUID and the card's device nodes.
//!
//! Whole cards (100·n) get only `NVIDIA_VISIBLE_DEVICES` and device nodes: no caps, no preload.

use super::HostPaths;
use crate::cards::Card;
use crate::ids::{container_name, is_whole, DeviceId, Resource, CORES_PER_GPU};
use crate::proto::deviceplugin::{CdiDevice, ContainerAllocateResponse, DeviceSpec, Mount};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where the region and the board are inside the container.
pub const CONTAINER_DIR: &str = "/run/tessera";
/// Where `libtessera.so` is inside the container.
pub const CONTAINER_LIBRARY: &str = "/usr/local/lib/tessera/libtessera.so";
/// The dynamic loader's list of libraries to preload, inside the container.
pub const CONTAINER_PRELOAD: &str = "/etc/ld.so.preload";
/// The variable the NVIDIA container runtime reads: which cards the container sees.
pub const ENV_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// The device nodes every GPU container needs, besides one per card.
const CONTROL_DEVICES: [&str; 3] = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"];

/// The host's preload list, in the plugin's own dir.
pub fn preload_file(host: &HostPaths) -> PathBuf {
    host.own_dir().join("ld.so.preload")
}

/// The empty file offline containers get in place of the board.
pub fn no_board(host: &HostPaths) -> PathBuf {
    host.own_dir().join("no-board")
}

/// Writes the files every answer mounts.
pub fn prepare_files(host: &HostPaths) -> std::io::Result<()> {
    std::fs::create_dir_all(host.boards_dir())?;
    std::fs::write(preload_file(host), format!("{CONTAINER_LIBRARY}\n"))?;
    std::fs::write(no_board(host), b"")?;
    Ok(())
}

/// Why an allocation cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// An ID that is not ours or not this resource's.
    #[error("{0}")]
    Id(#[from] crate::ids::BadId),
    /// An ID of a card this node does not have.
    #[error("device ID {0} names a card this node does not have")]
    UnknownCard(String),
    /// An ID of the other resource.
    #[error("device ID {0} is not a {1} ID")]
    WrongResource(String, &'static str),
    /// Whole cards, but not all of each card's IDs.
    #[error("a request of {0} tessera.dev/gpu-core is {n} whole cards, but the kubelet gave IDs on {1}, not all 100 of each", n = .0 / 100)]
    PartialCards(usize, String),
    /// A share spread over cards.
    #[error("a request of {0} tessera.dev/gpu-core below whole cards must lie on one card, but the kubelet gave IDs on {1}; ask for 100 per whole card")]
    Spread(usize, String),
}

/// The cards an allocation's IDs name, in node order, checking every ID.
pub fn cards_of<'c>(
    cards: &'c [Card],
    resource: Resource,
    ids: &[String],
) -> Result<Vec<&'c Card>, AllocateError> {
    let mut uuids = BTreeSet::new();
    for text in ids {
        let id = DeviceId::parse(text)?;
        if id.resource != resource {
            return Err(AllocateError::WrongResource(text.clone(), resource.name()));
        }
        if !cards
            .iter()
            .any(|c| c.uuid == id.uuid && id.number < c.units(resource))
        {
            return Err(AllocateError::UnknownCard(text.clone()));
        }
        uuids.insert(id.uuid);
    }
    Ok(cards.iter().filter(|c| uuids.contains(&c.uuid)).collect())
}

/// The answer for one container's IDs of `resource`: with a CDI dir, a shared container's
/// answer names its CDI device only.
pub fn answer(
    host: &HostPaths,
    cards: &[Card],
    resource: Resource,
    ids: &[String],
) -> Result<ContainerAllocateResponse, AllocateError> {
    let full = edits(host, cards, resource, ids)?;
    if host.cdi_dir.is_none() || resource == Resource::Memory || is_whole(ids.len()) {
        return Ok(full);
    }
    Ok(ContainerAllocateResponse {
        cdi_devices: vec![CdiDevice {
            name: super::cdi::device_name(&container_name(ids)),
        }],
        ..Default::default()
    })
}

/// What a container that got `ids` needs: variables, mounts and device nodes.
pub fn edits(
    host: &HostPaths,
    cards: &[Card],
    resource: Resource,
    ids: &[String],
) -> Result<ContainerAllocateResponse, AllocateError> {
    let chosen = cards_of(cards, resource, ids)?;
    if resource == Resource::Memory {
        return Ok(ContainerAllocateResponse::default());
    }
    if is_whole(ids.len()) {
        let uuids: Vec<&str> = chosen.iter().map(|c| c.uuid.as_str()).collect();
        if chosen.len() * CORES_PER_GPU as usize != ids.len() {
            return Err(AllocateError::PartialCards(ids.len(), uuids.join(", ")));
        }
        let mut response = ContainerAllocateResponse::default();
        response
            .envs
            .insert(ENV_VISIBLE_DEVICES.into(), uuids.join(","));
        response.devices = device_nodes(&host.dev_dir, &chosen);
        return Ok(response);
    }
    match chosen.as_slice() {
        [card] => Ok(share_edits(host, card, &container_name(ids))),
        _ => Err(AllocateError::Spread(
            ids.len(),
            chosen
                .iter()
                .map(|c| c.uuid.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        )),
    }
}

/// What the container `name`, a share of `card`, needs: the card, its region with the
/// read-only limits file beside it, the board, the library and the preload list. Device
/// plugin answers and DRA claims alike.
pub fn share_edits(host: &HostPaths, card: &Card, name: &str) -> ContainerAllocateResponse {
    let mut response = ContainerAllocateResponse::default();
    response
        .envs
        .insert(ENV_VISIBLE_DEVICES.into(), card.uuid.clone());
    response.devices = device_nodes(&host.dev_dir, &[card]);
    let region_in_container = format!("{CONTAINER_DIR}/{name}.region");
    response.envs.insert(
        tessera_region::env::REGION.into(),
        region_in_container.clone(),
    );
    let mount = |host: &Path, container: &str, read_only| Mount {
        container_path: container.to_string(),
        host_path: host.display().to_string(),
        read_only,
    };
    let region = host.state_dir.join(format!("{name}.region"));
    response.mounts = vec![
        mount(&host.library, CONTAINER_LIBRARY, true),
        mount(&preload_file(host), CONTAINER_PRELOAD, true),
        mount(&region, &region_in_container, false),
        // Read-only: the caps the container's processes cannot raise (made by controld
        // with the region).
        mount(
            &tessera_region::limits_path(&region),
            &tessera_region::limits_path(Path::new(&region_in_container))
                .display()
                .to_string(),
            true,
        ),
        mount(
            &host.board_link(name),
            &format!("{CONTAINER_DIR}/{}", tessera_region::BOARD_FILE),
            false,
        ),
    ];
    response
}

/// The device nodes of `cards` that exist on this host, and the control nodes.
fn device_nodes(dev_dir: &Path, cards: &[&Card]) -> Vec<DeviceSpec> {
    let names = CONTROL_DEVICES
        .iter()
        .map(|n| n.to_string())
        .chain(cards.iter().map(|c| format!("nvidia{}", c.index)));
    names
        .map(|name| (dev_dir.join(&name), format!("/dev/{name}")))
        .filter(|(host, _)| host.exists())
        .map(|(host, container)| DeviceSpec {
            container_path: container,
            host_path: host.display().to_string(),
            permissions: "rw".into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cdi: bool) -> HostPaths {
        HostPaths {
            state_dir: "/run/tessera".into(),
            library: "/lib/libtessera.so".into(),
            dev_dir: "/nonexistent-dev".into(),
            cdi_dir: cdi.then(|| "/var/run/cdi".into()),
        }
    }

    fn cards() -> Vec<Card> {
        (0..2)
            .map(|index| Card {
                index,
                uuid: format!("GPU-{index}"),
                model: "m".into(),
                memory: 16 << 30,
                sms: None,
            })
            .collect()
    }

    fn ids(uuid: &str, resource: Resource, numbers: std::ops::Range<u32>) -> Vec<String> {
        DeviceId::texts(uuid, resource, numbers)
    }

    #[test]
    fn a_share_gets_its_region_library_and_card() {
        let core = ids("GPU-1", Resource::Core, 0..30);
        let answer = answer(&config(false), &cards(), Resource::Core, &core).unwrap();
        let name = container_name(&core);
        assert_eq!(answer.envs[ENV_VISIBLE_DEVICES], "GPU-1");
        assert_eq!(
            answer.envs[tessera_region::env::REGION],
            format!("/run/tessera/{name}.region")
        );
        let paths: Vec<(&str, &str, bool)> = answer
            .mounts
            .iter()
            .map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.read_only))
            .collect();
        assert!(paths.contains(&(CONTAINER_LIBRARY, "/lib/libtessera.so", true)));
        assert!(paths.contains(&(CONTAINER_PRELOAD, "/run/tessera/k8s/ld.so.preload", true)));
        let region = format!("/run/tessera/{name}.region");
        assert!(paths.contains(&(region.as_str(), region.as_str(), false)));
        // The same IDs, in any order, give the same answer: the region path is stable.
        let mut reversed = core.clone();
        reversed.reverse();
        let again = super::answer(&config(false), &cards(), Resource::Core, &reversed).unwrap();
        assert_eq!(again, answer);
        // Memory answers carry nothing; with CDI the core answer names the device only.
        let memory = ids("GPU-1", Resource::Memory, 0..4);
        assert_eq!(
            super::answer(&config(false), &cards(), Resource::Memory, &memory).unwrap(),
            ContainerAllocateResponse::default()
        );
        let cdi = super::answer(&config(true), &cards(), Resource::Core, &core).unwrap();
        assert_eq!(
            cdi.cdi_devices[0].name,
            format!("tessera.dev/container={name}")
        );
        assert!(cdi.envs.is_empty() && cdi.mounts.is_empty());
    }

    #[test]
    fn whole_cards_get_no_preload() {
        let mut core = ids("GPU-0", Resource::Core, 0..100);
        core.extend(ids("GPU-1", Resource::Core, 0..100));
        let answer = answer(&config(true), &cards(), Resource::Core, &core).unwrap();
        assert_eq!(answer.envs[ENV_VISIBLE_DEVICES], "GPU-0,GPU-1");
        assert!(!answer.envs.contains_key(tessera_region::env::REGION));
        assert!(answer.mounts.is_empty() && answer.cdi_devices.is_empty());
    }

    #[test]
    fn bad_ids_are_refused_with_what_is_wrong() {
        let mut spread = ids("GPU-0", Resource::Core, 0..20);
        spread.extend(ids("GPU-1", Resource::Core, 0..20));
        let err = answer(&config(false), &cards(), Resource::Core, &spread).unwrap_err();
        assert!(matches!(err, AllocateError::Spread(40, _)), "{err}");
        let memory = ids("GPU-0", Resource::Memory, 0..2);
        let err = answer(&config(false), &cards(), Resource::Core, &memory).unwrap_err();
        assert!(matches!(err, AllocateError::WrongResource(..)), "{err}");
        let unknown = ids("GPU-9", Resource::Core, 0..2);
        let err = answer(&config(false), &cards(), Resource::Core, &unknown).unwrap_err();
        assert!(matches!(err, AllocateError::UnknownCard(_)), "{err}");
        let past = ids("GPU-0", Resource::Memory, 16..17);
        let err = answer(&config(false), &cards(), Resource::Memory, &past).unwrap_err();
        assert!(matches!(err, AllocateError::UnknownCard(_)), "{err}");
        let mut uneven = ids("GPU-0", Resource::Core, 0..60);
        uneven.extend(ids("GPU-1", Resource::Core, 0..40));
        let err = answer(&config(false), &cards(), Resource::Core, &uneven).unwrap_err();
        assert!(matches!(err, AllocateError::PartialCards(100, _)), "{err}");
        let garbage = vec!["nvidia0".to_string()];
        assert!(answer(&config(false), &cards(), Resource::Core, &garbage).is_err());
    }
}
