//! The daemon's own measure of compute: a container whose processes rewrite its region's
//! compute words every millisecond (mode and the header's limited bits: its launches are no
//! longer gated) runs past its share on simgpu's engine, and status names it with NVML's
//! figure against its grant, while an honest neighbour with the same policy is not named.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use tessera_region::layout::{RegionLayout, COMPUTE_UNLIMITED, TOTAL_SIZE};
use tessera_tests::Running;

const TRAIN: [&str; 5] = ["train", "--kernel-ms", "1", "--seconds", "60"];

/// Every millisecond until `stop`, makes GPU 0 of the region at `path` look unlimited to
/// the library: its account's mode and the header's summary bits.
fn unlimit_in_a_loop(
    path: std::path::PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        // SAFETY: a fresh shared mapping of the whole region file, unmapped below; the
        // daemon keeps the file at its size while the test runs.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                TOTAL_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        // SAFETY: the mapping is the region's layout, whose fields are all atomics, and
        // page-aligned; it lives until the munmap below.
        let region = unsafe { &*(base as *const RegionLayout) };
        while !stop.load(Ordering::Relaxed) {
            region.compute[0]
                .mode
                .store(COMPUTE_UNLIMITED, Ordering::SeqCst);
            region.header.compute_limited.store(0, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(base, TOTAL_SIZE) };
    })
}

#[test]
fn a_container_running_past_its_grant_is_named_with_nvmls_figure() {
    let _serial = tessera_tests::timing_lock();
    let mut node = Node::new("compute-check");
    let config = node.write_config(&gpu0_containers(&[
        ("rogue", "fixed:30"),
        ("fair", "fixed:30"),
    ]));
    node.start(Some(&config));
    let stop = Arc::new(AtomicBool::new(false));
    let tamper = unlimit_in_a_loop(node.region("rogue"), stop.clone());
    let mut trainers: Vec<Running> = ["rogue", "fair"]
        .iter()
        .map(|name| {
            let mut cmd = node.in_container(name, &tessera_tests::artifacts().gpuload);
            cmd.args(TRAIN);
            Running::spawn_captured(&mut cmd, &format!("gpuload train in {name}"))
        })
        .collect();
    let started = Instant::now();
    let mut seen = (None, None);
    while started.elapsed() < Duration::from_secs(30) {
        let status = node.status();
        let device = |name: &str| container(&status, name).unwrap()["devices"][0].clone();
        let named = |name: &str| {
            container(&status, name).unwrap()["problems"]
                .to_string()
                .contains("by NVML")
        };
        let (rogue, fair) = (device("rogue"), device("fair"));
        if let (Some(r), Some(f)) = (rogue["real_share"].as_f64(), fair["real_share"].as_f64()) {
            seen = (Some((r, named("rogue"))), Some((f, named("fair"))));
            if named("rogue") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    tamper.join().unwrap();
    for t in &mut trainers {
        t.kill();
    }
    eprintln!(
        "rogue (share by NVML, named): {:?}, fair: {:?}",
        seen.0, seen.1
    );
    let (rogue, fair) = (
        seen.0.expect("no NVML share"),
        seen.1.expect("no NVML share"),
    );
    assert!(
        rogue.1,
        "the rogue container was not named ({:.0} % by NVML)",
        rogue.0 * 100.0
    );
    assert!(rogue.0 > 0.40, "rogue by NVML: {:.0} %", rogue.0 * 100.0);
    assert!(
        !fair.1,
        "the honest neighbour was named ({:.0} % by NVML)",
        fair.0 * 100.0
    );
}
