//! End to end on one machine (criterion 4): the simulator's scheduler places four pods on a
//! simulated node through the real extender over HTTP; the real device plugin, between the
//! fake kubelet and controld on simgpu, gives each the card the extender recorded and its
//! limits; `gpuload` processes started from the Allocate answers, each shown only its card
//! as its device 0 (as NVIDIA's runtime does from `NVIDIA_VISIBLE_DEVICES`), see those
//! caps, the pod on GPU 1 too; and the GPU objects' printer columns (`kubectl get gpus`)
//! show the pods.

mod support;

use std::time::Duration;
use support::fake_kubelet::PodAsk;
use support::{container_of, wait_until, Cluster, GIB, NODE};
use tessera_k8s::extender::policy::Config;
use tessera_k8s::ids::DeviceId;
use tessera_k8s::sim::extender::SimExtender;
use tessera_k8s::sim::scheduler::{Outcome, Scheduler};
use tessera_k8s::sim::{pod_object, PodSpec};
use tessera_tests::{artifacts, run_with_timeout, stdout_json};

const NS: &str = "lab";

/// The real extender on the cluster's API server, and the simulator's scheduler calling it.
async fn start_extender(cluster: &Cluster) -> (SimExtender, Scheduler) {
    let extender = SimExtender::start(
        "127.0.0.1:0".parse().unwrap(),
        Config::default(),
        cluster.api.client(),
    )
    .unwrap();
    let scheduler = Scheduler::new(format!("http://{}", extender.addr));
    wait_until(
        Duration::from_secs(20),
        "the extender has read the cluster",
        || scheduler.extender_ready(),
    )
    .await;
    (extender, scheduler)
}

