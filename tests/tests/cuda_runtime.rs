//! NVIDIA's own CUDA runtime, `libcudart`, on simgpu and under `libtessera.so`: the path
//! nearly every CUDA application takes to the driver (`dlopen("libcuda.so.1")`, then
//! `cuGetProcAddress` for everything, and the driver's private export tables).
//!
//! The runtimes come from the PyPI wheels `nvidia-cuda-runtime-cu12` (shared and static
//! 12.x), `nvidia-cuda-runtime-cu11` (shared 11.8) and `nvidia-cuda-runtime` (shared 13.x),
//! installed from `tests/requirements.txt`. The client, `tests/clients/cudart_client.c`, is compiled
//! against each and registers, as nvcc's generated code would, a fat binary wrapping the PTX
//! of the test kernels.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use tessera_tests::{
    assert_success, compile_client, json_u64, kernels_ptx, python_with, run_with_timeout,
    workspace_root, Container, Running, SimNode,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// Each context's device memory on the test nodes.
const CONTEXT: u64 = 64 * MIB;
/// The spin kernel's time in the runtime's first test.
const SPIN_NS: u64 = 200_000_000;

/// One build of NVIDIA's runtime.
#[derive(Debug, Clone, Copy)]
enum Runtime {
    /// `libcudart.so.12`.
    Shared12,
    /// `libcudart_static.a` (12.x), linked into the program.
    Static12,
    /// `libcudart.so.11.0` (11.8).
    Shared11,
    /// `libcudart.so.13`.
    Shared13,
}

impl Runtime {
    fn name(self) -> &'static str {
        match self {
            Runtime::Shared12 => "libcudart.so.12",
            Runtime::Static12 => "libcudart_static.a (12)",
            Runtime::Shared11 => "libcudart.so.11.0 (11.8)",
            Runtime::Shared13 => "libcudart.so.13",
        }
    }

    /// The runtime's major version, as `cudaRuntimeGetVersion` reports it (÷ 1000).
    fn major(self) -> u64 {
        match self {
            Runtime::Shared12 | Runtime::Static12 => 12,
            Runtime::Shared11 => 11,
            Runtime::Shared13 => 13,
        }
    }

    /// The client, built against this runtime.
    fn client(self) -> PathBuf {
        let lib = match self {
            Runtime::Shared13 => runtime_13_lib_dir(),
            _ => runtime_lib_dir(),
        };
        let file = |name: &str| lib.join(name).display().to_string();
        let rpath = format!("-Wl,-rpath,{}", lib.display());
        let (name, flags) = match self {
            Runtime::Shared12 => ("cudart_client_12", vec![file("libcudart.so.12"), rpath]),
            Runtime::Static12 => (
                "cudart_client_12_static",
                vec![
                    file("libcudart_static.a"),
                    "-lpthread".into(),
                    "-ldl".into(),
                    "-lrt".into(),
                ],
            ),
            Runtime::Shared11 => ("cudart_client_11", vec![file("libcudart.so.11.0"), rpath]),
            Runtime::Shared13 => ("cudart_client_13", vec![file("libcudart.so.13"), rpath]),
        };
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        compile_client(name, &["cudart_client.c"], &flags)
    }
}

/// The files every runtime test needs from the wheels.
const RUNTIME_FILES: [&str; 3] = ["libcudart.so.12", "libcudart_static.a", "libcudart.so.11.0"];

