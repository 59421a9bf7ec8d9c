//! `tessera-demo` on simgpu: it runs its three containers, prints a summary with the share
//! each got, exits 0 and leaves nothing behind.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use tessera_tests::{artifacts, run_with_timeout, TempDir};

/// The `tessera-demo` binary of this build, with what it runs built beside it.
fn demo() -> PathBuf {
    // Builds simgpu, gpuload and libtessera.so into the same profile dir.
    let _ = artifacts();
    PathBuf::from(env!("CARGO_BIN_EXE_tessera-demo"))
}

const CONTAINERS: [&str; 3] = ["inference", "training", "batch"];

/// The demo's leftovers would be `tessera-demo-<its pid>-*` in its temp dir.
fn leftovers(tmp: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("tessera-demo-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn demo_runs_three_containers_and_sums_up() {
    let tmp = TempDir::new("demo");
    let mut cmd = Command::new(demo());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SIMGPU_") {
            cmd.env_remove(&key);
        }
    }
    // SIMGPU_DEVICES makes it use simgpu even on a machine with a GPU.
    cmd.args(["--seconds", "4", "--no-live"])
        .env("SIMGPU_DEVICES", "A100-80GB")
        .env("TMPDIR", tmp.path())
        .env_remove("LD_PRELOAD")
        .env_remove("TESSERA_LOG")
        .env_remove("TESSERA_STATE_DIR");
    let start = Instant::now();
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tessera-demo failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // Its workloads run 4 s; anything near its 20 s grace means it hung.
    assert!(took < Duration::from_secs(20), "the demo took {took:?}");
    let summary = stdout
        .split_once("\nSummary")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no summary:\n{stdout}"));
    for name in CONTAINERS {
        assert!(stdout.contains(name), "{name} not named:\n{stdout}");
        let row = summary
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no summary row for {name}:\n{stdout}"));
        // CONTAINER COMPUTE PRIORITY AVG-SHARE TARGET …
        let share: f64 = row
            .split_whitespace()
            .nth(3)
            .and_then(|s| s.strip_suffix('%'))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no average share in {row:?}"));
        assert!(share > 0.0, "{name} got no GPU time:\n{stdout}");
    }
    assert!(
        summary.contains("p99"),
        "no latency of the online service:\n{stdout}"
    );
    assert!(
        leftovers(tmp.path()).is_empty(),
        "left behind: {:?}",
        leftovers(tmp.path())
    );
}

#[test]
fn a_bad_duration_is_one_line() {
    let out = run_with_timeout(
        Command::new(demo()).args(["--seconds", "soon"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--seconds"), "{stderr}");
}
