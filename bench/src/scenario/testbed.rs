//! A scenario's world: the built programs, a GPU, and (with Tessera) a `controld` on a state
//! dir of its own whose config declares the scenario's containers. Workloads are `gpuload`
//! processes started the way `controld exec` starts a command in a container
//! (`LD_PRELOAD=libtessera.so`, `TESSERA_REGION=<the container's region>`), or plainly, with
//! no preload and no daemon, for the baseline.
//!
//! The GPU is a private simulated node by default. With `TESSERA_BENCH_DRIVER=system` it is
//! whatever `libcuda.so.1` the environment resolves (a real GPU and its driver): nothing of
//! simgpu is put on the programs' paths, and the ground truth is the progress each workload
//! publishes (see [`crate::gpuload::Progress`]) instead of the node's busy time.

use super::error::ScenarioError;
use serde_json::Value;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_region::Region;

/// The simulated device every scenario runs on.
pub const DEVICE: &str = "H200";

/// The environment variable that picks the [`Backend`]: `simgpu` (the default) or `system`.
pub const BACKEND_ENV: &str = "TESSERA_BENCH_DRIVER";

/// The GPU the scenarios run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A private simgpu node per scenario run, measured from the node's busy time.
    Simgpu,
    /// The driver the environment resolves (`libcuda.so.1` on the library path), shared by
    /// every run, measured from the workloads' published progress.
    System,
}

impl Backend {
    /// The backend [`BACKEND_ENV`] names.
    pub fn from_env() -> Result<Backend, ScenarioError> {
        match std::env::var(BACKEND_ENV).as_deref() {
            Err(_) | Ok("" | "simgpu") => Ok(Backend::Simgpu),
            Ok("system") => Ok(Backend::System),
            Ok(other) => Err(ScenarioError::Setup(format!(
                "{BACKEND_ENV}={other}: expected `simgpu` or `system`"
            ))),
        }
    }
}

/// The programs a scenario runs, all from one cargo profile directory.
#[derive(Debug, Clone)]
pub struct Bins {
    /// The profile directory (`target/release`).
    pub dir: PathBuf,
    /// `controld`.
    pub controld: PathBuf,
    /// `gpuload`.
    pub gpuload: PathBuf,
    /// `libtessera.so`.
    pub libtessera: PathBuf,
    /// What `simgpu lib-dir` prints: the simulated `libcuda.so.1` and `libnvidia-ml.so.1`;
    /// `None` on the system's driver, which needs nothing of simgpu.
    pub lib_dir: Option<PathBuf>,
    /// The GPU the workloads use ([`BACKEND_ENV`] when found).
    pub backend: Backend,
}

impl Bins {
    /// Finds the programs in `dir`. Builds nothing: a missing one is an error that names the
    /// `cargo build` command which makes it. simgpu's programs are needed only to run on
    /// simgpu: on the system's driver ([`BACKEND_ENV`]`=system`) a folder of `controld`,
    /// `gpuload` and `libtessera.so` is enough.
    pub fn find(dir: &Path) -> Result<Bins, ScenarioError> {
        let backend = Backend::from_env()?;
        let profile = match dir.file_name().and_then(OsStr::to_str) {
            Some("debug") => String::new(),
            Some("release") => " --release".to_string(),
            Some(other) => format!(" --profile {other}"),
            None => String::new(),
        };
        let simgpu_packages = match backend {
            Backend::Simgpu => " -p simgpu -p simgpu-cuda -p simgpu-nvml",
            Backend::System => "",
        };
        let build = format!(
            "cargo build{profile} -p tessera-controld -p tessera-bench -p tessera-intercept{simgpu_packages}"
        );
        let want = |name: &str| {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(ScenarioError::Setup(format!(
                    "{} is missing; build it first: {build}",
                    path.display()
                )))
            }
        };
        let controld = want("controld")?;
        let gpuload = want("gpuload")?;
        let libtessera = want("libtessera.so")?;
        let lib_dir = match backend {
            Backend::Simgpu => Some(simgpu_lib_dir(&want("simgpu")?, &build)?),
            Backend::System => None,
        };
        Ok(Bins {
            dir: dir.to_path_buf(),
            controld,
            gpuload,
            libtessera,
            lib_dir,
            backend,
        })
    }

    /// The programs beside the running executable (`cargo run --release` puts the runner in
    /// `target/release`).
    pub fn beside_current_exe() -> Result<Bins, ScenarioError> {
        let exe = std::env::current_exe().map_err(ScenarioError::start("find this program"))?;
        let dir = exe
            .parent()
            .ok_or_else(|| ScenarioError::Setup(format!("{} has no directory", exe.display())))?;
        Bins::find(dir)
    }
}

