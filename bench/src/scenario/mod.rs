//! The isolation scenarios: `gpuload` workloads in containers under `controld` on a
//! simulated node, measured from ground truth — the busy time simgpu's engine charged to each
//! process, the device memory it holds, `gpuload infer`'s latencies, the preemption stamps in
//! the containers' regions and the daemon's CPU time — and each also run without Tessera
//! (plain time-slicing, no preload, no daemon, no caps) as the baseline.
//!
//! Each scenario returns an [`Outcome`]: rows for the table (check, target, measured,
//! baseline, pass), named figures for tests, which judge them with their own tolerances, and
//! charts for the report. The report ([`report`]) puts them together with the hook costs
//! ([`hook_costs`]) into `bench/RESULTS.md` and its plots.

mod error;
pub mod hook_costs;
mod measure;
mod memory;
mod overhead;
pub mod plot;
mod priority;
pub mod report;
mod shapes;
mod shares;
mod testbed;

pub use error::ScenarioError;
pub use measure::{cpu_ns, percentile, Sample, Sampler, Trace};
pub use report::{
    commit, machine, render_markdown, render_table, span, today, write_report, HookFigures, Report,
    RunInfo, REPORT_COMMAND,
};
pub use testbed::{Bins, Proc, Spec, Testbed, DEVICE};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How to run the scenarios.
#[derive(Debug, Clone)]
pub struct Options {
    /// The length of each scenario's main measuring phase in seconds; `None` for the
    /// scenario's own (like 10 s).
    pub seconds: Option<f64>,
    /// Also run without Tessera, for the baseline column.
    pub baseline: bool,
    /// Progress lines on stderr.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seconds: None,
            baseline: true,
            verbose: false,
        }
    }
}

impl Options {
    /// The main phase: `seconds` if given, else `default`.
    pub fn phase(&self, default: f64) -> Duration {
        Duration::from_secs_f64(self.seconds.unwrap_or(default).max(0.5))
    }

    fn say(&self, what: &str) {
        if self.verbose {
            eprintln!("  {what}");
        }
    }
}

/// One line of a scenario's table.
#[derive(Debug, Clone)]
pub struct Row {
    /// What is checked.
    pub check: String,
    /// The target.
    pub target: String,
    /// What was measured with Tessera.
    pub measured: String,
    /// The same without Tessera; empty when not run or not meaningful.
    pub baseline: String,
    /// Whether the target was met; `None` for a figure shown for information.
    pub pass: Option<bool>,
}

/// What one scenario measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The scenario's name.
    pub name: &'static str,
    /// Its rows.
    pub rows: Vec<Row>,
    /// Its figures by name (shares 0–1, times in ms), for tests.
    pub figures: BTreeMap<String, f64>,
    /// Remarks for people (what could not be measured, and why).
    pub notes: Vec<String>,
    /// What the report plots of it: shares or memory over time, latency distributions.
    pub charts: Vec<plot::Chart>,
    /// How long the scenario took.
    pub wall: Duration,
}

impl Outcome {
    fn new(name: &'static str) -> Outcome {
        Outcome {
            name,
            rows: Vec::new(),
            figures: BTreeMap::new(),
            notes: Vec::new(),
            charts: Vec::new(),
            wall: Duration::ZERO,
        }
    }

    fn row(
        &mut self,
        check: &str,
        target: &str,
        measured: String,
        baseline: String,
        pass: Option<bool>,
    ) {
        self.rows.push(Row {
            check: check.to_string(),
            target: target.to_string(),
            measured,
            baseline,
            pass,
        });
    }

    fn set(&mut self, name: &str, value: f64) {
        self.figures.insert(name.to_string(), value);
    }

    /// A figure by name; panics naming the ones there are (for tests).
    pub fn figure(&self, name: &str) -> f64 {
        match self.figures.get(name) {
            Some(v) => *v,
            None => panic!(
                "scenario {} has no figure {name}; it has {:?}",
                self.name,
                self.figures.keys().collect::<Vec<_>>()
            ),
        }
    }

    /// Whether every checked row passed.
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.pass != Some(false))
    }
}

/// A scenario of the runner.
pub struct Scenario {
    /// Its name on the command line.
    pub name: &'static str,
    /// Its number in the table.
    pub item: u32,
    /// One line about it.
    pub about: &'static str,
    run: fn(&Bins, &Options) -> Result<Outcome, ScenarioError>,
}

