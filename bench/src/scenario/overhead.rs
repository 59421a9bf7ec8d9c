//! What Tessera costs (`overhead`, `daemon-cpu`): the throughput of a container with no compute limit
//! (the launch fast path) and of one alone under controld (metered, no limit binding),
//! each against the same program without the preload, and the daemon's CPU time beside
//! eight busy containers.

use super::error::ScenarioError;
use super::testbed::Backend;
use super::{cpu_ns, pct, wait_running, Bins, Options, Outcome, Proc, Spec, Testbed};
use std::time::{Duration, Instant};

/// The 20 µs kernel workload.
const TRAIN: [&str; 3] = ["train", "--kernel-ms", "0.02"];

fn kernels_per_s(report: &serde_json::Value) -> Result<f64, ScenarioError> {
    report["kernels_per_s"].as_f64().ok_or_else(|| {
        ScenarioError::Run(format!("gpuload train reported no kernels_per_s: {report}"))
    })
}

/// Which side of Tessera a round's container is on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// A container under controld, alone, so its limit never binds: metered all the same
    /// (its launches gated and measured, its window holding from the first launch).
    Managed,
    /// A container with a memory cap and no compute limit at all, no daemon: the launch
    /// fast path (two loads per launch).
    FastPath,
}

/// How a round runs its two processes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    /// At the same time, on two nodes of their own: both under the same load of the
    /// machine, so their ratio is the library's cost, not the machine's drift. Only simgpu
    /// has nodes of their own to give.
    SideBySide,
    /// One after the other, the container's first or the plain one's: on a real driver the
    /// two would share the one GPU and time-slice each other, and their ratio would say how
    /// the slices fell, not what the library costs. Rounds alternate which goes first, so
    /// that a drift of the machine touches both sides alike.
    InTurn { with_first: bool },
}

impl Order {
    /// Round `r`'s order on `backend`.
    ///
    /// simgpu, whose host costs and executor poll are CPU work like a driver's, runs them in
    /// turn too on a machine with fewer than eight cores: two simulated nodes side by side
    /// then compete for the cores, and their ratio says how the cores fell (rounds from
    /// 82 % to 108 % on two cores).
    fn of(backend: Backend, r: usize) -> Order {
        if backend == Backend::Simgpu && cores() >= 8 {
            return Order::SideBySide;
        }
        Order::InTurn {
            with_first: r.is_multiple_of(2),
        }
    }

    /// The words for the table and the progress lines.
    fn words(backend: Backend) -> &'static str {
        match Order::of(backend, 0) {
            Order::SideBySide => "side by side",
            Order::InTurn { .. } => "in turn, alternating which goes first",
        }
    }
}

/// One round: the same `gpuload train` of 20 µs kernels in a container on `side` and with no
/// preload and no daemon, in `order`. Returns both throughputs and the container's compute
/// mode mid-run.
fn round(
    bins: &Bins,
    phase: Duration,
    side: Side,
    order: Order,
) -> Result<(f64, f64, u32), ScenarioError> {
    let specs = [Spec::online("solo", "best-effort")];
    let tessera = Testbed::new(bins, &specs, side == Side::Managed)?;
    let plain = Testbed::new(bins, &specs, false)?;
    let seconds = format!("{}", phase.as_secs_f64());
    let mut args = TRAIN.to_vec();
    args.extend(["--seconds", &seconds]);
    let timeout = phase + Duration::from_secs(60);
    let start_with = || match side {
        Side::Managed => tessera.gpuload("solo", &args),
        Side::FastPath => tessera.run_uncapped_compute(&bins.gpuload, &args),
    };
    // Relaxed: a setting of the daemon's, read once for the report.
    let mode_mid_run = || -> Result<u32, ScenarioError> {
        std::thread::sleep(phase / 2);
        Ok(match side {
            Side::Managed => tessera
                .region("solo")?
                .compute(0)
                .mode
                .load(std::sync::atomic::Ordering::Relaxed),
            Side::FastPath => tessera_region::layout::COMPUTE_UNLIMITED,
        })
    };
    let (with, without, mode) = match order {
        Order::SideBySide => {
            let with = start_with()?;
            let without = plain.gpuload("solo", &args)?;
            let mode = mode_mid_run()?;
            (with.finish(timeout)?, without.finish(timeout)?, mode)
        }
        Order::InTurn { with_first } => {
            let run_with = || -> Result<_, ScenarioError> {
                let p = start_with()?;
                let mode = mode_mid_run()?;
                Ok((p.finish(timeout)?, mode))
            };
            let run_without = || plain.gpuload("solo", &args)?.finish(timeout);
            if with_first {
                let (with, mode) = run_with()?;
                (with, run_without()?, mode)
            } else {
                let without = run_without()?;
                let (with, mode) = run_with()?;
                (with, without, mode)
            }
        }
    };
    Ok((kernels_per_s(&with)?, kernels_per_s(&without)?, mode))
}

