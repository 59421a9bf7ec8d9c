//! Which of the scheduler's proposed victims to evict on one node: kube-scheduler counts
//! `tessera.dev/gpu-core` per node, so its proposal may free enough on the node and still
//! not on any one card. Here a share needs one card freed enough, whole cards need cards
//! emptied; the fewest victims win, lowest priority and largest first.

use super::cluster::{load, share_fits, Cluster, Usage, Used};
use crate::requests::Ask;
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
        let mut used = usage.get(&card.uuid);
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
                let one = Used {
                    core: h.ask.core,
                    memory: h.ask.memory,
                    pods: 1,
                };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extender::cluster::{Card, Holder};
    use crate::ids::MEMORY_UNIT;

    #[test]
    fn victims_free_one_card_and_never_a_higher_priority_pod() {
        let mut cluster = Cluster::default();
        cluster.set_cards((0..2).map(|index| Card {
            uuid: format!("GPU-a{index}"),
            node: "a".into(),
            index,
            memory: 40 * MEMORY_UNIT,
            healthy: true,
        }));
        let holder = |card: u32, core: u32, gib: u64, priority: i32| Holder {
            pod: format!("ns/{card}-{core}"),
            cards: vec![format!("GPU-a{card}")],
            ask: Ask {
                core,
                memory: gib * MEMORY_UNIT,
            },
            priority,
        };
        // Card 0: 50 + 40 core of priority 0. Card 1: 60 of priority 0 and 30 of 500.
        cluster.put_bound("u1", holder(0, 50, 4, 0));
        cluster.put_bound("u2", holder(0, 40, 30, 0));
        cluster.put_bound("u3", holder(1, 60, 4, 0));
        cluster.put_bound("u4", holder(1, 30, 4, 500));
        let now = Instant::now();
        let usage = cluster.usage(None);
        let all: BTreeSet<&str> = ["u1", "u2", "u3", "u4"].into();
        // 50 core: one victim frees it on either card; on card 0 (the first) the largest
        // goes, core and memory counted as shares of the card: u2's 40 core and 30 GiB.
        let ask = Ask {
            core: 50,
            memory: 4 * MEMORY_UNIT,
        };
        assert_eq!(
            victims(&cluster, "a", &ask, 100, &all, &usage, now),
            Some(vec!["u2".into()])
        );
        // 37 GiB: card 1 cannot free that much memory (u4 outranks the pod), card 0 can,
        // by losing both its pods.
        let ask = Ask {
            core: 10,
            memory: 37 * MEMORY_UNIT,
        };
        assert_eq!(
            victims(&cluster, "a", &ask, 100, &all, &usage, now),
            Some(vec!["u1".into(), "u2".into()])
        );
        // 80 core: card 0 must lose both; card 1 cannot, its 30 outranks the pod.
        let ask = Ask {
            core: 80,
            memory: MEMORY_UNIT,
        };
        assert_eq!(
            victims(&cluster, "a", &ask, 100, &all, &usage, now),
            Some(vec!["u1".into(), "u2".into()])
        );
        // Only what the scheduler proposed: without u2, no card frees 80.
        let some: BTreeSet<&str> = ["u1", "u3", "u4"].into();
        assert_eq!(victims(&cluster, "a", &ask, 100, &some, &usage, now), None);
        // A whole card: the one whose holders may all go.
        let whole = Ask {
            core: 100,
            memory: 0,
        };
        assert_eq!(
            victims(&cluster, "a", &whole, 100, &all, &usage, now),
            Some(vec!["u1".into(), "u2".into()])
        );
    }
}
