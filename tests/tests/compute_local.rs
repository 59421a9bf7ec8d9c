//! Compute shares without a daemon: `TESSERA_COMPUTE=fixed:Q` makes the processes of one
//! region enforce Q% of the device among themselves. Shares are ground truth: busy ns from
//! `simgpu stat --json` over a window, divided by the window's length on the node clock.

use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_tests::{
    artifacts, assert_success, describe, json_u64, stat_process, stdout_json, tessera_lines,
    timing_lock, Container, Running, SimNode,
};

/// Starts `n` trainers in `container` and waits until each has run kernels.
fn start_trainers(container: &Container<'_>, n: usize, args: &[&str]) -> Vec<Running> {
    let mut trainers: Vec<Running> = (0..n)
        .map(|i| {
            let mut cmd = container.command(&artifacts().gpuload);
            cmd.arg("train").args(args);
            Running::spawn_captured(&mut cmd, &format!("gpuload train #{i}"))
        })
        .collect();
    let pids: Vec<u32> = trainers.iter().map(Running::pid).collect();
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the trainers did not all start running kernels within 5 s"
        );
        for t in &mut trainers {
            if let Some(status) = t.try_status() {
                panic!("a trainer ended early: {}", describe(status));
            }
        }
        let stat = container.node().simgpu(&["stat", "--json"]);
        if stat.status.success() {
            let stat: Value = serde_json::from_slice(&stat.stdout).expect("stat JSON");
            let running = pids.iter().all(|&pid| {
                stat_process(&stat, pid)
                    .and_then(|p| p.pointer("/devices/0/busy_ns"))
                    .and_then(Value::as_u64)
                    .is_some_and(|b| b > 0)
            });
            if running {
                return trainers;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Device 0's busy ns and the node clock.
fn sample(node: &SimNode) -> (u64, u64) {
    let stat = node.stat();
    (
        json_u64(&stat, "/devices/0/busy_ns"),
        json_u64(&stat, "/taken_ns"),
    )
}

/// The device's busy share in `windows` consecutive windows of `each`.
fn shares(node: &SimNode, windows: usize, each: Duration) -> Vec<f64> {
    let mut last = sample(node);
    (0..windows)
        .map(|_| {
            std::thread::sleep(each);
            let now = sample(node);
            let share = (now.0 - last.0) as f64 / (now.1 - last.1) as f64;
            last = now;
            share
        })
        .collect()
}

fn finish(trainers: Vec<Running>) -> Vec<Value> {
    trainers
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let out = t.finish(Duration::from_secs(30));
            assert_success(&out, &format!("gpuload train #{i}"));
            stdout_json(&out, "gpuload train")
        })
        .collect()
}

#[test]
fn fixed_30_alone_gets_30_percent_in_every_second() {
    let _serial = timing_lock();
    let node = SimNode::new("A100-80GB", &[]);
    let container = Container::new(&node, None).env("TESSERA_COMPUTE", "fixed:30");
    let trainers = start_trainers(&container, 1, &["--kernel-ms", "1", "--seconds", "7"]);
    std::thread::sleep(Duration::from_millis(200));
    let shares = shares(&node, 5, Duration::from_secs(1));
    eprintln!("fixed:30, 1 ms kernels, shares per second: {shares:?}");
    finish(trainers);
    // The figure (30 ± 2 % in every second) is the runner's, in release; a busy debug host
    // holds it within a few points.
    for (i, s) in shares.iter().enumerate() {
        assert!(
            (0.23..=0.37).contains(s),
            "second {i}: {:.1} % (all: {shares:?})",
            s * 100.0
        );
    }
}

#[test]
fn the_processes_of_one_region_share_the_30_percent() {
    let _serial = timing_lock();
    let node = SimNode::new("A100-80GB", &[]);
    let container = Container::new(&node, None).env("TESSERA_COMPUTE", "fixed:30");
    let trainers = start_trainers(&container, 2, &["--kernel-ms", "1", "--seconds", "6"]);
    std::thread::sleep(Duration::from_millis(200));
    let shares = shares(&node, 1, Duration::from_secs(4));
    eprintln!("fixed:30, two processes, 1 ms kernels: {shares:?}");
    finish(trainers);
    // Their event intervals include each other's time slices; the overlap of the
    // container's own spans is given back.
    assert!(
        (0.23..=0.37).contains(&shares[0]),
        "two processes together got {:.1} %",
        shares[0] * 100.0
    );
}

