//! Shares on the launch shapes of real applications (`shapes`, `mixed-deep`): programs that queue
//! hundreds or thousands of kernels and synchronize once — on the legacy default stream,
//! over several streams, as a CUDA graph, on the per-thread default stream, from several
//! host threads — rather than `gpuload train`'s few kernels in flight. Each is measured from
//! the node's ground truth, beside the same program without Tessera, and `controld`'s own
//! measure of each container is checked against that ground truth.

use super::error::ScenarioError;
use super::shares::{baseline_run, shares_chart, shown, total_use_row, within, SAMPLE, SECOND};
use super::testbed::Backend;
use super::{pct, train_together, Bins, Options, Outcome, Spec, TrainRun, Workload};

/// The shapes under `fixed:30`: mode, its count, kernel length in ms, and a label.
const SHAPES: &[(&str, usize, f64, &str)] = &[
    ("queue", 1, 1.0, "null stream, 1 ms kernels"),
    ("queue", 1, 0.02, "null stream, 20 µs kernels"),
    ("queue", 1, 50.0, "null stream, 50 ms kernels"),
    ("streams", 4, 1.0, "4 streams"),
    ("graph", 4, 1.0, "graph of 4 kernels"),
    ("ptsz", 1, 1.0, "per-thread default stream"),
    ("threads", 4, 1.0, "4 host threads"),
];

/// How far `controld`'s measured share of each container lies from the ground truth over
/// the second its figure covers (status says when it ended; else settled bins end about
/// 100 ms before the reading), in points; `None` without the daemon's view.
fn daemon_error(run: &TrainRun) -> Option<f64> {
    let end = run
        .daemon_until_ns
        .unwrap_or_else(|| run.to_ns.saturating_sub(100_000_000));
    let start = end.saturating_sub(1_000_000_000);
    let t = &run.trace;
    run.daemon_view
        .iter()
        .zip(&run.pids)
        .map(|((_, measured), pid)| {
            let truth = t.share_between(&[*pid], start, end);
            measured.map(|m| (m - truth).abs() * 100.0)
        })
        .collect::<Option<Vec<f64>>>()
        .map(|v| v.into_iter().fold(0.0, f64::max))
}

/// The row for [`daemon_error`].
fn daemon_row(out: &mut Outcome, what: &str, run: &TrainRun) {
    let err = daemon_error(run);
    if let Some(e) = err {
        out.set(&format!("{what}_daemon_error_points"), e);
    }
    out.row(
        &format!("{what}: controld's measure vs ground truth"),
        "± 1 point",
        err.map_or("—".into(), |e| format!("{e:.2} points")),
        String::new(),
        Some(err.is_some_and(|e| e <= 1.0)),
    );
}

/// `shapes`: `fixed:30` alone, each shape: 30 ± 2 % in every 1 s window.
pub(super) fn fixed_shapes(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("shapes");
    for &shape in SHAPES {
        fixed_shape(&mut out, bins, o, shape, "", 0.02)?;
    }
    Ok(out)
}

/// One shape under `fixed:30`: its rows (prefixed by `label`) and figures, every 1 s window
/// within `tolerance`.
fn fixed_shape(
    out: &mut Outcome,
    bins: &Bins,
    o: &Options,
    (mode, count, kernel_ms, what): (&str, usize, f64, &str),
    label: &str,
    tolerance: f64,
) -> Result<(), ScenarioError> {
    let specs = [Spec::online("fixed30", "fixed:30")];
    let phase = o.phase(10.0);
    let workload = Workload::deep(mode, count, kernel_ms);
    let key = format!("{label}{mode}_{count}_{kernel_ms}ms");
    o.say(&format!("fixed:30, {what}, with Tessera"));
    let run = train_together(bins, &specs, true, &workload, SECOND, phase, SAMPLE)?;
    let base = baseline_run(bins, &specs, &workload, phase.min(3 * SECOND), o)?;
    let mut windows = run.windows(0, SECOND);
    // On a real driver the ground truth is the work each program got done, which counts
    // kernels that ran at once each: the time held is the work against the same program's
    // alone (with no baseline, such a shape's windows read its concurrency times too high).
    let real = bins.backend == Backend::System;
    if real && count > 1 {
        if let Some(alone) = base.as_ref().map(|b| b.work_rate(0)).filter(|&w| w > 0.0) {
            windows.iter_mut().for_each(|w| *w /= alone);
        }
    }
    let lo = windows.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = windows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    out.set(&format!("{key}_share"), run.share(0));
    out.set(&format!("{key}_min_window"), lo);
    out.set(&format!("{key}_max_window"), hi);
    if label.is_empty() && mode == "queue" && kernel_ms == 1.0 {
        out.charts.push(shares_chart(
            "shapes-queue-shares",
            "fixed:30, 1000 kernels queued on the null stream per synchronize: share of GPU time",
            &specs,
            &[0.30],
            [Some(&run), base.as_ref()],
            SECOND / 2,
        ));
    }
    out.row(
        &format!("{label}fixed:30, {what}, each 1 s window"),
        &format!("30 ± {:.0} %", tolerance * 100.0),
        format!("{}–{} over {} windows", pct(lo), pct(hi), windows.len()),
        shown(&base, 0),
        Some(!windows.is_empty() && windows.iter().all(|&w| within(w, 0.30, tolerance))),
    );
    if matches!(mode, "streams" | "threads") {
        let what = format!("{label}fixed:30, {what}");
        work_rows(out, &what, &key, count, &run, &base, real);
    }
    daemon_row(out, &key, &run);
    Ok(())
}

