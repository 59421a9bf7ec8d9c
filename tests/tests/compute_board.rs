//! The node's priority board stops offline launches by itself: an offline container whose
//! region sits beside a board launches nothing while any online bit is set on its device,
//! with no daemon to block it, and goes on once the bits are clear.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_region::layout::{COMPUTE_DAEMON, PRIORITY_OFFLINE};
use tessera_region::{Board, Region, RegionInit, BOARD_FILE, MAX_DEVICES};
use tessera_tests::{artifacts, timing_lock, Running, SimNode};

/// A directory of its own for the region and the board, removed at the end.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn launches(region: &Region) -> u64 {
    region.compute(0).launches.load(Ordering::SeqCst)
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_online_bit_on_the_board_stops_offline_launches_without_a_daemon() {
    let _serial = timing_lock();
    let dir = Dir(std::env::temp_dir().join(format!("tessera-board-test-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let board = Board::create(&dir.0.join(BOARD_FILE)).unwrap();
    let region_path = dir.0.join("batch.region");
    let region = Region::open_or_create(
        &region_path,
        &RegionInit {
            name: "batch".into(),
            memory_caps: [None; MAX_DEVICES],
        },
    )
    .unwrap();
    // What controld would have written: metered, offline, and (with no daemon to refill)
    // tokens for far longer than the test.
    let account = region.compute(0);
    account.priority.store(PRIORITY_OFFLINE, Ordering::Relaxed);
    account.bucket_ns.store(1_000_000_000_000, Ordering::SeqCst);
    region.set_compute_mode(0, COMPUTE_DAEMON);

    let node = SimNode::new("A100-80GB", &[]);
    let mut cmd = node.command(&artifacts().gpuload);
    cmd.env("LD_PRELOAD", &artifacts().libtessera)
        .env("TESSERA_REGION", &region_path)
        .args(["train", "--kernel-ms", "1", "--seconds", "30"]);
    let mut trainer = Running::spawn_captured(&mut cmd, "gpuload train");
    wait_for(
        "the offline trainer launching",
        Duration::from_secs(10),
        || launches(&region) > 20,
    );

    // An online container has work: its bit goes up, and the trainer stops at once (what
    // it had already launched drains).
    assert!(board.set(0, 5));
    std::thread::sleep(Duration::from_millis(20));
    let stopped_at = launches(&region);
    std::thread::sleep(Duration::from_millis(300));
    assert!(trainer.try_status().is_none(), "the trainer ended early");
    assert_eq!(
        launches(&region),
        stopped_at,
        "offline launches went on while an online bit was set"
    );
    assert!(
        account.blocked_seen_ns.load(Ordering::Relaxed) != 0,
        "the offline library never saw itself stopped"
    );

    // The online work ends: the trainer goes on by itself.
    board.clear(0, 5);
    wait_for("offline launches resuming", Duration::from_secs(2), || {
        launches(&region) > stopped_at + 20
    });
    trainer.kill();
}
