//! Teardown and recovery: the kubelet's pod-resources answer is the truth about which
//! containers hold our IDs. A container of ours whose pod it no longer lists is removed from
//! controld (its region freed); one it lists that controld has but the plugin does not know
//! (after a plugin restart) is adopted. While pod-resources cannot be reached nothing is
//! removed.

use super::holders::Holder;
use super::prestart::unlink_board;
use super::Node;
use crate::ids::is_whole;
use crate::ids::{container_name, is_plugin_container, MEMORY_UNIT};
use crate::plugin::allocate::cards_of;
use crate::podresources::{self, Holding};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Reconciles every interval.
pub async fn run(node: Arc<Node>) {
    let mut ticks = tokio::time::interval(node.config.reconcile_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        once(&node).await;
    }
}

/// Whether the last List failed: its warning is logged once per outage.
static DOWN: AtomicBool = AtomicBool::new(false);

/// The table of holders after a restart, from pod-resources and controld.
pub async fn rebuild(node: &Node) {
    once(node).await;
    let count = node.holders.lock().expect("holders lock").all().count();
    tracing::info!("found {count} running containers holding our devices");
}

/// One pass.
pub async fn once(node: &Node) {
    let started = Instant::now();
    let holdings = match podresources::list(&node.config.pod_resources_socket).await {
        Ok(h) => {
            // Relaxed: a flag that only quiets the log.
            if DOWN.swap(false, Ordering::Relaxed) {
                tracing::info!("the kubelet's pod-resources API answers again");
            }
            h
        }
        Err(e) => {
            if !DOWN.swap(true, Ordering::Relaxed) {
                tracing::warn!("{e}; removing nothing until it answers");
            }
            return;
        }
    };
    let live: HashMap<String, &Holding> = holdings
        .iter()
        .filter(|h| !h.core.is_empty())
        .map(|h| (container_name(&h.core), h))
        .collect();
    let Ok(containers) = node.controld.list().await.inspect_err(|e| {
        tracing::warn!("{e}; reconciling again later");
    }) else {
        return;
    };
    let mut changed = false;
    // Holders whose pods are gone.
    let gone: Vec<Holder> = node
        .holders
        .lock()
        .expect("holders lock")
        .all()
        .filter(|h| !live.contains_key(&h.name) && h.since < started)
        .cloned()
        .collect();
    for holder in gone {
        if !holder.whole {
            if let Err(e) = node.controld.remove(&holder.name).await {
                if containers
                    .iter()
                    .any(|c| c.spec.name.as_str() == holder.name)
                {
                    tracing::warn!("cannot remove container {}: {e}", holder.name);
                    continue;
                }
            }
            unlink_board(&node.config.host, &holder.name);
        }
        node.holders
            .lock()
            .expect("holders lock")
            .remove(&holder.name);
        tracing::info!(
            "pod {}/{} no longer holds {}: removed",
            holder.namespace,
            holder.pod,
            holder.name
        );
        changed = true;
    }
    // controld's containers of ours: adopt the live ones, remove the orphans.
    for info in &containers {
        let name = info.spec.name.as_str();
        if !is_plugin_container(name) {
            continue;
        }
        let known = node
            .holders
            .lock()
            .expect("holders lock")
            .get(name)
            .cloned();
        match (live.get(name), known) {
            (Some(holding), None) => {
                let uuid = node
                    .cards
                    .list
                    .iter()
                    .find(|c| info.spec.gpus.as_slice().contains(&c.index))
                    .map(|c| c.uuid.clone());
                let holder = Holder {
                    name: name.to_string(),
                    namespace: holding.namespace.clone(),
                    pod: holding.pod.clone(),
                    container: holding.container.clone(),
                    cards: uuid.into_iter().collect(),
                    core: holding.core.len() as u32,
                    memory: info.spec.memory.map(|m| m.0).unwrap_or(0),
                    requested: holding.memory.len() as u64 * MEMORY_UNIT,
                    compute: info.spec.compute.to_string(),
                    priority: info.spec.priority.to_string(),
                    whole: false,
                    since: Instant::now(),
                };
                tracing::info!(
                    "adopted {name} of {}/{}/{}",
                    holder.namespace,
                    holder.pod,
                    holder.container
                );
                node.holders.lock().expect("holders lock").insert(holder);
                changed = true;
            }
            (None, None) => {
                match node.controld.remove(name).await {
                    Ok(()) => tracing::info!("removed {name}: no pod holds its devices any more"),
                    Err(e) => tracing::warn!("cannot remove orphan {name}: {e}"),
                }
                unlink_board(&node.config.host, name);
                changed = true;
            }
            _ => {}
        }
    }
    // Whole cards have no controld container: adopt them from pod-resources alone.
    for (name, holding) in &live {
        if !is_whole(holding.core.len()) {
            continue;
        }
        if node
            .holders
            .lock()
            .expect("holders lock")
            .get(name)
            .is_some()
        {
            continue;
        }
        let Ok(cards) = cards_of(&node.cards.list, crate::ids::Resource::Core, &holding.core)
        else {
            continue;
        };
        let holder = Holder {
            name: name.clone(),
            namespace: holding.namespace.clone(),
            pod: holding.pod.clone(),
            container: holding.container.clone(),
            cards: cards.iter().map(|c| c.uuid.clone()).collect(),
            core: holding.core.len() as u32,
            memory: cards.iter().map(|c| c.memory).sum(),
            requested: 0,
            compute: "whole".into(),
            priority: tessera_controld::policy::Priority::default().to_string(),
            whole: true,
            since: Instant::now(),
        };
        node.holders.lock().expect("holders lock").insert(holder);
        changed = true;
    }
    if changed {
        node.changed.notify_one();
    }
}
