//! Bad input is a clear one-line error, never a crash: a malformed `SIMGPU_DEVICES` fails
//! `cuInit`, and a corrupt state file (garbage, truncated, foreign magic) fails both
//! `simgpu stat` and `cuInit`.

use std::process::Output;
use std::time::Duration;
use tessera_tests::{assert_no_crash, assert_success, linked_client, run_with_timeout, SimNode};

/// The result codes init_probe printed: two cuInit calls and one cuDeviceGetCount.
fn probe(node: &SimNode) -> (Output, Vec<i64>) {
    let exe = linked_client("init_probe");
    let out = run_with_timeout(&mut node.command(&exe), Duration::from_secs(30));
    assert_no_crash(&out, "a CUDA program (init_probe)");
    assert_success(&out, "init_probe");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let codes: Vec<i64> = text
        .lines()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    assert_eq!(codes.len(), 3, "init_probe printed:\n{text}");
    (out, codes)
}

/// The lines simgpu itself wrote to stderr.
fn simgpu_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("simgpu"))
        .map(str::to_string)
        .collect()
}

#[test]
fn malformed_devices_fail_cuinit_with_one_clear_line() {
    for bad in ["V100x", "Big:lots:8", "Big:4GiB:0", ","] {
        let node = SimNode::new(bad, &[]);
        let (out, codes) = probe(&node);
        assert_eq!(
            codes[0], 100,
            "cuInit with SIMGPU_DEVICES={bad:?}: CUDA_ERROR_NO_DEVICE"
        );
        assert_ne!(
            codes[1], 0,
            "a second cuInit with SIMGPU_DEVICES={bad:?} succeeded"
        );
        assert_ne!(
            codes[2], 0,
            "cuDeviceGetCount after a failed cuInit succeeded"
        );
        let lines = simgpu_lines(&out);
        assert_eq!(
            lines.len(),
            1,
            "SIMGPU_DEVICES={bad:?}: expected one line from simgpu on stderr, got {lines:?}"
        );
        assert!(
            lines[0].contains("SIMGPU_DEVICES"),
            "the error does not name SIMGPU_DEVICES: {}",
            lines[0]
        );
        assert!(
            !node.state().exists(),
            "a refused configuration still created a node state"
        );
    }
}

#[test]
fn malformed_tunables_fail_cuinit_with_one_clear_line() {
    let node = SimNode::new("T4", &[("SIMGPU_CONTEXT_MEMORY", "a lot")]);
    let (out, codes) = probe(&node);
    assert_ne!(
        codes[0], 0,
        "cuInit with SIMGPU_CONTEXT_MEMORY=`a lot` succeeded"
    );
    let lines = simgpu_lines(&out);
    assert_eq!(
        lines.len(),
        1,
        "expected one line from simgpu, got {lines:?}"
    );
    assert!(lines[0].contains("SIMGPU_CONTEXT_MEMORY"), "{}", lines[0]);
}

/// A node created by a real process, then damaged by `damage`.
fn damaged_node(damage: impl FnOnce(&[u8]) -> Vec<u8>) -> SimNode {
    let node = SimNode::new("T4", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")]);
    let (_, codes) = probe(&node);
    assert_eq!(codes, [0, 0, 0], "init_probe on a fresh node");
    let good = std::fs::read(node.state()).expect("cuInit created the state file");
    assert!(
        good.len() >= 64,
        "the state file is only {} bytes",
        good.len()
    );
    std::fs::write(node.state(), damage(&good)).unwrap();
    node
}

fn assert_refused(node: &SimNode, what: &str) {
    let out = node.simgpu(&["stat"]);
    assert_no_crash(&out, &format!("simgpu stat on a {what} state file"));
    assert!(
        !out.status.success(),
        "simgpu stat accepted a {what} state file"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "simgpu stat on a {what} state file: expected one line, got:\n{stderr}"
    );
    assert!(
        stderr.contains(&*node.state().to_string_lossy()),
        "simgpu stat's error does not name the state file: {stderr}"
    );

    let (out, codes) = probe(node);
    assert_ne!(codes[0], 0, "cuInit accepted a {what} state file");
    assert_ne!(codes[1], 0, "a second cuInit accepted a {what} state file");
    let lines = simgpu_lines(&out);
    assert_eq!(
        lines.len(),
        1,
        "cuInit on a {what} state file: expected one line, got {lines:?}"
    );
    assert!(
        lines[0].contains(&*node.state().to_string_lossy()),
        "cuInit's error does not name the state file: {}",
        lines[0]
    );
}

#[test]
fn garbage_state_file_is_refused() {
    let node = damaged_node(|good| {
        // A deterministic byte soup of the same size (xorshift).
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..good.len())
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    });
    assert_refused(&node, "garbage");
}

#[test]
fn truncated_state_file_is_refused() {
    // A mapping past the end of a file faults (SIGBUS) if nobody checks the size first.
    let node = damaged_node(|good| good[..good.len() / 2].to_vec());
    assert_refused(&node, "truncated");
    let node = damaged_node(|good| good[..16].to_vec());
    assert_refused(&node, "truncated (16 bytes)");
}

#[test]
fn foreign_magic_is_refused() {
    let node = damaged_node(|good| {
        let mut bad = good.to_vec();
        bad[..8].copy_from_slice(b"NOTSIMGP");
        bad
    });
    assert_refused(&node, "foreign");
}

/// A damaged node is repaired by `simgpu reset`, as the error message suggests.
#[test]
fn reset_repairs_a_corrupt_state_file() {
    let node = damaged_node(|good| vec![0xff; good.len()]);
    let out = node.simgpu(&["reset"]);
    assert_success(&out, "simgpu reset");
    let (_, codes) = probe(&node);
    assert_eq!(codes, [0, 0, 0], "cuInit after simgpu reset");
}

/// `simgpu stat` before any process made a node says so, in one line, and creates nothing.
#[test]
fn stat_without_a_node_says_so() {
    let node = SimNode::new("T4", &[]);
    let out = node.simgpu(&["stat", "--json"]);
    assert_no_crash(&out, "simgpu stat without a node");
    assert!(
        !out.status.success(),
        "simgpu stat succeeded without a node"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "expected one line:\n{stderr}"
    );
    assert!(
        stderr.contains(&*node.state().to_string_lossy()),
        "the error does not name the state file: {stderr}"
    );
    assert!(!node.state().exists(), "simgpu stat created a node state");
}