/// The cores this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `overhead`: one container, no limit binding, 20 µs kernels, against no preload: the median
/// over rounds of the ratio of the two throughputs, measured side by side on simgpu and in
/// turn on a real driver (see [`Order`]).
pub(super) fn unlimited_throughput(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("overhead");
    let phase = o.phase(4.0);
    let short = o.seconds.is_some_and(|s| s < 3.0);
    // In turn, an even number of rounds, so that each side goes first as often.
    let rounds = match (bins.backend, short) {
        (Backend::Simgpu, true) => 3,
        (Backend::Simgpu, false) => 5,
        (Backend::System, true) => 2,
        (Backend::System, false) => 4,
    };
    for side in [Side::FastPath, Side::Managed] {
        let (mut with, mut without, mut ratios, mut modes) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 1..=rounds {
            o.say(&format!(
                "round {r}/{rounds}: {}, and without the preload, {}",
                match side {
                    Side::FastPath => "no compute limit (the fast path)",
                    Side::Managed => "alone under controld (metered)",
                },
                Order::words(bins.backend)
            ));
            let (w, b, mode) = round(bins, phase, side, Order::of(bins.backend, r))?;
            modes.push(match mode {
                tessera_region::layout::COMPUTE_UNLIMITED => "unlimited",
                tessera_region::layout::COMPUTE_DAEMON => "daemon",
                tessera_region::layout::COMPUTE_LOCAL => "local",
                _ => "unknown",
            });
            with.push(w);
            without.push(b);
            ratios.push(w / b);
        }
        let runs = format!("with {with:.0?}, without {without:.0?}");
        let ratio = median(&mut ratios);
        let (w, b) = (median(&mut with), median(&mut without));
        let measured = format!(
            "{w:.0}/s; ratio {} (rounds {})",
            pct(ratio),
            ratios
                .iter()
                .map(|r| format!("{:.1}", r * 100.0))
                .collect::<Vec<_>>()
                .join(", ")
        );
        match side {
            Side::FastPath => {
                out.set("with_kernels_per_s", w);
                out.set("without_kernels_per_s", b);
                out.set("ratio", ratio);
                out.row(
                    &format!(
                        "20 µs kernels, no compute limit (the launch fast path), kernels/s (median of rounds {})",
                        Order::words(bins.backend)
                    ),
                    "≥ 99 % of no preload",
                    measured,
                    format!("{b:.0}/s"),
                    Some(ratio >= 0.99),
                );
                out.notes
                    .push(format!("fast path, kernels/s per round: {runs}"));
            }
            Side::Managed => {
                out.set("managed_kernels_per_s", w);
                out.set("managed_ratio", ratio);
                out.row(
                    "20 µs kernels, alone under controld (metered: gated and measured from its first launch), kernels/s",
                    "reported: the cost of the in-flight bound",
                    measured,
                    format!("{b:.0}/s"),
                    None,
                );
                // A container under controld is metered from its first launch, even
                // alone: its launches take the gated path with the large window a lone
                // container gets.
                let metered = modes.iter().all(|m| *m == "daemon");
                out.set("all_rounds_metered", if metered { 1.0 } else { 0.0 });
                modes.dedup();
                out.notes.push(format!(
                    "under controld, kernels/s per round: {runs}; the container's compute mode mid-run: {}",
                    modes.join(", ")
                ));
            }
        }
    }
    launch_cost(&mut out, bins, o)?;
    Ok(out)
}

/// The most a metered `cuLaunchKernel` may cost over a bare one, in ns.
const METERED_LAUNCH_NS: f64 = 1_000.0;
/// The most driver calls a metered launch may add, on average.
const METERED_CALLS: f64 = 1.0;

