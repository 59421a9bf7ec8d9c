//! Prometheus metrics: [`render`] writes a [`NodeStatus`] in the text exposition format
//! (version 0.0.4), and [`MetricsServer`] serves it at `GET /metrics` over HTTP/1.1.
//!
//! The server is deliberately small: `Connection: close`, a bounded request and a deadline
//! for reading it, so that a slow or hostile client costs at most a few seconds and a few
//! KiB. Each connection has a thread of its own (small, at most [`MAX_CONNECTIONS`] at
//! once; past that a connection is closed at once), so slow clients never hold up a
//! scrape. It runs only where the config names an address.

use crate::status::{ContainerDevice, GpuStatus, NodeStatus};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The `Content-Type` of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The largest request head (request line and headers) the server reads.
const MAX_REQUEST: usize = 8 << 10;
/// How long one read from a client may block.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client has to send its whole request head.
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// How long writing the answer may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the server drains a client's unread bytes after answering.
const LINGER: Duration = Duration::from_millis(200);
/// Connections served at once; past that a new one is closed unanswered.
const MAX_CONNECTIONS: usize = 512;
/// The stack of a connection's thread: the status and its text, a few KiB each.
const STACK: usize = 256 << 10;

/// What kind of metric a family is.
#[derive(Clone, Copy)]
enum Kind {
    Gauge,
    Counter,
}

/// Writes families of samples in the text format.
struct Writer {
    out: String,
}

impl Writer {
    /// Starts a family: its `HELP` and `TYPE` lines.
    fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample of the family just started.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape_label(val));
            }
            self.out.push('}');
        }
        self.out.push(' ');
        self.out.push_str(&format_value(value));
        self.out.push('\n');
    }
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A `HELP` text: backslash and line feed escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value as the format spells floats (`NaN`, `+Inf`, `-Inf`).
fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_string()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        // Display is the shortest text that reads back to the same f64, never an exponent.
        format!("{value}")
    }
}

/// A byte count as a sample value (exact up to 2^53 bytes, 8 PiB).
fn bytes(value: u64) -> f64 {
    value as f64
}

