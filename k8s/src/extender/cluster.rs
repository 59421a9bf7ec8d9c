//! What the extender knows of the cluster: each card (from the `GPU` objects), each pod that
//! holds cards (bound, with `tessera.dev/gpu`), and the assume cache: cards chosen at bind,
//! counted at once until the pod is seen bound or the TTL runs out. A restarted extender
//! rebuilds the cache from the annotations of pods not bound yet.
//!
//! Nothing here locks a node: the state is this process's own, behind one mutex held only
//! while a verb computes; the API server is never asked to serialize placements.

use super::ask::Ask;
use crate::ids::{CORES_PER_GPU, MEMORY_UNIT};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// One card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// Its `GPU-…` UUID.
    pub uuid: String,
    /// The node it is in.
    pub node: String,
    /// Its index on that node.
    pub index: u32,
    /// Its memory, in bytes.
    pub memory: u64,
    /// Whether it passes the node's health check (a card whose status is not published yet
    /// counts as healthy: the device plugin offers only healthy IDs anyway).
    pub healthy: bool,
}

/// A pod that holds, or is about to hold, cards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// `namespace/name`.
    pub pod: String,
    /// Its cards, by UUID.
    pub cards: Vec<String>,
    /// What it asks.
    pub ask: Ask,
    /// Its `spec.priority` (preemption).
    pub priority: i32,
}

/// What is taken of one card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Used {
    /// Core, percent.
    pub core: u32,
    /// Memory, bytes.
    pub memory: u64,
    /// How many pods.
    pub pods: u32,
}

impl Used {
    fn add(&mut self, ask: &Ask, card_memory: u64) {
        if ask.is_whole() {
            self.core += CORES_PER_GPU;
            self.memory += card_memory;
        } else {
            self.core += ask.core;
            self.memory += ask.memory;
        }
        self.pods += 1;
    }

    /// Whether nothing holds the card.
    pub fn is_empty(&self) -> bool {
        self.pods == 0
    }
}

/// The cluster as the extender sees it.
#[derive(Debug, Default)]
pub struct Cluster {
    /// Every card, by UUID.
    pub cards: BTreeMap<String, Card>,
    /// Bound pods holding cards, by UID.
    pub bound: HashMap<String, Holder>,
    /// Placements made at bind (or read back from annotations after a restart), by UID, with
    /// when they stop counting.
    pub assumed: HashMap<String, (Holder, Instant)>,
    /// Node → its cards' UUIDs, by index.
    nodes: BTreeMap<String, Vec<String>>,
}

/// Card UUID → what is taken of it.
pub type Usage = HashMap<String, Used>;

impl Cluster {
    /// Sets the cards (all of them, as listed or watched).
    pub fn set_cards(&mut self, cards: impl IntoIterator<Item = Card>) {
        self.cards = cards.into_iter().map(|c| (c.uuid.clone(), c)).collect();
        self.index_nodes();
    }

    /// Adds or changes one card.
    pub fn put_card(&mut self, card: Card) {
        self.cards.insert(card.uuid.clone(), card);
        self.index_nodes();
    }

    /// Removes one card.
    pub fn remove_card(&mut self, uuid: &str) {
        self.cards.remove(uuid);
        self.index_nodes();
    }

    fn index_nodes(&mut self) {
        self.nodes.clear();
        for card in self.cards.values() {
            self.nodes
                .entry(card.node.clone())
                .or_default()
                .push(card.uuid.clone());
        }
        for uuids in self.nodes.values_mut() {
            uuids.sort_by_key(|u| self_index(&self.cards, u));
        }
    }

