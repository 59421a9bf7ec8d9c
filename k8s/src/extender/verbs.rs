//! The four verbs on the extender's state, apart from HTTP: filter (which nodes have a card
//! that fits, and why each other fails), prioritize (the node policy's scores), bind (the
//! card policy's card, recorded on the pod, then the binding) and preempt (victims that free
//! enough on one card).

use super::cluster::{Cluster, Holder};
use super::fit::Misfit;
use super::place::{choose_cards, node_key, scores};
use super::policy::{Config, Placement};
use super::protocol::{
    node_list_names, retain_nodes, ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult,
    ExtenderFilterResult, ExtenderPreemptionArgs, ExtenderPreemptionResult, HostPriority, MetaPod,
    MetaVictims,
};
use crate::annotations::GPU;
use crate::requests::Ask;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The extender: its config, what it knows, and the API server it binds through.
pub struct Extender {
    /// Policies and TTL.
    pub config: Config,
    /// The cluster as seen through the watches and the binds made here.
    pub state: Mutex<Cluster>,
    kube: Option<kube::Client>,
    /// Set once the first lists of GPUs and pods are in: before, every filter would be a
    /// guess.
    ready: AtomicBool,
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// What the extender needs of a pod being placed.
fn terms(config: &Config, pod: &Pod) -> Result<(Ask, Placement), String> {
    let ask = Ask::of(pod)?;
    let empty = BTreeMap::new();
    let placement = config.placement(pod.metadata.annotations.as_ref().unwrap_or(&empty))?;
    Ok((ask, placement))
}

impl Extender {
    /// An extender that binds through `kube` (none: bind answers an error, for tests and
    /// benchmarks of the other verbs).
    pub fn new(config: Config, kube: Option<kube::Client>) -> Extender {
        Extender {
            config,
            state: Mutex::new(Cluster::default()),
            kube,
            ready: AtomicBool::new(false),
        }
    }

