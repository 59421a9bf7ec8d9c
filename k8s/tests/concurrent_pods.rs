//! Pods created at once on one node each get their own Tessera container with exactly their
//! limits and the right card (criterion 2), and each card's GPU object lists exactly its
//! holders, through a fake API server that the real kube client talks to (criterion 5).

mod support;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use support::fake_kubelet::{Admitted, PodAsk};
use support::{container_of, wait_until, Cluster, GIB, NODE};
use tessera_controld::policy::{ComputePolicy, Priority};
use tessera_k8s::ids::{container_name, DeviceId};

const NS: &str = "team";

fn ask(name: &str, core: usize, memory_gib: usize) -> PodAsk {
    PodAsk {
        namespace: NS.into(),
        name: name.into(),
        core,
        memory_gib,
    }
}

/// One expected holder: pod, core, memory and policy.
type Expected = BTreeMap<String, BTreeSet<(String, u64, u64, String)>>;

/// What each card's GPU object lists, in the same form.
fn listed(gpus: &BTreeMap<String, Value>) -> Expected {
    gpus.values()
        .map(|gpu| {
            let holders = gpu["status"]["holders"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .map(|h| {
                            (
                                h["pod"].as_str().unwrap_or_default().to_string(),
                                h["core"].as_u64().unwrap_or_default(),
                                h["memory"].as_u64().unwrap_or_default(),
                                h["policy"].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            (
                gpu["spec"]["uuid"].as_str().unwrap_or_default().to_string(),
                holders,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_pairs_of_concurrent_pods_get_their_own_limits_and_cards() {
    let cluster = Arc::new(Cluster::start("pairs").await);
    let gpus = cluster.controld.status().await.unwrap().gpus;
    let uuid_of = |index: u32| gpus[index as usize].uuid.clone();
    let index_of = |uuid: &str| gpus.iter().find(|g| g.uuid == uuid).unwrap().index;
    // The GPU objects appear with their specs.
    wait_until(
        Duration::from_secs(10),
        "two GPU objects with status",
        || async {
            let gpus = cluster.api.gpus();
            gpus.len() == 2 && gpus.values().all(|g| g["status"].is_object())
        },
    )
    .await;
    for gpu in cluster.api.gpus().values() {
        assert_eq!(gpu["spec"]["node"], NODE);
        assert_eq!(gpu["spec"]["memory"].as_u64(), Some(40 * GIB));
        assert_eq!(gpu["spec"]["sms"], 108, "an A100's SMs, from NVML");
        assert_eq!(gpu["status"]["allocatable"]["core"], 100);
    }

    for round in 0..50 {
        let mut expected: Expected =
            [(uuid_of(0), BTreeSet::new()), (uuid_of(1), BTreeSet::new())].into();
        let mut pods = Vec::new();
        // Every other round an occupant takes 60 % of GPU 0 first, so that the pair splits.
        let occupied = round % 2 == 1;
        if occupied {
            let name = format!("occupant-{round}");
            cluster
                .api
                .put_pod(NS, &name, NODE, &[("tessera.dev/compute", "best-effort")]);
            let admitted = cluster.kubelet.run_pod(&ask(&name, 60, 8)).await.unwrap();
            let uuid = DeviceId::parse(&admitted.core_ids[0]).unwrap().uuid;
            assert_eq!(uuid, uuid_of(0), "the occupant takes the first card");
            expected.get_mut(&uuid).unwrap().insert((
                name.clone(),
                60,
                8 * GIB,
                "best-effort".into(),
            ));
            pods.push(name);
        }
        let a = format!("a-{round}");
        let b = format!("b-{round}");
        cluster.api.put_pod(
            NS,
            &a,
            NODE,
            &[
                ("tessera.dev/compute", "fixed"),
                ("tessera.dev/priority", "offline"),
            ],
        );
        cluster
            .api
            .put_pod(NS, &b, NODE, &[("tessera.dev/compute", "burst")]);
        let (ask_a, ask_b) = (ask(&a, 30, 4), ask(&b, 30, 4));
        let (ra, rb) = tokio::join!(
            cluster.kubelet.run_pod(&ask_a),
            cluster.kubelet.run_pod(&ask_b)
        );
        let containers = cluster.containers().await;
        let mut names = BTreeSet::new();
        let mut cards = BTreeSet::new();
        let checks: [(&str, Admitted, ComputePolicy, Priority); 2] = [
            (&a, ra.unwrap(), ComputePolicy::Fixed(30), Priority::Offline),
            (&b, rb.unwrap(), ComputePolicy::Burst(30), Priority::Online),
        ];
        for (pod, admitted, policy, priority) in checks {
            let name = container_of(&admitted.core);
            assert_eq!(
                name,
                container_name(&admitted.core_ids),
                "round {round}: {pod}"
            );
            let container = containers
                .iter()
                .find(|c| c.spec.name.as_str() == name)
                .unwrap_or_else(|| panic!("round {round}: no container {name} for {pod}"));
            let uuid = DeviceId::parse(&admitted.core_ids[0]).unwrap().uuid;
            // The preferred allocation kept its core and memory IDs on one card.
            for id in admitted.core_ids.iter().chain(&admitted.memory_ids) {
                assert_eq!(
                    DeviceId::parse(id).unwrap().uuid,
                    uuid,
                    "round {round}: {pod}: {id}"
                );
            }
            assert_eq!(admitted.core.envs["NVIDIA_VISIBLE_DEVICES"], uuid);
            assert_eq!(
                container.spec.gpus.as_slice(),
                &[index_of(&uuid)],
                "round {round}: {pod}"
            );
            assert_eq!(
                container.spec.memory.map(|m| m.0),
                Some(4 * GIB),
                "round {round}: {pod}"
            );
            assert_eq!(container.spec.compute, policy, "round {round}: {pod}");
            assert_eq!(container.spec.priority, priority, "round {round}: {pod}");
            assert!(container.region.exists(), "round {round}: {pod}");
            assert!(admitted.memory.envs.is_empty() && admitted.memory.mounts.is_empty());
            names.insert(name);
            cards.insert(uuid.clone());
            expected.get_mut(&uuid).unwrap().insert((
                pod.to_string(),
                30,
                4 * GIB,
                policy.to_string(),
            ));
            pods.push(pod.to_string());
        }
        assert_eq!(names.len(), 2, "round {round}: two distinct containers");
        if occupied {
            assert_eq!(
                cards.len(),
                2,
                "round {round}: with GPU 0 at 60 %, the pair splits"
            );
        }
        // The GPU objects list exactly these holders.
        let mut last = Expected::new();
        let listed_ok = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                last = listed(&cluster.api.gpus());
                if last == expected {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(
            listed_ok.is_ok(),
            "round {round}: GPU objects list {last:?}, not {expected:?}"
        );
        // The pods go; their containers follow within 5 s, and the cards are empty again.
        for pod in &pods {
            cluster.api.delete_pod(NS, pod);
            cluster.kubelet.remove_pod(NS, pod);
        }
        wait_until(Duration::from_secs(5), "containers removed", || async {
            cluster.containers().await.is_empty()
        })
        .await;
    }
    let empty: Expected = [(uuid_of(0), BTreeSet::new()), (uuid_of(1), BTreeSet::new())].into();
    wait_until(Duration::from_secs(10), "GPU objects empty", || async {
        listed(&cluster.api.gpus()) == empty
    })
    .await;
    for gpu in cluster.api.gpus().values() {
        assert_eq!(gpu["status"]["allocated"]["core"], 0);
        assert_eq!(gpu["status"]["pods"], 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_is_a_whole_card_without_caps() {
    let cluster = Cluster::start("whole").await;
    cluster.api.put_pod(NS, "trainer", NODE, &[]);
    let admitted = cluster
        .kubelet
        .run_pod(&ask("trainer", 100, 0))
        .await
        .unwrap();
    let uuid = DeviceId::parse(&admitted.core_ids[0]).unwrap().uuid;
    assert!(
        admitted
            .core_ids
            .iter()
            .all(|id| id.starts_with(uuid.as_str())),
        "one whole card"
    );
    assert_eq!(admitted.core.envs["NVIDIA_VISIBLE_DEVICES"], uuid);
    assert!(
        !admitted.core.envs.contains_key("TESSERA_REGION"),
        "no region"
    );
    assert!(admitted.core.mounts.is_empty(), "no preload");
    assert!(
        cluster.containers().await.is_empty(),
        "no controld container"
    );
    // Its card lists it, with all its core and memory.
    wait_until(
        Duration::from_secs(10),
        "the whole card's holder",
        || async {
            cluster.api.gpus().values().any(|g| {
                g["spec"]["uuid"] == uuid.as_str()
                    && g["status"]["allocated"]["core"] == 100
                    && g["status"]["allocated"]["memory"].as_u64() == Some(40 * GIB)
                    && g["status"]["holders"][0]["pod"] == "trainer"
                    && g["status"]["holders"][0]["policy"] == "whole"
            })
        },
    )
    .await;
    // A share goes to the other card.
    cluster.api.put_pod(NS, "share", NODE, &[]);
    let share = cluster.kubelet.run_pod(&ask("share", 50, 4)).await.unwrap();
    assert!(!share.core_ids[0].starts_with(uuid.as_str()));
    cluster.api.delete_pod(NS, "trainer");
    cluster.kubelet.remove_pod(NS, "trainer");
    wait_until(
        Duration::from_secs(10),
        "the whole card is free again",
        || async {
            cluster.api.gpus().values().all(|g| {
                g["spec"]["uuid"] != uuid.as_str() || g["status"]["allocated"]["core"] == 0
            })
        },
    )
    .await;
}