    /// The cards of a node, by index.
    pub fn node_cards(&self, node: &str) -> impl Iterator<Item = &Card> {
        self.nodes
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|uuid| self.cards.get(uuid))
    }

    /// The nodes that have cards.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    /// Records that a pod was chosen cards at bind; it counts until `now + ttl` or until it
    /// is seen bound.
    pub fn assume(&mut self, uid: &str, holder: Holder, until: Instant) {
        self.assumed.insert(uid.to_string(), (holder, until));
    }

    /// Forgets an assumption (its bind failed).
    pub fn forget(&mut self, uid: &str) {
        self.assumed.remove(uid);
    }

    /// A pod seen bound with its cards: it counts from here on, no longer as assumed.
    pub fn put_bound(&mut self, uid: &str, holder: Holder) {
        self.assumed.remove(uid);
        self.bound.insert(uid.to_string(), holder);
    }

    /// A pod gone, finished or no longer holding cards.
    pub fn remove_pod(&mut self, uid: &str) {
        self.bound.remove(uid);
        self.assumed.remove(uid);
    }

    /// Drops assumptions past their TTL.
    pub fn expire(&mut self, now: Instant) {
        self.assumed.retain(|_, (_, until)| *until > now);
    }

    /// Every pod that counts now: the bound ones, and the assumed ones not seen bound yet
    /// whose TTL has not run out.
    fn live(&self, now: Instant) -> impl Iterator<Item = (&String, &Holder)> {
        self.bound.iter().chain(
            self.assumed
                .iter()
                .filter(move |(uid, (_, until))| *until > now && !self.bound.contains_key(*uid))
                .map(|(uid, (holder, _))| (uid, holder)),
        )
    }

    /// What is taken of each card now, leaving out the pod `except` (a pod being scheduled
    /// again must not compete with its own earlier placement).
    pub fn usage(&self, now: Instant, except: Option<&str>) -> Usage {
        let mut usage = Usage::new();
        let live = self
            .live(now)
            .filter(|(uid, _)| Some(uid.as_str()) != except);
        for (_, holder) in live {
            for uuid in &holder.cards {
                let memory = self.cards.get(uuid).map_or(0, |c| c.memory);
                usage
                    .entry(uuid.clone())
                    .or_default()
                    .add(&holder.ask, memory);
            }
        }
        usage
    }

    /// The holders of one card (bound and assumed), with their UIDs.
    pub fn holders_of<'a>(&'a self, uuid: &'a str, now: Instant) -> Vec<(&'a str, &'a Holder)> {
        self.live(now)
            .filter(|(_, h)| h.cards.iter().any(|c| c == uuid))
            .map(|(uid, h)| (uid.as_str(), h))
            .collect()
    }
}

fn self_index(cards: &BTreeMap<String, Card>, uuid: &str) -> u32 {
    cards.get(uuid).map_or(u32::MAX, |c| c.index)
}

/// How full a card is, 0 (empty) to 2 (all its core and all its memory).
pub fn load(card: &Card, used: &Used) -> f64 {
    let memory = if card.memory == 0 {
        0.0
    } else {
        used.memory as f64 / card.memory as f64
    };
    f64::from(used.core) / f64::from(CORES_PER_GPU) + memory
}

/// Whether a share fits on a card now.
pub fn share_fits(card: &Card, used: &Used, ask: &Ask) -> bool {
    card.healthy
        && used.core + ask.core <= CORES_PER_GPU
        && used.memory.saturating_add(ask.memory) <= card.memory
}

/// Why nothing on a node fits `ask`, or `None` when something does.
pub fn why_not(cluster: &Cluster, node: &str, ask: &Ask, usage: &Usage) -> Option<String> {
    let cards: Vec<&Card> = cluster.node_cards(node).collect();
    if cards.is_empty() {
        return Some("the node has no Tessera GPU (no GPU object names it)".into());
    }
    let healthy: Vec<&Card> = cards.iter().copied().filter(|c| c.healthy).collect();
    if healthy.is_empty() {
        return Some(format!(
            "all {} of the node's GPUs fail their health check",
            cards.len()
        ));
    }
    let none = Used::default();
    let used = |c: &Card| usage.get(&c.uuid).copied().unwrap_or(none);
    if ask.is_whole() {
        let empty = healthy.iter().filter(|c| used(c).is_empty()).count();
        if healthy.len() < ask.cards() {
            return Some(format!(
                "asks {} whole GPUs; the node has {} healthy",
                ask.cards(),
                healthy.len()
            ));
        }
        if ask.memory > healthy.iter().map(|c| c.memory).sum::<u64>() {
            return Some(format!(
                "asks {} GiB on {} whole GPUs, more than the node's cards have",
                ask.memory / MEMORY_UNIT,
                ask.cards()
            ));
        }
        return (empty < ask.cards()).then(|| {
            format!(
                "asks {} whole GPUs; {empty} of the node's {} healthy GPUs are free",
                ask.cards(),
                healthy.len()
            )
        });
    }
    let largest = healthy.iter().map(|c| c.memory).max().unwrap_or(0);
    if ask.memory > largest {
        return Some(format!(
            "asks {} GiB of GPU memory on one card, more than any card here has ({} GiB)",
            ask.memory.div_ceil(MEMORY_UNIT),
            largest / MEMORY_UNIT
        ));
    }
    if healthy.iter().any(|c| share_fits(c, &used(c), ask)) {
        return None;
    }
    let most = healthy
        .iter()
        .map(|c| {
            (
                CORES_PER_GPU - used(c).core.min(CORES_PER_GPU),
                c.memory.saturating_sub(used(c).memory),
            )
        })
        .max()
        .unwrap_or((0, 0));
    Some(format!(
        "no GPU has {ask} free (the freest has {} core and {} GiB)",
        most.0,
        most.1 / MEMORY_UNIT
    ))
}
