//! `controld run`: the daemon. It reads the config, adopts the regions in the state dir,
//! serves the control socket, runs the reaper and the compute scheduler; `SIGHUP` reloads
//! the config (a bad file is logged and the running config stays), `SIGTERM` and `SIGINT`
//! stop it, leaving every region — and so every running application's limits — in place.

use crate::config::{Config, ConfigError, DEFAULT_PATH};
use crate::shared::Core;
use crate::signals::BlockedSignals;
use crate::state::{State, StateError};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The state dir when neither `--state-dir`, `TESSERA_STATE_DIR` nor the config says.
pub const DEFAULT_STATE_DIR: &str = "/run/tessera";
/// The control socket's file name in the state dir.
pub const SOCKET_NAME: &str = "control.sock";
/// How often the watchdog looks where NVML is at hand (and at each status besides).
const WATCHDOG_PERIOD: Duration = Duration::from_millis(250);

/// How status names a container declaration the config asked for and the daemon refused.
const REFUSED: &str = "config refused";

/// Why a reload did not take effect, in whole or in part.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file could not be read; the running config stays in force.
    #[error("{0}")]
    Config(ConfigError),
    /// These containers' new declarations were refused; they stay as they were.
    #[error("config reload refused in part, those containers stay as they were: {}", .0.join("; "))]
    Refused(Vec<String>),
}

/// How `controld run` was asked to start.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--config`: must exist. Without it, [`DEFAULT_PATH`] is read if it exists.
    pub config: Option<PathBuf>,
    /// `--state-dir`: wins over `TESSERA_STATE_DIR` and the config.
    pub state_dir: Option<PathBuf>,
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The config file is bad.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The state dir is unusable.
    #[error("{0}")]
    State(#[from] StateError),
    /// The control socket could not be made.
    #[error("{0}")]
    Bind(#[from] crate::api::BindError),
    /// The metrics endpoint could not be served.
    #[error("{0}")]
    Metrics(String),
    /// A thread or signal could not be set up.
    #[error("cannot start the daemon: {0}")]
    Setup(std::io::Error),
}

/// The config file to read: `--config` (required to exist), else the default if present.
fn config_path(options: &Options) -> Option<PathBuf> {
    match &options.config {
        Some(path) => Some(path.clone()),
        None => Path::new(DEFAULT_PATH)
            .exists()
            .then(|| PathBuf::from(DEFAULT_PATH)),
    }
}

fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    match path {
        Some(path) => Config::load(path),
        None => Ok(Config::default()),
    }
}

