//! `gpuload`, a program that uses the driver the way applications do (dlopen +
//! `cuGetProcAddress_v2`), runs on simgpu: `memcheck` verifies its data, and `alloc` fills a
//! device up to its capacity less the context's overhead and stops with
//! `CUDA_ERROR_OUT_OF_MEMORY`.

use std::time::Duration;
use tessera_tests::{assert_success, json_u64, stdout_json, SimNode};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

#[test]
fn memcheck_verifies_its_data() {
    let node = SimNode::new("T4", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")]);
    let out = node.gpuload(&["memcheck"], Duration::from_secs(120));
    assert_success(&out, "gpuload memcheck");
    let doc = stdout_json(&out, "gpuload memcheck");
    assert_eq!(doc["mode"], "memcheck", "{doc}");
    assert_eq!(
        doc["verified"], true,
        "gpuload memcheck did not verify its data: {doc}"
    );
}

#[test]
fn alloc_stops_at_capacity_less_context_overhead() {
    for (memory, context) in [(4 * GIB, 256 * MIB), (6 * GIB, 300 * MIB)] {
        let devices = format!("Small:{}MiB:8", memory / MIB);
        let context_env = format!("{}MiB", context / MIB);
        let node = SimNode::new(&devices, &[("SIMGPU_CONTEXT_MEMORY", &context_env)]);
        let out = node.gpuload(&["alloc"], Duration::from_secs(120));
        assert_success(&out, "gpuload alloc");
        let doc = stdout_json(&out, "gpuload alloc");
        assert_eq!(doc["mode"], "alloc", "{doc}");
        assert_eq!(
            doc["error"], "CUDA_ERROR_OUT_OF_MEMORY",
            "gpuload alloc stopped for another reason: {doc}"
        );
        let bytes = json_u64(&doc, "/bytes");
        let usable = memory - context;
        let min_chunk = doc
            .get("min_chunk")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(2 * MIB);
        assert!(
            bytes <= usable && usable - bytes < min_chunk,
            "{devices} with a {context_env} context: gpuload allocated {bytes} bytes, expected \
             within {min_chunk} bytes below {usable}: {doc}"
        );
        assert!(json_u64(&doc, "/chunks") > 0, "{doc}");
    }
}
