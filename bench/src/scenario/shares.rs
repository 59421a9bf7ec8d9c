//! Shares of saturating containers (acceptance items 1–4 and 7): busy time per container
//! from the node's ground truth, divided by the wall time it covers.

use super::{pct, train_together, wait_running, Bins, Options, Outcome, Sampler, Spec, Testbed};
use std::time::Duration;

const SECOND: Duration = Duration::from_secs(1);
const TENTH: Duration = Duration::from_millis(100);

/// The baseline shares: the same containers' workloads with no Tessera, each alone on
/// the node's time-slicing.
fn baseline_shares(
    bins: &Bins,
    specs: &[Spec],
    kernel_ms: f64,
    phase: Duration,
    o: &Options,
) -> Result<Option<Vec<f64>>, String> {
    if !o.baseline {
        return Ok(None);
    }
    o.say("baseline: the same workloads without Tessera");
    let run = train_together(bins, specs, false, kernel_ms, SECOND / 2, phase, TENTH)?;
    Ok(Some((0..specs.len()).map(|i| run.share(i)).collect()))
}

fn shown(baseline: &Option<Vec<f64>>, i: usize) -> String {
    baseline.as_ref().map(|b| pct(b[i])).unwrap_or_default()
}

fn within(share: f64, target: f64, tolerance: f64) -> bool {
    (share - target).abs() <= tolerance + 1e-9
}

/// Item 1: `fixed:30` alone and saturating.
pub(super) fn fixed_alone(bins: &Bins, o: &Options) -> Result<Outcome, String> {
    let mut out = Outcome::new("fixed-alone");
    let specs = [Spec::online("fixed30", "fixed:30")];
    let phase = o.phase(10.0);
    o.say("fixed:30 alone, saturating, with Tessera");
    let run = train_together(bins, &specs, true, 1.0, SECOND, phase, TENTH)?;
    out.notes.extend(run.daemon_note(&specs));
    let windows = run.windows(0, SECOND);
    let lo = windows.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = windows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    out.set("share", run.share(0));
    out.set("min_window", lo);
    out.set("max_window", hi);
    out.set("windows", windows.len() as f64);
    let base = baseline_shares(bins, &specs, 1.0, phase.min(3 * SECOND), o)?;
    out.row(
        "fixed:30, each 1 s window",
        "30 ± 2 %",
        format!("{}–{} over {} windows", pct(lo), pct(hi), windows.len()),
        shown(&base, 0),
        Some(!windows.is_empty() && windows.iter().all(|&w| within(w, 0.30, 0.02))),
    );
    Ok(out)
}

/// Item 2: `fixed:20` + `burst:30` + `best-effort`, all saturating.
pub(super) fn mixed(bins: &Bins, o: &Options) -> Result<Outcome, String> {
    let mut out = Outcome::new("mixed");
    let specs = [
        Spec::online("fixed20", "fixed:20"),
        Spec::online("burst30", "burst:30"),
        Spec::online("besteffort", "best-effort"),
    ];
    let targets = [0.20, 0.55, 0.25];
    let phase = o.phase(10.0);
    o.say("fixed:20 + burst:30 + best-effort with Tessera");
    let run = train_together(bins, &specs, true, 1.0, SECOND, phase, TENTH)?;
    out.notes.extend(run.daemon_note(&specs));
    let base = baseline_shares(bins, &specs, 1.0, phase.min(5 * SECOND), o)?;
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
    Ok(out)
}

/// Item 4: four `best-effort` containers.
pub(super) fn best_effort(bins: &Bins, o: &Options) -> Result<Outcome, String> {
    let mut out = Outcome::new("best-effort");
    let specs = [
        Spec::online("be1", "best-effort"),
        Spec::online("be2", "best-effort"),
        Spec::online("be3", "best-effort"),
        Spec::online("be4", "best-effort"),
    ];
    let phase = o.phase(5.0);
    o.say("four best-effort with Tessera");
    let run = train_together(bins, &specs, true, 1.0, SECOND, phase, TENTH)?;
    out.notes.extend(run.daemon_note(&specs));
    let base = baseline_shares(bins, &specs, 1.0, phase, o)?;
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

/// Item 7: kernels of 50 ms under `fixed:30`.
pub(super) fn long_kernels(bins: &Bins, o: &Options) -> Result<Outcome, String> {
    let mut out = Outcome::new("long-kernels");
    let specs = [Spec::online("fixed30", "fixed:30")];
    let phase = o.phase(10.0);
    o.say("fixed:30 with 50 ms kernels, with Tessera");
    let run = train_together(bins, &specs, true, 50.0, SECOND, phase, TENTH)?;
    out.notes.extend(run.daemon_note(&specs));
    let share = run.share(0);
    let windows = run.windows(0, SECOND);
    let lo = windows.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = windows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    out.set("share", share);
    out.set("min_window", lo);
    out.set("max_window", hi);
    let base = baseline_shares(bins, &specs, 50.0, phase.min(3 * SECOND), o)?;
    out.row(
        &format!("fixed:30, 50 ms kernels, over {:.0} s", phase.as_secs_f64()),
        "30 ± 3 %",
        format!("{} (1 s windows {}–{})", pct(share), pct(lo), pct(hi)),
        shown(&base, 0),
        Some(within(share, 0.30, 0.03)),
    );
    Ok(out)
}

/// What one run of item 3 measured.
struct Join {
    alone: f64,
    /// ms from the fixed container's first busy time until the burst one's share over the
    /// next 10 ms is down to its own; `None` if it never was.
    drop_ms: Option<f64>,
    /// The burst container's share over the first 10 ms after the fixed one started.
    first_10ms: f64,
    fixed: f64,
    burst: f64,
}

/// The burst container's share limit once the fixed one joins (30 + the 20 left over), plus
/// one 1 ms quantum of the engine per 10 ms window: the finest the ground truth resolves.
const BURST_JOINED: f64 = 0.50;
const WINDOW_SLACK: f64 = 0.10;

fn join_run(bins: &Bins, tessera: bool, o: &Options) -> Result<Join, String> {
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
        return Err("a workload ended inside the measuring phase".into());
    }
    let (b, f) = ([burst.pid()], [fixed.pid()]);
    let alone = trace.share(&b, trace.at(alone_from), trace.at(alone_to));
    let t0 = trace
        .first_busy(fixed.pid())
        .ok_or("the fixed container never ran")?;
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
    Ok(Join {
        alone,
        drop_ms,
        first_10ms,
        fixed: trace.share(&f, a, z),
        burst: trace.share(&b, a, z),
    })
}

/// Item 3: `burst:30` alone, then a `fixed:50` joins.
pub(super) fn burst_join(bins: &Bins, o: &Options) -> Result<Outcome, String> {
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
