//! Filter and prioritize for one pod over 1000 nodes of 8 cards, each card a third full,
//! as kube-scheduler calls them with `nodeCacheCapable` (node names only). The figures are
//! in docs/k8s-scheduling.md.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::{Duration, Instant};
use tessera_k8s::extender::cluster::{Card, Holder};
use tessera_k8s::extender::policy::Config;
use tessera_k8s::extender::protocol::ExtenderArgs;
use tessera_k8s::extender::Extender;
use tessera_k8s::requests::Ask;
use tessera_k8s::sim::{pod_object, PodSpec, CARD_MEMORY};

const NODES: usize = 1000;
const CARDS: u32 = 8;

fn cluster() -> (Extender, ExtenderArgs) {
    let extender = Extender::new(Config::default(), None);
    {
        let mut state = extender.state.lock().unwrap();
        state.set_cards((0..NODES).flat_map(|n| {
            (0..CARDS).map(move |index| Card {
                uuid: format!("GPU-{n:06x}-{index:02x}"),
                node: format!("node-{n:04}"),
                index,
                memory: CARD_MEMORY,
                healthy: true,
            })
        }));
        // Each card a third full, by one pod of varying size: 8000 pods held.
        let until = Instant::now() + Duration::from_secs(3600);
        for n in 0..NODES {
            for index in 0..CARDS {
                let core = 20 + ((n as u32 + index) % 3) * 10;
                let holder = Holder {
                    pod: format!("load/p-{n}-{index}"),
                    cards: vec![format!("GPU-{n:06x}-{index:02x}")],
                    ask: Ask {
                        core,
                        memory: u64::from(core / 10) << 30,
                    },
                    priority: 0,
                };
                if index % 2 == 0 {
                    state.put_bound(&format!("uid-{n}-{index}"), holder);
                } else {
                    state.assume(&format!("uid-{n}-{index}"), holder, until);
                }
            }
        }
    }
    extender.set_ready();
    let pod = pod_object(
        "bench",
        "one",
        &PodSpec {
            core: 30,
            memory_gib: 4,
            ..Default::default()
        },
    );
    let names: Vec<String> = (0..NODES).map(|n| format!("node-{n:04}")).collect();
    let args = ExtenderArgs {
        pod: serde_json::from_value(pod).unwrap(),
        nodes: None,
        node_names: Some(names),
    };
    (extender, args)
}

fn filter_and_prioritize(c: &mut Criterion) {
    let (extender, args) = cluster();
    c.bench_function("extender/filter+prioritize 1000x8", |b| {
        b.iter(|| {
            let filtered = extender.filter(black_box(&args));
            let passing = ExtenderArgs {
                pod: args.pod.clone(),
                nodes: None,
                node_names: filtered.node_names,
            };
            black_box(extender.prioritize(&passing).unwrap())
        })
    });
    // The same through JSON both ways, as the HTTP handlers do.
    let body = serde_json::to_vec(&args).unwrap();
    c.bench_function("extender/filter+prioritize 1000x8 with JSON", |b| {
        b.iter(|| {
            let args: ExtenderArgs = serde_json::from_slice(black_box(&body)).unwrap();
            let filtered = serde_json::to_vec(&extender.filter(&args)).unwrap();
            let names: tessera_k8s::extender::protocol::ExtenderFilterResult =
                serde_json::from_slice(&filtered).unwrap();
            let passing = ExtenderArgs {
                pod: args.pod,
                nodes: None,
                node_names: names.node_names,
            };
            black_box(serde_json::to_vec(&extender.prioritize(&passing).unwrap()).unwrap())
        })
    });
}

criterion_group!(benches, filter_and_prioritize);
criterion_main!(benches);
