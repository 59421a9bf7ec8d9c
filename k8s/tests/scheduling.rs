//! Placement on the simulated cluster, through the real extender over HTTP: binpack and
//! spread at node and card level (criterion 2), and races — concurrent pods, failing binds
//! and an extender restart (criterion 3).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tessera_k8s::extender::policy::{Config, Placement, Policy};
use tessera_k8s::sim::scheduler::Outcome;
use tessera_k8s::sim::{PodSpec, SimCluster, CARD_MEMORY};

const NS: &str = "load";

/// A small seeded generator (xorshift64), so that each run sees the same pods.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[(self.next() % of.len() as u64) as usize]
    }
}

/// `count` pods of mixed sizes, one in twenty of a whole card.
fn mixed_pods(count: usize, seed: u64) -> Vec<PodSpec> {
    let mut rng = Seeded(seed);
    (0..count)
        .map(|i| {
            if i % 20 == 7 {
                PodSpec {
                    core: 100,
                    ..Default::default()
                }
            } else {
                PodSpec {
                    core: rng.pick(&[5, 10, 15, 20, 25]),
                    memory_gib: rng.pick(&[1, 2, 4]),
                    ..Default::default()
                }
            }
        })
        .collect()
}

fn both(policy: Policy) -> Config {
    let level = Placement {
        node: policy,
        card: policy,
    };
    Config {
        online: level,
        offline: level,
        ..Config::default()
    }
}

/// Every pod placed or refused with a reason; no double allocation; no card over its core or
/// memory; whole cards alone on their cards. Returns each pod's outcome.
async fn run_and_check(cluster: &SimCluster, pods: &[PodSpec]) -> Vec<Outcome> {
    for (i, spec) in pods.iter().enumerate() {
        cluster.add_pod(NS, &format!("p{i:03}"), spec);
    }
    let mut outcomes = Vec::new();
    for i in 0..pods.len() {
        outcomes.push(cluster.schedule(NS, &format!("p{i:03}")).await);
    }
    check(cluster, pods, &outcomes);
    outcomes
}

fn check(cluster: &SimCluster, pods: &[PodSpec], outcomes: &[Outcome]) {
    assert_eq!(
        cluster.conflicts(),
        Vec::<String>::new(),
        "the nodes found double allocations"
    );
    for (i, outcome) in outcomes.iter().enumerate() {
        if let Outcome::Unschedulable(why) = outcome {
            assert!(
                !why.trim().is_empty(),
                "p{i:03} unschedulable without a reason"
            );
        }
    }
    for (node, index, core, memory, _) in cluster.cards() {
        assert!(core <= 100, "{node}/{index}: {core} core");
        assert!(memory <= CARD_MEMORY, "{node}/{index}: {memory} bytes");
    }
    // From the API server's own record, apart from the nodes' accounting: per card, the sum
    // of what its bound pods ask.
    let mut per_card: BTreeMap<String, (u32, u64, usize, bool)> = BTreeMap::new();
    for ((_, name), pod) in cluster.api.pods() {
        let Some(cards) = pod["metadata"]["annotations"]["tessera.dev/gpu"].as_str() else {
            continue;
        };
        if pod["spec"]["nodeName"].as_str().is_none() {
            continue;
        }
        let i: usize = name[1..].parse().unwrap();
        let whole = pods[i].core == 100;
        for uuid in cards.split(',') {
            let entry = per_card.entry(uuid.to_string()).or_default();
            entry.0 += pods[i].core.min(100);
            entry.1 += pods[i].memory_gib << 30;
            entry.2 += 1;
            entry.3 |= whole;
        }
    }
    for (uuid, (core, memory, count, whole)) in per_card {
        assert!(
            core <= 100 && memory <= CARD_MEMORY,
            "{uuid}: {core} core, {memory} bytes"
        );
        assert!(
            !whole || count == 1,
            "{uuid}: a whole-card pod shares its card with {count}"
        );
    }
}

