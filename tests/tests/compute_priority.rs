//! Online work beside offline work under controld (the scenario runner's `online-offline`
//! and `preemption`, with shorter phases): the online job's latency, the offline job's use
//! of the idle time, and how fast offline work stops when online work arrives.

mod compute;

use compute::run;
use tessera_tests::timing_lock;

#[test]
fn offline_work_fills_the_idle_time_and_online_latency_stays_near_solo() {
    let _serial = timing_lock();
    let o = run("online-offline", 3.0);
    assert!(
        o.figure("idle_used") >= 0.80,
        "offline used {:.1} % of the idle time",
        o.figure("idle_used") * 100.0
    );
    // Plain time-slicing doubles the online latency (about 2 × alone); priority must keep
    // its median well below that. (The median: a 3 s run has too few requests for a
    // stable p99.)
    let alone = o.figure("solo_p50_ms").min(o.figure("plain_solo_p50_ms"));
    assert!(
        o.figure("pair_p50_ms") <= 1.5 * alone,
        "online p50 {:.2} ms beside offline, {alone:.2} ms alone",
        o.figure("pair_p50_ms")
    );
}

#[test]
fn online_work_blocks_offline_work_without_waiting_for_a_tick() {
    let _serial = timing_lock();
    let o = run("preemption", 3.0);
    assert!(o.figure("samples") >= 40.0, "too few activations seen");
    assert_eq!(o.figure("unmatched"), 0.0, "activations with no block");
    assert_eq!(
        o.figure("admitted_while_blocked"),
        0.0,
        "offline launches admitted while blocked"
    );
    // The scheduler ticks every 5 ms; the block comes from the futex wake-up, far sooner.
    assert!(
        o.figure("p50_us") <= 1000.0,
        "p50 {:.0} µs",
        o.figure("p50_us")
    );
}
