//! Support for the end-to-end tests: real programs, run on a simulated GPU node.
//!
//! - [`artifacts`] builds the programs under test once per test binary and says where they are.
//! - [`SimNode`] is a private node (its own `SIMGPU_STATE`) and the environment that selects it.
//! - [`compile_client`] compiles a C client from `tests/clients/` with gcc.
//! - [`run_with_timeout`] runs a program without letting a hang hang the test suite.
//! - [`TempDir`] is a test's own directory under the temp dir, removed when dropped.
//! - [`timing_lock`] keeps timing-sensitive tests of one binary from running at the same time.
//! - [`Container`] is one container on a node: its region file, its memory caps, and commands
//!   that run with `libtessera.so` preloaded.

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
const PACKAGES: [&str; 5] = [
    "simgpu",
    "simgpu-cuda",
    "simgpu-nvml",
    "tessera-bench",
    "tessera-intercept",
];

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
    /// The preload library, `libtessera.so`.
    pub libtessera: PathBuf,
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
        let libtessera = profile_dir.join("libtessera.so");
        assert!(
            libtessera.exists(),
            "building tessera-intercept left no {}",
            libtessera.display()
        );
        Artifacts {
            profile_dir,
            profile,
            simgpu,
            gpuload,
            lib_dir,
            libtessera,
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

/// A fresh directory under the temp dir for one test (`what` names it), removed with
/// everything in it when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tessera-test-{what}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process on a node, killed (SIGKILL) and reaped when dropped so that a failing
/// test leaves nothing running.
pub struct Running {
    child: Option<Child>,
    what: String,
    /// Lines of its stdout, read on a helper thread once [`Running::wait_for_line`] first
    /// needs them.
    lines: Option<std::sync::mpsc::Receiver<String>>,
}

impl Running {
    /// Starts `cmd` with stdout piped (for [`Running::wait_for_line`]) and stderr inherited.
    pub fn spawn(cmd: &mut Command, what: &str) -> Running {
        Running::start(cmd, what, Stdio::null(), Stdio::inherit())
    }

    /// Starts `cmd` with stdout piped and stderr to `stderr` (a log file, say).
    pub fn spawn_with_stderr(cmd: &mut Command, what: &str, stderr: Stdio) -> Running {
        Running::start(cmd, what, Stdio::null(), stderr)
    }

    /// Starts `cmd` with stdout and stderr piped, to be collected by [`Running::finish`].
    pub fn spawn_captured(cmd: &mut Command, what: &str) -> Running {
        Running::start(cmd, what, Stdio::null(), Stdio::piped())
    }

    /// Starts `cmd` with stdin piped too (for [`Running::send_line`]), stdout piped and
    /// stderr inherited: a client that waits at a step until the test has looked.
    pub fn spawn_interactive(cmd: &mut Command, what: &str) -> Running {
        Running::start(cmd, what, Stdio::piped(), Stdio::inherit())
    }

    fn start(cmd: &mut Command, what: &str, stdin: Stdio, stderr: Stdio) -> Running {
        let child = cmd
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Running {
            child: Some(child),
            what: what.to_string(),
            lines: None,
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

    /// Writes one line to its stdin (started with [`Running::spawn_interactive`]).
    pub fn send_line(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self
            .child
            .as_mut()
            .expect("running")
            .stdin
            .as_mut()
            .expect("stdin is piped: start it with spawn_interactive");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("cannot write to {}: {e}", self.what));
    }

    /// Reads its stdout until a line starting with `prefix`, returning that line (lines
    /// before it are skipped); panics if it ends first or `timeout` passes. Reading happens
    /// on a helper thread so that a silent child cannot block the test past the timeout;
    /// later calls go on from the line after.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        match self.try_wait_for_line(prefix, timeout) {
            Some(line) => line,
            None => {
                let status = self.child.as_mut().and_then(|c| c.wait().ok());
                panic!(
                    "{} ended without printing `{prefix}` ({})",
                    self.what,
                    status.map(describe).unwrap_or_default()
                )
            }
        }
    }

    /// Like [`Running::wait_for_line`], but None if its stdout ends first.
    pub fn try_wait_for_line(&mut self, prefix: &str, timeout: Duration) -> Option<String> {
        if self.lines.is_none() {
            let stdout = self
                .child
                .as_mut()
                .expect("running")
                .stdout
                .take()
                .expect("stdout is piped");
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                use std::io::BufRead;
                // Keeps draining after the test stops listening, so the child never blocks
                // on a full pipe.
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    let _ = tx.send(line);
                }
            });
            self.lines = Some(rx);
        }
        let lines = self.lines.as_ref().expect("set above");
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return Some(line),
                Ok(_) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{} did not print `{prefix}` within {timeout:?}", self.what)
                }
            }
        }
    }

    /// Like [`Running::wait_for_line`], then parses the rest of the line after `prefix` as
    /// JSON.
    pub fn wait_for_json(&mut self, prefix: &str, timeout: Duration) -> Value {
        let line = self.wait_for_line(prefix, timeout);
        let rest = line[prefix.len()..].trim();
        serde_json::from_str(rest).unwrap_or_else(|e| {
            panic!(
                "{} printed `{line}`, whose JSON does not parse: {e}",
                self.what
            )
        })
    }

    /// Waits up to `timeout` for it to exit by itself; panics (killing it) past that.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.kill();
                panic!("{} did not exit within {timeout:?}", self.what);
            }
            std::thread::sleep(Duration::from_millis(5));
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

