//! What a container writes gains it nothing on compute: one whose processes rewrite its
//! region's compute words every millisecond (mode and the header's limited bits, its
//! bucket, its block, false busy spans) keeps its share on simgpu's engine, since its
//! library obeys the daemon's copy in the limits file, and is named in status; its
//! neighbour keeps what is left and is never named. An offline container that clears its
//! block stays blocked while online work runs.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use tessera_region::layout::COMPUTE_UNLIMITED;
use tessera_tests::Running;

const TRAIN: [&str; 5] = ["train", "--kernel-ms", "1", "--seconds", "60"];

/// Every millisecond until `stop`, makes GPU 0 of the region at `path` look unlimited to
/// the library: its account's mode and the header's summary bits.
fn unlimit_in_a_loop(
    path: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let region = map_region_writable(&path);
        while !stop.load(Ordering::Relaxed) {
            region.compute[0]
                .mode
                .store(COMPUTE_UNLIMITED, Ordering::SeqCst);
            region.header.compute_limited.store(0, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

/// Each process's share of engine 0 between two `simgpu stat` samples.
fn engine_shares(node: &Node, pids: &[u32], window: Duration) -> Vec<f64> {
    let busy = |stat: &serde_json::Value| -> Vec<u64> {
        pids.iter()
            .map(|&pid| {
                tessera_tests::stat_process(stat, pid)
                    .and_then(|p| p.pointer("/devices/0/busy_ns"))
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0)
            })
            .collect()
    };
    let stat0 = node.sim.stat();
    std::thread::sleep(window);
    let stat1 = node.sim.stat();
    let taken = (tessera_tests::json_u64(&stat1, "/taken_ns")
        - tessera_tests::json_u64(&stat0, "/taken_ns")) as f64;
    busy(&stat0)
        .iter()
        .zip(busy(&stat1))
        .map(|(a, b)| (b - a) as f64 / taken)
        .collect()
}

#[test]
fn a_container_rewriting_its_compute_words_keeps_its_share_and_is_named() {
    let _serial = tessera_tests::timing_lock();
    let mut node = Node::new("compute-check");
    let config = node.write_config(&gpu0_containers(&[
        ("rogue", "fixed:30"),
        ("fair", "burst:70"),
    ]));
    node.start(Some(&config));
    let stop = Arc::new(AtomicBool::new(false));
    let tamper = unlimit_in_a_loop(node.region("rogue"), stop.clone());
    let mut trainers: Vec<Running> = ["rogue", "fair"]
        .iter()
        .map(|name| train_in(&node, name))
        .collect();
    let pids: Vec<u32> = trainers.iter().map(Running::pid).collect();
    // Named within seconds: the words it rewrote that the daemon found and put back.
    let started = Instant::now();
    let named = loop {
        let status = node.status();
        let problems = container(&status, "rogue").unwrap()["problems"].to_string();
        if problems.contains("rewritten in its region") {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(30) {
            eprintln!("{problems}");
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let shares = engine_shares(&node, &pids, Duration::from_secs(4));
    let status = node.status();
    stop.store(true, Ordering::Relaxed);
    tamper.join().unwrap();
    for t in &mut trainers {
        t.kill();
    }
    eprintln!(
        "rogue (fixed:30, rewriting its words) {:.1} %, fair (burst:70) {:.1} % of the engine",
        shares[0] * 100.0,
        shares[1] * 100.0
    );
    named.expect("the rogue container was never named");
    let fair = container(&status, "fair").unwrap();
    assert!(fair["problems"].as_array().unwrap().is_empty(), "{fair}");
    // Held to its grant (the release figures, 30 ± 3 and ≥ 67 %, are the scenario runner's;
    // a busy debug build is held within 5 points). Where its words were obeyed, it took
    // 48 % and left its neighbour 47 %.
    assert!(
        (shares[0] - 0.30).abs() <= 0.05,
        "rogue got {:.1} % of the engine",
        shares[0] * 100.0
    );
    assert!(
        shares[1] >= 0.62,
        "fair got {:.1} % of the engine",
        shares[1] * 100.0
    );
}

/// A node whose GPU 0 holds the online containers `online` (name, policy) and an offline
/// best-effort container `batch`, its daemon started.
fn beside_an_offline_batch(name: &str, online: &[(&str, &str)]) -> Node {
    let mut node = Node::new(name);
    let config = node.write_config(&format!(
        "{}[[container]]\nname = \"batch\"\ngpus = [0]\ncompute = \"best-effort\"\npriority = \"offline\"\n",
        gpu0_containers(online)
    ));
    node.start(Some(&config));
    node
}

/// `gpuload train` in container `name`.
fn train_in(node: &Node, name: &str) -> Running {
    let mut cmd = node.in_container(name, &tessera_tests::artifacts().gpuload);
    cmd.args(TRAIN);
    Running::spawn_captured(&mut cmd, &format!("gpuload train in {name}"))
}

/// Every millisecond until `stop`, clears GPU 0's block in the region at `path`, says the
/// container is online and fills its bucket: what an offline container's processes can
/// write.
fn unblock_in_a_loop(
    path: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let region = tessera_region::Region::open(&path).unwrap();
        let account = region.compute(0);
        while !stop.load(Ordering::Relaxed) {
            account.blocked.store(0, Ordering::SeqCst);
            account.bucket_ns.store(10_000_000_000, Ordering::SeqCst);
            account
                .priority
                .store(tessera_region::layout::PRIORITY_ONLINE, Ordering::SeqCst);
            account.wake_gate();
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

#[test]
fn an_offline_container_that_clears_its_block_stays_blocked() {
    let _serial = tessera_tests::timing_lock();
    let node = beside_an_offline_batch("compute-block", &[("svc", "best-effort")]);
    let stop = Arc::new(AtomicBool::new(false));
    let tamper = unblock_in_a_loop(node.region("batch"), stop.clone());
    let mut trainers: Vec<Running> = ["svc", "batch"]
        .iter()
        .map(|name| train_in(&node, name))
        .collect();
    let pids: Vec<u32> = trainers.iter().map(Running::pid).collect();
    std::thread::sleep(Duration::from_secs(2));
    let shares = engine_shares(&node, &pids, Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    tamper.join().unwrap();
    for t in &mut trainers {
        t.kill();
    }
    eprintln!(
        "online svc {:.1} %, offline batch clearing its block {:.1} % of the engine",
        shares[0] * 100.0,
        shares[1] * 100.0
    );
    // Where its words were obeyed, it ran beside the online work (4 % of the engine on
    // its bucket, in runs of a millisecond between the daemon's put-backs).
    assert!(shares[1] <= 0.015, "batch got {:.1} %", shares[1] * 100.0);
    assert!(shares[0] >= 0.80, "svc got {:.1} %", shares[0] * 100.0);
}

/// Every millisecond until `stop`, has the online container whose region is at `path` claim
/// work (`active`) and set its bit on the board, running nothing, while the thread holds a
/// slot of the region (a live process of the container).
fn claim_in_a_loop(
    path: std::path::PathBuf,
    board: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let region: &'static tessera_region::Region =
            Box::leak(Box::new(tessera_region::Region::open(&path).unwrap()));
        let _slot = region.claim_slot().unwrap();
        let board = tessera_region::Board::open(&board).unwrap();
        let account = region.compute(0);
        while !stop.load(Ordering::Relaxed) {
            account.active.store(1, Ordering::SeqCst);
            account.wake_active();
            if let Some(bit) = account.board_bit() {
                board.set(0, bit);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}

#[test]
fn an_online_container_claiming_work_it_does_not_do_stops_no_one() {
    let _serial = tessera_tests::timing_lock();
    let node = beside_an_offline_batch("compute-claims", &[("liar", "best-effort")]);
    let stop = Arc::new(AtomicBool::new(false));
    let liar = claim_in_a_loop(
        node.region("liar"),
        node.state_dir().join(tessera_region::BOARD_FILE),
        stop.clone(),
    );
    let mut trainer = train_in(&node, "batch");
    let pid = trainer.pid();
    // Found out within a second or two of claiming (a second of claims, a second of NVML).
    let started = Instant::now();
    let named = loop {
        let problems = node.container("liar").unwrap()["problems"].to_string();
        if problems.contains("does not do") {
            break true;
        }
        if started.elapsed() > Duration::from_secs(30) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let shares = engine_shares(&node, &[pid], Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    liar.join().unwrap();
    trainer.kill();
    eprintln!(
        "offline batch beside an online container claiming work it does not do: {:.1} % of the engine",
        shares[0] * 100.0
    );
    assert!(named, "the container claiming work was not named");
    // Where its claims and bit were obeyed, the offline work hardly ran (0.0 %); alone it
    // gets 85-90 % of the engine, less on a loaded host.
    assert!(shares[0] >= 0.60, "batch got {:.1} %", shares[0] * 100.0);
}

#[test]
fn an_online_container_setting_its_neighbours_board_bits_stops_no_one() {
    let _serial = tessera_tests::timing_lock();
    let node = beside_an_offline_batch(
        "compute-framing",
        &[("framer", "best-effort"), ("idle", "best-effort")],
    );
    // Every bit of the board but its own, every millisecond: its idle neighbour's, and
    // those nobody holds.
    let stop = Arc::new(AtomicBool::new(false));
    let framer = {
        let region = tessera_region::Region::open(&node.region("framer")).unwrap();
        let own = region.compute(0).board_bit();
        let board = tessera_region::Board::open(&node.state_dir().join(tessera_region::BOARD_FILE))
            .unwrap();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for bit in (0..64).filter(|&b| Some(b) != own) {
                    board.set(0, bit);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut trainer = train_in(&node, "batch");
    let pid = trainer.pid();
    std::thread::sleep(Duration::from_secs(2));
    let shares = engine_shares(&node, &[pid], Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    framer.join().unwrap();
    trainer.kill();
    eprintln!(
        "offline batch beside an online container setting its neighbours' board bits: {:.1} % of the engine",
        shares[0] * 100.0
    );
    // Where the bits were obeyed, the offline work ran only in the gaps between the
    // daemon's drops (5.8 %); alone it gets 85-90 %, less on a loaded host.
    assert!(shares[0] >= 0.60, "batch got {:.1} %", shares[0] * 100.0);
}
