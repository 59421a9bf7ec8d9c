//! Online work beside offline work (`online-offline`, `preemption`): the online container's
//! request latency from `gpuload infer`, the offline container's use of the time left idle
//! from the node's busy time, and the preemption latency from the stamps the library writes
//! into the regions.

use super::error::ScenarioError;
use super::plot::{cdf, Chart, Panel, Series};
use super::{
    measure::percentile, ms, pct, wait_running, Bins, Options, Outcome, Sampler, Spec, Testbed,
    Workload,
};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const SPECS: [Spec; 2] = [
    Spec::online("online", "best-effort"),
    Spec::offline("offline", "best-effort"),
];

/// The offline workload's kernels: 1 ms.
const OFFLINE_KERNEL_MS: f64 = 1.0;

/// One run of the online workload, alone or beside the offline one.
struct InferRun {
    p99_ms: f64,
    p50_ms: f64,
    /// Shares over the online run (0–1): the online container's, all background containers'
    /// together, and each of theirs.
    online: f64,
    offline: f64,
    background: Vec<f64>,
    /// The first background container's in-flight window (GPU ms), read from its region.
    offline_window_ms: Option<f64>,
    /// The latency distribution, as CDF points `(ms, %)`.
    cdf: Vec<(f64, f64)>,
    /// Whether `cdf` holds every request, rather than the quantiles `gpuload infer` reports.
    every_request: bool,
    /// How far `controld`'s measured share of the background containers lay from the
    /// ground truth over the second its figure covers, in points (the larger); `None`
    /// without the daemon.
    daemon_error_points: Option<f64>,
    /// How often `controld`'s watchdog held the background containers (together) for
    /// running past their grant; `None` without the daemon. An honest offline container
    /// that only fills the idle time must never be.
    holds: Option<u64>,
}

/// The latency CDF of a `gpuload infer` report: from every request's latency where the
/// report lists them (`latencies_ms`), else the staircase its quantiles (p50, p99, max)
/// bound from below: at least half the requests took p50 or less, and so on.
fn latency_cdf(report: &Value) -> (Vec<(f64, f64)>, bool) {
    if let Some(all) = report["latencies_ms"].as_array() {
        let v: Vec<f64> = all.iter().filter_map(Value::as_f64).collect();
        if !v.is_empty() {
            let points = cdf(&v).into_iter().map(|(x, y)| (x, y * 100.0)).collect();
            return (points, true);
        }
    }
    let mut points = Vec::new();
    let mut below = 0.0;
    for (key, share) in [("p50_ms", 50.0), ("p99_ms", 99.0), ("max_ms", 100.0)] {
        if let Some(v) = report[key].as_f64() {
            points.push((v, below));
            points.push((v, share));
            below = share;
        }
    }
    (points, false)
}

impl InferRun {
    /// The share of the time the online job left idle that the offline job used.
    fn idle_used(&self) -> f64 {
        self.offline / (1.0 - self.online).max(1e-9)
    }
}

