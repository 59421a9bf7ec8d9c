//! The compute scheduler end to end on simgpu: `gpuload train` under `libtessera.so` in
//! containers that `controld` manages, shares measured from the simulated node's ground
//! truth (each process's engine busy time from `simgpu stat`), not from anything Tessera
//! reports.

mod support;

use std::time::{Duration, Instant};
use support::*;
use tessera_tests::{json_u64, stat_process, Running};

const TRAIN: [&str; 5] = ["train", "--kernel-ms", "1", "--seconds", "8"];

/// Runs one saturating trainer per container (`(name, compute)` on GPU 0) and returns each
/// one's share of the engine over a window inside their run, with the daemon's view of
/// the first container's measured share.
fn shares(what: &str, containers: &[(&str, &str)]) -> (Vec<f64>, Vec<f64>) {
    let mut node = Node::new(what);
    let config = node.write_config(&gpu0_containers(containers));
    node.start(Some(&config));
    let mut trainers: Vec<Running> = containers
        .iter()
        .map(|(name, _)| {
            let mut cmd = node.in_container(name, &tessera_tests::artifacts().gpuload);
            cmd.args(TRAIN);
            Running::spawn_captured(&mut cmd, &format!("gpuload train in {name}"))
        })
        .collect();
    let pids: Vec<u32> = trainers.iter().map(Running::pid).collect();
    let busy = |stat: &serde_json::Value| -> Option<Vec<u64>> {
        pids.iter()
            .map(|&pid| {
                stat_process(stat, pid)
                    .and_then(|p| p.pointer("/devices/0/busy_ns"))
                    .and_then(serde_json::Value::as_u64)
            })
            .collect()
    };
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the trainers did not all run kernels within 5 s"
        );
        for t in &mut trainers {
            assert!(t.try_status().is_none(), "a trainer ended early");
        }
        if busy(&node.sim.stat()).is_some_and(|b| b.iter().all(|&b| b > 0)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1000));
    let stat0 = node.sim.stat();
    std::thread::sleep(Duration::from_millis(3000));
    let stat1 = node.sim.stat();
    let status = node.status();
    let window = (json_u64(&stat1, "/taken_ns") - json_u64(&stat0, "/taken_ns")) as f64;
    let (b0, b1) = (busy(&stat0).unwrap(), busy(&stat1).unwrap());
    let shares: Vec<f64> = b0
        .iter()
        .zip(&b1)
        .map(|(a, b)| (b - a) as f64 / window)
        .collect();
    let measured: Vec<f64> = containers
        .iter()
        .map(|(name, _)| {
            container(&status, name).unwrap()["devices"][0]["share_measured"]
                .as_f64()
                .unwrap_or(-1.0)
        })
        .collect();
    eprintln!(
        "{what}: {} (controld measured {measured:?})",
        containers
            .iter()
            .zip(&shares)
            .map(|((n, c), s)| format!("{n} ({c}) {:.1} %", s * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for mut t in trainers {
        t.kill();
    }
    (shares, measured)
}

// The figures themselves (± 2 and ± 3 points, controld within 1 point of the ground truth)
// are the scenario runner's, in release (bench/RESULTS.md). These tests hold what must be
// true on a busy 2-core machine in a debug build: each container is held near its policy,
// and controld's measure follows the ground truth rather than drifting from it.

#[test]
fn fixed_30_alone_gets_30_percent_of_the_engine() {
    let _serial = tessera_tests::timing_lock();
    let (s, measured) = shares("gpu-fixed30", &[("solo", "fixed:30")]);
    assert!(
        (s[0] - 0.30).abs() <= 0.06,
        "fixed:30 alone got {:.1} % of the engine",
        s[0] * 100.0
    );
    assert!(
        (measured[0] - s[0]).abs() <= 0.04,
        "controld measured {measured:?}, the engine says {s:?}"
    );
}

#[test]
fn fixed_20_beside_best_effort_gets_20_and_the_rest_80() {
    let _serial = tessera_tests::timing_lock();
    let s = shares(
        "gpu-fixed20-be",
        &[("fixed", "fixed:20"), ("be", "best-effort")],
    );
    let (s, measured) = (s.0, s.1);
    assert!(
        (s[0] - 0.20).abs() <= 0.05,
        "fixed:20 got {:.1} % of the engine (all: {s:?})",
        s[0] * 100.0
    );
    // Best-effort takes what the guarantee leaves (80 % when the host keeps it fed; a busy
    // debug build feeds it less), and always much more than the fixed one.
    assert!(
        s[1] >= 0.45 && s[1] > s[0] + 0.2,
        "best-effort got {:.1} % of the engine (all: {s:?})",
        s[1] * 100.0
    );
    // Charged in proportion where its kernels ran inside the neighbour's cut ones, the fixed
    // container read 20 % in controld while it had 25-27 % of the engine.
    assert!(
        (measured[0] - s[0]).abs() <= 0.03,
        "controld measured the fixed container at {:.1} %, the engine says {:.1} %",
        measured[0] * 100.0,
        s[0] * 100.0
    );
}
