//! What the scheduler wrote into a ResourceClaim, as the driver needs it: for each device of
//! [`DRIVER`] allocated on this node, the card, the capacity consumed and the parameters.
//!
//! The opaque parameters (`status.allocation.devices.config`, from the DeviceClass and the
//! claim) are a JSON object: `{"policy": "fixed" | "burst" | "best-effort", "priority":
//! "online" | "offline"}`, both optional (burst and online by default, as the device plugin's
//! annotations; null is absent), with `apiVersion` and `kind` allowed and ignored. Later entries override
//! earlier ones field by field: the claim's override the class's, as the API orders them.
//! What is wrong with them is said by the field's name.

use super::{device_name, CORES, DRIVER, MEMORY};
use crate::annotations::ComputeKind;
use crate::cards::Card;
use crate::ids::CORES_PER_GPU;
use k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceRequestAllocationResult, ResourceClaim,
};
use tessera_controld::policy::Priority;
use tessera_region::units::format_size;

/// One device of a claim, as the driver prepares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    /// The claim's request it serves (`main` or `main/sub`).
    pub request: String,
    /// The device's name in the ResourceSlice.
    pub device: String,
    /// The card it is.
    pub card: Card,
    /// Percent of the card's time.
    pub cores: u32,
    /// The memory cap, in bytes.
    pub memory: u64,
    /// The kind of compute share.
    pub compute: ComputeKind,
    /// Online or offline.
    pub priority: Priority,
}

/// What an opaque configuration must look like, for error messages.
const PARAMETERS_FORM: &str =
    r#"{"policy": "fixed"|"burst"|"best-effort", "priority": "online"|"offline"}"#;

