//! Kernel time is real time: a `tessera_spin(5 ms)` kernel timed with events measures
//! 5 ms ± 0.3 ms on an idle device, on the default stream and on a created stream.

use std::time::Duration;
use tessera_tests::{
    assert_success, kernels_ptx, linked_client, run_with_timeout, timing_lock, SimNode,
};

fn measurements(ns: u64, repeats: u32) -> Vec<(String, f64)> {
    let exe = linked_client("spin_timing");
    let node = SimNode::new("A100-80GB", &[]);
    let mut cmd = node.command(&exe);
    cmd.arg(kernels_ptx())
        .arg(ns.to_string())
        .arg(repeats.to_string());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_success(&out, "spin_timing");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let found: Vec<(String, f64)> = text
        .lines()
        .filter_map(|l| {
            let (stream, ms) = l.split_once(' ')?;
            Some((stream.to_string(), ms.trim().parse().ok()?))
        })
        .collect();
    assert_eq!(
        found.len(),
        2 * repeats as usize,
        "spin_timing printed:\n{text}"
    );
    found
}

#[test]
fn spin_5ms_measures_5ms_by_events() {
    let _serial = timing_lock();
    let found = measurements(5_000_000, 10);
    for (stream, ms) in &found {
        assert!(
            (4.7..=5.3).contains(ms),
            "tessera_spin(5 ms) on the {stream} stream measured {ms} ms; all: {found:?}"
        );
    }
}

/// The spin is not a constant: a 20 ms spin measures 20 ms.
#[test]
fn spin_duration_follows_its_argument() {
    let _serial = timing_lock();
    let found = measurements(20_000_000, 2);
    for (stream, ms) in &found {
        assert!(
            (19.7..=20.3).contains(ms),
            "tessera_spin(20 ms) on the {stream} stream measured {ms} ms; all: {found:?}"
        );
    }
}
