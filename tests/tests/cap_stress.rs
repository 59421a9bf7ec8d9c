//! 8 processes × 8 threads allocate and free random sizes for 10 s in one
//! container. The driver's ground truth, sampled all along, never shows the container above
//! its cap, and at the end everything is back to zero — in the driver and in the region.

use simgpu::node::Node;
use std::time::{Duration, Instant};
use tessera_region::Region;
use tessera_tests::{ClientKind, Container, Running, SimNode};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const PROCESSES: usize = 8;
const THREADS: &str = "8";
const SECONDS: &str = "10";

#[test]
fn many_processes_and_threads_never_exceed_the_cap() {
    let _serial = tessera_tests::timing_lock();
    // The node holds nothing but this container, so the device's counter (one atomic, read
    // at one instant) is the container's usage.
    let node = SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "32MiB")]);
    let container = Container::new(&node, Some("1GiB"));
    let max_bytes = (48 * MIB).to_string();
    let mut procs: Vec<Running> = (0..PROCESSES)
        .map(|i| {
            Running::spawn_interactive(
                &mut ClientKind::CLinked.command(
                    &container,
                    "stress",
                    &[THREADS, SECONDS, &max_bytes],
                ),
                &format!("stress process {i}"),
            )
        })
        .collect();
    // Every process has its context before any starts filling the cap.
    for p in &mut procs {
        p.wait_for_line("started", Duration::from_secs(60));
    }
    for p in &mut procs {
        p.send_line("go");
    }

    let truth = Node::open_existing(node.state()).expect("open the node's state");
    let mut samples = 0u64;
    let mut highest = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut running = procs.len();
    while running > 0 {
        let used = truth.memory_used(0);
        samples += 1;
        highest = highest.max(used);
        assert!(
            used <= GIB,
            "the container holds {used} bytes, {} over its 1 GiB cap (sample {samples})",
            used - GIB
        );
        running = procs
            .iter_mut()
            .map(|p| p.try_status().is_none())
            .filter(|&alive| alive)
            .count();
        assert!(
            Instant::now() < deadline,
            "the stress processes ran past 60 s"
        );
        std::thread::sleep(Duration::from_micros(500));
    }

    let mut ooms = 0;
    for (i, p) in procs.into_iter().enumerate() {
        // The report was the process's last line; the status says whether any call failed
        // other than with OUT_OF_MEMORY.
        let mut p = p;
        let line = p.wait_for_line("stress", Duration::from_secs(5));
        let status = p.wait(Duration::from_secs(5));
        assert!(
            status.success(),
            "stress process {i} failed ({status}): {line}"
        );
        let doc: serde_json::Value =
            serde_json::from_str(line.trim_start_matches("stress ")).expect("stress JSON");
        ooms += doc["ooms"].as_u64().unwrap_or(0);
        assert_eq!(doc["errors"], 0, "process {i}: {doc}");
    }
    assert!(
        highest > GIB - 64 * MIB,
        "the container never came near its cap (highest {highest} bytes): the test did not \
         test the cap"
    );
    assert!(
        ooms > 0,
        "no allocation was refused: the cap was never reached"
    );
    assert_eq!(
        truth.memory_used(0),
        0,
        "the driver still counts memory after every process exited"
    );
    let region = Region::open(container.region()).expect("open the container's region");
    let live = region.processes();
    assert!(
        live.is_empty(),
        "slots still live after every process exited: {live:?}"
    );
    assert_eq!(
        region.memory_used(0),
        0,
        "the region still counts memory after every process exited"
    );
    eprintln!("{samples} samples, highest {highest} bytes, {ooms} refusals");
}
