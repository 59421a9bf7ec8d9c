//! Shares of saturating containers (`fixed-alone`, `mixed`, `burst-join`, `best-effort`, `long-kernels`): busy time per container
//! from the node's ground truth, divided by the wall time it covers.

use super::error::ScenarioError;
use super::plot::{Chart, Panel, Series};
use super::{
    pct, train_together, wait_running, Bins, Options, Outcome, Sampler, Spec, Testbed, Trace,
    TrainRun, Workload,
};
use std::time::Duration;

pub(super) const SECOND: Duration = Duration::from_secs(1);
pub(super) const TENTH: Duration = Duration::from_millis(100);
/// How often a run samples the node's ground truth: windows and the daemon's view are
/// compared between the samples nearest their ends, and containers taking turns of tens of
/// milliseconds make a share lumpy at a coarser grain.
pub(super) const SAMPLE: Duration = Duration::from_millis(10);

/// The baseline: the same containers' workloads with no Tessera, on the node's plain
/// time-slicing.
pub(super) fn baseline_run(
    bins: &Bins,
    specs: &[Spec],
    workload: &Workload,
    phase: Duration,
    o: &Options,
) -> Result<Option<TrainRun>, ScenarioError> {
    if !o.baseline {
        return Ok(None);
    }
    o.say("baseline: the same workloads without Tessera");
    train_together(bins, specs, false, workload, SECOND / 2, phase, SAMPLE).map(Some)
}

/// How far the GPU's total use under Tessera may fall below the same workloads' without it.
const CONSERVED_POINTS: f64 = 0.03;

/// Work conservation, with every container saturating: the GPU's total use under Tessera
/// against the same workloads' without it, which lose a switch's dead time at every slice.
/// The figure is `{prefix}total`; the row's name starts with `label`.
pub(super) fn total_use_row(
    out: &mut Outcome,
    prefix: &str,
    label: &str,
    run: &TrainRun,
    base: Option<&TrainRun>,
) {
    let total = run.total_share();
    out.set(&format!("{prefix}total"), total);
    let base_total = base.map(TrainRun::total_share);
    out.row(
        &format!("{label}the GPU's total use"),
        &format!("≥ without Tessera − {:.0} points", CONSERVED_POINTS * 100.0),
        pct(total),
        base_total.map(pct).unwrap_or_default(),
        base_total.map(|b| total >= b - CONSERVED_POINTS),
    );
}

pub(super) fn shown(baseline: &Option<TrainRun>, i: usize) -> String {
    baseline
        .as_ref()
        .map(|b| pct(b.share(i)))
        .unwrap_or_default()
}

/// The share of `pids` over a trailing `window`, every `step` from the trace's first
/// sample on, as `(s since that sample, %)`.
fn share_points(trace: &Trace, pids: &[u32], window: Duration, step: Duration) -> Vec<(f64, f64)> {
    let (Some(first), Some(last)) = (trace.samples.first(), trace.samples.last()) else {
        return Vec::new();
    };
    let (origin, window, step) = (first.t_ns, window.as_nanos() as u64, step.as_nanos() as u64);
    let mut points = Vec::new();
    let mut t = origin + window;
    while t <= last.t_ns {
        let share = trace.share(pids, trace.at(t - window), trace.at(t));
        points.push(((t - origin) as f64 / 1e9, share * 100.0));
        t += step.max(1);
    }
    points
}

/// A window's length for an axis label: `500 ms`, `1 s`.
fn span(window: Duration) -> String {
    let ms = window.as_millis();
    if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// A legend name for a container.
fn legend(spec: &Spec) -> String {
    format!("{} ({})", spec.name, spec.compute)
}

/// Dashed lines at each distinct target share (0–1), `until` seconds long, in the colour of
/// the one container that has it (grey when several do).
fn target_lines(targets: &[f64], until: f64) -> Vec<Series> {
    let mut lines: Vec<Series> = Vec::new();
    for (i, &t) in targets.iter().enumerate() {
        let y = t * 100.0;
        let name = format!("target {y:.0} %");
        match lines.iter_mut().find(|s| s.name == name) {
            Some(line) => line.color = GREY,
            None => lines.push(Series::dashed(name, i, vec![(0.0, y), (until, y)])),
        }
    }
    lines
}

/// The palette's grey, for a line several containers share.
const GREY: usize = 6;

/// The chart of a [`TrainRun`] scenario: each container's share over a trailing `window`,
/// with Tessera and (when run) without, the targets dashed.
pub(super) fn shares_chart(
    file: &str,
    title: &str,
    specs: &[Spec],
    targets: &[f64],
    runs: [Option<&TrainRun>; 2],
    window: Duration,
) -> Chart {
    let panels = runs
        .iter()
        .zip(["with Tessera", "without Tessera (plain time-slicing)"])
        .filter_map(|(run, title)| {
            let run = (*run)?;
            let mut series: Vec<Series> = specs
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    let points = share_points(&run.trace, &[run.pids[i]], window, TENTH);
                    Series::line(legend(spec), i, points)
                })
                .collect();
            let until = series
                .iter()
                .filter_map(|s| s.points.last())
                .map(|p| p.0)
                .fold(0.0, f64::max);
            series.extend(target_lines(targets, until));
            Some(Panel {
                title: title.to_string(),
                series,
            })
        })
        .collect();
    Chart {
        file: file.to_string(),
        title: title.to_string(),
        x_label: "time since the workloads started (s)".into(),
        y_label: format!("share of GPU time over the last {} (%)", span(window)),
        y_range: Some((0.0, 105.0)),
        shared_x: true,
        panels,
    }
}

