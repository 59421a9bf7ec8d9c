//! The two extended resources and their device IDs. Each ID names its card, so that the
//! plugin reads the card of an allocation from the IDs alone: `<GPU-UUID>-core-<n>` (100 per
//! card: one per percent of its time) and `<GPU-UUID>-mem-<n>` (one per GiB of its memory).

use std::fmt;

/// GPU time, in percent of a card; 100·n is n whole cards.
pub const CORE_RESOURCE: &str = "tessera.dev/gpu-core";
/// GPU memory, in GiB.
pub const MEMORY_RESOURCE: &str = "tessera.dev/gpu-memory";
/// Core IDs per card.
pub const CORES_PER_GPU: u32 = 100;
/// The memory one memory ID stands for.
pub const MEMORY_UNIT: u64 = 1 << 30;
/// Whether a core request of `count` IDs is whole cards (a multiple of 100), which are given
/// whole rather than shared.
pub fn is_whole(count: usize) -> bool {
    count >= CORES_PER_GPU as usize && count.is_multiple_of(CORES_PER_GPU as usize)
}

/// The longest device ID the kubelet accepts in its checkpoint and pod-resources answers.
pub const MAX_ID_LEN: usize = 63;

/// Which of the two resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// `tessera.dev/gpu-core`.
    Core,
    /// `tessera.dev/gpu-memory`.
    Memory,
}

impl Resource {
    /// Both, in the order the plugin serves them.
    pub const ALL: [Resource; 2] = [Resource::Core, Resource::Memory];

    /// The extended resource's name.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Core => CORE_RESOURCE,
            Resource::Memory => MEMORY_RESOURCE,
        }
    }

    /// The resource a name stands for.
    pub fn from_name(name: &str) -> Option<Resource> {
        Resource::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The plugin's socket for it, in the kubelet's device-plugin directory.
    pub fn socket(self) -> &'static str {
        match self {
            Resource::Core => "tessera-gpu-core.sock",
            Resource::Memory => "tessera-gpu-memory.sock",
        }
    }

    /// The word between the card and the number in its IDs.
    fn infix(self) -> &'static str {
        match self {
            Resource::Core => "core",
            Resource::Memory => "mem",
        }
    }
}

/// One device ID: a card, a resource and a number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// The card's `GPU-…` UUID.
    pub uuid: String,
    /// Which resource.
    pub resource: Resource,
    /// Which unit of the card.
    pub number: u32,
}

/// An ID that is not one of this plugin's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("device ID {0:?} is not a Tessera ID (<GPU-UUID>-core-<n> or <GPU-UUID>-mem-<n>)")]
pub struct BadId(pub String);

impl DeviceId {
    /// Reads an ID of either resource.
    pub fn parse(text: &str) -> Result<DeviceId, BadId> {
        let bad = || BadId(text.to_string());
        let (rest, number) = text.rsplit_once('-').ok_or_else(bad)?;
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let number = number.parse().map_err(|_| bad())?;
        let (uuid, infix) = rest.rsplit_once('-').ok_or_else(bad)?;
        let resource = Resource::ALL
            .into_iter()
            .find(|r| r.infix() == infix)
            .ok_or_else(bad)?;
        if uuid.is_empty() {
            return Err(bad());
        }
        Ok(DeviceId {
            uuid: uuid.to_string(),
            resource,
            number,
        })
    }

    /// The IDs of `resource` numbered `numbers` on the card `uuid`, written out as the
    /// kubelet sees them.
    pub fn texts(uuid: &str, resource: Resource, numbers: std::ops::Range<u32>) -> Vec<String> {
        numbers
            .map(|number| {
                DeviceId {
                    uuid: uuid.to_string(),
                    resource,
                    number,
                }
                .to_string()
            })
            .collect()
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.uuid, self.resource.infix(), self.number)
    }
}

/// The controld container of an allocation, named from its core IDs: the same name in every
/// Allocate answer and at PreStart, before and after a plugin restart, because the kubelet
/// gives the same IDs each time. `pod-` and 16 hex digits of a 64-bit FNV-1a hash of the
/// sorted IDs.
pub fn container_name(core_ids: &[String]) -> String {
    let mut sorted: Vec<&str> = core_ids.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    format!("{CONTAINER_PREFIX}{:016x}", hash_lines(&sorted))
}

/// A 64-bit FNV-1a hash of `lines`, each ended by a newline: short, stable names for
/// containers from what identifies them.
pub fn hash_lines(lines: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for line in lines {
        for byte in line.bytes().chain([b'\n']) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// What every container the plugin makes is called first: the reconciler touches no other.
pub const CONTAINER_PREFIX: &str = "pod-";

/// Whether `name` is one [`container_name`] makes.
pub fn is_plugin_container(name: &str) -> bool {
    name.strip_prefix(CONTAINER_PREFIX)
        .is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "GPU-8c1f2a3b-4d5e-6f70-8192-a3b4c5d6e7f8";

    #[test]
    fn ids_name_their_card_and_read_back() {
        for (resource, number) in [(Resource::Core, 99), (Resource::Memory, 140)] {
            let id = DeviceId {
                uuid: UUID.into(),
                resource,
                number,
            };
            let text = id.to_string();
            assert!(text.len() <= MAX_ID_LEN, "{text}");
            assert_eq!(DeviceId::parse(&text), Ok(id));
        }
        assert_eq!(
            DeviceId::parse(&format!("{UUID}-core-7")).unwrap().resource,
            Resource::Core
        );
        for bad in [
            "",
            "core-1",
            "-core-1",
            "GPU-x-core-",
            "GPU-x-disk-1",
            "GPU-x-core-+1",
        ] {
            assert!(DeviceId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn container_names_depend_on_the_set_of_ids_only() {
        let a = vec![format!("{UUID}-core-1"), format!("{UUID}-core-2")];
        let b = vec![format!("{UUID}-core-2"), format!("{UUID}-core-1")];
        let c = vec![format!("{UUID}-core-1"), format!("{UUID}-core-3")];
        assert_eq!(container_name(&a), container_name(&b));
        assert_ne!(container_name(&a), container_name(&c));
        let name = container_name(&a);
        assert!(is_plugin_container(&name), "{name}");
        assert!(tessera_region::is_valid_name(&name));
        assert!(!is_plugin_container("job"));
    }
}
