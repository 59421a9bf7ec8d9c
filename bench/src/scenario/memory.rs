//! Memory caps: containers with different caps allocate in steps up to and beyond them and
//! free again, measured from ground truth — the device memory each process holds
//! (allocations and context overhead; simgpu's node, or NVML on a real driver), summed per
//! container — and from what each `gpuload alloc` was granted and refused.
//!
//! A context's own memory differs from driver to driver (300 MiB on simgpu by default, 518
//! MiB on an H200 with driver 580), so the scenario first measures one (`gpuload info`'s
//! `context_bytes`) and sizes the caps from it: the smallest whole number of GiB that holds
//! two contexts, plus 1, 2 and 3 GiB (2, 3 and 4 GiB where a context is under 512 MiB).
//!
//! Each container runs two `gpuload alloc` processes, each asking for 60 % of what the cap
//! leaves beside their two contexts: the second goes beyond it. It starts one step after the
//! first and exits one step before it, so the container's memory climbs and falls in a
//! pyramid. Once both have exited a third asks for 120 % of what the cap leaves beside its
//! context: a container whose memory came back gets the whole cap again. Containers start a
//! fifth of a step apart, so that no two processes create their contexts at the same instant
//! (libtessera measures a context's overhead as the device's growth while it is created,
//! where NVML does not list the process).

use super::error::ScenarioError;
use super::plot::{Chart, Panel, Series};
use super::{Bins, Options, Outcome, Proc, Sampler, Spec, Testbed, Trace};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tessera_region::units::format_size;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// How many containers, each with a cap one GiB larger than the one before.
const CONTAINERS: u64 = 3;

/// The containers' names and caps for contexts of `context` bytes: the smallest whole number
/// of GiB that holds two contexts, plus 1, 2, 3 GiB.
fn caps_for(context: u64) -> Vec<(&'static str, u64)> {
    let base = (2 * context).div_ceil(GIB);
    (1..=CONTAINERS)
        .map(|k| {
            let gib = base + k;
            // Leaked once per run: a scenario's containers are named for the config's life.
            let name: &'static str = Box::leak(format!("cap-{gib}gib").into_boxed_str());
            (name, gib * GIB)
        })
        .collect()
}

/// What each step asks for, as a share of what the cap leaves beside two contexts.
const STEP: f64 = 0.60;
/// What the process after the steps asks for, as a share of what the cap leaves beside its
/// context.
const REFILL: f64 = 1.20;
/// The length of the pyramid and the refill, in steps.
const STEPS: u32 = 5;

