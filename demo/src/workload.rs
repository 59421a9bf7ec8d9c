//! The demo's containers and the `gpuload` processes that run in them.
//!
//! Each container runs its workload (`gpuload infer` or `gpuload train`, which reports one
//! JSON object when it ends) and a process that holds part of its memory cap (`gpuload
//! alloc --hold`, like a model's weights), both started the way `controld exec` starts a
//! command: `libtessera.so` preloaded, `TESSERA_REGION` naming the container's region.

use crate::backend::{Gpu, Programs, Workdir};
use crate::error::DemoError;
use crate::plan::Plan;
use serde_json::Value;
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What every process of the demo runs with.
#[derive(Clone, Copy)]
pub struct Setting<'a> {
    /// The GPU.
    pub gpu: &'a Gpu,
    /// The programs.
    pub programs: &'a Programs,
    /// Where their output goes.
    pub workdir: &'a Workdir,
    /// How long the workloads run.
    pub seconds: u32,
}

/// What a process is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The container's workload; the demo ends when every workload has.
    Work,
    /// Holds memory until stopped.
    Holder,
}

/// One started process.
struct Process {
    container: &'static str,
    kind: Kind,
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    status: Option<ExitStatus>,
    /// Stopped by the demo (not a failure).
    stopped: bool,
}

