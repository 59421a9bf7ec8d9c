//! Compute shares of saturating containers under controld, measured from simgpu's per-process
//! busy time (the scenario runner's `fixed-alone`, `mixed`, `burst-join`, `best-effort` and
//! `long-kernels`, with shorter phases than the runner's).

mod compute;

use compute::{assert_near, run};
use tessera_tests::timing_lock;

#[test]
fn fixed_30_alone_stays_at_30_in_every_second() {
    let _serial = timing_lock();
    let o = run("fixed-alone", 4.0);
    assert!(o.figure("windows") >= 3.0, "too few 1 s windows");
    assert_near("lowest 1 s window", o.figure("min_window"), 0.30, 0.02);
    assert_near("highest 1 s window", o.figure("max_window"), 0.30, 0.02);
}

#[test]
fn fixed_burst_and_best_effort_get_20_55_25() {
    let _serial = timing_lock();
    let o = run("mixed", 4.0);
    // Without the scheduler the three get a third each; charged for the time they spent
    // queued behind each other's slices (a START only on idle streams), they read 22/52/26.
    assert_near("fixed:20", o.figure("fixed20"), 0.20, 0.03);
    assert_near("burst:30", o.figure("burst30"), 0.55, 0.03);
    assert_near("best-effort", o.figure("besteffort"), 0.25, 0.03);
}

#[test]
fn burst_uses_idle_time_and_gives_it_back_when_fixed_joins() {
    let _serial = timing_lock();
    let o = run("burst-join", 3.0);
    assert!(
        o.figure("alone") >= 0.95,
        "burst:30 alone got {:.1} %",
        o.figure("alone") * 100.0
    );
    assert!(
        o.figure("drop_ms") <= 10.0,
        "burst not down to its share within 10 ms"
    );
    assert_near("fixed:50 beside burst:30", o.figure("fixed"), 0.50, 0.03);
}

#[test]
fn four_best_effort_containers_get_a_quarter_each() {
    let _serial = timing_lock();
    let o = run("best-effort", 3.0);
    for c in ["be1", "be2", "be3", "be4"] {
        assert_near(c, o.figure(c), 0.25, 0.03);
    }
}

#[test]
fn fifty_ms_kernels_still_get_30_under_fixed_30() {
    let _serial = timing_lock();
    let o = run("long-kernels", 6.0);
    assert_near("fixed:30 with 50 ms kernels", o.figure("share"), 0.30, 0.03);
}
