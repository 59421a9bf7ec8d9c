//! The real-GPU check, run on simgpu as if it were the system driver: `gpuload slice` finds
//! simgpu's time slice, the scenario runner's real-driver mode (no simgpu node, ground truth
//! from the workloads' progress) measures what the simgpu mode measures, and
//! `bench/gpu-check.sh` runs end to end and writes its report; without a GPU and without the
//! override it says so and exits 0.

mod compute;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use tessera_tests::{
    artifacts, assert_success, run_with_timeout, stdout_json, timing_lock, workspace_root, SimNode,
};

/// A folder of its own under the temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("tessera-gpu-check-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn num(doc: &Value, pointer: &str) -> f64 {
    doc.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {pointer} in {doc}"))
}

/// simgpu slices its engine in quanta of `SIMGPU_QUANTUM_US` (here with switches that cost
/// nothing); the event-based measurement must find that quantum for both processes,
/// whatever it is.
/// `gpuload slice` beside `competitors` others with kernels of `kernel_ms`, measuring for
/// `seconds` after `warmup`: its JSON report.
fn slice(node: &SimNode, competitors: u32, kernel_ms: &str, seconds: &str, warmup: &str) -> Value {
    let n = competitors.to_string();
    let args = [
        "slice",
        "--competitors",
        &n,
        "--kernel-ms",
        kernel_ms,
        "--seconds",
        seconds,
        "--warmup",
        warmup,
    ];
    let out = node.gpuload(&args, Duration::from_secs(60));
    let what = format!("gpuload slice --competitors {competitors}");
    assert_success(&out, &what);
    stdout_json(&out, &what)
}

#[test]
fn slice_finds_simgpus_quantum() {
    let _timing = timing_lock();
    for quantum_us in [1000u32, 2500] {
        let quantum = quantum_us.to_string();
        let node = SimNode::new(
            "A100-80GB",
            &[("SIMGPU_QUANTUM_US", &quantum), ("SIMGPU_PROFILE", "free")],
        );
        let doc = slice(&node, 1, "0.1", "1", "0.5");
        let want = f64::from(quantum_us) / 1000.0;
        for kind in ["other_slice", "own_slice"] {
            let median = num(&doc, &format!("/{kind}/median_ms"));
            assert!(
                (median - want).abs() <= 0.1 * want,
                "{kind}: median {median} ms with SIMGPU_QUANTUM_US={quantum_us}: {doc}"
            );
            assert!(num(&doc, &format!("/{kind}/count")) >= 50.0, "{doc}");
        }
        let typical = num(&doc, "/typical_interval_ms");
        assert!((typical - 0.1).abs() < 0.01, "{doc}");
    }
    // Alone, nothing takes the GPU away: no slices. (Kernels of 0.5 ms keep 16 ms queued,
    // so a busy test machine that holds up the host for a while leaves the GPU no gap.)
    let node = SimNode::new("A100-80GB", &[]);
    let doc = slice(&node, 0, "0.5", "0.5", "0.2");
    // Beside a competitor there are 500 switches a second; alone, a stall of simgpu's engine
    // thread on a loaded test machine may leave a rare gap, nothing more.
    let switches = num(&doc, "/switches_per_s");
    assert!(switches < 50.0, "{switches} gaps a second alone: {doc}");
}

/// On the H200 profile, `gpuload slice` beside one, two and three others reads what it read
/// on an H200 (docs/simgpu.md), within 15 %: this process's slice 2.088 ms, the others'
/// time between two of its slices 2.402, 4.65 and 6.89 ms (their slices and the switches).
/// Event times are the engine's, so a loaded host moves them little, as long as simgpu keeps
/// pace with the kernels: the H200 ran 50 µs kernels, but a debug simgpu beside two CPU hogs
/// falls behind those (its executor does host work for each), so these are 0.2 ms.
#[test]
fn the_h200_profile_slices_as_the_h200_did() {
    let _timing = timing_lock();
    for (competitors, other_ms) in [(1, 2.402), (2, 4.65), (3, 6.89)] {
        let node = SimNode::new("H200", &[]);
        let doc = slice(&node, competitors, "0.2", "1", "0.5");
        for (kind, want) in [("other_slice", other_ms), ("own_slice", 2.088)] {
            let median = num(&doc, &format!("/{kind}/median_ms"));
            assert!(
                (median - want).abs() <= 0.15 * want,
                "{kind} beside {competitors}: median {median} ms, the H200 read {want}: {doc}"
            );
        }
    }
}

