//! A container's compute policy and priority: what the config, the control API and the CLI
//! write (`fixed:30`, `burst:50`, `best-effort`; `online`, `offline`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A container's claim on a GPU's time (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputePolicy {
    /// Exactly this percentage of GPU time, never more.
    Fixed(u8),
    /// At least this percentage whenever it has work; idle time beyond it.
    Burst(u8),
    /// No guarantee; shares what the guarantees leave.
    #[default]
    BestEffort,
}

impl ComputePolicy {
    /// The percentage of a GPU it is guaranteed: what counts against the 100 per GPU.
    pub fn guarantee(self) -> u32 {
        match self {
            ComputePolicy::Fixed(q) | ComputePolicy::Burst(q) => u32::from(q),
            ComputePolicy::BestEffort => 0,
        }
    }
}

/// A compute policy or priority that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Not `fixed:Q`, `burst:Q` or `best-effort`.
    #[error("invalid compute policy {0:?}: write fixed:Q or burst:Q with Q a whole percentage from 1 to 100, or best-effort")]
    Compute(String),
    /// Not `online` or `offline`.
    #[error("invalid priority {0:?}: write online or offline")]
    Priority(String),
}

impl FromStr for ComputePolicy {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || PolicyError::Compute(text.to_string());
        let text = text.trim();
        if text == "best-effort" {
            return Ok(ComputePolicy::BestEffort);
        }
        let (kind, quota) = text.split_once(':').ok_or_else(bad)?;
        let quota = quota.trim().strip_suffix('%').unwrap_or(quota.trim());
        // Digits only: `+5` and `05` parse as numbers but are not how a share is written.
        if quota.is_empty() || !quota.bytes().all(|b| b.is_ascii_digit()) || quota.starts_with('0')
        {
            return Err(bad());
        }
        let quota: u8 = quota.parse().map_err(|_| bad())?;
        if !(1..=100).contains(&quota) {
            return Err(bad());
        }
        match kind.trim() {
            "fixed" => Ok(ComputePolicy::Fixed(quota)),
            "burst" => Ok(ComputePolicy::Burst(quota)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for ComputePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComputePolicy::Fixed(q) => write!(f, "fixed:{q}"),
            ComputePolicy::Burst(q) => write!(f, "burst:{q}"),
            ComputePolicy::BestEffort => f.write_str("best-effort"),
        }
    }
}

/// Whether a container's work preempts others' on its GPUs (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Latency-critical: while it has work, offline containers on its GPUs launch nothing new.
    #[default]
    Online,
    /// Yields to online work.
    Offline,
}

impl FromStr for Priority {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "online" => Ok(Priority::Online),
            "offline" => Ok(Priority::Offline),
            _ => Err(PolicyError::Priority(text.to_string())),
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Priority::Online => "online",
            Priority::Offline => "offline",
        })
    }
}

/// Both travel as the strings people write, in the config and over the socket.
macro_rules! serde_as_text {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
serde_as_text!(ComputePolicy);
serde_as_text!(Priority);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_read_back() {
        for text in [
            "fixed:30",
            "burst:50",
            "best-effort",
            "fixed:100",
            "burst:1",
        ] {
            let p: ComputePolicy = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
        }
        assert_eq!("burst:50%".parse(), Ok(ComputePolicy::Burst(50)));
        assert_eq!(ComputePolicy::Fixed(30).guarantee(), 30);
        assert_eq!(ComputePolicy::BestEffort.guarantee(), 0);
    }

    #[test]
    fn bad_policies_say_what_is_accepted() {
        for text in [
            "",
            "fixed",
            "fixed:",
            "fixed:0",
            "fixed:101",
            "fixed:-5",
            "fixed:+5",
            "fixed:05",
            "burst:1.5",
            "besteffort",
            "share:30",
            "fixed:300",
        ] {
            let err = text.parse::<ComputePolicy>().expect_err(text).to_string();
            assert!(err.contains("best-effort"), "{err}");
        }
        assert!("high".parse::<Priority>().is_err());
        assert_eq!("offline".parse(), Ok(Priority::Offline));
    }
}
