//! A container's compute policy, priority and time slice: what the config, the control API
//! and the CLI write (`fixed:30`, `burst:50`, `best-effort`; `online`, `offline`; `100us`,
//! `driver`).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// A container's claim on a GPU's time.
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
    /// Not `driver` or a time slice.
    #[error("{0}, or driver for the driver's own")]
    Timeslice(tessera_region::units::TimesliceError),
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

/// Whether a container's work preempts others' on its GPUs.
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

/// The time slice a container's channel groups run with on its GPUs: between two contexts
/// that both have work the GPU switches once a slice, so a short one for offline work lets
/// online work onto the GPU within it (docs/compute-sharing.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeslice {
    /// The driver's own (about 2 ms).
    Driver,
    /// This many µs.
    Us(u32),
}

/// An offline container's time slice unless its spec says another: on an H200, online
/// latency beside a saturating offline process was as alone with it, and the offline
/// process kept 96 % of its throughput.
pub const OFFLINE_TIMESLICE_US: u32 = 100;

/// An online container's time slice unless its spec says another, while no other online
/// container shares a GPU with it: longer than a request, so that offline work's short
/// slices never cut one. Beside offline work in 100 µs slices, a context of the driver's
/// slice gives the engine up every 2 ms for an offline slice and two switches: a request of
/// five 1 ms kernels was cut twice, 5 % slower at its median than alone on simgpu's H200
/// profile (the H200 itself showed 1.05 ×); in 16 ms slices it is cut by nothing but the
/// offline slice it lands in (docs/compute-sharing.md).
pub const ONLINE_TIMESLICE_US: u32 = 16_000;

impl Timeslice {
    /// What a container of `priority` gets when its spec names none, where
    /// `online_beside` says whether another online container shares one of its GPUs:
    /// offline work short slices; online work a long one, or the driver's beside other
    /// online work (whose requests must not wait a long slice of its).
    pub fn of_priority(priority: Priority, online_beside: bool) -> Timeslice {
        match priority {
            Priority::Online if online_beside => Timeslice::Driver,
            Priority::Online => Timeslice::Us(ONLINE_TIMESLICE_US),
            Priority::Offline => Timeslice::Us(OFFLINE_TIMESLICE_US),
        }
    }

    /// The µs to ask of the library; `None` for the driver's.
    pub fn us(self) -> Option<u32> {
        match self {
            Timeslice::Driver => None,
            Timeslice::Us(us) => Some(us),
        }
    }
}

impl FromStr for Timeslice {
    type Err = PolicyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim() == "driver" {
            return Ok(Timeslice::Driver);
        }
        tessera_region::units::parse_timeslice_us(text)
            .map(Timeslice::Us)
            .map_err(PolicyError::Timeslice)
    }
}

impl fmt::Display for Timeslice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Timeslice::Driver => f.write_str("driver"),
            Timeslice::Us(us) => f.write_str(&tessera_region::units::format_timeslice_us(*us)),
        }
    }
}

/// All three travel as the strings people write, in the config and over the socket.
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
serde_as_text!(Timeslice);

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

    #[test]
    fn time_slices_read_back_and_default_by_priority() {
        for text in ["driver", "100us", "2ms", "1s"] {
            let t: Timeslice = text.parse().unwrap();
            assert_eq!(t.to_string(), text);
        }
        assert_eq!("250us".parse::<Timeslice>().unwrap().us(), Some(250));
        for bad in ["", "0us", "100", "drivers", "2s"] {
            let err = bad.parse::<Timeslice>().expect_err(bad).to_string();
            assert!(err.contains("driver"), "{err}");
        }
        assert_eq!(
            Timeslice::of_priority(Priority::Online, false).us(),
            Some(ONLINE_TIMESLICE_US)
        );
        assert_eq!(
            Timeslice::of_priority(Priority::Online, true),
            Timeslice::Driver
        );
        for beside in [false, true] {
            assert_eq!(
                Timeslice::of_priority(Priority::Offline, beside).us(),
                Some(OFFLINE_TIMESLICE_US)
            );
        }
    }
}