/// One container on a [`SimNode`]: a region file of its own (a fresh temporary path,
/// removed on drop) and memory caps, applied to every command it builds by preloading
/// `libtessera.so`, as `controld` would set a container up.
#[derive(Debug)]
pub struct Container<'n> {
    node: &'n SimNode,
    region: PathBuf,
    env: Vec<(String, String)>,
}

impl<'n> Container<'n> {
    /// A container on `node` with `TESSERA_MEMORY_LIMIT=<limit>` (all devices), or no cap.
    pub fn new(node: &'n SimNode, limit: Option<&str>) -> Container<'n> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let region = std::env::temp_dir().join(format!(
            "tessera-test-{}-{}.region",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&region);
        let mut container = Container {
            node,
            region,
            env: Vec::new(),
        };
        if let Some(limit) = limit {
            container = container.env(tessera_region::env::MEMORY_LIMIT, limit);
        }
        container
    }

    /// Adds `TESSERA_MEMORY_LIMIT_<device>=<limit>`.
    pub fn device_limit(self, device: usize, limit: &str) -> Container<'n> {
        self.env(
            &format!("{}{device}", tessera_region::env::MEMORY_LIMIT_DEVICE),
            limit,
        )
    }

    /// Adds a variable to every command of this container.
    pub fn env(mut self, key: &str, value: &str) -> Container<'n> {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// The node it runs on.
    pub fn node(&self) -> &'n SimNode {
        self.node
    }

    /// Its region file (`TESSERA_REGION`); the library creates it on first use.
    pub fn region(&self) -> &Path {
        &self.region
    }

    /// A command for `program` in this container: the node's environment
    /// ([`SimNode::command`]), `LD_PRELOAD=libtessera.so`, `TESSERA_REGION`, the caps, and no
    /// `TESSERA_*` inherited from the test's own environment.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        self.command_preloading(program, &[&artifacts().libtessera])
    }

    /// Like [`Container::command`] with `LD_PRELOAD` set to `preload`, in that order (to put
    /// another preload library before or after `libtessera.so`).
    pub fn command_preloading(&self, program: impl AsRef<OsStr>, preload: &[&Path]) -> Command {
        let mut cmd = self.node.command(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TESSERA_") {
                cmd.env_remove(&key);
            }
        }
        let preload = preload
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        cmd.env("LD_PRELOAD", preload)
            .env(tessera_region::env::REGION, &self.region)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.region);
    }
}

/// The memory the listed processes hold on `device`, by simgpu's ground truth (a
/// `simgpu stat --json` document); processes not listed (exited) count zero.
pub fn processes_memory(stat: &Value, pids: &[u32], device: usize) -> u64 {
    pids.iter()
        .filter_map(|&pid| stat_process(stat, pid))
        .map(|p| json_u64(p, &format!("/devices/{device}/memory")))
        .sum()
}

/// Lines a program wrote to stderr that come from `libtessera.so` (they start with
/// `tessera`).
pub fn tessera_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("tessera"))
        .map(str::to_string)
        .collect()
}

/// Builds `tests/cudarc-client` (a workspace member) once per test binary and returns the
/// program.
pub fn cudarc_client() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let arts = artifacts();
            let mut build = Command::new(cargo());
            build
                .current_dir(workspace_root())
                .args(["build", "-p", "tessera-cudarc-client"]);
            cargo_build(
                &mut build,
                &arts.profile,
                "tests/cudarc-client (a workspace member)",
            );
            arts.profile_dir.join("cudarc-client")
        })
        .clone()
}

