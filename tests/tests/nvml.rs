//! NVML reads the node state, as monitoring tools expect: device count, names, UUIDs,
//! memory (v1 and v2), and the running compute processes (v3) with their memory, including
//! other processes'.

use serde_json::Value;
use std::time::Duration;
use tessera_tests::{
    assert_success, compile_client, json_u64, linked_client, run_with_timeout, stdout_json,
    Running, SimNode,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const CONTEXT: u64 = 128 * MIB;

fn nvml_view(node: &SimNode) -> Value {
    let exe = compile_client("nvml_client", &["nvml_client.c"], &["-ldl"]);
    let out = run_with_timeout(&mut node.command(&exe), Duration::from_secs(30));
    assert_success(&out, "nvml_client");
    stdout_json(&out, "nvml_client")
}

/// The UUID string of a device in `simgpu stat --json` (a string, or 16 bytes).
fn stat_uuid(device: &Value) -> String {
    if let Some(s) = device["uuid"].as_str() {
        return s.to_string();
    }
    let bytes: Vec<u8> = device["uuid"]
        .as_array()
        .unwrap_or_else(|| panic!("no uuid in {device}"))
        .iter()
        .map(|b| b.as_u64().expect("uuid byte") as u8)
        .collect();
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[test]
fn nvml_shows_devices_memory_and_other_processes() {
    let node = SimNode::new("Small:4GiB:8,T4", &[("SIMGPU_CONTEXT_MEMORY", "128MiB")]);
    let hold = linked_client("memhold");
    let mut holder = Running::spawn(
        node.command(&hold)
            .args(["hold", &(512 * MIB).to_string(), "0"]),
        "memhold hold 512MiB",
    );
    holder.wait_for_line("ready", Duration::from_secs(30));
    let pid = u64::from(holder.pid());

    let view = nvml_view(&node);
    assert_eq!(json_u64(&view, "/count"), 2, "device count: {view}");
    assert!(
        view["driver_version"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "driver version: {view}"
    );
    let stat = node.stat();
    let held = 512 * MIB + CONTEXT;

    let small = &view["devices"][0];
    assert_eq!(small["name"], "Small", "{small}");
    assert_eq!(
        small["uuid"].as_str(),
        Some(stat_uuid(&stat["devices"][0]).as_str())
    );
    assert_eq!(json_u64(small, "/total"), 4 * GIB, "{small}");
    assert_eq!(
        json_u64(small, "/used"),
        held,
        "v1 used = the holder's allocation + context"
    );
    assert_eq!(json_u64(small, "/free"), 4 * GIB - held, "{small}");
    assert_eq!(json_u64(small, "/v2/total"), 4 * GIB, "{small}");
    assert_eq!(
        json_u64(small, "/v2/used") + json_u64(small, "/v2/reserved") + json_u64(small, "/v2/free"),
        4 * GIB,
        "v2: used + reserved + free = total: {small}"
    );
    assert_eq!(
        json_u64(small, "/v2/free"),
        4 * GIB - held - json_u64(small, "/v2/reserved")
    );
    let procs = small["processes"].as_array().expect("processes");
    let holder_entry = procs
        .iter()
        .find(|p| p["pid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("the holder (pid {pid}) is not among the processes: {small}"));
    assert_eq!(
        json_u64(holder_entry, "/memory"),
        held,
        "the holder's usedGpuMemory"
    );
    assert_eq!(procs.len(), 1, "only the holder uses device 0: {small}");

    let t4 = &view["devices"][1];
    assert_eq!(t4["name"], "Tesla T4", "{t4}");
    assert_eq!(json_u64(t4, "/total"), 16 * GIB, "{t4}");
    assert_eq!(json_u64(t4, "/used"), 0, "nobody uses device 1: {t4}");
    assert_eq!(t4["processes"].as_array().map(Vec::len), Some(0), "{t4}");
    assert_ne!(small["uuid"], t4["uuid"], "two devices share a UUID");

    // NVML follows the node: when the holder dies, its memory and entry go.
    holder.kill();
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let view = nvml_view(&node);
        let small = &view["devices"][0];
        if json_u64(small, "/used") == 0 && small["processes"].as_array().is_some_and(Vec::is_empty)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "2 s after SIGKILL NVML still shows the holder: {small}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
