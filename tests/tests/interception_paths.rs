//! The resolution paths: with `libtessera.so` preloaded, programs behave as
//! on the bare driver through every way of reaching it; unhooked calls work; hooked calls
//! reach the library (its debug counters say so) whether bound by the linker, `dlsym` or
//! `cuGetProcAddress[_v2]` — which hands out the right variant's wrapper, per ABI version
//! and per-thread-stream flag; and a second preload library that uses
//! `dlsym(RTLD_NEXT, …)` keeps working in front of it.

use serde_json::Value;
use std::time::Duration;
use tessera_tests::{
    assert_success, compile_client, json_u64, kernels_ptx, linked_client, rtld_next_shim,
    run_with_timeout, tessera_client, ClientKind, Container, Running, SimNode,
};

const GIB: u64 = 1 << 30;
const LIBTESSERA: &str = "libtessera.so";
const DRIVER: &str = "libcuda.so.1";

fn node() -> SimNode {
    SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")])
}

/// The JSON after `tag ` in a program's output.
fn tagged(out: &std::process::Output, tag: &str, what: &str) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(tag).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| {
            panic!(
                "{what} printed no `{tag}` line\nstdout:\n{text}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: bad JSON ({e}): {line}"))
}

/// The round-trip clients of `c_clients.rs` pass unchanged with the library preloaded (and
/// no cap): allocation, copies, a kernel launch, `cuGetProcAddress_v2` resolution checks.
#[test]
fn round_trip_clients_pass_under_the_library() {
    let node = node();
    let container = Container::new(&node, None);
    let clients = [
        ("client_linked", linked_client("client_linked")),
        (
            "client_dlopen",
            compile_client(
                "client_dlopen",
                &["client_dlopen.c", "driver_common.c", "driver_dlopen.c"],
                &["-ldl"],
            ),
        ),
        (
            "client_proc_address",
            compile_client(
                "client_proc_address",
                &["client_proc_address.c", "driver_common.c"],
                &["-ldl"],
            ),
        ),
    ];
    for (name, exe) in clients {
        let mut cmd = container.command(&exe);
        cmd.arg(kernels_ptx());
        let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
        assert_success(&out, &format!("{name} under libtessera.so"));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("roundtrip ok"),
            "{name} did not finish the round trip"
        );
    }
}

/// Calls the library does not intercept give the driver's answers through every path, and
/// allocations still go through the library (C clients read its counters).
#[test]
fn unhooked_calls_work_through_every_path() {
    let node = node();
    let container = Container::new(&node, Some("1GiB")).env("TESSERA_DEBUG_COUNTERS", "1");
    for kind in ClientKind::ALL {
        let who = kind.name();
        let out = run_with_timeout(
            &mut kind.command(&container, "names", &[]),
            Duration::from_secs(120),
        );
        assert_success(&out, &format!("names ({who})"));
        let doc = tagged(&out, "names", who);
        assert_eq!(doc["name"], "Small", "{who}: cuDeviceGetName: {doc}");
        assert_eq!(
            json_u64(&doc, "/sms"),
            8,
            "{who}: cuDeviceGetAttribute: {doc}"
        );
        assert_eq!(
            json_u64(&doc, "/count"),
            1,
            "{who}: cuDeviceGetCount: {doc}"
        );
        if let Some(version) = doc.get("version") {
            assert_eq!(
                version,
                simgpu::CUDA_DRIVER_VERSION,
                "{who}: cuDriverGetVersion: {doc}"
            );
        }
        if ClientKind::C.contains(&kind) {
            assert_eq!(json_u64(&doc, "/ctx_device"), 0, "{who}: {doc}");
            assert_eq!(doc["oom_name"], "CUDA_ERROR_OUT_OF_MEMORY", "{who}: {doc}");
            assert_eq!(
                doc["tessera"]["cuMemAlloc_v2"], 3,
                "{who}: the three allocations should each pass through libtessera's \
                 cuMemAlloc_v2: {doc}"
            );
            assert_eq!(doc["tessera"]["cuMemFree_v2"], 3, "{who}: {doc}");
        }
    }
}