/// Per container, its workload's JSON report (none if it was stopped early).
pub type Results = Vec<(&'static str, Option<Value>)>;

/// Every process the demo started.
pub struct Fleet {
    processes: Vec<Process>,
    /// `TESSERA_LOG` as the user set it, for the workloads.
    log: Option<OsString>,
}

impl Fleet {
    /// No processes yet; the workloads get `log` as their `TESSERA_LOG`.
    pub fn new(log: Option<OsString>) -> Fleet {
        Fleet {
            processes: Vec::new(),
            log,
        }
    }

    /// Starts `plan`'s process of `kind` in the container whose region is `region`; its
    /// pid.
    pub fn launch(
        &mut self,
        plan: &Plan,
        kind: Kind,
        region: &Path,
        setting: &Setting<'_>,
    ) -> Result<u32, DemoError> {
        let Setting {
            gpu,
            programs,
            workdir,
            seconds,
        } = *setting;
        let (tag, args): (&str, Vec<String>) = match kind {
            Kind::Work => (
                "work",
                plan.work
                    .iter()
                    .map(|a| a.to_string())
                    .chain(["--seconds".into(), seconds.to_string()])
                    .collect(),
            ),
            // Held past the end; the demo stops the holder once the workloads are done.
            Kind::Holder => (
                "memory",
                ["alloc", "--limit", plan.holds, "--chunk", "1GiB", "--hold"]
                    .iter()
                    .map(|a| a.to_string())
                    .chain([(seconds + 60).to_string()])
                    .collect(),
            ),
        };
        let stdout = workdir.path().join(format!("{}-{tag}.out", plan.name));
        let stderr = workdir.path().join(format!("{}-{tag}.err", plan.name));
        let mut cmd = Command::new(&programs.gpuload);
        cmd.args(&args);
        self.environment(&mut cmd, plan, region, gpu, programs);
        let file = |path: &Path| {
            std::fs::File::create(path).map_err(|source| DemoError::Spawn {
                what: path.display().to_string(),
                source,
            })
        };
        cmd.stdin(Stdio::null())
            .stdout(file(&stdout)?)
            .stderr(file(&stderr)?);
        // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
        // which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                // Killed with the demo, even if the demo itself is killed outright.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| DemoError::Spawn {
            what: format!("gpuload {} for {}", args[0], plan.name),
            source,
        })?;
        let pid = child.id();
        self.processes.push(Process {
            container: plan.name,
            kind,
            child,
            stdout,
            stderr,
            status: None,
            stopped: false,
        });
        Ok(pid)
    }

    /// Whether the process `pid` has written its report (a holder does once it holds its
    /// memory).
    pub fn reported(&self, pid: u32) -> bool {
        self.processes
            .iter()
            .find(|p| p.child.id() == pid)
            .and_then(|p| std::fs::metadata(&p.stdout).ok())
            .is_some_and(|m| m.len() > 0)
    }

    /// Whether the process `pid` has exited.
    pub fn exited(&self, pid: u32) -> bool {
        self.processes
            .iter()
            .any(|p| p.child.id() == pid && p.status.is_some())
    }

    /// The environment `controld exec` gives a command, plus the GPU's.
    fn environment(
        &self,
        cmd: &mut Command,
        plan: &Plan,
        region: &Path,
        gpu: &Gpu,
        programs: &Programs,
    ) {
        let mut preloads = programs.preload.clone().into_os_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preloads.push(":");
            preloads.push(old);
        }
        cmd.env("LD_PRELOAD", preloads)
            .env(tessera_region::env::REGION, region)
            // The caps again, for the library's fallback should it ever have to create the
            // region itself: a missing region must never mean "unlimited".
            .env(tessera_region::env::MEMORY_LIMIT, "0")
            .env(
                format!("{}0", tessera_region::env::MEMORY_LIMIT_DEVICE),
                plan.memory,
            )
            .envs(gpu.env.iter().map(|(k, v)| (k, v)));
        match &self.log {
            Some(level) => cmd.env(tessera_region::env::LOG, level),
            None => cmd.env_remove(tessera_region::env::LOG),
        };
    }

    /// Notes the processes that have exited.
    pub fn poll(&mut self) {
        for p in self.processes.iter_mut().filter(|p| p.status.is_none()) {
            if let Ok(Some(status)) = p.child.try_wait() {
                p.status = Some(status);
            }
        }
    }

    /// Pids of a container's processes, exited ones included.
    pub fn pids(&self, container: &str) -> impl Iterator<Item = u32> + '_ {
        let container = container.to_string();
        self.processes
            .iter()
            .filter(move |p| p.container == container)
            .map(|p| p.child.id())
    }

    /// Whether every workload has ended.
    pub fn workloads_done(&self) -> bool {
        self.processes
            .iter()
            .filter(|p| p.kind == Kind::Work)
            .all(|p| p.status.is_some())
    }

    /// How many workloads have ended.
    pub fn workloads_ended(&self) -> usize {
        self.processes
            .iter()
            .filter(|p| p.kind == Kind::Work && p.status.is_some())
            .count()
    }

    /// Whether a process ended badly on its own.
    pub fn failed(&self) -> bool {
        !self.failures().is_empty()
    }

    /// One line per process that ended badly on its own: which, how, and its last error.
    pub fn failures(&self) -> Vec<String> {
        self.processes
            .iter()
            .filter(|p| !p.stopped && p.status.is_some_and(|s| !s.success()))
            .map(|p| {
                let status = p.status.expect("filtered");
                let how = match status.code() {
                    Some(code) => format!("exit status {code}"),
                    None => format!("signal {}", status.signal().unwrap_or(0)),
                };
                let last = std::fs::read_to_string(&p.stderr)
                    .ok()
                    .and_then(|e| {
                        e.lines()
                            .rev()
                            .find(|l| !l.trim().is_empty())
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| "no error output".into());
                format!(
                    "the {} of {} failed ({how}): {last}",
                    match p.kind {
                        Kind::Work => "workload",
                        Kind::Holder => "memory holder",
                    },
                    p.container
                )
            })
            .collect()
    }

    /// Stops every process still running: SIGTERM, then SIGKILL after a second.
    pub fn stop_all(&mut self) {
        self.poll();
        for p in self.processes.iter_mut().filter(|p| p.status.is_none()) {
            p.stopped = true;
            // SAFETY: kill on our own child, not yet reaped (its status is unknown), so the
            // pid names no other process.
            unsafe { libc::kill(p.child.id() as libc::pid_t, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.processes.iter().any(|p| p.status.is_none()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            self.poll();
        }
        for p in self.processes.iter_mut().filter(|p| p.status.is_none()) {
            let _ = p.child.kill();
            p.status = p.child.wait().ok();
        }
    }

    /// What the workloads reported on stdout (one JSON object each).
    pub fn results(&self) -> Results {
        self.processes
            .iter()
            .filter(|p| p.kind == Kind::Work)
            .map(|p| {
                let report = std::fs::read_to_string(&p.stdout)
                    .ok()
                    .and_then(|text| serde_json::from_str(text.trim()).ok());
                (p.container, report)
            })
            .collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.stop_all();
    }
}
