//! What the extender knows of the cluster: each card (from the `GPU` objects), each pod that
//! holds cards (bound, with `tessera.dev/gpu`), and the assume cache: cards chosen at bind,
//! counted at once until the pod is seen bound or the TTL runs out. A restarted extender
//! rebuilds the cache from the annotations of pods not bound yet.
//!
//! Pods that hold IDs without a record (placed by another scheduler, or by hand with
//! `nodeName`) are known from the holders each node's plugin publishes in its cards' `GPU`
//! status: those not counted through a record count as published.
//!
//! Nothing here locks a node: the state is this process's own, behind one mutex held only
//! while a verb computes; the API server is never asked to serialize placements.

use crate::ids::CORES_PER_GPU;
use crate::requests::Ask;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
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
    /// Adds `other`, saturating: published holders are read from objects, not trusted.
    fn plus(&mut self, other: &Used) {
        self.core = self.core.saturating_add(other.core);
        self.memory = self.memory.saturating_add(other.memory);
        self.pods = self.pods.saturating_add(other.pods);
    }

    /// Takes `other` away, saturating.
    pub fn minus(&mut self, other: &Used) {
        self.core = self.core.saturating_sub(other.core);
        self.memory = self.memory.saturating_sub(other.memory);
        self.pods = self.pods.saturating_sub(other.pods);
    }

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

    fn remove(&mut self, ask: &Ask, card_memory: u64) {
        let (core, memory) = if ask.is_whole() {
            (CORES_PER_GPU, card_memory)
        } else {
            (ask.core, ask.memory)
        };
        self.core = self.core.saturating_sub(core);
        self.memory = self.memory.saturating_sub(memory);
        self.pods = self.pods.saturating_sub(1);
    }

    /// Whether nothing holds the card.
    pub fn is_empty(&self) -> bool {
        self.pods == 0
    }
}

/// FNV-1a, for the per-card counts: card UUIDs are short and come from the cluster's own
/// GPU objects, so a cheap hash serves a verb over thousands of cards better than SipHash's
/// defence against chosen keys.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Card UUID → what is taken of it.
pub type Taken = HashMap<String, Used, BuildHasherDefault<Fnv>>;

/// The cluster as the extender sees it.
///
/// What each card has taken is kept as pods come and go (not summed at every call), so that
/// a verb over a thousand nodes reads one entry per card.
#[derive(Debug, Default)]
pub struct Cluster {
    /// Every card, by UUID.
    pub cards: BTreeMap<String, Card>,
    /// Bound pods holding cards, by UID.
    bound: HashMap<String, Holder>,
    /// Placements made at bind (or read back from annotations after a restart), by UID, with
    /// when they stop counting. One whose pod is also in `bound` does not count.
    assumed: HashMap<String, (Holder, Instant)>,
    /// Node → its cards, by index.
    nodes: HashMap<String, Vec<Card>>,
    /// Card UUID → its holders as its node's plugin published them: pod key → what it holds.
    published: HashMap<String, Vec<(String, Used)>>,
    /// Pod key → the cards whose published holders name it.
    published_pods: HashMap<String, Vec<String>>,
    /// Pod key → how many entries of `bound` and `assumed` hold it (a pod counted through its
    /// record is not counted again as published).
    recorded: HashMap<String, u32>,
    /// Card UUID → what its published holders without a record take of it.
    unrecorded: Taken,
    /// Card UUID → what the counted pods take of it: by record, and published without one.
    taken: Taken,
}

/// What is taken of each card, as one verb sees it: the cluster's count, less the pod being
/// placed (a pod scheduled again must not compete with its own earlier placement).
#[derive(Debug, Clone, Default)]
pub struct Usage<'a> {
    taken: Cow<'a, Taken>,
    less: HashMap<String, Used>,
}

impl Usage<'_> {
    /// What is taken of a card.
    pub fn get(&self, uuid: &str) -> Used {
        let mut used = self.taken.get(uuid).copied().unwrap_or_default();
        if self.less.is_empty() {
            return used;
        }
        if let Some(less) = self.less.get(uuid) {
            used.minus(less);
        }
        used
    }
}

impl From<HashMap<String, Used>> for Usage<'static> {
    fn from(taken: HashMap<String, Used>) -> Usage<'static> {
        Usage {
            taken: Cow::Owned(taken.into_iter().collect()),
            less: HashMap::new(),
        }
    }
}

