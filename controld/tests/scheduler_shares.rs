//! The compute scheduler inside a running `controld`, driven by fake applications that gate
//! their launches on their containers' compute accounts as `libtessera.so` does: the shares
//! of the policies come out of the buckets it refills, the modes it sets match the policies,
//! and status shows target and measured shares.

mod scheduler_support;

use scheduler_support::*;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_region::layout::{COMPUTE_DAEMON, COMPUTE_LOCAL, DEFAULT_WINDOW_NS};

const SETTLE: Duration = Duration::from_millis(700);
const WINDOW: Duration = Duration::from_millis(2500);

/// Runs one saturating fake app per container (all on one engine) and returns their
/// shares, in the order given.
fn run(what: &str, containers: &[(&str, &str, &str)]) -> (Daemon, Vec<f64>) {
    let daemon = Daemon::start(what, &config(containers));
    let engine: Engine = Default::default();
    let apps: Vec<FakeApp> = containers
        .iter()
        .map(|(name, _, _)| FakeApp::start(daemon.region(name), engine.clone(), Load::default()))
        .collect();
    let shares = shares(&apps.iter().collect::<Vec<_>>(), SETTLE, WINDOW);
    eprintln!(
        "{what}: {}",
        containers
            .iter()
            .zip(&shares)
            .map(|((n, c, _), s)| format!("{n} ({c}) {:.1} %", s * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    drop(apps);
    (daemon, shares)
}

fn assert_near(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got - want).abs() <= tolerance,
        "{what}: {:.1} % of the engine, expected {:.0} ± {:.0}",
        got * 100.0,
        want * 100.0,
        tolerance * 100.0
    );
}

#[test]
fn fixed_30_alone_gets_30_percent_and_status_shows_it() {
    let _serial = serial();
    let daemon = Daemon::start("fixed30", &config(&[("solo", "fixed:30", "online")]));
    let region = daemon.region("solo");
    let app = FakeApp::start(region, Default::default(), Load::default());
    let share = shares(&[&app], SETTLE, WINDOW)[0];
    eprintln!("fixed:30 alone: {:.1} %", share * 100.0);
    assert_near("fixed:30 alone", share, 0.30, 0.03);
    let a = region.compute(0);
    assert_eq!(a.mode.load(Ordering::Relaxed), COMPUTE_DAEMON);
    assert_eq!(a.share_target_ppm.load(Ordering::Relaxed), 300_000);
    let device = daemon.device("solo");
    assert_eq!(device["share_target"].as_f64(), Some(0.3), "{device}");
    let measured = device["share_measured"].as_f64().unwrap();
    assert_near("measured share in status", measured, 0.30, 0.04);

    // A stopped daemon leaves the limit in force: the processes refill the bucket
    // themselves at the same share.
    drop(daemon);
    assert_eq!(a.mode.load(Ordering::Relaxed), COMPUTE_LOCAL);
    assert_eq!(a.local_share_ppm.load(Ordering::Relaxed), 300_000);
    drop(app);
}

#[test]
fn fixed_20_beside_best_effort_splits_20_80() {
    let _serial = serial();
    let (_d, s) = run(
        "fixed20-be",
        &[
            ("fixed", "fixed:20", "online"),
            ("be", "best-effort", "online"),
        ],
    );
    assert_near("fixed:20", s[0], 0.20, 0.03);
    assert_near("best-effort", s[1], 0.80, 0.06);
}

/// Two offline containers that keep the GPU busy take turns; a turn passes only once the
/// last holder's work has left the GPU, so the two never have work in flight at once (an
/// online request arriving then would wait for both their time slices), and each still
/// gets its share.
#[test]
fn offline_turns_pass_when_the_last_holders_work_is_done() {
    let _serial = serial();
    let containers = [
        ("job", "fixed:20", "offline"),
        ("trainer", "best-effort", "offline"),
    ];
    let daemon = Daemon::start("offline-turns", &config(&containers));
    let engine: Engine = Default::default();
    let apps: Vec<FakeApp> = containers
        .iter()
        .map(|(name, _, _)| FakeApp::start(daemon.region(name), engine.clone(), Load::default()))
        .collect();
    let accounts = [
        daemon.region("job").compute(0),
        daemon.region("trainer").compute(0),
    ];
    let in_flight = |i: usize| accounts[i].inflight.load(Ordering::SeqCst) != 0;
    // Sampled every 100 µs over 3 s, once the turns have begun: moments when both had
    // work in flight, and how often the one with work changed (the turns passing).
    std::thread::sleep(SETTLE);
    let (mut samples, mut both, mut passes, mut last) = (0u32, 0u32, 0u32, None);
    let job_busy = apps[0].busy_ns();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        let (job, trainer) = (in_flight(0), in_flight(1));
        samples += 1;
        both += u32::from(job && trainer);
        let now = match (job, trainer) {
            (true, false) => Some(0),
            (false, true) => Some(1),
            _ => last,
        };
        passes += u32::from(last.is_some() && now != last);
        last = now;
        std::thread::sleep(Duration::from_micros(100));
    }
    let job_share = (apps[0].busy_ns() - job_busy) as f64 / started.elapsed().as_nanos() as f64;
    drop(apps);
    let overlap = f64::from(both) / f64::from(samples);
    eprintln!(
        "offline turns: {passes} passes, both in flight in {:.2} % of {samples} samples, job {:.1} %",
        overlap * 100.0,
        job_share * 100.0
    );
    assert!(passes >= 10, "the turns passed only {passes} times in 3 s");
    // Without the wait, every pass overlapped the last holder's kernel (about half a
    // kernel per pass, 2-4 % of the time); samples racing a launch stay far below that.
    assert!(
        overlap < 0.005,
        "both containers had work in flight in {:.2} % of the samples",
        overlap * 100.0
    );
    assert_near("fixed:20", job_share, 0.20, 0.03);
}

