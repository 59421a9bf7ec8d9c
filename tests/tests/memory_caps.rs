//! Memory caps, for every way an application reaches the driver: a container's usage
//! (allocations plus its contexts) reaches exactly the cap and not one byte more; a free
//! makes room again; `cuMemGetInfo`, `cuDeviceTotalMem` and NVML report the cap and what is
//! left of it. Caps come from `TESSERA_MEMORY_LIMIT[_<i>]`; a malformed one is an error and
//! a cap of zero.

use serde_json::Value;
use std::time::Duration;
use tessera_tests::{
    assert_no_crash, assert_success, compile_client, json_u64, processes_memory, run_with_timeout,
    stat_process, stdout_json, tessera_lines, ClientKind, Container, Running, SimNode,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// A context's cost on these nodes: no round number, so that an accounting that forgets or
/// rounds it shows.
const CONTEXT: u64 = 50_000_000;
const CONTEXT_ENV: (&str, &str) = ("SIMGPU_CONTEXT_MEMORY", "50000000");

fn node() -> SimNode {
    SimNode::new("Small:4GiB:8", &[CONTEXT_ENV])
}

/// NVML's view of device `device` from a fresh process in `container`.
fn nvml_device(container: &Container<'_>, device: usize) -> Value {
    let exe = compile_client("nvml_client", &["nvml_client.c"], &["-ldl"]);
    let out = run_with_timeout(&mut container.command(&exe), Duration::from_secs(30));
    assert_success(&out, "nvml_client");
    let doc = stdout_json(&out, "nvml_client");
    doc["devices"][device].clone()
}

/// Runs the `probe` mode (context, one byte, memory info) and returns its report.
fn probe(container: &Container<'_>, device: usize) -> (Value, std::process::Output) {
    let mut cmd = ClientKind::CLinked.command(container, "probe", &[&device.to_string()]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(30));
    assert_no_crash(&out, "probe");
    assert_success(&out, "probe");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("probe "))
        .unwrap_or_else(|| panic!("probe printed no report:\n{text}"));
    (serde_json::from_str(line).expect("probe JSON"), out)
}

/// The exact cap for one client kind, with the cap at 1 GiB.
fn cap_is_exact(kind: ClientKind) {
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    let who = kind.name();
    let mut client = Running::spawn_interactive(
        &mut kind.command(&container, "capfill", &[]),
        &format!("capfill ({who})"),
    );
    let full = client.wait_for_json("full ", Duration::from_secs(120));
    let pid = client.pid();

    // What the application saw on the way.
    assert_eq!(
        json_u64(&full, "/total_before"),
        GIB,
        "{who}: cuMemGetInfo total: {full}"
    );
    assert_eq!(
        json_u64(&full, "/device_total"),
        GIB,
        "{who}: cuDeviceTotalMem_v2 should report the cap: {full}"
    );
    assert_eq!(
        json_u64(&full, "/free_before"),
        GIB - CONTEXT,
        "{who}: free before allocating = the cap less the context's overhead: {full}"
    );
    assert_eq!(
        json_u64(&full, "/allocated") + CONTEXT,
        GIB,
        "{who}: allocations plus the context should reach the cap exactly: {full}"
    );
    assert_eq!(
        json_u64(&full, "/one_more_rc"),
        2,
        "{who}: one more byte at the cap should fail with CUDA_ERROR_OUT_OF_MEMORY: {full}"
    );
    assert_eq!(
        json_u64(&full, "/free_full"),
        0,
        "{who}: free at the cap: {full}"
    );
    assert_eq!(
        json_u64(&full, "/total_full"),
        GIB,
        "{who}: total at the cap: {full}"
    );

    // Ground truth: what the driver really holds for the process.
    let stat = node.stat();
    let proc = stat_process(&stat, pid)
        .unwrap_or_else(|| panic!("{who}: simgpu does not list pid {pid}: {stat}"));
    assert_eq!(
        json_u64(proc, "/devices/0/memory"),
        GIB,
        "{who}: simgpu ground truth for the full container: {proc}"
    );

    // NVML from another process of the container: the cap, all of it used.
    let nvml = nvml_device(&container, 0);
    assert_eq!(json_u64(&nvml, "/total"), GIB, "{who}: NVML total: {nvml}");
    assert_eq!(
        json_u64(&nvml, "/free"),
        0,
        "{who}: NVML free at the cap: {nvml}"
    );
    assert_eq!(
        json_u64(&nvml, "/used"),
        GIB,
        "{who}: NVML used at the cap: {nvml}"
    );
    assert_eq!(
        json_u64(&nvml, "/v2/total"),
        GIB,
        "{who}: NVML v2 total: {nvml}"
    );
    assert_eq!(
        json_u64(&nvml, "/v2/free"),
        0,
        "{who}: NVML v2 free: {nvml}"
    );

    client.send_line("go");
    let done = client.wait_for_json("done ", Duration::from_secs(60));
    let freed = json_u64(&done, "/freed");
    assert_eq!(
        json_u64(&done, "/free_after_free"),
        freed,
        "{who}: after freeing one chunk, free = that chunk: {done}"
    );
    assert_eq!(
        json_u64(&done, "/refill_rc"),
        0,
        "{who}: after a free, the same size should fit again: {done}"
    );
    assert_eq!(
        json_u64(&done, "/one_more_rc"),
        2,
        "{who}: and then one more byte should fail again: {done}"
    );
    assert_eq!(json_u64(&done, "/free_refilled"), 0, "{who}: {done}");
    assert_eq!(
        json_u64(&done, "/free_all_freed"),
        GIB - CONTEXT,
        "{who}: everything freed, the context left: {done}"
    );
    let status = client.wait(Duration::from_secs(30));
    assert!(status.success(), "{who}: capfill exited with {status}");
}

