//! Who holds what on this node: one entry per container that got our devices and was
//! started, by the name of its controld container.

use std::collections::BTreeMap;
use std::time::Instant;

/// One container holding a share of a card (or whole cards).
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    /// Its controld container (for whole cards: the same derived name, with no container).
    pub name: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod.
    pub pod: String,
    /// The container in the pod.
    pub container: String,
    /// Its cards, by UUID.
    pub cards: Vec<String>,
    /// Its core request: percent of one card, or 100 per whole card.
    pub core: u32,
    /// Its memory cap in bytes (whole cards: their memory).
    pub memory: u64,
    /// Its `tessera.dev/gpu-memory` request in bytes: the most a resize may set.
    pub requested: u64,
    /// Its compute policy as controld writes it, `whole` for whole cards.
    pub compute: String,
    /// `online` or `offline`.
    pub priority: String,
    /// Whether it has whole cards (no controld container).
    pub whole: bool,
    /// When the plugin recorded it: a reconcile that listed the pods before this does not
    /// remove it.
    pub since: Instant,
}

/// The table.
#[derive(Debug, Default)]
pub struct Holders {
    by_name: BTreeMap<String, Holder>,
}

impl Holders {
    /// Records or replaces a holder.
    pub fn insert(&mut self, holder: Holder) {
        self.by_name.insert(holder.name.clone(), holder);
    }

    /// Forgets a holder.
    pub fn remove(&mut self, name: &str) -> Option<Holder> {
        self.by_name.remove(name)
    }

    /// A holder by name.
    pub fn get(&self, name: &str) -> Option<&Holder> {
        self.by_name.get(name)
    }

    /// A holder by name, to change.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Holder> {
        self.by_name.get_mut(name)
    }

    /// Every holder.
    pub fn all(&self) -> impl Iterator<Item = &Holder> {
        self.by_name.values()
    }

    /// The memory held on a card, in bytes, leaving `except` out.
    pub fn memory_on(&self, uuid: &str, except: &str) -> u64 {
        self.all()
            .filter(|h| h.name != except && h.cards.iter().any(|c| c == uuid))
            .map(|h| if h.whole { 0 } else { h.memory })
            .sum()
    }
}
