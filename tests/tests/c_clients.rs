//! C programs reach the simulated driver in each of the three ways applications do: linked
//! with `-lcuda`, `dlopen` + `dlsym`, and `cuGetProcAddress_v2` (the CUDA runtime's way).
//! Each allocates, round-trips data, launches `tessera_fill_u32` and verifies the result.

use std::time::Duration;
use tessera_tests::{assert_success, compile_client, kernels_ptx, linked_client, SimNode};

fn run_client(exe: &std::path::Path, what: &str) {
    let node = SimNode::new("T4", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")]);
    let mut cmd = node.command(exe);
    cmd.arg(kernels_ptx());
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_success(&out, what);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("roundtrip ok"),
        "{what} exited 0 without finishing the round trip:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn linked_with_lcuda() {
    run_client(&linked_client("client_linked"), "client_linked (-lcuda)");
}

#[test]
fn dlopen_and_dlsym() {
    let exe = compile_client(
        "client_dlopen",
        &["client_dlopen.c", "driver_common.c", "driver_dlopen.c"],
        &["-ldl"],
    );
    run_client(&exe, "client_dlopen (dlopen + dlsym)");
}

#[test]
fn cu_get_proc_address_v2() {
    let exe = compile_client(
        "client_proc_address",
        &["client_proc_address.c", "driver_common.c"],
        &["-ldl"],
    );
    run_client(&exe, "client_proc_address (cuGetProcAddress_v2)");
}

/// The clients fail loudly when the driver misbehaves: pointed at a module without
/// `tessera_fill_u32`, the linked client must exit non-zero and name the failing call.
#[test]
fn clients_report_the_failing_call() {
    let exe = linked_client("client_linked");
    let node = SimNode::new("T4", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")]);
    let dir = std::env::temp_dir().join(format!("tessera-empty-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ptx = dir.join("empty.ptx");
    std::fs::write(&ptx, ".version 7.0\n.target sm_70\n.address_size 64\n").unwrap();
    let mut cmd = node.command(&exe);
    cmd.arg(&ptx);
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(60));
    let _ = std::fs::remove_dir_all(&dir);
    tessera_tests::assert_no_crash(&out, "client_linked with an empty module");
    assert!(!out.status.success(), "a missing kernel went unnoticed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cuModuleGetFunction") && stderr.contains("CUDA_ERROR_NOT_FOUND"),
        "expected cuModuleGetFunction to fail with CUDA_ERROR_NOT_FOUND, stderr:\n{stderr}"
    );
}
