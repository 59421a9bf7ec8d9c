//! The cluster-scoped `GPU` custom resource (`tessera.dev/v1alpha1`): one object per physical
//! card, kept by the node's plugin ([`crate::plugin::publish`]). `kubectl get gpus` shows, per card, its
//! node, model, core allocated, memory allocated/total and the number of pods on it.

pub mod printer;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A card: what it is (spec) and who holds what of it (status).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "tessera.dev",
    version = "v1alpha1",
    kind = "GPU",
    plural = "gpus",
    singular = "gpu",
    status = "GPUStatus",
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.node"}"#,
    printcolumn = r#"{"name":"Model","type":"string","jsonPath":".spec.model"}"#,
    printcolumn = r#"{"name":"Core","type":"integer","description":"tessera.dev/gpu-core allocated, of 100","jsonPath":".status.allocated.core"}"#,
    printcolumn = r#"{"name":"Memory","type":"string","description":"memory allocated/total","jsonPath":".status.memory"}"#,
    printcolumn = r#"{"name":"Pods","type":"integer","jsonPath":".status.pods"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct GPUSpec {
    /// The node the card is in.
    pub node: String,
    /// Its NVML index on that node.
    pub index: u32,
    /// Its `GPU-…` UUID.
    pub uuid: String,
    /// Its marketing name.
    pub model: String,
    /// Its memory, in bytes.
    pub memory: u64,
    /// Its streaming multiprocessors, when the node's NVML tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms: Option<u32>,
}

/// Who holds what of the card.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GPUStatus {
    /// Whether the card passes its health check.
    pub healthy: bool,
    /// What the card offers.
    pub allocatable: Amounts,
    /// What its holders have.
    pub allocated: Amounts,
    /// `allocated/total` memory, for people (`8GiB/40GiB`).
    pub memory: String,
    /// How many pods hold part of it.
    pub pods: u32,
    /// Each container holding part of it.
    #[serde(default)]
    pub holders: Vec<GPUHolder>,
}

/// Core and memory.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Amounts {
    /// `tessera.dev/gpu-core`: percent of the card's time.
    pub core: u32,
    /// Memory, in bytes.
    pub memory: u64,
}

/// One container holding part of a card.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GPUHolder {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod.
    pub pod: String,
    /// The container in the pod.
    pub container: String,
    /// Its core: percent of the card.
    pub core: u32,
    /// Its memory cap, in bytes.
    pub memory: u64,
    /// Its compute policy (`fixed:30`, `burst:30`, `best-effort`, `whole`).
    pub policy: String,
    /// `online` or `offline`.
    pub priority: String,
    /// The memory its processes hold now, in bytes (controld's count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used: Option<u64>,
    /// The share of the card's time it got over the last period, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_measured: Option<f64>,
}

/// The object name of a card: its UUID in lower case (`gpu-8c1f…`), a valid name.
pub fn object_name(uuid: &str) -> String {
    uuid.to_ascii_lowercase()
}

/// The formats the schema generator writes for unsigned Rust types. API servers do not know
/// them (1.34 and later warn about each when the CRD is applied), and every value they keep
/// is a signed 64-bit integer anyway: these fields are plain integers, their `minimum: 0`
/// saying what the unsigned type did. Every unsigned field here fits an `int64`.
const UNSIGNED_FORMATS: [&str; 4] = ["uint8", "uint16", "uint32", "uint64"];

/// The CRD, with only formats API servers know.
pub fn crd(
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    fn known_formats(schema: &mut serde_json::Value) {
        match schema {
            serde_json::Value::Object(map) => {
                let unsigned = map
                    .get("format")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|f| UNSIGNED_FORMATS.contains(&f));
                if unsigned {
                    map.remove("format");
                }
                map.values_mut().for_each(known_formats);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(known_formats),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(GPU::crd()).expect("a CRD serializes");
    known_formats(&mut value);
    serde_json::from_value(value).expect("the same CRD without the unsigned formats")
}

/// The CRD as YAML, as `deploy/crd.yaml` holds it.
pub fn crd_yaml() -> String {
    let crd = crd();
    let mut text =
        String::from("# Generated by `tessera-k8s crd` from the Rust type; a test checks it.\n");
    text.push_str(&serde_yaml::to_string(&crd).expect("a CRD serializes"));
    text
}