/// `gpuload infer` with `infer`'s options in `specs[0]`'s container for `phase`, after each
/// `background` workload is running in its container (none: the online job alone).
fn infer_run(
    bins: &Bins,
    specs: &[Spec],
    tessera: bool,
    background: &[(&str, &Workload)],
    infer: &[&str],
    phase: Duration,
) -> Result<InferRun, ScenarioError> {
    let bed = Testbed::new(bins, specs, tessera)?;
    let sampler = Sampler::start(bed.node_state(), Duration::from_millis(20))?;
    let long = format!("{}", phase.as_secs_f64() + 30.0);
    let mut offline = Vec::new();
    for (name, workload) in background {
        let mut args: Vec<&str> = workload.0.iter().map(String::as_str).collect();
        args.extend(["--seconds", &long]);
        offline.push(bed.gpuload(name, &args)?);
    }
    if !offline.is_empty() {
        wait_running(
            &bed,
            &mut offline.iter_mut().collect::<Vec<_>>(),
            Duration::from_secs(15),
        )?;
        std::thread::sleep(Duration::from_millis(300));
    }
    let online_name = specs[0].name;
    let seconds = format!("{}", phase.as_secs_f64());
    let mut args = vec!["infer", "--seconds", &seconds];
    args.extend_from_slice(infer);
    let online = bed.gpuload(online_name, &args)?;
    let online_pid = online.pid();
    let report = online.finish(phase + Duration::from_secs(60))?;
    // controld's view of the background containers as the online run ends.
    let status = if tessera { bed.status().ok() } else { None };
    let offline_window_ms = match background.first() {
        Some((name, _)) if tessera => bed
            .region(name)
            .ok()
            .map(|r| r.compute(0).window_ns_or_default() as f64 / 1e6),
        _ => None,
    };
    std::thread::sleep(Duration::from_millis(60));
    let trace = sampler.stop()?;
    let daemon_error_points = status.as_ref().and_then(|st| {
        let errors = background.iter().zip(&offline).map(|((name, _), p)| {
            let c = st["containers"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == *name)?;
            let measured = c["devices"][0]["share_measured"].as_f64()?;
            let until = c["devices"][0]["share_measured_until_ns"].as_u64()?;
            let since = until.saturating_sub(1_000_000_000);
            let truth = trace.share_between(&[p.pid()], since, until);
            Some((measured - truth).abs() * 100.0)
        });
        errors
            .collect::<Option<Vec<f64>>>()
            .map(|v| v.into_iter().fold(0.0, f64::max))
    });
    let holds = status.as_ref().map(|st| {
        background
            .iter()
            .filter_map(|(name, _)| {
                st["containers"]
                    .as_array()?
                    .iter()
                    .find(|c| c["name"] == *name)?["devices"][0]["compute_holds"]
                    .as_u64()
                    .or(Some(0))
            })
            .sum()
    });
    for p in &mut offline {
        if !p.alive() {
            return Err(ScenarioError::Run(
                "a background workload ended early".into(),
            ));
        }
    }
    let from = trace
        .first_busy(online_pid)
        .map(|t| trace.at(t))
        .ok_or_else(|| ScenarioError::Run("the online workload never ran".into()))?;
    let to = trace
        .last_alive(online_pid)
        .ok_or_else(|| ScenarioError::Run("the online workload was never seen".into()))?;
    let background: Vec<f64> = offline
        .iter()
        .map(|p| trace.share(&[p.pid()], from, to))
        .collect();
    let num = |k: &str| {
        report[k]
            .as_f64()
            .ok_or_else(|| ScenarioError::Run(format!("gpuload infer reported no {k}: {report}")))
    };
    let (cdf, every_request) = latency_cdf(&report);
    Ok(InferRun {
        p99_ms: num("p99_ms")?,
        p50_ms: num("p50_ms")?,
        online: trace.share(&[online_pid], from, to),
        offline: background.iter().sum(),
        background,
        offline_window_ms,
        cdf,
        every_request,
        daemon_error_points,
        holds,
    })
}

/// What a row says of the watchdog's holds of the offline containers: nothing when there
/// were none.
fn held_note(holds: Option<u64>) -> String {
    match holds {
        Some(n) if n > 0 => format!("; held {n} × by the watchdog"),
        _ => String::new(),
    }
}

