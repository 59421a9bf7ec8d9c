//! Which of the scheduler's proposed victims to evict on one node: kube-scheduler counts
//! `tessera.dev/gpu-core` per node, so its proposal may free enough on the node and still
//! not on any one card. Here a share needs one card freed enough, whole cards need cards
//! emptied; the fewest victims win, lowest priority and largest first.

use super::ask::Ask;
use super::cluster::{load, share_fits, Cluster, Usage, Used};
use std::collections::BTreeSet;
use std::time::Instant;

/// The UIDs to evict on `node` so that `ask` fits, taken only from `allowed` and only of
/// priority below `priority`; `None` when no such set exists.
pub fn victims(
    cluster: &Cluster,
    node: &str,
    ask: &Ask,
    priority: i32,
    allowed: &BTreeSet<&str>,
    usage: &Usage,
    now: Instant,
) -> Option<Vec<String>> {
    // Per healthy card: the victims that make room there, or None.
    let mut per_card: Vec<Vec<String>> = Vec::new();
    for card in cluster.node_cards(node).filter(|c| c.healthy) {
        let mut used = usage.get(&card.uuid).copied().unwrap_or_default();
        let mut holders = cluster.holders_of(&card.uuid, now);
        let evictable =
            |uid: &str, h: &super::cluster::Holder| allowed.contains(uid) && h.priority < priority;
        if ask.is_whole() {
            if holders.iter().all(|(uid, h)| evictable(uid, h)) {
                per_card.push(holders.iter().map(|(uid, _)| uid.to_string()).collect());
            }
            continue;
        }
        holders.retain(|(uid, h)| evictable(uid, h));
        // Lowest priority first, then the largest, so that few go.
        holders.sort_by(|(_, a), (_, b)| {
            let size = |h: &super::cluster::Holder| {
                let mut one = Used::default();
                one.core = h.ask.core;
                one.memory = h.ask.memory;
                load(card, &one)
            };
            a.priority
                .cmp(&b.priority)
                .then(size(b).total_cmp(&size(a)))
        });
        let mut chosen = Vec::new();
        let mut fits = share_fits(card, &used, ask);
        for (uid, h) in holders {
            if fits {
                break;
            }
            let (core, memory) = if h.ask.is_whole() {
                (crate::ids::CORES_PER_GPU, card.memory)
            } else {
                (h.ask.core, h.ask.memory)
            };
            used.core = used.core.saturating_sub(core);
            used.memory = used.memory.saturating_sub(memory);
            used.pods = used.pods.saturating_sub(1);
            chosen.push(uid.to_string());
            fits = share_fits(card, &used, ask);
        }
        if fits {
            per_card.push(chosen);
        }
    }
    per_card.sort_by_key(Vec::len);
    if per_card.len() < ask.cards() {
        return None;
    }
    let mut out: Vec<String> = per_card.into_iter().take(ask.cards()).flatten().collect();
    out.sort();
    out.dedup();
    Some(out)
}
