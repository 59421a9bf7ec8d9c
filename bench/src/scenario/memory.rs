//! Memory caps: containers with different caps allocate in steps up to and beyond them and
//! free again, measured from ground truth — the device memory simgpu's node holds for each
//! process (allocations and context overhead), summed per container — and from what each
//! `gpuload alloc` was granted and refused.
//!
//! Each container runs two `gpuload alloc` processes, each asking for 60 % of the cap: the
//! second goes beyond it. It starts one step after the first and exits one step before it,
//! so the container's memory climbs and falls in a pyramid. Once both have exited a third
//! asks for 120 % of the cap: a container whose memory came back gets the whole cap again.
//! Containers start a fifth of a step apart, so that no two processes create their contexts
//! at the same instant (libtessera measures a context's overhead as the device's growth
//! while it is created).

use super::error::ScenarioError;
use super::plot::{Chart, Panel, Series};
use super::{Bins, Options, Outcome, Proc, Sampler, Spec, Testbed, Trace};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_region::units::format_size;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The containers and their caps.
const CAPPED: [(&str, u64); 3] = [
    ("cap-2gib", 2 * GIB),
    ("cap-3gib", 3 * GIB),
    ("cap-4gib", 4 * GIB),
];

const SPECS: [Spec; 3] = [
    Spec::online(CAPPED[0].0, "best-effort"),
    Spec::online(CAPPED[1].0, "best-effort"),
    Spec::online(CAPPED[2].0, "best-effort"),
];

/// What each step asks for, as a share of the cap.
const STEP: f64 = 0.60;
/// What the process after the steps asks for.
const REFILL: f64 = 1.20;
/// The length of the pyramid and the refill, in steps.
const STEPS: u32 = 5;

/// One `gpuload alloc` of a container: asked and granted bytes, and the error that
/// stopped it.
#[derive(Debug, Clone, Default)]
struct Grant {
    asked: u64,
    granted: u64,
    refused_by: Option<String>,
}

impl Grant {
    fn from_report(asked: u64, report: &Value) -> Grant {
        Grant {
            asked,
            granted: report["bytes"].as_u64().unwrap_or(0),
            refused_by: report["error"].as_str().map(str::to_string),
        }
    }

    fn refused(&self) -> u64 {
        self.asked.saturating_sub(self.granted)
    }
}

/// What one run (with Tessera or without) saw of one container.
#[derive(Debug, Clone, Default)]
struct Container {
    /// The highest device memory its processes held together (ground truth).
    peak: u64,
    /// The two steps.
    steps: Vec<Grant>,
    /// The process after the steps.
    refill: Grant,
    /// The highest device memory the refill process held (ground truth).
    refill_peak: u64,
}

/// One run.
struct CapRun {
    containers: Vec<Container>,
    /// Per container, `(s since the first sample, GiB)`.
    series: Vec<Vec<(f64, f64)>>,
}

/// The memory `pids` held together at each sample.
fn held(trace: &Trace, pids: &[u32]) -> Vec<(u64, u64)> {
    trace
        .samples
        .iter()
        .map(|s| {
            let bytes = s
                .memory
                .iter()
                .filter(|(p, _)| pids.contains(p))
                .map(|&(_, b)| b)
                .sum();
            (s.t_ns, bytes)
        })
        .collect()
}

