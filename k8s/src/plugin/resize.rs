//! Live resize: the plugin watches the pods of its node; when a running pod's
//! `tessera.dev/memory-limit` or `tessera.dev/compute` annotation changes, controld changes
//! its containers' limits in place (`container set`). A bad new value is refused with an
//! event and the old limits stay.

use super::holders::Holder;
use super::prestart::limit;
use super::Node;
use crate::annotations::{self, PodAsk};
use crate::podresources::Holding;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tessera_controld::spec::MemorySize;
use tessera_controld::state::{MemoryChange, SpecChange};

/// How long to wait before listing again after the watch failed.
const RETRY: Duration = Duration::from_secs(1);

/// Watches the node's pods until the process ends.
pub async fn run(node: Arc<Node>) {
    let pods: Api<Pod> = Api::all(node.kube.clone());
    let selector = format!("spec.nodeName={}", node.config.node_name);
    // The annotation errors already reported, by pod, so that a watch does not repeat them.
    let mut reported: HashMap<String, String> = HashMap::new();
    loop {
        let list = match pods.list(&ListParams::default().fields(&selector)).await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(
                    "cannot list the pods of node {}: {e}",
                    node.config.node_name
                );
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        for pod in &list.items {
            follow(&node, pod, &mut reported).await;
        }
        let version = list.metadata.resource_version.unwrap_or_default();
        let stream = match pods
            .watch(&WatchParams::default().fields(&selector), &version)
            .await
        {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(
                    "cannot watch the pods of node {}: {e}",
                    node.config.node_name
                );
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let mut stream = stream.boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(WatchEvent::Added(pod) | WatchEvent::Modified(pod))) => {
                    follow(&node, &pod, &mut reported).await
                }
                Ok(Some(WatchEvent::Deleted(_) | WatchEvent::Bookmark(_))) => {}
                Ok(Some(WatchEvent::Error(e))) => {
                    tracing::debug!("pod watch ended: {e}");
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("pod watch failed: {e}");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Brings the containers of `pod` to what its annotations say now.
async fn follow(node: &Node, pod: &Pod, reported: &mut HashMap<String, String>) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let holders: Vec<Holder> = node
        .holders
        .lock()
        .expect("holders lock")
        .all()
        .filter(|h| !h.whole && h.namespace == namespace && h.pod == name)
        .cloned()
        .collect();
    if holders.is_empty() {
        return;
    }
    let key = format!("{namespace}/{name}");
    let empty = Default::default();
    let ask = match annotations::read(pod.metadata.annotations.as_ref().unwrap_or(&empty)) {
        Ok(ask) => {
            reported.remove(&key);
            ask
        }
        Err(e) => {
            let message = format!("pod {key}: {e}; its limits stay as they are");
            if reported.get(&key) != Some(&message) {
                tracing::error!("{message}");
                crate::pods::warn(
                    &node.kube,
                    &node.config.node_name,
                    pod,
                    "TesseraRefused",
                    &message,
                )
                .await;
                reported.insert(key, message);
            }
            return;
        }
    };
    for holder in holders {
        if let Err(message) = resize(node, &holder, &ask).await {
            if reported.get(&key) != Some(&message) {
                tracing::error!("{message}");
                crate::pods::warn(
                    &node.kube,
                    &node.config.node_name,
                    pod,
                    "TesseraRefused",
                    &message,
                )
                .await;
                reported.insert(key.clone(), message);
            }
        }
    }
}

/// Changes one container's cap and policy if they differ from what the pod asks now.
async fn resize(node: &Node, holder: &Holder, ask: &PodAsk) -> Result<(), String> {
    let holding = Holding {
        namespace: holder.namespace.clone(),
        pod: holder.pod.clone(),
        container: holder.container.clone(),
        core: Vec::new(),
        memory: Vec::new(),
    };
    let cap = limit(&holding, ask, holder.requested)?;
    let compute = ask.compute.policy(holder.core);
    if cap == holder.memory && compute.to_string() == holder.compute {
        return Ok(());
    }
    let change = SpecChange {
        gpus: None,
        memory: (cap != holder.memory).then_some(MemoryChange::Cap(MemorySize(cap))),
        compute: (compute.to_string() != holder.compute).then_some(compute),
        priority: None,
        timeslice: None,
    };
    node.controld.set(&holder.name, change).await.map_err(|e| {
        format!(
            "cannot resize {} of pod {}/{}: {e}",
            holder.name, holder.namespace, holder.pod
        )
    })?;
    if let Some(h) = node
        .holders
        .lock()
        .expect("holders lock")
        .get_mut(&holder.name)
    {
        h.memory = cap;
        h.compute = compute.to_string();
    }
    node.changed.notify_one();
    tracing::info!(
        "resized {} of pod {}/{}: memory {}, compute {compute}",
        holder.name,
        holder.namespace,
        holder.pod,
        tessera_region::units::format_size(cap)
    );
    Ok(())
}
