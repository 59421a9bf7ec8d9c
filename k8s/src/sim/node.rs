//! A simulated node's allocation path: when a pod is bound here, the node's kubelet offers
//! the device plugin every free ID of the node, the plugin's own code finds the pod and
//! prefers IDs on the card the extender recorded (`tessera.dev/gpu`), and the IDs are taken. An ID
//! already taken is a double allocation, reported, never papered over. Each card's `GPU`
//! object status follows, as the plugin publishes it.

use crate::annotations::{recorded_cards, GPU as GPU_ANNOTATION};
use crate::gpu::{object_name, Amounts, GPUHolder, GPUSpec, GPUStatus};
use crate::ids::{DeviceId, Resource, CORES_PER_GPU, MEMORY_UNIT};
use crate::plugin::{admitting, prefer};
use crate::podresources::Holding;
use crate::requests::Ask;
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
        let mut ids = DeviceId::texts(&self.spec.uuid, resource, 0..units);
        ids.retain(|id| !self.taken.contains(id));
        ids
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

    /// Admits a pod bound here as the node's kubelet and device plugin do: the kubelet offers
    /// every free ID of the node, and the plugin's own code finds the pod being admitted and
    /// prefers IDs on the card the extender recorded, or (a pod bound without a record, by
    /// another scheduler) on the card of its own preference. Returns the cards it changed, or
    /// why it cannot: a recorded card without the free IDs (a double allocation), a record
    /// that does not match the request, or the plugin choosing another card than the record.
    pub fn admit(&mut self, pod: &Pod) -> Result<Vec<usize>, String> {
        let who = crate::extender::verbs::pod_key(pod);
        let ask = Ask::of(pod)?;
        if ask.is_none() {
            return Ok(Vec::new());
        }
        let empty = BTreeMap::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let recorded =
            match annotations.get(GPU_ANNOTATION) {
                None => None,
                Some(text) => Some(recorded_cards(annotations).ok_or_else(|| {
                    format!("pod {who} has an unreadable {GPU_ANNOTATION}={text}")
                })?),
            };
        if let Some(recorded) = &recorded {
            if recorded.len() != ask.cards() {
                return Err(format!(
                    "pod {who} asks {ask} but {GPU_ANNOTATION}={}",
                    recorded.join(",")
                ));
            }
            for uuid in recorded {
                let card = self
                    .cards
                    .iter()
                    .find(|c| &c.spec.uuid == uuid)
                    .ok_or_else(|| {
                        format!("pod {who}: card {uuid} is not on node {}", self.name)
                    })?;
                let (core, memory) = if ask.is_whole() {
                    (CORES_PER_GPU, card.spec.memory)
                } else {
                    (ask.core, ask.memory)
                };
                for (resource, size) in [
                    (Resource::Core, core as usize),
                    (Resource::Memory, memory.div_ceil(MEMORY_UNIT) as usize),
                ] {
                    let free = card.free(resource).len();
                    if free < size {
                        return Err(format!(
                            "double allocation: pod {who} needs {size} {} IDs on {uuid} ({}), {free} are free",
                            resource.name(),
                            self.name,
                        ));
                    }
                }
            }
        }
        let order: Vec<String> = self.cards.iter().map(|c| c.spec.uuid.clone()).collect();
        let mut chosen: Vec<String> = Vec::new();
        let mut holding = Holding {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            container: "main".into(),
            core: Vec::new(),
            memory: Vec::new(),
        };
        // Whole cards take all their memory, as the plugin records them; a share asks both.
        let resources: &[(Resource, usize)] = if ask.is_whole() {
            &[(Resource::Core, ask.core as usize)]
        } else {
            &[
                (Resource::Core, ask.core as usize),
                (Resource::Memory, ask.memory.div_ceil(MEMORY_UNIT) as usize),
            ]
        };
        let mut paired = None;
        for &(resource, size) in resources {
            if size == 0 {
                continue;
            }
            let request = prefer::Ask {
                available: self.cards.iter().flat_map(|c| c.free(resource)).collect(),
                must_include: Vec::new(),
                size,
            };
            let admitting = admitting::find(
                std::slice::from_ref(pod),
                std::slice::from_ref(&holding),
                resource,
                &request,
            );
            let scheduled = admitting.as_ref().map_or(&[][..], |a| a.cards.as_slice());
            let hints = prefer::Hints {
                scheduled,
                paired: paired.as_deref(),
                ..prefer::Hints::none()
            };
            let (ids, card) = prefer::choose(resource, &request, &order, hints);
            let on: BTreeSet<String> = ids
                .iter()
                .filter_map(|t| DeviceId::parse(t).ok().map(|id| id.uuid))
                .collect();
            let whole_cards = on.len() * CORES_PER_GPU as usize == size;
            let fits = ids.len() == size
                && if ask.is_whole() {
                    whole_cards
                } else {
                    card.is_some()
                };
            if !fits {
                return Err(format!(
                    "pod {who}: no card of node {} has {size} free {} IDs",
                    self.name,
                    resource.name()
                ));
            }
            if let Some(recorded) = &recorded {
                if on.iter().any(|u| !recorded.contains(u)) {
                    return Err(format!(
                        "pod {who}: the plugin chose {} IDs on {} for {GPU_ANNOTATION}={}",
                        resource.name(),
                        on.into_iter().collect::<Vec<_>>().join(","),
                        recorded.join(",")
                    ));
                }
            }
            paired = card;
            match resource {
                Resource::Core => holding.core = ids.clone(),
                Resource::Memory => holding.memory = ids.clone(),
            }
            chosen.extend(ids);
        }
        let indexes: Vec<usize> = (0..self.cards.len())
            .filter(|&i| {
                let uuid = &self.cards[i].spec.uuid;
                chosen
                    .iter()
                    .any(|t| DeviceId::parse(t).is_ok_and(|id| &id.uuid == uuid))
            })
            .collect();
        for &index in &indexes {
            let card = &mut self.cards[index];
            let (core, memory) = if ask.is_whole() {
                let memory = card.spec.memory;
                chosen.extend(card.free(Resource::Memory));
                (CORES_PER_GPU, memory)
            } else {
                (ask.core, ask.memory)
            };
            card.holders.insert(who.clone(), (core, memory));
        }
        for &index in &indexes {
            let card = &mut self.cards[index];
            let on_card =
                |t: &&String| DeviceId::parse(t).is_ok_and(|id| id.uuid == card.spec.uuid);
            let ids: Vec<String> = chosen.iter().filter(on_card).cloned().collect();
            card.taken.extend(ids);
        }
        Ok(indexes)
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