#[test]
fn cap_is_exact_c_linked() {
    cap_is_exact(ClientKind::CLinked);
}

#[test]
fn cap_is_exact_c_dlopen() {
    cap_is_exact(ClientKind::CDlopen);
}

#[test]
fn cap_is_exact_c_proc_address() {
    cap_is_exact(ClientKind::CProcAddress);
}

#[test]
fn cap_is_exact_cudarc() {
    cap_is_exact(ClientKind::Cudarc);
}

#[test]
fn cap_is_exact_python_cuda_bindings() {
    cap_is_exact(ClientKind::Python);
}

/// The processes of one container share its cap through the region file; another container
/// on the same node has its own.
#[test]
fn processes_of_a_container_share_its_cap() {
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    let other = Container::new(&node, Some("1GiB"));
    let mut holder = Running::spawn(
        &mut ClientKind::CLinked.command(&container, "hold", &[&(512 * MIB).to_string()]),
        "hold 512 MiB",
    );
    holder.wait_for_line("ready", Duration::from_secs(30));
    assert!(
        container.region().exists(),
        "the library did not create the container's region file {}",
        container.region().display()
    );

    let (p, _) = probe(&container, 0);
    assert_eq!(json_u64(&p, "/total"), GIB, "second process: total: {p}");
    assert_eq!(
        json_u64(&p, "/free"),
        GIB - (512 * MIB + CONTEXT) - CONTEXT - 1,
        "second process: free = cap − holder (512 MiB + context) − own context − 1 byte: {p}"
    );
    let (q, _) = probe(&other, 0);
    assert_eq!(
        json_u64(&q, "/free"),
        GIB - CONTEXT - 1,
        "a process of another container sees its own cap, not the first container's use: {q}"
    );

    // A later process with a different limit joins the existing region and keeps its cap.
    let mut cmd = ClientKind::CLinked.command(&container, "probe", &[]);
    cmd.env("TESSERA_MEMORY_LIMIT", "2GiB");
    let out = run_with_timeout(&mut cmd, Duration::from_secs(30));
    assert_success(&out, "probe with a different limit");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("\"total\":{GIB}")),
        "a process joining an existing region must keep the region's cap (1 GiB), not its \
         own TESSERA_MEMORY_LIMIT (2 GiB):\n{text}"
    );
}

/// `free` is never more than the device really has: memory used outside the container (a
/// process without the library) is not free for it either.
#[test]
fn free_never_exceeds_what_the_device_has() {
    let node = node();
    let container = Container::new(&node, Some("3GiB"));
    let (p, _) = probe(&container, 0);
    assert_eq!(json_u64(&p, "/total"), 3 * GIB, "total = the cap: {p}");
    assert_eq!(
        json_u64(&p, "/free"),
        3 * GIB - CONTEXT - 1,
        "free = the cap less the context and the byte: {p}"
    );

    let exe = tessera_tests::tessera_client(ClientKind::CLinked);
    let mut outsider = Running::spawn(
        node.command(&exe).args(["hold", &(2 * GIB).to_string()]),
        "hold 2 GiB outside any container",
    );
    outsider.wait_for_line("ready", Duration::from_secs(30));
    let (p, _) = probe(&container, 0);
    assert_eq!(json_u64(&p, "/total"), 3 * GIB, "total = the cap: {p}");
    assert_eq!(
        json_u64(&p, "/free"),
        4 * GIB - (2 * GIB + CONTEXT) - CONTEXT - 1,
        "free = the device's free memory when that is below what the cap leaves: {p}"
    );
}