/// On the H200 profile, `gpuload probe`'s host costs are no lower than the H200's less
/// 15 % (docs/simgpu.md): a model's driver that costs less than the card's hides what a
/// layer's extra calls cost. (A loaded debug host only adds to them.)
#[test]
fn the_h200_profile_costs_what_the_h200_driver_did() {
    let _timing = timing_lock();
    let node = SimNode::new("H200", &[]);
    let out = node.gpuload(
        &["probe", "--calls", "50", "--batches", "10"],
        Duration::from_secs(60),
    );
    assert_success(&out, "gpuload probe");
    let doc = stdout_json(&out, "gpuload probe");
    // The H200's lower figure of its two runs, ns.
    for (call, card) in [
        ("cuLaunchKernel", 2_965.0),
        ("cuEventRecord", 121.0),
        ("cuEventQuery", 1_241.0),
        ("cuEventQuery_pending", 105.0),
        ("cuMemAlloc_cuMemFree_1MiB", 57_443.0),
        ("cuMemGetInfo", 3_948.0),
    ] {
        let median = num(&doc, &format!("/{call}/median_ns"));
        assert!(
            median >= 0.85 * card,
            "{call}: {median} ns, the H200's {card}: {doc}"
        );
    }
}

/// `gpuload probe` times every call it names and keeps the pending event pending.
#[test]
fn probe_reports_each_call() {
    let node = SimNode::new("A100-80GB", &[]);
    let out = node.gpuload(
        &["probe", "--calls", "20", "--batches", "5"],
        Duration::from_secs(60),
    );
    assert_success(&out, "gpuload probe");
    let doc = stdout_json(&out, "gpuload probe");
    for call in [
        "cuLaunchKernel",
        "cuEventRecord",
        "cuEventQuery",
        "cuEventQuery_pending",
        "cuMemAlloc_cuMemFree_1MiB",
        "cuMemGetInfo",
    ] {
        let median = num(&doc, &format!("/{call}/median_ns"));
        assert!(median > 0.0 && median < 1e7, "{call}: {median} ns: {doc}");
        assert!(
            num(&doc, &format!("/{call}/p10_ns")) <= num(&doc, &format!("/{call}/p90_ns")),
            "{doc}"
        );
    }
    assert_eq!(doc["cuEventQuery_pending"]["still_pending"], true, "{doc}");
    assert_eq!(doc["preloaded"], false, "{doc}");
}

/// `tessera-bench scenario NAME` with `env` added, on a node of its own; its stdout table.
fn scenario(name: &str, env: &[(&str, &str)]) -> (Output, String) {
    let node = SimNode::new("A100-80GB", &[]);
    let mut cmd = node.command(compute::bin_dir().join("tessera-bench"));
    cmd.args(["scenario", name, "--seconds", "2", "--no-baseline"])
        .args(["--quiet"])
        .envs(env.iter().copied());
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    (out, table)
}

/// The lowest and highest 1 s window of `fixed-alone`, from the measured column of its
/// table row: `29.8 %–30.1 % over N windows`.
fn window_shares(table: &str) -> (f64, f64) {
    let row = table
        .lines()
        .find(|l| l.contains("fixed:30, each 1 s window"))
        .unwrap_or_else(|| panic!("no fixed-alone row in:\n{table}"));
    let measured = row.split(" over ").next().unwrap_or("");
    let (lo, hi) = measured
        .rsplit_once('–')
        .unwrap_or_else(|| panic!("no range in {row}"));
    let number = |text: Option<&str>| -> f64 {
        text.and_then(|t| t.trim_end_matches('%').trim().parse().ok())
            .unwrap_or_else(|| panic!("no share in {row}"))
    };
    let lo = number(
        lo.trim_end()
            .trim_end_matches('%')
            .split_whitespace()
            .last(),
    );
    let hi = number(hi.split_whitespace().next());
    (lo / 100.0, hi / 100.0)
}

