//! The node's ResourceSlice: one device per card, named [`device_name`], with its UUID,
//! model, index and memory as attributes, and two consumable capacities that many claims
//! share (`allowMultipleAllocations`): [`CORES`] (100, in steps of 1) and [`MEMORY`] (the
//! card's bytes, in steps of [`MEMORY_STEP`]). A claim that asks neither gets the whole card.

use super::{device_name, Config, Driver, CORES, DRIVER, MEMORY, MEMORY_STEP};
use crate::cards::Card;
use crate::ids::CORES_PER_GPU;
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceAttribute, DeviceCapacity,
    ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The field manager of the driver's applies.
pub const FIELD_MANAGER: &str = "tessera-dra-driver";
/// How long to wait after a failed apply.
const RETRY: Duration = Duration::from_secs(2);

/// The slice's name: one per node and driver.
pub fn slice_name(node: &str) -> String {
    format!("{node}-{DRIVER}")
}

/// The node's slice: every card, in one pool named after the node.
pub fn resource_slice(config: &Config, cards: &[Card]) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name(&config.node_name)),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: DRIVER.into(),
            node_name: Some(config.node_name.clone()),
            pool: ResourcePool {
                name: config.pool().into(),
                // The cards are read once at start: the pool never changes while the driver
                // runs, and a restart publishes the same slice again.
                generation: 1,
                resource_slice_count: 1,
            },
            devices: Some(cards.iter().map(device).collect()),
            ..Default::default()
        },
    }
}

fn device(card: &Card) -> Device {
    let string = |s: &str| DeviceAttribute {
        string: Some(s.into()),
        ..Default::default()
    };
    let int = |i: i64| DeviceAttribute {
        int: Some(i),
        ..Default::default()
    };
    let attributes = BTreeMap::from([
        ("uuid".to_string(), string(&card.uuid)),
        ("productName".to_string(), string(&card.model)),
        ("index".to_string(), int(i64::from(card.index))),
        (
            "memory".to_string(),
            int(i64::try_from(card.memory).unwrap_or(i64::MAX)),
        ),
    ]);
    let capacity = |value: u64, step: u64| DeviceCapacity {
        value: Quantity(value.to_string()),
        request_policy: Some(CapacityRequestPolicy {
            // A claim that asks nothing of this capacity takes all of it: a whole card.
            default: Some(Quantity(value.to_string())),
            valid_range: Some(CapacityRequestPolicyRange {
                min: Quantity(step.to_string()),
                max: Some(Quantity(value.to_string())),
                step: Some(Quantity(step.to_string())),
            }),
            valid_values: None,
        }),
    };
    Device {
        name: device_name(card),
        attributes: Some(attributes),
        capacity: Some(BTreeMap::from([
            (CORES.to_string(), capacity(u64::from(CORES_PER_GPU), 1)),
            // Whole steps: a value off the step could not be asked whole.
            (
                MEMORY.to_string(),
                capacity(card.memory / MEMORY_STEP * MEMORY_STEP, MEMORY_STEP),
            ),
        ])),
        allow_multiple_allocations: Some(true),
        ..Default::default()
    }
}

/// Applies the slice, again each interval (the kubelet deletes a driver's slices when it
/// goes, and an apply that is the same changes nothing), until the process ends.
pub async fn run(driver: Arc<Driver>) {
    let api: Api<ResourceSlice> = Api::all(driver.kube.clone());
    let slice = resource_slice(&driver.config, &driver.cards);
    let name = slice_name(&driver.config.node_name);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut published = false;
    loop {
        let wait = match api.patch(&name, &params, &Patch::Apply(&slice)).await {
            Ok(_) => {
                if !published {
                    tracing::info!(
                        "published ResourceSlice {name}: {} devices of {DRIVER}",
                        driver.cards.len()
                    );
                    published = true;
                }
                driver.config.publish_interval
            }
            Err(e) => {
                tracing::warn!(
                    "cannot publish ResourceSlice {name}: {e}; check that the API server serves resource.k8s.io/v1 (Kubernetes 1.34 or later) and that the driver's role may patch resourceslices"
                );
                published = false;
                RETRY
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::HostPaths;

    #[test]
    fn the_slice_offers_each_card_with_consumable_capacity() {
        let config = Config {
            registry_dir: "/r".into(),
            plugin_dir: "/p".into(),
            node_name: "node-a".into(),
            publish_interval: Duration::from_secs(1),
            host: HostPaths {
                state_dir: "/s".into(),
                library: "/l".into(),
                dev_dir: "/d".into(),
                cdi_dir: Some("/c".into()),
            },
        };
        let cards = [Card {
            index: 1,
            uuid: "GPU-1".into(),
            model: "A100".into(),
            memory: 40 << 30,
            sms: None,
        }];
        let json = serde_json::to_value(resource_slice(&config, &cards)).unwrap();
        assert_eq!(json["apiVersion"], "resource.k8s.io/v1");
        assert_eq!(json["kind"], "ResourceSlice");
        let spec = &json["spec"];
        assert_eq!(spec["driver"], DRIVER);
        assert_eq!(spec["nodeName"], "node-a");
        assert_eq!(spec["pool"]["name"], "node-a");
        let device = &spec["devices"][0];
        assert_eq!(device["name"], "gpu-1");
        assert_eq!(device["allowMultipleAllocations"], true);
        assert_eq!(device["attributes"]["uuid"]["string"], "GPU-1");
        assert_eq!(device["attributes"]["index"]["int"], 1);
        let cores = &device["capacity"]["cores"];
        assert_eq!(cores["value"], "100");
        assert_eq!(cores["requestPolicy"]["validRange"]["min"], "1");
        assert_eq!(cores["requestPolicy"]["validRange"]["step"], "1");
        let memory = &device["capacity"]["memory"];
        assert_eq!(memory["value"], (40u64 << 30).to_string());
        assert_eq!(memory["requestPolicy"]["validRange"]["step"], "1048576");
    }
}