fn placed(outcomes: &[Outcome]) -> usize {
    outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Placed(_)))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binpack_fills_few_cards_and_spread_evens_the_load() {
    let pods = mixed_pods(300, 0x5eed_0001);

    let packed = SimCluster::start(20, 4, both(Policy::Binpack))
        .await
        .unwrap();
    let outcomes = run_and_check(&packed, &pods).await;
    assert_eq!(
        placed(&outcomes),
        pods.len(),
        "all fit when packed: {outcomes:?}"
    );
    let cards = packed.cards();
    let used: Vec<_> = cards.iter().filter(|c| c.4 > 0).collect();
    let nodes: BTreeSet<&String> = used.iter().map(|c| &c.0).collect();
    let share_core: u32 = pods.iter().filter(|p| p.core < 100).map(|p| p.core).sum();
    let whole = pods.iter().filter(|p| p.core == 100).count();
    let lower_bound = share_core.div_ceil(100) as usize + whole;
    eprintln!(
        "binpack: {} cards on {} nodes (a lower bound: {lower_bound} cards)",
        used.len(),
        nodes.len()
    );
    // Nodes fill one after the other: no more nodes than the cards need, and one partly
    // filled at most.
    assert!(
        nodes.len() <= used.len().div_ceil(4) + 1,
        "{} nodes for {} cards",
        nodes.len(),
        used.len()
    );
    // Items of at most 25 core leave under 25 free on every packed card.
    assert!(
        used.len() <= (share_core as usize).div_ceil(76) + whole + 1,
        "{} cards",
        used.len()
    );

    let spread = SimCluster::start(20, 4, both(Policy::Spread))
        .await
        .unwrap();
    let outcomes = run_and_check(&spread, &pods).await;
    let cards = spread.cards();
    assert!(cards.iter().all(|c| c.4 > 0), "spread uses every card");
    assert!(
        used.len() < cards.len(),
        "binpack uses fewer cards than spread"
    );
    // Whole cards land only on empty cards: spread leaves none once every card holds a pod,
    // so the later whole-card pods wait, saying why.
    for (i, outcome) in outcomes.iter().enumerate() {
        if let Outcome::Unschedulable(why) = outcome {
            assert_eq!(pods[i].core, 100, "p{i:03}: {why}");
            assert!(why.contains("whole GPUs"), "p{i:03}: {why}");
        }
    }
    // Spread's per-card load (core and memory, each as a share of the card) differs by at
    // most one pod's step, on the cards that hold shares.
    let loads: Vec<f64> = cards
        .iter()
        // A card held by one pod of 100 core is a whole card.
        .filter(|c| !(c.2 == 100 && c.4 == 1))
        .map(|c| f64::from(c.2) / 100.0 + c.3 as f64 / CARD_MEMORY as f64)
        .collect();
    let step = pods
        .iter()
        .filter(|p| p.core < 100)
        .map(|p| f64::from(p.core) / 100.0 + (p.memory_gib << 30) as f64 / CARD_MEMORY as f64)
        .fold(0.0, f64::max);
    let (min, max) = loads
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), l| (lo.min(*l), hi.max(*l)));
    eprintln!("spread: per-card load from {min:.3} to {max:.3}, one step is {step:.3}");
    assert!(
        max - min <= step + 1e-9,
        "spread: loads from {min} to {max}, step {step}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_together_with_failing_binds_and_a_restart_never_share_a_card_twice() {
    let cluster = Arc::new(SimCluster::start(20, 4, Config::default()).await.unwrap());
    cluster.api.fail_bindings(10, 0xfa11);
    let pods = mixed_pods(200, 0x5eed_0003);
    for (i, spec) in pods.iter().enumerate() {
        let mut spec = spec.clone();
        if i % 2 == 1 {
            spec.annotations
                .push(("tessera.dev/priority".into(), "offline".into()));
        }
        cluster.add_pod(NS, &format!("p{i:03}"), &spec);
    }
    // Sixteen binding cycles at once, the extender killed and restarted midway.
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let outcomes = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (cluster, next, outcomes) = (cluster.clone(), next.clone(), outcomes.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= 200 {
                    return;
                }
                let outcome = cluster.schedule(NS, &format!("p{i:03}")).await;
                outcomes.lock().unwrap().insert(i, outcome);
            }
        }));
    }
    while outcomes.lock().unwrap().len() < 100 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    cluster.restart_extender().await.unwrap();
    for worker in workers {
        worker.await.unwrap();
    }
    let outcomes: Vec<Outcome> = outcomes.lock().unwrap().values().cloned().collect();
    assert_eq!(outcomes.len(), 200);
    check(&cluster, &pods, &outcomes);
    assert!(cluster.api.bindings_refused() > 0, "some bindings failed");
    eprintln!(
        "{} placed, {} bindings refused",
        placed(&outcomes),
        cluster.api.bindings_refused()
    );
    for (i, outcome) in outcomes.iter().enumerate() {
        if let Outcome::Unschedulable(why) = outcome {
            eprintln!("p{i:03} ({} core): {why}", pods[i].core);
        }
    }
}