/// The real-driver mode on simgpu: the programs see simgpu only as the system's
/// `libcuda.so.1`, the runner reads no node, and `fixed:30` alone still measures 30 %, as the
/// simgpu mode does on the same machine.
#[test]
fn real_driver_mode_measures_what_simgpu_mode_does() {
    let _timing = timing_lock();
    let (sim, sim_table) = scenario("fixed-alone", &[]);
    assert_success(&sim, "tessera-bench scenario fixed-alone (simgpu)");
    let (system, system_table) = scenario("fixed-alone", &[("TESSERA_BENCH_DRIVER", "system")]);
    assert_success(
        &system,
        "tessera-bench scenario fixed-alone (system driver)",
    );
    let (sim_lo, sim_hi) = window_shares(&sim_table);
    let (lo, hi) = window_shares(&system_table);
    eprintln!("simgpu: {sim_lo}–{sim_hi}; system driver: {lo}–{hi}");
    for (what, v, reference) in [("lowest", lo, sim_lo), ("highest", hi, sim_hi)] {
        assert!(
            (v - 0.30).abs() <= 0.03 && (v - reference).abs() <= 0.03,
            "{what} 1 s window on the system driver {:.1} %, on simgpu {:.1} %:\n{system_table}",
            v * 100.0,
            reference * 100.0
        );
    }
}

/// A bad `TESSERA_BENCH_DRIVER` is refused before anything runs.
#[test]
fn unknown_driver_mode_is_refused() {
    let (out, _) = scenario("fixed-alone", &[("TESSERA_BENCH_DRIVER", "cuda")]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("TESSERA_BENCH_DRIVER"), "{err}");
}

fn script() -> PathBuf {
    workspace_root().join("bench/gpu-check.sh")
}

/// Without a GPU (no override, and a PATH where no nvidia-smi lies) the script says so in
/// one line, exits 0 and writes nothing; without a folder it shows its usage and exits 2.
#[test]
fn without_a_gpu_it_says_so() {
    if Path::new("/dev/nvidiactl").exists() {
        eprintln!("this machine has an NVIDIA device; the no-GPU path is not what it takes");
        return;
    }
    let scratch = Scratch::new("none");
    let target = scratch.0.join("report");
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .arg(&target)
        .env("PATH", "/usr/bin:/bin")
        .env_remove("TESSERA_GPU_CHECK_DRIVER_DIR");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_success(&out, "gpu-check.sh without a GPU");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("no NVIDIA GPU found"), "{text}");
    assert!(!target.exists(), "it wrote {}", target.display());

    let out = run_with_timeout(Command::new("bash").arg(script()), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: bench/gpu-check.sh OUTDIR"));
}

