//! The node's status as Prometheus metrics: [`render`] collects a [`NodeStatus`] into
//! families and `prometheus-client` writes them in the text exposition format (version
//! 0.0.4), escaping and number spelling included.
//!
//! The status is taken fresh for each scrape, so the families are collected on scrape (a
//! [`Collector`] over one status) rather than kept as live counters between scrapes.

use crate::status::{ContainerDevice, ContainerStatus, GpuStatus, NodeStatus};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;

/// The `Content-Type` of the text exposition format.
pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// One sample's value: whole numbers (bytes, counts) are written as integers, the rest as
/// floats.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Whole(u64),
    Real(f64),
}

/// A sample: its labels, in order, and its value.
type Sample<'a> = (Vec<(&'static str, &'a str)>, Value);

/// Writes one family: its `HELP` and `TYPE` lines, then its samples.
///
/// A counter's name is given without `_total`; the encoder adds it to every line.
fn family<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    kind: MetricType,
    help: &str,
    samples: impl IntoIterator<Item = Sample<'a>>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let labels = labels.as_slice();
        let labelled = metric.encode_family(&labels)?;
        match (kind, value) {
            (MetricType::Counter, Value::Whole(v)) => ConstCounter::new(v).encode(labelled)?,
            (MetricType::Counter, Value::Real(v)) => ConstCounter::new(v).encode(labelled)?,
            (_, Value::Whole(v)) => ConstGauge::new(v).encode(labelled)?,
            (_, Value::Real(v)) => ConstGauge::new(v).encode(labelled)?,
        }
    }
    Ok(())
}

/// The families of one status, collected when the registry is encoded.
#[derive(Debug)]
struct StatusCollector(NodeStatus);

impl Collector for StatusCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = &self.0;
        node_families(&mut encoder, status)?;
        gpu_families(&mut encoder, status)?;
        container_families(&mut encoder, &status.containers)?;
        device_families(&mut encoder, &status.containers)
    }
}

fn node_families(e: &mut DescriptorEncoder, status: &NodeStatus) -> Result<(), std::fmt::Error> {
    family(
        e,
        "tessera_status_timestamp_seconds",
        MetricType::Gauge,
        "When the status was taken, in seconds since the Unix epoch.",
        [(vec![], Value::Real(status.taken_unix_ms as f64 / 1e3))],
    )?;
    family(
        e,
        "tessera_node_problems",
        MetricType::Gauge,
        "Node-wide problems (see `controld status`); 0 when healthy.",
        [(vec![], Value::Whole(status.problems.len() as u64))],
    )
}

