//! What a container is: its name, GPUs, memory cap, compute policy, priority and time slice
//! — as the config declares it, the control API carries it and the daemon keeps it.

use crate::policy::{ComputePolicy, Priority, Timeslice};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use tessera_region::units::{format_size, parse_size};
use tessera_region::MAX_DEVICES;

/// One container's declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    /// `[a-z0-9][a-z0-9-]{0,62}`: a file name, never a path.
    pub name: ContainerName,
    /// The GPUs (node indices) it may use; on every other GPU its cap is 0 bytes.
    pub gpus: Gpus,
    /// Its memory cap on each of its GPUs; absent is unlimited.
    #[serde(default)]
    pub memory: Option<MemorySize>,
    /// Its claim on GPU time.
    #[serde(default)]
    pub compute: ComputePolicy,
    /// Whether its work preempts offline work.
    #[serde(default)]
    pub priority: Priority,
    /// Its channel groups' time slice on its GPUs; absent is its priority's
    /// ([`Timeslice::of_priority`]), which depends on its neighbours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeslice: Option<Timeslice>,
}

impl ContainerSpec {
    /// The time slice its channel groups run with: its own, or its priority's, where
    /// `online_beside` says whether another online container shares one of its GPUs.
    pub fn timeslice(&self, online_beside: bool) -> Timeslice {
        self.timeslice
            .unwrap_or_else(|| Timeslice::of_priority(self.priority, online_beside))
    }

    /// Whether it shares one of its GPUs with `other`.
    pub fn shares_a_gpu_with(&self, other: &ContainerSpec) -> bool {
        self.gpus
            .as_slice()
            .iter()
            .any(|g| other.gpus.as_slice().contains(g))
    }

    /// The cap of every device slot of its region: its cap on its GPUs, 0 elsewhere.
    pub fn memory_caps(&self) -> [Option<u64>; MAX_DEVICES] {
        let mut caps = [Some(0); MAX_DEVICES];
        for &gpu in self.gpus.as_slice() {
            caps[gpu as usize] = self.memory.map(|m| m.0);
        }
        caps
    }
}

/// A valid container name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerName(String);

/// A name that is not `[a-z0-9][a-z0-9-]{0,62}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid container name {0:?}: use 1 to 63 characters of a-z, 0-9 and '-', starting with a letter or digit")]
pub struct BadName(pub String);

impl ContainerName {
    /// Checks `name`.
    pub fn new(name: &str) -> Result<ContainerName, BadName> {
        if tessera_region::is_valid_name(name) {
            Ok(ContainerName(name.to_string()))
        } else {
            Err(BadName(name.to_string()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContainerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ContainerName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ContainerName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        ContainerName::new(&name).map_err(serde::de::Error::custom)
    }
}

/// A non-empty set of GPU indices below [`MAX_DEVICES`], sorted, without repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpus(Vec<u32>);

/// A GPU list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid GPU list {0}: give one or more GPU indices from 0 to {max}, each once, like [0] or [0, 1]", max = MAX_DEVICES - 1)]
pub struct BadGpus(pub String);

impl Gpus {
    /// Checks a list of GPU indices.
    pub fn new(mut gpus: Vec<u32>) -> Result<Gpus, BadGpus> {
        let shown = format!("{gpus:?}");
        let len = gpus.len();
        gpus.sort_unstable();
        gpus.dedup();
        if gpus.is_empty() || gpus.len() != len || gpus.iter().any(|&g| g as usize >= MAX_DEVICES) {
            return Err(BadGpus(shown));
        }
        Ok(Gpus(gpus))
    }

    /// Reads `0` or `0,1`.
    pub fn parse(text: &str) -> Result<Gpus, BadGpus> {
        let bad = || BadGpus(format!("{text:?}"));
        let list = text
            .split(',')
            .map(|g| g.trim().parse::<u32>().map_err(|_| bad()))
            .collect::<Result<Vec<_>, _>>()?;
        Gpus::new(list).map_err(|_| bad())
    }

    /// The indices, ascending.
    pub fn as_slice(&self) -> &[u32] {
        &self.0
    }
}

impl fmt::Display for Gpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self.0.iter().map(u32::to_string).collect();
        f.write_str(&list.join(","))
    }
}

impl Serialize for Gpus {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Gpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Gpus::new(Vec::<u32>::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// A memory size in bytes; written `4GiB`, `512MiB` or as a number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySize(pub u64);

impl fmt::Display for MemorySize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

impl Serialize for MemorySize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for MemorySize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = MemorySize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size like \"4GiB\" or a number of bytes")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<MemorySize, E> {
                Ok(MemorySize(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<MemorySize, E> {
                u64::try_from(v)
                    .map(MemorySize)
                    .map_err(|_| E::custom(format!("invalid size {v}: a size is not negative")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MemorySize, E> {
                parse_size(v).map(MemorySize).map_err(E::custom)
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_travel_as_json() {
        let json = r#"{"name":"a-1","gpus":[1,0],"memory":"2GiB","compute":"burst:40","priority":"offline"}"#;
        let spec: ContainerSpec = serde_json::from_str(json).unwrap();
        assert_eq!(spec.gpus.as_slice(), &[0, 1]);
        assert_eq!(spec.memory, Some(MemorySize(2 << 30)));
        let back: ContainerSpec =
            serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
        let caps = spec.memory_caps();
        assert_eq!(caps[0], Some(2 << 30));
        assert_eq!(caps[2], Some(0));
    }

    #[test]
    fn bad_specs_are_refused() {
        for json in [
            r#"{"name":"a/b","gpus":[0]}"#,
            r#"{"name":"a","gpus":[]}"#,
            r#"{"name":"a","gpus":[0,0]}"#,
            r#"{"name":"a","gpus":[16]}"#,
            r#"{"name":"a","gpus":[0],"memory":"2GB"}"#,
            r#"{"name":"a","gpus":[0],"memory":-1}"#,
            r#"{"name":"a","gpus":[0],"compute":"fixed:0"}"#,
            r#"{"name":"a","gpus":[0],"colour":"red"}"#,
        ] {
            assert!(
                serde_json::from_str::<ContainerSpec>(json).is_err(),
                "{json}"
            );
        }
        assert_eq!(Gpus::parse("1, 0").unwrap().as_slice(), &[0, 1]);
        assert!(Gpus::parse("x").is_err());
    }
}