/// The folder of simgpu's libraries, as `simgpu lib-dir` prints it; `build` is the command
/// that makes them.
fn simgpu_lib_dir(simgpu: &Path, build: &str) -> Result<PathBuf, ScenarioError> {
    let out = Command::new(simgpu)
        .arg("lib-dir")
        .stdin(Stdio::null())
        .output()
        .map_err(ScenarioError::start(format!(
            "run {} lib-dir",
            simgpu.display()
        )))?;
    if !out.status.success() {
        return Err(ScenarioError::Program {
            what: format!("{} lib-dir", simgpu.display()),
            outcome: format!("failed ({})", out.status),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let lib_dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !lib_dir.join("libcuda.so.1").exists() {
        return Err(ScenarioError::Setup(format!(
            "{} has no libcuda.so.1; build it first: {build}",
            lib_dir.display()
        )));
    }
    Ok(lib_dir)
}

/// A container as the config declares it.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its name (and region file `<name>.region`).
    pub name: &'static str,
    /// `fixed:Q`, `burst:Q` or `best-effort`.
    pub compute: &'static str,
    /// `online` or `offline`.
    pub priority: &'static str,
}

impl Spec {
    /// An online container.
    pub const fn online(name: &'static str, compute: &'static str) -> Spec {
        Spec {
            name,
            compute,
            priority: "online",
        }
    }

    /// An offline container.
    pub const fn offline(name: &'static str, compute: &'static str) -> Spec {
        Spec {
            name,
            compute,
            priority: "offline",
        }
    }
}

/// A fresh directory under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, ScenarioError> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tessera-scenario-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(ScenarioError::file("create", &dir))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process, killed (SIGKILL) and reaped when dropped; its stdout and stderr are
/// collected on helper threads so that it never blocks on a full pipe.
pub struct Proc {
    child: Option<Child>,
    what: String,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
    let mut pipe = pipe?;
    Some(std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    }))
}