/// `online-offline`: online `gpuload infer` beside offline `gpuload train`.
pub(super) fn online_offline(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("online-offline");
    // 400 requests a run, for the reason the demo's mix has them (`demo_mix_rows`).
    let phase = o.phase(20.0);

    // Requests of ten 1 ms kernels at 20/s. "Alone" is the better of the online job alone
    // under Tessera (its container configured as here, the offline one idle) and alone
    // without Tessera, so that a cost Tessera adds to the job alone is not hidden.
    let ten = ["--rate", "20", "--kernels", "10", "--kernel-ms", "1"];
    let train = Workload::train(OFFLINE_KERNEL_MS);
    let deep = Workload::deep("queue", 1, OFFLINE_KERNEL_MS);
    let trainer = [("offline", &train)];
    let queuer = [("offline", &deep)];
    o.say("online alone (10 × 1 ms requests), with Tessera, then without");
    let solo = infer_run(bins, &SPECS, true, &[], &ten, phase)?;
    let plain_solo = infer_run(bins, &SPECS, false, &[], &ten, phase)?;
    let alone = solo.p99_ms.min(plain_solo.p99_ms);
    o.say("online beside offline, with Tessera");
    let pair = infer_run(bins, &SPECS, true, &trainer, &ten, phase)?;
    let base_pair = if o.baseline {
        o.say("baseline: online beside offline, without Tessera");
        Some(infer_run(bins, &SPECS, false, &trainer, &ten, phase)?)
    } else {
        None
    };
    o.say("online beside offline queueing 1000 kernels ahead, with Tessera");
    let deep_pair = infer_run(bins, &SPECS, true, &queuer, &ten, phase)?;
    let base_deep = if o.baseline {
        o.say("baseline: the same without Tessera");
        Some(infer_run(bins, &SPECS, false, &queuer, &ten, phase)?)
    } else {
        None
    };
    out.set("deep_pair_p99_ms", deep_pair.p99_ms);
    out.set("deep_p99_ratio", deep_pair.p99_ms / alone);
    out.set("deep_idle_used", deep_pair.idle_used());
    out.set("solo_p99_ms", solo.p99_ms);
    out.set("plain_solo_p99_ms", plain_solo.p99_ms);
    out.set("pair_p99_ms", pair.p99_ms);
    out.set("pair_p50_ms", pair.p50_ms);
    out.set("solo_p50_ms", solo.p50_ms);
    out.set("plain_solo_p50_ms", plain_solo.p50_ms);
    out.set("p99_ratio", pair.p99_ms / alone);
    out.set("online_share", pair.online);
    out.set("offline_share", pair.offline);
    out.set("idle_used", pair.idle_used());
    let holds = [&pair, &deep_pair]
        .iter()
        .filter_map(|r| r.holds)
        .sum::<u64>();
    out.set("offline_holds", holds as f64);
    if let Some(b) = &base_pair {
        out.set("baseline_pair_p99_ms", b.p99_ms);
    }
    out.row(
        "online p99 alone (10 × 1 ms at 20/s)",
        "reference: the better of the two",
        ms(solo.p99_ms),
        ms(plain_solo.p99_ms),
        None,
    );
    out.row(
        "online p99 beside offline",
        "≤ 1.10 × alone",
        format!("{} ({:.2} ×)", ms(pair.p99_ms), pair.p99_ms / alone),
        base_pair
            .as_ref()
            .map(|b| format!("{} ({:.2} ×)", ms(b.p99_ms), b.p99_ms / alone))
            .unwrap_or_default(),
        Some(pair.p99_ms <= 1.10 * alone),
    );
    out.row(
        "offline use of the time online leaves idle",
        "≥ 80 %",
        format!(
            "{} (offline {}, online {}{})",
            pct(pair.idle_used()),
            pct(pair.offline),
            pct(pair.online),
            held_note(pair.holds)
        ),
        base_pair
            .as_ref()
            .map(|b| pct(b.idle_used()))
            .unwrap_or_default(),
        Some(pair.idle_used() >= 0.80),
    );
    out.row(
        "online p99 beside offline queueing 1000 kernels ahead",
        "≤ 1.10 × alone",
        format!(
            "{} ({:.2} ×)",
            ms(deep_pair.p99_ms),
            deep_pair.p99_ms / alone
        ),
        base_deep
            .as_ref()
            .map(|b| format!("{} ({:.2} ×)", ms(b.p99_ms), b.p99_ms / alone))
            .unwrap_or_default(),
        Some(deep_pair.p99_ms <= 1.10 * alone),
    );
    out.row(
        "deep-queueing offline: use of the time online leaves idle",
        "≥ 80 %",
        format!(
            "{} (offline {}, online {}{})",
            pct(deep_pair.idle_used()),
            pct(deep_pair.offline),
            pct(deep_pair.online),
            held_note(deep_pair.holds)
        ),
        base_deep
            .as_ref()
            .map(|b| pct(b.idle_used()))
            .unwrap_or_default(),
        Some(deep_pair.idle_used() >= 0.80),
    );

    // Requests of one 2 ms kernel.
    let one = ["--rate", "20", "--kernels", "1", "--kernel-ms", "2"];
    o.say("online alone (one 2 ms kernel per request), with Tessera, then without");
    let solo2 = infer_run(bins, &SPECS, true, &[], &one, phase)?;
    let plain_solo2 = infer_run(bins, &SPECS, false, &[], &one, phase)?;
    let alone2 = solo2.p99_ms.min(plain_solo2.p99_ms);
    o.say("online beside offline, with Tessera");
    let pair2 = infer_run(bins, &SPECS, true, &trainer, &one, phase)?;
    let base_pair2 = if o.baseline {
        o.say("baseline: beside offline, without Tessera");
        Some(infer_run(bins, &SPECS, false, &trainer, &one, phase)?)
    } else {
        None
    };
    // The offline work an online launch can still meet: one window, and at least the one
    // kernel an empty window takes whatever its length.
    let window = pair2
        .offline_window_ms
        .unwrap_or(0.0)
        .max(OFFLINE_KERNEL_MS);
    let bound = alone2 + window + 0.5;
    out.set("solo2_p99_ms", solo2.p99_ms);
    out.set("plain_solo2_p99_ms", plain_solo2.p99_ms);
    out.set("pair2_p99_ms", pair2.p99_ms);
    out.set("offline_window_ms", window);
    out.set("pair2_bound_ms", bound);
    out.charts.push(latency_chart(
        [&solo, &plain_solo, &pair],
        base_pair.as_ref(),
        [&solo2, &plain_solo2, &pair2],
        base_pair2.as_ref(),
    ));
    if !pair.every_request {
        out.notes.push(
            "gpuload infer reported quantiles, not every request: the latency plot is the staircase they bound it by".into(),
        );
    }
    out.row(
        "one 2 ms kernel: online p99 alone",
        "reference: the better of the two",
        ms(solo2.p99_ms),
        ms(plain_solo2.p99_ms),
        None,
    );
    out.row(
        "one 2 ms kernel: online p99 beside offline",
        &format!(
            "≤ alone {} + offline window {} + 0.5 ms",
            ms(alone2),
            ms(window)
        ),
        ms(pair2.p99_ms),
        base_pair2
            .as_ref()
            .map(|b| ms(b.p99_ms))
            .unwrap_or_default(),
        Some(pair2.offline_window_ms.is_some() && pair2.p99_ms <= bound),
    );
    Ok(out)
}

