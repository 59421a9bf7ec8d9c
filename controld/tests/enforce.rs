//! `[daemon] enforce`: a process that maps its container's region but allocates without
//! `libtessera.so`, past the container's cap plus the slack, is stopped by the watchdog
//! once the grace period has passed (`kill`), or only reported (`report`). The cap judged is
//! the one the daemon declared; a well-behaved neighbour is left alone.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};
use support::*;
use tessera_tests::{json_u64, tessera_client, ClientKind, Running};

const GRACE_MS: u64 = 1000;

fn config(enforce: &str, metrics: std::net::SocketAddr) -> String {
    format!(
        r#"
[daemon]
metrics = "{metrics}"
enforce = "{enforce}"
enforce_grace_ms = {GRACE_MS}

[[container]]
name = "greedy"
gpus = [0]
memory = "1GiB"

[[container]]
name = "calm"
gpus = [0]
memory = "2GiB"
"#
    )
}

/// A process that maps `greedy`'s region and holds 2 GiB without the library.
fn bypass(node: &Node) -> Running {
    let client = tessera_client(ClientKind::CLinked);
    let mut cmd = node.sim.command(&client);
    cmd.env("LD_PRELOAD", map_shim())
        .env("WATCHDOG_TEST_MAP", node.region("greedy"))
        .args(["hold", &(2 * GIB).to_string()]);
    let mut p = Running::spawn(&mut cmd, "a process that bypasses libtessera.so");
    p.wait_for_line("ready", Duration::from_secs(60));
    p
}

/// A well-behaved process of `calm`, holding 256 MiB through the library.
fn calm(node: &Node) -> Running {
    let client = tessera_client(ClientKind::CLinked);
    let mut p = Running::spawn(
        node.in_container("calm", &client)
            .args(["hold", &(256 * MIB).to_string()]),
        "hold in calm",
    );
    p.wait_for_line("ready", Duration::from_secs(60));
    p
}

#[test]
fn kill_stops_a_process_over_its_cap_after_the_grace_period() {
    let mut node = Node::new("enforce-kill");
    let metrics = free_local_addr();
    let config = node.write_config(&config("kill", metrics));
    node.start(Some(&config));
    let mut neighbour = calm(&node);
    // Its region says 100 GiB: the watchdog judges by the cap the daemon declared.
    tessera_region::Region::open(&node.region("greedy"))
        .unwrap()
        .set_memory_cap(0, Some(100 * GIB));
    // Before it starts: it cannot be over its cap, and so cannot be seen over it, earlier.
    let spawned = Instant::now();
    let mut greedy = bypass(&node);
    // Loaded machines are slow to notice; the bound only keeps a broken build from hanging.
    let status = loop {
        if let Some(status) = greedy.try_status() {
            break status;
        }
        assert!(
            spawned.elapsed() < Duration::from_secs(60),
            "the bypassing process was never stopped"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let lived = spawned.elapsed();
    eprintln!("the bypassing process was stopped {lived:?} after it was started");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    // Never before the grace period.
    assert!(
        lived >= Duration::from_millis(GRACE_MS),
        "stopped after {lived:?}"
    );
    let c = node.container("greedy").unwrap();
    assert_eq!(json_u64(&c, "/watchdog_kills"), 1, "{c}");
    let problems = c["problems"].to_string();
    assert!(
        problems.contains(&format!("controld stopped pid(s) {}", greedy.pid()))
            && problems.contains("enforce = kill")
            && problems.contains("over its cap of 1GiB"),
        "{problems}"
    );
    let text = scrape(metrics, Duration::from_secs(10)).unwrap();
    assert_eq!(
        sample(
            &text,
            "tessera_container_watchdog_kills_total{container=\"greedy\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        neighbour.try_status().is_none(),
        "the neighbour was stopped"
    );
    let calm = node.container("calm").unwrap();
    assert_eq!(json_u64(&calm, "/watchdog_kills"), 0);
}

#[test]
fn report_only_reports() {
    let mut node = Node::new("enforce-report");
    let metrics = free_local_addr();
    let config = node.write_config(&config("report", metrics));
    node.start(Some(&config));
    let mut greedy = bypass(&node);
    wait_until(Duration::from_secs(30), "the bypass reported", || {
        node.container("greedy")
            .is_some_and(|c| c["problems"].to_string().contains("over its cap of 1GiB"))
    });
    // Well past the grace period, looked at again and again: reported, never stopped.
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3 * GRACE_MS) {
        let c = node.container("greedy").unwrap();
        assert!(c["problems"].to_string().contains("over its cap"), "{c}");
        assert_eq!(json_u64(&c, "/watchdog_kills"), 0);
        assert!(greedy.try_status().is_none(), "stopped under report");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Zeroes device 0's usage count and every slot's count in the region at `path` every
/// millisecond until `stop`: what a process of the container can do to its own region.
fn zero_counts_in_a_loop(
    path: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    use std::sync::atomic::Ordering;
    std::thread::spawn(move || {
        let region = map_region_writable(&path);
        while !stop.load(Ordering::Relaxed) {
            region.devices[0].memory_used.store(0, Ordering::SeqCst);
            for slot in &region.processes {
                slot.memory[0].store(0, Ordering::SeqCst);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// A container whose processes zero its usage counts every millisecond allocates past its
/// cap through the library itself. Under the default enforcement the watchdog logs it
/// within a second of NVML showing it over, and stops it once the grace period is over.
#[test]
fn a_container_rewriting_its_counts_is_logged_at_once_and_stopped_by_default() {
    let mut node = Node::new("enforce-default");
    let config =
        node.write_config("[[container]]\nname = \"greedy\"\ngpus = [0]\nmemory = \"1GiB\"\n");
    let log = node.start_logging(Some(&config));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let zeroing = zero_counts_in_a_loop(node.region("greedy"), stop.clone());
    let mut greedy = Running::spawn(
        node.in_container("greedy", &tessera_tests::artifacts().gpuload)
            .args(["alloc", "--chunk", "128MiB", "--interval", "0.05"])
            .args(["--limit", "3GiB", "--hold", "60"]),
        "gpuload alloc in greedy",
    );
    let over = GIB + 64 * MIB;
    let started = Instant::now();
    let (mut over_at, mut logged_at) = (None, None);
    let status = loop {
        if let Some(status) = greedy.try_status() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the process over its cap was never stopped"
        );
        let held = tessera_tests::processes_memory(&node.sim.stat(), &[greedy.pid()], 0);
        if held > over && over_at.is_none() {
            over_at = Some(Instant::now());
        }
        if logged_at.is_none()
            && std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .any(|l| l.contains("container greedy") && l.contains("by NVML, over its cap"))
        {
            logged_at = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stopped_at = Instant::now();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    zeroing.join().unwrap();
    let over_at = over_at.expect("NVML never showed the container over its cap");
    let logged_at = logged_at.unwrap_or(stopped_at);
    let (logged, stopped) = (
        logged_at.saturating_duration_since(over_at),
        stopped_at.duration_since(over_at),
    );
    eprintln!("over its cap by NVML: logged after {logged:?}, stopped after {stopped:?}");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("or the container rewrote its region's counts")
            && text.contains("enforce = kill"),
        "{text}"
    );
    assert!(logged < Duration::from_secs(1), "logged after {logged:?}");
    // The default grace period (2 s), and what a loaded machine adds to the watchdog's
    // 250 ms period.
    assert!(
        stopped < Duration::from_secs(4),
        "stopped after {stopped:?}"
    );
    let c = node.container("greedy").unwrap();
    assert_eq!(json_u64(&c, "/watchdog_kills"), 1, "{c}");
}
