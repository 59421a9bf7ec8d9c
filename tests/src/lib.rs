//! Support for the end-to-end tests: real programs, run on a simulated GPU node.
//!
//! - [`artifacts`] builds the programs under test once per test binary and says where they are.
//! - [`SimNode`] is a private node (its own `SIMGPU_STATE`) and the environment that selects it.
//! - [`compile_client`] compiles a C client from `tests/clients/` with gcc.
//! - [`run_with_timeout`] runs a program without letting a hang hang the test suite.
//! - [`timing_lock`] keeps timing-sensitive tests of one binary from running at the same time.

use serde_json::Value;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The packages whose programs the tests run.
const PACKAGES: [&str; 4] = ["simgpu", "simgpu-cuda", "simgpu-nvml", "tessera-bench"];

/// Where the built programs are.
#[derive(Debug)]
pub struct Artifacts {
    /// The cargo profile directory the test binary itself was built into (`target/debug`).
    pub profile_dir: PathBuf,
    /// The cargo profile of that directory (`debug` → `dev`).
    pub profile: String,
    /// The `simgpu` CLI.
    pub simgpu: PathBuf,
    /// The `gpuload` workload program.
    pub gpuload: PathBuf,
    /// The directory `simgpu lib-dir` names: `libcuda.so.1`, `libnvidia-ml.so.1`, ….
    pub lib_dir: PathBuf,
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the test crate lives inside the workspace")
        .to_path_buf()
}

/// The PTX of the test kernels (`tessera_spin`, `tessera_fill_u32`).
pub fn kernels_ptx() -> PathBuf {
    workspace_root().join("bench/kernels/tessera.ptx")
}

/// The cargo the tests run under (set by `cargo test`), or `cargo` from `PATH`.
pub fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

/// Builds the programs under test (once per test binary) in the test binary's own profile and
/// returns where they are. Panics with the build's output if it fails.
pub fn artifacts() -> &'static Artifacts {
    static ARTIFACTS: OnceLock<Artifacts> = OnceLock::new();
    ARTIFACTS.get_or_init(|| {
        let (profile_dir, profile) = profile_dir();
        let mut build = Command::new(cargo());
        build.current_dir(workspace_root()).arg("build");
        for package in PACKAGES {
            build.args(["-p", package]);
        }
        cargo_build(&mut build, &profile, "the programs under test");
        let simgpu = profile_dir.join("simgpu");
        let gpuload = profile_dir.join("gpuload");
        let out = run_with_timeout(
            Command::new(&simgpu).arg("lib-dir"),
            Duration::from_secs(30),
        );
        assert_success(&out, "simgpu lib-dir");
        let lib_dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        for lib in [
            "libcuda.so.1",
            "libcuda.so",
            "libnvidia-ml.so.1",
            "libnvidia-ml.so",
        ] {
            assert!(
                lib_dir.join(lib).exists(),
                "`simgpu lib-dir` printed {}, which has no {lib}",
                lib_dir.display()
            );
        }
        Artifacts {
            profile_dir,
            profile,
            simgpu,
            gpuload,
            lib_dir,
        }
    })
}