impl Proc {
    /// Starts `cmd` with stdout and stderr captured. The child is killed if this thread
    /// ends first (`PR_SET_PDEATHSIG`), so an interrupted run leaves nothing behind.
    pub fn spawn(cmd: &mut Command, what: &str) -> Result<Proc, ScenarioError> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the closure runs in the forked child before exec and calls only prctl,
        // which is async-signal-safe; it touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(ScenarioError::start(format!("start {what}")))?;
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        Ok(Proc {
            child: Some(child),
            what: what.to_string(),
            stdout,
            stderr,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Sends a signal (no-op once reaped).
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill on our own child, not yet reaped, so its pid is still ours.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }

    /// Waits up to `timeout` for it to exit by itself (killing it past that) and returns
    /// the JSON report on the last line of its stdout.
    pub fn finish(mut self, timeout: Duration) -> Result<Value, ScenarioError> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| ScenarioError::Run(format!("{} already finished", self.what)))?;
        let what = self.what.clone();
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(ScenarioError::Program {
                        what,
                        outcome: format!("ran past {timeout:?} and was killed"),
                        stderr: self.stderr_text(),
                    });
                }
            }
        };
        let out = self
            .stdout
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&out);
        if !status.success() {
            return Err(ScenarioError::Program {
                what,
                outcome: format!("failed ({status})"),
                stderr: self.stderr_text(),
            });
        }
        let line = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        serde_json::from_str(line).map_err(|source| ScenarioError::Report {
            what,
            source,
            stdout: text.to_string(),
            stderr: self.stderr_text(),
        })
    }

    fn stderr_text(&mut self) -> String {
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        String::from_utf8_lossy(&err).into_owned()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One scenario run: a node, and with Tessera a daemon managing the containers.
pub struct Testbed {
    bins: Bins,
    dir: TempDir,
    node_state: PathBuf,
    /// On the system's driver: where the workloads publish their progress.
    progress: Option<PathBuf>,
    /// The simulated node; `None` on the system's driver.
    node: Option<simgpu::node::Node>,
    specs: Vec<Spec>,
    daemon: Option<Proc>,
}

impl Testbed {
    /// A fresh node with one [`DEVICE`] (on the system's driver, a directory for the
    /// workloads' progress instead, and no node); with
    /// `tessera`, a `controld run` whose config declares `specs`, started and answering.
    pub fn new(bins: &Bins, specs: &[Spec], tessera: bool) -> Result<Testbed, ScenarioError> {
        let dir = TempDir::new()?;
        let progress = match bins.backend {
            Backend::Simgpu => None,
            Backend::System => {
                let p = dir.0.join("progress");
                std::fs::create_dir(&p).map_err(ScenarioError::file("create", &p))?;
                Some(p)
            }
        };
        let node_state = dir.0.join("simgpu.state");
        let node = match bins.backend {
            Backend::Simgpu => {
                let devices = simgpu::device::parse_devices(DEVICE)?;
                let config = simgpu::config::NodeConfig::from_env(&devices)
                    .map_err(simgpu::node::NodeError::from)?;
                Some(simgpu::node::Node::open_or_create(
                    &node_state,
                    &devices,
                    &config,
                )?)
            }
            Backend::System => None,
        };
        let mut bed = Testbed {
            bins: bins.clone(),
            dir,
            node_state,
            progress,
            node,
            specs: specs.to_vec(),
            daemon: None,
        };
        if tessera {
            bed.start_daemon()?;
        }
        Ok(bed)
    }

    /// Whether a daemon manages the containers (the Tessera side of a scenario).
    pub fn tessera(&self) -> bool {
        self.daemon.is_some()
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.0.join("state")
    }

    /// A container's region file.
    pub fn region_path(&self, name: &str) -> PathBuf {
        self.state_dir().join(format!("{name}.region"))
    }

    /// A container's region, mapped (Tessera side only).
    pub fn region(&self, name: &str) -> Result<Region, ScenarioError> {
        let path = self.region_path(name);
        Region::open(&path).map_err(|source| ScenarioError::Region { path, source })
    }

    /// The testbed's own directory (removed with it).
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// The ground truth a [`super::Sampler`] reads: on simgpu the node's state file
    /// (`SIMGPU_STATE`), on the system's driver the workloads' progress directory.
    pub fn node_state(&self) -> &Path {
        self.progress.as_deref().unwrap_or(&self.node_state)
    }

    /// The simulated node, for ground truth on simgpu; `None` on the system's driver (see
    /// [`Testbed::has_run`]).
    pub fn node(&self) -> Option<&simgpu::node::Node> {
        self.node.as_ref()
    }

    /// The GPU the workloads use.
    pub fn backend(&self) -> Backend {
        self.bins.backend
    }

    /// Whether process `pid` has had GPU time: on simgpu the node charged it busy time; on
    /// the system's driver it published a completed kernel.
    pub fn has_run(&self, pid: u32) -> bool {
        match &self.progress {
            None => self.node.as_ref().is_some_and(|node| {
                node.snapshot()
                    .processes
                    .iter()
                    .any(|s| s.pid == pid && s.devices.first().is_some_and(|d| d.busy_ns > 0))
            }),
            Some(dir) => crate::gpuload::Progress::open(&crate::gpuload::Progress::path(dir, pid))
                .is_ok_and(|p| p.busy_ns() > 0),
        }
    }

    /// Waits until every process of `procs` has had GPU time ([`Testbed::has_run`]); fails
    /// if one exits first or `timeout` passes.
    pub fn wait_running(
        &self,
        procs: &mut [&mut Proc],
        timeout: Duration,
    ) -> Result<(), ScenarioError> {
        let start = Instant::now();
        loop {
            if procs.iter().all(|p| self.has_run(p.pid())) {
                return Ok(());
            }
            for p in procs.iter_mut() {
                if !p.alive() {
                    return Err(ScenarioError::Run(format!(
                        "process {} ended before it ran a kernel",
                        p.pid()
                    )));
                }
            }
            if start.elapsed() > timeout {
                return Err(ScenarioError::Run(format!(
                    "the workloads did not all run a kernel within {timeout:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The daemon's pid.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Proc::pid)
    }

    /// A command on this node: simgpu's libraries on the library path, this node's state,
    /// and nothing of `SIMGPU_*`, `TESSERA_*` or `LD_PRELOAD` inherited. On the system's
    /// driver: the library path and `SIMGPU_*` as inherited (they pick the driver), and
    /// where to publish progress.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        let system = self.progress.is_some();
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy();
            // The settings the node was made with stay: a process with others would rebuild
            // it (or be refused it).
            let node_setting = [
                simgpu::config::ENV_PROFILE,
                simgpu::config::ENV_QUANTUM_US,
                simgpu::config::ENV_CONTEXT_MEMORY,
                simgpu::config::ENV_KERNEL_NS,
            ]
            .contains(&&*k);
            if (k.starts_with("SIMGPU_") && !system && !node_setting) || k.starts_with("TESSERA_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env_remove("LD_PRELOAD");
        if let Some(dir) = &self.progress {
            cmd.env(crate::gpuload::PROGRESS_DIR_ENV, dir);
            return cmd;
        }
        let Some(lib_dir) = &self.bins.lib_dir else {
            return cmd;
        };
        let mut path = lib_dir.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
            path.push(":");
            path.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", path)
            .env("SIMGPU_STATE", &self.node_state)
            .env("SIMGPU_DEVICES", DEVICE);
        cmd
    }

    fn config_text(&self) -> String {
        let mut text = String::new();
        for s in &self.specs {
            text += &format!(
                "[[container]]\nname = \"{}\"\ngpus = [0]\ncompute = \"{}\"\npriority = \"{}\"\n\n",
                s.name, s.compute, s.priority
            );
        }
        text
    }

    fn ctl(&self, args: &[&str]) -> Result<std::process::Output, ScenarioError> {
        let mut cmd = self.command(&self.bins.controld);
        cmd.args(args)
            .arg("--state-dir")
            .arg(self.state_dir())
            .stdin(Stdio::null());
        cmd.output()
            .map_err(ScenarioError::start(format!("run controld {args:?}")))
    }

    /// `controld status --json`.
    pub fn status(&self) -> Result<Value, ScenarioError> {
        let out = self.ctl(&["status", "--json"])?;
        if !out.status.success() {
            return Err(ScenarioError::Program {
                what: "controld status".into(),
                outcome: format!("failed ({})", out.status),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        serde_json::from_slice(&out.stdout).map_err(|source| ScenarioError::Report {
            what: "controld status --json".into(),
            source,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    fn start_daemon(&mut self) -> Result<(), ScenarioError> {
        let config = self.dir.0.join("controld.toml");
        std::fs::write(&config, self.config_text())
            .map_err(ScenarioError::file("write", &config))?;
        let mut cmd = self.command(&self.bins.controld);
        cmd.arg("run")
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--config")
            .arg(&config)
            .env(tessera_region::env::LOG, "warn");
        let mut daemon = Proc::spawn(&mut cmd, "controld run")?;
        let deadline = Instant::now() + Duration::from_secs(20);
        let socket = self.state_dir().join("control.sock");
        loop {
            if !daemon.alive() {
                return Err(ScenarioError::Program {
                    what: "controld run".into(),
                    outcome: "exited at start".into(),
                    stderr: daemon.stderr_text(),
                });
            }
            if socket.exists() && self.status().is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return Err(ScenarioError::Run(
                    "controld did not answer within 20 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for s in &self.specs {
            if !self.region_path(s.name).exists() {
                return Err(ScenarioError::Run(format!(
                    "controld made no region for container {}",
                    s.name
                )));
            }
        }
        self.daemon = Some(daemon);
        Ok(())
    }

    /// Starts `gpuload <args>` in container `name`: with Tessera, preloaded with the
    /// container's region, as `controld exec` does; without, plainly on the node.
    pub fn gpuload(&self, name: &str, args: &[&str]) -> Result<Proc, ScenarioError> {
        self.run_in(name, &self.bins.gpuload, args)
    }

    /// Starts `program <args>` preloaded with a region of its own that no daemon manages,
    /// with a memory cap and no compute limit: the launch fast path.
    pub fn run_uncapped_compute(
        &self,
        program: &Path,
        args: &[&str],
    ) -> Result<Proc, ScenarioError> {
        let mut cmd = self.command(program);
        cmd.args(args)
            .env("LD_PRELOAD", &self.bins.libtessera)
            .env(
                tessera_region::env::REGION,
                self.dir.0.join("uncapped.region"),
            )
            .env(tessera_region::env::MEMORY_LIMIT, "16GiB");
        Proc::spawn(&mut cmd, "gpuload with no compute limit")
    }

    /// Starts `program <args>` in container `name` (see [`Testbed::gpuload`]).
    pub fn run_in(&self, name: &str, program: &Path, args: &[&str]) -> Result<Proc, ScenarioError> {
        self.run_in_with(name, program, args, &[])
    }

    /// [`Testbed::run_in`] with `env` set too.
    pub fn run_in_with(
        &self,
        name: &str,
        program: &Path,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<Proc, ScenarioError> {
        let mut cmd = self.command(program);
        cmd.args(args).envs(env.iter().copied());
        if self.tessera() {
            if !self.specs.iter().any(|s| s.name == name) {
                return Err(ScenarioError::Run(format!(
                    "no container {name} in this scenario"
                )));
            }
            cmd.env("LD_PRELOAD", &self.bins.libtessera)
                .env(tessera_region::env::REGION, self.region_path(name));
        }
        let what = format!(
            "gpuload {} in {name}{}",
            args.first().copied().unwrap_or(""),
            if self.tessera() { "" } else { " (baseline)" }
        );
        Proc::spawn(&mut cmd, &what)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Some(mut daemon) = self.daemon.take() {
            daemon.signal(libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(3);
            while daemon.alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}