/// The directory `sub` (in site-packages) of `python`'s environment, if it holds all of
/// `files`.
fn find_lib_dir(python: &Path, sub: &str, files: &[&str]) -> Option<PathBuf> {
    let out = Command::new(python)
        .args([
            "-c",
            "import site, sys\n\
             for p in site.getsitepackages() + [site.getusersitepackages()] + sys.path:\n    print(p)",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|p| Path::new(p).join(sub))
        .find(|dir| files.iter().all(|f| dir.join(f).exists()))
}

/// Where the 11.8 and 12.x runtimes are: in the Python environment the tests use (`.ci/run`
/// installs `tests/requirements.txt` there, or the tests install it into a virtual
/// environment).
fn runtime_lib_dir() -> PathBuf {
    let python = python_with("import nvidia.cuda_runtime");
    find_lib_dir(&python, "nvidia/cuda_runtime/lib", &RUNTIME_FILES).unwrap_or_else(|| {
        panic!(
            "{} has no nvidia/cuda_runtime/lib with {:?}; install tests/requirements.txt",
            python.display(),
            RUNTIME_FILES
        )
    })
}

/// Where the 13.x runtime is (its wheel puts it under `nvidia/cu13/lib`).
fn runtime_13_lib_dir() -> PathBuf {
    let python = python_with("import nvidia.cu13");
    find_lib_dir(&python, "nvidia/cu13/lib", &["libcudart.so.13"]).unwrap_or_else(|| {
        panic!(
            "{} has no nvidia/cu13/lib/libcudart.so.13; install tests/requirements.txt",
            python.display()
        )
    })
}

fn node() -> SimNode {
    SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")])
}

/// The JSON document of the client's line `<tag> <json>`.
fn report(out: &Output, tag: &str, who: &str) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(tag).and_then(|l| l.strip_prefix(' ')))
        .unwrap_or_else(|| {
            panic!(
                "{who}: no `{tag}` report; stdout:\n{text}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{who}: bad JSON ({e}): {line}"))
}

/// Runs the client in `mode` with `args` through `cmd` and returns its report.
fn run_client(mut cmd: Command, mode: &str, args: &[&str], who: &str) -> Value {
    cmd.arg(mode).args(args);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(120));
    assert_success(&out, who);
    report(&out, mode, who)
}

fn ptx() -> String {
    kernels_ptx().display().to_string()
}

/// With nothing preloaded, the runtime initializes on simgpu, counts the
/// device, allocates, copies, reports memory, allocates stream-ordered, and runs the kernels
/// of a registered fat binary (through `cudaLaunchKernel` and `cudaLaunchKernel_ptsz`, and
/// again after `cudaDeviceReset`); the spin kernel's time shows in `simgpu stat`.
fn runs_on_simgpu(runtime: Runtime) {
    let who = runtime.name();
    let exe = runtime.client();
    let node = node();
    let spin = SPIN_NS.to_string();
    let doc = run_client(node.command(&exe), "run", &[&ptx(), &spin], who);
    assert_eq!(json_u64(&doc, "/device_count"), 1, "{who}: {doc}");
    assert_eq!(
        json_u64(&doc, "/runtime_version") / 1000,
        runtime.major(),
        "{who}: {doc}"
    );
    assert_eq!(
        json_u64(&doc, "/driver_version"),
        simgpu::CUDA_DRIVER_VERSION as u64,
        "{who}: {doc}"
    );
    assert_eq!(json_u64(&doc, "/total"), 4 * GIB, "{who}: total: {doc}");
    assert_eq!(
        json_u64(&doc, "/free"),
        4 * GIB - CONTEXT,
        "{who}: free with the primary context only: {doc}"
    );
    assert!(
        json_u64(&doc, "/free_allocated") <= 4 * GIB - CONTEXT - 256 * 1024,
        "{who}: cudaMalloc of 256 KiB did not show in cudaMemGetInfo: {doc}"
    );
    for check in ["copied", "filled", "filled_ptsz", "filled_after_reset"] {
        assert_eq!(doc[check], true, "{who}: {check}: {doc}");
    }
    assert_eq!(
        json_u64(&doc, "/free_after_reset"),
        4 * GIB - CONTEXT,
        "{who}: after cudaDeviceReset, one context again: {doc}"
    );
    assert_eq!(doc["launch_counter"], -1, "{who}: no libtessera: {doc}");

    let stat = node.stat();
    let busy = json_u64(&stat, "/devices/0/busy_ns");
    assert!(
        busy >= SPIN_NS,
        "{who}: the {SPIN_NS} ns spin kernel should show in the device's busy time: {stat}"
    );
}

#[test]
fn cudart_12_runs_on_simgpu() {
    runs_on_simgpu(Runtime::Shared12);
}

#[test]
fn cudart_12_static_runs_on_simgpu() {
    runs_on_simgpu(Runtime::Static12);
}

#[test]
fn cudart_11_8_runs_on_simgpu() {
    runs_on_simgpu(Runtime::Shared11);
}

#[test]
fn cudart_13_runs_on_simgpu() {
    runs_on_simgpu(Runtime::Shared13);
}

#[test]
fn cudart_13_is_capped_by_libtessera() {
    capped_by_libtessera(Runtime::Shared13);
}