/// Adds the profile flag to a `cargo build` and runs it, panicking with its output on failure.
pub fn cargo_build(build: &mut Command, profile: &str, what: &str) {
    if profile != "dev" {
        build.args(["--profile", profile]);
    }
    let out = run_with_timeout(build, Duration::from_secs(1800));
    assert!(
        out.status.success(),
        "building {what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The profile directory of the running test executable (`target/<profile>/deps/<test>`) and
/// its cargo profile name.
pub fn profile_dir() -> (PathBuf, String) {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executables live in target/<profile>/deps")
        .to_path_buf();
    let profile = match dir.file_name().and_then(OsStr::to_str) {
        Some("debug") | None => "dev".to_string(),
        Some(name) => name.to_string(),
    };
    (dir, profile)
}

/// A private simulated node: its own state file (removed on drop) and the environment that
/// selects it and configures it. Nothing is created until a program uses the node.
#[derive(Debug)]
pub struct SimNode {
    state: PathBuf,
    env: Vec<(String, String)>,
}

impl SimNode {
    /// A node of the given devices (a `SIMGPU_DEVICES` value) and further `SIMGPU_*` settings.
    pub fn new(devices: &str, env: &[(&str, &str)]) -> SimNode {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let state = std::env::temp_dir().join(format!(
            "tessera-test-{}-{}-{nanos}.state",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut all = vec![("SIMGPU_DEVICES".to_string(), devices.to_string())];
        all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        SimNode { state, env: all }
    }

    /// The state file.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// A command for `program` on this node: the simulated libraries first on
    /// `LD_LIBRARY_PATH`, this node's state and settings, and no `SIMGPU_*` or
    /// `LD_PRELOAD` inherited from the test's own environment.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let lib_dir = &artifacts().lib_dir;
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SIMGPU_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env_remove("LD_PRELOAD");
        let library_path = match std::env::var_os("LD_LIBRARY_PATH") {
            Some(old) if !old.is_empty() => {
                let mut p = lib_dir.as_os_str().to_owned();
                p.push(":");
                p.push(old);
                p
            }
            _ => lib_dir.as_os_str().to_owned(),
        };
        cmd.env("LD_LIBRARY_PATH", library_path)
            .env("SIMGPU_STATE", &self.state)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// `simgpu <args>` on this node.
    pub fn simgpu(&self, args: &[&str]) -> Output {
        let mut cmd = self.command(&artifacts().simgpu);
        cmd.args(args);
        run_with_timeout(&mut cmd, Duration::from_secs(30))
    }

    /// `gpuload <args>` on this node, run to completion.
    pub fn gpuload(&self, args: &[&str], timeout: Duration) -> Output {
        let mut cmd = self.command(&artifacts().gpuload);
        cmd.args(args);
        run_with_timeout(&mut cmd, timeout)
    }

    /// `simgpu stat --json`, parsed. Panics if it fails.
    pub fn stat(&self) -> Value {
        let out = self.simgpu(&["stat", "--json"]);
        assert_success(&out, "simgpu stat --json");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "`simgpu stat --json` printed no JSON ({e}):\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}

impl Drop for SimNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.state);
    }
}

/// A live process in a `simgpu stat --json` document, by pid.
pub fn stat_process(stat: &Value, pid: u32) -> Option<&Value> {
    stat["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
}

/// A number in a JSON document, or a panic naming the field and the document.
pub fn json_u64(doc: &Value, pointer: &str) -> u64 {
    doc.pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no unsigned number at {pointer} in {doc}"))
}

/// Compiles `tests/clients/<sources>` with gcc into `<profile dir>/tessera-clients/<name>`
/// (once per test binary) and returns the executable. The file is written under a name of
/// its own and renamed into place, so another test binary never runs a half-written one.
pub fn compile_client(name: &str, sources: &[&str], flags: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    // Held while compiling: tests of one binary wait for the first to build a client.
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, exe)) = built.iter().find(|(n, _)| n == name) {
        return exe.clone();
    }
    let clients = workspace_root().join("tests/clients");
    let out_dir = artifacts().profile_dir.join("tessera-clients");
    std::fs::create_dir_all(&out_dir).expect("create the clients' build directory");
    let exe = out_dir.join(name);
    let tmp = out_dir.join(format!("{name}.{}.tmp", std::process::id()));
    let mut gcc = Command::new("gcc");
    gcc.args(["-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(&clients)
        .args(sources.iter().map(|s| clients.join(s)))
        .arg("-o")
        .arg(&tmp)
        .args(flags);
    let out = run_with_timeout(&mut gcc, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "gcc failed for {name} ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &exe).expect("move the client into place");
    built.push((name.to_string(), exe.clone()));
    exe
}

/// Compiles a client linked with `-lcuda` against the simulated driver, with the shared
/// entry table (`driver_common.c`, `driver_linked.c`).
pub fn linked_client(name: &str) -> PathBuf {
    let lib_dir = format!("-L{}", artifacts().lib_dir.display());
    compile_client(
        name,
        &[&format!("{name}.c"), "driver_common.c", "driver_linked.c"],
        &[&lib_dir, "-lcuda"],
    )
}

/// Runs a command to completion with its output captured; kills it and panics (with what
/// it printed) if it runs past `timeout`.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    wait_with_timeout(child, timeout, &format!("{cmd:?}"))
}

/// Waits for a child started with piped stdout and stderr, collecting its output; kills it
/// and panics if it runs past `timeout`.
pub fn wait_with_timeout(mut child: Child, timeout: Duration, what: &str) -> Output {
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().expect("wait for a child") {
            Some(status) => break status,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let out = stdout.join().unwrap_or_default();
                let err = stderr.join().unwrap_or_default();
                panic!(
                    "{what} ran past {timeout:?} and was killed\nstdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&err)
                );
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// Panics, showing what the program printed, unless it exited 0.
pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout:\n{}\nstderr:\n{}",
        describe(out.status),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Panics unless the program ended by itself (no signal: no crash, no abort).
pub fn assert_no_crash(out: &Output, what: &str) {
    assert!(
        out.status.signal().is_none(),
        "{what} crashed: {}\nstdout:\n{}\nstderr:\n{}",
        describe(out.status),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what} panicked:\n{stderr}");
}

/// An exit status in words, naming the signal of a crash.
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!(
            "killed by signal {sig}{}",
            if status.core_dumped() {
                " (core dumped)"
            } else {
                ""
            }
        ),
        _ => format!("{status}"),
    }
}

/// The single JSON document a program printed on stdout (its last non-empty line).
pub fn stdout_json(out: &Output, what: &str) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e})\nstdout:\n{text}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Serializes the timing-sensitive tests of one test binary (engine shares, kernel timing):
/// the test machine may have two cores, and two of them at once would measure each other.
pub fn timing_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // A failed timing test must not fail the others: the lock guards no data.
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A child process on a node, killed (SIGKILL) and reaped when dropped so that a failing
/// test leaves nothing running.
pub struct Running {
    child: Option<Child>,
    what: String,
}

impl Running {
    /// Starts `cmd` with stdout piped (for [`Running::wait_for_line`]) and stderr inherited.
    pub fn spawn(cmd: &mut Command, what: &str) -> Running {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Running {
            child: Some(child),
            what: what.to_string(),
        }
    }

    /// Starts `cmd` with stdout and stderr piped, to be collected by [`Running::finish`].
    pub fn spawn_captured(cmd: &mut Command, what: &str) -> Running {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Running {
            child: Some(child),
            what: what.to_string(),
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether it has exited (and how).
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .expect("running")
            .try_wait()
            .ok()
            .flatten()
    }

    /// Reads its stdout until a line starting with `prefix`, returning that line; panics if
    /// it ends first or `timeout` passes. Reading happens on a helper thread so that a silent
    /// child cannot block the test past the timeout.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let stdout = self
            .child
            .as_mut()
            .expect("running")
            .stdout
            .take()
            .expect("stdout is piped and read once");
        let (tx, rx) = std::sync::mpsc::channel();
        let prefix_owned = prefix.to_string();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut lines = std::io::BufReader::new(stdout).lines();
            let found = lines
                .by_ref()
                .map_while(Result::ok)
                .find(|l| l.starts_with(&prefix_owned));
            let _ = tx.send(found);
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        match rx.recv_timeout(timeout) {
            Ok(Some(line)) => line,
            Ok(None) => {
                let status = self.child.as_mut().and_then(|c| c.wait().ok());
                panic!(
                    "{} ended without printing `{prefix}` ({})",
                    self.what,
                    status.map(describe).unwrap_or_default()
                )
            }
            Err(_) => panic!("{} did not print `{prefix}` within {timeout:?}", self.what),
        }
    }

    /// Sends SIGKILL and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = child.kill();
        child.wait().expect("reap the killed child")
    }

    /// Waits for it to exit by itself (killing it past `timeout`) and collects its output.
    pub fn finish(mut self, timeout: Duration) -> Output {
        let child = self.child.take().expect("running");
        wait_with_timeout(child, timeout, &self.what)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
