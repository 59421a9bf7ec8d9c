//! Keeps this node's `GPU` objects with server-side apply: the spec of each card once (and
//! again after a failure), its status at every change of holders and every interval (live
//! memory and measured shares come from controld). Objects of this node for cards it no
//! longer has are deleted.

use super::Node;
use crate::gpu::{object_name, Amounts, GPUHolder, GPUSpec, GPUStatus, GPU};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tessera_controld::status::NodeStatus;
use tessera_region::units::format_size;

/// The field manager of the plugin's applies.
pub const FIELD_MANAGER: &str = "tessera-device-plugin";
/// How long to wait after a failed apply.
const RETRY: Duration = Duration::from_secs(2);

/// Publishes until the process ends.
pub async fn run(node: Arc<Node>) {
    let api: Api<GPU> = Api::all(node.kube.clone());
    let mut specs_done = false;
    let mut last: HashMap<String, GPUStatus> = HashMap::new();
    loop {
        if !specs_done {
            match publish_specs(&node, &api).await {
                Ok(()) => specs_done = true,
                Err(e) => tracing::warn!("cannot publish the GPU objects: {e}"),
            }
        }
        if specs_done {
            if let Err(e) = publish_statuses(&node, &api, &mut last).await {
                tracing::warn!("cannot update the GPU objects' status: {e}");
                specs_done = false;
                last.clear();
            }
        }
        let wait = if specs_done {
            node.config.publish_interval
        } else {
            RETRY
        };
        tokio::select! {
            _ = node.changed.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Applies each card's spec and deletes this node's objects of cards it no longer has.
async fn publish_specs(node: &Node, api: &Api<GPU>) -> Result<(), kube::Error> {
    for card in &node.cards.list {
        let gpu = GPU::new(
            &object_name(&card.uuid),
            GPUSpec {
                node: node.config.node_name.clone(),
                index: card.index,
                uuid: card.uuid.clone(),
                model: card.model.clone(),
                memory: card.memory,
                sms: card.sms,
            },
        );
        api.patch(&object_name(&card.uuid), &params(), &Patch::Apply(&gpu))
            .await?;
    }
    for gpu in api.list(&ListParams::default()).await? {
        let ours = gpu.spec.node == node.config.node_name;
        if ours && node.cards.by_uuid(&gpu.spec.uuid).is_none() {
            let name = gpu.metadata.name.clone().unwrap_or_default();
            api.delete(&name, &DeleteParams::default()).await?;
            tracing::info!("deleted GPU object {name}: the card is gone");
        }
    }
    Ok(())
}

/// Applies each card's status where it changed.
async fn publish_statuses(
    node: &Node,
    api: &Api<GPU>,
    last: &mut HashMap<String, GPUStatus>,
) -> Result<(), kube::Error> {
    let live = node.controld.status().await.ok();
    for status_of in statuses(node, live.as_ref()) {
        let (name, status) = status_of;
        if last.get(&name) == Some(&status) {
            continue;
        }
        let patch = serde_json::json!({
            "apiVersion": "tessera.dev/v1alpha1",
            "kind": "GPU",
            "status": status,
        });
        api.patch_status(&name, &params(), &Patch::Apply(&patch))
            .await?;
        last.insert(name, status);
    }
    Ok(())
}

/// Every card's status now.
pub fn statuses(node: &Node, live: Option<&NodeStatus>) -> Vec<(String, GPUStatus)> {
    let holders: Vec<_> = node
        .holders
        .lock()
        .expect("holders lock")
        .all()
        .cloned()
        .collect();
    node.cards
        .list
        .iter()
        .map(|card| {
            let mut status = GPUStatus {
                healthy: node.healthy(card.index),
                allocatable: Amounts {
                    core: crate::ids::CORES_PER_GPU,
                    memory: card.memory,
                },
                ..Default::default()
            };
            let mut pods = std::collections::BTreeSet::new();
            for h in holders.iter().filter(|h| h.cards.contains(&card.uuid)) {
                let (core, memory) = if h.whole {
                    (crate::ids::CORES_PER_GPU, card.memory)
                } else {
                    (h.core, h.memory)
                };
                let device = live.and_then(|s| {
                    s.containers
                        .iter()
                        .find(|c| c.name == h.name)
                        .and_then(|c| c.devices.iter().find(|d| d.gpu == card.index))
                });
                status.allocated.core += core;
                status.allocated.memory += memory;
                pods.insert((h.namespace.clone(), h.pod.clone()));
                status.holders.push(GPUHolder {
                    namespace: h.namespace.clone(),
                    pod: h.pod.clone(),
                    container: h.container.clone(),
                    core,
                    memory,
                    policy: h.compute.clone(),
                    priority: h.priority.clone(),
                    memory_used: device.map(|d| d.memory_used),
                    share_measured: device.and_then(|d| d.share_measured),
                });
            }
            status.pods = pods.len() as u32;
            status.memory = format!(
                "{}/{}",
                format_size(status.allocated.memory),
                format_size(card.memory)
            );
            (object_name(&card.uuid), status)
        })
        .collect()
}
