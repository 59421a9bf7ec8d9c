//! A process of a container holding 512 MiB is killed with SIGKILL (no exit
//! handler runs); the next process of the container that allocates gets that memory at its
//! first attempt (it reaps the dead process's slot). For every client kind: the holders are
//! programs of that kind. How fast, daemon or not, is the scenario runner's to measure.

use std::time::{Duration, Instant};
use tessera_region::Region;
use tessera_tests::{ClientKind, Container, Running, SimNode};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Starts `hold <bytes>` (a program of `kind`) in the container: Ok once it printed ready,
/// Err(what it printed) if it exited instead.
pub fn try_hold(
    kind: ClientKind,
    container: &Container<'_>,
    bytes: u64,
) -> Result<Running, String> {
    let mut cmd = kind.command(container, "hold", &[&bytes.to_string()]);
    let mut p = Running::spawn_captured(&mut cmd, "hold");
    match p.try_wait_for_line("ready", Duration::from_secs(30)) {
        Some(_) => Ok(p),
        None => {
            let out = p.finish(Duration::from_secs(10));
            Err(format!(
                "{}: {}",
                tessera_tests::describe(out.status),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

#[test]
fn a_killed_process_memory_is_back_within_a_second() {
    let _serial = tessera_tests::timing_lock();
    for kind in ClientKind::ALL {
        killed_holder(kind);
    }
}

fn killed_holder(kind: ClientKind) {
    let who = kind.name();
    let node = SimNode::new("Small:4GiB:8", &[("SIMGPU_CONTEXT_MEMORY", "128MiB")]);
    let container = Container::new(&node, Some("1GiB"));
    let mut holder = try_hold(kind, &container, 512 * MIB)
        .unwrap_or_else(|e| panic!("{who}: the first 512 MiB should fit: {e}"));
    let victim = holder.pid();

    // The cap is in force: a second 512 MiB (plus its context) does not fit beside it.
    let refused = try_hold(kind, &container, 512 * MIB);
    let err = refused.as_ref().err().unwrap_or_else(|| {
        panic!("{who}: a second 512 MiB fit under a 1 GiB cap beside the first")
    });
    assert!(
        err.contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "{who}: the second holder should fail with OUT_OF_MEMORY: {err}"
    );

    // The next process to allocate reaps the dead one's slot and gets its memory: at its
    // first attempt, however long starting it takes on a loaded host (the seconds that
    // stand for it here only bound the test).
    holder.kill();
    let killed = Instant::now();
    let again = try_hold(kind, &container, 512 * MIB);
    let took = killed.elapsed();
    eprintln!(
        "{who}: allocating again took {took:?} after the SIGKILL, starting the process included"
    );
    let _again = again.unwrap_or_else(|e| {
        panic!("{who}: after the SIGKILL the container still cannot allocate 512 MiB: {e}")
    });
    assert!(
        took < Duration::from_secs(30),
        "{who}: allocating again took {took:?} after the SIGKILL"
    );
    let region = Region::open(container.region()).expect("open the region");
    let pids: Vec<u32> = region.processes().iter().map(|p| p.pid).collect();
    assert!(
        !pids.contains(&victim),
        "{who}: the killed process (pid {victim}) still holds a slot: {pids:?}"
    );
    assert_eq!(
        region.memory_used(0),
        512 * MIB + 128 * MIB,
        "{who}: the region should count only the new holder (512 MiB + its context)"
    );
    assert!(region.memory_used(0) <= GIB);
}