/// The whole check on simgpu as the system driver, with short phases, from a folder of the
/// programs a real-driver run ships (no simgpu among them): every step runs and the report
/// holds the machine, the probe figures, the slice, the lever step and the scenario's table,
/// and names the scenario that could not run.
#[test]
fn the_check_runs_end_to_end_on_simgpu() {
    let _timing = timing_lock();
    let scratch = Scratch::new("sim");
    let target = scratch.0.join("report");
    let bins = scratch.0.join("bin");
    std::fs::create_dir_all(&bins).unwrap();
    for program in ["gpuload", "tessera-bench", "controld", "libtessera.so"] {
        std::fs::copy(compute::bin_dir().join(program), bins.join(program)).unwrap();
    }
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .arg(&target)
        .env("TESSERA_GPU_CHECK_DRIVER_DIR", &artifacts().lib_dir)
        .env("TESSERA_GPU_CHECK_BIN_DIR", &bins)
        .env("TESSERA_GPU_CHECK_QUICK", "1")
        .env("TESSERA_GPU_CHECK_SECONDS", "1")
        .env(
            "TESSERA_GPU_CHECK_SCENARIOS",
            "fixed-alone no-such-scenario",
        )
        // PyTorch (two installs of several GB) is the frameworks script's own test.
        .env("TESSERA_GPU_CHECK_FRAMEWORKS_SECONDS", "0")
        .env("SIMGPU_DEVICES", "A100-80GB");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SIMGPU_STATE") {
            cmd.env_remove(&key);
        }
    }
    let out = run_with_timeout(&mut cmd, Duration::from_secs(300));
    // 1: a step could not run (the scenario that does not exist), which the report names.
    assert_eq!(
        out.status.code(),
        Some(1),
        "gpu-check.sh on simgpu: {out:?}"
    );
    let report = std::fs::read_to_string(target.join("report.md")).unwrap();
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(target.join("results.json")).unwrap())
            .unwrap();
    eprintln!("{report}");
    assert_eq!(
        results["machine"]["gpu"], "NVIDIA A100-SXM4-80GB",
        "{results}"
    );
    assert!(results["machine"]["driver"].is_string(), "{results}");
    for probe in ["probe-bare", "probe-tessera", "probe-tessera-limit"] {
        let median = num(
            &results,
            &format!("/probe/{probe}/0/cuLaunchKernel/median_ns"),
        );
        assert!(median > 0.0, "{probe}");
    }
    assert_eq!(results["probe"]["probe-bare"][0]["preloaded"], false);
    assert_eq!(results["probe"]["probe-tessera"][0]["preloaded"], true);
    assert!(results["probe"]["probe-tessera-limit"][0]["memory_limit"]
        .as_str()
        .is_some_and(|l| l.ends_with("MiB")));
    // The A100 profile: a 2.076 ms slice and two 0.115 ms switches.
    let other = num(&results, "/slice/other_slice/median_ms");
    assert!(
        (other - 2.306).abs() <= 0.15 * 2.306,
        "simgpu's slice measured {other} ms"
    );
    assert_eq!(results["frameworks"]["result"], "skipped", "{results}");
    let scenarios = results["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2, "{results}");
    assert_eq!(scenarios[0]["result"], "pass", "{results}");
    assert_eq!(scenarios[1]["result"], "error", "{results}");
    // The lever step ran, and the library set the slice on simgpu's channel group; its
    // figures on a loaded debug host are the report's to show, not this test's to hold.
    let said = results["lever"]["gpuload"]["root"]["said"].to_string();
    assert!(
        said.contains("GPU time slice 100 µs on channel group"),
        "{results}"
    );
    assert!(num(&results, "/lever/gpuload/alone/p99_ms") > 0.0);
    // With the online side's groups at 16 ms too.
    let online_said = results["lever"]["gpuload"]["both"]["online_said"].to_string();
    assert!(
        online_said.contains("GPU time slice 16000 µs on channel group"),
        "{results}"
    );
    assert!(num(&results, "/lever/gpuload/both/online/p99_ms") > 0.0);
    assert!(num(&results, "/lever/gpuload/bare/offline/kernels_per_s") > 0.0);
    let failing: Vec<&str> = results["failing"]
        .as_array()
        .unwrap_or_else(|| panic!("no failing list: {results}"))
        .iter()
        .filter_map(Value::as_str)
        .filter(|f| !f.starts_with("lever ("))
        .collect();
    assert_eq!(failing.len(), 1, "{results}");
    assert!(
        failing[0].starts_with("no-such-scenario: error (") && !failing[0].contains("(no log)"),
        "{failing:?}"
    );
    for part in [
        "NVIDIA A100-SXM4-80GB",
        "the other process's slice",
        "`cuEventQuery` (event pending)",
        "`cuLaunchKernel` (empty kernel)",
        "### fixed-alone",
        "fixed:30, each 1 s window",
        "TESSERA_GPU_CHECK_DRIVER_DIR",
        "## PyTorch on the real driver",
        "## Online beside offline: the GPU's own time slices",
        "| 100 µs, root |",
        "## What failed",
        "- no-such-scenario: error (",
    ] {
        assert!(report.contains(part), "the report lacks {part}:\n{report}");
    }
}
