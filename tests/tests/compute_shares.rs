//! Compute shares of saturating containers under controld, measured from simgpu's per-process
//! busy time (the scenario runner's `fixed-alone`, `mixed`, `burst-join`, `best-effort`,
//! `long-kernels`, `shapes`, `mixed-deep` and `demo-mix`, with shorter phases than the
//! runner's).
//!
//! The figures (± 2 and ± 3 points) are the runner's to hold, in release over 10 s
//! (bench/RESULTS.md). These tests hold the behaviour with tolerances a debug build meets on
//! a busy 2-core machine: each container is throttled to near its policy, the order of the
//! shares is the policies' order, and no launch pattern escapes its share.

mod compute;

use compute::{assert_near, run};
use tessera_tests::timing_lock;

#[test]
fn fixed_30_alone_stays_at_30_in_every_second() {
    let _serial = timing_lock();
    let o = run("fixed-alone", 4.0);
    assert!(o.figure("windows") >= 3.0, "too few 1 s windows");
    assert_near("lowest 1 s window", o.figure("min_window"), 0.30, 0.07);
    assert_near("highest 1 s window", o.figure("max_window"), 0.30, 0.07);
}

#[test]
fn fixed_burst_and_best_effort_get_20_55_25() {
    let _serial = timing_lock();
    let o = run("mixed", 4.0);
    // Without the scheduler the three get a third each.
    let (f, b, e) = (
        o.figure("fixed20"),
        o.figure("burst30"),
        o.figure("besteffort"),
    );
    assert_near("fixed:20", f, 0.20, 0.05);
    assert!(
        b > e + 0.1 && e > f - 0.05,
        "burst:30 {b:.3}, best-effort {e:.3}, fixed:20 {f:.3}: not in the policies' order"
    );
    // Work conservation: without Tessera the three lose a switch's dead time at every
    // slice (92.7 % of the H200 profile's GPU is theirs); shares that leave the GPU idle, as
    // the gate did before held time and turns (85 % in all), fall below this.
    let total = o.figure("total");
    assert!(
        total >= 0.90,
        "the three hold {:.1} % of the GPU together",
        total * 100.0
    );
}

#[test]
fn burst_uses_idle_time_and_gives_it_back_when_fixed_joins() {
    let _serial = timing_lock();
    let o = run("burst-join", 3.0);
    // Alone it uses the idle time, far beyond its 30 %.
    assert!(
        o.figure("alone") >= 0.70,
        "burst:30 alone got {:.1} %",
        o.figure("alone") * 100.0
    );
    assert!(
        o.figure("drop_ms") <= 50.0,
        "burst not down to its share within 50 ms"
    );
    assert_near("fixed:50 beside burst:30", o.figure("fixed"), 0.50, 0.06);
}

#[test]
fn four_best_effort_containers_get_a_quarter_each() {
    let _serial = timing_lock();
    let o = run("best-effort", 3.0);
    for c in ["be1", "be2", "be3", "be4"] {
        assert_near(c, o.figure(c), 0.25, 0.06);
    }
}

#[test]
fn fifty_ms_kernels_still_get_30_under_fixed_30() {
    let _serial = timing_lock();
    let o = run("long-kernels", 6.0);
    assert_near("fixed:30 with 50 ms kernels", o.figure("share"), 0.30, 0.06);
}

#[test]
fn no_launch_pattern_escapes_its_share() {
    let _serial = timing_lock();
    // Every shape queues a second or more of kernels per synchronization: ungated, each
    // would get the whole GPU for as long as its queue lasts.
    let o = run("shapes", 2.0);
    for shape in [
        "queue_1_1ms",
        "queue_1_0.02ms",
        "queue_1_50ms",
        "streams_4_1ms",
        "graph_4_1ms",
        "ptsz_1_1ms",
        "threads_4_1ms",
    ] {
        // How far below and above 30 % a 1 s window may go. 2 s of 50 ms kernels is 12
        // kernels at 30 %: a coarse share. 20 µs kernels in a debug build pay the host's
        // microseconds between a START and its launch inside each measured interval, so they
        // get less than their share here (beside two CPU hogs one window read 13.7 %); what
        // matters is that none gets more.
        let (below, above) = match shape {
            "queue_1_50ms" => (0.12, 0.12),
            "queue_1_0.02ms" => (0.20, 0.07),
            _ => (0.07, 0.07),
        };
        let lowest = o.figure(&format!("{shape}_min_window"));
        let highest = o.figure(&format!("{shape}_max_window"));
        assert!(
            lowest >= 0.30 - below && highest <= 0.30 + above,
            "{shape}: 1 s windows from {:.1} to {:.1} %, want 30 % within -{:.0}/+{:.0} points",
            lowest * 100.0,
            highest * 100.0,
            below * 100.0,
            above * 100.0
        );
    }
}

#[test]
fn deep_queueing_neighbours_get_their_policies() {
    let _serial = timing_lock();
    let o = run("mixed-deep", 3.0);
    assert_near(
        "fixed:20 beside burst and best-effort",
        o.figure("mixed_fixed20"),
        0.20,
        0.05,
    );
    assert!(
        o.figure("mixed_burst30") > o.figure("mixed_besteffort") + 0.1,
        "burst:30 not above best-effort"
    );
    assert_near(
        "fixed:30 beside fixed:70",
        o.figure("pair_fixed30"),
        0.30,
        0.05,
    );
    // Ten points: beside two CPU hogs a debug build's fixed:70 container fed the GPU 61-64 %
    // (67 % on a quiet machine, 68 % in release) with fixed:30 still at 30 % and controld's
    // measure within about a point: its gated launches' thread woke late, and the GPU idled
    // for lack of its work, not of its share.
    assert_near(
        "fixed:70 beside fixed:30",
        o.figure("pair_fixed70"),
        0.70,
        0.10,
    );
    for set in ["mixed", "pair"] {
        let total = o.figure(&format!("{set}_total"));
        assert!(
            total >= 0.90,
            "{set}: the containers hold {:.1} % of the GPU together",
            total * 100.0
        );
    }
    assert!(
        o.figure("pair_daemon_error_points") <= 4.0,
        "controld's measure {:.1} points from the ground truth",
        o.figure("pair_daemon_error_points")
    );
}
