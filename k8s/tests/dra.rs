//! The DRA driver end to end: a fake kubelet registers it through the plugin registration
//! protocol, the ResourceSlice appears on the fake API server, the test writes an allocation
//! into a ResourceClaim as the scheduler would, and the kubelet's NodePrepareResources gives
//! a CDI device whose spec puts a process under the claim's cap; NodeUnprepareResources
//! removes it all. Claims that cannot be prepared get their own errors and cost nothing.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::dra::{claim, DraNode};
use support::{wait_until, GIB, NODE};
use tessera_controld::policy::{ComputePolicy, Priority};
use tessera_k8s::dra::slice::slice_name;
use tessera_k8s::dra::{DRIVER, PLUGIN_TYPE};
use tessera_tests::{artifacts, run_with_timeout, stdout_json};

const NS: &str = "ml";

/// A ResourceClaim as the scheduler leaves it: `results` allocated, `config` beside them.
fn allocated_claim(name: &str, uid: &str, results: Value, config: Value) -> Value {
    json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": NS, "name": name, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.tessera.dev",
            "capacity": {"requests": {"cores": "30", "memory": "4Gi"}},
        }}]}},
        "status": {"allocation": {"devices": {"results": results, "config": config}}},
    })
}

/// One allocation result of our driver.
fn result(pool: &str, device: &str, cores: &str, memory: &str) -> Value {
    json!({"request": "gpu", "driver": DRIVER, "pool": pool, "device": device,
           "consumedCapacity": {"cores": cores, "memory": memory}})
}

/// An opaque configuration of our driver from the claim.
fn parameters(parameters: Value) -> Value {
    json!([{"source": "FromClaim", "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": parameters}}])
}

