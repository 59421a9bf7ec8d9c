//! An in-process cluster for tests and benchmarks: a fake API server ([`api`]), N nodes of M
//! simulated cards each with their allocation path ([`node`]), the real extender on its own
//! runtime ([`extender`]) and a scheduler that calls it over HTTP as kube-scheduler does
//! ([`scheduler`]).

pub mod api;
pub mod extender;
pub mod node;
pub mod scheduler;

use crate::extender::policy::Config;
use crate::ids::{CORE_RESOURCE, MEMORY_RESOURCE, MEMORY_UNIT};
use api::FakeApi;
use extender::SimExtender;
use node::SimNode;
use scheduler::{Outcome, Scheduler};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The memory of each simulated card: an A100-40GB's.
pub const CARD_MEMORY: u64 = 40 * MEMORY_UNIT;

/// How long a killed extender stays down.
const RESTART_GAP: Duration = Duration::from_millis(300);

/// A pod as a test writes it: the two requests, annotations and a `spec.priority`.
#[derive(Debug, Clone, Default)]
pub struct PodSpec {
    /// `tessera.dev/gpu-core`.
    pub core: u32,
    /// `tessera.dev/gpu-memory`, GiB.
    pub memory_gib: u64,
    /// Annotations.
    pub annotations: Vec<(String, String)>,
    /// `spec.priority` (from its PriorityClass).
    pub priority: i32,
}

/// A pending pod object for `spec`.
pub fn pod_object(namespace: &str, name: &str, spec: &PodSpec) -> Value {
    let annotations: BTreeMap<&str, &str> = spec
        .annotations
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let amounts =
        json!({CORE_RESOURCE: spec.core.to_string(), MEMORY_RESOURCE: spec.memory_gib.to_string()});
    api::pod(
        namespace,
        name,
        &annotations,
        json!({
            "schedulerName": "tessera",
            "priority": spec.priority,
            "containers": [{
                "name": "main",
                "image": "app",
                "resources": {"limits": amounts.clone(), "requests": amounts},
            }],
        }),
    )
}

/// The simulated cluster.
pub struct SimCluster {
    /// The API server.
    pub api: Arc<FakeApi>,
    /// The nodes, by name.
    nodes: Mutex<BTreeMap<String, SimNode>>,
    extender: Mutex<SimExtender>,
    config: Config,
    /// The scheduler.
    pub scheduler: Scheduler,
    /// What the nodes' allocation paths refused: each a double allocation or a pod bound
    /// without its card.
    conflicts: Mutex<Vec<String>>,
}