/// What a metered launch costs over a bare one: `gpuload probe`'s `cuLaunchKernel` (empty
/// kernels, 100 a batch) alone under controld and bare, the median of three rounds each;
/// and on simgpu, which records every driver call when asked (`SIMGPU_TRACE_CALLS`), the
/// driver calls per launch that metering adds to `gpuload train` of 20 µs kernels.
fn launch_cost(out: &mut Outcome, bins: &Bins, o: &Options) -> Result<(), ScenarioError> {
    let specs = [Spec::online("solo", "best-effort")];
    let probe = ["probe", "--calls", "100", "--batches", "20"];
    let launch_ns = |report: &serde_json::Value| {
        report["cuLaunchKernel"]["median_ns"]
            .as_f64()
            .ok_or_else(|| {
                ScenarioError::Run(format!("gpuload probe reported no launch: {report}"))
            })
    };
    let timeout = Duration::from_secs(120);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for r in 1..=3 {
        o.say(&format!(
            "launch cost, round {r}/3: gpuload probe under controld and bare"
        ));
        let managed = Testbed::new(bins, &specs, true)?;
        with.push(launch_ns(
            &managed.gpuload("solo", &probe)?.finish(timeout)?,
        )?);
        drop(managed);
        let plain = Testbed::new(bins, &specs, false)?;
        without.push(launch_ns(&plain.gpuload("solo", &probe)?.finish(timeout)?)?);
    }
    let (w, b) = (median(&mut with), median(&mut without));
    out.set("metered_launch_ns", w);
    out.set("bare_launch_ns", b);
    out.row(
        "cuLaunchKernel alone under controld (metered), against bare",
        &format!("≤ +{:.0} µs", METERED_LAUNCH_NS / 1e3),
        format!("{:.2} µs (+{:.2} µs)", w / 1e3, (w - b) / 1e3),
        format!("{:.2} µs", b / 1e3),
        Some(w - b <= METERED_LAUNCH_NS),
    );
    if bins.backend != Backend::Simgpu {
        return Ok(());
    }
    o.say(
        "driver calls per launch: gpuload train of 20 µs kernels, traced, under controld and bare",
    );
    let seconds = format!("{}", o.phase(4.0).min(Duration::from_secs(2)).as_secs_f64());
    let mut args = TRAIN.to_vec();
    args.extend(["--window", "64", "--seconds", &seconds]);
    let mut per_launch = [0.0; 2];
    for (k, tessera) in [true, false].into_iter().enumerate() {
        let bed = Testbed::new(bins, &specs, tessera)?;
        let trace = bed.dir().join("calls");
        let trace_env = [("SIMGPU_TRACE_CALLS", trace.as_os_str())];
        bed.run_in_with("solo", &bins.gpuload, &args, &trace_env)?
            .finish(timeout)?;
        per_launch[k] = calls_per_launch(&trace)?;
    }
    let extra = per_launch[0] - per_launch[1];
    out.set("metered_extra_calls", extra);
    out.row(
        "driver calls a metered launch adds (20 µs kernels, 64 in flight)",
        &format!("≤ {METERED_CALLS:.0}"),
        format!("{extra:.2} ({:.2} a launch in all)", per_launch[0]),
        format!("{:.2} a launch", per_launch[1]),
        Some(extra <= METERED_CALLS),
    );
    Ok(())
}

/// Driver calls per `cuLaunchKernel` in a call trace (`pid thread name result` lines).
fn calls_per_launch(trace: &std::path::Path) -> Result<f64, ScenarioError> {
    let text = std::fs::read_to_string(trace).map_err(ScenarioError::file("read", trace))?;
    let calls = text.lines().count();
    let launches = text
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("cuLaunchKernel"))
        .count();
    if launches == 0 {
        return Err(ScenarioError::Run(format!(
            "no cuLaunchKernel in the call trace {}",
            trace.display()
        )));
    }
    Ok(calls as f64 / launches as f64)
}

/// `daemon-cpu`: `controld`'s CPU time beside eight busy containers.
pub(super) fn daemon_cpu(bins: &Bins, o: &Options) -> Result<Outcome, ScenarioError> {
    let mut out = Outcome::new("daemon-cpu");
    let specs = [
        Spec::online("c1", "fixed:10"),
        Spec::online("c2", "fixed:10"),
        Spec::online("c3", "burst:10"),
        Spec::online("c4", "burst:10"),
        Spec::online("c5", "best-effort"),
        Spec::online("c6", "best-effort"),
        Spec::offline("c7", "best-effort"),
        Spec::offline("c8", "best-effort"),
    ];
    let phase = o.phase(10.0);
    o.say("eight busy containers under controld");
    let bed = Testbed::new(bins, &specs, true)?;
    let daemon = bed
        .daemon_pid()
        .ok_or_else(|| ScenarioError::Run("no daemon".into()))?;
    let seconds = format!("{}", phase.as_secs_f64() + 20.0);
    let mut procs = specs
        .iter()
        .map(|s| {
            bed.gpuload(
                s.name,
                &["train", "--kernel-ms", "1", "--seconds", &seconds],
            )
        })
        .collect::<Result<Vec<Proc>, _>>()?;
    // Offline containers are blocked while online ones run, so only the online ones are
    // sure to run kernels.
    let mut online: Vec<&mut Proc> = procs.iter_mut().take(6).collect();
    wait_running(&bed, &mut online, Duration::from_secs(20))?;
    std::thread::sleep(Duration::from_secs(1));
    let (cpu0, t0) = (cpu_ns(daemon).ok_or_else(no_cpu_time)?, Instant::now());
    std::thread::sleep(phase);
    let (cpu1, wall) = (cpu_ns(daemon).ok_or_else(no_cpu_time)?, t0.elapsed());
    for p in &mut procs {
        if !p.alive() {
            return Err(ScenarioError::Run(format!(
                "workload {} ended inside the measuring phase",
                p.pid()
            )));
        }
    }
    let share = (cpu1 - cpu0) as f64 / wall.as_nanos() as f64;
    out.set("cpu", share);
    // Without Tessera there is no daemon: nothing to compare.
    let base = if o.baseline {
        "no daemon".to_string()
    } else {
        String::new()
    };
    out.row(
        "controld CPU, 8 busy containers",
        "≤ 5 % of one core",
        format!(
            "{} of one core over {:.1} s",
            pct(share),
            wall.as_secs_f64()
        ),
        base,
        Some(share <= 0.05),
    );
    Ok(out)
}

/// Why the daemon's CPU time is missing.
fn no_cpu_time() -> ScenarioError {
    ScenarioError::Run("cannot read controld's CPU time".into())
}
