//! The extender's view of the API server: the `GPU` objects and the pods, each listed and
//! then watched, listed again after any break. The first pod list also rebuilds the assume
//! cache: a pod with `tessera.dev/gpu` but not bound yet was placed by an extender that may
//! have stopped between recording the card and the binding; its card counts for one TTL.

use super::cluster::{Card, Holder, Used};
use super::verbs::{pod_key, Extender};
use crate::annotations::recorded_cards;
use crate::gpu::GPU;
use crate::requests::Ask;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long to wait before listing again after a failure.
const RETRY: Duration = Duration::from_millis(500);

/// A card from its object.
pub fn card_of(gpu: &GPU) -> Card {
    Card {
        uuid: gpu.spec.uuid.clone(),
        node: gpu.spec.node.clone(),
        index: gpu.spec.index,
        memory: gpu.spec.memory,
        healthy: gpu.status.as_ref().is_none_or(|s| s.healthy),
    }
}

/// The holders a card's node published, as pod key (`namespace/name`) → what the pod's
/// containers hold of the card together.
pub fn published_of(gpu: &GPU) -> Vec<(String, Used)> {
    let mut pods: Vec<(String, Used)> = Vec::new();
    for holder in gpu.status.iter().flat_map(|s| &s.holders) {
        let key = format!("{}/{}", holder.namespace, holder.pod);
        let at = match pods.iter().position(|(k, _)| *k == key) {
            Some(at) => at,
            None => {
                pods.push((
                    key,
                    Used {
                        pods: 1,
                        ..Used::default()
                    },
                ));
                pods.len() - 1
            }
        };
        let used = &mut pods[at].1;
        used.core = used.core.saturating_add(holder.core);
        used.memory = used.memory.saturating_add(holder.memory);
    }
    pods
}

/// A card and its published holders into the state.
fn put_gpu(state: &mut super::cluster::Cluster, gpu: &GPU) {
    state.put_card(card_of(gpu));
    state.set_published(&gpu.spec.uuid, published_of(gpu));
}

/// What a pod holds: its UID, the holder, and whether it is bound; `None` for a pod that
/// holds no card (no `tessera.dev/gpu`, finished, or asking nothing).
pub fn holder_of(pod: &Pod) -> Option<(String, Holder, bool)> {
    let uid = pod.metadata.uid.clone()?;
    let cards = recorded_cards(pod.metadata.annotations.as_ref()?)?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let ask = Ask::of(pod).ok().filter(|a| !a.is_none())?;
    let spec = pod.spec.as_ref()?;
    let bound = spec.node_name.as_deref().is_some_and(|n| !n.is_empty());
    let holder = Holder {
        pod: pod_key(pod),
        cards,
        ask,
        priority: spec.priority.unwrap_or(0),
    };
    Some((uid, holder, bound))
}

/// Which first lists are in (a bit each); ready at both.
struct Progress {
    extender: Arc<Extender>,
    done: AtomicU8,
}

impl Progress {
    fn state(&self) -> std::sync::MutexGuard<'_, super::cluster::Cluster> {
        // Each change to the state is one call; a panic elsewhere leaves it whole.
        self.extender
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn listed(&self, bit: u8) {
        // AcqRel: the two list tasks meet here; whichever comes second sees the other's bit.
        if self.done.fetch_or(bit, Ordering::AcqRel) | bit == 0b11 {
            self.extender.set_ready();
        }
    }
}

/// Follows GPUs and pods until the process ends.
pub async fn follow(extender: Arc<Extender>, kube: kube::Client) {
    let progress = Arc::new(Progress {
        extender: extender.clone(),
        done: AtomicU8::new(0),
    });
    let gpus = tokio::spawn(follow_gpus(progress.clone(), Api::all(kube.clone())));
    let pods = tokio::spawn(follow_pods(progress, Api::all(kube)));
    let _ = tokio::join!(gpus, pods);
}

async fn follow_gpus(progress: Arc<Progress>, api: Api<GPU>) {
    loop {
        let (listed, version) = list(&api, "the GPU objects").await;
        {
            let mut state = progress.state();
            state.set_cards(listed.iter().map(card_of));
            for gpu in &listed {
                state.set_published(&gpu.spec.uuid, published_of(gpu));
            }
        }
        progress.listed(0b01);
        let watched = watch(&api, &version, |event| {
            let mut state = progress.state();
            match event {
                WatchEvent::Added(gpu) | WatchEvent::Modified(gpu) => put_gpu(&mut state, &gpu),
                WatchEvent::Deleted(gpu) => state.remove_card(&gpu.spec.uuid),
                _ => {}
            }
        })
        .await;
        if let Err(e) = watched {
            tracing::debug!("the GPU watch ended ({e}); listing again");
        }
        tokio::time::sleep(RETRY / 10).await;
    }
}

async fn follow_pods(progress: Arc<Progress>, api: Api<Pod>) {
    let mut first = true;
    loop {
        let (listed, version) = list(&api, "pods").await;
        {
            let extender = &progress.extender;
            let mut state = progress.state();
            state.clear_bound();
            let until = Instant::now() + extender.config.assume_ttl();
            let mut rebuilt = 0;
            for (uid, holder, bound) in listed.iter().filter_map(holder_of) {
                if bound {
                    state.put_bound(&uid, holder);
                } else if first && !state.is_assumed(&uid) {
                    state.assume(&uid, holder, until);
                    rebuilt += 1;
                }
            }
            if first && rebuilt > 0 {
                tracing::info!(
                    "{rebuilt} pods have a card recorded but are not bound yet; their cards count for {:?}",
                    extender.config.assume_ttl()
                );
            }
        }
        first = false;
        progress.listed(0b10);
        let watched = watch(&api, &version, |event| {
            let mut state = progress.state();
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => match holder_of(&pod) {
                    Some((uid, holder, true)) => state.put_bound(&uid, holder),
                    // Annotated, not bound yet: the bind that wrote it holds the assumption.
                    Some((_, _, false)) => {}
                    None => {
                        if let Some(uid) = &pod.metadata.uid {
                            state.unbind(uid);
                        }
                    }
                },
                WatchEvent::Deleted(pod) => {
                    if let Some(uid) = &pod.metadata.uid {
                        state.remove_pod(uid);
                    }
                }
                _ => {}
            }
        })
        .await;
        if let Err(e) = watched {
            tracing::debug!("the pod watch ended ({e}); listing again");
        }
        tokio::time::sleep(RETRY / 10).await;
    }
}

/// Lists every object, trying again until the API server answers; the items and the version
/// to watch from.
async fn list<K>(api: &Api<K>, what: &str) -> (Vec<K>, String)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                let version = list.metadata.resource_version.clone().unwrap_or_default();
                return (list.items, version);
            }
            Err(e) => {
                tracing::warn!("cannot list {what}: {e}");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Applies each event of one watch from `version` until it ends or fails.
async fn watch<K>(
    api: &Api<K>,
    version: &str,
    mut apply: impl FnMut(WatchEvent<K>),
) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let stream = api
        .watch(&WatchParams::default().timeout(290), version)
        .await
        .map_err(|e| e.to_string())?;
    let mut stream = stream.boxed();
    while let Some(event) = stream.try_next().await.map_err(|e| e.to_string())? {
        if let WatchEvent::Error(e) = &event {
            return Err(format!("{} ({})", e.message, e.code));
        }
        apply(event);
    }
    Ok(())
}
