//! The two choices: which card of a node (bind, by the card policy) and how good each node is
//! (prioritize, by the node policy).
//!
//! Card: [`super::fit`], the judgement every verb shares (`binpack` takes the fullest card
//! the pod fits on, `spread` the emptiest; whole cards the empty ones that fit best). Node: `binpack` prefers the node whose chosen
//! card ends fullest (with the pod's card policy `binpack`; otherwise the fullest node), so
//! that partly used cards fill before a card is opened; `spread` prefers the node whose
//! chosen card is emptiest now, then the emptiest node, so that load is even card by card.

use super::cluster::{load, Cluster, Usage};
use super::fit::{fit, Misfit};
use super::policy::{Placement, Policy};
use super::protocol::MAX_SCORE;
use crate::requests::Ask;

/// The cards of `node` that `ask` would take under `policy`, or why it does not fit there.
pub fn choose_cards(
    cluster: &Cluster,
    node: &str,
    ask: &Ask,
    policy: Policy,
    usage: &Usage,
) -> Result<Vec<String>, Misfit> {
    let cards = cluster.with_use(node, usage);
    let chosen = fit(&cards, ask, policy)?;
    Ok(chosen
        .into_iter()
        .map(|i| cards[i].0.uuid.clone())
        .collect())
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
    let cards = cluster.with_use(node, usage);
    let chosen = fit(&cards, ask, placement.card).ok()?;
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
    use crate::extender::cluster::{Card, Used};
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
        assert!(matches!(
            choose_cards(&cluster, "a", &two, Policy::Spread, &usage),
            Err(Misfit::Taken(_))
        ));
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
