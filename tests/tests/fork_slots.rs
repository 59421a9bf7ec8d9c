//! After `fork` the child has its own process slot and the parent's accounting
//! is unchanged — whether the child forks before CUDA is initialized (and then uses the GPU)
//! or after (and may not), and also when the parent dies while the child lives on.

use std::time::{Duration, Instant};
use tessera_region::Region;
use tessera_tests::{json_u64, processes_memory, ClientKind, Container, Running, SimNode};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const CONTEXT: u64 = 64 * MIB;

fn node() -> SimNode {
    SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "64MiB")])
}

/// The memory the region records for `pid` on device 0, or None if it holds no slot.
fn slot_memory(region: &Region, pid: u32) -> Option<u64> {
    region
        .processes()
        .iter()
        .find(|p| p.pid == pid)
        .map(|p| p.memory[0])
}

/// Kills a process that is not our child (a grandchild) when dropped.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill(2) with a pid the test's own client printed; no memory is involved.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Forked before cuInit: the child initializes, allocates and is accounted in a slot of its
/// own; after it exits the parent sees the whole cap and is accounted in its own slot.
#[test]
fn a_child_forked_before_init_has_its_own_slot() {
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    let bytes = 256 * MIB;
    let mut p = Running::spawn_interactive(
        &mut ClientKind::CLinked.command(&container, "forkchild", &[&bytes.to_string()]),
        "forkchild",
    );
    let parent = p.pid();
    let child = p.wait_for_json("child ", Duration::from_secs(60));
    let child_pid = json_u64(&child, "/pid") as u32;
    assert_eq!(json_u64(&child, "/total"), GIB, "child: {child}");
    assert_eq!(
        json_u64(&child, "/free"),
        GIB - CONTEXT - bytes,
        "the child's own allocation and context count: {child}"
    );
    let region = Region::open(container.region()).expect("open the region");
    assert_eq!(
        slot_memory(&region, child_pid),
        Some(CONTEXT + bytes),
        "the child should hold a slot of its own with its memory; slots: {:?}",
        region.processes()
    );
    assert_eq!(
        slot_memory(&region, parent).unwrap_or(0),
        0,
        "the parent holds nothing yet; slots: {:?}",
        region.processes()
    );
    let stat = node.stat();
    assert_eq!(
        processes_memory(&stat, &[child_pid], 0),
        CONTEXT + bytes,
        "{stat}"
    );

    p.send_line("go");
    let par = p.wait_for_json("parent ", Duration::from_secs(60));
    assert_eq!(json_u64(&par, "/child_exit"), 0, "{par}");
    assert_eq!(
        json_u64(&par, "/pre_init_rc"),
        3,
        "cuMemAlloc_v2 before cuInit: CUDA_ERROR_NOT_INITIALIZED, as from the driver: {par}"
    );
    assert_eq!(
        json_u64(&par, "/free"),
        GIB - CONTEXT,
        "after the child exited, its memory is the container's again: {par}"
    );
    assert_eq!(
        json_u64(&par, "/free_allocated"),
        GIB - CONTEXT - bytes,
        "{par}"
    );
    assert_eq!(
        slot_memory(&region, parent),
        Some(CONTEXT + bytes),
        "the parent is accounted in its own slot; slots: {:?}",
        region.processes()
    );
    assert_eq!(
        slot_memory(&region, child_pid),
        None,
        "the exited child still holds a slot"
    );
    p.send_line("go");
    assert!(p.wait(Duration::from_secs(30)).success());
}

/// Forked after the parent allocated: the child may not use CUDA (the driver refuses), and
/// its attempts and its normal exit leave the parent's slot and figures as they were.
#[test]
fn a_child_forked_after_init_leaves_the_parent_unchanged() {
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    let bytes = 300 * MIB;
    let mut p = Running::spawn_interactive(
        &mut ClientKind::CLinked.command(&container, "forkafter", &[&bytes.to_string()]),
        "forkafter",
    );
    let parent = p.pid();
    let par = p.wait_for_json("parent ", Duration::from_secs(60));
    assert_eq!(
        json_u64(&par, "/child_exit"),
        0,
        "the child's CUDA calls should all fail cleanly: {par}"
    );
    assert_eq!(
        json_u64(&par, "/free_after"),
        json_u64(&par, "/free_before"),
        "the parent's figures changed across the child's life: {par}"
    );
    assert_eq!(
        json_u64(&par, "/free_before"),
        GIB - CONTEXT - bytes,
        "{par}"
    );
    let child_pid = json_u64(&par, "/child") as u32;
    let region = Region::open(container.region()).expect("open the region");
    assert_eq!(
        slot_memory(&region, parent),
        Some(CONTEXT + bytes),
        "the parent's slot; slots: {:?}",
        region.processes()
    );
    assert_eq!(
        slot_memory(&region, child_pid).unwrap_or(0),
        0,
        "the child charged something"
    );
    assert_eq!(
        region.memory_used(0),
        CONTEXT + bytes,
        "the container's total"
    );
    let stat = node.stat();
    assert_eq!(
        processes_memory(&stat, &[parent], 0),
        CONTEXT + bytes,
        "{stat}"
    );
    p.send_line("go");
    assert!(p.wait(Duration::from_secs(30)).success());
}

/// A parent killed while its forked child lives on: the child must not keep the parent's
/// slot alive, so the container gets the memory back within a second.
#[test]
fn a_living_child_does_not_keep_a_dead_parent_slot() {
    let _serial = tessera_tests::timing_lock();
    let node = node();
    let container = Container::new(&node, Some("1GiB"));
    let bytes = 512 * MIB;
    let mut p = Running::spawn(
        &mut ClientKind::CLinked.command(&container, "forkhold", &[&bytes.to_string()]),
        "forkhold",
    );
    let line = p.wait_for_line("ready", Duration::from_secs(60));
    let doc: serde_json::Value =
        serde_json::from_str(line.trim_start_matches("ready ")).expect("ready JSON");
    let _child = KillOnDrop(json_u64(&doc, "/child") as i32);
    p.kill();
    let killed = Instant::now();
    loop {
        let mut cmd = ClientKind::CLinked.command(&container, "hold", &[&bytes.to_string()]);
        let mut h = Running::spawn_captured(&mut cmd, "hold after the parent's death");
        if h.try_wait_for_line("ready", Duration::from_secs(30))
            .is_some()
        {
            break;
        }
        let out = h.finish(Duration::from_secs(10));
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "1 s after the parent's SIGKILL, with its forked child alive, the container \
             cannot allocate 512 MiB again: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