/// `demo-mix`: the mix `tessera-demo` shows, every background container queueing deep: an
/// online `burst:50` service (20 requests/s of five 1 ms kernels), an offline best-effort
/// trainer and an offline `fixed:20` job. The fixed job at 20 ± 2 %; the service's p99
/// within 1.10 × its p99 alone.
pub(super) fn demo_mix(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("demo-mix");
    demo_mix_rows(&mut out, bins, o, "", 0.02)?;
    Ok(out)
}

/// The demo's mix: rows prefixed by `label` (figures too), the fixed job within `tolerance`.
pub(super) fn demo_mix_rows(
    out: &mut Outcome,
    bins: &Bins,
    o: &Options,
    label: &str,
    tolerance: f64,
) -> Result<(), ScenarioError> {
    // 400 requests a run: its p99 is then the fifth-worst request, not the third-worst of
    // 200, which a host that stalls the service's thread for a few ms once or twice a run
    // (a 2-core machine with a daemon and three workloads beside it) decides alone.
    let phase = o.phase(20.0);
    let specs = [
        Spec::online("inference", "burst:50"),
        Spec::offline("training", "best-effort"),
        Spec::offline("batch", "fixed:20"),
    ];
    let requests = ["--rate", "20", "--kernels", "5", "--kernel-ms", "1"];
    let trainer = Workload::deep("queue", 1, 2.0);
    let job = Workload::deep("queue", 1, 1.0);
    let background = [("training", &trainer), ("batch", &job)];
    o.say("the demo's service alone, with Tessera, then without");
    let solo = infer_run(bins, &specs, true, &[], &requests, phase)?;
    let plain = infer_run(bins, &specs, false, &[], &requests, phase)?;
    let alone = solo.p99_ms.min(plain.p99_ms);
    o.say("the demo's mix, with Tessera");
    let mix = infer_run(bins, &specs, true, &background, &requests, phase)?;
    let base = if o.baseline {
        o.say("the demo's mix without Tessera");
        Some(infer_run(
            bins,
            &specs,
            false,
            &background,
            &requests,
            phase,
        )?)
    } else {
        None
    };
    let fixed = mix.background.get(1).copied().unwrap_or(0.0);
    let key = |k: &str| format!("{}{k}", label.replace(|c: char| !c.is_alphanumeric(), "_"));
    out.set(&key("fixed_share"), fixed);
    out.set(&key("p99_ratio"), mix.p99_ms / alone);
    // The median beside the mix against the better median alone: what a short debug run
    // can hold (its p99 is its worst request or two).
    let alone_p50 = solo.p50_ms.min(plain.p50_ms);
    out.set(&key("p50_ratio"), mix.p50_ms / alone_p50);
    out.row(
        &format!("{label}service p99 alone (5 × 1 ms at 20/s)"),
        "reference: the better of the two",
        ms(solo.p99_ms),
        ms(plain.p99_ms),
        None,
    );
    out.row(
        &format!("{label}service p99 beside the offline trainer and job"),
        "≤ 1.10 × alone",
        format!("{} ({:.2} ×)", ms(mix.p99_ms), mix.p99_ms / alone),
        base.as_ref()
            .map(|b| format!("{} ({:.2} ×)", ms(b.p99_ms), b.p99_ms / alone))
            .unwrap_or_default(),
        Some(mix.p99_ms <= 1.10 * alone),
    );
    out.row(
        &format!("{label}service p50 beside them, against the better p50 alone"),
        &format!("reference (alone {})", ms(alone_p50)),
        format!("{} ({:.2} ×)", ms(mix.p50_ms), mix.p50_ms / alone_p50),
        base.as_ref()
            .map(|b| format!("{} ({:.2} ×)", ms(b.p50_ms), b.p50_ms / alone_p50))
            .unwrap_or_default(),
        None,
    );
    out.row(
        &format!("{label}fixed:20 offline job, over the service's run"),
        &format!("20 ± {:.0} %", tolerance * 100.0),
        format!(
            "{} (trainer {}, service {})",
            pct(fixed),
            pct(mix.background.first().copied().unwrap_or(0.0)),
            pct(mix.online)
        ),
        base.as_ref()
            .and_then(|b| b.background.get(1))
            .map(|&f| pct(f))
            .unwrap_or_default(),
        Some((fixed - 0.20).abs() <= tolerance + 1e-9),
    );
    if let Some(e) = mix.daemon_error_points {
        out.set(&key("daemon_error_points"), e);
    }
    out.row(
        &format!("{label}controld's measure of the trainer and the job vs ground truth"),
        "± 1 point",
        mix.daemon_error_points
            .map_or("—".into(), |e| format!("{e:.2} points")),
        String::new(),
        Some(mix.daemon_error_points.is_some_and(|e| e <= 1.0)),
    );
    Ok(())
}

