//! The two choices: which card of a node (bind, by the card policy) and how good each node is
//! (prioritize, by the node policy).
//!
//! Card: `binpack` takes the fullest card the pod fits on, `spread` the emptiest; whole-card
//! requests take empty cards only, by index. Node: `binpack` prefers the node whose chosen
//! card ends fullest (with the pod's card policy `binpack`; otherwise the fullest node), so
//! that partly used cards fill before a card is opened; `spread` prefers the node whose
//! chosen card is emptiest now, then the emptiest node, so that load is even card by card.

use super::cluster::{load, share_fits, Card, Cluster, Usage, Used};
use super::policy::{Placement, Policy};
use super::protocol::MAX_SCORE;
use crate::requests::Ask;

/// A node's cards, by index, each with what is taken of it: read once per verb and node.
fn with_use<'a>(cluster: &'a Cluster, node: &str, usage: &Usage) -> Vec<(&'a Card, Used)> {
    cluster
        .node_cards(node)
        .map(|c| (c, usage.get(&c.uuid)))
        .collect()
}

/// Which of `cards` (by position) `ask` would take under `policy`.
fn choose_among(cards: &[(&Card, Used)], ask: &Ask, policy: Policy) -> Option<Vec<usize>> {
    if ask.is_whole() {
        let empty: Vec<usize> = (0..cards.len())
            .filter(|&i| cards[i].0.healthy && cards[i].1.is_empty())
            .take(ask.cards())
            .collect();
        let memory: u64 = empty.iter().map(|&i| cards[i].0.memory).sum();
        return (empty.len() == ask.cards() && ask.memory <= memory).then_some(empty);
    }
    let fitting = (0..cards.len())
        .filter(|&i| share_fits(cards[i].0, &cards[i].1, ask))
        .map(|i| (i, load(cards[i].0, &cards[i].1)));
    // Ties go to the lower index: cards are by index and the first best is kept.
    let best = match policy {
        Policy::Binpack => fitting.fold(None, |best: Option<(usize, f64)>, (i, l)| match best {
            Some((_, b)) if b >= l => best,
            _ => Some((i, l)),
        }),
        Policy::Spread => fitting.fold(None, |best: Option<(usize, f64)>, (i, l)| match best {
            Some((_, b)) if b <= l => best,
            _ => Some((i, l)),
        }),
    };
    best.map(|(i, _)| vec![i])
}

/// The cards of `node` that `ask` would take under `policy`, or `None` when it does not fit.
pub fn choose_cards(
    cluster: &Cluster,
    node: &str,
    ask: &Ask,
    policy: Policy,
    usage: &Usage,
) -> Option<Vec<String>> {
    let cards = with_use(cluster, node, usage);
    let chosen = choose_among(&cards, ask, policy)?;
    Some(
        chosen
            .into_iter()
            .map(|i| cards[i].0.uuid.clone())
            .collect(),
    )
}

/// The weight of the first of two loads in one key.
const LEXICOGRAPHIC: f64 = 1000.0;

/// How much the node policy likes `node` for `ask` (higher is better), or `None` when the
/// pod does not fit there.
pub fn node_key(
    cluster: &Cluster,
    node: &str,
    ask: &Ask,
    placement: Placement,
    usage: &Usage,
) -> Option<f64> {
    let cards = with_use(cluster, node, usage);
    let chosen = choose_among(&cards, ask, placement.card)?;
    let healthy = cards.iter().filter(|(c, _)| c.healthy);
    let count = healthy.clone().count().max(1);
    let node_load = healthy.map(|(c, used)| load(c, used)).sum::<f64>() / count as f64;
    let card_load = chosen
        .iter()
        .map(|&i| load(cards[i].0, &cards[i].1))
        .fold(0.0, f64::max);
    // Node loads lie in 0..=2 and card loads differ by at least 1/100 (one core) when they
    // differ at all: weighting the card's by 1000 orders by it first, then by the node's.
    Some(match placement.node {
        Policy::Binpack if placement.card == Policy::Binpack && !ask.is_whole() => {
            LEXICOGRAPHIC * card_load + node_load
        }
        Policy::Binpack => node_load,
        Policy::Spread => -(LEXICOGRAPHIC * card_load + node_load),
    })
}

/// Scores from keys: the best key gets [`MAX_SCORE`], the others 0 to `MAX_SCORE - 1` in
/// proportion, so that only the best nodes (not merely close ones) get the top score.
pub fn scores(keys: &[Option<f64>]) -> Vec<i64> {
    let present = keys.iter().flatten();
    let best = present.clone().copied().fold(f64::NEG_INFINITY, f64::max);
    let worst = present.copied().fold(f64::INFINITY, f64::min);
    keys.iter()
        .map(|key| match key {
            None => 0,
            Some(k) if *k >= best => MAX_SCORE,
            Some(k) => {
                let span = best - worst;
                let below = ((MAX_SCORE - 1) as f64 * (k - worst) / span).floor() as i64;
                below.clamp(0, MAX_SCORE - 1)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MEMORY_UNIT;

    fn cluster(nodes: &[(&str, usize)]) -> Cluster {
        let mut cluster = Cluster::default();
        cluster.set_cards(nodes.iter().flat_map(|(node, count)| {
            (0..*count).map(move |i| Card {
                uuid: format!("GPU-{node}-{i}"),
                node: node.to_string(),
                index: i as u32,
                memory: 40 * MEMORY_UNIT,
                healthy: true,
            })
        }));
        cluster
    }

    fn used(core: u32, gib: u64) -> Used {
        Used {
            core,
            memory: gib * MEMORY_UNIT,
            pods: 1,
        }
    }

    #[test]
    fn binpack_takes_the_fullest_card_and_spread_the_emptiest() {
        let cluster = cluster(&[("a", 3)]);
        let usage: Usage = [("GPU-a-0", used(60, 4)), ("GPU-a-1", used(20, 4))]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<std::collections::HashMap<_, _>>()
            .into();
        let ask = Ask {
            core: 30,
            memory: 4 * MEMORY_UNIT,
        };
        let pick = |policy| choose_cards(&cluster, "a", &ask, policy, &usage).unwrap();
        assert_eq!(pick(Policy::Binpack), ["GPU-a-0"]);
        assert_eq!(pick(Policy::Spread), ["GPU-a-2"]);
        let big = Ask {
            core: 50,
            memory: MEMORY_UNIT,
        };
        assert_eq!(
            choose_cards(&cluster, "a", &big, Policy::Binpack, &usage).unwrap(),
            ["GPU-a-1"]
        );
        let whole = Ask {
            core: 100,
            memory: 0,
        };
        assert_eq!(
            choose_cards(&cluster, "a", &whole, Policy::Binpack, &usage).unwrap(),
            ["GPU-a-2"]
        );
        let two = Ask {
            core: 200,
            memory: 0,
        };
        assert_eq!(
            choose_cards(&cluster, "a", &two, Policy::Spread, &usage),
            None
        );
    }

    #[test]
    fn only_the_best_key_scores_the_maximum() {
        assert_eq!(
            scores(&[Some(1.0), Some(0.5), None, Some(0.0)]),
            [10, 4, 0, 0]
        );
        assert_eq!(scores(&[Some(2.0), Some(2.0)]), [10, 10]);
        assert_eq!(scores(&[Some(0.999), Some(1.0)])[0], 0);
    }
}
