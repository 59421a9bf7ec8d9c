//! A simulated node's allocation path: when a pod is bound here, the node's kubelet offers
//! the device plugin the free IDs of the card the extender recorded (`tessera.dev/gpu`), the
//! plugin's own preferred-allocation code picks from them, and the IDs are taken. An ID
//! already taken is a double allocation, reported, never papered over. Each card's `GPU`
//! object status follows, as the plugin publishes it.

use crate::annotations::GPU as GPU_ANNOTATION;
use crate::extender::ask::Ask;
use crate::gpu::{object_name, Amounts, GPUHolder, GPUSpec, GPUStatus};
use crate::ids::{DeviceId, Resource, CORES_PER_GPU, MEMORY_UNIT};
use crate::plugin::prefer;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};

/// One simulated card.
#[derive(Debug, Clone)]
pub struct SimCard {
    /// Its spec, as its GPU object has it.
    pub spec: GPUSpec,
    /// Its IDs taken, by resource.
    pub taken: BTreeSet<String>,
    /// Who holds what: pod → (core, memory bytes).
    pub holders: BTreeMap<String, (u32, u64)>,
}

impl SimCard {
    fn free(&self, resource: Resource) -> Vec<String> {
        let units = match resource {
            Resource::Core => CORES_PER_GPU,
            Resource::Memory => (self.spec.memory / MEMORY_UNIT) as u32,
        };
        (0..units)
            .map(|number| {
                DeviceId {
                    uuid: self.spec.uuid.clone(),
                    resource,
                    number,
                }
                .to_string()
            })
            .filter(|id| !self.taken.contains(id))
            .collect()
    }

    /// The card's status, as the device plugin publishes it.
    pub fn status(&self) -> GPUStatus {
        let core: u32 = self.holders.values().map(|h| h.0).sum();
        let memory: u64 = self.holders.values().map(|h| h.1).sum();
        GPUStatus {
            healthy: true,
            allocatable: Amounts {
                core: CORES_PER_GPU,
                memory: self.spec.memory,
            },
            allocated: Amounts { core, memory },
            memory: format!(
                "{}GiB/{}GiB",
                memory / MEMORY_UNIT,
                self.spec.memory / MEMORY_UNIT
            ),
            pods: self.holders.len() as u32,
            holders: self
                .holders
                .iter()
                .map(|(pod, (core, memory))| {
                    let (namespace, name) = pod.split_once('/').unwrap_or(("default", pod));
                    GPUHolder {
                        namespace: namespace.into(),
                        pod: name.into(),
                        container: "main".into(),
                        core: *core,
                        memory: *memory,
                        policy: format!("burst:{core}"),
                        priority: "online".into(),
                        ..Default::default()
                    }
                })
                .collect(),
        }
    }
}

/// A node's cards.
#[derive(Debug, Clone)]
pub struct SimNode {
    /// The node's name.
    pub name: String,
    /// By index.
    pub cards: Vec<SimCard>,
}

impl SimNode {
    /// A node of `count` cards of `memory` bytes each, with UUIDs made from the names.
    pub fn new(name: &str, count: u32, memory: u64) -> SimNode {
        let cards = (0..count)
            .map(|index| {
                // Hex digits only after `GPU-`, as real UUIDs have.
                let hash = name.bytes().fold(0xcbf2_9ce4_u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0100_0193)
                });
                SimCard {
                    spec: GPUSpec {
                        node: name.into(),
                        index,
                        uuid: format!("GPU-{:08x}-{index:04x}", hash as u32),
                        model: "Simulated A100-40GB".into(),
                        memory,
                        sms: Some(108),
                    },
                    taken: BTreeSet::new(),
                    holders: BTreeMap::new(),
                }
            })
            .collect();
        SimNode {
            name: name.into(),
            cards,
        }
    }

    /// Admits a pod bound here: takes its IDs on the cards the extender recorded. Returns
    /// the cards it changed, or why it cannot (a double allocation or a missing record).
    pub fn admit(&mut self, pod: &Pod) -> Result<Vec<usize>, String> {
        let who = crate::extender::verbs::pod_key(pod);
        let ask = Ask::of(pod)?;
        if ask.is_none() {
            return Ok(Vec::new());
        }
        let recorded = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(GPU_ANNOTATION))
            .ok_or_else(|| {
                format!(
                    "pod {who} was bound to {} without {GPU_ANNOTATION}",
                    self.name
                )
            })?;
        let uuids: Vec<&str> = recorded.split(',').collect();
        if uuids.len() != ask.cards() {
            return Err(format!(
                "pod {who} asks {ask} but {GPU_ANNOTATION}={recorded}"
            ));
        }
        let mut changed = Vec::new();
        for uuid in uuids {
            let index = self
                .cards
                .iter()
                .position(|c| c.spec.uuid == uuid)
                .ok_or_else(|| format!("pod {who}: card {uuid} is not on node {}", self.name))?;
            let card = &self.cards[index];
            let (core, memory) = if ask.is_whole() {
                (CORES_PER_GPU, card.spec.memory)
            } else {
                (ask.core, ask.memory)
            };
            let order = vec![card.spec.uuid.clone()];
            let mut chosen = Vec::new();
            for (resource, size) in [
                (Resource::Core, core as usize),
                (Resource::Memory, memory.div_ceil(MEMORY_UNIT) as usize),
            ] {
                if size == 0 {
                    continue;
                }
                let request = prefer::Ask {
                    available: card.free(resource),
                    must_include: Vec::new(),
                    size,
                };
                if request.available.len() < size {
                    return Err(format!(
                        "double allocation: pod {who} needs {size} {} IDs on {uuid} ({}), {} are free",
                        resource.name(),
                        self.name,
                        request.available.len()
                    ));
                }
                let (ids, _) = prefer::choose(resource, &request, &order, None, &|_| true);
                chosen.extend(ids);
            }
            let card = &mut self.cards[index];
            card.taken.extend(chosen);
            card.holders.insert(who.clone(), (core, memory));
            changed.push(index);
        }
        Ok(changed)
    }

    /// A pod gone: its IDs are free again.
    pub fn release(&mut self, who: &str) -> Vec<usize> {
        let mut changed = Vec::new();
        for (index, card) in self.cards.iter_mut().enumerate() {
            if card.holders.remove(who).is_some() {
                changed.push(index);
            }
        }
        // IDs are not per pod here; rebuild the taken set from the holders.
        for &index in &changed {
            let card = &mut self.cards[index];
            let core: u32 = card.holders.values().map(|h| h.0).sum();
            let memory: u64 = card.holders.values().map(|h| h.1).sum();
            card.taken.clear();
            let mut taken = BTreeSet::new();
            for (resource, count) in [
                (Resource::Core, core as usize),
                (Resource::Memory, memory.div_ceil(MEMORY_UNIT) as usize),
            ] {
                taken.extend(card.free(resource).into_iter().take(count));
            }
            card.taken = taken;
        }
        changed
    }

    /// The GPU object of a card.
    pub fn object(&self, index: usize) -> serde_json::Value {
        let card = &self.cards[index];
        serde_json::json!({
            "apiVersion": "tessera.dev/v1alpha1",
            "kind": "GPU",
            "metadata": {"name": object_name(&card.spec.uuid)},
            "spec": card.spec,
            "status": card.status(),
        })
    }
}