#[test]
fn cudart_13_primary_context_is_counted_exactly() {
    primary_context_is_counted_exactly(Runtime::Shared13);
}

fn capped(node: &SimNode) -> Container<'_> {
    Container::new(node, Some("1GiB")).env("TESSERA_DEBUG_COUNTERS", "1")
}

/// Under `libtessera.so` with a 1 GiB cap, `cudaMalloc` succeeds up to
/// exactly the cap (with the context's memory) and then fails with
/// `cudaErrorMemoryAllocation`; `cudaMemGetInfo` reports the cap; the kernels still run.
fn capped_by_libtessera(runtime: Runtime) {
    let who = runtime.name();
    let exe = runtime.client();
    let node = node();
    let container = capped(&node);
    let doc = run_client(container.command(&exe), "capfill", &[&ptx()], who);
    assert_eq!(json_u64(&doc, "/total_before"), GIB, "{who}: total: {doc}");
    assert_eq!(
        json_u64(&doc, "/free_before"),
        GIB - CONTEXT,
        "{who}: free = the cap less the context: {doc}"
    );
    assert_eq!(
        json_u64(&doc, "/allocated") + CONTEXT,
        GIB,
        "{who}: allocations plus the context reach the cap exactly: {doc}"
    );
    assert_eq!(
        json_u64(&doc, "/one_more_rc"),
        2,
        "{who}: one more byte fails with cudaErrorMemoryAllocation: {doc}"
    );
    assert_eq!(json_u64(&doc, "/free_full"), 0, "{who}: {doc}");
    assert_eq!(json_u64(&doc, "/total_full"), GIB, "{who}: {doc}");
    assert_eq!(doc["filled"], true, "{who}: fill kernel at the cap: {doc}");
    assert_eq!(doc["filled_ptsz"], true, "{who}: per-thread fill: {doc}");
    assert_eq!(
        json_u64(&doc, "/free_after"),
        GIB - CONTEXT,
        "{who}: all freed: {doc}"
    );

    let doc = run_client(container.command(&exe), "run", &[&ptx(), "1000000"], who);
    assert_eq!(json_u64(&doc, "/total"), GIB, "{who}: total: {doc}");
    assert_eq!(json_u64(&doc, "/free"), GIB - CONTEXT, "{who}: free: {doc}");
    for check in ["copied", "filled", "filled_ptsz", "filled_after_reset"] {
        assert_eq!(doc[check], true, "{who}: {check}: {doc}");
    }
    assert_eq!(
        json_u64(&doc, "/free_after_reset"),
        GIB - CONTEXT,
        "{who}: after cudaDeviceReset, one context again: {doc}"
    );
}

#[test]
fn cudart_12_is_capped_by_libtessera() {
    capped_by_libtessera(Runtime::Shared12);
}

#[test]
fn cudart_12_static_is_capped_by_libtessera() {
    capped_by_libtessera(Runtime::Static12);
}

#[test]
fn cudart_11_8_is_capped_by_libtessera() {
    capped_by_libtessera(Runtime::Shared11);
}

/// The runtime's per-thread-default-stream launch reaches libtessera's
/// `cuLaunchKernel_ptsz` wrapper, and the legacy launches its `cuLaunchKernel` one (two
/// fills and a spin).
fn ptsz_launch_is_intercepted(runtime: Runtime) {
    let who = runtime.name();
    let exe = runtime.client();
    let node = node();
    let container = capped(&node);
    let doc = run_client(container.command(&exe), "run", &[&ptx(), "1000000"], who);
    assert_eq!(
        json_u64(&doc, "/launch_ptsz_counter"),
        1,
        "{who}: cudaLaunchKernel_ptsz should reach libtessera's cuLaunchKernel_ptsz: {doc}"
    );
    assert_eq!(
        json_u64(&doc, "/launch_counter"),
        3,
        "{who}: cudaLaunchKernel should reach libtessera's cuLaunchKernel: {doc}"
    );
}

#[test]
fn cudart_12_ptsz_launch_reaches_the_ptsz_wrapper() {
    ptsz_launch_is_intercepted(Runtime::Shared12);
}

#[test]
fn cudart_12_static_ptsz_launch_reaches_the_ptsz_wrapper() {
    ptsz_launch_is_intercepted(Runtime::Static12);
}