/// The latency chart of `online-offline`: the online service's request latency CDF alone (with and
/// without Tessera), beside offline work with Tessera and without, for both request kinds.
fn latency_chart(
    ten: [&InferRun; 3],
    ten_base: Option<&InferRun>,
    one: [&InferRun; 3],
    one_base: Option<&InferRun>,
) -> Chart {
    let panel = |title: &str, runs: [&InferRun; 3], base: Option<&InferRun>| {
        let names = [
            "alone, with Tessera",
            "alone, without Tessera",
            "beside offline, with Tessera",
        ];
        let mut series: Vec<Series> = runs
            .iter()
            .zip(names)
            .enumerate()
            .map(|(i, (r, name))| Series::line(name, i, r.cdf.clone()))
            .collect();
        if let Some(b) = base {
            series.push(Series::line(
                "beside offline, without Tessera",
                3,
                b.cdf.clone(),
            ));
        }
        Panel {
            title: title.to_string(),
            series,
        }
    };
    let every_request = ten.iter().chain(&one).all(|r| r.every_request);
    Chart {
        file: "online-offline-latency".into(),
        title: if every_request {
            "Online request latency: alone, and beside an offline trainer".into()
        } else {
            "Online request latency (p50, p99, max only): alone, and beside an offline trainer"
                .into()
        },
        x_label: "request latency (ms)".into(),
        y_label: "requests at or below (%)".into(),
        y_range: Some((0.0, 100.0)),
        shared_x: false,
        panels: vec![
            panel("10 × 1 ms kernels per request, 20/s", ten, ten_base),
            panel("one 2 ms kernel per request, 20/s", one, one_base),
        ],
    }
}