/// The fewest cards that hold these shares (core, GiB), by trying every assignment.
fn fewest_cards(items: &[(u32, u64)]) -> usize {
    fn place(items: &[(u32, u64)], bins: &mut Vec<(u32, u64)>, best: &mut usize) {
        if bins.len() >= *best {
            return;
        }
        let Some((&(core, gib), rest)) = items.split_first() else {
            *best = bins.len();
            return;
        };
        for i in 0..bins.len() {
            if bins[i].0 + core <= 100 && bins[i].1 + gib <= 40 {
                bins[i].0 += core;
                bins[i].1 += gib;
                place(rest, bins, best);
                bins[i].0 -= core;
                bins[i].1 -= gib;
            }
        }
        bins.push((core, gib));
        place(rest, bins, best);
        bins.pop();
    }
    let mut best = items.len();
    place(items, &mut Vec::new(), &mut best);
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binpack_is_within_one_card_of_the_optimum_on_small_cases() {
    let mut rng = Seeded(0x5eed_0002);
    for case in 0..24 {
        let count = 3 + (rng.next() % 5) as usize;
        let pods: Vec<PodSpec> = (0..count)
            .map(|_| PodSpec {
                core: rng.pick(&[10, 20, 30, 40, 50, 60, 70]),
                memory_gib: rng.pick(&[1, 4, 8, 16, 24]),
                annotations: vec![("tessera.dev/priority".into(), "offline".into())],
                ..Default::default()
            })
            .collect();
        let items: Vec<(u32, u64)> = pods.iter().map(|p| (p.core, p.memory_gib)).collect();
        let optimum = fewest_cards(&items);
        // Offline pods pack by default.
        let cluster = SimCluster::start(2, 4, Config::default()).await.unwrap();
        let outcomes = run_and_check(&cluster, &pods).await;
        assert_eq!(
            placed(&outcomes),
            count,
            "case {case}: {items:?}: {outcomes:?}"
        );
        let used = cluster.cards().iter().filter(|c| c.4 > 0).count();
        assert!(
            used <= optimum + 1,
            "case {case}: {items:?} on {used} cards, the optimum is {optimum}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_and_card_levels_follow_their_own_policy_per_pod() {
    // Packed nodes, spread cards: one node takes every pod, evenly over its four cards.
    let cluster = SimCluster::start(4, 4, Config::default()).await.unwrap();
    let pod = |node: &str, card: &str| PodSpec {
        core: 10,
        memory_gib: 1,
        annotations: vec![
            ("tessera.dev/node-policy".into(), node.into()),
            ("tessera.dev/card-policy".into(), card.into()),
        ],
        ..Default::default()
    };
    let pods = vec![pod("binpack", "spread"); 24];
    let outcomes = run_and_check(&cluster, &pods).await;
    assert_eq!(placed(&outcomes), 24);
    for (node, index, core, _, _) in cluster.cards() {
        let expected = if node == "node-00" { 60 } else { 0 };
        assert_eq!(core, expected, "{node}/{index}");
    }

    // Spread nodes, packed cards: every node takes six pods, all on its first card.
    let cluster = SimCluster::start(4, 4, Config::default()).await.unwrap();
    let pods = vec![pod("spread", "binpack"); 24];
    let outcomes = run_and_check(&cluster, &pods).await;
    assert_eq!(placed(&outcomes), 24);
    for (node, index, core, _, _) in cluster.cards() {
        let expected = if index == 0 { 60 } else { 0 };
        assert_eq!(core, expected, "{node}/{index}");
    }
}

/// A pod bound without the extender (another scheduler, or its own `nodeName`) has no card
/// recorded; its node's plugin publishes where it runs, and the extender counts it there, so
/// that pods it places next never land on a card that pod already fills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_placed_by_another_scheduler_count_where_their_node_published_them() {
    let cluster = SimCluster::start(1, 2, both(Policy::Binpack))
        .await
        .unwrap();
    let node = cluster.node_names()[0].clone();
    let by_hand = PodSpec {
        core: 70,
        memory_gib: 8,
        ..Default::default()
    };
    cluster.place_by_hand(NS, "by-hand", &node, &by_hand);
    let (_, index, core, _, _) = cluster
        .cards()
        .into_iter()
        .find(|c| c.2 > 0)
        .expect("the node admitted the pod");
    assert_eq!(core, 70);
    let uuid = cluster
        .api
        .gpus()
        .into_values()
        .find(|g| g["spec"]["index"] == index)
        .unwrap()["spec"]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while cluster.extender_counts(&uuid).core != 70 {
        assert!(
            std::time::Instant::now() < deadline,
            "the extender never counted the published pod"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Binpack would put the 40s on the fullest card; only one card has room for 40.
    let pods = vec![
        PodSpec {
            core: 40,
            memory_gib: 4,
            ..Default::default()
        };
        3
    ];
    let outcomes = run_and_check(&cluster, &pods).await;
    assert_eq!(placed(&outcomes), 2, "{outcomes:?}");
    let mut cores: Vec<u32> = cluster.cards().into_iter().map(|c| c.2).collect();
    cores.sort_unstable();
    assert_eq!(cores, [70, 80]);
}