impl Cluster {
    /// Sets the cards (all of them, as listed or watched).
    pub fn set_cards(&mut self, cards: impl IntoIterator<Item = Card>) {
        self.cards = cards.into_iter().map(|c| (c.uuid.clone(), c)).collect();
        let gone: Vec<String> = self
            .published
            .keys()
            .filter(|uuid| !self.cards.contains_key(*uuid))
            .cloned()
            .collect();
        for uuid in gone {
            self.set_published(&uuid, Vec::new());
        }
        self.reindex();
    }

    /// Adds or changes one card.
    pub fn put_card(&mut self, card: Card) {
        self.cards.insert(card.uuid.clone(), card);
        self.reindex();
    }

    /// Removes one card.
    pub fn remove_card(&mut self, uuid: &str) {
        self.cards.remove(uuid);
        self.set_published(uuid, Vec::new());
        self.reindex();
    }

    /// Rebuilds the node index and the counts (cards change seldom; a whole card's memory
    /// depends on them).
    fn reindex(&mut self) {
        self.nodes.clear();
        for card in self.cards.values() {
            self.nodes
                .entry(card.node.clone())
                .or_default()
                .push(card.clone());
        }
        for cards in self.nodes.values_mut() {
            cards.sort_by_key(|c| c.index);
        }
        self.recount();
    }

    fn recount(&mut self) {
        let mut taken = self.unrecorded.clone();
        let counted = self.bound.values().chain(
            self.assumed
                .iter()
                .filter(|(uid, _)| !self.bound.contains_key(*uid))
                .map(|(_, (holder, _))| holder),
        );
        for holder in counted {
            for uuid in &holder.cards {
                let memory = self.cards.get(uuid).map_or(0, |c| c.memory);
                taken
                    .entry(uuid.clone())
                    .or_default()
                    .add(&holder.ask, memory);
            }
        }
        self.taken = taken;
    }

    /// Sets the holders a card's node published (its `GPU` status), as pod key → what each
    /// holds.
    pub fn set_published(&mut self, uuid: &str, holders: Vec<(String, Used)>) {
        if let Some(old) = self.published.remove(uuid) {
            for (pod, _) in old {
                if let Some(cards) = self.published_pods.get_mut(&pod) {
                    cards.retain(|c| c != uuid);
                    if cards.is_empty() {
                        self.published_pods.remove(&pod);
                    }
                }
            }
        }
        for (pod, _) in &holders {
            self.published_pods
                .entry(pod.clone())
                .or_default()
                .push(uuid.to_string());
        }
        if !holders.is_empty() {
            self.published.insert(uuid.to_string(), holders);
        }
        self.refresh_unrecorded(uuid);
    }

    /// Sums a card's published holders that no record counts, into `unrecorded` and `taken`.
    fn refresh_unrecorded(&mut self, uuid: &str) {
        let mut sum = Used::default();
        for (pod, used) in self.published.get(uuid).into_iter().flatten() {
            if !self.recorded.contains_key(pod) {
                sum.plus(used);
            }
        }
        let old = if sum == Used::default() {
            self.unrecorded.remove(uuid)
        } else {
            self.unrecorded.insert(uuid.to_string(), sum)
        };
        let taken = self.taken.entry(uuid.to_string()).or_default();
        if let Some(old) = old {
            taken.minus(&old);
        }
        taken.plus(&sum);
    }

