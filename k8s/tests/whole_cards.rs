//! Nodes of unlike cards: filter, prioritize, bind and preempt judge a pod against the same
//! per-card fit, so that a whole card with memory lands on the card that holds it, a pod no
//! card of a node could ever hold fails there as unresolvable (no preemption is tried), and
//! every node filter passes is one bind places the pod on.

use serde_json::{json, Value};
use std::sync::Arc;
use tessera_k8s::extender::cluster::{Card, Holder};
use tessera_k8s::extender::policy::Config;
use tessera_k8s::extender::protocol::{ExtenderArgs, ExtenderBindingArgs};
use tessera_k8s::extender::{http, Extender};
use tessera_k8s::requests::Ask;
use tessera_k8s::sim::api::FakeApi;
use tessera_k8s::sim::scheduler::{Outcome, Scheduler};
use tessera_k8s::sim::{pod_object, PodSpec};

const GIB: u64 = 1 << 30;
const NS: &str = "lab";

fn card(uuid: &str, node: &str, index: u32, gib: u64) -> Card {
    Card {
        uuid: uuid.into(),
        node: node.into(),
        index,
        memory: gib * GIB,
        healthy: true,
    }
}

/// `mixed`: a T4 (16 GiB) at index 0 and an A100-80GB at index 1; `big`: two A100-80GB.
async fn serve(cards: Vec<Card>) -> (FakeApi, Scheduler, Arc<Extender>) {
    let api = FakeApi::start().await;
    let extender = Arc::new(Extender::new(Config::default(), Some(api.client())));
    extender.state.lock().unwrap().set_cards(cards);
    extender.set_ready();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(http::serve(listener, extender.clone()));
    (api, Scheduler::new(format!("http://{addr}")), extender)
}

fn whole(core: u32, memory_gib: u64) -> PodSpec {
    PodSpec {
        core,
        memory_gib,
        ..Default::default()
    }
}