/// Writes the GPU objects of these cards of a node, as its device plugin does.
fn publish(api: &FakeApi, node: &SimNode, cards: impl IntoIterator<Item = usize>) {
    for index in cards {
        let object = node.object(index);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.put_gpu(&name, object);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SimCluster {
    /// `nodes` nodes (`node-00`, …) of `cards` cards each, their GPU objects published, and
    /// an extender with `config` that has read them.
    pub async fn start(nodes: usize, cards: u32, config: Config) -> Result<SimCluster, String> {
        let api = Arc::new(FakeApi::start().await);
        let mut sims = BTreeMap::new();
        for n in 0..nodes {
            let node = SimNode::new(&format!("node-{n:02}"), cards, CARD_MEMORY);
            publish(&api, &node, 0..node.cards.len());
            sims.insert(node.name.clone(), node);
        }
        let extender = SimExtender::start(
            "127.0.0.1:0".parse().expect("an address"),
            config.clone(),
            api.client(),
        )
        .map_err(|e| format!("cannot start the extender: {e}"))?;
        let scheduler = Scheduler::new(format!("http://{}", extender.addr));
        let cluster = SimCluster {
            api,
            nodes: Mutex::new(sims),
            extender: Mutex::new(extender),
            config,
            scheduler,
            conflicts: Mutex::new(Vec::new()),
        };
        cluster.wait_extender().await?;
        Ok(cluster)
    }

    async fn wait_extender(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.scheduler.extender_ready().await {
            if Instant::now() > deadline {
                return Err("the extender did not read the cluster within 60 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Kills the extender and starts a new one on the same address; returns once it has
    /// read the cluster. The new one starts a moment after the old one dies, as a restarted
    /// pod does: what the old one had sent has reached the API server by then.
    pub async fn restart_extender(&self) -> Result<(), String> {
        let addr = {
            let mut extender = lock(&self.extender);
            extender.kill();
            extender.addr
        };
        tokio::time::sleep(RESTART_GAP).await;
        {
            let mut extender = lock(&self.extender);
            *extender = SimExtender::start(addr, self.config.clone(), self.api.client())
                .map_err(|e| format!("cannot restart the extender on {addr}: {e}"))?;
        }
        self.wait_extender().await
    }

    /// The node names.
    pub fn node_names(&self) -> Vec<String> {
        lock(&self.nodes).keys().cloned().collect()
    }

    /// Creates a pending pod.
    pub fn add_pod(&self, namespace: &str, name: &str, spec: &PodSpec) {
        self.api.create_pod(pod_object(namespace, name, spec));
    }

    /// Schedules a pod through the extender and, once bound, admits it on its node.
    pub async fn schedule(&self, namespace: &str, name: &str) -> Outcome {
        let nodes = self.node_names();
        let outcome = self
            .scheduler
            .schedule(&nodes, || self.api.pod(namespace, name))
            .await;
        if let Outcome::Placed(node) = &outcome {
            let recorded = self
                .api
                .pod(namespace, name)
                .is_some_and(|p| p["metadata"]["annotations"][crate::annotations::GPU].is_string());
            if !recorded {
                lock(&self.conflicts).push(format!(
                    "pod {namespace}/{name} was bound to {node} without {}",
                    crate::annotations::GPU
                ));
            }
            self.admit(namespace, name, node);
        }
        outcome
    }

    /// A pod bound to `node` by someone else than the extender (another scheduler, or its
    /// own `nodeName`), with no card recorded: its node admits it by the plugin's own
    /// preference and publishes it.
    pub fn place_by_hand(&self, namespace: &str, name: &str, node: &str, spec: &PodSpec) {
        let mut pod = pod_object(namespace, name, spec);
        pod["spec"]["nodeName"] = json!(node);
        self.api.create_pod(pod);
        self.admit(namespace, name, node);
    }

    /// The node's allocation path for a pod bound to it.
    fn admit(&self, namespace: &str, name: &str, node: &str) {
        let Some(object) = self.api.pod(namespace, name) else {
            return;
        };
        let pod: k8s_openapi::api::core::v1::Pod = match serde_json::from_value(object) {
            Ok(pod) => pod,
            Err(e) => {
                lock(&self.conflicts).push(format!("pod {namespace}/{name} cannot be read: {e}"));
                return;
            }
        };
        let mut nodes = lock(&self.nodes);
        let Some(sim) = nodes.get_mut(node) else {
            lock(&self.conflicts).push(format!(
                "pod {namespace}/{name} bound to unknown node {node}"
            ));
            return;
        };
        match sim.admit(&pod) {
            Ok(changed) => publish(&self.api, sim, changed),
            Err(e) => lock(&self.conflicts).push(e),
        }
    }

    /// Deletes a pod; its node frees its IDs.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        let node = self
            .api
            .pod(namespace, name)
            .and_then(|p| p["spec"]["nodeName"].as_str().map(str::to_string));
        self.api.delete_pod(namespace, name);
        if let Some(node) = node {
            let mut nodes = lock(&self.nodes);
            if let Some(sim) = nodes.get_mut(&node) {
                let changed = sim.release(&format!("{namespace}/{name}"));
                publish(&self.api, sim, changed);
            }
        }
    }

    /// What the extender counts as taken of a card now.
    pub fn extender_counts(&self, uuid: &str) -> crate::extender::cluster::Used {
        let extender = lock(&self.extender).extender.clone();
        let state = extender.state.lock().unwrap_or_else(|p| p.into_inner());
        state.usage(None).get(uuid)
    }

    /// What the allocation paths refused.
    pub fn conflicts(&self) -> Vec<String> {
        lock(&self.conflicts).clone()
    }

    /// Each card as its node holds it: (node, index, core, memory bytes, holders).
    pub fn cards(&self) -> Vec<(String, u32, u32, u64, usize)> {
        lock(&self.nodes)
            .values()
            .flat_map(|n| {
                n.cards.iter().map(|c| {
                    let status = c.status();
                    (
                        c.spec.node.clone(),
                        c.spec.index,
                        status.allocated.core,
                        status.allocated.memory,
                        c.holders.len(),
                    )
                })
            })
            .collect()
    }
}