pub(super) fn within(share: f64, target: f64, tolerance: f64) -> bool {
    (share - target).abs() <= tolerance + 1e-9
}

/// `fixed-alone`: `fixed:30` alone and saturating.
pub(super) fn fixed_alone(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("fixed-alone");
    let specs = [Spec::online("fixed30", "fixed:30")];
    let phase = o.phase(10.0);
    o.say("fixed:30 alone, saturating, with Tessera");
    let run = train_together(
        bins,
        &specs,
        true,
        &Workload::train(1.0),
        SECOND,
        phase,
        SAMPLE,
    )?;
    out.notes.extend(run.daemon_note(&specs));
    let windows = run.windows(0, SECOND);
    let lo = windows.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = windows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    out.set("share", run.share(0));
    out.set("min_window", lo);
    out.set("max_window", hi);
    out.set("windows", windows.len() as f64);
    let base = baseline_run(
        bins,
        &specs,
        &Workload::train(1.0),
        phase.min(3 * SECOND),
        o,
    )?;
    out.charts.push(shares_chart(
        "fixed-alone-shares",
        "fixed:30 alone and saturating: share of GPU time",
        &specs,
        &[0.30],
        [Some(&run), base.as_ref()],
        SECOND / 2,
    ));
    out.row(
        "fixed:30, each 1 s window",
        "30 ± 2 %",
        format!("{}–{} over {} windows", pct(lo), pct(hi), windows.len()),
        shown(&base, 0),
        Some(!windows.is_empty() && windows.iter().all(|&w| within(w, 0.30, 0.02))),
    );
    Ok(out)
}

/// `mixed`: `fixed:20` + `burst:30` + `best-effort`, all saturating.
pub(super) fn mixed(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("mixed");
    let specs = [
        Spec::online("fixed20", "fixed:20"),
        Spec::online("burst30", "burst:30"),
        Spec::online("besteffort", "best-effort"),
    ];
    let targets = [0.20, 0.55, 0.25];
    let phase = o.phase(10.0);
    o.say("fixed:20 + burst:30 + best-effort with Tessera");
    let run = train_together(
        bins,
        &specs,
        true,
        &Workload::train(1.0),
        SECOND,
        phase,
        SAMPLE,
    )?;
    out.notes.extend(run.daemon_note(&specs));
    let base = baseline_run(
        bins,
        &specs,
        &Workload::train(1.0),
        phase.min(5 * SECOND),
        o,
    )?;
    out.charts.push(shares_chart(
        "mixed-shares",
        "fixed:20 + burst:30 + best-effort, all saturating: shares of GPU time",
        &specs,
        &targets,
        [Some(&run), base.as_ref()],
        SECOND / 2,
    ));
    for (i, (spec, target)) in specs.iter().zip(targets).enumerate() {
        let share = run.share(i);
        out.set(spec.name, share);
        let windows = run.windows(i, SECOND);
        let lo = windows.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = windows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        out.set(&format!("{}_min_window", spec.name), lo);
        out.set(&format!("{}_max_window", spec.name), hi);
        out.row(
            spec.compute,
            &format!("{:.0} ± 3 %", target * 100.0),
            format!("{} (1 s windows {}–{})", pct(share), pct(lo), pct(hi)),
            shown(&base, i),
            Some(within(share, target, 0.03)),
        );
    }
    total_use_row(&mut out, "", "", &run, base.as_ref());
    Ok(out)
}