#[test]
fn long_kernels_are_charged_as_debt_and_keep_the_long_run_share() {
    let _serial = timing_lock();
    let node = SimNode::new("A100-80GB", &[]);
    let container = Container::new(&node, None).env("TESSERA_COMPUTE", "fixed:30");
    let trainers = start_trainers(&container, 1, &["--kernel-ms", "50", "--seconds", "9"]);
    std::thread::sleep(Duration::from_millis(300));
    let shares = shares(&node, 1, Duration::from_secs(7));
    eprintln!("fixed:30, 50 ms kernels, over 7 s: {shares:?}");
    finish(trainers);
    // The figure (30 ± 3 %) is the runner's (long-kernels), in release; a debug build on a
    // host whose cores are all taken has been seen a few points above it.
    assert!(
        (0.25..=0.36).contains(&shares[0]),
        "50 ms kernels under fixed:30 got {:.1} %",
        shares[0] * 100.0
    );
}

/// Kernels per second of a trainer of 20 µs kernels, with `command` made by `make`.
fn throughput(node: &SimNode, cmd: &mut std::process::Command) -> (f64, Vec<String>) {
    let _ = node;
    cmd.args(["train", "--kernel-ms", "0.02", "--seconds", "2"]);
    let out = tessera_tests::run_with_timeout(cmd, Duration::from_secs(30));
    assert_success(&out, "gpuload train (20 µs kernels)");
    let doc = stdout_json(&out, "gpuload train");
    (
        doc["kernels_per_s"].as_f64().expect("kernels_per_s"),
        tessera_lines(&out),
    )
}

#[test]
fn an_unlimited_container_takes_the_fast_path() {
    let _serial = timing_lock();
    let node = SimNode::new("A100-80GB", &[]);
    let container = Container::new(&node, None);
    let (bare, _) = throughput(&node, &mut node.command(&artifacts().gpuload));
    let (preloaded, _) = throughput(&node, &mut container.command(&artifacts().gpuload));
    // The speed is the runner's to measure (bench/RESULTS.md, release); here, that no launch
    // took the gate: nothing admitted, nothing measured, no event recorded.
    eprintln!("20 µs kernels: {bare:.0}/s without the library, {preloaded:.0}/s with it");
    let region = tessera_region::Region::open(container.region()).expect("the region");
    let a = region.compute(0);
    assert_eq!(region.compute_limited(), 0);
    assert_eq!(a.launches.load(Ordering::Relaxed), 0, "launches were gated");
    assert_eq!(
        a.measured_ns.load(Ordering::Relaxed),
        0,
        "launches were measured"
    );
    assert!(preloaded > 0.0 && bare > 0.0);
}

#[test]
fn a_malformed_share_is_one_error_line_and_leaves_compute_unlimited() {
    let _serial = timing_lock();
    let node = SimNode::new("A100-80GB", &[]);
    let container = Container::new(&node, None).env("TESSERA_COMPUTE", "fixed:300");
    let mut cmd = container.command(&artifacts().gpuload);
    cmd.args(["train", "--kernel-ms", "1", "--seconds", "1"]);
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(30));
    assert_success(&out, "gpuload train with TESSERA_COMPUTE=fixed:300");
    let lines = tessera_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("fixed:Q"), "{lines:?}");
    let doc = stdout_json(&out, "gpuload train");
    // Unlimited: no gate, far beyond the 30 % a fixed:30 would get (the whole GPU where
    // the host keeps up).
    let fraction = doc["gpu_fraction"].as_f64().unwrap();
    assert!(
        fraction > 0.5,
        "the unlimited trainer got {fraction}: {doc}"
    );
    let region = tessera_region::Region::open(container.region()).expect("the region");
    assert_eq!(region.compute_limited(), 0, "compute limited anyway");
}
