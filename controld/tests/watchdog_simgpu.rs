//! The watchdog on a simulated node, through simgpu's NVML, with real processes:
//! - a process on the GPU that maps no region is unmanaged;
//! - a process of a container (`libtessera.so` preloaded, `TESSERA_REGION` set) is found by
//!   its host pid and counted in the container's real memory use;
//! - a process that maps the region but allocates without the library pushes the real use
//!   over the cap: the container gets a problem, and the process is not unmanaged.
//!
//! One test in this binary: the watchdog loads NVML into this process, configured by
//! `SIMGPU_*` variables that the test sets for itself (no other test may run meanwhile).

mod support;

use std::process::Command;
use std::time::Duration;
use support::map_shim;
use tessera_controld::status::{ContainerDevice, ContainerProcess, ContainerStatus, NodeStatus};
use tessera_controld::watchdog::Watchdog;
use tessera_region::{Region, RegionInit, MAX_DEVICES};
use tessera_tests::{
    artifacts, processes_memory, tessera_client, ClientKind, Container, Running, SimNode,
};

const MIB: u64 = 1 << 20;
const CAP: u64 = 1024 * MIB;

/// Runs `hold <bytes>` until it printed ready.
fn hold(mut cmd: Command, bytes: u64, what: &str) -> Running {
    cmd.args(["hold", &bytes.to_string()]);
    let mut p = Running::spawn(&mut cmd, what);
    p.wait_for_line("ready", Duration::from_secs(60));
    p
}

/// The status the daemon would build for the container, before the watchdog's part.
fn status_of(region: &Region) -> NodeStatus {
    NodeStatus {
        containers: vec![ContainerStatus {
            name: region.name().to_string(),
            compute: "best-effort".to_string(),
            priority: "offline".to_string(),
            timeslice: "driver".to_string(),
            timeslice_state: String::new(),
            timeslice_set_us: None,
            timeslice_unavailable: false,
            region: region.path().unwrap().to_path_buf(),
            devices: vec![ContainerDevice {
                gpu: 0,
                memory_used: region.memory_used(0),
                memory_cap: region.memory_cap(0),
                real_memory_used: None,
                share_target: None,
                share_measured: None,
                share_measured_until_ns: None,
                real_share: None,
                granted_ns: None,
                granted_until_ns: None,
                compute_held: false,
                compute_holds: 0,
                throttled_ns: 0,
                preemptions: 0,
            }],
            processes: region
                .processes()
                .into_iter()
                .map(|p| ContainerProcess {
                    slot: p.slot,
                    pid: p.pid,
                    host_pids: Vec::new(),
                    memory: p.memory,
                })
                .collect(),
            problems: Vec::new(),
            region_quarantines: 0,
            regions_set_aside: Vec::new(),
            watchdog_kills: 0,
        }],
        ..NodeStatus::default()
    }
}

#[test]
fn the_watchdog_tells_containers_from_strangers_and_catches_bypassed_caps() {
    let devices = "A100-80GB";
    let node = SimNode::new(devices, &[]);
    // This process's NVML opens the same node as the children.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SIMGPU_") {
            std::env::remove_var(&key);
        }
    }
    std::env::set_var("SIMGPU_DEVICES", devices);
    std::env::set_var("SIMGPU_STATE", node.state());
    let nvml = artifacts().lib_dir.join("libnvidia-ml.so.1");
    let mut watchdog = Watchdog::with_library(nvml.as_os_str()).expect("load simgpu's NVML");
    assert!(watchdog.has_nvml());

    // The container's region, made as controld makes it: a 1 GiB cap on device 0.
    let container = Container::new(&node, None);
    let mut caps = [None; MAX_DEVICES];
    caps[0] = Some(CAP);
    let init = RegionInit {
        name: "team-a".to_string(),
        memory_caps: caps,
    };
    let region = Region::open_or_create(container.region(), &init).expect("create the region");

    let client = tessera_client(ClientKind::CLinked);
    let managed = hold(
        container.command(&client),
        256 * MIB,
        "a container's process",
    );
    let stranger = hold(
        node.command(&client),
        128 * MIB,
        "a process outside every container",
    );

    let mut status = status_of(&region);
    watchdog.observe(&mut status);
    let truth = node.stat();

    assert_eq!(status.gpus.len(), 1, "{:?}", status.gpus);
    let gpu = &status.gpus[0];
    assert_eq!(gpu.index, 0);
    assert!(gpu.name.contains("A100"), "{}", gpu.name);
    assert!(gpu.uuid.starts_with("GPU-"), "{}", gpu.uuid);
    assert_eq!(gpu.memory_total, 80 << 30);
    assert!(gpu.memory_used >= 384 * MIB, "{gpu:?}");

    let unmanaged: Vec<(u32, u32)> = status.unmanaged.iter().map(|u| (u.gpu, u.pid)).collect();
    assert_eq!(unmanaged, vec![(0, stranger.pid())]);
    assert_eq!(
        status.unmanaged[0].memory,
        processes_memory(&truth, &[stranger.pid()], 0)
    );

    let c = &status.containers[0];
    let process = c
        .processes
        .iter()
        .find(|p| p.pid == managed.pid())
        .unwrap_or_else(|| panic!("the region does not list the client: {:?}", c.processes));
    assert_eq!(process.host_pids, vec![managed.pid()]);
    let real = c.devices[0].real_memory_used.expect("a real figure");
    assert_eq!(real, processes_memory(&truth, &[managed.pid()], 0));
    assert!((256 * MIB..=CAP).contains(&real), "{real}");
    assert!(c.problems.is_empty(), "{:?}", c.problems);

    // A process that maps the region and allocates 1 GiB without the library.
    let mut cmd = node.command(&client);
    cmd.env("LD_PRELOAD", map_shim())
        .env("WATCHDOG_TEST_MAP", container.region());
    let bypass = hold(cmd, CAP, "a process that bypasses libtessera.so");

    let mut status = status_of(&region);
    watchdog.observe(&mut status);
    let truth = node.stat();
    let unmanaged: Vec<u32> = status.unmanaged.iter().map(|u| u.pid).collect();
    assert_eq!(unmanaged, vec![stranger.pid()]);
    let c = &status.containers[0];
    let real = c.devices[0].real_memory_used.expect("a real figure");
    assert_eq!(
        real,
        processes_memory(&truth, &[managed.pid(), bypass.pid()], 0)
    );
    assert!(real > CAP + (256 * MIB), "{real}");
    assert!(
        c.devices[0].memory_used < CAP,
        "the region counts only the library's allocations"
    );
    assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
    assert!(
        c.problems[0].contains("GPU 0") && c.problems[0].contains("1GiB"),
        "{}",
        c.problems[0]
    );
    // The bypassing process holds no slot, so no process lists it; the container's
    // process keeps its host pid.
    assert!(c
        .processes
        .iter()
        .all(|p| !p.host_pids.contains(&bypass.pid())));

    // Once the strangers are gone, nothing is unmanaged and the problem clears.
    drop(stranger);
    drop(bypass);
    let mut status = status_of(&region);
    watchdog.observe(&mut status);
    assert!(status.unmanaged.is_empty(), "{:?}", status.unmanaged);
    assert!(status.containers[0].problems.is_empty());
    drop(managed);
}
