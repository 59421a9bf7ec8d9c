//! The metrics endpoint serves text that a Prometheus parser written by others
//! accepts. The server runs on loopback with a fixed status; the text is fetched over TCP and
//! parsed by the Python client library's parser (`prometheus_client.parser`), and every
//! family, type, label and value is checked against the status.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tessera_controld::metrics::{MetricsServer, CONTENT_TYPE};
use tessera_controld::status::{
    ContainerDevice, ContainerProcess, ContainerStatus, GpuStatus, NodeStatus, UnmanagedProcess,
};

/// Parses the text on stdin and prints the families as JSON: name, type, and per sample its
/// name, labels and value (non-finite values as strings).
const PARSE: &str = r#"
import json, math, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    samples = []
    for s in family.samples:
        v = s.value if math.isfinite(s.value) else str(s.value)
        samples.append([s.name, s.labels, v])
    out.append({"name": family.name, "type": family.type, "samples": samples})
print(json.dumps(out))
"#;

fn device(gpu: u32, used: u64, cap: Option<u64>) -> ContainerDevice {
    ContainerDevice {
        gpu,
        memory_used: used,
        memory_cap: cap,
        real_memory_used: Some(used + (300 << 20)),
        share_target: Some(0.3),
        share_measured: Some(0.295),
        share_measured_until_ns: None,
        real_share: None,
        granted_ns: None,
        granted_until_ns: None,
        compute_held: false,
        compute_holds: 0,
        throttled_ns: 2_250_000_000,
        preemptions: 4,
    }
}

fn node() -> NodeStatus {
    let gpu = |index: u32, name: &str| GpuStatus {
        index,
        name: name.to_string(),
        uuid: format!("GPU-{index:08x}-0000-0000-0000-000000000000"),
        memory_total: 80 << 30,
        memory_used: 5 << 30,
        utilization_percent: Some(87.5),
    };
    NodeStatus {
        taken_unix_ms: 1_767_225_600_123,
        gpus: vec![
            gpu(0, "NVIDIA A100-SXM4-80GB"),
            // Every character a label value must escape.
            gpu(1, "odd \"name\" with \\ and\nnewline"),
        ],
        containers: vec![
            ContainerStatus {
                name: "inference".to_string(),
                compute: "burst:30".to_string(),
                priority: "online".to_string(),
                timeslice: "driver".to_string(),
                timeslice_state: String::new(),
                timeslice_set_us: None,
                timeslice_unavailable: false,
                region: PathBuf::from("/run/tessera/inference.region"),
                devices: vec![device(0, 2 << 30, Some(8 << 30)), device(1, 0, None)],
                processes: vec![ContainerProcess {
                    slot: 3,
                    pid: 7,
                    host_pids: vec![4242],
                    memory: vec![2 << 30, 0],
                }],
                problems: Vec::new(),
                region_quarantines: 0,
                regions_set_aside: Vec::new(),
                watchdog_kills: 0,
            },
            ContainerStatus {
                name: "trainer".to_string(),
                compute: "best-effort".to_string(),
                priority: "offline".to_string(),
                timeslice: "100us".to_string(),
                timeslice_state: "not available: the driver refused it".to_string(),
                timeslice_set_us: None,
                timeslice_unavailable: true,
                region: PathBuf::from("/run/tessera/trainer.region"),
                devices: vec![ContainerDevice {
                    share_target: None,
                    share_measured: None,
                    share_measured_until_ns: None,
                    real_share: None,
                    granted_ns: None,
                    granted_until_ns: None,
                    compute_held: false,
                    compute_holds: 0,
                    real_memory_used: None,
                    ..device(0, 1 << 30, Some(1 << 30))
                }],
                processes: Vec::new(),
                problems: vec!["a problem".to_string()],
                region_quarantines: 2,
                regions_set_aside: Vec::new(),
                watchdog_kills: 3,
            },
        ],
        unmanaged: vec![UnmanagedProcess {
            gpu: 1,
            pid: 999,
            memory: 700 << 20,
        }],
        ..NodeStatus::default()
    }
}

/// `GET <path>` over a fresh connection: the status line, the headers and the body.
fn get(addr: SocketAddr, path: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics server");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read the reply");
    let (head, body) = reply.split_once("\r\n\r\n").expect("a reply with a head");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// A Python interpreter with `prometheus_client` (see `tessera_tests::python_with`).
fn python() -> PathBuf {
    tessera_tests::python_with("import prometheus_client.parser")
}

/// The families `text` holds, as the Python parser reads them.
fn parse(text: &str) -> Vec<Value> {
    let mut child = Command::new(python())
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the metrics:\n{}\n--- the text:\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: Value = serde_json::from_slice(&out.stdout).expect("the script's JSON");
    families.as_array().expect("a list of families").clone()
}

