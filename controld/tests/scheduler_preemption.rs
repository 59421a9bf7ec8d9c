//! Online work preempts offline work without waiting for a tick: `controld`'s preemption
//! thread sleeps on the online containers' `active` words and blocks the offline containers
//! of the GPU within microseconds of a raise, and lifts the block when the online library
//! drops the word again (and wakes it) once online work stops. Driven by a fake offline
//! application and by this test acting as the online container's library.

mod scheduler_support;

use scheduler_support::*;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_region::monotonic_ns;

const ROUNDS: usize = 30;

#[test]
fn online_work_blocks_offline_work_at_once_and_the_block_lifts_when_it_stops() {
    let _serial = serial();
    let daemon = Daemon::start(
        "preempt",
        &config(&[
            ("web", "best-effort", "online"),
            ("batch", "best-effort", "offline"),
        ]),
    );
    let web = daemon.region("web");
    let batch = daemon.region("batch");
    let offline = FakeApp::start(batch, Default::default(), Load::default());
    // This test plays the online container's library: it holds a slot like one.
    let _slot = web.claim_slot().unwrap();
    let (w, b) = (web.compute(0), batch.compute(0));
    wait_until(Duration::from_secs(2), "offline work running", || {
        offline.kernels.load(Ordering::Relaxed) > 20
    });

    let mut latencies = Vec::new();
    for round in 0..ROUNDS {
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(b.blocked.load(Ordering::SeqCst), 0, "round {round}");
        // What the online library does at its first launch after idle.
        let raised = monotonic_ns();
        w.active.store(1, Ordering::SeqCst);
        w.active_raised_ns.store(raised, Ordering::Relaxed);
        w.wake_active();
        let deadline = Instant::now() + Duration::from_secs(1);
        while b.blocked.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "round {round}: never blocked");
            std::hint::spin_loop();
        }
        latencies.push(monotonic_ns() - raised);
        // The offline app drains: at most the kernel it had on the engine completes.
        let kernels = offline.kernels.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(15));
        let during = offline.kernels.load(Ordering::Relaxed) - kernels;
        assert!(
            during <= 1,
            "round {round}: {during} offline kernels ran while blocked"
        );
        // Online work ends: what the online library does when nothing is left in flight.
        w.active.store(0, Ordering::SeqCst);
        w.wake_active();
        let lifted = wait_until(Duration::from_secs(1), "the block lifted", || {
            b.blocked.load(Ordering::SeqCst) == 0
        });
        assert!(
            lifted <= Duration::from_millis(50),
            "round {round}: unblocked after {lifted:?}"
        );
    }
    latencies.sort_unstable();
    let p50 = latencies[ROUNDS / 2];
    let p99 = latencies[ROUNDS - 1];
    eprintln!(
        "preemption (online raise → offline blocked) over {ROUNDS} rounds: p50 {:.1} µs, max {:.1} µs",
        p50 as f64 / 1e3,
        p99 as f64 / 1e3
    );
    // The tick alone would take 2.5 ms at the median.
    assert!(p50 < 1_000_000, "median preemption latency {p50} ns");

    let device = daemon.device("batch");
    assert_eq!(
        device["preemptions"].as_u64(),
        Some(ROUNDS as u64),
        "{device}"
    );
    // The offline container resumed after the last round.
    let kernels = offline.kernels.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(1), "offline work resumed", || {
        offline.kernels.load(Ordering::Relaxed) > kernels + 5
    });
}

#[test]
fn offline_containers_share_the_gpu_while_online_is_idle_and_get_nothing_while_it_runs() {
    let _serial = serial();
    let daemon = Daemon::start(
        "priority",
        &config(&[
            ("web", "burst:40", "online"),
            ("batch", "best-effort", "offline"),
        ]),
    );
    let web = daemon.region("web");
    let batch = daemon.region("batch");
    let engine: Engine = Default::default();
    let offline = FakeApp::start(batch, engine.clone(), Load::default());
    let alone = shares(
        &[&offline],
        Duration::from_millis(300),
        Duration::from_secs(1),
    )[0];
    eprintln!("offline alone (online idle): {:.1} %", alone * 100.0);
    assert!(alone >= 0.90, "offline alone got {:.1} %", alone * 100.0);
    assert_eq!(
        batch.compute(0).share_target_ppm.load(Ordering::Relaxed),
        1_000_000
    );

    let online = FakeApp::start(
        web,
        engine,
        Load {
            online: true,
            ..Load::default()
        },
    );
    let s = shares(
        &[&online, &offline],
        Duration::from_millis(300),
        Duration::from_secs(1),
    );
    eprintln!(
        "online busy: online {:.1} %, offline {:.1} %",
        s[0] * 100.0,
        s[1] * 100.0
    );
    assert!(s[0] >= 0.90, "online got {:.1} %", s[0] * 100.0);
    assert!(s[1] <= 0.01, "offline got {:.1} %", s[1] * 100.0);
    assert_eq!(batch.compute(0).share_target_ppm.load(Ordering::Relaxed), 0);
    assert_eq!(
        web.compute(0).share_target_ppm.load(Ordering::Relaxed),
        1_000_000
    );
    drop(online);
    wait_until(Duration::from_secs(2), "offline unblocked", || {
        batch.compute(0).blocked.load(Ordering::SeqCst) == 0
    });
}

/// The daemon keeps the node's priority board beside the regions: each online container
/// gets a bit of its GPU's word (offline ones none), and bits no online container owns are
/// dropped at the next tick.
#[test]
fn online_containers_get_board_bits_and_strays_are_dropped() {
    let _serial = serial();
    let daemon = Daemon::start(
        "board",
        &config(&[
            ("web", "best-effort", "online"),
            ("api", "burst:20", "online"),
            ("batch", "best-effort", "offline"),
        ]),
    );
    let board = tessera_region::Board::open(&daemon.state_dir().join(tessera_region::BOARD_FILE))
        .expect("controld makes the board");
    let bit = |name: &str| daemon.region(name).compute(0).board_bit();
    wait_until(
        Duration::from_secs(2),
        "bits given to both online containers",
        || bit("web").is_some() && bit("api").is_some(),
    );
    assert_ne!(bit("web"), bit("api"), "one bit each");
    assert_eq!(bit("batch"), None, "offline containers set no bit");
    // A bit that belongs to no container (a process of a container since removed, say).
    board.set(0, 40);
    wait_until(Duration::from_secs(1), "the stray bit dropped", || {
        board.online(0) & (1 << 40) == 0
    });
    // An online container's own bit stays while it has work (its library raises `active`
    // with it) ...
    let web = bit("web").unwrap();
    let account = daemon.region("web").compute(0);
    account.active.store(1, Ordering::SeqCst);
    board.set(0, web);
    std::thread::sleep(Duration::from_millis(50));
    assert_ne!(
        board.online(0) & (1 << web),
        0,
        "a working container's bit was dropped"
    );
    // ... and is cleared once it has had none for two ticks (its library clears it itself
    // when idle: a bit left set was set by someone else).
    account.active.store(0, Ordering::SeqCst);
    wait_until(
        Duration::from_secs(1),
        "the idle container's bit dropped",
        || board.online(0) & (1 << web) == 0,
    );
}
