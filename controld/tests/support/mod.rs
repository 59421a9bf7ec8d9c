//! What the controld tests share: a daemon on a simulated node, in a state dir of its own,
//! and the CLI pointed at it.

#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tessera_tests::{artifacts, run_with_timeout, Running, SimNode};

/// Each test's own directory, removed when dropped.
pub use tessera_tests::TempDir;

/// The `controld` binary of this build (`libtessera.so` is built next to it).
pub fn controld() -> PathBuf {
    // Builds simgpu, gpuload and libtessera.so into the same profile dir.
    let _ = artifacts();
    PathBuf::from(env!("CARGO_BIN_EXE_controld"))
}

/// The context size these tests' caps are sized for (a real A100's is larger): the caps
/// here hold two or three processes' contexts beside what they allocate.
pub const CONTEXT_MEMORY: &str = "300MiB";

/// A node, a state dir and (once started) a daemon on them.
pub struct Node {
    pub sim: SimNode,
    pub dir: TempDir,
    pub daemon: Option<Running>,
}

impl Node {
    pub fn new(what: &str) -> Node {
        Node {
            sim: SimNode::new("A100-40GB", &[("SIMGPU_CONTEXT_MEMORY", CONTEXT_MEMORY)]),
            dir: TempDir::new(what),
            daemon: None,
        }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn socket(&self) -> PathBuf {
        self.state_dir().join("control.sock")
    }

    pub fn region(&self, name: &str) -> PathBuf {
        self.state_dir().join(format!("{name}.region"))
    }

    /// Writes a config file in the test dir and returns its path.
    pub fn write_config(&self, text: &str) -> PathBuf {
        let path = self.dir.path().join("controld.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A `controld` command on this node (simgpu's libraries on the library path).
    pub fn command(&self) -> Command {
        let mut cmd = self.sim.command(controld());
        cmd.env_remove("TESSERA_STATE_DIR")
            .env("TESSERA_LOG", "debug");
        cmd
    }

    /// `controld run` with `config`; waits until its socket answers.
    pub fn start(&mut self, config: Option<&Path>) {
        self.start_with_stderr(config, std::process::Stdio::inherit());
    }

    /// Like [`Node::start`], with the daemon's log going to a file of the test dir, whose
    /// path it returns.
    pub fn start_logging(&mut self, config: Option<&Path>) -> PathBuf {
        let log = self.dir.path().join("controld.log");
        let file = std::fs::File::create(&log).unwrap();
        self.start_with_stderr(config, file.into());
        log
    }

    fn start_with_stderr(&mut self, config: Option<&Path>, stderr: std::process::Stdio) {
        let mut cmd = self.command();
        cmd.arg("run").arg("--state-dir").arg(self.state_dir());
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        self.daemon = Some(Running::spawn_with_stderr(&mut cmd, "controld run", stderr));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.daemon.as_mut().unwrap().try_status() {
                panic!("controld run exited at start: {status}");
            }
            if self.socket().exists() && self.ctl(&["status", "--json"]).status.success() {
                return;
            }
            assert!(Instant::now() < deadline, "controld did not start in 20 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's pid.
    pub fn daemon_pid(&self) -> u32 {
        self.daemon.as_ref().expect("started").pid()
    }

    /// Sends a signal to the daemon.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill on our own live child.
        assert_eq!(unsafe { libc::kill(self.daemon_pid() as i32, sig) }, 0);
    }

    /// Whether the daemon still runs.
    pub fn daemon_alive(&mut self) -> bool {
        self.daemon.as_mut().unwrap().try_status().is_none()
    }

    /// `controld <args> --state-dir <dir>`, run to completion.
    pub fn ctl(&self, args: &[&str]) -> Output {
        let mut cmd = self.command();
        let split = args.iter().position(|&a| a == "--").unwrap_or(args.len());
        cmd.args(&args[..split])
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(&args[split..]);
        run_with_timeout(&mut cmd, Duration::from_secs(60))
    }

    /// Like [`Node::ctl`], panicking with its stderr on failure.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "controld {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `controld status --json`, parsed.
    pub fn status(&self) -> Value {
        serde_json::from_str(&self.ctl_ok(&["status", "--json"])).unwrap()
    }

    /// A container's status, if present.
    pub fn container(&self, name: &str) -> Option<Value> {
        container(&self.status(), name)
    }

    /// A command that runs in container `name`, as `controld exec` would set it up.
    pub fn in_container(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = self.sim.command(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("TESSERA_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env("LD_PRELOAD", &artifacts().libtessera)
            .env("TESSERA_REGION", self.region(name));
        cmd
    }
}

/// A container in a status document.
pub fn container(status: &Value, name: &str) -> Option<Value> {
    status["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
}

/// A config declaring each `(name, compute)` container on GPU 0.
pub fn gpu0_containers(containers: &[(&str, &str)]) -> String {
    containers
        .iter()
        .map(|(name, compute)| {
            format!("[[container]]\nname = \"{name}\"\ngpus = [0]\ncompute = \"{compute}\"\n\n")
        })
        .collect()
}

/// Polls `check` every 10 ms until it holds or `timeout` passes; returns how long it took.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check() {
            return start.elapsed();
        }
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// A local TCP address no one listens on now (for a daemon's metrics endpoint).
pub fn free_local_addr() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// `GET /metrics` at `addr`: the whole reply, within `timeout`.
pub fn scrape(addr: std::net::SocketAddr, timeout: Duration) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply)
}

/// The value of the sample line that starts with `prefix` (name and labels) in a scrape.
pub fn sample(scrape: &str, prefix: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// A preload library that maps the file named by `WATCHDOG_TEST_MAP` and nothing else: a
/// process that looks like a container's to the watchdog but allocates around the library.
const MAP_SHIM: &str = r#"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
__attribute__((constructor)) static void map_region(void) {
    const char *path = getenv("WATCHDOG_TEST_MAP");
    if (!path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        _exit(3);
    if (mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED)
        _exit(4);
    close(fd);
}
"#;

pub fn map_shim() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = artifacts().profile_dir.join("tessera-clients");
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join(format!("watchdog_map_shim.{}.c", std::process::id()));
        std::fs::write(&source, MAP_SHIM).unwrap();
        // Built under a name of its own and renamed into place, so that another test binary
        // never loads a half-written library.
        let tmp = dir.join(format!("libwatchdog_map_shim.{}.tmp", std::process::id()));
        let out = run_with_timeout(
            Command::new("gcc")
                .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
                .arg(&tmp)
                .arg(&source),
            Duration::from_secs(120),
        );
        assert!(
            out.status.success(),
            "gcc failed for the map shim:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_file(&source);
        let lib = dir.join("libwatchdog_map_shim.so");
        std::fs::rename(&tmp, &lib).expect("move the map shim into place");
        lib
    })
}

/// The region file at `path` mapped writable, as a process of the container can map it; the
/// mapping is left in place for the test's life.
pub fn map_region_writable(path: &Path) -> &'static tessera_region::layout::RegionLayout {
    use tessera_region::layout::{RegionLayout, TOTAL_SIZE};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: maps the whole region file shared; the mapping is never unmapped, and the
    // daemon keeps the file at its size while the test runs.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            TOTAL_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(ptr, libc::MAP_FAILED);
    // SAFETY: a live shared mapping of a region of this layout, page-aligned, whose fields
    // are all atomics.
    unsafe { &*ptr.cast::<RegionLayout>() }
}