    /// Marks the first lists as read.
    pub fn set_ready(&self) {
        // Release: pairs with the acquire in `is_ready`, so that a verb that sees ready also
        // sees the state the lists wrote (the mutex orders it too; this keeps it explicit).
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the first lists are in.
    pub fn is_ready(&self) -> bool {
        // Acquire: pairs with the release in `set_ready`.
        self.ready.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cluster> {
        // A verb that panicked left no half-made change (each change is one insert or
        // remove), so the state is still whole.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Filter: every node with a card that fits passes; each other says why, as unresolvable
    /// where no eviction could make room ([`Misfit::Never`]) or the pod itself cannot be
    /// placed anywhere.
    pub fn filter(&self, args: &ExtenderArgs) -> ExtenderFilterResult {
        let by_name = args.node_names.is_some();
        let names = match (&args.node_names, &args.nodes) {
            (Some(names), _) => names.clone(),
            (None, Some(list)) => node_list_names(list),
            (None, None) => {
                return ExtenderFilterResult {
                    error: "the request has neither Nodes nor NodeNames".into(),
                    ..Default::default()
                }
            }
        };
        if !self.is_ready() {
            return ExtenderFilterResult {
                error: "the extender is still reading the cluster's GPUs and pods; try again"
                    .into(),
                ..Default::default()
            };
        }
        // Nodes where evicting pods may make room, and those where nothing would.
        let mut failed = BTreeMap::new();
        let mut never = BTreeMap::new();
        let passing: BTreeSet<String> = match terms(&self.config, &args.pod) {
            Err(why) => {
                for name in &names {
                    never.insert(name.clone(), format!("pod {}: {why}", pod_key(&args.pod)));
                }
                BTreeSet::new()
            }
            Ok((ask, _)) if ask.is_none() => names.iter().cloned().collect(),
            Ok((ask, placement)) => {
                let mut state = self.lock();
                state.expire(Instant::now());
                let usage = state.usage(args.pod.metadata.uid.as_deref());
                names
                    .iter()
                    .filter(|name| {
                        let cards = state.with_use(name, &usage);
                        match super::fit::fit(&cards, &ask, placement.card) {
                            Ok(_) => true,
                            Err(Misfit::Taken(why)) => {
                                failed.insert((*name).clone(), why);
                                false
                            }
                            Err(Misfit::Never(why)) => {
                                never.insert((*name).clone(), why);
                                false
                            }
                        }
                    })
                    .cloned()
                    .collect()
            }
        };
        let mut result = ExtenderFilterResult {
            failed_nodes: failed,
            failed_and_unresolvable_nodes: never,
            ..Default::default()
        };
        if by_name {
            result.node_names = Some(names.into_iter().filter(|n| passing.contains(n)).collect());
        } else if let Some(list) = &args.nodes {
            result.nodes = Some(retain_nodes(list, |n| passing.contains(n)));
        }
        result
    }

    /// Prioritize: the node policy's scores, 0 to 10.
    pub fn prioritize(&self, args: &ExtenderArgs) -> Result<Vec<HostPriority>, String> {
        let names = match (&args.node_names, &args.nodes) {
            (Some(names), _) => names.clone(),
            (None, Some(list)) => node_list_names(list),
            (None, None) => return Err("the request has neither Nodes nor NodeNames".into()),
        };
        let (ask, placement) = terms(&self.config, &args.pod)
            .map_err(|why| format!("pod {}: {why}", pod_key(&args.pod)))?;
        let keys: Vec<Option<f64>> = if ask.is_none() {
            vec![Some(0.0); names.len()]
        } else {
            let mut state = self.lock();
            state.expire(Instant::now());
            let usage = state.usage(args.pod.metadata.uid.as_deref());
            names
                .iter()
                .map(|name| node_key(&state, name, &ask, placement, &usage))
                .collect()
        };
        Ok(names
            .into_iter()
            .zip(scores(&keys))
            .map(|(host, score)| HostPriority { host, score })
            .collect())
    }

    /// Bind: chooses the card, records it on the pod, binds the pod, and counts the card at
    /// once (assumed until the watch sees the pod bound).
    pub async fn bind(&self, args: &ExtenderBindingArgs) -> ExtenderBindingResult {
        match self.try_bind(args).await {
            Ok(()) => ExtenderBindingResult::default(),
            Err(error) => {
                tracing::warn!("{error}");
                ExtenderBindingResult { error }
            }
        }
    }

    async fn try_bind(&self, args: &ExtenderBindingArgs) -> Result<(), String> {
        let who = format!("{}/{}", args.pod_namespace, args.pod_name);
        let kube = self
            .kube
            .clone()
            .ok_or_else(|| format!("cannot bind {who}: this extender has no API server"))?;
        let api: Api<Pod> = Api::namespaced(kube, &args.pod_namespace);
        let pod = api
            .get(&args.pod_name)
            .await
            .map_err(|e| format!("cannot bind {who}: cannot read the pod: {e}"))?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !args.pod_uid.is_empty() && uid != args.pod_uid {
            return Err(format!(
                "cannot bind {who}: its UID is {uid}, not {} (the pod was recreated)",
                args.pod_uid
            ));
        }
        let (ask, placement) =
            terms(&self.config, &pod).map_err(|why| format!("cannot bind {who}: {why}"))?;
        let mut cards = Vec::new();
        if !ask.is_none() {
            let mut state = self.lock();
            let now = Instant::now();
            state.expire(now);
            let usage = state.usage(Some(&uid));
            cards = choose_cards(&state, &args.node, &ask, placement.card, &usage)
                .map_err(|why| format!("cannot bind {who} to {}: {}", args.node, why.reason()))?;
            let holder = Holder {
                pod: who.clone(),
                cards: cards.clone(),
                ask,
                priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            };
            state.assume(&uid, holder, now + self.config.assume_ttl());
        }
        let result = record_and_bind(&api, &pod, &args.node, &cards).await;
        if let Err(e) = &result {
            // The pod goes back to the scheduler's queue; its card is free again. The
            // annotation may stay: it counts only once the pod is bound.
            self.lock().forget(&uid);
            return Err(format!("cannot bind {who} to {}: {e}", args.node));
        }
        tracing::info!(
            "bound {who} to {} on {}",
            args.node,
            if cards.is_empty() {
                "no Tessera GPU".to_string()
            } else {
                cards.join(",")
            }
        );
        Ok(())
    }

    /// Preempt: of the scheduler's proposed victims on each node, the fewest of lower
    /// priority that free enough on one card (whole cards: that empty enough cards); nodes
    /// where they cannot are left out.
    pub fn preempt(
        &self,
        args: &ExtenderPreemptionArgs,
    ) -> Result<ExtenderPreemptionResult, String> {
        let proposed: BTreeMap<String, (Vec<String>, i64)> =
            match (&args.node_name_to_meta_victims, &args.node_name_to_victims) {
                (Some(meta), _) => meta
                    .iter()
                    .map(|(node, v)| {
                        (
                            node.clone(),
                            (
                                v.pods.iter().map(|p| p.uid.clone()).collect(),
                                v.num_pdb_violations,
                            ),
                        )
                    })
                    .collect(),
                (None, Some(full)) => full
                    .iter()
                    .map(|(node, v)| {
                        let uids = v
                            .pods
                            .iter()
                            .filter_map(|p| p.metadata.uid.clone())
                            .collect();
                        (node.clone(), (uids, v.num_pdb_violations))
                    })
                    .collect(),
                (None, None) => {
                    return Err(
                        "the request has neither NodeNameToVictims nor NodeNameToMetaVictims"
                            .into(),
                    )
                }
            };
        let (ask, _) = terms(&self.config, &args.pod)
            .map_err(|why| format!("pod {}: {why}", pod_key(&args.pod)))?;
        let priority = args.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        let mut result = ExtenderPreemptionResult::default();
        let mut state = self.lock();
        let now = Instant::now();
        state.expire(now);
        let usage = state.usage(args.pod.metadata.uid.as_deref());
        for (node, (uids, pdb)) in proposed {
            let chosen = if ask.is_none() {
                Some(uids)
            } else {
                let allowed: BTreeSet<&str> = uids.iter().map(String::as_str).collect();
                super::preempt::victims(&state, &node, &ask, priority, &allowed, &usage, now)
            };
            if let Some(victims) = chosen {
                result.node_name_to_meta_victims.insert(
                    node,
                    MetaVictims {
                        pods: victims.into_iter().map(|uid| MetaPod { uid }).collect(),
                        num_pdb_violations: pdb,
                    },
                );
            }
        }
        Ok(result)
    }
}

/// Writes the chosen cards on the pod (`tessera.dev/gpu`), then binds it to `node`.
async fn record_and_bind(
    api: &Api<Pod>,
    pod: &Pod,
    node: &str,
    cards: &[String],
) -> Result<(), String> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    if !cards.is_empty() {
        let patch = serde_json::json!({"metadata": {"annotations": {GPU: cards.join(",")}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("cannot record the card on the pod: {e}"))?;
    }
    let binding = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": pod.metadata.namespace, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    let body = serde_json::to_vec(&binding).map_err(|e| e.to_string())?;
    api.create_subresource::<serde_json::Value>("binding", &name, &PostParams::default(), body)
        .await
        .map_err(|e| format!("the API server refused the binding: {e}"))?;
    Ok(())
}