    /// One more (or one fewer) entry holds `pod` in `bound` or `assumed`; when it starts or
    /// stops being recorded, its published holdings stop or start counting.
    fn track(&mut self, pod: &str, more: bool) {
        let changed = if more {
            let n = self.recorded.entry(pod.to_string()).or_default();
            *n += 1;
            *n == 1
        } else {
            match self.recorded.get_mut(pod) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    self.recorded.remove(pod);
                    true
                }
                None => false,
            }
        };
        if changed {
            for uuid in self.published_pods.get(pod).cloned().unwrap_or_default() {
                self.refresh_unrecorded(&uuid);
            }
        }
    }

    fn count(&mut self, holder: &Holder, counts: bool) {
        for uuid in &holder.cards {
            let memory = self.cards.get(uuid).map_or(0, |c| c.memory);
            let used = self.taken.entry(uuid.clone()).or_default();
            if counts {
                used.add(&holder.ask, memory);
            } else {
                used.remove(&holder.ask, memory);
            }
        }
    }

    /// The cards of a node, by index.
    pub fn node_cards(&self, node: &str) -> impl Iterator<Item = &Card> {
        self.nodes.get(node).into_iter().flatten()
    }

    /// A node's cards, by index, each with what is taken of it: read once per verb and node.
    pub fn with_use(&self, node: &str, usage: &Usage) -> Vec<(&Card, Used)> {
        self.node_cards(node)
            .map(|c| (c, usage.get(&c.uuid)))
            .collect()
    }

    /// The nodes that have cards.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    /// Records that a pod was chosen cards at bind; it counts until `until` or until it is
    /// seen bound.
    pub fn assume(&mut self, uid: &str, holder: Holder, until: Instant) {
        let bound = self.bound.contains_key(uid);
        if !bound {
            self.count(&holder, true);
        }
        self.track(&holder.pod, true);
        if let Some((old, _)) = self.assumed.insert(uid.to_string(), (holder, until)) {
            if !bound {
                self.count(&old, false);
            }
            self.track(&old.pod, false);
        }
    }

    /// Whether a pod's placement is assumed.
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.assumed.contains_key(uid)
    }

    /// Forgets an assumption (its bind failed, or its TTL ran out).
    pub fn forget(&mut self, uid: &str) {
        if let Some((old, _)) = self.assumed.remove(uid) {
            if !self.bound.contains_key(uid) {
                self.count(&old, false);
            }
            self.track(&old.pod, false);
        }
    }

    /// A pod seen bound with its cards: it counts from here on, no longer as assumed.
    pub fn put_bound(&mut self, uid: &str, holder: Holder) {
        self.unbind(uid);
        self.forget(uid);
        self.count(&holder, true);
        self.track(&holder.pod, true);
        self.bound.insert(uid.to_string(), holder);
    }

    /// A pod no longer seen bound with cards (its assumption, if any, counts again).
    pub fn unbind(&mut self, uid: &str) {
        if let Some(old) = self.bound.remove(uid) {
            self.count(&old, false);
            if let Some((assumed, _)) = self.assumed.get(uid).cloned() {
                self.count(&assumed, true);
            }
            self.track(&old.pod, false);
        }
    }

    /// Forgets every bound pod (before a fresh list).
    pub fn clear_bound(&mut self) {
        let pods: Vec<String> = self.bound.drain().map(|(_, h)| h.pod).collect();
        for pod in pods {
            self.track(&pod, false);
        }
        self.recount();
    }

    /// A pod gone, finished or no longer holding cards.
    pub fn remove_pod(&mut self, uid: &str) {
        self.unbind(uid);
        self.forget(uid);
    }

    /// Drops assumptions past their TTL.
    pub fn expire(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .assumed
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in expired {
            self.forget(&uid);
        }
    }

    /// What is taken of each card, leaving out the pod `except`. Call [`Cluster::expire`]
    /// first: assumptions past their TTL count until it runs.
    pub fn usage(&self, except: Option<&str>) -> Usage<'_> {
        let mut less = HashMap::new();
        let own = except.and_then(|uid| {
            self.bound
                .get(uid)
                .or_else(|| self.assumed.get(uid).map(|(holder, _)| holder))
        });
        if let Some(holder) = own {
            for uuid in &holder.cards {
                let memory = self.cards.get(uuid).map_or(0, |c| c.memory);
                less.entry(uuid.clone())
                    .or_insert_with(Used::default)
                    .add(&holder.ask, memory);
            }
        }
        Usage {
            taken: Cow::Borrowed(&self.taken),
            less,
        }
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

    /// The holders of one card (bound and assumed), with their UIDs.
    pub fn holders_of<'a>(&'a self, uuid: &'a str, now: Instant) -> Vec<(&'a str, &'a Holder)> {
        self.live(now)
            .filter(|(_, h)| h.cards.iter().any(|c| c == uuid))
            .map(|(uid, h)| (uid.as_str(), h))
            .collect()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extender::policy::Policy;
    use crate::ids::MEMORY_UNIT;
    use std::time::Duration;

    fn card_of(holder: &Holder) -> String {
        holder.cards[0].clone()
    }

    #[test]
    fn pods_without_a_record_count_as_their_node_published_them() {
        let mut cluster = Cluster::default();
        cluster.set_cards([Card {
            uuid: "GPU-0".into(),
            node: "a".into(),
            index: 0,
            memory: 40 * MEMORY_UNIT,
            healthy: true,
        }]);
        let by_hand = Used {
            core: 60,
            memory: 8 * MEMORY_UNIT,
            pods: 1,
        };
        let placed = Used {
            core: 20,
            memory: 4 * MEMORY_UNIT,
            pods: 1,
        };
        cluster.set_published(
            "GPU-0",
            vec![("ns/by-hand".into(), by_hand), ("ns/placed".into(), placed)],
        );
        // Neither has a record yet: both count.
        assert_eq!(cluster.usage(None).get("GPU-0").core, 80);
        // "placed" is seen bound with its record: it counts once, through the record.
        let holder = Holder {
            pod: "ns/placed".into(),
            cards: vec!["GPU-0".into()],
            ask: Ask {
                core: 20,
                memory: 4 * MEMORY_UNIT,
            },
            priority: 0,
        };
        cluster.put_bound("uid-placed", holder);
        let used = cluster.usage(None).get("GPU-0");
        assert_eq!(
            (used.core, used.memory, used.pods),
            (80, 12 * MEMORY_UNIT, 2)
        );
        // A 30-core pod no longer fits; the reason counts the pod placed by hand.
        let ask = Ask {
            core: 30,
            memory: MEMORY_UNIT,
        };
        let usage = cluster.usage(None);
        let cards = cluster.with_use("a", &usage);
        let why = crate::extender::fit::fit(&cards, &ask, Policy::Binpack).unwrap_err();
        assert!(why.reason().contains("20 core"), "{why:?}");
        // The node stops publishing the pod placed by hand: its share is free again.
        cluster.set_published("GPU-0", vec![("ns/placed".into(), placed)]);
        assert_eq!(cluster.usage(None).get("GPU-0").core, 20);
        cluster.remove_card("GPU-0");
        assert!(cluster.unrecorded.is_empty());
    }

    #[test]
    fn counts_kept_along_the_way_equal_counts_made_afresh() {
        let mut cluster = Cluster::default();
        cluster.set_cards((0..3).map(|index| Card {
            uuid: format!("GPU-{index}"),
            node: "a".into(),
            index,
            memory: 40 * MEMORY_UNIT,
            healthy: true,
        }));
        let start = Instant::now();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for step in 0..2000u32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let uid = format!("u{}", seed % 7);
            let card = format!("GPU-{}", (seed >> 8) % 3);
            let core = if (seed >> 16).is_multiple_of(5) {
                100
            } else {
                10
            };
            let holder = Holder {
                pod: uid.clone(),
                cards: vec![card],
                ask: Ask {
                    core,
                    memory: MEMORY_UNIT,
                },
                priority: 0,
            };
            let now = start + Duration::from_millis(u64::from(step));
            let published = Used {
                core: 10,
                memory: MEMORY_UNIT,
                pods: 1,
            };
            match (seed >> 24) % 8 {
                // The node publishes this pod on the card, or nothing on it.
                6 => cluster.set_published(&card_of(&holder), vec![(uid.clone(), published)]),
                7 => cluster.set_published(&card_of(&holder), Vec::new()),
                0 => cluster.assume(&uid, holder, now + Duration::from_millis(30)),
                1 => cluster.put_bound(&uid, holder),
                2 => cluster.forget(&uid),
                3 => cluster.unbind(&uid),
                4 => cluster.remove_pod(&uid),
                _ => cluster.expire(now),
            }
            let kept = cluster.taken.clone();
            let mut unrecorded = Taken::default();
            for (uuid, holders) in &cluster.published {
                for (pod, used) in holders {
                    let recorded = cluster.bound.values().any(|h| h.pod == *pod)
                        || cluster.assumed.values().any(|(h, _)| h.pod == *pod);
                    if !recorded {
                        unrecorded.entry(uuid.clone()).or_default().plus(used);
                    }
                }
            }
            assert_eq!(unrecorded, cluster.unrecorded, "step {step}");
            cluster.recount();
            let fresh = &cluster.taken;
            for uuid in cluster.cards.keys() {
                let (a, b) = (
                    kept.get(uuid).copied().unwrap_or_default(),
                    fresh.get(uuid).copied().unwrap_or_default(),
                );
                assert_eq!(a, b, "step {step}: {uuid}");
            }
        }
    }
}