/// `best-effort`: four `best-effort` containers.
pub(super) fn best_effort(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("best-effort");
    let specs = [
        Spec::online("be1", "best-effort"),
        Spec::online("be2", "best-effort"),
        Spec::online("be3", "best-effort"),
        Spec::online("be4", "best-effort"),
    ];
    let phase = o.phase(5.0);
    o.say("four best-effort with Tessera");
    let run = train_together(
        bins,
        &specs,
        true,
        &Workload::train(1.0),
        SECOND,
        phase,
        SAMPLE,
    )?;
    out.notes.extend(run.daemon_note(&specs));
    let base = baseline_run(bins, &specs, &Workload::train(1.0), phase, o)?;
    out.charts.push(shares_chart(
        "best-effort-shares",
        "four best-effort containers, all saturating: shares of GPU time",
        &specs,
        &[0.25; 4],
        [Some(&run), base.as_ref()],
        SECOND / 2,
    ));
    for (i, spec) in specs.iter().enumerate() {
        let share = run.share(i);
        out.set(spec.name, share);
        out.row(
            &format!("best-effort #{}", i + 1),
            "25 ± 3 %",
            pct(share),
            shown(&base, i),
            Some(within(share, 0.25, 0.03)),
        );
    }
    Ok(out)
}

/// `long-kernels`: kernels of 50 ms under `fixed:30`.
pub(super) fn long_kernels(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("long-kernels");
    let specs = [Spec::online("fixed30", "fixed:30")];
    let phase = o.phase(10.0);
    o.say("fixed:30 with 50 ms kernels, with Tessera");
    let run = train_together(
        bins,
        &specs,
        true,
        &Workload::train(50.0),
        SECOND,
        phase,
        SAMPLE,
    )?;
    out.notes.extend(run.daemon_note(&specs));
    let share = run.share(0);
    let windows = run.windows(0, SECOND);
    let lo = windows.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = windows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    out.set("share", share);
    out.set("min_window", lo);
    out.set("max_window", hi);
    let base = baseline_run(
        bins,
        &specs,
        &Workload::train(50.0),
        phase.min(3 * SECOND),
        o,
    )?;
    out.charts.push(shares_chart(
        "long-kernels-shares",
        "fixed:30 with 50 ms kernels: share of GPU time",
        &specs,
        &[0.30],
        [Some(&run), base.as_ref()],
        SECOND,
    ));
    out.row(
        &format!("fixed:30, 50 ms kernels, over {:.0} s", phase.as_secs_f64()),
        "30 ± 3 %",
        format!("{} (1 s windows {}–{})", pct(share), pct(lo), pct(hi)),
        shown(&base, 0),
        Some(within(share, 0.30, 0.03)),
    );
    Ok(out)
}

/// What one run of `burst-join` measured.
struct Join {
    alone: f64,
    /// ms from the fixed container's first busy time until the burst one's share over the
    /// next 10 ms is down to its own; `None` if it never was.
    drop_ms: Option<f64>,
    /// The burst container's share over the first 10 ms after the fixed one started.
    first_10ms: f64,
    fixed: f64,
    burst: f64,
    /// Burst's and fixed's shares over time (see [`share_points`]).
    series: [Vec<(f64, f64)>; 2],
    /// When the fixed container first ran, in s since the first sample.
    join_s: f64,
    /// Burst's and fixed's shares over 10 ms windows around the join, as `(ms since the
    /// fixed container first ran, %)`.
    zoom: [Vec<(f64, f64)>; 2],
}

/// The burst container's share limit once the fixed one joins (30 + the 20 left over), plus
/// one 1 ms quantum of the engine per 10 ms window: the finest the ground truth resolves.
const BURST_JOINED: f64 = 0.50;
const WINDOW_SLACK: f64 = 0.10;

