//! Compute shares of saturating containers under controld, measured from simgpu's per-process
//! busy time (the scenario runner's `fixed-alone` and `burst-join`, with shorter phases than
//! the runner's).

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
