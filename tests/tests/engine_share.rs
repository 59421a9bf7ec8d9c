//! One execution engine per device, time-sliced between processes: two saturating `gpuload
//! train` processes on one device each get half of its time less the switches' dead time
//! (the A100 profile: 2.076 ms slices, 0.115 ms switches, so 47.4 % each), and one alone gets
//! at least 95 %. Shares are busy nanoseconds from `simgpu stat --json` over a window in
//! which every trainer runs, divided by the window's length on the node clock.

use serde_json::Value;
use std::time::{Duration, Instant};
use tessera_tests::{
    assert_success, describe, json_u64, stat_process, stdout_json, timing_lock, Running, SimNode,
};

const TRAIN: [&str; 5] = ["train", "--kernel-ms", "2", "--seconds", "5"];

/// Busy ns per trainer (device 0) and the node clock, from one stat.
fn sample(node: &SimNode, pids: &[u32]) -> (Vec<u64>, u64, Value) {
    let stat = node.stat();
    let busy = pids
        .iter()
        .map(|&pid| {
            let p = stat_process(&stat, pid)
                .unwrap_or_else(|| panic!("trainer pid {pid} is not on the node: {stat}"));
            json_u64(p, "/devices/0/busy_ns")
        })
        .collect();
    let taken = json_u64(&stat, "/taken_ns");
    (busy, taken, stat)
}

/// Runs `n` trainers on one device and returns each one's share of the engine (and the
/// device's whole busy share) over a window inside their run.
fn shares(n: usize) -> (Vec<f64>, f64) {
    let node = SimNode::new("A100-80GB", &[]);
    let mut trainers: Vec<Running> = (0..n)
        .map(|i| {
            let mut cmd = node.command(&tessera_tests::artifacts().gpuload);
            cmd.args(TRAIN);
            Running::spawn_captured(&mut cmd, &format!("gpuload train #{i}"))
        })
        .collect();
    let pids: Vec<u32> = trainers.iter().map(Running::pid).collect();
    let started = Instant::now();

    // The window opens once every trainer has run kernels, so start-up is not counted.
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the trainers did not all start running kernels within 3 s"
        );
        for t in &mut trainers {
            if let Some(status) = t.try_status() {
                panic!("a trainer ended early: {}", describe(status));
            }
        }
        let stat = node.simgpu(&["stat", "--json"]);
        if stat.status.success() {
            let stat: Value = serde_json::from_slice(&stat.stdout).expect("stat JSON");
            let running = pids.iter().all(|&pid| {
                stat_process(&stat, pid)
                    .and_then(|p| p.pointer("/devices/0/busy_ns"))
                    .and_then(Value::as_u64)
                    .is_some_and(|b| b > 0)
            });
            if running {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let (busy0, t0, stat0) = sample(&node, &pids);
    let device0 = json_u64(&stat0, "/devices/0/busy_ns");
    std::thread::sleep(Duration::from_millis(2500));
    let (busy1, t1, stat1) = sample(&node, &pids);
    let device1 = json_u64(&stat1, "/devices/0/busy_ns");
    for t in &mut trainers {
        assert!(
            t.try_status().is_none(),
            "a trainer ended inside the measuring window"
        );
    }
    let window = (t1 - t0) as f64;
    let shares: Vec<f64> = busy0
        .iter()
        .zip(&busy1)
        .map(|(a, b)| (b - a) as f64 / window)
        .collect();
    let device_share = (device1 - device0) as f64 / window;
    eprintln!(
        "{n} trainer(s) over {:.2} s: shares {shares:?}, device busy {device_share:.4}",
        window / 1e9
    );

    for (i, t) in trainers.into_iter().enumerate() {
        let out = t.finish(Duration::from_secs(20));
        assert_success(&out, &format!("gpuload train #{i}"));
        let doc = stdout_json(&out, "gpuload train");
        assert_eq!(doc["mode"], "train", "{doc}");
    }
    (shares, device_share)
}

#[test]
fn two_trainers_share_the_engine_equally_and_lose_the_switches() {
    let _serial = timing_lock();
    let (shares, device) = shares(2);
    let slicing = tessera_region::slicing::A100;
    let busy = slicing.timeslice_ns as f64 / (slicing.timeslice_ns + slicing.switch_ns) as f64;
    for (i, s) in shares.iter().enumerate() {
        assert!(
            (s - busy / 2.0).abs() <= 0.05,
            "trainer {i} got {:.1} % of the engine (all: {shares:?}, device busy {:.1} %)",
            s * 100.0,
            device * 100.0
        );
    }
    // A switch after every slice, in which no kernel runs.
    assert!(
        (device - busy).abs() <= 0.02,
        "with two saturating trainers the engine was busy {:.1} %, not {:.1} %",
        device * 100.0,
        busy * 100.0
    );
}

#[test]
fn one_trainer_alone_gets_the_whole_engine() {
    let _serial = timing_lock();
    let (shares, _) = shares(1);
    assert!(
        shares[0] >= 0.95,
        "a trainer alone got {:.1} % of the engine",
        shares[0] * 100.0
    );
}