/// A process that exits normally leaves nothing counted: the next process of the container
/// sees the whole cap (less its own context) at once, as with a real driver.
#[test]
fn an_exited_process_holds_nothing_in_the_container() {
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    let mut cmd = ClientKind::CLinked.command(&container, "hold", &[&(256 * MIB).to_string()]);
    let mut holder = Running::spawn(&mut cmd, "hold 256 MiB");
    holder.wait_for_line("ready", Duration::from_secs(30));
    let (p, _) = probe(&container, 0);
    assert_eq!(
        json_u64(&p, "/free"),
        GIB - (256 * MIB + CONTEXT) - CONTEXT - 1,
        "beside a holder: {p}"
    );
    drop(holder);
    for i in 0..3 {
        let (p, _) = probe(&container, 0);
        assert_eq!(
            json_u64(&p, "/free"),
            GIB - CONTEXT - 1,
            "probe {i}: processes that exited (normally, or killed) before this one started \
             should hold nothing in the container's cuMemGetInfo: {p}"
        );
    }
}

/// `TESSERA_MEMORY_LIMIT_<i>` overrides the all-devices limit for device i; units k/m/g and
/// KiB/MiB/GiB are binary. A run within its caps prints nothing.
#[test]
fn per_device_limits_and_units() {
    let node = SimNode::new("Small:4GiB:8,Small:4GiB:8", &[CONTEXT_ENV]);
    let container = Container::new(&node, Some("1g")).device_limit(1, "524288k");
    let (p0, out0) = probe(&container, 0);
    assert_eq!(
        json_u64(&p0, "/total"),
        GIB,
        "device 0 (TESSERA_MEMORY_LIMIT=1g): {p0}"
    );
    assert_eq!(
        json_u64(&p0, "/device_total"),
        GIB,
        "cuDeviceTotalMem_v2: {p0}"
    );
    let (p1, _) = probe(&container, 1);
    assert_eq!(
        json_u64(&p1, "/total"),
        512 * MIB,
        "device 1 (TESSERA_MEMORY_LIMIT_1=524288k): {p1}"
    );
    assert_eq!(json_u64(&p1, "/device_total"), 512 * MIB, "{p1}");
    assert!(
        tessera_lines(&out0).is_empty(),
        "libtessera should be quiet unless TESSERA_LOG asks: {:?}",
        tessera_lines(&out0)
    );

    let mut fill = Running::spawn_interactive(
        &mut ClientKind::CLinked.command(&container, "capfill", &["1"]),
        "capfill on device 1",
    );
    let full = fill.wait_for_json("full ", Duration::from_secs(60));
    assert_eq!(
        json_u64(&full, "/allocated") + CONTEXT,
        512 * MIB,
        "device 1 fills to its own cap: {full}"
    );
    fill.send_line("go");
    fill.wait_for_line("done", Duration::from_secs(60));

    let container = Container::new(&node, None).device_limit(0, "300MiB");
    let (p0, _) = probe(&container, 0);
    assert_eq!(
        json_u64(&p0, "/total"),
        300 * MIB,
        "only device 0 capped: {p0}"
    );
    let (p1, _) = probe(&container, 1);
    assert_eq!(
        json_u64(&p1, "/total"),
        4 * GIB,
        "device 1 without a limit: the device's own total: {p1}"
    );
}

/// A malformed limit is an error on stderr that names the variable, and a cap of zero —
/// never "unlimited": the process gets no device memory at all.
#[test]
fn malformed_limit_is_an_error_and_a_cap_of_zero() {
    let node = node();
    let cases: [(&str, &str); 5] = [
        ("TESSERA_MEMORY_LIMIT", "lots"),
        ("TESSERA_MEMORY_LIMIT", "1.5.GiB"),
        ("TESSERA_MEMORY_LIMIT", "-1GiB"),
        ("TESSERA_MEMORY_LIMIT", "4 GiBs"),
        ("TESSERA_MEMORY_LIMIT_0", "12XB"),
    ];
    for (var, bad) in cases {
        let container = Container::new(&node, Some("1GiB")).env(var, bad);
        let (p, out) = probe(&container, 0);
        let lines = tessera_lines(&out);
        assert!(
            lines.iter().any(|l| l.contains(var)),
            "{var}={bad:?}: expected an error naming {var} on stderr, got {lines:?}"
        );
        let ctx_rc = json_u64(&p, "/ctx_rc");
        if ctx_rc == 0 {
            assert_eq!(
                json_u64(&p, "/alloc_rc"),
                2,
                "{var}={bad:?}: a 1-byte allocation under a zero cap: {p}"
            );
            assert_eq!(json_u64(&p, "/total"), 0, "{var}={bad:?}: total = 0: {p}");
        } else {
            assert_eq!(
                ctx_rc, 2,
                "{var}={bad:?}: a context under a zero cap fails with OUT_OF_MEMORY: {p}"
            );
        }
        let stat = node.stat();
        let pid = json_u64(&p, "/pid") as u32;
        assert_eq!(
            processes_memory(&stat, &[pid], 0),
            0,
            "{var}={bad:?}: the process should be gone and hold nothing: {stat}"
        );
    }
}