#[test]
fn fixed_burst_and_best_effort_split_20_55_25() {
    let _serial = serial();
    let (_d, s) = run(
        "three",
        &[
            ("fixed", "fixed:20", "online"),
            ("burst", "burst:30", "online"),
            ("be", "best-effort", "online"),
        ],
    );
    assert_near("fixed:20", s[0], 0.20, 0.03);
    assert_near("burst:30", s[1], 0.55, 0.05);
    assert_near("best-effort", s[2], 0.25, 0.05);
}

#[test]
fn four_best_effort_get_a_quarter_each() {
    let _serial = serial();
    let names = ["be0", "be1", "be2", "be3"];
    let containers: Vec<_> = names
        .iter()
        .map(|n| (*n, "best-effort", "online"))
        .collect();
    let (_d, s) = run("four", &containers);
    for (n, share) in names.iter().zip(&s) {
        assert_near(n, *share, 0.25, 0.04);
    }
}

#[test]
fn burst_alone_gets_a_large_window_then_gives_way_to_fixed() {
    let _serial = serial();
    let daemon = Daemon::start("burst", &config(&[("burst", "burst:30", "online")]));
    let burst = daemon.region("burst");
    let engine: Engine = Default::default();
    // Metered from the start, though alone no policy can bind: its window holds from its
    // first launch.
    assert_eq!(
        burst.compute(0).mode.load(Ordering::Relaxed),
        COMPUTE_DAEMON
    );
    assert_eq!(burst.compute_limited() & 1, 1);
    let app = FakeApp::start(burst, engine.clone(), Load::default());
    wait_until(
        Duration::from_secs(2),
        "the lone container's large window",
        || burst.compute(0).window_ns.load(Ordering::Relaxed) > DEFAULT_WINDOW_NS,
    );
    let alone = shares(&[&app], Duration::from_millis(200), Duration::from_secs(1))[0];
    eprintln!("burst:30 alone: {:.1} %", alone * 100.0);
    assert!(alone >= 0.90, "burst:30 alone got {:.1} %", alone * 100.0);

    // A fixed:50 container arrives and works: the burst container's window comes down to
    // the shared one, and the two share 50 / 50.
    let out = daemon.ctl(&[
        "container",
        "add",
        "fixed",
        "--gpu",
        "0",
        "--compute",
        "fixed:50",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fixed = daemon.region("fixed");
    let other = FakeApp::start(fixed, engine, Load::default());
    wait_until(Duration::from_secs(1), "the shared window", || {
        burst.compute(0).window_ns.load(Ordering::Relaxed) == DEFAULT_WINDOW_NS
    });
    let s = shares(&[&app, &other], SETTLE, WINDOW);
    eprintln!(
        "burst:30 beside fixed:50: {:.1} % / {:.1} %",
        s[0] * 100.0,
        s[1] * 100.0
    );
    assert_near("burst:30 beside fixed:50", s[0], 0.50, 0.05);
    assert_near("fixed:50", s[1], 0.50, 0.03);
    drop((app, other));
}

#[test]
fn every_container_is_metered_from_the_moment_it_is_added() {
    let _serial = serial();
    let daemon = Daemon::start("modes", &config(&[("one", "best-effort", "online")]));
    let one = daemon.region("one");
    assert_eq!(one.compute(0).mode.load(Ordering::Relaxed), COMPUTE_DAEMON);
    let out = daemon.ctl(&[
        "container",
        "add",
        "two",
        "--gpu",
        "0",
        "--compute",
        "fixed:30",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No tick is waited for: the answer comes after the limits are in the region, with a
    // first credit of the guarantee so that the first launch finds tokens.
    let two = daemon.region("two");
    let a = two.compute(0);
    assert_eq!(a.mode.load(Ordering::Relaxed), COMPUTE_DAEMON);
    assert_eq!(two.compute_limited() & 1, 1);
    assert_eq!(a.window_ns.load(Ordering::Relaxed), DEFAULT_WINDOW_NS);
    assert_eq!(a.share_target_ppm.load(Ordering::Relaxed), 300_000);
    assert!(a.bucket_ns.load(Ordering::Relaxed) > 0);
    let out = daemon.ctl(&["container", "rm", "two"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Alone again, still metered.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(one.compute(0).mode.load(Ordering::Relaxed), COMPUTE_DAEMON);
}
