//! The simulated devices of a node, from `SIMGPU_DEVICES`: a comma-separated list of presets
//! (`T4`, `A100-40GB`, `A100-80GB`, `H100-80GB`, `H200`) or `name:memory:sms[:major.minor]`.

use crate::units::{parse_size, SizeError};
use thiserror::Error;

/// The most devices one simulated node has.
pub const MAX_DEVICES: usize = 16;
/// The longest device name, in bytes (NVML's buffer size, less the terminating NUL).
pub const MAX_NAME_LEN: usize = 63;

/// One simulated GPU model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The marketing name, as `cuDeviceGetName` reports it.
    pub name: String,
    /// Device memory in bytes.
    pub memory: u64,
    /// Streaming multiprocessors.
    pub sms: u32,
    /// Compute capability (major, minor).
    pub compute_capability: (u32, u32),
}

/// The device a node has when `SIMGPU_DEVICES` is unset: the model whose figures were
/// measured (`crate::profile`).
pub const DEFAULT_DEVICES: &str = "H200";

/// Why a `SIMGPU_DEVICES` value was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DeviceSpecError {
    /// The list has no device.
    #[error("SIMGPU_DEVICES is empty; name at least one device, like A100-80GB")]
    Empty,
    /// An entry is neither a preset nor `name:memory:sms[:cc]`.
    #[error("SIMGPU_DEVICES entry `{0}` is neither a preset (T4, A100-40GB, A100-80GB, H100-80GB, H200) nor name:memory:sms[:major.minor]")]
    Unknown(String),
    /// The memory of an entry is not a size.
    #[error("SIMGPU_DEVICES entry `{entry}`: {source}")]
    Memory {
        /// The entry.
        entry: String,
        /// What was wrong with its memory.
        source: SizeError,
    },
    /// A number in an entry is out of range.
    #[error("SIMGPU_DEVICES entry `{entry}`: {what}")]
    OutOfRange {
        /// The entry.
        entry: String,
        /// Which field and why.
        what: String,
    },
    /// More devices than a node holds.
    #[error("SIMGPU_DEVICES names {0} devices; a simulated node has at most {MAX_DEVICES}")]
    TooMany(usize),
}

fn preset(name: &str) -> Option<DeviceSpec> {
    let (full, gib, sms, cc) = match name.to_ascii_uppercase().as_str() {
        "T4" => ("Tesla T4", 16, 40, (7, 5)),
        "A100-40GB" => ("NVIDIA A100-SXM4-40GB", 40, 108, (8, 0)),
        "A100-80GB" => ("NVIDIA A100-SXM4-80GB", 80, 108, (8, 0)),
        "H100-80GB" => ("NVIDIA H100 80GB HBM3", 80, 132, (9, 0)),
        "H200" => ("NVIDIA H200", 141, 132, (9, 0)),
        _ => return None,
    };
    Some(DeviceSpec {
        name: full.to_string(),
        memory: gib << 30,
        sms,
        compute_capability: cc,
    })
}

fn custom(entry: &str) -> Result<DeviceSpec, DeviceSpecError> {
    let fields: Vec<&str> = entry.split(':').map(str::trim).collect();
    if !(3..=4).contains(&fields.len()) {
        return Err(DeviceSpecError::Unknown(entry.to_string()));
    }
    let out_of_range = |what: &str| DeviceSpecError::OutOfRange {
        entry: entry.to_string(),
        what: what.to_string(),
    };
    let name = fields[0];
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.is_ascii() {
        return Err(out_of_range("the name must be 1 to 63 ASCII characters"));
    }
    let memory = parse_size(fields[1]).map_err(|source| DeviceSpecError::Memory {
        entry: entry.to_string(),
        source,
    })?;
    if memory < (64 << 20) {
        return Err(out_of_range("memory must be at least 64MiB"));
    }
    let sms: u32 = fields[2]
        .parse()
        .ok()
        .filter(|n| (1..=1024).contains(n))
        .ok_or_else(|| out_of_range("sms must be a whole number from 1 to 1024"))?;
    let compute_capability = match fields.get(3) {
        None => (8, 0),
        Some(cc) => cc
            .split_once('.')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .filter(|&(a, b): &(u32, u32)| (1..=20).contains(&a) && b < 10)
            .ok_or_else(|| out_of_range("compute capability must look like 8.6"))?,
    };
    Ok(DeviceSpec {
        name: name.to_string(),
        memory,
        sms,
        compute_capability,
    })
}

/// Parses a `SIMGPU_DEVICES` value.
pub fn parse_devices(text: &str) -> Result<Vec<DeviceSpec>, DeviceSpecError> {
    let entries: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.is_empty() {
        return Err(DeviceSpecError::Empty);
    }
    if entries.len() > MAX_DEVICES {
        return Err(DeviceSpecError::TooMany(entries.len()));
    }
    entries
        .iter()
        .map(|e| match preset(e) {
            Some(spec) => Ok(spec),
            None if e.contains(':') => custom(e),
            None => Err(DeviceSpecError::Unknown(e.to_string())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets() {
        let d = parse_devices("T4, h200").unwrap();
        assert_eq!(d[0].memory, 16 << 30);
        assert_eq!(d[0].sms, 40);
        assert_eq!(d[1].memory, 141 << 30);
        assert_eq!(d[1].sms, 132);
        let h200 = &parse_devices(DEFAULT_DEVICES).unwrap()[0];
        assert_eq!((h200.memory, h200.sms), (141 << 30, 132));
    }

    #[test]
    fn custom_devices() {
        let d = parse_devices("Tiny:1GiB:4:7.0").unwrap();
        assert_eq!(d[0].name, "Tiny");
        assert_eq!(d[0].memory, 1 << 30);
        assert_eq!(d[0].compute_capability, (7, 0));
    }

    #[test]
    fn malformed() {
        assert_eq!(parse_devices(" , "), Err(DeviceSpecError::Empty));
        assert!(matches!(
            parse_devices("V100"),
            Err(DeviceSpecError::Unknown(_))
        ));
        assert!(matches!(
            parse_devices("x:lots:4"),
            Err(DeviceSpecError::Memory { .. })
        ));
        assert!(matches!(
            parse_devices("x:1GiB:0"),
            Err(DeviceSpecError::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_devices("x:1GiB:4:abc"),
            Err(DeviceSpecError::OutOfRange { .. })
        ));
        let many = vec!["T4"; 17].join(",");
        assert_eq!(parse_devices(&many), Err(DeviceSpecError::TooMany(17)));
    }
}