/// Schedules a pod through the extender, then admits and starts it through the fake kubelet
/// and the real plugin; the card the extender recorded, and the IDs the kubelet gave.
async fn place_and_run(
    cluster: &Cluster,
    scheduler: &Scheduler,
    name: &str,
    spec: &PodSpec,
) -> (String, support::fake_kubelet::Admitted) {
    cluster.api.create_pod(pod_object(NS, name, spec));
    let outcome = scheduler
        .schedule(&[NODE.to_string()], || cluster.api.pod(NS, name))
        .await;
    assert_eq!(outcome, Outcome::Placed(NODE.into()), "{name}");
    let pod = cluster.api.pod(NS, name).unwrap();
    let recorded = pod["metadata"]["annotations"]["tessera.dev/gpu"]
        .as_str()
        .unwrap()
        .to_string();
    // The kubelet offers every free ID of the node; the plugin prefers the recorded card,
    // and its PreStart checks the card against the record.
    let ask = PodAsk {
        namespace: NS.into(),
        name: name.to_string(),
        core: spec.core as usize,
        memory_gib: spec.memory_gib as usize,
    };
    let got = cluster
        .kubelet
        .run_pod(&ask)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    for id in got.core_ids.iter().chain(&got.memory_ids) {
        assert_eq!(DeviceId::parse(id).unwrap().uuid, recorded, "{name}: {id}");
    }
    (recorded, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_placed_by_the_extender_run_on_their_cards_with_their_caps() {
    let cluster = Cluster::start("extender").await;
    wait_until(
        Duration::from_secs(20),
        "two GPU objects with status",
        || async {
            let gpus = cluster.api.gpus();
            gpus.len() == 2 && gpus.values().all(|g| g["status"].is_object())
        },
    )
    .await;
    let status = cluster.controld.status().await.unwrap();
    let uuid_of = |index: usize| status.gpus[index].uuid.clone();
    let index_of = |uuid: &str| status.gpus.iter().find(|g| g.uuid == uuid).unwrap().index;

    let (_extender, scheduler) = start_extender(&cluster).await;

    // Offline pods pack: the first two and the last share GPU 0, the 50 % one goes to GPU 1.
    let pods = [("p2", 30, 8), ("p4", 30, 8), ("p6", 50, 6), ("p8", 40, 4)];
    let expected_card = [0, 0, 1, 0];
    let mut admitted = Vec::new();
    for ((name, core, memory_gib), card) in pods.iter().zip(expected_card) {
        let spec = PodSpec {
            core: *core,
            memory_gib: *memory_gib,
            annotations: vec![
                ("tessera.dev/priority".into(), "offline".into()),
                ("tessera.dev/compute".into(), "fixed".into()),
            ],
            ..Default::default()
        };
        let (recorded, got) = place_and_run(&cluster, &scheduler, name, &spec).await;
        assert_eq!(recorded, uuid_of(card), "{name}: the extender's card");
        admitted.push((name, *core, *memory_gib, recorded, got));
    }

    // Each container in controld has the pod's limits on its card.
    let containers = cluster.containers().await;
    assert_eq!(containers.len(), 4);
    for (name, core, memory_gib, uuid, got) in &admitted {
        let container = containers
            .iter()
            .find(|c| c.spec.name.as_str() == container_of(&got.core))
            .unwrap_or_else(|| panic!("{name}: no container {}", container_of(&got.core)));
        assert_eq!(container.spec.gpus.as_slice(), &[index_of(uuid)], "{name}");
        assert_eq!(
            container.spec.memory.map(|m| m.0),
            Some(memory_gib * GIB),
            "{name}"
        );
        assert_eq!(
            container.spec.compute.to_string(),
            format!("fixed:{core}"),
            "{name}"
        );
    }

    // Real processes from the Allocate answers: each allocates until its cap stops it.
    let runs: Vec<_> = admitted
        .iter()
        .map(|(name, _, memory_gib, _, got)| {
            // The region the answer mounts, at its host path: what the container would see.
            let in_container = &got.core.envs["TESSERA_REGION"];
            let region = got
                .core
                .mounts
                .iter()
                .find(|m| &m.container_path == in_container)
                .map(|m| m.host_path.clone())
                .unwrap_or_else(|| panic!("{name}: the answer does not mount {in_container}"));
            let mut cmd = cluster.sim.command(&artifacts().gpuload);
            cmd.env("LD_PRELOAD", &artifacts().libtessera)
                .env("TESSERA_REGION", region)
                // The runtime shows the container the card the answer names, and no other,
                // as its device 0.
                .env(
                    simgpu::config::ENV_CONTAINER_DEVICES,
                    &got.core.envs["NVIDIA_VISIBLE_DEVICES"],
                )
                .args(["alloc", "--device", "0"]);
            let name = name.to_string();
            let cap = memory_gib * GIB;
            std::thread::spawn(move || {
                let out = run_with_timeout(&mut cmd, Duration::from_secs(120));
                (name, cap, stdout_json(&out, "gpuload alloc"))
            })
        })
        .collect();
    for run in runs {
        let (name, cap, report) = run.join().unwrap();
        assert_eq!(
            report["total"].as_u64(),
            Some(cap),
            "{name} sees its cap: {report}"
        );
        let bytes = report["bytes"].as_u64().unwrap();
        assert!(
            bytes <= cap && bytes > cap / 2,
            "{name} allocated {bytes} of {cap}: {report}"
        );
        assert_eq!(
            report["error"], "CUDA_ERROR_OUT_OF_MEMORY",
            "{name}: {report}"
        );
    }

    // `kubectl get gpus`: GPU 0 holds three pods and all its core, GPU 1 one pod and half.
    wait_until(
        Duration::from_secs(20),
        "the GPU objects list the pods",
        || async {
            let gpus = cluster.api.gpus();
            let pods: Vec<u64> = gpus
                .values()
                .filter_map(|g| g["status"]["pods"].as_u64())
                .collect();
            pods.iter().sum::<u64>() == 4
        },
    )
    .await;
    let objects: Vec<serde_json::Value> = cluster.api.gpus().into_values().collect();
    let table = tessera_k8s::gpu::printer::table(&objects);
    eprintln!("{table}");
    let rows: Vec<Vec<&str>> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let row_of = |uuid: &str| {
        rows.iter()
            .find(|r| r[0] == tessera_k8s::gpu::object_name(uuid))
            .unwrap_or_else(|| panic!("no row for {uuid} in\n{table}"))
    };
    // NAME NODE MODEL… CORE MEMORY PODS AGE: the model has spaces, so read from the end.
    for (card, core, memory, pods) in [(0, "100", "20GiB/40GiB", "3"), (1, "50", "6GiB/40GiB", "1")]
    {
        let row = row_of(&uuid_of(card));
        let n = row.len();
        assert_eq!(row[1], NODE);
        assert_eq!(
            &row[n - 4..n - 1],
            [core, memory, pods],
            "GPU {card}: {row:?}"
        );
    }
}

/// Online pods are spread: the second goes to the emptier card although the first card, the
/// fullest, also fits, which is where the plugin would put it by its own preference. The
/// plugin must follow the extender's record, whichever resource the kubelet asks first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_pods_get_the_card_the_extender_chose_not_the_fullest() {
    let cluster = Cluster::start("spread").await;
    wait_until(Duration::from_secs(20), "two GPU objects", || async {
        cluster.api.gpus().len() == 2
    })
    .await;
    let status = cluster.controld.status().await.unwrap();
    let (_extender, scheduler) = start_extender(&cluster).await;
    let online = |core, memory_gib| PodSpec {
        core,
        memory_gib,
        annotations: vec![("tessera.dev/priority".into(), "online".into())],
        ..Default::default()
    };
    // Names of both parities: the fake kubelet asks memory first for half of them.
    let mut cards = Vec::new();
    for (name, spec) in [
        ("web-a", online(30, 8)),
        ("web-bb", online(20, 4)),
        ("web-ccc", online(30, 8)),
        ("web-d", online(10, 2)),
    ] {
        let (recorded, got) = place_and_run(&cluster, &scheduler, name, &spec).await;
        let container = cluster
            .containers()
            .await
            .into_iter()
            .find(|c| c.spec.name.as_str() == container_of(&got.core))
            .unwrap_or_else(|| panic!("{name}: no container"));
        let index = status
            .gpus
            .iter()
            .find(|g| g.uuid == recorded)
            .unwrap()
            .index;
        assert_eq!(container.spec.gpus.as_slice(), &[index], "{name}");
        cards.push(index);
    }
    // Spread, by load (core share + memory share): web-a opens one card (0.5), web-bb the
    // other (0.3), web-ccc joins web-bb (0.3 < 0.5, then 0.8), web-d joins web-a (0.5 < 0.8).
    // The plugin alone would have put web-bb, web-ccc and web-d on the fullest card.
    assert_ne!(cards[0], cards[1], "{cards:?}");
    assert_eq!(cards[2], cards[1], "{cards:?}");
    assert_eq!(cards[3], cards[0], "{cards:?}");
    let log = cluster.plugin_log();
    assert!(!log.contains("fit only elsewhere"), "{log}");
}