/// The edits of a CDI spec's one device: its variables, and its mounts by container path.
fn cdi_edits(spec: &Value) -> (Vec<String>, Vec<Value>) {
    let edits = &spec["devices"][0]["containerEdits"];
    let env = edits["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    (env, edits["mounts"].as_array().unwrap().clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_prepared_into_a_capped_container_and_unprepared() {
    let node = DraNode::start("dra").await;
    let info = &node.kubelet.info;
    assert_eq!(info.r#type, PLUGIN_TYPE);
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.supported_versions, ["v1.DRAPlugin"]);
    assert_eq!(
        std::path::Path::new(&info.endpoint),
        node.dir.0.join("plugins").join(DRIVER).join("dra.sock")
    );
    assert!(node
        .kubelet
        .registration_socket
        .ends_with("gpu.tessera.dev-reg.sock"));

    // The slice: both cards, with their UUIDs and consumable capacity.
    let name = slice_name(NODE);
    wait_until(Duration::from_secs(30), "the ResourceSlice", || async {
        node.api.resource_slices().contains_key(&name)
    })
    .await;
    let slice = &node.api.resource_slices()[&name];
    assert_eq!(slice["spec"]["driver"], DRIVER);
    assert_eq!(slice["spec"]["nodeName"], NODE);
    assert_eq!(slice["spec"]["pool"]["name"], NODE);
    let status = node.controld.status().await.unwrap();
    let devices = slice["spec"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for (device, gpu) in devices.iter().zip(&status.gpus) {
        assert_eq!(device["name"], format!("gpu-{}", gpu.index));
        assert_eq!(device["attributes"]["uuid"]["string"], gpu.uuid.as_str());
        assert_eq!(device["allowMultipleAllocations"], true);
        assert_eq!(device["capacity"]["cores"]["value"], "100");
        assert_eq!(
            device["capacity"]["memory"]["value"],
            (40 * GIB).to_string()
        );
    }
    // Deleted (as the kubelet does when a driver goes), it comes back.
    node.api.delete_resource_slice(&name);
    wait_until(
        Duration::from_secs(30),
        "the ResourceSlice again",
        || async { node.api.resource_slices().contains_key(&name) },
    )
    .await;

    // The scheduler allocated 30 cores and 4 GiB of GPU 1, fixed and offline.
    node.api.put_resource_claim(allocated_claim(
        "train",
        "uid-train",
        json!([result(NODE, "gpu-1", "30", "4Gi")]),
        parameters(json!({"policy": "fixed", "priority": "offline"})),
    ));
    let train = claim(NS, "train", "uid-train");
    let answers = node.kubelet.prepare(std::slice::from_ref(&train)).await;
    let answer = &answers["uid-train"];
    assert_eq!(answer.error, "", "{}", node.log());
    assert_eq!(answer.devices.len(), 1);
    let device = &answer.devices[0];
    assert_eq!(device.request_names, ["gpu"]);
    assert_eq!(
        (device.pool_name.as_str(), device.device_name.as_str()),
        (NODE, "gpu-1")
    );
    let [cdi_id] = device.cdi_device_ids.as_slice() else {
        panic!("one CDI device: {device:?}");
    };
    let container = cdi_id
        .strip_prefix("tessera.dev/container=")
        .unwrap_or_else(|| panic!("{cdi_id}"))
        .to_string();

    // controld's container: the claim's cap and policy, on GPU 1 only.
    let containers = node.containers().await;
    assert_eq!(containers.len(), 1);
    let spec = &containers[0].spec;
    assert_eq!(spec.name.as_str(), container);
    assert_eq!(spec.gpus.as_slice(), [1]);
    assert_eq!(spec.memory.map(|m| m.0), Some(4 * GIB));
    assert_eq!(spec.compute, ComputePolicy::Fixed(30));
    assert_eq!(spec.priority, Priority::Offline);

    // The CDI spec: the card, the region, and the board read-only (offline work does not
    // hold back online work).
    let spec_path = node.cdi_dir().join(format!("tessera-{container}.json"));
    let cdi: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    assert_eq!(cdi["kind"], "tessera.dev/container");
    assert_eq!(cdi["devices"][0]["name"], container.as_str());
    let (env, mounts) = cdi_edits(&cdi);
    let uuid1 = &status.gpus[1].uuid;
    assert!(
        env.contains(&format!("NVIDIA_VISIBLE_DEVICES={uuid1}")),
        "{env:?}"
    );
    let region_in_container = format!("/run/tessera/{container}.region");
    assert!(
        env.contains(&format!("TESSERA_REGION={region_in_container}")),
        "{env:?}"
    );
    let mount = |path: &str| {
        mounts
            .iter()
            .find(|m| m["containerPath"] == path)
            .unwrap_or_else(|| panic!("no mount at {path}: {mounts:?}"))
            .clone()
    };
    let board = mount("/run/tessera/board");
    assert!(
        board["options"].as_array().unwrap().contains(&json!("ro")),
        "{board}"
    );
    let region_host = mount(&region_in_container)["hostPath"]
        .as_str()
        .unwrap()
        .to_string();

    // A process in it sees the cap as the card's memory and stops there.
    let mut cmd = node.sim.command(&artifacts().gpuload);
    cmd.env("LD_PRELOAD", &artifacts().libtessera)
        .env("TESSERA_REGION", &region_host)
        .env(simgpu::config::ENV_CONTAINER_DEVICES, uuid1)
        .args(["alloc", "--device", "0"]);
    let report = tokio::task::spawn_blocking(move || {
        stdout_json(
            &run_with_timeout(&mut cmd, Duration::from_secs(120)),
            "gpuload alloc",
        )
    })
    .await
    .unwrap();
    assert_eq!(report["total"].as_u64(), Some(4 * GIB), "{report}");
    assert_eq!(report["error"], "CUDA_ERROR_OUT_OF_MEMORY", "{report}");
    assert!(report["bytes"].as_u64().unwrap() <= 4 * GIB, "{report}");

    // Prepared again (a kubelet restart): the same answer, the same one container.
    let again = node.kubelet.prepare(std::slice::from_ref(&train)).await;
    assert_eq!(again["uid-train"], *answer);
    assert_eq!(node.containers().await.len(), 1);

    // Its sockets removed (a careless cleanup of the kubelet's directories), the driver
    // serves them again and registers anew.
    std::fs::remove_file(&node.kubelet.registration_socket).unwrap();
    let registry = node.dir.0.join("registry");
    let again = support::dra::FakeDraKubelet::register(&registry, Duration::from_secs(30)).await;
    assert_eq!(again.info, node.kubelet.info);
    let answers = again.prepare(std::slice::from_ref(&train)).await;
    assert_eq!(answers["uid-train"], *answer);

    // Unprepared: the container, its region and its CDI spec go; again is no error.
    for _ in 0..2 {
        let answers = node.kubelet.unprepare(std::slice::from_ref(&train)).await;
        assert_eq!(answers["uid-train"].error, "");
        assert!(node.containers().await.is_empty());
        assert!(!spec_path.exists(), "the CDI spec is removed");
        assert!(
            !node
                .state_dir()
                .join(format!("{container}.region"))
                .exists(),
            "the region is freed"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_that_cannot_be_prepared_get_their_own_errors_and_spare_the_rest() {
    let mut node = DraNode::start("dra-bad").await;
    let good = || result(NODE, "gpu-0", "20", "2Gi");
    let claims = [
        ("good", good(), json!([])),
        (
            "elsewhere",
            result("node-b", "gpu-0", "20", "2Gi"),
            json!([]),
        ),
        ("cores", result(NODE, "gpu-0", "150", "2Gi"), json!([])),
        ("memory", result(NODE, "gpu-0", "20", "41Gi"), json!([])),
        ("nodevice", result(NODE, "gpu-9", "20", "2Gi"), json!([])),
        ("policy", good(), parameters(json!({"policy": "turbo"}))),
        ("unknown", good(), parameters(json!({"cores": 50}))),
    ];
    for (name, result, config) in &claims {
        node.api.put_resource_claim(allocated_claim(
            name,
            &format!("uid-{name}"),
            json!([result]),
            config.clone(),
        ));
    }
    let mut asked: Vec<_> = claims
        .iter()
        .map(|(name, ..)| claim(NS, name, &format!("uid-{name}")))
        .collect();
    // Not on the API server; and one whose UID is not the stored claim's.
    asked.push(claim(NS, "missing", "uid-missing"));
    asked.push(claim(NS, "good", "uid-old-good"));
    let answers = node.kubelet.prepare(&asked).await;
    assert_eq!(answers["uid-good"].error, "");
    assert_eq!(answers["uid-good"].devices.len(), 1);
    for (uid, wanted) in [
        ("uid-elsewhere", "allocated on another node"),
        ("uid-cores", "asks 150 cores"),
        ("uid-memory", "has 40"),
        ("uid-nodevice", "not a card of this node"),
        ("uid-policy", "\"turbo\" is not fixed, burst or best-effort"),
        ("uid-unknown", "unknown field"),
        ("uid-missing", "not on the API server"),
        ("uid-old-good", "made again"),
    ] {
        let answer = &answers[uid];
        assert!(
            answer.error.contains(wanted),
            "{uid}: {:?} lacks {wanted:?}",
            answer.error
        );
        assert!(answer.devices.is_empty(), "{uid}");
    }
    // Only the good claim has a container; the driver runs on and prepares again.
    assert_eq!(node.containers().await.len(), 1);
    assert!(node.driver_running(), "{}", node.log());
    let again = node.kubelet.prepare(&[claim(NS, "good", "uid-good")]).await;
    assert_eq!(again["uid-good"], answers["uid-good"]);

    // A second claim on the same card that does not fit beside the first.
    node.api.put_resource_claim(allocated_claim(
        "crowd",
        "uid-crowd",
        json!([result(NODE, "gpu-0", "50", "39Gi")]),
        json!([]),
    ));
    let crowd = node
        .kubelet
        .prepare(&[claim(NS, "crowd", "uid-crowd")])
        .await;
    assert!(
        crowd["uid-crowd"].error.contains("left of"),
        "{:?}",
        crowd["uid-crowd"].error
    );
    assert_eq!(node.containers().await.len(), 1);

    // Unprepare of everything, prepared or not: no errors, nothing left.
    asked.push(claim(NS, "crowd", "uid-crowd"));
    let answers = node.kubelet.unprepare(&asked).await;
    for (uid, answer) in &answers {
        assert_eq!(answer.error, "", "{uid}");
    }
    assert!(node.containers().await.is_empty());
    let left: Vec<_> = std::fs::read_dir(node.cdi_dir())
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "CDI specs left: {left:?}");
}
