//! The plugin against a fake kubelet that speaks the real protocol: registration of both
//! resources, their IDs for a node of two GPUs, re-registration after a kubelet restart, and
//! health from NVML.

mod support;

use std::time::Duration;
use support::fake_kubelet::PodAsk;
use support::Cluster;
use tessera_k8s::ids::{DeviceId, Resource};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_both_resources_and_again_after_a_kubelet_restart() {
    let cluster = Cluster::start("register").await;
    let registrations = cluster.kubelet.registrations();
    let mut names: Vec<&str> = registrations
        .iter()
        .map(|r| r.resource_name.as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["tessera.dev/gpu-core", "tessera.dev/gpu-memory"]);
    for r in &registrations {
        assert_eq!(r.version, "v1beta1");
        let options = r.options.as_ref().expect("options");
        assert!(options.pre_start_required && options.get_preferred_allocation_available);
        assert!(
            cluster.kubelet.dir.join(&r.endpoint).exists(),
            "{}",
            r.endpoint
        );
    }

    // 100 core IDs per GPU, one memory ID per GiB (an A100-40GB has 40 GiB), all healthy,
    // each naming its card and at most 63 characters long.
    let status = cluster.controld.status().await.unwrap();
    let uuids: Vec<String> = status.gpus.iter().map(|g| g.uuid.clone()).collect();
    assert_eq!(uuids.len(), 2);
    for (resource, per_card) in [(Resource::Core, 100), (Resource::Memory, 40)] {
        let devices = cluster.kubelet.devices(resource).await.borrow().clone();
        assert_eq!(devices.len(), 2 * per_card, "{}", resource.name());
        for uuid in &uuids {
            let on_card = devices
                .iter()
                .filter(|d| DeviceId::parse(&d.id).unwrap().uuid == *uuid)
                .count();
            assert_eq!(on_card, per_card);
        }
        assert!(devices
            .iter()
            .all(|d| d.health == "Healthy" && d.id.len() <= 63));
    }

    // The kubelet restarts: its directory emptied, kubelet.sock recreated.
    cluster.kubelet.restart();
    let restarted = std::time::Instant::now();
    let took = tokio::time::timeout(
        Duration::from_secs(5),
        cluster
            .kubelet
            .wait_registrations(4, Duration::from_secs(5)),
    )
    .await;
    assert!(took.is_ok(), "no re-registration within 5 s");
    eprintln!(
        "registered again {:?} after a kubelet restart",
        restarted.elapsed()
    );
    // It serves again on sockets it recreated before registering.
    let devices = cluster
        .kubelet
        .devices(Resource::Core)
        .await
        .borrow()
        .clone();
    assert_eq!(devices.len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_card_turns_its_ids_unhealthy_and_back() {
    let cluster = Cluster::start("health").await;
    let mut core = cluster.kubelet.devices(Resource::Core).await;
    let mut memory = cluster.kubelet.devices(Resource::Memory).await;
    let uuid1 = DeviceId::parse(&core.borrow()[150].id).unwrap().uuid;
    std::fs::write(cluster.faults(), "1\n").unwrap();
    let unhealthy = |devices: &[tessera_k8s::proto::deviceplugin::Device]| {
        devices
            .iter()
            .filter(|d| d.health == "Unhealthy")
            .map(|d| DeviceId::parse(&d.id).unwrap())
            .collect::<Vec<_>>()
    };
    for (rx, count) in [(&mut core, 100), (&mut memory, 40)] {
        let list = tokio::time::timeout(
            Duration::from_secs(10),
            rx.wait_for(|d| !unhealthy(d).is_empty()),
        )
        .await
        .expect("the lost card's IDs turn unhealthy")
        .unwrap()
        .clone();
        let bad = unhealthy(&list);
        assert_eq!(bad.len(), count);
        assert!(bad.iter().all(|id| id.uuid == uuid1), "only GPU 1's IDs");
    }
    assert!(cluster.plugin_log().contains("failed its health check"));
    std::fs::write(cluster.faults(), "").unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        core.wait_for(|d| unhealthy(d).is_empty()),
    )
    .await
    .expect("healthy again")
    .unwrap();
    // A pod is not given IDs of a lost card: the fake kubelet offers only healthy ones.
    std::fs::write(cluster.faults(), "0\n").unwrap();
    core.wait_for(|d| unhealthy(d).len() == 100).await.unwrap();
    let admitted = cluster
        .kubelet
        .run_pod(&PodAsk {
            namespace: "default".into(),
            name: "p".into(),
            core: 30,
            memory_gib: 4,
        })
        .await;
    // The pod is not on the API server: PreStart says so.
    let err = admitted.expect_err("the pod is not on the API server");
    assert!(err.contains("cannot read pod default/p"), "{err}");
}
