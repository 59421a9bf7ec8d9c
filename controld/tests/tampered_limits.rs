//! A process that writes its own container's region gains no memory: the caps it is held
//! to are also in the region's limits file, which controld alone writes (the container
//! gets it read-only), so a raised cap in the region changes nothing; and a usage counter
//! lowered below what the container's processes hold is put back by the daemon within a
//! pass. The daemon restores the region to its record and status names the container.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tessera_tests::{json_u64, tessera_client, ClientKind, Running};

const CONFIG: &str = r#"
[[container]]
name = "greedy"
gpus = [0]
memory = "1GiB"

[[container]]
name = "neighbour"
gpus = [0]
memory = "2GiB"
"#;

/// A capfill in `greedy`: the "full" document (what it allocated and what it was told).
fn capfill(node: &Node) -> serde_json::Value {
    let client = tessera_client(ClientKind::CDlopen);
    let mut cmd = node.in_container("greedy", &client);
    cmd.arg("capfill").stdin(std::process::Stdio::null());
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(120));
    tessera_tests::assert_no_crash(&out, "capfill");
    let text = String::from_utf8_lossy(&out.stdout);
    let full = text
        .lines()
        .find_map(|l| l.strip_prefix("full "))
        .unwrap_or_else(|| {
            panic!(
                "no full line: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    serde_json::from_str(full).unwrap()
}

fn problems(node: &Node, name: &str) -> String {
    node.container(name).unwrap()["problems"].to_string()
}

#[test]
fn a_cap_raised_in_the_region_holds_at_the_declared_cap() {
    let mut node = Node::new("tamper-cap");
    let config = node.write_config(CONFIG);
    node.start(Some(&config));
    let limits = tessera_region::limits_path(&node.region("greedy"));
    let meta = std::fs::metadata(&limits).expect("controld made the limits file");
    assert_eq!(meta.mode() & 0o777, 0o444, "the limits file is read-only");

    // A process of `greedy` raises its region's cap to 16 GiB, again and again (the daemon
    // puts it back at each pass), while another of its processes fills the cap.
    let layout = map_region_writable(&node.region("greedy"));
    let stop = Arc::new(AtomicBool::new(false));
    let tamperer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                layout.devices[0]
                    .memory_cap
                    .store(16 * GIB, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let full = capfill(&node);
    stop.store(true, Ordering::Relaxed);
    tamperer.join().unwrap();
    assert!(
        json_u64(&full, "/allocated") <= GIB,
        "allocated past the declared cap: {full}"
    );
    assert_eq!(json_u64(&full, "/total_full"), GIB, "{full}");
    assert_ne!(json_u64(&full, "/one_more_rc"), 0, "{full}");

    wait_until(Duration::from_secs(5), "the cap put back", || {
        layout.devices[0].memory_cap.load(Ordering::Relaxed) == GIB
    });
    let p = problems(&node, "greedy");
    assert!(p.contains("memory cap was changed"), "{p}");
    let neighbour = node.container("neighbour").unwrap();
    assert_eq!(json_u64(&neighbour, "/devices/0/memory_cap"), 2 * GIB);
    assert!(!problems(&node, "neighbour").contains("changed"));
}

#[test]
fn a_usage_counter_lowered_by_the_container_is_put_back() {
    let mut node = Node::new("tamper-usage");
    let config = node.write_config(CONFIG);
    node.start(Some(&config));
    let client = tessera_client(ClientKind::CLinked);
    let mut holder = Running::spawn(
        node.in_container("greedy", &client)
            .args(["hold", &(256 * MIB).to_string()]),
        "hold in greedy",
    );
    holder.wait_for_line("ready", Duration::from_secs(60));
    let layout = map_region_writable(&node.region("greedy"));
    let held = layout.devices[0].memory_used.load(Ordering::Relaxed);
    // Its allocation and its context.
    assert!(held > 256 * MIB, "{held}");

    // Zeroing the counter would let the container allocate another whole cap.
    layout.devices[0].memory_used.store(0, Ordering::Relaxed);
    wait_until(Duration::from_secs(5), "the usage put back", || {
        layout.devices[0].memory_used.load(Ordering::Relaxed) >= held
    });
    let p = problems(&node, "greedy");
    assert!(p.contains("usage counter was lowered"), "{p}");
    let full = capfill(&node);
    assert!(
        json_u64(&full, "/allocated") + held <= GIB,
        "allocated past the cap beside the holder's {held} bytes: {full}"
    );
    holder.kill();
}

/// The limits file removed, or replaced by something that is not a file: made again within
/// a pass, status says so, and a new process of the container is held to its cap by it.
#[test]
fn a_removed_or_replaced_limits_file_is_made_again() {
    let mut node = Node::new("tamper-gone");
    let config = node.write_config(CONFIG);
    node.start(Some(&config));
    let limits = tessera_region::limits_path(&node.region("greedy"));
    let is_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file());
    assert!(is_file(&limits));
    std::fs::remove_file(&limits).unwrap();
    wait_until(Duration::from_secs(5), "the limits file made again", || {
        is_file(&limits)
    });
    let p = problems(&node, "greedy");
    assert!(p.contains("limits file was removed or replaced"), "{p}");
    // Something else in its place: a FIFO, which a library opening it would wait on.
    std::fs::remove_file(&limits).unwrap();
    let fifo =
        std::ffi::CString::new(limits.clone().into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; mkfifo has no other precondition.
    let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) };
    assert_eq!(made, 0);
    wait_until(Duration::from_secs(5), "the limits file made again", || {
        is_file(&limits)
    });
    let meta = std::fs::metadata(&limits).unwrap();
    assert_eq!(
        meta.mode() & 0o777,
        0o444,
        "the limits file is read-only again"
    );
    let full = capfill(&node);
    assert!(
        json_u64(&full, "/allocated") <= GIB,
        "allocated past the cap: {full}"
    );
}
