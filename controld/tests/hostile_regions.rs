//! A container's region file attacked from inside the container while the daemon runs:
//! truncated to nothing, grown to 10 GB, replaced by a symbolic link, its header
//! overwritten. The daemon never dies (no SIGBUS), keeps serving the other container, and
//! reports the attacked one (status, metric, log), sets its file aside and gives it a fresh
//! region from its declaration. A process that still opens the spoiled file (as a
//! container whose bind mount pins it does) fails closed: it gets no memory.

mod support;

use std::path::Path;
use std::time::Duration;
use support::*;
use tessera_tests::{json_u64, tessera_client, ClientKind, Running};

fn config(metrics: std::net::SocketAddr) -> String {
    format!(
        r#"
[daemon]
metrics = "{metrics}"

[[container]]
name = "victim"
gpus = [0]
memory = "1GiB"

[[container]]
name = "neighbour"
gpus = [0]
memory = "2GiB"
"#
    )
}

/// What a capfill in the region at `region` got: `Some(bytes)` of the cap it filled, or
/// `None` when it got no memory at all (the context itself refused, or nothing allocated).
fn capfill(node: &Node, region: &Path) -> Option<u64> {
    capfill_report(node, region).map(|full| json_u64(&full, "/total_full"))
}

/// The report of a capfill in the region at `region` that got memory (`allocated`: what it
/// allocated beside its context; `total_full`: the cap as it saw it once full).
fn capfill_report(node: &Node, region: &Path) -> Option<serde_json::Value> {
    let client = tessera_client(ClientKind::CDlopen);
    let mut cmd = node.in_container("victim", &client);
    cmd.env("TESSERA_REGION", region)
        .arg("capfill")
        .stdin(std::process::Stdio::null());
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(60));
    tessera_tests::assert_no_crash(&out, "capfill");
    let text = String::from_utf8_lossy(&out.stdout);
    let full = text
        .lines()
        .find_map(|l| l.strip_prefix("full "))
        .map(|j| serde_json::from_str::<serde_json::Value>(j).unwrap());
    match full {
        Some(full) if json_u64(&full, "/allocated") > 0 => Some(full),
        _ => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("out-of-memory"),
                "not failed closed: {stderr}"
            );
            None
        }
    }
}

#[test]
fn an_attacked_region_is_set_aside_and_the_daemon_serves_on() {
    let mut node = Node::new("hostile");
    let metrics = free_local_addr();
    let config = node.write_config(&config(metrics));
    node.start(Some(&config));
    let client = tessera_client(ClientKind::CDlopen);
    let mut neighbour = Running::spawn(
        node.in_container("neighbour", &client)
            .args(["hold", &(256 * MIB).to_string()]),
        "hold in neighbour",
    );
    neighbour.wait_for_line("ready", Duration::from_secs(60));

    type Attack = fn(&Path, &Path);
    let attacks: [(&str, bool, Attack); 4] = [
        ("truncated", true, |region, _| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(region)
                .unwrap();
            f.set_len(0).unwrap();
        }),
        ("grown", true, |region, _| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(region)
                .unwrap();
            f.set_len(10 << 30).unwrap();
        }),
        ("replaced by a symbolic link", false, |region, dir| {
            let elsewhere = dir.join("elsewhere");
            std::fs::write(&elsewhere, b"not a region").unwrap();
            std::fs::remove_file(region).unwrap();
            std::os::unix::fs::symlink(&elsewhere, region).unwrap();
        }),
        ("overwritten", true, |region, _| {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(region)
                .unwrap();
            f.write_all_at(&[0xA5; 64], 0).unwrap();
        }),
    ];
    for (round, (what, spoils_file, attack)) in attacks.into_iter().enumerate() {
        // What a container's bind mount would keep: the file itself, whatever its path.
        let pinned = node.dir.path().join(format!("pinned-{round}.region"));
        std::fs::hard_link(node.region("victim"), &pinned).unwrap();
        attack(&node.region("victim"), node.dir.path());
        let want = round as u64 + 1;
        wait_until(Duration::from_secs(30), what, || {
            assert!(node.daemon_alive(), "{what}: controld died");
            node.container("victim")
                .is_some_and(|c| json_u64(&c, "/region_quarantines") == want)
        });
        assert!(node.daemon_alive(), "{what}: controld died");
        let status = node.status();
        let victim = container(&status, "victim").unwrap();
        assert!(
            victim["problems"].to_string().contains("quarantined"),
            "{what}: {victim}"
        );
        let other = container(&status, "neighbour").unwrap();
        assert!(other["problems"].as_array().unwrap().is_empty(), "{other}");
        assert_eq!(json_u64(&other, "/devices/0/memory_cap"), 2 * GIB);
        assert!(json_u64(&other, "/devices/0/memory_used") >= 256 * MIB);
        assert!(
            neighbour.try_status().is_none(),
            "the neighbour's process died"
        );
        // The path holds a fresh region with the declared cap.
        assert_eq!(capfill(&node, &node.region("victim")), Some(GIB), "{what}");
        if spoils_file {
            assert_eq!(capfill(&node, &pinned), None, "{what}: pinned file");
        }
        let _ = std::fs::remove_file(pinned);
    }
    let text = scrape(metrics, Duration::from_secs(10)).unwrap();
    assert_eq!(
        sample(
            &text,
            "tessera_container_region_quarantines_total{container=\"victim\"}"
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tessera_container_region_quarantines_total{container=\"neighbour\"}"
        ),
        Some(0.0)
    );
}

