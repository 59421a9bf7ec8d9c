//! What a pod asks of Tessera beyond its resource requests: its annotations.
//!
//! - `tessera.dev/gpu`: the card the scheduler extender chose, by UUID (whole cards: their
//!   UUIDs, comma-separated).
//! - `tessera.dev/compute`: `fixed`, `burst` (the default) or `best-effort`; the share Q is the
//!   container's `tessera.dev/gpu-core` request.
//! - `tessera.dev/priority`: `online` (the default) or `offline`.
//! - `tessera.dev/memory-limit`: a cap below the `tessera.dev/gpu-memory` request (`3GiB`,
//!   `3Gi`, `512MiB`); changed on a running pod, it changes the cap in place.
//! - `tessera.dev/node-policy`, `tessera.dev/card-policy`: `binpack` or `spread`, how the
//!   scheduler extender places this pod among nodes and among a node's cards (read by the
//!   extender: [`crate::extender::policy`]).

use std::collections::BTreeMap;
use tessera_controld::policy::{ComputePolicy, Priority};
use tessera_region::units::parse_size;

/// The card the scheduler extender chose.
pub const GPU: &str = "tessera.dev/gpu";
/// The kind of compute share.
pub const COMPUTE: &str = "tessera.dev/compute";
/// Online or offline.
pub const PRIORITY: &str = "tessera.dev/priority";
/// A memory cap below the memory request.
pub const MEMORY_LIMIT: &str = "tessera.dev/memory-limit";
/// How the extender places the pod among nodes.
pub const NODE_POLICY: &str = "tessera.dev/node-policy";
/// How the extender places the pod among a node's cards.
pub const CARD_POLICY: &str = "tessera.dev/card-policy";

/// The kind of share a pod asks; its size comes from the core request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ComputeKind {
    /// Exactly Q %.
    Fixed,
    /// At least Q %, more when the card is idle.
    #[default]
    Burst,
    /// No guarantee.
    BestEffort,
}

impl ComputeKind {
    /// The policy for a core request of `cores` (1–99).
    pub fn policy(self, cores: u32) -> ComputePolicy {
        let q = cores.clamp(1, 100) as u8;
        match self {
            ComputeKind::Fixed => ComputePolicy::Fixed(q),
            ComputeKind::Burst => ComputePolicy::Burst(q),
            ComputeKind::BestEffort => ComputePolicy::BestEffort,
        }
    }
}

/// What a pod's annotations ask.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodAsk {
    /// The cards by UUID (one for a share, n for whole cards), when the extender chose.
    pub gpu: Option<Vec<String>>,
    /// The kind of compute share.
    pub compute: ComputeKind,
    /// Online or offline.
    pub priority: Priority,
    /// A memory cap in bytes, when the pod sets one.
    pub memory_limit: Option<u64>,
}

/// An annotation that cannot be read; the message names it and says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    /// A bad `tessera.dev/compute`.
    #[error("annotation {COMPUTE}={0:?} is not fixed, burst or best-effort")]
    Compute(String),
    /// A bad `tessera.dev/priority`.
    #[error("annotation {PRIORITY}={0:?} is not online or offline")]
    Priority(String),
    /// A bad `tessera.dev/memory-limit`.
    #[error("annotation {MEMORY_LIMIT}={0:?} is not a size like 4GiB, 4Gi or 512MiB")]
    MemoryLimit(String),
    /// A bad `tessera.dev/gpu`.
    #[error("annotation {GPU}={0:?} is not a GPU UUID like GPU-8c1f2a3b-… (or a comma-separated list of them)")]
    Gpu(String),
}

/// Reads a pod's annotations.
pub fn read(annotations: &BTreeMap<String, String>) -> Result<PodAsk, AnnotationError> {
    let mut ask = PodAsk::default();
    if let Some(gpu) = annotations.get(GPU) {
        ask.gpu = Some(cards(gpu).ok_or_else(|| AnnotationError::Gpu(gpu.clone()))?);
    }
    if let Some(compute) = annotations.get(COMPUTE) {
        ask.compute = match compute.trim() {
            "fixed" => ComputeKind::Fixed,
            "burst" => ComputeKind::Burst,
            "best-effort" => ComputeKind::BestEffort,
            _ => return Err(AnnotationError::Compute(compute.clone())),
        };
    }
    if let Some(priority) = annotations.get(PRIORITY) {
        ask.priority = priority
            .parse()
            .map_err(|_| AnnotationError::Priority(priority.clone()))?;
    }
    if let Some(limit) = annotations.get(MEMORY_LIMIT) {
        ask.memory_limit =
            Some(parse_memory(limit).ok_or_else(|| AnnotationError::MemoryLimit(limit.clone()))?);
    }
    Ok(ask)
}

/// The cards a `tessera.dev/gpu` record names: one UUID, or several joined by commas (whole
/// cards); `None` when there is no record or it does not read as UUIDs.
pub fn recorded_cards(annotations: &BTreeMap<String, String>) -> Option<Vec<String>> {
    cards(annotations.get(GPU)?)
}

/// The UUIDs of a `tessera.dev/gpu` value, when it reads as UUIDs.
fn cards(text: &str) -> Option<Vec<String>> {
    let cards: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    cards.iter().all(|c| is_uuid(c)).then_some(cards)
}

/// Whether `text` looks like a GPU UUID (`GPU-` and hex digits with dashes).
pub fn is_uuid(text: &str) -> bool {
    text.starts_with("GPU-")
        && text.len() > 4
        && text[4..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// A size as Tessera writes it (`4GiB`) or as Kubernetes does (`4Gi`); never zero.
fn parse_memory(text: &str) -> Option<u64> {
    let text = text.trim();
    let bytes = parse_size(text).ok().or_else(|| {
        ["Ki", "Mi", "Gi", "Ti"]
            .iter()
            .find(|unit| text.ends_with(*unit))
            .and_then(|_| parse_size(&format!("{text}B")).ok())
    })?;
    (bytes > 0).then_some(bytes)
}

/// Annotations from pairs, for tests of what reads them.
#[cfg(test)]
pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_read_as_documented() {
        assert_eq!(read(&map(&[])), Ok(PodAsk::default()));
        let ask = read(&map(&[
            (COMPUTE, "fixed"),
            (PRIORITY, "offline"),
            (MEMORY_LIMIT, "3Gi"),
            (GPU, "GPU-8c1f2a3b-4d5e"),
        ]))
        .unwrap();
        assert_eq!(ask.compute.policy(30), ComputePolicy::Fixed(30));
        assert_eq!(ask.priority, Priority::Offline);
        assert_eq!(ask.memory_limit, Some(3 << 30));
        assert_eq!(ask.gpu, Some(vec!["GPU-8c1f2a3b-4d5e".to_string()]));
        assert_eq!(
            read(&map(&[(MEMORY_LIMIT, "512MiB")]))
                .unwrap()
                .memory_limit,
            Some(512 << 20)
        );
    }

    #[test]
    fn bad_annotations_name_themselves() {
        for (key, value) in [
            (COMPUTE, "fixed:30"),
            (PRIORITY, "high"),
            (MEMORY_LIMIT, "lots"),
            (MEMORY_LIMIT, "0"),
            (GPU, "card-0"),
            (GPU, "GPU-ab,card-1"),
        ] {
            let err = read(&map(&[(key, value)])).expect_err(value).to_string();
            assert!(err.contains(key) && err.contains(value), "{err}");
        }
    }
}
