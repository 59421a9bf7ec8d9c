//! What the scheduler tests share: `controld run` on a state dir of its own, and fake
//! applications that drive a container's compute account the way `libtessera.so` does (gate
//! on the bucket and the block, raise `active`, charge measured time, fill the busy bins),
//! running 1 ms "kernels" on a fake engine that serialises the containers of one GPU.
//! They need no GPU, no simgpu and no preload library, so the scheduler's arithmetic is
//! checked end to end on its own.

#![allow(dead_code)]

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tessera_region::layout::ComputeAccount;
use tessera_region::{monotonic_ns, Region};

/// Keeps the timing-sensitive tests of one binary from running at once.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running `controld run` over a fresh state dir, stopped (SIGTERM) on drop.
pub struct Daemon {
    pub dir: PathBuf,
    child: Child,
}

impl Daemon {
    /// Starts the daemon with `config` (TOML) and waits until its socket answers.
    pub fn start(what: &str, config: &str) -> Daemon {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "controld-sched-{what}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config_path = dir.join("controld.toml");
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_controld"))
            .arg("run")
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--config")
            .arg(&config_path)
            .env_remove("TESSERA_STATE_DIR")
            .env("TESSERA_LOG", "info")
            .stdin(Stdio::null())
            .spawn()
            .expect("controld starts");
        let daemon = Daemon { dir, child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !daemon.ctl(&["status", "--json"]).status.success() {
            assert!(Instant::now() < deadline, "controld did not start in 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// `controld <args> --state-dir <dir>`.
    pub fn ctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_controld"))
            .args(args)
            .arg("--state-dir")
            .arg(self.state_dir())
            .env_remove("TESSERA_STATE_DIR")
            .output()
            .expect("controld runs")
    }

    /// `controld status --json`.
    pub fn status(&self) -> Value {
        let out = self.ctl(&["status", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Container `name`'s status on GPU 0.
    pub fn device(&self, name: &str) -> Value {
        let status = self.status();
        status["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no container {name} in {status}"))["devices"][0]
            .clone()
    }

    /// Container `name`'s region, mapped here (for the rest of the test process: a
    /// process slot borrows its region for good).
    pub fn region(&self, name: &str) -> &'static Region {
        let path = self.state_dir().join(format!("{name}.region"));
        Box::leak(Box::new(Region::open(&path).unwrap()))
    }

    /// The daemon's CPU time so far (user + system), from `/proc/<pid>/stat`.
    pub fn cpu_time(&self) -> Duration {
        cpu_time(self.pid())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill on our own child, which we have not waited for yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// User + system CPU time of process `pid`.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

/// One GPU's engine: one kernel at a time, whichever container runs it.
pub type Engine = Arc<Mutex<()>>;

/// How a fake application puts work on its GPU.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Length of each kernel.
    pub kernel: Duration,
    /// Online: raises and wakes `active` as its library does.
    pub online: bool,
}

impl Default for Load {
    fn default() -> Self {
        Load {
            kernel: Duration::from_millis(1),
            online: false,
        }
    }
}

/// A thread that launches kernels in a container as fast as its gate lets it.
pub struct FakeApp {
    stop: Arc<AtomicBool>,
    /// Busy ns its kernels ran on the engine.
    pub busy: Arc<AtomicU64>,
    /// Kernels it launched.
    pub kernels: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl FakeApp {
    /// Starts the app in `region`; like a process under the library, it holds a process
    /// slot while it runs.
    pub fn start(region: &'static Region, engine: Engine, load: Load) -> FakeApp {
        let stop = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicU64::new(0));
        let kernels = Arc::new(AtomicU64::new(0));
        let (s, b, k) = (stop.clone(), busy.clone(), kernels.clone());
        let thread = std::thread::spawn(move || {
            let _slot = region.claim_slot().unwrap();
            let a = region.compute(0);
            while !s.load(Ordering::Relaxed) {
                raise(a, load.online);
                if !admitted(a) {
                    continue;
                }
                a.inflight.fetch_add(1, Ordering::SeqCst);
                a.launches.fetch_add(1, Ordering::Relaxed);
                let (start, end) = {
                    let _gpu = engine.lock().unwrap();
                    let start = monotonic_ns();
                    std::thread::sleep(load.kernel);
                    (start, monotonic_ns())
                };
                a.inflight.fetch_sub(1, Ordering::SeqCst);
                a.charge(end - start);
                a.add_span(start, end);
                b.fetch_add(end - start, Ordering::Relaxed);
                k.fetch_add(1, Ordering::Relaxed);
            }
            a.active.store(0, Ordering::SeqCst);
        });
        FakeApp {
            stop,
            busy,
            kernels,
            thread: Some(thread),
        }
    }

    /// Busy ns so far.
    pub fn busy_ns(&self) -> u64 {
        self.busy.load(Ordering::Relaxed)
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for FakeApp {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Raises `active` (and, online, wakes the daemon's preemption thread) as the library does
/// at its first launch after idle.
fn raise(a: &ComputeAccount, online: bool) {
    if a.active.load(Ordering::SeqCst) == 0 {
        a.active.store(1, Ordering::SeqCst);
        if online {
            a.active_raised_ns.store(monotonic_ns(), Ordering::Relaxed);
            a.wake_active();
        }
    }
}

/// The launch gate: true when the launch may go; otherwise sleeps in the gate (at most
/// 1 ms) and returns false.
fn admitted(a: &ComputeAccount) -> bool {
    let may = || {
        !a.is_limited()
            || (a.blocked.load(Ordering::SeqCst) == 0 && a.bucket_ns.load(Ordering::SeqCst) > 0)
    };
    if may() {
        return true;
    }
    let started = monotonic_ns();
    a.waiting.fetch_add(1, Ordering::SeqCst);
    let seen = a.gate.load(Ordering::SeqCst);
    if !may() {
        a.wait_gate(seen, 1_000_000);
    }
    a.waiting.fetch_sub(1, Ordering::SeqCst);
    a.throttled_ns
        .fetch_add(monotonic_ns() - started, Ordering::Relaxed);
    false
}

/// Each app's share of the time between two samples of their busy time, over `window`
/// after `settle`.
pub fn shares(apps: &[&FakeApp], settle: Duration, window: Duration) -> Vec<f64> {
    std::thread::sleep(settle);
    let t0 = Instant::now();
    let b0: Vec<u64> = apps.iter().map(|a| a.busy_ns()).collect();
    std::thread::sleep(window);
    let elapsed = t0.elapsed().as_nanos() as f64;
    apps.iter()
        .zip(b0)
        .map(|(a, b)| (a.busy_ns() - b) as f64 / elapsed)
        .collect()
}

/// A config of containers on GPU 0: `(name, compute, priority)`.
pub fn config(containers: &[(&str, &str, &str)]) -> String {
    containers
        .iter()
        .map(|(name, compute, priority)| {
            format!(
                "[[container]]\nname = \"{name}\"\ngpus = [0]\ncompute = \"{compute}\"\npriority = \"{priority}\"\n\n"
            )
        })
        .collect()
}

/// Polls `check` every millisecond until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check() {
            return start.elapsed();
        }
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