/// Writes `status` in the Prometheus text exposition format: per GPU (NVML's figures and
/// unmanaged processes) and per container and GPU (memory, GPU-time share, throttling,
/// preemptions). Every family is always present, with its `HELP` and `TYPE`; a figure the
/// status does not know (an unlimited cap, a share not measured yet) has no sample.
pub fn render(status: &NodeStatus) -> String {
    let mut w = Writer { out: String::new() };
    let gpu_labels: Vec<String> = status.gpus.iter().map(|g| g.index.to_string()).collect();

    w.family(
        "tessera_status_timestamp_seconds",
        Kind::Gauge,
        "When the status was taken, in seconds since the Unix epoch.",
    );
    w.sample(
        "tessera_status_timestamp_seconds",
        &[],
        status.taken_unix_ms as f64 / 1e3,
    );

    w.family(
        "tessera_node_problems",
        Kind::Gauge,
        "Node-wide problems (see `controld status`); 0 when healthy.",
    );
    w.sample("tessera_node_problems", &[], status.problems.len() as f64);

    w.family(
        "tessera_gpu_info",
        Kind::Gauge,
        "A GPU of the node, as NVML names it; always 1.",
    );
    for (g, gpu) in status.gpus.iter().zip(&gpu_labels) {
        let labels = [("gpu", gpu.as_str()), ("name", &g.name), ("uuid", &g.uuid)];
        w.sample("tessera_gpu_info", &labels, 1.0);
    }
    type GpuValue = fn(&GpuStatus) -> Option<f64>;
    let per_gpu: [(&str, &str, GpuValue); 3] = [
        (
            "tessera_gpu_utilization_ratio",
            "Share of the last sample period the GPU's engine was busy, 0-1 (NVML).",
            |g| g.utilization_percent.map(|p| p / 100.0),
        ),
        (
            "tessera_gpu_memory_used_bytes",
            "Device memory in use by every process on the GPU, in bytes (NVML).",
            |g| Some(bytes(g.memory_used)),
        ),
        (
            "tessera_gpu_memory_total_bytes",
            "Device memory of the GPU, in bytes (NVML).",
            |g| Some(bytes(g.memory_total)),
        ),
    ];
    for (name, help, value) in per_gpu {
        w.family(name, Kind::Gauge, help);
        for (g, gpu) in status.gpus.iter().zip(&gpu_labels) {
            if let Some(v) = value(g) {
                w.sample(name, &[("gpu", gpu)], v);
            }
        }
    }

    // Every GPU NVML lists, with 0 when nothing unmanaged runs on it, and any other GPU an
    // unmanaged process was seen on.
    let mut unmanaged: BTreeMap<u32, (u64, u64)> =
        status.gpus.iter().map(|g| (g.index, (0, 0))).collect();
    for p in &status.unmanaged {
        let entry = unmanaged.entry(p.gpu).or_default();
        entry.0 += 1;
        entry.1 = entry.1.saturating_add(p.memory);
    }
    w.family(
        "tessera_gpu_unmanaged_processes",
        Kind::Gauge,
        "Processes on the GPU that belong to no Tessera container.",
    );
    for (gpu, (count, _)) in &unmanaged {
        w.sample(
            "tessera_gpu_unmanaged_processes",
            &[("gpu", &gpu.to_string())],
            *count as f64,
        );
    }
    w.family(
        "tessera_gpu_unmanaged_memory_bytes",
        Kind::Gauge,
        "Device memory held by processes that belong to no Tessera container, in bytes.",
    );
    for (gpu, (_, memory)) in &unmanaged {
        w.sample(
            "tessera_gpu_unmanaged_memory_bytes",
            &[("gpu", &gpu.to_string())],
            bytes(*memory),
        );
    }

    w.family(
        "tessera_container_info",
        Kind::Gauge,
        "A container Tessera manages, with its compute policy and priority; always 1.",
    );
    for c in &status.containers {
        let labels = [
            ("container", c.name.as_str()),
            ("compute", &c.compute),
            ("priority", &c.priority),
        ];
        w.sample("tessera_container_info", &labels, 1.0);
    }
    w.family(
        "tessera_container_processes",
        Kind::Gauge,
        "Live processes of the container.",
    );
    for c in &status.containers {
        let labels = [("container", c.name.as_str())];
        w.sample(
            "tessera_container_processes",
            &labels,
            c.processes.len() as f64,
        );
    }
    w.family(
        "tessera_container_problems",
        Kind::Gauge,
        "Problems found with the container (see `controld status`); 0 when healthy.",
    );
    for c in &status.containers {
        let labels = [("container", c.name.as_str())];
        w.sample(
            "tessera_container_problems",
            &labels,
            c.problems.len() as f64,
        );
    }
    type ContainerCount = fn(&crate::status::ContainerStatus) -> u64;
    let counts: [(&str, &str, ContainerCount); 2] = [
        (
            "tessera_container_region_quarantines_total",
            "Times the container's region file was found truncated, resized, replaced or overwritten, and set aside for a fresh one.",
            |c| c.region_quarantines,
        ),
        (
            "tessera_container_watchdog_kills_total",
            "Processes of the container the watchdog stopped for holding more than its cap (enforce = kill); the status says why.",
            |c| c.watchdog_kills,
        ),
    ];
    for (name, help, value) in counts {
        w.family(name, Kind::Counter, help);
        for c in &status.containers {
            w.sample(name, &[("container", c.name.as_str())], value(c) as f64);
        }
    }

    type DeviceValue = fn(&ContainerDevice) -> Option<f64>;
    let per_device: [(&str, Kind, &str, DeviceValue); 7] = [
        (
            "tessera_container_memory_used_bytes",
            Kind::Gauge,
            "Device memory the container's processes hold on the GPU, by its region, in bytes.",
            |d| Some(bytes(d.memory_used)),
        ),
        (
            "tessera_container_memory_cap_bytes",
            Kind::Gauge,
            "The container's memory cap on the GPU, in bytes; absent when unlimited.",
            |d| d.memory_cap.map(bytes),
        ),
        (
            "tessera_container_real_memory_used_bytes",
            Kind::Gauge,
            "Device memory the container's processes hold on the GPU, by NVML, in bytes.",
            |d| d.real_memory_used.map(bytes),
        ),
        (
            "tessera_container_gpu_share_target_ratio",
            Kind::Gauge,
            "The share of the GPU's time the container should get, 0-1.",
            |d| d.share_target,
        ),
        (
            "tessera_container_gpu_share_measured_ratio",
            Kind::Gauge,
            "The share of the GPU's time the container got over the last period, 0-1.",
            |d| d.share_measured,
        ),
        (
            "tessera_container_throttled_seconds_total",
            Kind::Counter,
            "Time the container's launches waited for GPU time, in seconds.",
            |d| Some(d.throttled_ns as f64 / 1e9),
        ),
        (
            "tessera_container_preemptions_total",
            Kind::Counter,
            "How often online work preempted the container on the GPU.",
            |d| Some(d.preemptions as f64),
        ),
    ];
    for (name, kind, help, value) in per_device {
        w.family(name, kind, help);
        for c in &status.containers {
            for d in &c.devices {
                if let Some(v) = value(d) {
                    let gpu = d.gpu.to_string();
                    w.sample(name, &[("container", &c.name), ("gpu", &gpu)], v);
                }
            }
        }
    }
    w.out
}

