//! Programs written by others run on simgpu unchanged: a Rust client on the `cudarc` crate
//! (dynamic loading) and a Python client on NVIDIA's `cuda-bindings`, each allocating,
//! copying and querying memory.

use serde_json::Value;
use std::time::Duration;
use tessera_tests::{
    assert_success, json_u64, python_with_cuda_bindings, run_with_timeout, stdout_json,
    workspace_root, SimNode,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// What both clients must have seen on a `Small:4GiB:8` node with a 128 MiB context.
fn check_report(doc: &Value, who: &str) {
    let bytes = json_u64(doc, "/bytes");
    assert_eq!(doc["verified"], true, "{who}: {doc}");
    assert_eq!(doc["name"], "Small", "{who}: device name: {doc}");
    assert_eq!(
        json_u64(doc, "/total_mem"),
        4 * GIB,
        "{who}: cuDeviceTotalMem: {doc}"
    );
    assert_eq!(
        json_u64(doc, "/total"),
        4 * GIB,
        "{who}: cuMemGetInfo total: {doc}"
    );
    let free_before = json_u64(doc, "/free_before");
    assert_eq!(
        free_before,
        4 * GIB - 128 * MIB,
        "{who}: free before allocating (context only): {doc}"
    );
    assert!(
        json_u64(doc, "/free_during") <= free_before - bytes,
        "{who}: free memory did not drop by the allocation: {doc}"
    );
}

#[test]
fn cudarc_client() {
    let exe = tessera_tests::cudarc_client();

    let node = SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "128MiB")]);
    let out = run_with_timeout(&mut node.command(&exe), Duration::from_secs(60));
    assert_success(&out, "cudarc-client");
    let doc = stdout_json(&out, "cudarc-client");
    check_report(&doc, "cudarc");
}

#[test]
fn python_cuda_bindings_client() {
    let python = python_with_cuda_bindings();
    let node = SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "128MiB")]);
    let mut cmd = node.command(&python);
    cmd.arg(workspace_root().join("tests/clients/cuda_bindings_client.py"));
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120));
    assert_success(&out, "cuda_bindings_client.py");
    let doc = stdout_json(&out, "cuda_bindings_client.py");
    check_report(&doc, "cuda-bindings");
    assert!(
        json_u64(&doc, "/version") >= 12000,
        "cuDriverGetVersion: {doc}"
    );
    assert_eq!(
        json_u64(&doc, "/free_after"),
        json_u64(&doc, "/free_before"),
        "cuMemFree did not give the memory back: {doc}"
    );
}