fn gpu_families(e: &mut DescriptorEncoder, status: &NodeStatus) -> Result<(), std::fmt::Error> {
    let gpu_labels: Vec<String> = status.gpus.iter().map(|g| g.index.to_string()).collect();
    let gpus = || status.gpus.iter().zip(&gpu_labels);
    family(
        e,
        "tessera_gpu_info",
        MetricType::Gauge,
        "A GPU of the node, as NVML names it; always 1.",
        gpus().map(|(g, gpu)| {
            let labels = vec![("gpu", gpu.as_str()), ("name", &g.name), ("uuid", &g.uuid)];
            (labels, Value::Whole(1))
        }),
    )?;
    type GpuValue = fn(&GpuStatus) -> Option<Value>;
    let per_gpu: [(&str, &str, GpuValue); 3] = [
        (
            "tessera_gpu_utilization_ratio",
            "Share of the last sample period the GPU's engine was busy, 0-1 (NVML).",
            |g| g.utilization_percent.map(|p| Value::Real(p / 100.0)),
        ),
        (
            "tessera_gpu_memory_used_bytes",
            "Device memory in use by every process on the GPU, in bytes (NVML).",
            |g| Some(Value::Whole(g.memory_used)),
        ),
        (
            "tessera_gpu_memory_total_bytes",
            "Device memory of the GPU, in bytes (NVML).",
            |g| Some(Value::Whole(g.memory_total)),
        ),
    ];
    for (name, help, value) in per_gpu {
        let samples =
            gpus().filter_map(|(g, gpu)| value(g).map(|v| (vec![("gpu", gpu.as_str())], v)));
        family(e, name, MetricType::Gauge, help, samples)?;
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
    let unmanaged: Vec<(String, u64, u64)> = unmanaged
        .into_iter()
        .map(|(gpu, (count, memory))| (gpu.to_string(), count, memory))
        .collect();
    family(
        e,
        "tessera_gpu_unmanaged_processes",
        MetricType::Gauge,
        "Processes on the GPU that belong to no Tessera container.",
        unmanaged
            .iter()
            .map(|(gpu, count, _)| (vec![("gpu", gpu.as_str())], Value::Whole(*count))),
    )?;
    family(
        e,
        "tessera_gpu_unmanaged_memory_bytes",
        MetricType::Gauge,
        "Device memory held by processes that belong to no Tessera container, in bytes.",
        unmanaged
            .iter()
            .map(|(gpu, _, memory)| (vec![("gpu", gpu.as_str())], Value::Whole(*memory))),
    )
}

fn container_families(
    e: &mut DescriptorEncoder,
    containers: &[ContainerStatus],
) -> Result<(), std::fmt::Error> {
    family(
        e,
        "tessera_container_info",
        MetricType::Gauge,
        "A container Tessera manages, with its compute policy and priority; always 1.",
        containers.iter().map(|c| {
            let labels = vec![
                ("container", c.name.as_str()),
                ("compute", &c.compute),
                ("priority", &c.priority),
            ];
            (labels, Value::Whole(1))
        }),
    )?;
    type ContainerValue = fn(&ContainerStatus) -> u64;
    let per_container: [(&str, MetricType, &str, ContainerValue); 6] = [
        (
            "tessera_container_timeslice_microseconds",
            MetricType::Gauge,
            "The GPU time slice its processes set on their channel groups; 0 where none is set (the driver's is asked, or it is not available).",
            |c| c.timeslice_set_us.map_or(0, u64::from),
        ),
        (
            "tessera_container_timeslice_unavailable",
            MetricType::Gauge,
            "1 where a time slice is asked and its processes could not set it (see `controld status`); the launch gate alone then holds the container back.",
            |c| u64::from(c.timeslice_unavailable),
        ),
        (
            "tessera_container_processes",
            MetricType::Gauge,
            "Live processes of the container.",
            |c| c.processes.len() as u64,
        ),
        (
            "tessera_container_problems",
            MetricType::Gauge,
            "Problems found with the container (see `controld status`); 0 when healthy.",
            |c| c.problems.len() as u64,
        ),
        (
            "tessera_container_region_quarantines",
            MetricType::Counter,
            "Times the container's region file was found truncated, resized, replaced or overwritten, and set aside for a fresh one.",
            |c| c.region_quarantines,
        ),
        (
            "tessera_container_watchdog_kills",
            MetricType::Counter,
            "Processes of the container the watchdog stopped for holding more than its cap (enforce = kill); the status says why.",
            |c| c.watchdog_kills,
        ),
    ];
    for (name, kind, help, value) in per_container {
        let samples = containers
            .iter()
            .map(|c| (vec![("container", c.name.as_str())], Value::Whole(value(c))));
        family(e, name, kind, help, samples)?;
    }
    Ok(())
}

fn device_families(
    e: &mut DescriptorEncoder,
    containers: &[ContainerStatus],
) -> Result<(), std::fmt::Error> {
    type DeviceValue = fn(&ContainerDevice) -> Option<Value>;
    let per_device: [(&str, MetricType, &str, DeviceValue); 9] = [
        (
            "tessera_container_memory_used_bytes",
            MetricType::Gauge,
            "Device memory the container's processes hold on the GPU, by its region, in bytes.",
            |d| Some(Value::Whole(d.memory_used)),
        ),
        (
            "tessera_container_memory_cap_bytes",
            MetricType::Gauge,
            "The container's memory cap on the GPU, in bytes; absent when unlimited.",
            |d| d.memory_cap.map(Value::Whole),
        ),
        (
            "tessera_container_real_memory_used_bytes",
            MetricType::Gauge,
            "Device memory the container's processes hold on the GPU, by NVML, in bytes.",
            |d| d.real_memory_used.map(Value::Whole),
        ),
        (
            "tessera_container_gpu_share_target_ratio",
            MetricType::Gauge,
            "The share of the GPU's time the container should get, 0-1.",
            |d| d.share_target.map(Value::Real),
        ),
        (
            "tessera_container_gpu_share_measured_ratio",
            MetricType::Gauge,
            "The share of the GPU's time the container got over the last period, 0-1.",
            |d| d.share_measured.map(Value::Real),
        ),
        (
            "tessera_container_gpu_granted_seconds",
            MetricType::Counter,
            "GPU time the scheduler granted the container on the GPU, in seconds: its target share over time.",
            |d| d.granted_ns.map(|ns| Value::Real(ns as f64 / 1e9)),
        ),
        (
            "tessera_container_compute_holds",
            MetricType::Counter,
            "How often the watchdog held the container on the GPU for running past its grant by NVML.",
            |d| Some(Value::Whole(d.compute_holds)),
        ),
        (
            "tessera_container_throttled_seconds",
            MetricType::Counter,
            "Time the container's launches waited for GPU time, in seconds.",
            |d| Some(Value::Real(d.throttled_ns as f64 / 1e9)),
        ),
        (
            "tessera_container_preemptions",
            MetricType::Counter,
            "How often online work preempted the container on the GPU.",
            |d| Some(Value::Whole(d.preemptions)),
        ),
    ];
    let gpu_labels: Vec<Vec<String>> = containers
        .iter()
        .map(|c| c.devices.iter().map(|d| d.gpu.to_string()).collect())
        .collect();
    for (name, kind, help, value) in per_device {
        let samples = containers.iter().zip(&gpu_labels).flat_map(|(c, gpus)| {
            c.devices.iter().zip(gpus).filter_map(|(d, gpu)| {
                let labels = vec![("container", c.name.as_str()), ("gpu", gpu.as_str())];
                value(d).map(|v| (labels, v))
            })
        });
        family(e, name, kind, help, samples)?;
    }
    Ok(())
}

/// Writes `status` in the Prometheus text exposition format: per GPU (NVML's figures and
/// unmanaged processes) and per container and GPU (memory, GPU-time share, throttling,
/// preemptions). Every family is always present, with its `HELP` and `TYPE`; a figure the
/// status does not know (an unlimited cap, a share not measured yet) has no sample.
pub fn render(status: NodeStatus) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(StatusCollector(status)));
    let mut text = String::new();
    // Writing into a `String` cannot fail, and the collector returns only the writer's
    // errors.
    if prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).is_err() {
        text.clear();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{ContainerProcess, UnmanagedProcess};
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
                timeslice: "driver".to_string(),
                timeslice_state: String::new(),
                timeslice_set_us: None,
                timeslice_unavailable: false,
                region: PathBuf::from("/run/tessera/inference.region"),
                devices: vec![ContainerDevice {
                    gpu: 0,
                    memory_used: 1 << 30,
                    memory_cap: Some(8 << 30),
                    real_memory_used: None,
                    share_target: Some(0.5),
                    share_measured: Some(0.25),
                    share_measured_until_ns: None,
                    real_share: None,
                    granted_ns: Some(2_500_000_000),
                    granted_until_ns: Some(9_000_000_000),
                    compute_held: false,
                    compute_holds: 2,
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
                regions_set_aside: Vec::new(),
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
    fn renders_every_family_once_with_its_samples() {
        let text = render(fixture());
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
            "tessera_container_timeslice_microseconds{container=\"inference\"} 0",
            "tessera_container_timeslice_unavailable{container=\"inference\"} 0",
            "# TYPE tessera_container_watchdog_kills_total counter",
            "tessera_container_memory_used_bytes{container=\"inference\",gpu=\"0\"} 1073741824",
            "tessera_container_memory_cap_bytes{container=\"inference\",gpu=\"0\"} 8589934592",
            "tessera_container_gpu_share_target_ratio{container=\"inference\",gpu=\"0\"} 0.5",
            "tessera_container_gpu_share_measured_ratio{container=\"inference\",gpu=\"0\"} 0.25",
            "tessera_container_throttled_seconds_total{container=\"inference\",gpu=\"0\"} 1.5",
            "tessera_container_preemptions_total{container=\"inference\",gpu=\"0\"} 7",
            "tessera_container_gpu_granted_seconds_total{container=\"inference\",gpu=\"0\"} 2.5",
            "tessera_container_compute_holds_total{container=\"inference\",gpu=\"0\"} 2",
            "# TYPE tessera_container_throttled_seconds_total counter",
            "# TYPE tessera_container_preemptions_total counter",
            "# TYPE tessera_gpu_utilization_ratio gauge",
            "# HELP tessera_node_problems Node-wide problems (see `controld status`); 0 when healthy.",
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
        assert_eq!(seen.len(), 24);
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn an_empty_node_renders_headers_only() {
        let text = render(NodeStatus::default());
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "tessera_status_timestamp_seconds 0.0",
                "tessera_node_problems 0"
            ]
        );
        assert_eq!(
            text.lines().filter(|l| l.starts_with("# HELP ")).count(),
            24
        );
    }
}