/// Sets each container's cap through the daemon's control socket, as an operator would
/// (`controld container set NAME --memory SIZE`), and checks the regions show it.
fn set_caps(bins: &Bins, bed: &Testbed) -> Result<(), ScenarioError> {
    for (name, cap) in CAPPED {
        let region = bed.region_path(name);
        let state_dir = region
            .parent()
            .ok_or_else(|| ScenarioError::Run(format!("{} has no folder", region.display())))?;
        let out = Command::new(&bins.controld)
            .args(["container", "set", name, "--memory"])
            .arg(format_size(cap))
            .arg("--state-dir")
            .arg(state_dir)
            .env_remove(tessera_region::env::STATE_DIR)
            .stdin(Stdio::null())
            .output()
            .map_err(ScenarioError::start("run controld container set"))?;
        if !out.status.success() {
            return Err(ScenarioError::Program {
                what: format!("controld container set {name}"),
                outcome: format!("failed ({})", out.status),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let shown = bed.region(name)?.memory_cap(0);
        if shown != Some(cap) {
            return Err(ScenarioError::Run(format!(
                "container {name}: region shows cap {shown:?}, set {cap}"
            )));
        }
    }
    Ok(())
}

/// Starts `gpuload alloc` in `name` asking for `bytes` and holding them `hold`.
fn alloc(bed: &Testbed, name: &str, bytes: u64, hold: Duration) -> Result<Proc, ScenarioError> {
    let size = format_size(bytes);
    let hold = format!("{:.3}", hold.as_secs_f64());
    bed.gpuload(
        name,
        &["alloc", "--chunk", &size, "--limit", &size, "--hold", &hold],
    )
}

/// Sleeps until `start + at`.
fn sleep_until(start: Instant, at: Duration) {
    if let Some(wait) = (start + at).checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
}

/// Waits for a process to exit and reads its report.
fn report(p: Proc) -> Result<Value, ScenarioError> {
    p.finish(Duration::from_secs(30))
}

fn cap_run(bins: &Bins, tessera: bool, step: Duration) -> Result<CapRun, ScenarioError> {
    let bed = Testbed::new(bins, &SPECS, tessera)?;
    if tessera {
        set_caps(bins, &bed)?;
    }
    let sampler = Sampler::start(bed.node_state(), Duration::from_millis(10))?;
    let stagger = step / 5;
    let start = Instant::now();
    let ask = |cap: u64, share: f64| ((cap as f64 * share) as u64) / MIB * MIB;
    // The pyramid: step 0 of container c at c × stagger for 3 steps, step 1 a step later
    // for 1 step.
    let mut first = Vec::new();
    let mut second = Vec::new();
    for (c, (name, cap)) in CAPPED.iter().enumerate() {
        sleep_until(start, stagger * c as u32);
        first.push(alloc(&bed, name, ask(*cap, STEP), step * 3)?);
    }
    for (c, (name, cap)) in CAPPED.iter().enumerate() {
        sleep_until(start, step + stagger * c as u32);
        second.push(alloc(&bed, name, ask(*cap, STEP), step)?);
    }
    let mut steps: Vec<Vec<Grant>> = vec![Vec::new(); CAPPED.len()];
    let mut step_pids: Vec<Vec<u32>> = vec![Vec::new(); CAPPED.len()];
    for (c, (a, b)) in first.into_iter().zip(second).enumerate() {
        let cap = CAPPED[c].1;
        step_pids[c] = vec![a.pid(), b.pid()];
        // The second exits first.
        steps[c].push(Grant::from_report(ask(cap, STEP), &report(b)?));
        steps[c].insert(0, Grant::from_report(ask(cap, STEP), &report(a)?));
    }
    // The refill, once the container's steps have exited (waited for just above).
    let mut refills = Vec::new();
    for (c, (name, cap)) in CAPPED.iter().enumerate() {
        sleep_until(start, step * 4 + stagger * c as u32);
        refills.push(alloc(&bed, name, ask(*cap, REFILL), step / 2)?);
    }
    let refill_pids: Vec<u32> = refills.iter().map(Proc::pid).collect();
    let refills = refills
        .into_iter()
        .zip(CAPPED)
        .map(|(p, (_, cap))| Ok(Grant::from_report(ask(cap, REFILL), &report(p)?)))
        .collect::<Result<Vec<_>, ScenarioError>>()?;
    std::thread::sleep(Duration::from_millis(50));
    let trace = sampler.stop()?;
    let origin = trace.samples.first().map_or(0, |s| s.t_ns);
    let mut containers = Vec::new();
    let mut series = Vec::new();
    for c in 0..CAPPED.len() {
        let mut pids = step_pids[c].clone();
        pids.push(refill_pids[c]);
        let memory = held(&trace, &pids);
        series.push(
            memory
                .iter()
                .map(|&(t, b)| ((t - origin) as f64 / 1e9, b as f64 / GIB as f64))
                .collect(),
        );
        containers.push(Container {
            peak: memory.iter().map(|&(_, b)| b).max().unwrap_or(0),
            steps: std::mem::take(&mut steps[c]),
            refill: refills[c].clone(),
            refill_peak: held(&trace, &refill_pids[c..=c])
                .iter()
                .map(|&(_, b)| b)
                .max()
                .unwrap_or(0),
        });
    }
    Ok(CapRun { containers, series })
}

/// Bytes in GiB with two decimals.
fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB as f64)
}

/// Bytes in MiB with one decimal: fine enough to show a peak a fraction of a MiB under
/// its cap.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// The share of `cap` that `bytes` is.
fn of_cap(bytes: u64, cap: u64) -> String {
    format!("{:.2} % of the cap", bytes as f64 * 100.0 / cap as f64)
}

/// The memory chart: each container's memory over time, its cap dashed.
fn chart(run: &CapRun, base: Option<&CapRun>) -> Chart {
    let caps = |with_caps: bool| -> Vec<Series> {
        CAPPED
            .iter()
            .enumerate()
            .map(|(c, (name, cap))| {
                let end = run
                    .series
                    .iter()
                    .chain(base.map_or(&[][..], |b| &b.series[..]))
                    .flat_map(|s| s.last())
                    .map(|p| p.0)
                    .fold(0.0, f64::max);
                let y = *cap as f64 / GIB as f64;
                let label = if with_caps {
                    format!("{name}: cap")
                } else {
                    format!("{name}: cap (not set)")
                };
                Series::dashed(label, c, vec![(0.0, y), (end, y)])
            })
            .collect()
    };
    let lines = |r: &CapRun| -> Vec<Series> {
        r.series
            .iter()
            .enumerate()
            .map(|(c, s)| Series::line(CAPPED[c].0, c, s.clone()))
            .collect()
    };
    let mut panels = vec![Panel {
        title: "with Tessera (caps set)".into(),
        series: lines(run).into_iter().chain(caps(true)).collect(),
    }];
    if let Some(b) = base {
        panels.push(Panel {
            title: "without Tessera (no caps)".into(),
            series: lines(b).into_iter().chain(caps(false)).collect(),
        });
    }
    Chart {
        file: "memory-caps".into(),
        title: "Device memory of each container: two steps of 60 % of the cap, then 120 %".into(),
        x_label: "time since the first step (s)".into(),
        y_label: "device memory (GiB)".into(),
        y_range: None,
        shared_x: true,
        panels,
    }
}

/// The cap scenario: three containers with caps of 2, 3 and 4 GiB.
pub(super) fn memory_caps(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("memory-caps");
    let step = (o.phase(5.0) / STEPS).max(Duration::from_millis(300));
    o.say("two steps of 60 % of the cap, then 120 %, with Tessera");
    let run = cap_run(bins, true, step)?;
    let base = if o.baseline {
        o.say("baseline: the same without Tessera (no caps)");
        Some(cap_run(bins, false, step)?)
    } else {
        None
    };
    for (c, (name, cap)) in CAPPED.iter().enumerate() {
        let mine = &run.containers[c];
        let theirs = base.as_ref().map(|b| &b.containers[c]);
        let asked: u64 = mine.steps.iter().map(|g| g.asked).sum();
        let refused: u64 = mine.steps.iter().map(Grant::refused).sum();
        let errors: Vec<&str> = mine
            .steps
            .iter()
            .filter_map(|g| g.refused_by.as_deref())
            .collect();
        out.set(&format!("{name}_peak"), mine.peak as f64);
        out.set(&format!("{name}_cap"), *cap as f64);
        out.set(&format!("{name}_refused"), refused as f64);
        out.set(&format!("{name}_refill_peak"), mine.refill_peak as f64);
        if let Some(t) = theirs {
            out.set(&format!("{name}_baseline_peak"), t.peak as f64);
        }
        out.row(
            &format!("{name}: peak device memory"),
            &format!("≤ cap {}", mib(*cap)),
            format!("{} ({})", mib(mine.peak), of_cap(mine.peak, *cap)),
            theirs
                .map(|t| format!("{} ({})", mib(t.peak), of_cap(t.peak, *cap)))
                .unwrap_or_default(),
            Some(mine.peak > 0 && mine.peak <= *cap),
        );
        out.row(
            &format!("{name}: asked beyond the cap"),
            "refused with out-of-memory",
            format!(
                "{} of {} asked refused ({})",
                gib(refused),
                gib(asked),
                if errors.is_empty() {
                    "no error".to_string()
                } else {
                    errors.join(", ")
                }
            ),
            theirs
                .map(|t| {
                    let r: u64 = t.steps.iter().map(Grant::refused).sum();
                    format!("{} refused", gib(r))
                })
                .unwrap_or_default(),
            Some(refused > 0 && !errors.is_empty()),
        );
        out.row(
            &format!("{name}: a new process once the steps exited"),
            "gets the cap again (≥ 99 %)",
            format!(
                "{} ({}: its context and {} allocated)",
                mib(mine.refill_peak),
                of_cap(mine.refill_peak, *cap),
                mib(mine.refill.granted)
            ),
            theirs.map(|t| mib(t.refill_peak)).unwrap_or_default(),
            Some(mine.refill_peak as f64 >= 0.99 * *cap as f64 && mine.refill_peak <= *cap),
        );
    }
    out.charts.push(chart(&run, base.as_ref()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Sample;

    #[test]
    fn held_memory_sums_a_containers_processes() {
        let s = |t: u64, memory: Vec<(u32, u64)>| Sample {
            t_ns: t,
            procs: Vec::new(),
            memory,
        };
        let trace = Trace {
            samples: vec![
                s(0, vec![(1, 10), (2, 5), (3, 7)]),
                s(1, vec![(2, 6), (3, 8)]),
            ],
        };
        assert_eq!(held(&trace, &[1, 2]), vec![(0, 15), (1, 6)]);
        assert_eq!(held(&trace, &[]), vec![(0, 0), (1, 0)]);
    }

    #[test]
    fn a_grant_reads_the_alloc_report() {
        let g = Grant::from_report(
            100,
            &serde_json::json!({"bytes": 60, "error": "CUDA_ERROR_OUT_OF_MEMORY"}),
        );
        assert_eq!(g.refused(), 40);
        assert_eq!(g.refused_by.as_deref(), Some("CUDA_ERROR_OUT_OF_MEMORY"));
        let g = Grant::from_report(100, &serde_json::json!({"bytes": 100, "error": null}));
        assert_eq!((g.refused(), g.refused_by), (0, None));
    }
}