/// The launch wrappers are reached on every path, and the per-thread-stream flag of
/// `cuGetProcAddress_v2` leads to the `_ptsz` wrapper.
#[test]
fn launches_reach_the_right_wrapper_on_every_path() {
    let node = node();
    let container = Container::new(&node, None).env("TESSERA_DEBUG_COUNTERS", "1");
    let ptx = kernels_ptx();
    let ptx = ptx.to_str().expect("a UTF-8 path");
    let cases = [
        (ClientKind::CLinked, false),
        (ClientKind::CDlopen, false),
        (ClientKind::CProcAddress, false),
        (ClientKind::CProcAddress, true),
    ];
    for (kind, per_thread) in cases {
        let who = format!("{} (per-thread stream: {per_thread})", kind.name());
        let mut cmd = kind.command(&container, "launch", &[ptx]);
        if per_thread {
            cmd.env("CLIENT_PER_THREAD_STREAM", "1");
        }
        let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
        assert_success(&out, &who);
        let c = tagged(&out, "counters", &who);
        let (legacy, ptsz) = if per_thread { (0, 1) } else { (1, 0) };
        assert_eq!(
            c["cuLaunchKernel"], legacy,
            "{who}: cuLaunchKernel wrapper calls: {c}"
        );
        assert_eq!(
            c["cuLaunchKernel_ptsz"], ptsz,
            "{who}: cuLaunchKernel_ptsz wrapper calls: {c}"
        );
        assert_eq!(c["cuMemAlloc_v2"], 1, "{who}: {c}");
        assert_eq!(c["cuMemFree_v2"], 1, "{who}: {c}");
    }

    // Without TESSERA_DEBUG_COUNTERS nothing is counted.
    let quiet = Container::new(&node, None);
    let out = run_with_timeout(
        &mut ClientKind::CLinked.command(&quiet, "launch", &[ptx]),
        Duration::from_secs(60),
    );
    assert_success(&out, "launch without counters");
    let c = tagged(&out, "counters", "launch without counters");
    assert_eq!(
        c["cuLaunchKernel"], 0,
        "counted without TESSERA_DEBUG_COUNTERS: {c}"
    );
}