fn join_run(bins: &Bins, tessera: bool, o: &Options) -> Result<Join, ScenarioError> {
    let specs = [
        Spec::online("burst30", "burst:30"),
        Spec::online("fixed50", "fixed:50"),
    ];
    let alone_phase = 2 * SECOND;
    let joined_phase = o.phase(5.0);
    let bed = Testbed::new(bins, &specs, tessera)?;
    let seconds = format!("{}", (alone_phase + joined_phase).as_secs_f64() + 20.0);
    let train = ["train", "--kernel-ms", "1", "--seconds", &seconds];
    // 1 ms readings: the drop is judged on 10 ms windows.
    let sampler = Sampler::start(bed.node_state(), Duration::from_millis(1))?;
    let mut burst = bed.gpuload("burst30", &train)?;
    wait_running(&bed, &mut [&mut burst], 15 * SECOND)?;
    std::thread::sleep(SECOND / 2);
    let alone_from = simgpu::clock::now_ns();
    std::thread::sleep(alone_phase);
    let alone_to = simgpu::clock::now_ns();
    let mut fixed = bed.gpuload("fixed50", &train)?;
    wait_running(&bed, &mut [&mut burst, &mut fixed], 15 * SECOND)?;
    std::thread::sleep(joined_phase);
    let end = simgpu::clock::now_ns();
    std::thread::sleep(Duration::from_millis(5));
    let trace = sampler.stop()?;
    if !burst.alive() || !fixed.alive() {
        return Err(ScenarioError::Run(
            "a workload ended inside the measuring phase".into(),
        ));
    }
    let (b, f) = ([burst.pid()], [fixed.pid()]);
    let alone = trace.share(&b, trace.at(alone_from), trace.at(alone_to));
    let t0 = trace
        .first_busy(fixed.pid())
        .ok_or_else(|| ScenarioError::Run("the fixed container never ran".into()))?;
    let ms = 1_000_000;
    let ten = |from: u64| trace.share(&b, trace.at(from), trace.at(from + 10 * ms));
    let first_10ms = ten(t0);
    let drop_ms = (0..1000u64)
        .map(|k| t0 + k * ms)
        .take_while(|&from| from + 10 * ms <= end)
        .find(|&from| ten(from) <= BURST_JOINED + WINDOW_SLACK + 1e-9)
        .map(|from| (from - t0) as f64 / ms as f64);
    let settled = t0 + 500 * ms;
    let (a, z) = (trace.at(settled), trace.at(end));
    let (window, step) = (Duration::from_millis(100), Duration::from_millis(10));
    let origin = trace.samples.first().map_or(t0, |s| s.t_ns);
    let join_s = t0.saturating_sub(origin) as f64 / 1e9;
    let zoom = |pids: &[u32]| -> Vec<(f64, f64)> {
        share_points(
            &trace,
            pids,
            Duration::from_millis(10),
            Duration::from_millis(1),
        )
        .into_iter()
        .map(|(x, y)| ((x - join_s) * 1e3, y))
        .filter(|(x, _)| (-ZOOM_BEFORE_MS..=ZOOM_AFTER_MS).contains(x))
        .collect()
    };
    Ok(Join {
        alone,
        drop_ms,
        first_10ms,
        fixed: trace.share(&f, a, z),
        burst: trace.share(&b, a, z),
        series: [
            share_points(&trace, &b, window, step),
            share_points(&trace, &f, window, step),
        ],
        join_s,
        zoom: [zoom(&b), zoom(&f)],
    })
}

/// `burst-join`: `burst:30` alone, then a `fixed:50` joins.
pub(super) fn burst_join(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("burst-join");
    o.say("burst:30 alone, then fixed:50 joins, with Tessera");
    let run = join_run(bins, true, o)?;
    let base = if o.baseline {
        o.say("baseline: the same without Tessera");
        Some(join_run(bins, false, o)?)
    } else {
        None
    };
    let drop = |j: &Join| match j.drop_ms {
        Some(d) => format!("{d:.0} ms (first 10 ms: {})", pct(j.first_10ms)),
        None => format!("never (first 10 ms: {})", pct(j.first_10ms)),
    };
    out.charts.push(join_chart(&run, base.as_ref()));
    out.charts.push(zoom_chart(&run, base.as_ref()));
    out.set("alone", run.alone);
    out.set("drop_ms", run.drop_ms.unwrap_or(f64::INFINITY));
    out.set("first_10ms", run.first_10ms);
    out.set("fixed", run.fixed);
    out.set("burst", run.burst);
    out.row(
        "burst:30 alone",
        "≥ 95 %",
        pct(run.alone),
        base.as_ref().map(|b| pct(b.alone)).unwrap_or_default(),
        Some(run.alone >= 0.95),
    );
    out.row(
        "burst down to its share after fixed:50 starts",
        "≤ 10 ms (10 ms window ≤ 60 %)",
        drop(&run),
        base.as_ref().map(drop).unwrap_or_default(),
        Some(run.drop_ms.is_some_and(|d| d <= 10.0)),
    );
    out.row(
        "fixed:50 beside burst:30",
        "50 ± 3 %",
        pct(run.fixed),
        base.as_ref().map(|b| pct(b.fixed)).unwrap_or_default(),
        Some(within(run.fixed, 0.50, 0.03)),
    );
    out.row(
        "burst:30 beside fixed:50",
        "50 % (30 + the 20 left)",
        pct(run.burst),
        base.as_ref().map(|b| pct(b.burst)).unwrap_or_default(),
        None,
    );
    Ok(out)
}

