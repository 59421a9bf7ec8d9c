//! What a container sees of a two-GPU node: only the GPUs it was given (by the config or by
//! `exec --gpus`), through the driver and through NVML, and only its own processes in
//! NVML's process lists.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;
use tessera_tests::{compile_client, tessera_client, ClientKind, Running, SimNode};

const CONFIG: &str = r#"
[[container]]
name = "alpha"
gpus = [1]
memory = "4GiB"

[[container]]
name = "beta"
gpus = [0, 1]
memory = "4GiB"
"#;

fn two_gpu_node(what: &str) -> Node {
    Node {
        sim: SimNode::new("A100-40GB,A100-40GB", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")]),
        dir: TempDir::new(what),
        daemon: None,
    }
}

fn nvml_client() -> std::path::PathBuf {
    compile_client("nvml_client", &["nvml_client.c"], &["-ldl"])
}

/// NVML's view, as `nvml_client` prints it, from the output of a run.
fn nvml_doc(out: &std::process::Output, what: &str) -> Value {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn uuids(doc: &Value) -> Vec<String> {
    doc["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["uuid"].as_str().unwrap().to_string())
        .collect()
}

fn pids(doc: &Value) -> Vec<u64> {
    doc["devices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["processes"].as_array().unwrap().clone())
        .map(|p| p["pid"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_container_sees_only_its_gpus_and_its_own_processes() {
    let mut node = two_gpu_node("visibility");
    let config = node.write_config(CONFIG);
    node.start(Some(&config));
    let nvml = nvml_client();
    let whole = nvml_doc(
        &tessera_tests::run_with_timeout(&mut node.sim.command(&nvml), Duration::from_secs(30)),
        "nvml_client outside any container",
    );
    let node_uuids = uuids(&whole);
    assert_eq!(node_uuids.len(), 2, "{whole}");

    // A process of alpha (given GPU 1) holds memory on its only GPU.
    let client = tessera_client(ClientKind::CLinked);
    let mut holder = Running::spawn_interactive(
        node.in_container("alpha", &client)
            .args(["hold", "1048576"]),
        "hold in alpha",
    );
    let ready = holder.wait_for_json("ready ", Duration::from_secs(60));
    let holder_pid = ready["pid"].as_u64().unwrap();

    // alpha: one GPU, node GPU 1, and its own process on it.
    let out = tessera_tests::run_with_timeout(
        &mut node.in_container("alpha", &nvml),
        Duration::from_secs(30),
    );
    let alpha = nvml_doc(&out, "nvml_client in alpha");
    assert_eq!(alpha["count"], 1, "alpha sees one GPU: {alpha}");
    assert_eq!(uuids(&alpha), [node_uuids[1].clone()], "{alpha}");
    assert!(
        pids(&alpha).contains(&holder_pid),
        "alpha sees its process: {alpha}"
    );

    // beta: both GPUs, and none of alpha's processes (which NVML lists outside containers).
    let outside = nvml_doc(
        &tessera_tests::run_with_timeout(&mut node.sim.command(&nvml), Duration::from_secs(30)),
        "nvml_client outside any container",
    );
    assert!(
        pids(&outside).contains(&holder_pid),
        "the node lists alpha's process: {outside}"
    );
    let beta = nvml_doc(
        &tessera_tests::run_with_timeout(
            &mut node.in_container("beta", &nvml),
            Duration::from_secs(30),
        ),
        "nvml_client in beta",
    );
    assert_eq!(beta["count"], 2, "{beta}");
    assert!(
        !pids(&beta).contains(&holder_pid),
        "beta must not see alpha's process: {beta}"
    );

    // exec --gpus 0: one GPU, node GPU 0, no other container's process.
    let exec_nvml = node.ctl(&["exec", "--gpus", "0", "--", nvml.to_str().unwrap()]);
    let exec = nvml_doc(&exec_nvml, "exec --gpus 0 nvml_client");
    assert_eq!(exec["count"], 1, "{exec}");
    assert_eq!(uuids(&exec), [node_uuids[0].clone()], "{exec}");
    assert!(!pids(&exec).contains(&holder_pid), "{exec}");

    // The driver agrees: one device, and the node's GPU 1 is not there at all.
    let names = node.ctl(&[
        "exec",
        "--gpus",
        "1",
        "--",
        client.to_str().unwrap(),
        "names",
    ]);
    assert!(
        names.status.success(),
        "{}",
        String::from_utf8_lossy(&names.stderr)
    );
    let text = String::from_utf8_lossy(&names.stdout);
    let doc: Value = serde_json::from_str(
        text.lines()
            .find_map(|l| l.strip_prefix("names "))
            .unwrap_or_else(|| panic!("no names report: {text}")),
    )
    .unwrap();
    assert_eq!(doc["count"], 1, "exec --gpus 1 sees one device: {doc}");
    let hidden = node.ctl(&[
        "exec",
        "--gpus",
        "0",
        "--",
        client.to_str().unwrap(),
        "probe",
        "1",
    ]);
    assert!(
        !hidden.status.success(),
        "ordinal 1 must not exist in a one-GPU container"
    );
    let err = String::from_utf8_lossy(&hidden.stderr);
    assert!(
        err.contains("CUDA_ERROR_INVALID_DEVICE"),
        "a GPU not given is not there (not out of memory): {err}"
    );
    holder.kill();
}

/// A container given only GPU 1 of a two-GPU node sees it as its device 0, and is gated,
/// measured and charged on GPU 1's account: the node index, not the ordinal it sees.
#[test]
fn a_container_given_gpu_1_is_gated_on_gpu_1() {
    let _serial = tessera_tests::timing_lock();
    let mut node = two_gpu_node("gated-on-gpu-1");
    let config = node.write_config(
        "[[container]]\nname = \"alpha\"\ngpus = [1]\ncompute = \"fixed:30\"\nmemory = \"4GiB\"\n",
    );
    node.start(Some(&config));
    let mut cmd = node.in_container("alpha", &tessera_tests::artifacts().gpuload);
    cmd.args(["train", "--kernel-ms", "1", "--seconds", "3"]);
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "gpuload train in alpha: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("gpuload's report");
    assert_eq!(report["device"], 0, "alpha sees its one GPU as device 0");
    // It ran on GPU 1 (simgpu's count), held to about its 30 %.
    let fraction = report["gpu_fraction"].as_f64().unwrap();
    assert!(
        (0.15..=0.45).contains(&fraction),
        "fixed:30 on GPU 1 got {:.1} % of the GPU",
        fraction * 100.0
    );
    let region = tessera_region::Region::open(&node.region("alpha")).expect("alpha's region");
    use std::sync::atomic::Ordering::Relaxed;
    let (gpu0, gpu1) = (region.compute(0), region.compute(1));
    assert!(
        gpu1.launches.load(Relaxed) > 0 && gpu1.measured_ns.load(Relaxed) > 0,
        "nothing gated or measured on GPU 1's account"
    );
    assert_eq!(
        (gpu0.launches.load(Relaxed), gpu0.measured_ns.load(Relaxed)),
        (0, 0),
        "launches on GPU 1 were gated or charged on GPU 0's account"
    );
}

/// The variable through which simgpu plays a container runtime: the process sees only the
/// devices it names, numbered from 0, as NVIDIA's runtime shows a container its cards.
const RUNTIME_DEVICES: &str = "SIMGPU_CONTAINER_DEVICES";

/// A container started by a runtime that shows it only `card` (a UUID), as its device 0.
fn in_runtime(
    node: &Node,
    name: &str,
    card: &str,
    program: impl AsRef<std::ffi::OsStr>,
) -> std::process::Command {
    let mut cmd = node.in_container(name, program);
    cmd.env(RUNTIME_DEVICES, card);
    cmd
}

/// A two-GPU node whose container runtime renumbers the cards: the container given the
/// second card sees one GPU (that card, as device 0) with its cap, and is gated and charged
/// on the second card's account; the container given the first card runs beside it on its
/// own card, with its own share, untouched.
#[test]
fn a_runtime_that_renumbers_cards_leaves_each_container_on_its_own_card() {
    let _serial = tessera_tests::timing_lock();
    let mut node = two_gpu_node("renumbering-runtime");
    let config = node.write_config(
        "[[container]]\nname = \"second\"\ngpus = [1]\ncompute = \"fixed:30\"\nmemory = \"4GiB\"\n\n\
         [[container]]\nname = \"first\"\ngpus = [0]\ncompute = \"fixed:80\"\nmemory = \"8GiB\"\n",
    );
    node.start(Some(&config));
    let nvml = nvml_client();
    let whole = nvml_doc(
        &tessera_tests::run_with_timeout(&mut node.sim.command(&nvml), Duration::from_secs(30)),
        "nvml_client outside any container",
    );
    let cards = uuids(&whole);
    assert_eq!(cards.len(), 2, "{whole}");

    // NVML in each container: one GPU, its own card, with its own cap.
    for (name, card, cap) in [
        ("second", &cards[1], 4u64 << 30),
        ("first", &cards[0], 8 << 30),
    ] {
        let out = tessera_tests::run_with_timeout(
            &mut in_runtime(&node, name, card, &nvml),
            Duration::from_secs(30),
        );
        let doc = nvml_doc(&out, &format!("nvml_client in {name}"));
        assert_eq!(doc["count"], 1, "{name} sees one GPU: {doc}");
        assert_eq!(
            uuids(&doc),
            std::slice::from_ref(card),
            "{name} sees its own card: {doc}"
        );
        assert_eq!(doc["devices"][0]["total"], cap, "{name}'s cap: {doc}");
    }

    // Both train at once, each on the only device it sees.
    let train = |name: &str, card: &str| {
        let mut cmd = in_runtime(&node, name, card, &tessera_tests::artifacts().gpuload);
        cmd.args(["train", "--kernel-ms", "1", "--seconds", "3"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd.spawn().expect("start gpuload")
    };
    let (second, first) = (train("second", &cards[1]), train("first", &cards[0]));
    let reports: Vec<Value> = [("second", second), ("first", first)]
        .into_iter()
        .map(|(name, child)| {
            let out = tessera_tests::wait_with_timeout(child, Duration::from_secs(60), name);
            assert!(
                out.status.success(),
                "gpuload train in {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report: Value = serde_json::from_slice(&out.stdout).expect("gpuload's report");
            assert_eq!(report["device"], 0, "{name} sees its one card as device 0");
            report
        })
        .collect();
    let fraction = |r: &Value| r["gpu_fraction"].as_f64().unwrap();
    assert!(
        (0.15..=0.45).contains(&fraction(&reports[0])),
        "fixed:30 on the second card got {:.1} % of it",
        fraction(&reports[0]) * 100.0
    );
    assert!(
        fraction(&reports[1]) >= 0.5,
        "fixed:80 on the first card got only {:.1} % of it",
        fraction(&reports[1]) * 100.0
    );

    // Each was gated and charged on its own card's account only.
    use std::sync::atomic::Ordering::Relaxed;
    for (name, own, other) in [("second", 1, 0), ("first", 0, 1)] {
        let region = tessera_region::Region::open(&node.region(name)).expect("region");
        let (own, other) = (region.compute(own), region.compute(other));
        assert!(
            own.launches.load(Relaxed) > 0 && own.measured_ns.load(Relaxed) > 0,
            "{name}: nothing measured on its card's account"
        );
        assert_eq!(
            (
                other.launches.load(Relaxed),
                other.measured_ns.load(Relaxed)
            ),
            (0, 0),
            "{name}: work charged on the other card's account"
        );
    }
    let stat = node.sim.stat();
    for d in 0..2 {
        assert!(
            tessera_tests::json_u64(&stat, &format!("/devices/{d}/busy_ns")) > 0,
            "nothing ran on card {d}: {stat}"
        );
    }
}