/// The value of the sample `name` with exactly `labels`, if any.
fn value(families: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<Value> {
    families
        .iter()
        .flat_map(|f| f["samples"].as_array().unwrap())
        .find(|s| {
            let have = s[1].as_object().unwrap();
            s[0] == name
                && have.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| have.get(*k) == Some(&Value::from(*v)))
        })
        .map(|s| s[2].clone())
}

#[test]
fn the_endpoint_serves_text_a_prometheus_parser_accepts() {
    let server = MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), Arc::new(node))
        .expect("start the metrics server");
    let (status, headers, body) = get(server.local_addr(), "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        headers.contains(&format!("Content-Type: {CONTENT_TYPE}")),
        "{headers}"
    );
    assert!(CONTENT_TYPE.starts_with("text/plain; version=0.0.4"));

    let families = parse(&body);
    let sample_lines = body.lines().filter(|l| !l.starts_with('#')).count();
    let samples: usize = families
        .iter()
        .map(|f| f["samples"].as_array().unwrap().len())
        .sum();
    assert_eq!(samples, sample_lines, "every sample line parsed:\n{body}");

    // Types as declared; the parser names a counter family without `_total`.
    let kind = |name: &str| {
        families
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no family {name} in:\n{body}"))["type"]
            .clone()
    };
    for gauge in [
        "tessera_gpu_utilization_ratio",
        "tessera_gpu_memory_used_bytes",
        "tessera_gpu_memory_total_bytes",
        "tessera_gpu_unmanaged_processes",
        "tessera_container_memory_used_bytes",
        "tessera_container_memory_cap_bytes",
        "tessera_container_real_memory_used_bytes",
        "tessera_container_gpu_share_target_ratio",
        "tessera_container_gpu_share_measured_ratio",
    ] {
        assert_eq!(kind(gauge), "gauge", "{gauge}");
    }
    for counter in [
        "tessera_container_throttled_seconds",
        "tessera_container_preemptions",
    ] {
        assert_eq!(kind(counter), "counter", "{counter}");
    }

    let inference0 = [("container", "inference"), ("gpu", "0")];
    let expect = |name: &str, labels: &[(&str, &str)], want: f64| {
        let got = value(&families, name, labels)
            .unwrap_or_else(|| panic!("no sample {name}{labels:?} in:\n{body}"));
        assert_eq!(got.as_f64(), Some(want), "{name}{labels:?}");
    };
    expect(
        "tessera_container_memory_used_bytes",
        &inference0,
        (2u64 << 30) as f64,
    );
    expect(
        "tessera_container_memory_cap_bytes",
        &inference0,
        (8u64 << 30) as f64,
    );
    expect(
        "tessera_container_real_memory_used_bytes",
        &inference0,
        ((2u64 << 30) + (300 << 20)) as f64,
    );
    expect("tessera_container_gpu_share_target_ratio", &inference0, 0.3);
    expect(
        "tessera_container_gpu_share_measured_ratio",
        &inference0,
        0.295,
    );
    expect(
        "tessera_container_throttled_seconds_total",
        &inference0,
        2.25,
    );
    expect("tessera_container_preemptions_total", &inference0, 4.0);
    expect(
        "tessera_container_info",
        &[
            ("container", "trainer"),
            ("compute", "best-effort"),
            ("priority", "offline"),
        ],
        1.0,
    );
    expect(
        "tessera_container_problems",
        &[("container", "trainer")],
        1.0,
    );
    expect(
        "tessera_container_region_quarantines_total",
        &[("container", "trainer")],
        2.0,
    );
    expect(
        "tessera_container_watchdog_kills_total",
        &[("container", "trainer")],
        3.0,
    );
    expect(
        "tessera_container_timeslice_unavailable",
        &[("container", "trainer")],
        1.0,
    );
    expect("tessera_gpu_utilization_ratio", &[("gpu", "0")], 0.875);
    expect(
        "tessera_gpu_memory_total_bytes",
        &[("gpu", "1")],
        (80u64 << 30) as f64,
    );
    expect("tessera_gpu_unmanaged_processes", &[("gpu", "0")], 0.0);
    expect("tessera_gpu_unmanaged_processes", &[("gpu", "1")], 1.0);
    expect(
        "tessera_gpu_unmanaged_memory_bytes",
        &[("gpu", "1")],
        (700u64 << 20) as f64,
    );
    // The escaped label value reads back to the original.
    expect(
        "tessera_gpu_info",
        &[
            ("gpu", "1"),
            ("name", "odd \"name\" with \\ and\nnewline"),
            ("uuid", "GPU-00000001-0000-0000-0000-000000000000"),
        ],
        1.0,
    );
    // What the status does not know has no sample: an unlimited cap, an unmeasured share.
    assert_eq!(
        value(
            &families,
            "tessera_container_memory_cap_bytes",
            &[("container", "inference"), ("gpu", "1")]
        ),
        None
    );
    assert_eq!(
        value(
            &families,
            "tessera_container_gpu_share_measured_ratio",
            &[("container", "trainer"), ("gpu", "0")]
        ),
        None
    );

    let (status, _, _) = get(server.local_addr(), "/");
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
}
