//! The kube-scheduler extender protocol (`k8s.io/kube-scheduler/extender/v1`), declared from
//! its definition. The Go types carry no json tags, so every key is the Go field's own name:
//! `Pod`, `Nodes`, `NodeNames`, `FailedNodes`, `Host`, `Score`, … kube-scheduler POSTs one
//! of these bodies to `<urlPrefix>/<verb>` and decodes the answer.
//!
//! With `nodeCacheCapable: true` in the scheduler's configuration, nodes travel by name
//! (`NodeNames`) and preemption victims by UID (`NodeNameToMetaVictims`); without it, as
//! whole objects (`Nodes`, `NodeNameToVictims`). The extender answers in the form it was
//! asked in.

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The highest score an extender may give a node (`MaxExtenderPriority`); kube-scheduler
/// scales it to its own 0–100 and multiplies by the extender's weight.
pub const MAX_SCORE: i64 = 10;

/// What `filter` and `prioritize` receive (`ExtenderArgs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod")]
    pub pod: Pod,
    /// The candidate nodes as objects (a `NodeList`), when the extender is not node-cache
    /// capable. Kept as JSON so that the nodes passed back are exactly the ones received.
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<Value>,
    /// The candidate nodes by name, when it is.
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

/// Node name → why it fails (`FailedNodesMap`).
pub type FailedNodes = BTreeMap<String, String>;

/// What `filter` answers (`ExtenderFilterResult`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    /// The nodes that pass, as objects (when asked with `Nodes`).
    #[serde(rename = "Nodes")]
    pub nodes: Option<Value>,
    /// The nodes that pass, by name (when asked with `NodeNames`).
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
    /// The nodes that fail and why; preemption may help them.
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: FailedNodes,
    /// The nodes that fail where preemption cannot help.
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: FailedNodes,
    /// A failure of the whole call; empty when it worked.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// One node's score (`HostPriority`); `prioritize` answers a list of them
/// (`HostPriorityList`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// The node.
    #[serde(rename = "Host")]
    pub host: String,
    /// 0 to [`MAX_SCORE`].
    #[serde(rename = "Score")]
    pub score: i64,
}

/// What `bind` receives (`ExtenderBindingArgs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtenderBindingArgs {
    /// The pod's name.
    #[serde(rename = "PodName")]
    pub pod_name: String,
    /// Its namespace.
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    /// Its UID.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// The node chosen.
    #[serde(rename = "Node")]
    pub node: String,
}

/// What `bind` answers (`ExtenderBindingResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    /// Why binding failed; empty when it worked.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// What `preempt` receives (`ExtenderPreemptionArgs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExtenderPreemptionArgs {
    /// The pod that wants room.
    #[serde(rename = "Pod")]
    pub pod: Pod,
    /// The scheduler's proposed victims per node, as pods (not node-cache capable).
    #[serde(rename = "NodeNameToVictims", default)]
    pub node_name_to_victims: Option<BTreeMap<String, Victims>>,
    /// The same by UID (node-cache capable).
    #[serde(rename = "NodeNameToMetaVictims", default)]
    pub node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

/// Victims on one node, as pods (`Victims`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Victims {
    /// The pods to evict.
    #[serde(rename = "Pods", default)]
    pub pods: Vec<Pod>,
    /// How many PodDisruptionBudgets evicting them violates.
    #[serde(rename = "NumPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// A pod by UID (`MetaPod`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaPod {
    /// The pod's UID.
    #[serde(rename = "UID")]
    pub uid: String,
}

/// Victims on one node, by UID (`MetaVictims`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaVictims {
    /// The pods to evict.
    #[serde(rename = "Pods", default)]
    pub pods: Vec<MetaPod>,
    /// How many PodDisruptionBudgets evicting them violates.
    #[serde(rename = "NumPDBViolations", default)]
    pub num_pdb_violations: i64,
}

/// What `preempt` answers (`ExtenderPreemptionResult`): the nodes where preemption helps,
/// each with the victims that make enough room on one card.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtenderPreemptionResult {
    /// Node → victims by UID.
    #[serde(rename = "NodeNameToMetaVictims", default)]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

/// The names of the nodes in a `NodeList`, in order; items without a name are skipped.
pub fn node_list_names(list: &Value) -> Vec<String> {
    list.get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|node| node.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `list` with only the nodes `keep` accepts, every other field as it came.
pub fn retain_nodes(list: &Value, keep: impl Fn(&str) -> bool) -> Value {
    let mut out = list.clone();
    if let Some(items) = out.get_mut("items").and_then(Value::as_array_mut) {
        items.retain(|node| {
            node.pointer("/metadata/name")
                .and_then(Value::as_str)
                .is_some_and(&keep)
        });
    }
    out
}
