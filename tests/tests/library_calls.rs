//! What NVIDIA's math libraries ask of the driver beyond a plain program's: cuBLASLt looks up
//! peer access, stream batch memory operations, tensor maps and graph-node entry points as it
//! loads (it fails to initialize when one is missing, as PyTorch's matrix products did on
//! simgpu) and uses them to choose and replay its kernels. `tests/clients/library_calls.py`
//! makes each call through ctypes on a node of two devices; here each answer is held to the
//! driver API's documented behaviour.

use serde_json::Value;
use std::time::Duration;
use tessera_cuda_abi as abi;
use tessera_tests::{
    assert_success, json_u64, kernels_ptx, run_with_timeout, stdout_json, workspace_root, SimNode,
};

/// `CUresult` values the calls answer with, as the report's numbers.
const SUCCESS: u64 = abi::CUDA_SUCCESS as u64;
const INVALID_VALUE: u64 = abi::CUDA_ERROR_INVALID_VALUE as u64;
const INVALID_CONTEXT: u64 = abi::CUDA_ERROR_INVALID_CONTEXT as u64;
const PEER_ACCESS_ALREADY_ENABLED: u64 = abi::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED as u64;
const PEER_ACCESS_NOT_ENABLED: u64 = abi::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED as u64;

fn report() -> Value {
    let node = SimNode::new("Small:4GiB:8,Small:4GiB:8", &[]);
    let mut cmd = node.command("python3");
    cmd.arg(workspace_root().join("tests/clients/library_calls.py"))
        .arg("libcuda.so.1")
        .arg(kernels_ptx());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120));
    assert_success(&out, "library_calls.py");
    stdout_json(&out, "library_calls.py")
}

fn code(doc: &Value, path: &str) -> u64 {
    json_u64(doc, path)
}

#[test]
fn what_cublaslt_asks_of_the_driver() {
    let doc = report();

    // Peer access: once, not twice; undone once; never a context with itself.
    assert_eq!(code(&doc, "/peer/enable"), SUCCESS, "{doc}");
    assert_eq!(
        code(&doc, "/peer/enable_again"),
        PEER_ACCESS_ALREADY_ENABLED,
        "{doc}"
    );
    assert_eq!(code(&doc, "/peer/disable"), SUCCESS, "{doc}");
    assert_eq!(
        code(&doc, "/peer/disable_again"),
        PEER_ACCESS_NOT_ENABLED,
        "{doc}"
    );
    assert_eq!(code(&doc, "/peer/self"), INVALID_CONTEXT, "{doc}");
    assert_eq!(code(&doc, "/peer/bad_flags"), INVALID_VALUE, "{doc}");

    // A batch's writes land in stream order; a batch with a bad member queues nothing.
    assert_eq!(code(&doc, "/batch/result"), SUCCESS, "{doc}");
    assert_eq!(code(&doc, "/batch/word32"), 7, "{doc}");
    assert_eq!(code(&doc, "/batch/word64"), 0x1122_3344_5566_7788, "{doc}");
    assert_eq!(code(&doc, "/batch/bad_result"), INVALID_VALUE, "{doc}");
    assert_eq!(code(&doc, "/batch/word32_after_bad"), 7, "{doc}");

    // Tensor maps: the documented alignments of the address and of the map itself.
    assert_eq!(code(&doc, "/tensor/encode"), SUCCESS, "{doc}");
    assert_eq!(code(&doc, "/tensor/misaligned"), INVALID_VALUE, "{doc}");
    assert_eq!(code(&doc, "/tensor/replace"), SUCCESS, "{doc}");
    assert_eq!(code(&doc, "/tensor/unaligned_map"), INVALID_VALUE, "{doc}");

    // Graph nodes: listed in capture order with their types (memset 2, memcpy 1, kernel 0),
    // the rest of the caller's array cleared; the kernel node's launch as captured; an
    // update of the instantiated graph runs with the new argument.
    let g = &doc["graph"];
    assert_eq!(code(g, "/count"), 3, "{doc}");
    assert_eq!(code(g, "/returned"), 3, "{doc}");
    assert_eq!(g["types"], serde_json::json!([2, 1, 0]), "{doc}");
    assert_eq!(g["cleared"], true, "{doc}");
    assert_eq!(code(g, "/params_of_memset"), INVALID_VALUE, "{doc}");
    assert_eq!(g["grid"], serde_json::json!([4, 1, 1]), "{doc}");
    assert_eq!(g["block"], serde_json::json!([256, 1, 1]), "{doc}");
    assert_eq!(g["same_function"], true, "{doc}");
    assert_eq!(code(g, "/args/1"), 1024, "{doc}");
    assert_eq!(code(g, "/args/2"), 1, "the captured fill value: {doc}");
    assert_eq!(code(g, "/set"), SUCCESS, "{doc}");
    assert_eq!(code(g, "/set_on_memset"), INVALID_VALUE, "{doc}");
    assert_eq!(
        g["filled"],
        serde_json::json!([5]),
        "the launched graph filled with the updated value: {doc}"
    );
}