/// Where the server gets the status to render, once per request.
pub type StatusSource = Arc<dyn Fn() -> NodeStatus + Send + Sync>;

/// Why the metrics server could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address could not be bound.
    #[error("cannot serve metrics on {0}: {1}; check that the address is this node's and that no other program listens on it")]
    Bind(SocketAddr, std::io::Error),
    /// The serving thread could not start.
    #[error("cannot start the metrics thread: {0}")]
    Thread(std::io::Error),
}

/// The metrics endpoint: a thread that answers `GET /metrics`. Stops when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` (port 0 picks a free port; see [`MetricsServer::local_addr`]) and
    /// serves `source()` rendered by [`render`].
    pub fn spawn(addr: SocketAddr, source: StatusSource) -> Result<MetricsServer, MetricsError> {
        let listener = TcpListener::bind(addr).map_err(|e| MetricsError::Bind(addr, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| MetricsError::Bind(addr, e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("metrics".to_string())
            .spawn(move || serve(listener, source, stopping))
            .map_err(MetricsError::Thread)?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in `serve` after `accept` returns.
        self.stop.store(true, Ordering::Release);
        // Wakes the blocked `accept` with a connection of our own.
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let woken = TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok();
        if let Some(thread) = self.thread.take() {
            // Without the wake-up the thread may block on `accept` for good: leave it.
            if woken {
                let _ = thread.join();
            }
        }
    }
}

fn serve(listener: TcpListener, source: StatusSource, stop: Arc<AtomicBool>) {
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        // Acquire: pairs with the Release store in `drop`.
        if stop.load(Ordering::Acquire) {
            return;
        }
        let stream = match stream {
            Ok(stream) => stream,
            // Out of descriptors and the like: give the system a moment.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        // Relaxed: a count that only limits; nothing is published through it.
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::Relaxed);
            continue;
        }
        let (source, done) = (Arc::clone(&source), Arc::clone(&open));
        let spawned = std::thread::Builder::new()
            .name("metrics-client".to_string())
            .stack_size(STACK)
            .spawn(move || {
                // A client that misbehaves only loses its own answer.
                let _ = answer(stream, &source);
                done.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics { head_only: bool },
    NotFound,
    BadMethod,
    Malformed,
}

fn parse_request(head: &[u8]) -> Request {
    let Ok(head) = std::str::from_utf8(head) else {
        return Request::Malformed;
    };
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Request::Malformed;
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Request::BadMethod,
    };
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    if path == "/metrics" {
        Request::Metrics { head_only }
    } else {
        Request::NotFound
    }
}

/// Reads the request head: up to the blank line, at most [`MAX_REQUEST`] bytes, within
/// [`REQUEST_DEADLINE`]. `None` when it is too large.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = find_end(&head) {
            head.truncate(end);
            return Ok(Some(head));
        }
        if head.len() >= MAX_REQUEST {
            return Ok(None);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left.min(READ_TIMEOUT)))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..n]);
    }
}