/// The work a shape of `count` streams or threads got done under `fixed:30`: its kernels
/// run as concurrently as alone (the work per unit of the time it held the GPU is about
/// `count`, its kernels' concurrency), so it does about 30 % of what it does alone.
/// On a real driver (`real`) the time held is not measured, only the work.
fn work_rows(
    out: &mut Outcome,
    what: &str,
    key: &str,
    count: usize,
    run: &TrainRun,
    base: &Option<TrainRun>,
    real: bool,
) {
    let work = run.work_rate(0);
    let held = run.share(0);
    let concurrency = if held > 0.0 { work / held } else { 0.0 };
    if !real {
        out.set(&format!("{key}_concurrency"), concurrency);
        out.row(
            &format!("{what}: kernels at once while it holds the GPU"),
            &format!("≥ {:.1} (alone: {count})", 0.75 * count as f64),
            format!("{concurrency:.2}"),
            base.as_ref().map_or(String::new(), |b| {
                let alone = b.work_rate(0) / b.share(0).max(1e-9);
                format!("{alone:.2}")
            }),
            Some(concurrency >= 0.75 * count as f64),
        );
    }
    if let Some(b) = base {
        let of_alone = work / b.work_rate(0).max(1e-9);
        out.set(&format!("{key}_of_alone"), of_alone);
        out.row(
            &format!("{what}: work done against the same program alone"),
            "30 ± 3 %",
            pct(of_alone),
            "100 %".into(),
            Some(within(of_alone, 0.30, 0.03)),
        );
    }
}

/// `mixed-deep`: deep-queueing containers side by side: `fixed:20` + `burst:30` + `best-effort`
/// at 20 / 55 / 25 ± 3 %, and `fixed:30` + `fixed:70` at 30 / 70 ± 2 %.
pub(super) fn mixed_deep(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("mixed-deep");
    deep_set(&mut out, bins, o, DeepSet::Mixed, "", 0.03)?;
    deep_set(&mut out, bins, o, DeepSet::Pair, "", 0.02)?;
    Ok(out)
}

/// The sets of deep-queueing neighbours.
#[derive(Clone, Copy)]
enum DeepSet {
    /// `fixed:20` + `burst:30` + `best-effort`.
    Mixed,
    /// `fixed:30` + `fixed:70`.
    Pair,
}

/// One set of deep-queueing neighbours: rows prefixed by `label`, each share within
/// `tolerance` of its policy.
fn deep_set(
    out: &mut Outcome,
    bins: &Bins,
    o: &Options,
    set: DeepSet,
    label: &str,
    tolerance: f64,
) -> Result<(), ScenarioError> {
    let phase = o.phase(10.0);
    let workload = Workload::deep("queue", 1, 1.0);
    let (name, specs, targets) = match set {
        DeepSet::Mixed => (
            "mixed",
            vec![
                Spec::online("fixed20", "fixed:20"),
                Spec::online("burst30", "burst:30"),
                Spec::online("besteffort", "best-effort"),
            ],
            vec![0.20, 0.55, 0.25],
        ),
        DeepSet::Pair => (
            "pair",
            vec![
                Spec::online("fixed30", "fixed:30"),
                Spec::online("fixed70", "fixed:70"),
            ],
            vec![0.30, 0.70],
        ),
    };
    let key = format!("{label}{name}");
    o.say(&format!(
        "{name}, every container queueing 1000 kernels a round, with Tessera"
    ));
    let run = train_together(bins, &specs, true, &workload, SECOND, phase, SAMPLE)?;
    let base = baseline_run(bins, &specs, &workload, phase.min(3 * SECOND), o)?;
    if label.is_empty() {
        out.charts.push(shares_chart(
            &format!("mixed-deep-{name}-shares"),
            &format!(
                "{}, each queueing 1000 kernels per synchronize: shares of GPU time",
                specs
                    .iter()
                    .map(|s| s.compute)
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
            &specs,
            &targets,
            [Some(&run), base.as_ref()],
            SECOND / 2,
        ));
    }
    for (i, (spec, target)) in specs.iter().zip(&targets).enumerate() {
        let share = run.share(i);
        out.set(&format!("{key}_{}", spec.name), share);
        out.row(
            &format!("{label}{} beside {}", spec.compute, others(&specs, i)),
            &format!("{:.0} ± {:.0} %", target * 100.0, tolerance * 100.0),
            pct(share),
            shown(&base, i),
            Some(within(share, *target, tolerance)),
        );
    }
    total_use_row(
        out,
        &format!("{key}_"),
        &format!("{label}{name}: "),
        &run,
        base.as_ref(),
    );
    daemon_row(out, &key, &run);
    Ok(())
}

/// `busy-host`: the criteria of `shapes`, `mixed-deep` and `demo-mix` while two threads keep two cores busy: `fixed:30`
/// queueing on the null stream, the deep-queueing mix, and the demo's mix, each within
/// ± 3 points, and `controld`'s measure within a point of the ground truth.
pub(super) fn busy_host(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("busy-host");
    let _hogs = CpuHogs::start(2);
    let label = "2 CPU hogs: ";
    fixed_shape(&mut out, bins, o, SHAPES[0], label, 0.03)?;
    deep_set(&mut out, bins, o, DeepSet::Mixed, label, 0.03)?;
    super::priority::demo_mix_rows(&mut out, bins, o, label, 0.03)?;
    Ok(out)
}

/// Threads that spin until dropped: a host whose cores are busy with other work.
struct CpuHogs {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuHogs {
    fn start(n: usize) -> CpuHogs {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    // Relaxed: a flag with no data behind it.
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        CpuHogs { stop, threads }
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        // Relaxed: see `start`.
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The other containers' policies, for a row's label.
fn others(specs: &[Spec], i: usize) -> String {
    specs
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != i)
        .map(|(_, s)| s.compute)
        .collect::<Vec<_>>()
        .join(" + ")
}