/// A process holds memory, and its container spoils its region's header: the daemon sets
/// the region aside, but the process keeps its memory through its old mapping, so the new
/// region starts with its charge (under its pid) instead of from zero: a new process gets
/// only what is left of the cap. When the old process ends, its charge is given back.
#[test]
fn a_region_set_aside_keeps_the_charge_of_its_live_processes() {
    let mut node = Node::new("hostile-charge");
    let metrics = free_local_addr();
    let config = node.write_config(&config(metrics));
    node.start(Some(&config));
    let client = tessera_client(ClientKind::CDlopen);
    let mut old = Running::spawn(
        node.in_container("victim", &client)
            .args(["hold", &(128 * MIB).to_string()]),
        "hold in victim",
    );
    old.wait_for_line("ready", Duration::from_secs(60));
    let held = json_u64(&node.container("victim").unwrap(), "/devices/0/memory_used");
    assert!(held >= 128 * MIB, "{held}");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(node.region("victim"))
            .unwrap();
        f.write_all_at(&[0xA5; 64], 0).unwrap();
    }
    wait_until(Duration::from_secs(30), "the quarantine", || {
        node.container("victim")
            .is_some_and(|c| json_u64(&c, "/region_quarantines") == 1)
    });
    let victim = node.container("victim").unwrap();
    assert_eq!(
        json_u64(&victim, "/devices/0/memory_used"),
        held,
        "{victim}"
    );
    let listed: Vec<u64> = victim["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| json_u64(p, "/pid"))
        .collect();
    assert!(
        listed.contains(&u64::from(old.pid())),
        "the old process is listed under its container: {victim}"
    );
    // The watchdog finds it through the file set aside: its real memory is the container's
    // (judged against its cap, and stopped with it under `enforce = "kill"`).
    assert_eq!(
        victim["regions_set_aside"].as_array().map(Vec::len),
        Some(1)
    );
    wait_until(Duration::from_secs(30), "the old process linked", || {
        node.container("victim").is_some_and(|c| {
            c["processes"].as_array().unwrap().iter().any(|p| {
                p["host_pids"]
                    .as_array()
                    .unwrap()
                    .contains(&serde_json::json!(old.pid()))
            }) && json_u64(&c, "/devices/0/real_memory_used") >= 128 * MIB
        })
    });
    // A new process fills what is left of the cap, not a fresh cap.
    let full = capfill_report(&node, &node.region("victim")).expect("memory left");
    let context = tessera_region::units::parse_size(CONTEXT_MEMORY).unwrap();
    let allocated = json_u64(&full, "/allocated");
    assert!(
        held + context + allocated <= GIB,
        "the old process holds {held}, the new one {context} + {allocated}: over the cap"
    );
    drop(old);
    wait_until(Duration::from_secs(30), "the old charge given back", || {
        node.container("victim")
            .is_some_and(|c| json_u64(&c, "/devices/0/memory_used") == 0)
    });
    assert_eq!(capfill(&node, &node.region("victim")), Some(GIB));
    let victim = node.container("victim").unwrap();
    assert!(victim.get("regions_set_aside").is_none(), "{victim}");
}