/// Where the head ends: the first blank line (CRLF or bare LF line endings).
fn find_end(buffer: &[u8]) -> Option<usize> {
    let crlf = buffer.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = buffer.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn answer(mut stream: TcpStream, source: &StatusSource) -> std::io::Result<()> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let request = match read_head(&mut stream)? {
        Some(head) => parse_request(&head),
        None => {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                &[],
                "request too large\n",
                false,
            )
        }
    };
    match request {
        Request::Metrics { head_only } => {
            // The status comes from the daemon's state, which a panic in `source` leaves as
            // it was (it only reads): nothing broken is seen afterwards.
            let body = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| render(&source())));
            match body {
                Ok(body) => respond(
                    &mut stream,
                    "200 OK",
                    &[("Content-Type", CONTENT_TYPE)],
                    &body,
                    head_only,
                ),
                Err(_) => respond(
                    &mut stream,
                    "500 Internal Server Error",
                    &[],
                    "the status could not be taken\n",
                    head_only,
                ),
            }
        }
        Request::NotFound => respond(
            &mut stream,
            "404 Not Found",
            &[],
            "not found; metrics are at /metrics\n",
            false,
        ),
        Request::BadMethod => respond(
            &mut stream,
            "405 Method Not Allowed",
            &[("Allow", "GET, HEAD")],
            "only GET and HEAD\n",
            false,
        ),
        Request::Malformed => respond(&mut stream, "400 Bad Request", &[], "bad request\n", false),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(&str, &str)],
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    if !headers.iter().any(|(k, _)| *k == "Content-Type") {
        out.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    }
    for (key, value) in headers {
        let _ = write!(out, "{key}: {value}\r\n");
    }
    let _ = write!(
        out,
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(body);
    }
    stream.write_all(out.as_bytes())?;
    stream.flush()?;
    // Closing with unread request bytes would reset the connection and could lose the
    // answer: say we are done, then drain what the client still sends, briefly.
    stream.shutdown(std::net::Shutdown::Write)?;
    stream.set_read_timeout(Some(LINGER))?;
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    while Instant::now() < deadline && matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ContainerProcess, ContainerStatus, UnmanagedProcess};
    use std::path::PathBuf;

    fn fixture() -> NodeStatus {
        NodeStatus {
            taken_unix_ms: 1_700_000_000_250,
            gpus: vec![GpuStatus {
                index: 0,
                name: "NVIDIA \"H200\" \\ test\nline".to_string(),
                uuid: "GPU-0000".to_string(),
                memory_total: 141 << 30,
                memory_used: 3 << 30,
                utilization_percent: Some(42.5),
            }],
            containers: vec![ContainerStatus {
                name: "inference".to_string(),
                compute: "burst:50".to_string(),
                priority: "online".to_string(),
                region: PathBuf::from("/run/tessera/inference.region"),
                devices: vec![ContainerDevice {
                    gpu: 0,
                    memory_used: 1 << 30,
                    memory_cap: Some(8 << 30),
                    real_memory_used: None,
                    share_target: Some(0.5),
                    share_measured: Some(0.25),
                    throttled_ns: 1_500_000_000,
                    preemptions: 7,
                }],
                processes: vec![ContainerProcess {
                    slot: 0,
                    pid: 12,
                    host_pids: vec![3456],
                    memory: vec![1 << 30],
                }],
                problems: vec![],
                region_quarantines: 0,
                watchdog_kills: 0,
            }],
            unmanaged: vec![UnmanagedProcess {
                gpu: 0,
                pid: 999,
                memory: 512 << 20,
            }],
            problems: vec!["a region was quarantined".to_string()],
        }
    }

    #[test]
    fn values_and_labels_are_spelled_as_the_format_wants() {
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(8589934592.0), "8589934592");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("x\\y\nz\""), "x\\\\y\\nz\"");
    }

    #[test]
    fn renders_every_family_once_with_its_samples() {
        let text = render(&fixture());
        let expected = [
            "tessera_status_timestamp_seconds 1700000000.25",
            "tessera_node_problems 1",
            "tessera_gpu_info{gpu=\"0\",name=\"NVIDIA \\\"H200\\\" \\\\ test\\nline\",uuid=\"GPU-0000\"} 1",
            "tessera_gpu_utilization_ratio{gpu=\"0\"} 0.425",
            "tessera_gpu_memory_used_bytes{gpu=\"0\"} 3221225472",
            "tessera_gpu_memory_total_bytes{gpu=\"0\"} 151397597184",
            "tessera_gpu_unmanaged_processes{gpu=\"0\"} 1",
            "tessera_gpu_unmanaged_memory_bytes{gpu=\"0\"} 536870912",
            "tessera_container_info{container=\"inference\",compute=\"burst:50\",priority=\"online\"} 1",
            "tessera_container_processes{container=\"inference\"} 1",
            "tessera_container_problems{container=\"inference\"} 0",
            "tessera_container_region_quarantines_total{container=\"inference\"} 0",
            "tessera_container_watchdog_kills_total{container=\"inference\"} 0",
            "# TYPE tessera_container_watchdog_kills_total counter",
            "tessera_container_memory_used_bytes{container=\"inference\",gpu=\"0\"} 1073741824",
            "tessera_container_memory_cap_bytes{container=\"inference\",gpu=\"0\"} 8589934592",
            "tessera_container_gpu_share_target_ratio{container=\"inference\",gpu=\"0\"} 0.5",
            "tessera_container_gpu_share_measured_ratio{container=\"inference\",gpu=\"0\"} 0.25",
            "tessera_container_throttled_seconds_total{container=\"inference\",gpu=\"0\"} 1.5",
            "tessera_container_preemptions_total{container=\"inference\",gpu=\"0\"} 7",
            "# TYPE tessera_container_throttled_seconds_total counter",
            "# TYPE tessera_container_preemptions_total counter",
            "# TYPE tessera_gpu_utilization_ratio gauge",
        ];
        let lines: Vec<&str> = text.lines().collect();
        for line in expected {
            assert!(lines.contains(&line), "no line `{line}` in:\n{text}");
        }
        // Unknown figures have no sample, but their family is there.
        assert!(!text.contains("tessera_container_real_memory_used_bytes{"));
        assert!(text.contains("# TYPE tessera_container_real_memory_used_bytes gauge"));
        // Each family: one HELP, one TYPE, HELP first, its samples right after.
        let mut seen = std::collections::HashSet::new();
        let mut current = String::new();
        for (i, line) in lines.iter().enumerate() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(seen.insert(name.to_string()), "{name} twice");
                assert_eq!(lines[i + 1].split(' ').nth(2), Some(name));
                current = name.to_string();
            } else if !line.starts_with('#') {
                assert!(
                    line.starts_with(&format!("{current}{{"))
                        || line.starts_with(&format!("{current} ")),
                    "`{line}` outside its family {current}"
                );
            }
        }
        assert_eq!(seen.len(), 20);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn an_empty_node_renders_headers_only() {
        let text = render(&NodeStatus::default());
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "tessera_status_timestamp_seconds 0",
                "tessera_node_problems 0"
            ]
        );
    }

    #[test]
    fn requests_are_parsed_strictly() {
        let metrics = Request::Metrics { head_only: false };
        assert_eq!(parse_request(b"GET /metrics HTTP/1.1\r\nHost: x"), metrics);
        assert_eq!(parse_request(b"GET /metrics?x=1 HTTP/1.0"), metrics);
        assert_eq!(
            parse_request(b"HEAD /metrics HTTP/1.1"),
            Request::Metrics { head_only: true }
        );
        assert_eq!(parse_request(b"GET / HTTP/1.1"), Request::NotFound);
        assert_eq!(parse_request(b"GET /metricsx HTTP/1.1"), Request::NotFound);
        assert_eq!(parse_request(b"POST /metrics HTTP/1.1"), Request::BadMethod);
        assert_eq!(parse_request(b"GET /metrics"), Request::Malformed);
        assert_eq!(parse_request(b"GET  /metrics HTTP/1.1"), Request::Malformed);
        assert_eq!(parse_request(b"\xff\xfe"), Request::Malformed);
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(14));
        assert_eq!(find_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(find_end(b"GET / HTTP/1.1\r\n"), None);
    }

    fn exchange(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request).unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn serves_metrics_and_refuses_the_rest() {
        let server =
            MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), Arc::new(fixture)).unwrap();
        let addr = server.local_addr();
        let reply = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Type: {CONTENT_TYPE}")));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert_eq!(body, render(&fixture()));
        let reply = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 200 OK") && reply.ends_with("\r\n\r\n"));
        let reply = exchange(addr, b"GET /other HTTP/1.1\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 404 "), "{reply}");
        let reply = exchange(addr, b"DELETE /metrics HTTP/1.1\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 405 ") && reply.contains("Allow: GET, HEAD"));
        let reply = exchange(addr, b"nonsense\r\n\r\n");
        assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(MAX_REQUEST)
        );
        let reply = exchange(addr, huge.as_bytes());
        assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
        // A client that goes away mid-request does not stop the server.
        drop(TcpStream::connect(addr).unwrap());
        let reply = exchange(addr, b"GET /metrics HTTP/1.0\n\n");
        assert!(reply.starts_with("HTTP/1.1 200 OK"));
    }

    #[test]
    fn a_panicking_source_is_a_500_and_the_server_goes_on() {
        let source: StatusSource = Arc::new(|| panic!("no status"));
        let server = MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), source).unwrap();
        for _ in 0..2 {
            let reply = exchange(server.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
            assert!(reply.starts_with("HTTP/1.1 500 "), "{reply}");
        }
    }

    #[test]
    fn a_taken_address_is_a_clear_error() {
        let first =
            MetricsServer::spawn("127.0.0.1:0".parse().unwrap(), Arc::new(fixture)).unwrap();
        let e = MetricsServer::spawn(first.local_addr(), Arc::new(fixture)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&first.local_addr().to_string()), "{text}");
        assert!(text.contains("no other program listens"), "{text}");
    }
}