/// What `cuGetProcAddress[_v2]` hands out, per (base name, version, flags): libtessera's
/// wrapper of exactly the requested variant for hooked functions, the driver's own function
/// for the others, and the driver's not-found answers unchanged.
#[test]
fn proc_address_hands_out_the_right_variant() {
    // (query, library, symbol); an empty library means "any" (only the variant matters).
    let hooked = [
        ("cuMemAlloc:12000:0", LIBTESSERA, "cuMemAlloc_v2"),
        ("cuMemFree:12000:0", LIBTESSERA, "cuMemFree_v2"),
        ("cuMemGetInfo:12000:0", LIBTESSERA, "cuMemGetInfo_v2"),
        ("cuMemGetInfo:3000:0", "", "cuMemGetInfo"),
        ("cuMemAllocPitch:12000:0", LIBTESSERA, "cuMemAllocPitch_v2"),
        ("cuMemAllocManaged:12000:0", LIBTESSERA, "cuMemAllocManaged"),
        ("cuMemAllocAsync:12000:0", LIBTESSERA, "cuMemAllocAsync"),
        (
            "cuMemAllocAsync:12000:2",
            LIBTESSERA,
            "cuMemAllocAsync_ptsz",
        ),
        (
            "cuMemAllocFromPoolAsync:12000:2",
            LIBTESSERA,
            "cuMemAllocFromPoolAsync_ptsz",
        ),
        ("cuMemFreeAsync:12000:1", LIBTESSERA, "cuMemFreeAsync"),
        ("cuMemFreeAsync:12000:2", LIBTESSERA, "cuMemFreeAsync_ptsz"),
        ("cuMemCreate:12000:0", LIBTESSERA, "cuMemCreate"),
        ("cuMemRelease:12000:0", LIBTESSERA, "cuMemRelease"),
        ("cuArrayCreate:12000:0", LIBTESSERA, "cuArrayCreate_v2"),
        ("cuArray3DCreate:12000:0", LIBTESSERA, "cuArray3DCreate_v2"),
        ("cuArrayDestroy:12000:0", LIBTESSERA, "cuArrayDestroy"),
        (
            "cuMipmappedArrayCreate:12000:0",
            LIBTESSERA,
            "cuMipmappedArrayCreate",
        ),
        (
            "cuMipmappedArrayDestroy:12000:0",
            LIBTESSERA,
            "cuMipmappedArrayDestroy",
        ),
        (
            "cuDeviceTotalMem:12000:0",
            LIBTESSERA,
            "cuDeviceTotalMem_v2",
        ),
        ("cuCtxCreate:4000:0", LIBTESSERA, "cuCtxCreate_v2"),
        ("cuCtxCreate:12000:0", LIBTESSERA, "cuCtxCreate_v3"),
        ("cuCtxCreate:12080:0", LIBTESSERA, "cuCtxCreate_v4"),
        ("cuCtxDestroy:12000:0", LIBTESSERA, "cuCtxDestroy_v2"),
        (
            "cuDevicePrimaryCtxRetain:12000:0",
            LIBTESSERA,
            "cuDevicePrimaryCtxRetain",
        ),
        (
            "cuDevicePrimaryCtxRelease:12000:0",
            LIBTESSERA,
            "cuDevicePrimaryCtxRelease_v2",
        ),
        (
            "cuDevicePrimaryCtxReset:12000:0",
            LIBTESSERA,
            "cuDevicePrimaryCtxReset_v2",
        ),
        ("cuLaunchKernel:12000:0", LIBTESSERA, "cuLaunchKernel"),
        ("cuLaunchKernel:12000:1", LIBTESSERA, "cuLaunchKernel"),
        ("cuLaunchKernel:12000:2", LIBTESSERA, "cuLaunchKernel_ptsz"),
        (
            "cuLaunchKernelEx:12000:2",
            LIBTESSERA,
            "cuLaunchKernelEx_ptsz",
        ),
        (
            "cuLaunchCooperativeKernel:12000:0",
            LIBTESSERA,
            "cuLaunchCooperativeKernel",
        ),
        (
            "cuLaunchCooperativeKernel:12000:2",
            LIBTESSERA,
            "cuLaunchCooperativeKernel_ptsz",
        ),
        (
            "cuGetProcAddress:12000:0",
            LIBTESSERA,
            "cuGetProcAddress_v2",
        ),
        ("cuGetProcAddress:11030:0", LIBTESSERA, "cuGetProcAddress"),
        ("cuGraphLaunch:12000:2", LIBTESSERA, "cuGraphLaunch_ptsz"),
        // Hooked so that the launch gate harvests after the application waits.
        ("cuCtxSynchronize:12000:0", LIBTESSERA, "cuCtxSynchronize"),
        (
            "cuStreamSynchronize:12000:2",
            LIBTESSERA,
            "cuStreamSynchronize_ptsz",
        ),
        // Not hooked: the driver's own.
        ("cuDeviceGetName:12000:0", DRIVER, "cuDeviceGetName"),
        (
            "cuDeviceGetAttribute:12000:0",
            DRIVER,
            "cuDeviceGetAttribute",
        ),
        ("cuMemcpyHtoD:12000:2", DRIVER, "cuMemcpyHtoD_v2_ptds"),
        ("cuStreamQuery:12000:2", DRIVER, "cuStreamQuery_ptsz"),
    ];
    let node = node();
    let container = Container::new(&node, None);
    let exe = tessera_client(ClientKind::CDlopen);
    for api in ["v2", "v1"] {
        let mut cmd = container.command(&exe);
        cmd.args(["procmap", api]).args(hooked.iter().map(|h| h.0));
        cmd.args(["cuNoSuchFunction:12000:0", "cuMemAllocAsync:11000:0"]);
        let out = run_with_timeout(&mut cmd, Duration::from_secs(30));
        assert_success(&out, "procmap");
        let doc = tagged(&out, "procmap", "procmap");
        let results = doc.as_array().expect("a list");
        let mut wrong = Vec::new();
        for ((query, library, symbol), got) in hooked.iter().zip(results) {
            let ok = got["rc"] == 0
                && got["symbol"] == *symbol
                && (library.is_empty() || got["library"] == *library);
            if !ok {
                wrong.push(format!(
                    "{query}: expected {symbol} in {}, got {got}",
                    if library.is_empty() {
                        "any library"
                    } else {
                        library
                    }
                ));
            }
        }
        let n = hooked.len();
        for (got, status) in [(&results[n], 1), (&results[n + 1], 2)] {
            let ok =
                got["rc"] == 500 && got["null"] == true && (api == "v1" || got["status"] == status);
            if !ok {
                wrong.push(format!(
                    "expected CUDA_ERROR_NOT_FOUND, a null pointer and status {status}, got {got}"
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "cuGetProcAddress{}:\n{}",
            if api == "v2" { "_v2" } else { "" },
            wrong.join("\n")
        );
    }
}

/// A tracing library preloaded in front of libtessera.so wraps cuMemAlloc_v2 and
/// cuDeviceGetName with dlsym(RTLD_NEXT, …): its wrappers run, the next definition it finds
/// is libtessera's (so the cap still holds), and RTLD_NEXT resolves from the shim itself.
#[test]
fn an_rtld_next_preload_library_works_in_front() {
    let node = node();
    let container = Container::new(&node, Some("1GiB")).env("TESSERA_DEBUG_COUNTERS", "1");
    let shim = rtld_next_shim();
    let libtessera = &tessera_tests::artifacts().libtessera;
    let exe = tessera_client(ClientKind::CLinked);

    let out = run_with_timeout(
        container
            .command_preloading(&exe, &[&shim, libtessera])
            .arg("names"),
        Duration::from_secs(60),
    );
    assert_success(&out, "names with the shim in front");
    let doc = tagged(&out, "names", "names with the shim");
    assert_eq!(doc["name"], "Small", "{doc}");
    assert_eq!(
        doc["shim"]["cuMemAlloc_v2"], 3,
        "the shim's wrapper ran: {doc}"
    );
    assert_eq!(doc["shim"]["cuDeviceGetName"], 1, "{doc}");
    assert_eq!(
        doc["tessera"]["cuMemAlloc_v2"], 3,
        "the shim's RTLD_NEXT lookup should lead to libtessera's wrapper: {doc}"
    );
    assert_eq!(
        doc["shim"]["next_tessera_debug_counter"], 1,
        "dlsym(RTLD_NEXT, \"tessera_debug_counter\") from the shim should find libtessera's \
         export, which lies after the shim; not finding it means RTLD_NEXT was resolved \
         from libtessera's dlsym instead of from its caller: {doc}"
    );

    // The cap holds through the shim.
    let mut fill = Running::spawn_interactive(
        container
            .command_preloading(&exe, &[&shim, libtessera])
            .arg("capfill"),
        "capfill with the shim in front",
    );
    let full = fill.wait_for_json("full ", Duration::from_secs(60));
    assert_eq!(json_u64(&full, "/total_full"), GIB, "{full}");
    assert_eq!(
        json_u64(&full, "/allocated") + 64 * (1 << 20),
        GIB,
        "through the shim, allocations still stop exactly at the cap: {full}"
    );
    assert_eq!(json_u64(&full, "/one_more_rc"), 2, "{full}");
    fill.send_line("go");
    fill.wait_for_line("done", Duration::from_secs(60));

    // The other order works too.
    let out = run_with_timeout(
        container
            .command_preloading(&exe, &[libtessera, &shim])
            .arg("names"),
        Duration::from_secs(60),
    );
    assert_success(&out, "names with the shim behind libtessera");
    let doc = tagged(&out, "names", "names with the shim behind");
    assert_eq!(doc["name"], "Small", "{doc}");
    assert_eq!(
        doc["tessera"]["cuMemAlloc_v2"], 3,
        "the program's allocations reach libtessera first: {doc}"
    );
}