fn filter_args(pod: Value, nodes: &[&str]) -> ExtenderArgs {
    serde_json::from_value(json!({"Pod": pod, "NodeNames": nodes})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_card_with_memory_binds_to_the_card_that_holds_it() {
    let (api, scheduler, extender) = serve(vec![
        card("GPU-7400", "mixed", 0, 16),
        card("GPU-a180", "mixed", 1, 80),
        card("GPU-b000", "big", 0, 80),
        card("GPU-b001", "big", 1, 80),
    ])
    .await;

    // 100 core + 40 GiB on the T4 + A100 node: filter passes it, prioritize gives it the
    // top score, bind records the A100 (index 1), not the first empty card.
    api.create_pod(pod_object(NS, "train", &whole(100, 40)));
    let pod = api.pod(NS, "train").unwrap();
    let filtered = extender.filter(&filter_args(pod.clone(), &["mixed"]));
    assert_eq!(filtered.node_names, Some(vec!["mixed".to_string()]));
    let scores = extender.prioritize(&filter_args(pod, &["mixed"])).unwrap();
    assert_eq!(scores[0].score, 10, "{scores:?}");
    let outcome = scheduler
        .schedule(&["mixed".to_string()], || api.pod(NS, "train"))
        .await;
    assert_eq!(outcome, Outcome::Placed("mixed".into()));
    let pod = api.pod(NS, "train").unwrap();
    assert_eq!(
        pod["metadata"]["annotations"]["tessera.dev/gpu"],
        "GPU-a180"
    );

    // 100 core + 90 GiB on two A100-80GB: no card holds it, ever: unresolvable.
    api.create_pod(pod_object(NS, "huge", &whole(100, 90)));
    let filtered = extender.filter(&filter_args(api.pod(NS, "huge").unwrap(), &["big"]));
    assert_eq!(filtered.node_names, Some(vec![]));
    assert!(filtered.failed_nodes.is_empty(), "{filtered:?}");
    let why = &filtered.failed_and_unresolvable_nodes["big"];
    assert!(why.contains("90 GiB"), "{why}");

    // A small whole card goes to the T4 of a node whose A100 is free too: the large card
    // stays free for what needs it.
    extender.state.lock().unwrap().remove_pod("uid-lab-train");
    api.create_pod(pod_object(NS, "small", &whole(100, 8)));
    let outcome = scheduler
        .schedule(&["mixed".to_string()], || api.pod(NS, "small"))
        .await;
    assert_eq!(outcome, Outcome::Placed("mixed".into()));
    let pod = api.pod(NS, "small").unwrap();
    assert_eq!(
        pod["metadata"]["annotations"]["tessera.dev/gpu"],
        "GPU-7400"
    );
}

/// A small generator, so that a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_filter_passes_can_be_bound_and_failures_say_if_preemption_helps() {
    let sizes = [16, 24, 40, 80];
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut cards = Vec::new();
    let nodes: Vec<String> = (0..6).map(|n| format!("n{n}")).collect();
    for node in &nodes {
        for index in 0..(1 + rng.next(4) as u32) {
            let gib = sizes[rng.next(4) as usize];
            cards.push(card(&format!("GPU-{node}-{index}"), node, index, gib));
        }
    }
    let (api, _scheduler, extender) = serve(cards.clone()).await;
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let mut binds = 0;
    for trial in 0..300 {
        // Some cards partly held, some whole, by pods of priority 0.
        {
            let mut state = extender.state.lock().unwrap();
            for (i, c) in cards.iter().enumerate() {
                let uid = format!("held-{i}");
                state.remove_pod(&uid);
                let ask = match rng.next(4) {
                    0 => continue,
                    1 => Ask {
                        core: 100,
                        memory: 0,
                    },
                    _ => Ask {
                        core: 10 + rng.next(60) as u32,
                        memory: rng.next(c.memory / GIB / 2 + 1) * GIB,
                    },
                };
                let holder = Holder {
                    pod: format!("other/{uid}"),
                    cards: vec![c.uuid.clone()],
                    ask,
                    priority: 0,
                };
                state.put_bound(&uid, holder);
            }
        }
        let spec = if rng.next(3) == 0 {
            whole(100 * (1 + rng.next(2) as u32), rng.next(100))
        } else {
            whole(5 + rng.next(95) as u32, rng.next(60))
        };
        let name = format!("p{trial}");
        api.create_pod(pod_object(NS, &name, &spec));
        let pod = api.pod(NS, &name).unwrap();
        let filtered = extender.filter(&filter_args(pod.clone(), &names));
        let passed = filtered.node_names.clone().unwrap();
        for node in &passed {
            let bound = extender
                .bind(&ExtenderBindingArgs {
                    pod_name: name.clone(),
                    pod_namespace: NS.into(),
                    pod_uid: format!("uid-{NS}-{name}"),
                    node: node.clone(),
                })
                .await;
            assert_eq!(bound.error, "", "{name} {spec:?} passed filter on {node}");
            binds += 1;
            // Unbound again, for the next node and the next trial.
            extender
                .state
                .lock()
                .unwrap()
                .forget(&format!("uid-{NS}-{name}"));
            let mut again = api.pod(NS, &name).unwrap();
            again["spec"]["nodeName"] = Value::Null;
            api.create_pod(again);
        }
        // A node failed as unresolvable is one where evicting every pod would not help.
        for node in filtered.failed_and_unresolvable_nodes.keys() {
            let mut state = extender.state.lock().unwrap();
            let held: Vec<String> = (0..cards.len()).map(|i| format!("held-{i}")).collect();
            for uid in &held {
                state.remove_pod(uid);
            }
            drop(state);
            let empty = extender.filter(&filter_args(pod.clone(), &[node]));
            assert_eq!(
                empty.node_names,
                Some(vec![]),
                "{name} {spec:?} was unresolvable on {node} but fits it empty"
            );
        }
        // And a node failed as resolvable fits once it is empty.
        if let Some(node) = filtered.failed_nodes.keys().next() {
            let mut state = extender.state.lock().unwrap();
            for i in 0..cards.len() {
                state.remove_pod(&format!("held-{i}"));
            }
            drop(state);
            let empty = extender.filter(&filter_args(pod.clone(), &[node]));
            assert_eq!(
                empty.node_names,
                Some(vec![node.clone()]),
                "{name} {spec:?} was resolvable on {node} but does not fit it empty: {empty:?}"
            );
        }
        api.delete_pod(NS, &name);
    }
    assert!(binds > 100, "only {binds} binds were tried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_frees_the_card_that_holds_a_whole_card_pod() {
    let (api, _scheduler, extender) = serve(vec![
        card("GPU-7400", "mixed", 0, 16),
        card("GPU-a180", "mixed", 1, 80),
    ])
    .await;
    // A small low-priority share on each card.
    {
        let mut state = extender.state.lock().unwrap();
        for (uid, uuid) in [("on-t4", "GPU-7400"), ("on-a100", "GPU-a180")] {
            let holder = Holder {
                pod: format!("other/{uid}"),
                cards: vec![uuid.into()],
                ask: Ask {
                    core: 10,
                    memory: GIB,
                },
                priority: 0,
            };
            state.put_bound(uid, holder);
        }
    }
    let urgent = |core: u32, memory_gib: u64| PodSpec {
        priority: 1000,
        ..whole(core, memory_gib)
    };
    // kube-scheduler counts per node and proposes both; each pod keeps only the holder of
    // the card it would then be bound to.
    let victims_for = |name: &str| {
        let args = json!({
            "Pod": api.pod(NS, name).unwrap(),
            "NodeNameToMetaVictims": {"mixed": {
                "Pods": [{"UID": "on-t4"}, {"UID": "on-a100"}],
                "NumPDBViolations": 0,
            }},
        });
        let result = extender
            .preempt(&serde_json::from_value(args).unwrap())
            .unwrap();
        let mut uids: Vec<String> = result.node_name_to_meta_victims["mixed"]
            .pods
            .iter()
            .map(|p| p.uid.clone())
            .collect();
        uids.sort();
        uids
    };
    // 40 GiB: only the A100 holds it; the T4's holder may stay.
    api.create_pod(pod_object(NS, "big", &urgent(100, 40)));
    let filtered = extender.filter(&filter_args(api.pod(NS, "big").unwrap(), &["mixed"]));
    assert!(
        filtered.failed_nodes.contains_key("mixed"),
        "full now, not unresolvable: {filtered:?}"
    );
    assert_eq!(victims_for("big"), ["on-a100"]);
    // 8 GiB: the T4 is the best fit, and it costs as few victims.
    api.create_pod(pod_object(NS, "small", &urgent(100, 8)));
    assert_eq!(victims_for("small"), ["on-t4"]);
    // With the victim gone, filter passes and bind takes the card preemption freed.
    extender.state.lock().unwrap().remove_pod("on-a100");
    let filtered = extender.filter(&filter_args(api.pod(NS, "big").unwrap(), &["mixed"]));
    assert_eq!(filtered.node_names, Some(vec!["mixed".to_string()]));
    let bound = extender
        .bind(&ExtenderBindingArgs {
            pod_name: "big".into(),
            pod_namespace: NS.into(),
            pod_uid: format!("uid-{NS}-big"),
            node: "mixed".into(),
        })
        .await;
    assert_eq!(bound.error, "");
    let pod = api.pod(NS, "big").unwrap();
    assert_eq!(
        pod["metadata"]["annotations"]["tessera.dev/gpu"],
        "GPU-a180"
    );
}
