//! Virtual memory management (`cuMemCreate` in granules, mapped and used) and
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

/// PyTorch's expandable segments: `cuMemCreate`, `cuMemMap`, `cuMemRelease` at once, and
/// the mapping used on. The driver keeps the memory until it is unmapped too, so the
/// container must count it until then: released-but-mapped memory still counts against
/// the cap (as much again does not fit), and one `cuMemUnmap` over both mappings gives it
/// back — in the library's figures and in the driver's ground truth.
#[test]
fn released_but_mapped_memory_counts_until_unmapped() {
    for kind in ClientKind::C {
        let who = kind.name();
        let node = node();
        let container = Container::new(&node, Some("1GiB"));
        let mut p = Running::spawn_interactive(
            &mut kind.command(&container, "expandable", &["256"]),
            &format!("expandable ({who})"),
        );
        let released = p.wait_for_json("released ", Duration::from_secs(60));
        let size = json_u64(&released, "/size");
        assert_eq!(size, 512 * MIB, "{who}: {released}");
        assert_eq!(released["data_ok"], true, "{who}: {released}");
        assert_eq!(
            json_u64(&released, "/free_before"),
            GIB - CONTEXT,
            "{who}: {released}"
        );
        assert_eq!(
            json_u64(&released, "/free_released"),
            GIB - CONTEXT - size,
            "{who}: released but still mapped, the granules still count: {released}"
        );
        assert_eq!(
            json_u64(&released, "/over_rc"),
            2,
            "{who}: as many granules again must not fit beside the mapped ones: {released}"
        );
        assert_eq!(
            truth(&node, p.pid()),
            CONTEXT + size,
            "{who}: the driver still holds the released, mapped granules"
        );
        p.send_line("go");
        let unmapped = p.wait_for_json("unmapped ", Duration::from_secs(60));
        assert_eq!(
            json_u64(&unmapped, "/free_unmapped"),
            GIB - CONTEXT,
            "{who}: unmapping both mappings gives the granules back: {unmapped}"
        );
        assert_eq!(
            truth(&node, p.pid()),
            CONTEXT,
            "{who}: the driver freed the granules at the unmap"
        );
        p.send_line("go");
        let status = p.wait(Duration::from_secs(30));
        assert!(status.success(), "{who}: expandable exited with {status}");
    }
}

/// `cuMemFreeAsync` frees in stream order: while the free waits behind work still queued
/// on its stream, the memory is in use and stays counted (the same bytes again do not fit,
/// and the driver's ground truth agrees); once the stream has run it, it is given back.
#[test]
fn an_async_free_gives_back_when_it_runs_in_its_stream() {
    for kind in ClientKind::C {
        let who = kind.name();
        let node = node();
        let container = Container::new(&node, Some("1GiB"));
        let bytes = 600 * MIB;
        let mut p = Running::spawn_interactive(
            &mut kind.command(&container, "asyncorder", &[&bytes.to_string()]),
            &format!("asyncorder ({who})"),
        );
        let pending = p.wait_for_json("pending ", Duration::from_secs(60));
        let before = json_u64(&pending, "/free_before");
        assert_eq!(before, GIB - CONTEXT, "{who}: {pending}");
        assert_eq!(
            json_u64(&pending, "/free_allocated"),
            before - bytes,
            "{who}: {pending}"
        );
        assert_eq!(
            json_u64(&pending, "/free_pending"),
            before - bytes,
            "{who}: a free still queued behind running work gives nothing back yet: {pending}"
        );
        assert_eq!(
            json_u64(&pending, "/over_rc"),
            2,
            "{who}: the same bytes again must not fit while the free is queued: {pending}"
        );
        let held = truth(&node, p.pid());
        assert_eq!(
            held,
            CONTEXT + bytes,
            "{who}: the driver still holds the memory whose free is queued"
        );
        assert!(held <= GIB, "{who}: ground truth {held} over the cap");
        p.send_line("go");
        let settled = p.wait_for_json("settled ", Duration::from_secs(60));
        assert_eq!(
            json_u64(&settled, "/free_settled"),
            before,
            "{who}: once the stream has run the free, its bytes are back: {settled}"
        );
        let status = p.wait(Duration::from_secs(30));
        assert!(status.success(), "{who}: asyncorder exited with {status}");
    }
}