/// The devices of `claim` to prepare on this node (whose pool is `pool` and cards `cards`),
/// or why it cannot be prepared: what is wrong and what to do, for the pod's events.
pub fn read(
    claim: &ResourceClaim,
    uid: &str,
    pool: &str,
    cards: &[Card],
) -> Result<Vec<Allocated>, String> {
    let who = format!(
        "ResourceClaim {}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    let stored_uid = claim.metadata.uid.as_deref().unwrap_or_default();
    if stored_uid != uid {
        return Err(format!(
            "{who} has UID {stored_uid}, not {uid} as the kubelet asked: the claim was deleted and made again; delete the pod so that it uses the new one"
        ));
    }
    let Some(devices) = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
    else {
        return Err(format!(
            "{who} is not allocated; the scheduler allocates a claim before its pod reaches a node, so check that kube-scheduler runs with DRA"
        ));
    };
    let configs = devices.config.as_deref().unwrap_or_default();
    let mut prepared = Vec::new();
    let ours = devices
        .results
        .iter()
        .flatten()
        .filter(|r| r.driver == DRIVER);
    for result in ours {
        let (compute, priority) = settings(configs, &result.request)
            .map_err(|e| format!("{who}: the opaque parameters of {DRIVER}: {e}"))?;
        prepared.push(device(&who, result, pool, cards, compute, priority)?);
    }
    Ok(prepared)
}

/// One allocation result of the driver, checked against this node's cards.
fn device(
    who: &str,
    result: &DeviceRequestAllocationResult,
    pool: &str,
    cards: &[Card],
    compute: ComputeKind,
    priority: Priority,
) -> Result<Allocated, String> {
    if result.pool != pool {
        return Err(format!(
            "{who}: device {} of request {} is in pool {}, but this node's pool is {pool}: the claim is allocated on another node; delete the pod so that it is scheduled where its claim is",
            result.device, result.request, result.pool
        ));
    }
    let Some(card) = cards.iter().find(|c| device_name(c) == result.device) else {
        let names: Vec<String> = cards.iter().map(device_name).collect();
        return Err(format!(
            "{who}: device {} of request {} is not a card of this node (it has {}); the ResourceSlice was stale, delete the pod so that the claim is allocated again",
            result.device,
            result.request,
            names.join(", ")
        ));
    };
    let consumed = |name: &str| -> Result<Option<u64>, String> {
        let Some(q) = result.consumed_capacity.as_ref().and_then(|c| c.get(name)) else {
            return Ok(None);
        };
        quantity(&q.0).map(Some).ok_or_else(|| {
            format!(
                "{who}: request {} consumes {name} {:?}, which is not a whole number",
                result.request, q.0
            )
        })
    };
    // No consumed capacity is the whole card: what the ResourceSlice's defaults are.
    let cores = consumed(CORES)?.unwrap_or(u64::from(CORES_PER_GPU));
    if !(1..=u64::from(CORES_PER_GPU)).contains(&cores) {
        return Err(format!(
            "{who}: request {} asks {cores} {CORES} of {}, but a card has {CORES_PER_GPU} (percent of its time); ask 1 to {CORES_PER_GPU}",
            result.request, result.device
        ));
    }
    let memory = consumed(MEMORY)?.unwrap_or(card.memory);
    if memory == 0 || memory > card.memory {
        return Err(format!(
            "{who}: request {} asks {} of {MEMORY} on {}, but the card ({}) has {}; ask at most that",
            result.request,
            format_size(memory),
            result.device,
            card.uuid,
            format_size(card.memory)
        ));
    }
    Ok(Allocated {
        request: result.request.clone(),
        device: result.device.clone(),
        card: card.clone(),
        cores: cores as u32,
        memory,
        compute,
        priority,
    })
}

/// The policy and priority the configurations give `request`.
fn settings(
    configs: &[DeviceAllocationConfiguration],
    request: &str,
) -> Result<(ComputeKind, Priority), String> {
    // A subrequest (`main/sub`) takes the configuration of its request.
    let parent = request.split('/').next().unwrap_or(request);
    let mut compute = ComputeKind::default();
    let mut priority = Priority::default();
    for config in configs {
        let Some(opaque) = config.opaque.as_ref().filter(|o| o.driver == DRIVER) else {
            continue;
        };
        let applies = match config.requests.as_deref() {
            None | Some([]) => true,
            Some(names) => names.iter().any(|n| n == request || n == parent),
        };
        if !applies {
            continue;
        }
        let Some(fields) = opaque.parameters.0.as_object() else {
            return Err(format!(
                "the parameters are {}, not an object; write {PARAMETERS_FORM}",
                opaque.parameters.0
            ));
        };
        for (field, value) in fields {
            match field.as_str() {
                // Null is not set, as an absent field.
                _ if value.is_null() => {}
                // Allowed so that parameters can be written as a typed object; not read.
                "apiVersion" | "kind" => {}
                "policy" => {
                    compute = match value.as_str() {
                        Some("fixed") => ComputeKind::Fixed,
                        Some("burst") => ComputeKind::Burst,
                        Some("best-effort") => ComputeKind::BestEffort,
                        _ => {
                            return Err(format!(
                                "policy {value} is not fixed, burst or best-effort"
                            ))
                        }
                    }
                }
                "priority" => {
                    priority = value
                        .as_str()
                        .and_then(|text| text.parse().ok())
                        .ok_or_else(|| format!("priority {value} is not online or offline"))?
                }
                _ => return Err(format!("unknown field `{field}`; write {PARAMETERS_FORM}")),
            }
        }
    }
    Ok((compute, priority))
}

/// A Kubernetes quantity that is a whole number (`30`, `4Gi`, `512Mi`, `1e3`, `2k`), or
/// `None`: binary suffixes are powers of 1024, decimal ones of 1000, `m` is a thousandth.
pub fn quantity(text: &str) -> Option<u64> {
    let text = text.trim();
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    let mut value: u128 = digits.parse().ok()?;
    // value · 10^exponent, exactly.
    let mut exponent = -i32::try_from(fraction.len()).ok()?;
    match suffix {
        "" => {}
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                .iter()
                .position(|s| *s == suffix)? as u32
                + 1;
            value = value.checked_mul(1u128 << (10 * power))?;
        }
        "m" => exponent -= 3,
        "k" => exponent += 3,
        "M" => exponent += 6,
        "G" => exponent += 9,
        "T" => exponent += 12,
        "P" => exponent += 15,
        "E" => exponent += 18,
        _ => {
            let power = suffix.strip_prefix(['e', 'E'])?;
            exponent += power.parse::<i32>().ok()?;
        }
    }
    if exponent >= 0 {
        value = value.checked_mul(10u128.checked_pow(exponent as u32)?)?;
    } else {
        let divisor = 10u128.checked_pow(exponent.unsigned_abs())?;
        if !value.is_multiple_of(divisor) {
            return None;
        }
        value /= divisor;
    }
    u64::try_from(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    fn claim(results: serde_json::Value, config: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"namespace": "ml", "name": "c", "uid": "u1"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": results, "config": config}}},
        }))
        .unwrap()
    }

    fn result(device: &str, cores: &str, memory: &str) -> serde_json::Value {
        json!({"request": "gpu", "driver": DRIVER, "pool": "n", "device": device,
               "consumedCapacity": {"cores": cores, "memory": memory}})
    }

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        for (text, value) in [
            ("30", Some(30)),
            ("4Gi", Some(4 << 30)),
            ("512Mi", Some(512 << 20)),
            ("2k", Some(2000)),
            ("1e3", Some(1000)),
            ("1.5Gi", Some(3 << 29)),
            ("3000m", Some(3)),
            ("1500m", None),
            ("0.5", None),
            ("-1", None),
            ("", None),
            ("4GiB", None),
        ] {
            assert_eq!(quantity(text), value, "{text}");
        }
    }

    #[test]
    fn a_share_reads_with_its_parameters() {
        let config = json!([
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "gpu.tessera.dev/v1", "kind": "Parameters", "policy": "fixed", "priority": null}}},
            {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"priority": "offline"}}},
            {"source": "FromClaim", "requests": ["other"], "opaque": {"driver": DRIVER, "parameters": {"policy": "burst"}}},
            {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {"whatever": 1}}},
        ]);
        let claim = claim(json!([result("gpu-1", "30", "4Gi")]), config);
        let devices = read(&claim, "u1", "n", &cards()).unwrap();
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!((d.card.index, d.cores, d.memory), (1, 30, 4 << 30));
        assert_eq!(
            (d.compute, d.priority),
            (ComputeKind::Fixed, Priority::Offline)
        );
    }

    #[test]
    fn claims_that_cannot_be_prepared_say_why() {
        let cases = [
            (
                json!([result("gpu-1", "150", "4Gi")]),
                json!([]),
                "asks 150 cores",
            ),
            (
                json!([result("gpu-1", "30", "17Gi")]),
                json!([]),
                "asks 17GiB of memory",
            ),
            (
                json!([result("gpu-7", "30", "4Gi")]),
                json!([]),
                "not a card of this node",
            ),
            (
                json!([result("gpu-0", "1.5", "4Gi")]),
                json!([]),
                "not a whole number",
            ),
            (
                json!([{"request": "gpu", "driver": DRIVER, "pool": "other", "device": "gpu-0"}]),
                json!([]),
                "allocated on another node",
            ),
            (
                json!([result("gpu-0", "30", "4Gi")]),
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"policy": "turbo"}}}]),
                "\"turbo\" is not fixed",
            ),
            (
                json!([result("gpu-0", "30", "4Gi")]),
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"cores": 5}}}]),
                "unknown field `cores`",
            ),
            (
                json!([result("gpu-0", "30", "4Gi")]),
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"priority": "urgent"}}}]),
                "priority \"urgent\" is not online or offline",
            ),
            (
                json!([result("gpu-0", "30", "4Gi")]),
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"policy": 5}}}]),
                "policy 5 is not fixed",
            ),
            (
                json!([result("gpu-0", "30", "4Gi")]),
                json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": "fixed"}}]),
                "the parameters are \"fixed\", not an object",
            ),
        ];
        for (results, config, wanted) in cases {
            let err = read(&claim(results, config), "u1", "n", &cards()).unwrap_err();
            assert!(err.contains(wanted), "{err} lacks {wanted}");
        }
        let err = read(&claim(json!([]), json!([])), "u2", "n", &cards()).unwrap_err();
        assert!(err.contains("made again"), "{err}");
        // No consumed capacity: the whole card.
        let whole = json!([{"request": "gpu", "driver": DRIVER, "pool": "n", "device": "gpu-0"}]);
        let devices = read(&claim(whole, json!([])), "u1", "n", &cards()).unwrap();
        assert_eq!((devices[0].cores, devices[0].memory), (100, 16 << 30));
    }
}
