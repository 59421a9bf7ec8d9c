//! Acceptance 4: virtual memory management (`cuMemCreate` in granules, mapped and used) and
//! stream-ordered allocations (`cuMemAllocAsync` / `cuMemFreeAsync`) count against the cap
//! and give their memory back.

use std::time::Duration;
use tessera_tests::{json_u64, stat_process, ClientKind, Container, Running, SimNode};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const CONTEXT: u64 = 64 * MIB;

fn node() -> SimNode {
    SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")])
}

/// The driver's ground truth for one process on device 0.
fn truth(node: &SimNode, pid: u32) -> u64 {
    let stat = node.stat();
    stat_process(&stat, pid)
        .map(|p| json_u64(p, "/devices/0/memory"))
        .unwrap_or_else(|| panic!("simgpu does not list pid {pid}: {stat}"))
}

#[test]
fn vmm_granules_count_and_give_back() {
    for kind in ClientKind::C {
        let who = kind.name();
        let node = node();
        let container = Container::new(&node, Some("1GiB"));
        let mut p = Running::spawn_interactive(
            &mut kind.command(&container, "vmm", &["8"]),
            &format!("vmm ({who})"),
        );
        let created = p.wait_for_json("created ", Duration::from_secs(60));
        let size = json_u64(&created, "/size");
        assert_eq!(
            size,
            8 * json_u64(&created, "/granularity"),
            "{who}: {created}"
        );
        assert_eq!(
            created["data_ok"], true,
            "{who}: mapped memory works: {created}"
        );
        assert_eq!(json_u64(&created, "/total"), GIB, "{who}: {created}");
        assert_eq!(
            json_u64(&created, "/free_before"),
            GIB - CONTEXT,
            "{who}: {created}"
        );
        assert_eq!(
            json_u64(&created, "/free_created"),
            GIB - CONTEXT - size,
            "{who}: cuMemCreate counts its bytes: {created}"
        );
        assert_eq!(
            json_u64(&created, "/over_rc"),
            2,
            "{who}: cuMemCreate of more granules than the cap has left should fail with \
             OUT_OF_MEMORY: {created}"
        );
        assert_eq!(
            truth(&node, p.pid()),
            CONTEXT + size,
            "{who}: ground truth while mapped (the refused cuMemCreate holds nothing)"
        );
        p.send_line("go");
        let released = p.wait_for_json("released ", Duration::from_secs(60));
        assert_eq!(
            json_u64(&released, "/free_released"),
            GIB - CONTEXT,
            "{who}: cuMemRelease + unmap gives the granules back: {released}"
        );
        let status = p.wait(Duration::from_secs(30));
        assert!(status.success(), "{who}: vmm exited with {status}");
    }
}

#[test]
fn async_allocations_count_and_give_back() {
    for kind in ClientKind::C {
        let who = kind.name();
        let node = node();
        let container = Container::new(&node, Some("1GiB"));
        let bytes = 100 * MIB + 12345;
        let mut p = Running::spawn_interactive(
            &mut kind.command(&container, "async", &[&bytes.to_string()]),
            &format!("async ({who})"),
        );
        let allocated = p.wait_for_json("allocated ", Duration::from_secs(60));
        assert_eq!(json_u64(&allocated, "/total"), GIB, "{who}: {allocated}");
        assert_eq!(
            json_u64(&allocated, "/free_allocated"),
            json_u64(&allocated, "/free_before") - bytes,
            "{who}: cuMemAllocAsync counts its bytes: {allocated}"
        );
        assert_eq!(
            json_u64(&allocated, "/over_rc"),
            2,
            "{who}: cuMemAllocAsync of more than is left should fail with OUT_OF_MEMORY: \
             {allocated}"
        );
        assert_eq!(
            truth(&node, p.pid()),
            CONTEXT + bytes,
            "{who}: ground truth after the async allocation"
        );
        p.send_line("go");
        let freed = p.wait_for_json("freed ", Duration::from_secs(60));
        assert_eq!(
            json_u64(&freed, "/free_freed"),
            json_u64(&allocated, "/free_before"),
            "{who}: cuMemFreeAsync (after synchronizing) gives the bytes back: {freed}"
        );
        let status = p.wait(Duration::from_secs(30));
        assert!(status.success(), "{who}: async exited with {status}");
    }
}
