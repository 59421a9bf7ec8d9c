//! Live resize from annotations, teardown when a pod goes, and a plugin restart that rebuilds
//! its state from pod-resources and controld (criterion 4 and part of 5).

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use support::fake_kubelet::PodAsk;
use support::{container_of, wait_until, Cluster, GIB, NODE};
use tessera_controld::policy::ComputePolicy;
use tessera_k8s::ids::DeviceId;
use tessera_region::Region;
use tessera_tests::{artifacts, run_with_timeout, stdout_json};

const NS: &str = "prod";

fn ask(name: &str, core: usize, memory_gib: usize) -> PodAsk {
    PodAsk {
        namespace: NS.into(),
        name: name.into(),
        core,
        memory_gib,
    }
}

/// `gpuload info` in the container: the preload library and the region, as mounted.
fn total_seen(cluster: &Cluster, region: &Path, device: u32) -> u64 {
    let mut cmd = cluster.sim.command(&artifacts().gpuload);
    cmd.env("LD_PRELOAD", &artifacts().libtessera)
        .env("TESSERA_REGION", region)
        .args(["info", "--device", &device.to_string()]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    stdout_json(&out, "gpuload info")["total"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotations_resize_a_running_pod_and_deletion_removes_it() {
    let cluster = Cluster::start("resize").await;
    cluster
        .api
        .put_pod(NS, "web", NODE, &[("tessera.dev/compute", "burst")]);
    let admitted = cluster.kubelet.run_pod(&ask("web", 30, 8)).await.unwrap();
    let name = container_of(&admitted.core);
    let region_path = cluster.state_dir().join(format!("{name}.region"));
    let uuid = DeviceId::parse(&admitted.core_ids[0]).unwrap().uuid;
    let status = cluster.controld.status().await.unwrap();
    let device = status.gpus.iter().find(|g| g.uuid == uuid).unwrap().index;
    assert_eq!(total_seen(&cluster, &region_path, device), 8 * GIB);

    // The container restarts (it crashed): the same container, not a second one.
    cluster.kubelet.restart_container(&admitted).await.unwrap();
    let containers = cluster.containers().await;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].spec.name.as_str(), name);

    // What a running process sees is its region's cap, read at every call.
    let region = Region::open(&region_path).unwrap();
    assert_eq!(region.memory_cap(device as usize), Some(8 * GIB));
    cluster.api.put_pod(
        NS,
        "web",
        NODE,
        &[
            ("tessera.dev/compute", "burst"),
            ("tessera.dev/memory-limit", "3GiB"),
        ],
    );
    let took = wait_until(
        Duration::from_secs(1),
        "the cap follows the annotation",
        || async { region.memory_cap(device as usize) == Some(3 * GIB) },
    )
    .await;
    eprintln!("the cap followed the annotation in {took:?}");
    assert_eq!(total_seen(&cluster, &region_path, device), 3 * GIB);

    // The compute annotation too.
    cluster.api.put_pod(
        NS,
        "web",
        NODE,
        &[
            ("tessera.dev/compute", "fixed"),
            ("tessera.dev/memory-limit", "3GiB"),
        ],
    );
    wait_until(
        Duration::from_secs(5),
        "the policy follows the annotation",
        || async { cluster.containers().await[0].spec.compute == ComputePolicy::Fixed(30) },
    )
    .await;

    // A bad new value is refused with an event; the limits stay.
    cluster.api.put_pod(
        NS,
        "web",
        NODE,
        &[
            ("tessera.dev/compute", "fixed"),
            ("tessera.dev/memory-limit", "lots"),
        ],
    );
    wait_until(
        Duration::from_secs(5),
        "an event about the bad value",
        || async {
            cluster.api.events().iter().any(|e| {
                e["involvedObject"]["name"] == "web"
                    && e["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("\"lots\"")
            })
        },
    )
    .await;
    assert_eq!(region.memory_cap(device as usize), Some(3 * GIB));
    // Above the request: refused too.
    cluster.api.put_pod(
        NS,
        "web",
        NODE,
        &[
            ("tessera.dev/compute", "fixed"),
            ("tessera.dev/memory-limit", "9GiB"),
        ],
    );
    wait_until(
        Duration::from_secs(5),
        "an event about the cap above the request",
        || async {
            cluster.api.events().iter().any(|e| {
                e["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("above its tessera.dev/gpu-memory request")
            })
        },
    )
    .await;
    assert_eq!(region.memory_cap(device as usize), Some(3 * GIB));

    // The pod goes: its container and region within 5 s.
    cluster.api.delete_pod(NS, "web");
    cluster.kubelet.remove_pod(NS, "web");
    let took = wait_until(
        Duration::from_secs(5),
        "the container is removed",
        || async { cluster.containers().await.is_empty() },
    )
    .await;
    eprintln!("the container was removed {took:?} after its pod");
    assert!(!region_path.exists(), "its region is freed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_plugin_rebuilds_its_state_without_loss_or_double_count() {
    let mut cluster = Cluster::start("restart").await;
    for pod in ["stay", "go"] {
        cluster
            .api
            .put_pod(NS, pod, NODE, &[("tessera.dev/compute", "fixed")]);
        cluster.kubelet.run_pod(&ask(pod, 20, 2)).await.unwrap();
    }
    let holders = |cluster: &Cluster| -> BTreeSet<String> {
        cluster
            .api
            .gpus()
            .values()
            .flat_map(|g| {
                g["status"]["holders"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|h| h["pod"].as_str().unwrap().to_string())
            })
            .collect()
    };
    wait_until(Duration::from_secs(10), "both holders listed", || async {
        holders(&cluster).len() == 2
    })
    .await;

    // The plugin dies; meanwhile one pod goes, and the API server holds a GPU object of this
    // node for a card it no longer has, and one of another node.
    cluster.kill_plugin();
    cluster.api.delete_pod(NS, "go");
    cluster.kubelet.remove_pod(NS, "go");
    let stale = |node: &str, uuid: &str| {
        serde_json::json!({
            "apiVersion": "tessera.dev/v1alpha1", "kind": "GPU",
            "metadata": {"name": uuid.to_lowercase()},
            "spec": {"node": node, "index": 7, "uuid": uuid, "model": "gone", "memory": 1},
        })
    };
    cluster.api.put_gpu("gpu-gone", stale(NODE, "GPU-gone"));
    cluster
        .api
        .put_gpu("gpu-elsewhere", stale("node-b", "GPU-elsewhere"));
    cluster.start_plugin().await;
    wait_until(
        Duration::from_secs(10),
        "the gone card's object deleted",
        || async {
            let gpus = cluster.api.gpus();
            !gpus.contains_key("gpu-gone") && gpus.contains_key("gpu-elsewhere")
        },
    )
    .await;
    wait_until(
        Duration::from_secs(5),
        "the gone pod's container removed",
        || async { cluster.containers().await.len() == 1 },
    )
    .await;
    wait_until(
        Duration::from_secs(10),
        "only the staying pod listed",
        || async { holders(&cluster) == BTreeSet::from(["stay".to_string()]) },
    )
    .await;
    // Counted once: 20 core and 2 GiB on its card.
    let allocated: Vec<(u64, u64)> = cluster
        .api
        .gpus()
        .values()
        .filter(|g| g["spec"]["node"] == NODE)
        .map(|g| {
            (
                g["status"]["allocated"]["core"].as_u64().unwrap(),
                g["status"]["allocated"]["memory"].as_u64().unwrap(),
            )
        })
        .filter(|(core, _)| *core > 0)
        .collect();
    assert_eq!(allocated, vec![(20, 2 * GIB)]);
    assert!(
        cluster.plugin_log().contains("adopted"),
        "{}",
        cluster.plugin_log()
    );

    // And it serves new pods as before.
    cluster.api.put_pod(NS, "new", NODE, &[]);
    cluster.kubelet.run_pod(&ask("new", 20, 2)).await.unwrap();
    wait_until(Duration::from_secs(10), "the new holder listed", || async {
        holders(&cluster).len() == 2
    })
    .await;
}