/// What one context of `gpuload` holds on the scenario's driver: `gpuload info`'s
/// `context_bytes`, run plainly.
fn measure_context(bins: &Bins) -> Result<u64, ScenarioError> {
    let bed = Testbed::new(bins, &[], false)?;
    let info = bed
        .gpuload("context", &["info"])?
        .finish(Duration::from_secs(60))?;
    info["context_bytes"]
        .as_u64()
        .filter(|&b| b > 0)
        .ok_or_else(|| {
            ScenarioError::Run(format!(
                "gpuload info measured no context ({}); the caps are sized from it",
                info["context_error"].as_str().unwrap_or("no figure")
            ))
        })
}

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
fn set_caps(bins: &Bins, bed: &Testbed, capped: &[(&str, u64)]) -> Result<(), ScenarioError> {
    for &(name, cap) in capped {
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

/// The sizes a run asks for: per container, each step's and the refill's.
struct Asks {
    step: Vec<u64>,
    refill: Vec<u64>,
}

impl Asks {
    fn new(capped: &[(&str, u64)], context: u64) -> Asks {
        let share = |bytes: u64, share: f64| ((bytes as f64 * share) as u64) / MIB * MIB;
        Asks {
            step: capped
                .iter()
                .map(|&(_, cap)| share(cap.saturating_sub(2 * context), STEP))
                .collect(),
            refill: capped
                .iter()
                .map(|&(_, cap)| share(cap.saturating_sub(context), REFILL))
                .collect(),
        }
    }
}

fn cap_run(
    bins: &Bins,
    tessera: bool,
    step: Duration,
    capped: &[(&'static str, u64)],
    asks: &Asks,
) -> Result<CapRun, ScenarioError> {
    let specs: Vec<Spec> = capped
        .iter()
        .map(|&(name, _)| Spec::online(name, "best-effort"))
        .collect();
    let bed = Testbed::new(bins, &specs, tessera)?;
    if tessera {
        set_caps(bins, &bed, capped)?;
    }
    let sampler = Sampler::start(bed.node_state(), Duration::from_millis(10))?;
    let stagger = step / 5;
    let start = Instant::now();
    // The pyramid: step 0 of container c at c × stagger for 3 steps, step 1 a step later
    // for 1 step.
    let mut first = Vec::new();
    let mut second = Vec::new();
    for (c, (name, _)) in capped.iter().enumerate() {
        sleep_until(start, stagger * c as u32);
        first.push(alloc(&bed, name, asks.step[c], step * 3)?);
    }
    for (c, (name, _)) in capped.iter().enumerate() {
        sleep_until(start, step + stagger * c as u32);
        second.push(alloc(&bed, name, asks.step[c], step)?);
    }
    let mut steps: Vec<Vec<Grant>> = vec![Vec::new(); capped.len()];
    let mut step_pids: Vec<Vec<u32>> = vec![Vec::new(); capped.len()];
    for (c, (a, b)) in first.into_iter().zip(second).enumerate() {
        step_pids[c] = vec![a.pid(), b.pid()];
        // The second exits first.
        steps[c].push(Grant::from_report(asks.step[c], &report(b)?));
        steps[c].insert(0, Grant::from_report(asks.step[c], &report(a)?));
    }
    // The refill, once the container's steps have exited (waited for just above).
    let mut refills = Vec::new();
    for (c, (name, _)) in capped.iter().enumerate() {
        sleep_until(start, step * 4 + stagger * c as u32);
        refills.push(alloc(&bed, name, asks.refill[c], step / 2)?);
    }
    let refill_pids: Vec<u32> = refills.iter().map(Proc::pid).collect();
    let refills = refills
        .into_iter()
        .enumerate()
        .map(|(c, p)| Ok(Grant::from_report(asks.refill[c], &report(p)?)))
        .collect::<Result<Vec<_>, ScenarioError>>()?;
    std::thread::sleep(Duration::from_millis(50));
    let trace = sampler.stop()?;
    let origin = trace.samples.first().map_or(0, |s| s.t_ns);
    let mut containers = Vec::new();
    let mut series = Vec::new();
    for c in 0..capped.len() {
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
fn chart(run: &CapRun, base: Option<&CapRun>, capped: &[(&str, u64)]) -> Chart {
    let caps = |with_caps: bool| -> Vec<Series> {
        capped
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
            .map(|(c, s)| Series::line(capped[c].0, c, s.clone()))
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
        title: "Device memory of each container: two steps of 60 % of what the cap leaves beside the contexts, then 120 %".into(),
        x_label: "time since the first step (s)".into(),
        y_label: "device memory (GiB)".into(),
        y_range: None,
        shared_x: true,
        panels,
    }
}

/// The cap scenario: three containers with caps of 2, 3 and 4 GiB (more where a context
/// holds 512 MiB or more).
pub(super) fn memory_caps(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("memory-caps");
    let step = (o.phase(5.0) / STEPS).max(Duration::from_millis(300));
    o.say("one context, measured");
    let context = measure_context(bins)?;
    let capped = caps_for(context);
    let asks = Asks::new(&capped, context);
    out.set("context_bytes", context as f64);
    out.notes.push(format!(
        "a context holds {} here; caps {}",
        mib(context),
        capped
            .iter()
            .map(|&(_, cap)| format_size(cap))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    o.say("two steps of 60 % of what the cap leaves, then 120 %, with Tessera");
    let run = cap_run(bins, true, step, &capped, &asks)?;
    let base = if o.baseline {
        o.say("baseline: the same without Tessera (no caps)");
        Some(cap_run(bins, false, step, &capped, &asks)?)
    } else {
        None
    };
    for (c, (name, cap)) in capped.iter().enumerate() {
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
    out.charts.push(chart(&run, base.as_ref(), &capped));
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
            work: Vec::new(),
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
    fn caps_hold_two_contexts_and_more() {
        let names = |c: &[(&str, u64)]| c.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>();
        // simgpu's default context: the caps of 2, 3 and 4 GiB.
        let simgpu = caps_for(300 * MIB);
        assert_eq!(names(&simgpu), ["cap-2gib", "cap-3gib", "cap-4gib"]);
        assert_eq!(simgpu[0].1, 2 * GIB);
        // An H200's: two contexts need more than a GiB.
        let h200 = caps_for(518 * MIB);
        assert_eq!(names(&h200), ["cap-3gib", "cap-4gib", "cap-5gib"]);
        for context in [300 * MIB, 518 * MIB, 2 * GIB + 1] {
            let capped = caps_for(context);
            let asks = Asks::new(&capped, context);
            for (c, &(_, cap)) in capped.iter().enumerate() {
                // The two steps together ask for more than the cap leaves beside their
                // contexts, each for less.
                let room = cap - 2 * context;
                assert!(room >= GIB, "{context}: {cap}");
                assert!(2 * asks.step[c] > room && asks.step[c] < room);
                // The refill asks for more than the cap leaves beside its context.
                assert!(asks.refill[c] > cap - context);
            }
        }
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