#[test]
fn cudart_11_8_ptsz_launch_reaches_the_ptsz_wrapper() {
    ptsz_launch_is_intercepted(Runtime::Shared11);
}

/// The symbols libtessera.so exports as hooks, and the base names they belong to, from its
/// hook table.
fn hooks() -> (BTreeSet<String>, BTreeSet<String>) {
    let table = std::fs::read_to_string(workspace_root().join("intercept/src/hooks/table.rs"))
        .expect("read the hook table");
    let after = |marker: &str| -> BTreeSet<String> {
        table
            .split(marker)
            .skip(1)
            .map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            })
            .filter(|name: &String| name.starts_with("cu"))
            .collect()
    };
    (after("cuda fn "), after("["))
}

/// Every request the runtime makes through `cuGetProcAddress_v2` (as simgpu
/// records them), made again the way the runtime makes it, comes back as libtessera's
/// wrapper of the same revision and variant where libtessera hooks that symbol, and as the
/// driver's own function otherwise.
fn proc_address_answers(runtime: Runtime) {
    let who = runtime.name();
    let exe = runtime.client();
    let node = node();
    let container = capped(&node);
    let requests = std::env::temp_dir().join(format!(
        "tessera-test-{}-{:?}.requests",
        std::process::id(),
        runtime
    ));
    let _ = std::fs::remove_file(&requests);
    let mut cmd = container.command(&exe);
    cmd.env("SIMGPU_TRACE_PROC_ADDRESS", &requests);
    run_client(cmd, "run", &[&ptx(), "1000000"], who);
    let requests_path = requests.display().to_string();
    let answers = run_client(container.command(&exe), "procmap", &[&requests_path], who);
    let _ = std::fs::remove_file(&requests);

    let answers = answers.as_array().expect("procmap prints an array");
    let (hooked, hooked_bases) = hooks();
    let mut asked = BTreeSet::new();
    let mut wrong = Vec::new();
    let mut older = BTreeSet::new();
    for a in answers {
        let name = a["name"].as_str().unwrap_or_default();
        let driver = a["driver_symbol"].as_str().unwrap_or_default();
        let library = a["library"].as_str().unwrap_or_default();
        let symbol = a["symbol"].as_str().unwrap_or_default();
        let from_tessera = library.ends_with("/libtessera.so");
        if driver == "-" {
            if a["rc"] == 0 {
                wrong.push(format!("{a}: the driver has no answer, but this found one"));
            }
            continue;
        }
        asked.insert(driver.to_string());
        let right = if hooked.contains(driver) {
            from_tessera && symbol == driver
        } else {
            !from_tessera && symbol == driver && a["rc"] == 0
        };
        if !right {
            wrong.push(format!(
                "{name} @ {} flags {} should be {}'s {driver}, got {symbol} in {library}",
                a["version"],
                a["flags"],
                if hooked.contains(driver) {
                    "libtessera"
                } else {
                    "the driver"
                }
            ));
        }
        if hooked_bases.contains(name) && !hooked.contains(driver) {
            older.insert(name.to_string());
        }
    }
    eprintln!(
        "{who} asked cuGetProcAddress_v2 for {} symbols; hooked among them: {:?}",
        asked.len(),
        asked.intersection(&hooked).collect::<Vec<_>>()
    );
    assert!(
        wrong.is_empty(),
        "{who}: wrong answers:\n{}",
        wrong.join("\n")
    );
    for needed in [
        "cuGetProcAddress_v2",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemGetInfo_v2",
        "cuMemAllocAsync",
        "cuMemAllocAsync_ptsz",
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuDevicePrimaryCtxRetain",
    ] {
        assert!(
            asked.contains(needed),
            "{who}: the runtime was expected to ask for {needed}; it asked for {asked:?}"
        );
    }
    let unexpected: Vec<_> = older.iter().collect();
    assert!(
        unexpected.is_empty(),
        "{who}: hooked functions asked for at a revision libtessera does not hook: {unexpected:?}"
    );
}

#[test]
fn cudart_12_proc_address_answers_are_the_wrappers() {
    proc_address_answers(Runtime::Shared12);
}

#[test]
fn cudart_12_static_proc_address_answers_are_the_wrappers() {
    proc_address_answers(Runtime::Static12);
}

