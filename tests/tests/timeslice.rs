//! The time-slice lever on simgpu's RM: a container asking a time slice
//! (`TESSERA_TIMESLICE`, or controld's setting in its region) gets it on its process's
//! channel groups, which the engine then slices at; where the RM refuses (as NVIDIA's module
//! does to an unprivileged caller) or shows no groups, the application runs as before and
//! the region says why; the process's other `ioctl` calls go on untouched.

use serde_json::Value;
use std::time::{Duration, Instant};
use tessera_region::{Region, TimesliceOutcome};
use tessera_tests::{
    artifacts, assert_success, json_u64, run_with_timeout, stat_process, stdout_json, timing_lock,
    Container, Running, SimNode,
};

/// The H200 profile's slice, which the driver sets on every group it makes.
const DRIVER_SLICE_NS: u64 = tessera_region::slicing::H200.timeslice_ns;

/// Starts a 30 s trainer in `container`.
fn trainer(container: &Container<'_>) -> Running {
    let mut cmd = container.command(&artifacts().gpuload);
    cmd.args(["train", "--kernel-ms", "1", "--seconds", "30"]);
    Running::spawn_captured(&mut cmd, "gpuload train")
}

/// Polls simgpu until process `pid`'s time slice on device 0 is `want` (ns), for 30 s.
fn wait_for_slice(node: &SimNode, pid: u32, want: u64) {
    let start = Instant::now();
    let mut seen = None;
    while start.elapsed() < Duration::from_secs(30) {
        // The node's state exists once a process attached.
        let out = node.simgpu(&["stat", "--json"]);
        let stat: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if let Some(p) = stat_process(&stat, pid).filter(|_| out.status.success()) {
            let busy = json_u64(p, "/devices/0/busy_ns");
            let slice = json_u64(p, "/devices/0/timeslice_ns");
            seen = Some(slice);
            if busy > 0 && slice == want {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("process {pid}'s slice: {seen:?} ns, not {want} ns, within 30 s");
}

/// The container's report, once the library wrote one (30 s at most).
fn outcome(container: &Container<'_>) -> TimesliceOutcome {
    let start = Instant::now();
    loop {
        if let Ok(region) = Region::open(container.region()) {
            let outcome = region.timeslice_report().outcome();
            if outcome != TimesliceOutcome::Pending {
                return outcome;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no time-slice report within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_container_asking_a_slice_gets_it_on_its_groups_and_its_neighbour_keeps_the_drivers() {
    let node = SimNode::new("H200", &[]);
    let asking = Container::new(&node, None).env(tessera_region::env::TIMESLICE, "100us");
    let plain = Container::new(&node, None);
    let mut a = trainer(&asking);
    let mut b = trainer(&plain);
    wait_for_slice(&node, a.pid(), 100_000);
    wait_for_slice(&node, b.pid(), DRIVER_SLICE_NS);
    assert_eq!(
        outcome(&asking),
        TimesliceOutcome::Set { us: 100, groups: 1 }
    );
    a.kill();
    b.kill();
}

#[test]
fn a_refusing_driver_leaves_the_application_running_and_says_why() {
    let node = SimNode::new("H200", &[("SIMGPU_RM", "refuse-timeslice")]);
    let container = Container::new(&node, None)
        .env(tessera_region::env::TIMESLICE, "100us")
        .env(tessera_region::env::LOG, "warn");
    let mut cmd = container.command(&artifacts().gpuload);
    cmd.args(["train", "--kernel-ms", "1", "--seconds", "1"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_success(&out, "gpuload train under a refusing driver");
    assert_eq!(
        outcome(&container),
        TimesliceOutcome::RefusedStatus(tessera_nvrm::status::INSUFFICIENT_PERMISSIONS)
    );
    // Asked for warnings, one line says so, once.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("time slice"))
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
}

#[test]
fn without_channel_groups_in_sight_the_region_says_so() {
    let node = SimNode::new("H200", &[("SIMGPU_RM", "hidden")]);
    let container = Container::new(&node, None).env(tessera_region::env::TIMESLICE, "100us");
    let mut cmd = container.command(&artifacts().gpuload);
    cmd.args(["train", "--kernel-ms", "1", "--seconds", "1"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_success(&out, "gpuload train without an RM in sight");
    assert_eq!(outcome(&container), TimesliceOutcome::NoGroups);
}

/// `ioctl` requests the library does not take (a pipe's `FIONREAD`) and RM-typed ones on a
/// file that is no driver's (`/dev/null`) get what they get without the library.
#[test]
fn the_applications_own_ioctls_go_on_untouched() {
    let node = SimNode::new("H200", &[]);
    let container = Container::new(&node, None).env(tessera_region::env::TIMESLICE, "100us");
    let script = r#"
import array, errno, fcntl, os, termios
r, w = os.pipe()
os.write(w, b"abc")
n = array.array("i", [0])
fcntl.ioctl(r, termios.FIONREAD, n, True)
# _IOWR('F', 0x2b, 48): an RM allocation's number, on a file that is no driver's.
alloc = (3 << 30) | (48 << 16) | (ord("F") << 8) | 0x2B
fd = os.open("/dev/null", os.O_RDWR)
try:
    fcntl.ioctl(fd, alloc, bytearray(48), True)
    rm = "accepted"
except OSError as e:
    rm = errno.errorcode[e.errno]
print(n[0], rm)
"#;
    for preload in [true, false] {
        let mut cmd = if preload {
            container.command("python3")
        } else {
            node.command("python3")
        };
        cmd.args(["-c", script]);
        let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
        assert_success(&out, "python3's ioctls");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "3 ENOTTY",
            "preloaded: {preload}"
        );
    }
}

/// The H200's experiment re-enacted on its profile (docs/simgpu.md): an offline process of
/// 2 ms kernels, 8 in flight, beside an online one sending requests of 10 × 0.5 ms kernels,
/// 20 a second. On the card the online median was 2.02 × its median alone beside it, 1.05 ×
/// once the offline process's channel groups ran 100 µs slices (this library, no daemon, no
/// gate: `TESSERA_TIMESLICE` alone), and the offline process kept 96 % of its throughput.
#[test]
fn the_h200_profile_answers_the_lever_as_the_h200_did() {
    let _timing = timing_lock();
    let node = SimNode::new("H200", &[]);
    let online = || -> Value {
        let args = [
            "infer",
            "--rate",
            "20",
            "--kernels",
            "10",
            "--kernel-ms",
            "0.5",
            "--seconds",
            "4",
        ];
        let out = node.gpuload(&args, Duration::from_secs(60));
        assert_success(&out, "gpuload infer");
        stdout_json(&out, "gpuload infer")
    };
    let beside = |lever: bool| -> (Value, Value) {
        let container = Container::new(&node, None).env(tessera_region::env::TIMESLICE, "100us");
        let mut cmd = if lever {
            container.command(&artifacts().gpuload)
        } else {
            node.command(&artifacts().gpuload)
        };
        cmd.args([
            "train",
            "--kernel-ms",
            "2",
            "--window",
            "8",
            "--seconds",
            "7",
        ]);
        let train = Running::spawn_captured(&mut cmd, "gpuload train");
        std::thread::sleep(Duration::from_millis(1500));
        let served = online();
        let trained = train.finish(Duration::from_secs(60));
        assert_success(&trained, "gpuload train");
        (served, stdout_json(&trained, "gpuload train"))
    };
    let num = |doc: &Value, key: &str| doc[key].as_f64().unwrap_or_else(|| panic!("{key}: {doc}"));
    let alone = num(&online(), "p50_ms");
    let (plain, plain_train) = beside(false);
    let (lever, lever_train) = beside(true);
    let (plain_x, lever_x) = (num(&plain, "p50_ms") / alone, num(&lever, "p50_ms") / alone);
    let kept = num(&lever_train, "kernels_per_s") / num(&plain_train, "kernels_per_s");
    eprintln!(
        "online p50 {alone:.2} ms alone; beside offline {plain_x:.2} × without the lever, \
         {lever_x:.2} × with it; offline kept {:.0} %",
        kept * 100.0
    );
    assert!(plain_x >= 1.5, "without the lever: {plain_x:.2} ×: {plain}");
    assert!(lever_x <= 1.25, "with the lever: {lever_x:.2} ×: {lever}");
    assert!(kept >= 0.85, "offline kept {:.0} %", kept * 100.0);
}
