//! One run of the demo: the daemon in this process, the workloads started one at a time, the
//! view redrawn while they run, the summary, and everything cleaned up after.

use crate::backend::{self, Backend, Workdir};
use crate::error::DemoError;
use crate::measure::Meter;
use crate::plan::PLANS;
use crate::view;
use crate::workload::{Fleet, Kind, Setting};
use nix::sys::signal::Signal;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use tessera_controld::signals::BlockedSignals;

/// How the demo was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long the workloads run.
    pub seconds: u32,
    /// Print only the start and the summary.
    pub live: bool,
    /// Use simgpu even where a GPU is present.
    pub force_simgpu: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seconds: DEFAULT_SECONDS,
            live: true,
            force_simgpu: false,
        }
    }
}

/// How long the demo runs unless told.
pub const DEFAULT_SECONDS: u32 = 15;

/// How often the live view is redrawn.
const TICK: Duration = Duration::from_millis(500);
/// How often a plain line is printed when the output is not a terminal.
const LINE: Duration = Duration::from_secs(1);
/// How long one process may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the workloads are checked on.
const POLL: Duration = Duration::from_millis(50);
/// How long the workloads may overrun their own duration before they are stopped.
const GRACE: Duration = Duration::from_secs(20);

/// Runs the demo; returns the exit status (0, 1 when a workload failed, 128 + N when signal
/// N stopped it).
pub fn run(options: &Options) -> Result<i32, DemoError> {
    let seconds = options.seconds.max(1);
    // Blocked first, so that every thread started later inherits the mask and a signal
    // reaches only the wait below; restored last, once everything is cleaned up.
    let signals = BlockedSignals::block(&[Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP])
        .map_err(|e| DemoError::Setup(e.to_string()))?;
    // The daemon's routine lines would only interrupt the view; warnings still show.
    tessera_controld::logging::init("controld", tessera_region::env::LogLevel::Warn);
    let user_log = std::env::var_os(tessera_region::env::LOG);
    let backend = Backend::detect(options.force_simgpu);
    let programs = backend::Programs::find(&backend)?;
    let workdir = Workdir::create()?;
    let gpu = backend.prepare(&workdir, &programs)?;
    let daemon = tessera_controld::daemon::Daemon::start(&tessera_controld::daemon::Options {
        config: Some(workdir.write_config()?),
        state_dir: Some(workdir.state_dir()),
    })?;

    let mut out = std::io::stdout().lock();
    let terminal = options.live && std::io::stdout().is_terminal();
    let _ = write!(out, "{}", view::intro(&gpu.label, seconds));
    let _ = out.flush();

    let mut fleet = Fleet::new(user_log);
    let mut meter = Meter::new(&gpu);
    let setting = Setting {
        gpu: &gpu,
        programs: &programs,
        workdir: &workdir,
        seconds,
    };
    let launched = start(&mut fleet, &daemon, &signals, &setting);
    let mut stopped_by = launched.as_ref().ok().copied().flatten();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::from(seconds)) + GRACE;
    let mut next_view = started + if terminal { TICK } else { LINE };
    let mut drawn = 0;
    while launched.is_ok() && stopped_by.is_none() {
        if let Some(sig) = signals.wait_timeout(POLL) {
            stopped_by = Some(sig);
            break;
        }
        fleet.poll();
        meter.sample_gpu(&fleet, &gpu);
        if fleet.workloads_done() || fleet.failed() || Instant::now() >= deadline {
            break;
        }
        if Instant::now() < next_view {
            continue;
        }
        meter.sample_status(&daemon.core().node_status(), &fleet);
        let elapsed = started.elapsed();
        if terminal {
            next_view += TICK;
            drawn = view::redraw(&mut out, drawn, &view::live(&meter, elapsed, seconds));
        } else if options.live {
            next_view += LINE;
            let _ = writeln!(out, "{}", view::line(&meter, elapsed));
        } else {
            next_view += TICK;
        }
    }
    meter.sample_status(&daemon.core().node_status(), &fleet);
    meter.sample_gpu(&fleet, &gpu);
    meter.finish();
    fleet.stop_all();
    let results = fleet.results();
    let failures = fleet.failures();
    drop(fleet);
    daemon.stop();
    if drawn > 0 || (options.live && !terminal) {
        let _ = writeln!(out);
    }
    let _ = write!(out, "{}", view::summary(&meter, &results));
    let _ = out.flush();
    drop(out);
    drop(gpu);
    drop(workdir);
    launched?;
    if let Some(sig) = stopped_by {
        eprintln!("tessera-demo: the demo was stopped by signal {sig}; everything it started is stopped and removed");
        return Ok(128 + sig);
    }
    if let Some(first) = failures.first() {
        eprintln!("tessera-demo: {first}");
        return Ok(1);
    }
    Ok(0)
}

/// Starts the processes one at a time, each once the one before holds its memory: a
/// context's memory is measured as the device's growth while it is made, so it must not
/// overlap another process's allocations. The memory holders go first, then the workloads,
/// so that these start together. Returns the signal that stopped it, if one did.
fn start(
    fleet: &mut Fleet,
    daemon: &tessera_controld::daemon::Daemon,
    signals: &BlockedSignals,
    setting: &Setting<'_>,
) -> Result<Option<i32>, DemoError> {
    for kind in [Kind::Holder, Kind::Work] {
        for plan in &PLANS {
            let region = daemon
                .core()
                .with_state(|s| s.info(plan.name))
                .map(|info| info.region)
                .ok_or_else(|| {
                    DemoError::Setup(format!("the daemon has no container {}", plan.name))
                })?;
            let pid = fleet.launch(plan, kind, &region, setting)?;
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if let Some(sig) = signals.wait_timeout(POLL) {
                    return Ok(Some(sig));
                }
                fleet.poll();
                let ready = match kind {
                    Kind::Holder => fleet.reported(pid),
                    Kind::Work => daemon.core().with_state(|s| counted(s, plan.name, pid)),
                };
                if ready || fleet.exited(pid) {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(DemoError::Setup(format!(
                        "gpuload of {} did not start in {} s; see whether `gpuload info` runs",
                        plan.name,
                        START_TIMEOUT.as_secs()
                    )));
                }
            }
        }
    }
    Ok(None)
}

/// Whether process `pid` of container `name` has its memory (its context) counted.
fn counted(state: &tessera_controld::state::State, name: &str, pid: u32) -> bool {
    state
        .node_status()
        .containers
        .iter()
        .filter(|c| c.name == name)
        .flat_map(|c| &c.processes)
        .any(|p| p.pid == pid && p.memory.first().is_some_and(|&m| m > 0))
}