/// Every scenario, in the table's order.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "fixed-alone",
        item: 1,
        about: "fixed:30 alone and saturating: 30 ± 2 % in every 1 s window over 10 s",
        run: shares::fixed_alone,
    },
    Scenario {
        name: "mixed",
        item: 2,
        about: "fixed:20 + burst:30 + best-effort, all saturating: 20 / 55 / 25 ± 3 %",
        run: shares::mixed,
    },
    Scenario {
        name: "burst-join",
        item: 3,
        about: "burst:30 alone ≥ 95 %; a fixed:50 joins: burst down within 10 ms, fixed 50 ± 3 %",
        run: shares::burst_join,
    },
    Scenario {
        name: "best-effort",
        item: 4,
        about: "four best-effort containers: 25 ± 3 % each",
        run: shares::best_effort,
    },
    Scenario {
        name: "online-offline",
        item: 5,
        about: "online infer beside offline train: p99 ≤ 1.10 × solo, offline uses ≥ 80 % of the idle time; and 2 ms requests",
        run: priority::online_offline,
    },
    Scenario {
        name: "preemption",
        item: 6,
        about: "from an online launch to the offline container issuing nothing new: p99 ≤ 100 µs",
        run: priority::preemption,
    },
    Scenario {
        name: "long-kernels",
        item: 7,
        about: "50 ms kernels under fixed:30: long-run share 30 ± 3 %",
        run: shares::long_kernels,
    },
    Scenario {
        name: "overhead",
        item: 8,
        about: "20 µs kernels with no compute limit (the launch fast path): throughput within 1 % of no preload; alone under controld (metered): reported",
        run: overhead::unlimited_throughput,
    },
    Scenario {
        name: "daemon-cpu",
        item: 9,
        about: "controld uses ≤ 5 % of one core with 8 busy containers",
        run: overhead::daemon_cpu,
    },
    Scenario {
        name: "memory-caps",
        item: 10,
        about: "caps of 2, 3 and 4 GiB (more where a context is 512 MiB or more), asked for 120 % of what two contexts leave in two steps: peak ≤ cap, the rest refused, the cap free again after",
        run: memory::memory_caps,
    },
    Scenario {
        name: "shapes",
        item: 11,
        about: "fixed:30 alone, deep-queueing shapes (null stream with 1 ms, 20 µs and 50 ms kernels, 4 streams, a graph, per-thread stream, 4 threads): 30 ± 2 % in every 1 s window; controld's measure within 1 point",
        run: shapes::fixed_shapes,
    },
    Scenario {
        name: "mixed-deep",
        item: 12,
        about: "deep-queueing containers: fixed:20 + burst:30 + best-effort 20 / 55 / 25 ± 3 %; fixed:30 + fixed:70 30 / 70 ± 2 %",
        run: shapes::mixed_deep,
    },
    Scenario {
        name: "demo-mix",
        item: 13,
        about: "the demo's mix, background queueing deep: online burst:50 service p99 ≤ 1.10 × alone; offline fixed:20 job 20 ± 2 %",
        run: priority::demo_mix,
    },
    Scenario {
        name: "busy-host",
        item: 14,
        about: "with two threads keeping two cores busy: fixed:30 queueing deep, the deep mix and the demo's mix within ± 3 points; controld's measure within 1 point",
        run: shapes::busy_host,
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// Runs one scenario.
pub fn run(scenario: &Scenario, bins: &Bins, options: &Options) -> Result<Outcome, ScenarioError> {
    let start = Instant::now();
    let mut outcome = (scenario.run)(bins, options)?;
    outcome.wall = start.elapsed();
    Ok(outcome)
}

/// Runs the scenario called `name`.
pub fn run_named(name: &str, bins: &Bins, options: &Options) -> Result<Outcome, ScenarioError> {
    let scenario = find(name).ok_or_else(|| ScenarioError::Setup(format!("no scenario {name}")))?;
    run(scenario, bins, options)
}

/// A share as a percentage with one decimal.
fn pct(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

/// Milliseconds with two decimals.
fn ms(v: f64) -> String {
    format!("{v:.2} ms")
}

/// Waits until every process of `procs` has had GPU time ([`Testbed::has_run`]); fails if
/// one exits first or `timeout` passes.
fn wait_running(
    bed: &Testbed,
    procs: &mut [&mut Proc],
    timeout: Duration,
) -> Result<(), ScenarioError> {
    bed.wait_running(procs, timeout)
}

/// Saturating `gpuload train` processes, one per container, measured together.
struct TrainRun {
    /// The busy-time readings.
    trace: Trace,
    /// Each container's pid.
    pids: Vec<u32>,
    /// The measuring phase on the node clock.
    from_ns: u64,
    to_ns: u64,
    /// With Tessera: each container's target and measured share as `controld status`
    /// showed them at the end of the phase (`None` where it showed none).
    daemon_view: Vec<(Option<f64>, Option<f64>)>,
    /// When the second that the measured shares cover ended (node clock), by status.
    daemon_until_ns: Option<u64>,
}

impl TrainRun {
    /// Container `i`'s share over the whole measuring phase.
    fn share(&self, i: usize) -> f64 {
        let t = &self.trace;
        t.share(&[self.pids[i]], t.at(self.from_ns), t.at(self.to_ns))
    }

    /// The GPU's time all containers held together over the measuring phase.
    fn total_share(&self) -> f64 {
        let t = &self.trace;
        t.share(&self.pids, t.at(self.from_ns), t.at(self.to_ns))
    }

    /// The work container `i` got done over the whole measuring phase, per ns of wall time
    /// (see [`measure::Trace::work_rate`]).
    fn work_rate(&self, i: usize) -> f64 {
        let t = &self.trace;
        t.work_rate(&[self.pids[i]], t.at(self.from_ns), t.at(self.to_ns))
    }

    /// What the daemon said, as a note: `name target/measured` per container.
    fn daemon_note(&self, specs: &[Spec]) -> Option<String> {
        if self.daemon_view.is_empty() {
            return None;
        }
        let show = |v: Option<f64>| v.map_or("—".to_string(), pct);
        let parts: Vec<String> = specs
            .iter()
            .zip(&self.daemon_view)
            .map(|(s, (t, m))| format!("{} {} / {}", s.name, show(*t), show(*m)))
            .collect();
        Some(format!(
            "controld status at the end (target / measured): {}",
            parts.join(", ")
        ))
    }

    /// Container `i`'s shares over consecutive windows of the phase.
    fn windows(&self, i: usize, window: Duration) -> Vec<f64> {
        let w = window.as_nanos() as u64;
        let mut v = self.trace.windows(&[self.pids[i]], self.from_ns, w);
        v.truncate(((self.to_ns - self.from_ns) / w) as usize);
        v
    }
}

/// A saturating `gpuload` workload: its mode and options, less `--seconds`.
#[derive(Debug, Clone)]
pub struct Workload(pub Vec<String>);

impl Workload {
    /// `gpuload train --kernel-ms <kernel_ms>`: a few kernels in flight, a wait per launch.
    pub fn train(kernel_ms: f64) -> Workload {
        Workload::of(&["train", "--kernel-ms", &format!("{kernel_ms}")])
    }

    /// A deep-queueing shape of `gpuload` (`queue`, `streams`, `graph`, `ptsz`, `threads`),
    /// `count` streams, graph kernels or threads, in rounds of about a second of kernels of
    /// `kernel_ms` before each synchronization.
    pub fn deep(mode: &str, count: usize, kernel_ms: f64) -> Workload {
        let depth = ((1000.0 / kernel_ms) as usize).clamp(count.max(1), 5000);
        Workload::of(&[
            mode,
            "--kernel-ms",
            &format!("{kernel_ms}"),
            "--depth",
            &depth.to_string(),
        ])
        .with_count(mode, count)
    }

    fn with_count(mut self, mode: &str, count: usize) -> Workload {
        if matches!(mode, "streams" | "graph" | "threads") {
            self.0.extend(["--count".to_string(), count.to_string()]);
        }
        self
    }

    fn of(args: &[&str]) -> Workload {
        Workload(args.iter().map(|a| a.to_string()).collect())
    }
}

/// Runs `workload` in each of `specs`' containers, waits until all run, lets them settle for
/// `warmup`, then measures for `phase` sampling every `period`.
fn train_together(
    bins: &Bins,
    specs: &[Spec],
    tessera: bool,
    workload: &Workload,
    warmup: Duration,
    phase: Duration,
    period: Duration,
) -> Result<TrainRun, ScenarioError> {
    let bed = Testbed::new(bins, specs, tessera)?;
    let seconds = format!("{}", (warmup + phase).as_secs_f64() + 15.0);
    let mut args: Vec<&str> = workload.0.iter().map(String::as_str).collect();
    args.extend(["--seconds", &seconds]);
    let mut procs = specs
        .iter()
        .map(|s| bed.gpuload(s.name, &args))
        .collect::<Result<Vec<_>, _>>()?;
    let sampler = Sampler::start(bed.node_state(), period)?;
    wait_running(
        &bed,
        &mut procs.iter_mut().collect::<Vec<_>>(),
        Duration::from_secs(15),
    )?;
    std::thread::sleep(warmup);
    let from_ns = simgpu::clock::now_ns();
    std::thread::sleep(phase);
    let to_ns = simgpu::clock::now_ns();
    let (daemon_view, daemon_until_ns) = if tessera {
        let status = bed.status()?;
        let devices: Vec<serde_json::Value> = specs
            .iter()
            .map(|s| {
                status["containers"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["name"] == s.name))
                    .map(|c| c["devices"][0].clone())
                    .unwrap_or_default()
            })
            .collect();
        let view = devices
            .iter()
            .map(|dev| (dev["share_target"].as_f64(), dev["share_measured"].as_f64()))
            .collect();
        let until = devices
            .iter()
            .filter_map(|dev| dev["share_measured_until_ns"].as_u64())
            .min();
        (view, until)
    } else {
        (Vec::new(), None)
    };
    // One more period, so a sample lies at or after the end.
    std::thread::sleep(period * 2);
    let trace = sampler.stop()?;
    for p in &mut procs {
        if !p.alive() {
            return Err(ScenarioError::Run(format!(
                "workload {} ended inside the measuring phase",
                p.pid()
            )));
        }
    }
    Ok(TrainRun {
        trace,
        pids: procs.iter().map(Proc::pid).collect(),
        from_ns,
        to_ns,
        daemon_view,
        daemon_until_ns,
    })
}
