//! `controld` stays cheap: with eight busy containers on one GPU its scheduler (a tick every
//! 5 ms, settling, refilling and waking) does not spin, measured from the daemon's
//! `/proc/<pid>/stat` user + system time over the run. The figure (≤ 5 % of one core) is the
//! scenario runner's, in release (`daemon-cpu` in bench/RESULTS.md); a debug build on a busy
//! host reads a few points more.

mod scheduler_support;

use scheduler_support::*;
use std::time::{Duration, Instant};

#[test]
fn eight_busy_containers_leave_the_daemon_light() {
    let _serial = serial();
    let names: Vec<String> = (0..8).map(|i| format!("busy{i}")).collect();
    let containers: Vec<(&str, &str, &str)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let priority = if i % 2 == 0 { "online" } else { "offline" };
            (n.as_str(), "best-effort", priority)
        })
        .collect();
    let daemon = Daemon::start("cpu", &config(&containers));
    let engine: Engine = Default::default();
    let apps: Vec<FakeApp> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            FakeApp::start(
                daemon.region(n),
                engine.clone(),
                Load {
                    online: i % 2 == 0,
                    ..Load::default()
                },
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (cpu0, t0) = (daemon.cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(5));
    let (cpu1, wall) = (daemon.cpu_time(), t0.elapsed());
    let busy: u64 = apps.iter().map(FakeApp::busy_ns).sum();
    drop(apps);
    let share = (cpu1 - cpu0).as_secs_f64() / wall.as_secs_f64();
    eprintln!(
        "controld CPU with 8 busy containers: {:.2} % of one core ({:?} over {:.1} s; engine busy {:.0} %)",
        share * 100.0,
        cpu1 - cpu0,
        wall.as_secs_f64(),
        busy as f64 / 1e9 / (wall.as_secs_f64() + 0.5) * 100.0
    );
    assert!(
        share <= 0.20,
        "controld used {:.2} % of a core",
        share * 100.0
    );
}