/// The span of the zoomed chart around the join, in ms.
const ZOOM_BEFORE_MS: f64 = 30.0;
const ZOOM_AFTER_MS: f64 = 120.0;

/// The join up close: shares over 10 ms windows (each point is the window ending there),
/// and the check: the burst container at most 60 % from 10 ms on.
fn zoom_chart(run: &Join, base: Option<&Join>) -> Chart {
    let panel = |j: &Join, title: &str| Panel {
        title: title.to_string(),
        series: vec![
            Series::line("burst30 (burst:30)", 0, j.zoom[0].clone()),
            Series::line("fixed50 (fixed:50)", 1, j.zoom[1].clone()),
            Series::dashed(
                "burst limit from 10 ms on",
                0,
                vec![(10.0, 60.0), (ZOOM_AFTER_MS, 60.0)],
            ),
        ],
    };
    let mut panels = vec![panel(run, "with Tessera")];
    panels.extend(base.map(|b| panel(b, "without Tessera (plain time-slicing)")));
    Chart {
        file: "burst-join-zoom".into(),
        title: "The join up close: shares over 10 ms windows".into(),
        x_label: "ms since the fixed workload's first kernel".into(),
        y_label: "share of GPU time over the last 10 ms (%)".into(),
        y_range: Some((0.0, 105.0)),
        shared_x: true,
        panels,
    }
}

/// The chart of `burst-join`: both containers' shares over 100 ms windows, and the targets: the
/// burst container all of the GPU alone, then 50 % each.
fn join_chart(run: &Join, base: Option<&Join>) -> Chart {
    let panel = |j: &Join, title: &str| {
        let until = j
            .series
            .iter()
            .filter_map(|s| s.last())
            .map(|p| p.0)
            .fold(0.0, f64::max);
        let t = j.join_s;
        Panel {
            title: title.to_string(),
            series: vec![
                Series::line("burst30 (burst:30)", 0, j.series[0].clone()),
                Series::line("fixed50 (fixed:50)", 1, j.series[1].clone()),
                Series::dashed(
                    "burst target",
                    0,
                    vec![(0.0, 100.0), (t, 100.0), (t, 50.0), (until, 50.0)],
                ),
                Series::dashed("fixed target", 1, vec![(t, 50.0), (until, 50.0)]),
            ],
        }
    };
    let mut panels = vec![panel(run, "with Tessera")];
    panels.extend(base.map(|b| panel(b, "without Tessera (plain time-slicing)")));
    Chart {
        file: "burst-join-shares".into(),
        title: "burst:30 alone, then a fixed:50 joins: shares of GPU time".into(),
        x_label: "time since the burst workload started (s)".into(),
        y_label: "share of GPU time over the last 100 ms (%)".into(),
        y_range: Some((0.0, 105.0)),
        shared_x: true,
        panels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Sample;

    #[test]
    fn shares_over_a_trailing_window() {
        // One process busy half the time, sampled every 100 ms over 1 s.
        let ms = 1_000_000;
        let trace = Trace {
            samples: (0..=10)
                .map(|k| Sample {
                    t_ns: 5_000 * ms + k * 100 * ms,
                    procs: vec![(7, k * 50 * ms, true)],
                    memory: Vec::new(),
                    work: Vec::new(),
                })
                .collect(),
        };
        let points = share_points(&trace, &[7], SECOND / 2, TENTH);
        assert_eq!(points.len(), 6);
        assert!((points[0].0 - 0.5).abs() < 1e-9 && (points[5].0 - 1.0).abs() < 1e-9);
        assert!(points.iter().all(|&(_, y)| (y - 50.0).abs() < 1e-9));
        assert_eq!(span(SECOND), "1 s");
        assert_eq!(span(SECOND / 2), "500 ms");
    }

    #[test]
    fn one_dashed_line_per_target() {
        let lines = target_lines(&[0.25, 0.25, 0.5], 3.0);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].name, "target 25 %");
        assert_eq!(lines[0].color, GREY);
        assert_eq!(lines[1].color, 2);
        assert_eq!(lines[1].points, [(0.0, 50.0), (3.0, 50.0)]);
    }
}