/// Whether `python` runs the statement `probe` (like `import cuda.bindings.driver`).
fn python_can(python: &Path, probe: &str) -> bool {
    Command::new(python)
        .args(["-c", probe])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A Python interpreter that runs `probe` (a statement, like `import cuda.bindings.driver`):
/// `python3` if it does (`.ci/run` installs `tests/requirements.txt` there); otherwise a
/// virtual environment under the target directory with `tests/requirements.txt` installed into
/// it, so that the tests also run on a fresh machine with access to PyPI.
pub fn python_with(probe: &str) -> PathBuf {
    // Held while installing: tests of one binary wait for the first to set it up.
    static VENV: Mutex<()> = Mutex::new(());
    let system = PathBuf::from("python3");
    if python_can(&system, probe) {
        return system;
    }
    let _installing = VENV.lock().unwrap_or_else(|p| p.into_inner());
    let venv = artifacts()
        .profile_dir
        .parent()
        .expect("target dir")
        .join("tessera-python");
    let python = venv.join("bin/python");
    if python_can(&python, probe) {
        return python;
    }
    if !python.exists() {
        let out = run_with_timeout(
            Command::new(&system).args(["-m", "venv"]).arg(&venv),
            Duration::from_secs(300),
        );
        assert_success(&out, "python3 -m venv (is python3-venv installed?)");
    }
    let out = run_with_timeout(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "-r"])
            .arg(workspace_root().join("tests/requirements.txt")),
        Duration::from_secs(900),
    );
    assert_success(&out, "pip install -r tests/requirements.txt");
    assert!(
        python_can(&python, probe),
        "tests/requirements.txt installed, but `{probe}` still fails in {}",
        python.display()
    );
    python
}

/// A Python interpreter with NVIDIA's `cuda-bindings` (see [`python_with`]).
pub fn python_with_cuda_bindings() -> PathBuf {
    python_with("import cuda.bindings.driver")
}

/// The ways an application reaches the driver, each a client program that speaks the same
/// modes (`capfill`, `names`, …; see `tests/clients/tessera_client.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// C, linked with `-lcuda`: symbol interposition.
    CLinked,
    /// C, `dlopen("libcuda.so.1")` + `dlsym`.
    CDlopen,
    /// C, `cuGetProcAddress_v2` for every entry point (the CUDA runtime's way).
    CProcAddress,
    /// Rust on the `cudarc` crate (dynamic loading).
    Cudarc,
    /// Python on NVIDIA's `cuda-bindings`.
    Python,
}

impl ClientKind {
    /// Every kind.
    pub const ALL: [ClientKind; 5] = [
        ClientKind::CLinked,
        ClientKind::CDlopen,
        ClientKind::CProcAddress,
        ClientKind::Cudarc,
        ClientKind::Python,
    ];

    /// The three C kinds, which speak every mode.
    pub const C: [ClientKind; 3] = [
        ClientKind::CLinked,
        ClientKind::CDlopen,
        ClientKind::CProcAddress,
    ];

    /// A name for messages.
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::CLinked => "C linked with -lcuda",
            ClientKind::CDlopen => "C dlopen + dlsym",
            ClientKind::CProcAddress => "C cuGetProcAddress_v2",
            ClientKind::Cudarc => "cudarc",
            ClientKind::Python => "Python cuda-bindings",
        }
    }

    /// A command running this client in `mode` (with `args`) in `container`.
    pub fn command(self, container: &Container<'_>, mode: &str, args: &[&str]) -> Command {
        let mut cmd = match self {
            ClientKind::CLinked | ClientKind::CDlopen | ClientKind::CProcAddress => {
                container.command(tessera_client(self))
            }
            ClientKind::Cudarc => container.command(cudarc_client()),
            ClientKind::Python => {
                let mut cmd = container.command(python_with_cuda_bindings());
                cmd.arg(workspace_root().join("tests/clients/cuda_bindings_client.py"));
                cmd
            }
        };
        cmd.arg(mode).args(args);
        cmd
    }
}

/// `tests/clients/tessera_client.c` built for a C kind (panics for the others).
pub fn tessera_client(kind: ClientKind) -> PathBuf {
    let (name, binding, flags): (&str, &str, Vec<String>) = match kind {
        ClientKind::CLinked => (
            "tessera_client_linked",
            "driver_linked.c",
            vec![
                format!("-L{}", artifacts().lib_dir.display()),
                "-lcuda".to_string(),
            ],
        ),
        ClientKind::CDlopen => ("tessera_client_dlopen", "driver_dlopen.c", Vec::new()),
        ClientKind::CProcAddress => (
            "tessera_client_proc_address",
            "driver_proc_address.c",
            Vec::new(),
        ),
        other => panic!("{} is not a C client", other.name()),
    };
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend(["-ldl", "-lpthread"]);
    compile_client(
        name,
        &["tessera_client.c", "driver_common.c", binding],
        &flags,
    )
}

/// `tests/clients/rtld_next_shim.c` built as a preload library.
pub fn rtld_next_shim() -> PathBuf {
    compile_client(
        "librtld_next_shim.so",
        &["rtld_next_shim.c"],
        &["-shared", "-fPIC", "-ldl"],
    )
}