/// The state dir: `--state-dir`, else `TESSERA_STATE_DIR`, else the config's, else the
/// default.
pub fn state_dir(flag: Option<&Path>, config: Option<&Config>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os(tessera_region::env::STATE_DIR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| config.and_then(|c| c.daemon.state_dir.clone()))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// The control socket: the config's, else `<state_dir>/control.sock`.
pub fn socket_path(state_dir: &Path, config: Option<&Config>) -> PathBuf {
    config
        .and_then(|c| c.daemon.socket.clone())
        .unwrap_or_else(|| state_dir.join(SOCKET_NAME))
}

/// A started daemon: its threads run until [`Daemon::stop`].
pub struct Daemon {
    core: Arc<Core>,
    config_path: Option<PathBuf>,
    config: Mutex<Config>,
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    metrics: Option<crate::metrics::MetricsServer>,
    scheduler: Option<crate::scheduler::Scheduler>,
}

impl Daemon {
    /// Reads the config, opens the state dir (adopting its regions), applies the config,
    /// binds the control socket and starts the compute scheduler, the reaper and the
    /// socket server.
    pub fn start(options: &Options) -> Result<Daemon, DaemonError> {
        let config_path = config_path(options);
        let config = load(config_path.as_deref())?;
        let dir = state_dir(options.state_dir.as_deref(), Some(&config));
        let socket = socket_path(&dir, Some(&config));
        // Before any region is mapped: a container that truncates its region file must not
        // kill the daemon with SIGBUS (see tessera_region::fault).
        tessera_region::fault::install().map_err(DaemonError::Setup)?;
        let (mut state, found) = State::open(&dir)?;
        for line in found {
            if line.starts_with("adopted") {
                tracing::info!("{line}");
            } else {
                tracing::error!("{line}");
            }
        }
        // The watchdog's NVML knows the node's GPUs: declarations are checked against them.
        let watchdog = crate::watchdog::Watchdog::new();
        if let Some(memory) = watchdog.device_memory() {
            state.set_devices(memory);
        }
        match watchdog.device_uuids() {
            Some(uuids) => state.set_device_uuids(uuids),
            // Said once at start: the one case where a container's cards are named by node
            // index, which a runtime that renumbers cards (NVIDIA's) does not keep.
            None => tracing::warn!(
                "no GPU UUIDs without NVML: containers find their GPUs by node index, which is \
                 right only where they see every GPU of the node"
            ),
        }
        let applied = state.apply_config(&config.containers, &[]);
        for line in applied.log {
            tracing::info!("{line}");
        }
        let mut config = config;
        for (name, line) in applied.refused {
            tracing::error!("{REFUSED}: {line}");
            state.note(format!("{REFUSED}: {line}"));
            // Not in force, so that the next reload tries it again.
            config.containers.retain(|c| c.name.as_str() != name);
        }
        let listener = crate::api::bind(&socket)?;
        // The node's priority board beside the regions; without one (a file in the way),
        // online work stops offline work through the preemption thread alone.
        let board_path = dir.join(tessera_region::BOARD_FILE);
        let board = match tessera_region::Board::create(&board_path) {
            Ok(board) => Some(board),
            Err(e) => {
                tracing::error!("{e}; online work stops offline work through controld alone");
                None
            }
        };
        // Settlement replays each GPU's time-slicing with its model's figures.
        let slicing = watchdog.device_slicing().unwrap_or_default();
        let scheduler = crate::scheduler::Scheduler::spawn(state.roster(), board, slicing)
            .map_err(DaemonError::Setup)?;
        let core = Arc::new(Core::new(state));
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads =
            vec![crate::reaper::spawn(core.clone(), stop.clone()).map_err(DaemonError::Setup)?];
        let (c, s) = (core.clone(), stop.clone());
        threads.push(
            std::thread::Builder::new()
                .name("control-accept".into())
                .spawn(move || crate::api::serve(listener, c, s))
                .map_err(DaemonError::Setup)?,
        );
        let settings = &config.daemon;
        let watchdog = watchdog
            .with_slack(
                settings
                    .enforce_slack
                    .map_or(crate::watchdog::DEFAULT_SLACK, |s| s.0),
            )
            .with_enforce(
                settings.enforce,
                settings
                    .enforce_grace_ms
                    .map_or(crate::watchdog::DEFAULT_GRACE, Duration::from_millis),
            );
        let has_nvml = watchdog.has_nvml();
        let watchdog = std::sync::Mutex::new(watchdog);
        core.add_status_enricher(Box::new(move |status| {
            watchdog
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .observe(status)
        }));
        if has_nvml {
            // A container over its cap is logged the moment it is, and `kill` acts on it,
            // whether anybody asks for status or not; one that ran past its compute grant is
            // held until it has paid it back.
            let (c, s) = (core.clone(), stop.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("watchdog".into())
                    .spawn(move || {
                        // Relaxed: a flag with no data behind it.
                        while !s.load(Ordering::Relaxed) {
                            let status = c.node_status();
                            c.with_state(|state| state.act_on_watchdog(&status));
                            std::thread::sleep(WATCHDOG_PERIOD);
                        }
                    })
                    .map_err(DaemonError::Setup)?,
            );
        }
        let metrics = match config.daemon.metrics {
            Some(addr) => {
                let c = core.clone();
                let server =
                    crate::metrics::MetricsServer::spawn(addr, Arc::new(move || c.node_status()))
                        .map_err(|e| DaemonError::Metrics(e.to_string()))?;
                tracing::info!("metrics on http://{}/metrics", server.local_addr());
                Some(server)
            }
            None => None,
        };
        tracing::info!(
            "controld running: state dir {}, socket {}, config {}",
            dir.display(),
            socket.display(),
            config_path
                .as_deref()
                .map_or("(none)".to_string(), |p| p.display().to_string())
        );
        Ok(Daemon {
            core,
            config_path,
            config: Mutex::new(config),
            socket,
            stop,
            threads,
            metrics,
            scheduler: Some(scheduler),
        })
    }

    /// The shared core, for the watchdog and metrics to plug into.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        self.config
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the config file again and applies it. A file that cannot be read leaves the
    /// running config in force; a container whose new declaration is refused stays as it
    /// was while the others change. Either is returned as an error (and shown in status
    /// until a reload succeeds).
    pub fn reload(&self) -> Result<(), ReloadError> {
        const FAILED: &str = "config reload failed";
        let mut config = self.config.lock().unwrap_or_else(|p| p.into_inner());
        let new = match load(self.config_path.as_deref()) {
            Ok(new) => new,
            Err(e) => {
                self.core.with_state(|s| {
                    s.forget(FAILED);
                    s.note(format!("{FAILED}, the previous config stays in force: {e}"));
                });
                return Err(ReloadError::Config(e));
            }
        };
        if new.daemon != config.daemon {
            tracing::warn!("[daemon] settings changed; they take effect when controld restarts");
        }
        let applied = self.core.with_state(|s| {
            s.forget(FAILED);
            s.forget(REFUSED);
            let applied = s.apply_config(&new.containers, &config.containers);
            for (_, line) in &applied.refused {
                s.note(format!("{REFUSED}: {line}"));
            }
            applied
        });
        for line in applied.log {
            tracing::info!("{line}");
        }
        // What is in force: a refused declaration is not, so the next reload tries it again.
        let mut in_force = new;
        in_force.containers = in_force
            .containers
            .into_iter()
            .filter_map(|spec| {
                if !applied.refused.iter().any(|(n, _)| n == spec.name.as_str()) {
                    return Some(spec);
                }
                config
                    .containers
                    .iter()
                    .find(|c| c.name == spec.name)
                    .cloned()
            })
            .collect();
        *config = in_force;
        if applied.refused.is_empty() {
            Ok(())
        } else {
            Err(ReloadError::Refused(
                applied.refused.into_iter().map(|(_, line)| line).collect(),
            ))
        }
    }

    /// Stops the threads and removes the socket; regions stay.
    pub fn stop(mut self) {
        drop(self.metrics.take());
        // Relaxed: a flag with no data behind it; the threads poll it.
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees the flag.
        let _ = std::os::unix::net::UnixStream::connect(&self.socket);
        let _ = std::fs::remove_file(&self.socket);
        for thread in self.threads {
            let _ = thread.join();
        }
        if let Some(scheduler) = self.scheduler.take() {
            scheduler.stop();
        }
    }
}

/// `controld run`: starts the daemon and serves signals until SIGTERM or SIGINT.
pub fn run(options: &Options) -> Result<(), DaemonError> {
    crate::logging::init("controld", tessera_region::env::LogLevel::Info);
    // SIGHUP, SIGTERM and SIGINT, blocked before any thread starts, so that every thread
    // inherits the mask, and taken here.
    let signals = BlockedSignals::block(&[Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT])
        .map_err(DaemonError::Setup)?;
    let daemon = Daemon::start(options)?;
    loop {
        match signals.wait() {
            libc::SIGHUP => match daemon.reload() {
                Ok(()) => tracing::info!("config reloaded"),
                Err(ReloadError::Config(e)) => {
                    tracing::error!("config reload failed, the previous config stays in force: {e}")
                }
                Err(e @ ReloadError::Refused(_)) => tracing::error!("{e}"),
            },
            libc::SIGTERM | libc::SIGINT => {
                tracing::info!("stopping; regions stay in place, applications keep their limits");
                daemon.stop();
                return Ok(());
            }
            _ => {}
        }
    }
}
