//! Bad input: a malformed annotation, more memory than the card has, pod-resources down.
//! Each gets a clear error in the pod's events or the plugin's log, the container is
//! refused, and nothing else is disturbed (criterion 6).

mod support;

use std::time::Duration;
use support::fake_kubelet::PodAsk;
use support::{container_of, wait_until, Cluster, NODE};
use tessera_k8s::ids::DeviceId;

const NS: &str = "lab";

fn ask(name: &str, core: usize, memory_gib: usize) -> PodAsk {
    PodAsk {
        namespace: NS.into(),
        name: name.into(),
        core,
        memory_gib,
    }
}

fn event_about(cluster: &Cluster, pod: &str, words: &str) -> bool {
    cluster.api.events().iter().any(|e| {
        e["involvedObject"]["name"] == pod
            && e["type"] == "Warning"
            && e["firstTimestamp"].is_string()
            && e["message"].as_str().unwrap_or_default().contains(words)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_annotations_and_oversized_requests_are_refused_alone() {
    let cluster = Cluster::start("bad").await;
    cluster.api.put_pod(NS, "good", NODE, &[]);
    let good = cluster.kubelet.run_pod(&ask("good", 30, 4)).await.unwrap();
    let good_name = container_of(&good.core);

    // A malformed annotation.
    cluster
        .api
        .put_pod(NS, "typo", NODE, &[("tessera.dev/compute", "fast")]);
    let err = cluster
        .kubelet
        .run_pod(&ask("typo", 30, 4))
        .await
        .unwrap_err();
    assert!(err.contains("tessera.dev/compute=\"fast\""), "{err}");
    assert!(event_about(
        &cluster,
        "typo",
        "is not fixed, burst or best-effort"
    ));
    assert!(cluster
        .plugin_log()
        .contains("tessera.dev/compute=\"fast\""));

    // More memory than a card has (an A100-40GB): the kubelet can find 41 IDs on the node,
    // but no card holds them.
    cluster.api.put_pod(NS, "huge", NODE, &[]);
    let err = cluster
        .kubelet
        .run_pod(&ask("huge", 30, 41))
        .await
        .unwrap_err();
    assert!(err.contains("41GiB") && err.contains("has 40GiB"), "{err}");
    assert!(event_about(&cluster, "huge", "of GPU memory"));

    // A memory limit above the request.
    cluster
        .api
        .put_pod(NS, "greedy", NODE, &[("tessera.dev/memory-limit", "8GiB")]);
    let err = cluster
        .kubelet
        .run_pod(&ask("greedy", 10, 4))
        .await
        .unwrap_err();
    assert!(
        err.contains("above its tessera.dev/gpu-memory request"),
        "{err}"
    );

    // The scheduler's card annotation names another card than the kubelet's IDs: the good
    // pod's, which the pods above have filled (30 + 30 + 30 + 10 %).
    let other = DeviceId::parse(&good.core_ids[0]).unwrap().uuid;
    cluster
        .api
        .put_pod(NS, "moved", NODE, &[("tessera.dev/gpu", &other)]);
    let err = cluster
        .kubelet
        .run_pod(&ask("moved", 10, 2))
        .await
        .unwrap_err();
    assert!(
        err.contains(&format!("the scheduler chose {other}")),
        "{err}"
    );

    // Memory without core, core without memory.
    cluster.api.put_pod(NS, "memonly", NODE, &[]);
    let err = cluster
        .kubelet
        .run_pod(&ask("memonly", 0, 2))
        .await
        .unwrap_err();
    assert!(err.contains("without tessera.dev/gpu-core"), "{err}");
    cluster.api.put_pod(NS, "coreonly", NODE, &[]);
    let err = cluster
        .kubelet
        .run_pod(&ask("coreonly", 10, 0))
        .await
        .unwrap_err();
    assert!(err.contains("without tessera.dev/gpu-memory"), "{err}");

    // Nothing else moved: only the good pod's container, with its limits.
    let containers = cluster.containers().await;
    assert_eq!(containers.len(), 1, "{containers:?}");
    assert_eq!(containers[0].spec.name.as_str(), good_name);
    assert_eq!(containers[0].spec.memory.unwrap().0, 4 << 30);
    // A good pod after them is served.
    cluster.api.put_pod(NS, "next", NODE, &[]);
    cluster.kubelet.run_pod(&ask("next", 10, 2)).await.unwrap();
    assert_eq!(cluster.containers().await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_resources_down_refuses_new_containers_and_removes_nothing() {
    let cluster = Cluster::start("down").await;
    cluster.api.put_pod(NS, "running", NODE, &[]);
    cluster
        .kubelet
        .run_pod(&ask("running", 30, 4))
        .await
        .unwrap();
    cluster.kubelet.stop_pod_resources();

    cluster.api.put_pod(NS, "late", NODE, &[]);
    let err = cluster
        .kubelet
        .run_pod(&ask("late", 30, 4))
        .await
        .unwrap_err();
    assert!(
        err.contains("cannot reach the kubelet's pod-resources API"),
        "{err}"
    );
    assert!(cluster
        .plugin_log()
        .contains("cannot reach the kubelet's pod-resources API"));
    // Several reconcile intervals pass: the running container stays.
    wait_until(Duration::from_secs(10), "the outage is logged", || async {
        cluster
            .plugin_log()
            .contains("removing nothing until it answers")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(cluster.containers().await.len(), 1);

    // Back: nothing was lost, and new pods start again.
    cluster.kubelet.start_pod_resources();
    wait_until(
        Duration::from_secs(10),
        "pod-resources answers again",
        || async { cluster.plugin_log().contains("answers again") },
    )
    .await;
    assert_eq!(
        cluster.containers().await.len(),
        1,
        "nothing was removed in the outage"
    );
    cluster.api.put_pod(NS, "later", NODE, &[]);
    cluster.kubelet.run_pod(&ask("later", 30, 4)).await.unwrap();
    assert_eq!(cluster.containers().await.len(), 2);
}

/// Whole cards are held to the scheduler's record as a share is: IDs on another card than the
/// record are refused, with the reason on the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_cards_off_the_record_are_refused() {
    let cluster = Cluster::start("whole").await;
    // A share takes part of one card; only the other is whole.
    cluster.api.put_pod(NS, "share", NODE, &[]);
    let share = cluster.kubelet.run_pod(&ask("share", 10, 1)).await.unwrap();
    let shared = DeviceId::parse(&share.core_ids[0]).unwrap().uuid;
    // A record naming the shared card, which cannot be given whole.
    cluster
        .api
        .put_pod(NS, "off", NODE, &[("tessera.dev/gpu", &shared)]);
    let err = cluster
        .kubelet
        .run_pod(&ask("off", 100, 0))
        .await
        .unwrap_err();
    assert!(
        err.contains(&format!("the scheduler chose {shared}")),
        "{err}"
    );
    assert!(event_about(&cluster, "off", "delete the pod"));
}
