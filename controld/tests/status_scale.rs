//! 64 containers × 16 live processes on one node: `status` still answers at a glance. The
//! time is measured and printed (a benchmark figure, not a timing assertion: the test
//! machine may be slow or busy); the assertion only rules out a hang.

mod support;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;
use tessera_controld::api::{Answer, Client, Request};
use tessera_region::Region;
use tessera_tests::Running;

const CONTAINERS: usize = 64;
const PROCESSES: usize = 16;
/// Set in the re-executed test binary that holds the slots: the region files, `:`-separated.
const HOLD_ENV: &str = "CONTROLD_TEST_HOLD_REGIONS";

/// Not a test of its own: in the re-executed binary, forks [`PROCESSES`] children per region
/// named in [`HOLD_ENV`]; each claims a slot and 1 MiB and sleeps until its parent dies.
#[test]
fn slot_holders() {
    let Ok(list) = std::env::var(HOLD_ENV) else {
        return;
    };
    let (mut rx, tx) = std::io::pipe().unwrap();
    let regions: Vec<PathBuf> = list.split(':').map(PathBuf::from).collect();
    for path in &regions {
        for _ in 0..PROCESSES {
            // SAFETY: fork in a process whose other threads (the test harness's) hold no lock
            // the child needs; the child opens its region, claims a slot and sleeps.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                // SAFETY: plain prctl; the child dies with the parent.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
                let region: &'static Region = Box::leak(Box::new(Region::open(path).unwrap()));
                let slot = region.claim_slot().unwrap();
                slot.reserve_memory(0, MIB).unwrap();
                std::mem::forget(slot);
                let _ = (&tx).write_all_once();
                loop {
                    // SAFETY: pause has no preconditions.
                    unsafe { libc::pause() };
                }
            }
        }
    }
    drop(tx);
    let mut got = 0;
    let mut buf = [0u8; 256];
    while got < regions.len() * PROCESSES {
        let n = rx.read(&mut buf).unwrap();
        assert!(n > 0, "a holder died before claiming its slot");
        got += n;
    }
    println!("\nheld {got}");
    loop {
        // SAFETY: pause has no preconditions.
        unsafe { libc::pause() };
    }
}

trait WriteOnce {
    fn write_all_once(self) -> std::io::Result<()>;
}

impl WriteOnce for &std::io::PipeWriter {
    fn write_all_once(self) -> std::io::Result<()> {
        use std::io::Write;
        let mut w = self;
        w.write_all(b"x")
    }
}

#[test]
fn status_answers_quickly_with_64_containers_of_16_processes() {
    let mut node = Node::new("scale");
    node.start(None);
    let mut client = Client::connect(&node.socket()).unwrap();
    let mut regions = Vec::new();
    for i in 0..CONTAINERS {
        let name = format!("c{i:02}");
        node.ctl_ok(&["container", "add", &name, "--memory", "1GiB"]);
        regions.push(node.region(&name).display().to_string());
    }
    let exe = std::env::current_exe().unwrap();
    let mut holder = Command::new(exe);
    holder
        .args([
            "--exact",
            "slot_holders",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(HOLD_ENV, regions.join(":"))
        .stdout(Stdio::piped());
    let mut holder = Running::spawn(&mut holder, "slot holders");
    holder.wait_for_line("held", Duration::from_secs(120));

    let mut best = Duration::MAX;
    let mut worst = Duration::ZERO;
    let mut processes = 0;
    for _ in 0..5 {
        let start = Instant::now();
        let Answer::Status(status) = client.call(&Request::Status {}).unwrap() else {
            panic!("not a status")
        };
        let took = start.elapsed();
        best = best.min(took);
        worst = worst.max(took);
        processes = status.containers.iter().map(|c| c.processes.len()).sum();
        assert_eq!(status.containers.len(), CONTAINERS);
        assert!(status
            .containers
            .iter()
            .all(|c| c.devices[0].memory_used == PROCESSES as u64 * MIB));
    }
    assert_eq!(processes, CONTAINERS * PROCESSES);
    let start = Instant::now();
    let table = node.ctl_ok(&["status"]);
    let cli = start.elapsed();
    println!(
        "status of {CONTAINERS} containers × {PROCESSES} processes: {best:?} best, {worst:?} worst over the socket; {cli:?} for the `controld status` command ({} lines)",
        table.lines().count()
    );
    assert!(worst < Duration::from_secs(10), "status took {worst:?}");
}
