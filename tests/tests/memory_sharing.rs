//! Memory is a node-wide resource: process B's `cuMemGetInfo` sees what process A holds,
//! and a process killed with SIGKILL gives its memory back within a second, as on a real
//! driver.

use std::time::{Duration, Instant};
use tessera_tests::{
    assert_success, json_u64, linked_client, run_with_timeout, stat_process, Running, SimNode,
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const CONTEXT: u64 = 256 * MIB;

/// (free, total) as a fresh process sees them through `cuMemGetInfo_v2`.
fn mem_info(node: &SimNode, exe: &std::path::Path, device: u32) -> (u64, u64) {
    let mut cmd = node.command(exe);
    cmd.args(["info", &device.to_string()]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(30));
    assert_success(&out, "memhold info");
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["free", free, "total", total] => (free.parse().unwrap(), total.parse().unwrap()),
        _ => panic!("memhold info printed `{text}`"),
    }
}

#[test]
fn other_processes_see_allocations_and_a_killed_process_frees_them() {
    let exe = linked_client("memhold");
    let node = SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "256MiB")]);

    // Alone, a process sees the device less its own context.
    let (free_idle, total) = mem_info(&node, &exe, 0);
    assert_eq!(total, 4 * GIB, "cuMemGetInfo total");
    assert_eq!(
        free_idle,
        4 * GIB - CONTEXT,
        "free memory of an idle device, less our context"
    );

    let mut holder = Running::spawn(
        node.command(&exe).args(["hold", &GIB.to_string()]),
        "memhold hold 1GiB",
    );
    holder.wait_for_line("ready", Duration::from_secs(30));
    let pid = holder.pid();

    // B sees A's allocation and A's context. (`stat` first returns what the `info` process
    // above held; that exited processes free at once is checked on its own below.)
    node.stat();
    let (free_shared, _) = mem_info(&node, &exe, 0);
    assert_eq!(
        free_idle - free_shared,
        GIB + CONTEXT,
        "process B's cuMemGetInfo should drop by A's 1 GiB allocation plus A's context"
    );
    let stat = node.stat();
    let a = stat_process(&stat, pid)
        .unwrap_or_else(|| panic!("simgpu stat does not list the holder (pid {pid}): {stat}"));
    assert_eq!(
        json_u64(a, "/devices/0/memory"),
        GIB + CONTEXT,
        "holder's memory in stat: {a}"
    );
    assert_eq!(
        a["name"], "memhold",
        "the holder's command name in stat: {a}"
    );
    assert_eq!(
        json_u64(&stat, "/devices/0/memory_used"),
        GIB + CONTEXT,
        "device memory_used"
    );

    // SIGKILL: no exit handler runs; the node must notice the death by itself.
    holder.kill();
    let killed = Instant::now();
    let mut last = free_shared;
    while last != free_idle {
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "1 s after SIGKILL, cuMemGetInfo still shows {} MiB free (idle: {} MiB)",
            last / MIB,
            free_idle / MIB
        );
        std::thread::sleep(Duration::from_millis(20));
        last = mem_info(&node, &exe, 0).0;
    }
    let stat = node.stat();
    assert!(
        stat_process(&stat, pid).is_none(),
        "the killed process (pid {pid}) is still listed: {stat}"
    );
    assert_eq!(
        json_u64(&stat, "/devices/0/memory_used"),
        0,
        "memory_used after the kill"
    );
}

/// Two devices are accounted separately: A's allocation on device 1 leaves device 0 free.
#[test]
fn devices_are_accounted_separately() {
    let exe = linked_client("memhold");
    let node = SimNode::new(
        "Small:4GiB:8,Small:4GiB:8",
        &[("SIMGPU_CONTEXT_MEMORY", "256MiB")],
    );
    let mut holder = Running::spawn(
        node.command(&exe)
            .args(["hold", &(512 * MIB).to_string(), "1"]),
        "memhold hold 512MiB on device 1",
    );
    holder.wait_for_line("ready", Duration::from_secs(30));
    let (free0, _) = mem_info(&node, &exe, 0);
    let (free1, _) = mem_info(&node, &exe, 1);
    assert_eq!(free0, 4 * GIB - CONTEXT, "device 0, which A does not use");
    assert_eq!(
        free1,
        4 * GIB - CONTEXT - (512 * MIB + CONTEXT),
        "device 1, where A holds 512 MiB"
    );
}

/// A process that exits normally has given its memory back by the time its parent sees it
/// exit, as with a real driver: a script's next step sees the whole device.
#[test]
fn an_exited_process_holds_nothing() {
    let exe = linked_client("memhold");
    let node = SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "256MiB")]);
    let seen: Vec<u64> = (0..4).map(|_| mem_info(&node, &exe, 0).0).collect();
    assert!(
        seen.iter().all(|&free| free == 4 * GIB - CONTEXT),
        "back-to-back processes saw {:?} MiB free; each should see the device less its own \
         context ({} MiB)",
        seen.iter().map(|f| f / MIB).collect::<Vec<_>>(),
        (4 * GIB - CONTEXT) / MIB
    );
}