/// Preemptions seen by [`watch_preemptions`].
#[derive(Debug, Default)]
struct Preemptions {
    /// Per online activation: from the online library's raise of `active`
    /// (`active_raised_ns`, stamped at the launch call) until the daemon set the offline
    /// container's `blocked` word (`blocked_at_ns`, stamped right after the store); the
    /// watcher's own sighting when the stamp is missing.
    block_ns: Vec<u64>,
    /// Per activation: until the offline container launched nothing new: the online
    /// library's stamp right after it set its bit on the node's board (`board_set_ns`),
    /// or the daemon's block if that came first.
    stop_ns: Vec<u64>,
    /// Per activation: until the offline library's first launch attempt that found the
    /// block (`blocked_seen_ns`); it attempts only between its own kernels.
    refused_ns: Vec<u64>,
    /// Activations the watcher saw no block for within [`GIVE_UP_NS`].
    unmatched: u64,
    /// Offline launches admitted while the watcher saw it blocked (the library checks the
    /// block before every launch, so this must stay 0).
    admitted_while_blocked: u64,
}

/// How long after an online activation the watcher waits for the offline block.
const GIVE_UP_NS: u64 = 20_000_000;

/// Looks at the online container's `active` word every 200 µs and, at each raise, looks
/// every 50 µs until the offline
/// container's `blocked` word is set, then takes the daemon's stamp of the block; then
/// follows the episode to its end for the offline library's own stamp and any launch
/// admitted while blocked.
fn watch_preemptions(
    online: tessera_region::Region,
    offline: tessera_region::Region,
    stop: Arc<AtomicBool>,
) -> Preemptions {
    use tessera_region::monotonic_ns;
    let on = online.compute(0);
    let off = offline.compute(0);
    let mut seen = Preemptions::default();
    // Relaxed (the flag): orders nothing; the join publishes the result.
    while !stop.load(Ordering::Relaxed) {
        // SeqCst: the library stamps `active_raised_ns`, then sets `active` with a SeqCst
        // compare-and-swap; seeing the flag set makes the stamp visible.
        if on.active.load(Ordering::SeqCst) == 0 {
            // Polled, not slept on with the futex: woken by the same wake-up as the
            // daemon, the watcher would race it for a CPU at the very moment measured.
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        // Relaxed: made visible by the flag's load above.
        let raised = on.active_raised_ns.load(Ordering::Relaxed);
        // SeqCst: the online library sets its board bit before `active`, and the offline
        // library counts a launch before it checks the board: every launch not refused
        // since the bit was set is in this figure.
        let launches_at_raise = off.launches.load(Ordering::SeqCst);
        if monotonic_ns().saturating_sub(raised) > 1_000_000 {
            // An activation this watcher did not wake for (it was busy with the last one):
            // skip to its end rather than measure it late.
            wait_idle(on, &stop);
            continue;
        }
        // Already blocked at the first look: the block came between the raise and this
        // look (or before the raise); the look's time bounds it from above.
        let mut blocked_at = None;
        while blocked_at.is_none() {
            let now = monotonic_ns();
            // SeqCst: the daemon's block store is SeqCst.
            if off.blocked.load(Ordering::SeqCst) != 0 {
                blocked_at = Some(now);
            } else if now - raised > GIVE_UP_NS {
                break;
            } else {
                // Sleep rather than spin: the daemon's stamp times the block, and a
                // spinning watcher would take a CPU from the daemon it measures.
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        let Some(blocked_at) = blocked_at else {
            seen.unmatched += 1;
            wait_idle(on, &stop);
            continue;
        };
        // SeqCst: after the SeqCst load that saw the block, so that every launch the
        // library counted before the block landed is in this figure (the library counts,
        // then checks the block again).
        let launches = off.launches.load(Ordering::SeqCst);
        // Relaxed: the daemon counts each block as it sets it; a change by the end means
        // the block was lifted and set again meanwhile (the online job went idle between
        // two kernels), when offline launches were allowed.
        let blocks = off.preemptions.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_micros(500));
        // Relaxed: the daemon stamps right after its store of `blocked`; half a
        // millisecond later the stamp is there. One older than the raise means the block
        // came before it (the offline container was still blocked): no latency at all.
        let stamped = off.blocked_at_ns.load(Ordering::Relaxed);
        let daemon = if stamped != 0 && stamped <= blocked_at {
            stamped.saturating_sub(raised)
        } else {
            blocked_at.saturating_sub(raised)
        };
        seen.block_ns.push(daemon);
        // Relaxed: the online library stamps right after it sets its bit on the board,
        // from which instant the offline library refuses every launch; an older stamp is
        // an earlier episode's (no bit this time: the daemon's block is what stopped it).
        let board = on.board_set_ns.load(Ordering::Relaxed);
        seen.stop_ns.push(if board >= raised {
            (board - raised).min(daemon)
        } else {
            daemon
        });
        let refused = off.blocked_seen_ns.load(Ordering::Relaxed);
        // SeqCst: as for the counts above.
        let same_episode = on.active.load(Ordering::SeqCst) != 0
            && on.active_raised_ns.load(Ordering::Relaxed) == raised;
        if board >= raised && same_episode {
            // Stopped by the board since the raise, and still: nothing may have started.
            seen.admitted_while_blocked += off
                .launches
                .load(Ordering::SeqCst)
                .saturating_sub(launches_at_raise);
        } else if off.blocked.load(Ordering::SeqCst) != 0
            && off.preemptions.load(Ordering::Relaxed) == blocks
        {
            seen.admitted_while_blocked += off
                .launches
                .load(Ordering::Relaxed)
                .saturating_sub(launches);
        }
        wait_idle(on, &stop);
        // Relaxed: a stamp, written once per block; read again at the episode's end in
        // case the offline job had not tried to launch yet.
        let refused = if refused != 0 {
            refused
        } else {
            off.blocked_seen_ns.load(Ordering::Relaxed)
        };
        if refused != 0 {
            seen.refused_ns.push(refused.saturating_sub(raised));
        }
    }
    seen
}

/// Waits until the online container's `active` word drops (or the watch stops).
fn wait_idle(on: &tessera_region::layout::ComputeAccount, stop: &AtomicBool) {
    // SeqCst / Relaxed: as in `watch_preemptions`.
    while on.active.load(Ordering::SeqCst) != 0 && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// What one preemption run saw.
struct PreemptRun {
    /// Online launch → offline stopped (board or daemon), in µs.
    lat_us: Vec<f64>,
    /// Online launch → the daemon's block, in µs.
    daemon_us: Vec<f64>,
    /// Online launch → the offline library's first refused attempt, in µs.
    refused_us: Vec<f64>,
    unmatched: u64,
    admitted_while_blocked: u64,
    requests: u64,
    preemptions: u64,
}

impl PreemptRun {
    fn stopped(&self) -> String {
        let (p50, p99) = (
            percentile(&self.lat_us, 0.50),
            percentile(&self.lat_us, 0.99),
        );
        let max = self.lat_us.iter().copied().fold(0.0, f64::max);
        format!(
            "{p99:.0} µs (p50 {p50:.0}, max {max:.0}; {} activations of {} requests, {} unmatched, {} launches admitted while blocked)",
            self.lat_us.len(),
            self.requests,
            self.unmatched,
            self.admitted_while_blocked
        )
    }

    fn blocked(&self) -> String {
        let (p50, p99) = (
            percentile(&self.daemon_us, 0.50),
            percentile(&self.daemon_us, 0.99),
        );
        format!("{p99:.0} µs (p50 {p50:.0})")
    }

    fn refused(&self) -> String {
        let (p50, p99) = (
            percentile(&self.refused_us, 0.50),
            percentile(&self.refused_us, 0.99),
        );
        format!(
            "{p99:.0} µs (p50 {p50:.0}; {} stamps, {} blocks)",
            self.refused_us.len(),
            self.preemptions
        )
    }
}

/// Online `gpuload infer` (ten 1 ms kernels per request, 20/s) beside an offline
/// `gpuload train` of `offline_kernel_ms` kernels, with the regions' stamps watched.
fn preempt_run(
    bins: &Bins,
    offline_kernel_ms: f64,
    phase: Duration,
) -> Result<PreemptRun, ScenarioError> {
    let bed = Testbed::new(bins, &SPECS, true)?;
    let long = format!("{}", phase.as_secs_f64() + 30.0);
    let kernel = format!("{offline_kernel_ms}");
    let mut offline = bed.gpuload(
        "offline",
        &["train", "--kernel-ms", &kernel, "--seconds", &long],
    )?;
    wait_running(&bed, &mut [&mut offline], Duration::from_secs(15))?;
    std::thread::sleep(Duration::from_millis(300));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (on, off, stop) = (bed.region("online")?, bed.region("offline")?, stop.clone());
        std::thread::Builder::new()
            .name("preemption-watch".into())
            .spawn(move || watch_preemptions(on, off, stop))
            .map_err(ScenarioError::start("start the watcher"))?
    };
    let seconds = format!("{}", phase.as_secs_f64());
    let online = bed.gpuload(
        "online",
        &[
            "infer",
            "--seconds",
            &seconds,
            "--rate",
            "20",
            "--kernels",
            "10",
            "--kernel-ms",
            "1",
        ],
    )?;
    let report = online.finish(phase + Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    let seen = watcher
        .join()
        .map_err(|_| ScenarioError::Run("the preemption watcher panicked".into()))?;
    let report = report?;
    if !offline.alive() {
        return Err(ScenarioError::Run(
            "the offline workload ended early".into(),
        ));
    }
    // Relaxed: a statistic, read after the run.
    let preemptions = bed
        .region("offline")?
        .compute(0)
        .preemptions
        .load(Ordering::Relaxed);
    Ok(PreemptRun {
        lat_us: seen.stop_ns.iter().map(|&n| n as f64 / 1e3).collect(),
        daemon_us: seen.block_ns.iter().map(|&n| n as f64 / 1e3).collect(),
        refused_us: seen.refused_ns.iter().map(|&n| n as f64 / 1e3).collect(),
        unmatched: seen.unmatched,
        admitted_while_blocked: seen.admitted_while_blocked,
        requests: report["count"].as_u64().unwrap_or(0),
        preemptions,
    })
}

/// `preemption`: preemption latency: from an online launch (the online library's stamp) until
/// the offline container launches nothing new: the online library's stamp after it set its
/// bit on the node's board, or the daemon's block of the offline region if that came first;
/// after it the offline library admits nothing (checked: launches admitted while blocked).
/// The daemon's block alone is shown too. The offline
/// library's own stamp of its first refused attempt is shown too; it comes later, when the
/// offline job next tries to launch, after the kernel it waits on.
pub(super) fn preemption(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("preemption");
    let phase = o.phase(10.0);
    o.say("online infer beside offline train, with Tessera; the regions watched");
    let run = preempt_run(bins, OFFLINE_KERNEL_MS, phase)?;
    out.set("p50_us", percentile(&run.lat_us, 0.50));
    out.set("p99_us", percentile(&run.lat_us, 0.99));
    out.set("samples", run.lat_us.len() as f64);
    out.set("unmatched", run.unmatched as f64);
    out.set("admitted_while_blocked", run.admitted_while_blocked as f64);
    out.set("refused_p99_us", percentile(&run.refused_us, 0.99));
    out.set("daemon_p99_us", percentile(&run.daemon_us, 0.99));
    let none = || {
        if o.baseline {
            "never (no preemption)".to_string()
        } else {
            String::new()
        }
    };
    out.row(
        "online launch → offline launches nothing new (p99)",
        "≤ 100 µs, nothing admitted after",
        run.stopped(),
        none(),
        Some(
            !run.lat_us.is_empty()
                && percentile(&run.lat_us, 0.99) <= 100.0
                && run.admitted_while_blocked == 0
                && run.unmatched == 0,
        ),
    );
    out.row(
        "online launch → controld's block of the offline region (p99)",
        "— (the path without the board)",
        run.blocked(),
        none(),
        None,
    );
    out.row(
        "online launch → offline's first refused attempt (p99)",
        "— (after the kernel it waits on)",
        run.refused(),
        none(),
        None,
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_cdf_from_every_request_or_the_quantiles() {
        let (points, every) = latency_cdf(&serde_json::json!({"latencies_ms": [2.0, 1.0]}));
        assert!(every);
        assert_eq!(points, [(1.0, 0.0), (1.0, 50.0), (2.0, 50.0), (2.0, 100.0)]);
        let (points, every) =
            latency_cdf(&serde_json::json!({"p50_ms": 1.0, "p99_ms": 3.0, "max_ms": 4.0}));
        assert!(!every);
        assert_eq!(
            points,
            [
                (1.0, 0.0),
                (1.0, 50.0),
                (3.0, 50.0),
                (3.0, 99.0),
                (4.0, 99.0),
                (4.0, 100.0)
            ]
        );
    }
}
