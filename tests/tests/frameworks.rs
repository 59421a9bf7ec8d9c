//! The Python GPU frameworks people run, on simgpu, with and without `libtessera.so`: CuPy
//! (`cupy-cuda12x`) and numba-cuda, installed from `tests/requirements.txt`. Each runs
//! `tests/clients/framework_client.py`, which reports the device memory the framework sees and
//! allocates through the framework's own allocator until it raises its own out-of-memory
//! error. Under a cap, the framework sees the cap as the device's total and the cap less its
//! context as free, stops at the cap with its usual error, and simgpu holds exactly what the
//! container counts; without one, it sees the whole device.
//!
//! Kernels: the client also compiles and launches one small kernel of each framework (CuPy:
//! an NVRTC cubin and its reduction module; numba: a cubin linked by nvJitLink, or, as on a
//! machine without nvJitLink, PTX linked by the driver's `cuLink*`), which must run without
//! error. Results of kernels are never computed on simgpu: only that they ran is asserted.

use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tessera_region::Region;
use tessera_tests::{json_u64, python_with, workspace_root, Container, Running, SimNode};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// A context's cost on these nodes: no round number, so that a count that forgets it shows.
const CONTEXT: u64 = 50_000_000;
/// The block each framework allocates at a time.
const BLOCK: u64 = 64 * MIB;
/// The simulated device's memory.
const DEVICE: u64 = 4 * GIB;

fn node() -> SimNode {
    SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "50000000")])
}

/// A Python with both frameworks.
fn python() -> PathBuf {
    python_with("import cupy, numba.cuda")
}

#[derive(Clone, Copy)]
enum Framework {
    Cupy,
    Numba,
    /// numba as where nvJitLink is not installed: PTX linked by the driver.
    NumbaCulink,
}

impl Framework {
    fn arg(self) -> &'static str {
        match self {
            Framework::Cupy => "cupy",
            Framework::Numba => "numba",
            Framework::NumbaCulink => "numba-culink",
        }
    }

    /// The framework's own out-of-memory error, as `module.qualname`.
    fn oom_error(self) -> &'static str {
        match self {
            Framework::Cupy => "cupy.cuda.memory.OutOfMemoryError",
            Framework::Numba | Framework::NumbaCulink => "numba.cuda.cudadrv.driver.CudaAPIError",
        }
    }
}

/// Runs the client for `framework` through `cmd`, returns its `full` report after checking,
/// while it holds its memory, that simgpu holds for it what `counted` (if any) says the
/// container holds; then lets it free everything and returns the `done` report too.
fn run(
    framework: Framework,
    mut cmd: std::process::Command,
    node: &SimNode,
    region: Option<&std::path::Path>,
) -> (Value, Value, u64) {
    cmd.arg(workspace_root().join("tests/clients/framework_client.py"))
        .arg(framework.arg())
        .arg(BLOCK.to_string());
    let mut client = Running::spawn_interactive(&mut cmd, framework.arg());
    let full = client.wait_for_json("full ", Duration::from_secs(300));
    let truth = simgpu::node::Node::open_existing(node.state()).expect("open the node");
    // The node holds this one process: its device figure is the process's.
    let held = truth.memory_used(0);
    if let Some(region) = region {
        let region = Region::open(region).expect("open the container's region");
        assert_eq!(
            region.memory_used(0),
            held,
            "{}: the container's count against the driver's figure: {full}",
            framework.arg()
        );
    }
    client.send_line("go");
    let done = client.wait_for_json("done ", Duration::from_secs(120));
    let status = client.wait(Duration::from_secs(60));
    assert!(
        status.success(),
        "{}: the client failed ({status})",
        framework.arg()
    );
    eprintln!(
        "{}: {full} {done} (simgpu held {held} bytes)",
        framework.arg()
    );
    (full, done, held)
}

/// What every run must show, with `limit` the device's memory or the cap.
fn check(framework: Framework, full: &Value, held: u64, limit: u64) {
    let who = framework.arg();
    assert_eq!(json_u64(full, "/total"), limit, "{who}: total: {full}");
    let free = json_u64(full, "/free");
    // numba keeps the few bytes of its kernel's array until its next collection.
    assert!(
        free <= limit - CONTEXT && free + 4096 >= limit - CONTEXT,
        "{who}: free = the total less the context: {full}"
    );
    assert_eq!(full["oom"], framework.oom_error(), "{who}: {full}");
    // The kernel ran: its result was read back (a number), not an error's name.
    assert!(
        full["kernel"].is_u64(),
        "{who}: the kernel did not run: {full}"
    );
    let allocated = json_u64(full, "/allocated");
    assert!(
        allocated + CONTEXT <= limit && allocated + CONTEXT + BLOCK > limit,
        "{who}: blocks up to the limit, and not one more: {full}"
    );
    assert!(
        held <= limit && held >= allocated + CONTEXT,
        "{who}: simgpu holds {held} bytes for it: {full}"
    );
}

fn capped(framework: Framework) {
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    let (full, done, held) = run(
        framework,
        container.command(python()),
        &node,
        Some(container.region()),
    );
    check(framework, &full, held, GIB);
    if let Framework::Cupy = framework {
        // CuPy's pool hands its blocks back to the driver: the container has them again.
        assert_eq!(
            json_u64(&done, "/free_after"),
            GIB - CONTEXT,
            "cupy: after free_all_blocks: {done}"
        );
    }
}

fn bare(framework: Framework) {
    let node = node();
    let (full, _, held) = run(framework, node.command(python()), &node, None);
    check(framework, &full, held, DEVICE);
}

#[test]
fn cupy_is_capped_by_libtessera() {
    capped(Framework::Cupy);
}

#[test]
fn cupy_runs_on_simgpu() {
    bare(Framework::Cupy);
}

#[test]
fn numba_is_capped_by_libtessera() {
    capped(Framework::Numba);
}

#[test]
fn numba_runs_on_simgpu() {
    bare(Framework::Numba);
}

#[test]
fn numba_without_nvjitlink_is_capped_by_libtessera() {
    capped(Framework::NumbaCulink);
}