/// The runtime's primary context beside the driver API's, under a cap: after each step of
/// the client's `primary` mode (the runtime's own retain, which also asks the driver for the
/// context through its export table; a driver-API retain and release; `cudaDeviceReset`; the
/// runtime again) the container counts exactly what simgpu holds for the process, and the
/// context is counted exactly while it exists.
fn primary_context_is_counted_exactly(runtime: Runtime) {
    let who = runtime.name();
    let exe = runtime.client();
    let node = node();
    let container = capped(&node);
    let mut cmd = container.command(&exe);
    cmd.arg("primary");
    let mut client = Running::spawn_interactive(&mut cmd, &format!("primary ({who})"));
    let steps = [
        ("runtime", true),
        ("driver_retain", true),
        ("driver_release", true),
        ("device_reset", false),
        ("runtime_again", true),
    ];
    for (name, alive) in steps {
        let step = client.wait_for_json("step ", Duration::from_secs(120));
        assert_eq!(step["name"], name, "{who}: steps out of order: {step}");
        assert_eq!(json_u64(&step, "/rc"), 0, "{who}: `{name}` failed: {step}");
        let truth = simgpu::node::Node::open_existing(node.state()).expect("open the node");
        let region = tessera_region::Region::open(container.region()).expect("open the region");
        // The node holds this one process: its device figure is the process's.
        let held = truth.memory_used(0);
        assert_eq!(
            region.memory_used(0),
            held,
            "{who}, after `{name}`: the container's count against the driver's figure"
        );
        assert_eq!(
            held,
            if alive { CONTEXT } else { 0 },
            "{who}, after `{name}`: the context should {}",
            if alive { "exist" } else { "be gone" }
        );
        client.send_line("go");
    }
    let status = client.wait(Duration::from_secs(30));
    assert!(status.success(), "{who}: the client failed ({status})");
}

#[test]
fn cudart_12_primary_context_is_counted_exactly() {
    primary_context_is_counted_exactly(Runtime::Shared12);
}

#[test]
fn cudart_12_static_primary_context_is_counted_exactly() {
    primary_context_is_counted_exactly(Runtime::Static12);
}

#[test]
fn cudart_11_8_primary_context_is_counted_exactly() {
    primary_context_is_counted_exactly(Runtime::Shared11);
}

/// A container given GPU 1 of a two-GPU node: the runtime starts (the driver's own view of
/// the devices agrees with the runtime's, which it checks), sees one device, and its memory
/// is held on node GPU 1 and counted there.
fn runs_on_the_container_s_gpu_only(runtime: Runtime) {
    let who = runtime.name();
    let exe = runtime.client();
    let node = SimNode::new(
        "Small:4GiB:8,Small:4GiB:8",
        &[("SIMGPU_CONTEXT_MEMORY", "64MiB")],
    );
    let container = Container::new(&node, None);
    let mut caps = [Some(0); tessera_region::MAX_DEVICES];
    caps[1] = Some(GIB);
    let region = tessera_region::Region::open_or_create(
        container.region(),
        &tessera_region::RegionInit {
            name: "second-gpu".to_string(),
            memory_caps: caps,
        },
    )
    .expect("create the container's region");
    region.set_gpus(Some(1 << 1));
    let doc = run_client(container.command(&exe), "capfill", &[&ptx()], who);
    assert_eq!(
        json_u64(&doc, "/total_before"),
        GIB,
        "{who}: the GPU's cap: {doc}"
    );
    assert_eq!(doc["filled"], true, "{who}: {doc}");
    let doc = run_client(container.command(&exe), "run", &[&ptx(), "1000000"], who);
    assert_eq!(
        json_u64(&doc, "/device_count"),
        1,
        "{who}: one device: {doc}"
    );
    let stat = node.stat();
    assert!(
        json_u64(&stat, "/devices/1/busy_ns") >= 1_000_000,
        "{who}: the kernels ran on node GPU 1: {stat}"
    );
    assert_eq!(
        json_u64(&stat, "/devices/0/busy_ns"),
        0,
        "{who}: nothing ran on node GPU 0: {stat}"
    );
}

#[test]
fn cudart_12_runs_on_the_container_s_gpu_only() {
    runs_on_the_container_s_gpu_only(Runtime::Shared12);
}

#[test]
fn cudart_13_runs_on_the_container_s_gpu_only() {
    runs_on_the_container_s_gpu_only(Runtime::Shared13);
}
