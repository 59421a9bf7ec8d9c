//! The node state across real processes: the test binary re-runs itself as the child
//! processes (`SIMGPU_TEST_CHILD` says what the child does).

use simgpu::config::NodeConfig;
use simgpu::device::parse_devices;
use simgpu::node::{Node, NodeError, OutOfMemory};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "SIMGPU_TEST_CHILD";

fn temp_state(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("simgpu-test-{tag}-{}.state", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn small_node(path: &Path) -> &'static Node {
    let devices = parse_devices("Small:1GiB:8").unwrap();
    Box::leak(Box::new(
        Node::open_or_create(path, &devices, &NodeConfig::of_profile(0)).unwrap(),
    ))
}

/// Starts this test binary as a child that runs `what` on the node at `path`.
fn child(path: &Path, what: &str) -> Kid {
    use std::io::BufRead;
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_main", "--nocapture", "--test-threads=1"])
        .env(CHILD, what)
        .env("SIMGPU_STATE", path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    Kid { child, out }
}

/// A child process and its output.
struct Kid {
    child: Child,
    out: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Kid {
    /// Reads the child's output until a line holding `want`; returns what follows it.
    fn wait_for(&mut self, want: &str) -> String {
        loop {
            let line = self.out.next().expect("child ended early").unwrap();
            if let Some(at) = line.find(want) {
                return line[at + want.len()..].trim().to_string();
            }
        }
    }
}

/// The body of child processes; a no-op when run as an ordinary test.
#[test]
fn child_main() {
    let Ok(what) = std::env::var(CHILD) else {
        return;
    };
    let path = PathBuf::from(std::env::var("SIMGPU_STATE").unwrap());
    let node: &'static Node = Box::leak(Box::new(Node::open_existing(&path).unwrap()));
    let me = node.attach().unwrap();
    match what.as_str() {
        "hold" => {
            me.reserve_memory(0, 256 << 20).unwrap();
            println!("ready");
            std::thread::sleep(Duration::from_secs(60));
        }
        "spin" => {
            println!("ready");
            let engine = me.engine(0);
            let end = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < end {
                engine.run(simgpu::clock::now_ns(), 2_000_000);
            }
            engine.idle();
            let pid = std::process::id();
            let snap = node.snapshot();
            let mine = snap.processes.iter().find(|p| p.pid == pid).unwrap();
            println!("busy {}", mine.devices[0].busy_ns);
        }
        "fork-and-exit" => {
            me.reserve_memory(0, 256 << 20).unwrap();
            // SAFETY: the grandchild makes only async-signal-safe calls (dup3, open, close,
            // sleep, _exit) before it ends.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                node.release_after_fork();
                // SAFETY: async-signal-safe, as above.
                unsafe {
                    libc::sleep(30);
                    libc::_exit(0);
                }
            }
            println!("grandchild {pid}");
            std::process::exit(0);
        }
        other => panic!("unknown child {other}"),
    }
}

#[test]
fn reservations_never_pass_the_device_memory() {
    let path = temp_state("reserve");
    let node = small_node(&path);
    let me = node.attach().unwrap();
    me.reserve_memory(0, 768 << 20).unwrap();
    assert_eq!(me.reserve_memory(0, 512 << 20), Err(OutOfMemory));
    assert_eq!(node.memory_used(0), 768 << 20);
    me.reserve_memory(0, 256 << 20).unwrap();
    assert_eq!(me.reserve_memory(0, 1), Err(OutOfMemory));
    me.release_memory(0, 1 << 30);
    assert_eq!(node.memory_used(0), 0);
    // A release of more than the process holds returns only what it holds.
    me.reserve_memory(0, 100).unwrap();
    me.release_memory(0, 1000);
    assert_eq!(node.memory_used(0), 0);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_killed_process_gives_its_memory_back() {
    let path = temp_state("reap");
    let node = small_node(&path);
    let mut c = child(&path, "hold");
    c.wait_for("ready");
    assert_eq!(node.memory_used(0), 256 << 20);
    let snap = node.snapshot();
    assert_eq!(snap.processes.len(), 1);
    assert_eq!(snap.processes[0].pid, c.child.id());
    assert_eq!(snap.processes[0].devices[0].memory, 256 << 20);
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    assert_eq!(node.reap(), 1);
    assert_eq!(node.memory_used(0), 0);
    assert!(node.snapshot().processes.is_empty());
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_forked_child_does_not_keep_a_dead_parent_alive() {
    let path = temp_state("fork");
    let node = small_node(&path);
    let mut c = child(&path, "fork-and-exit");
    let grandchild: i32 = c.wait_for("grandchild").parse().unwrap();
    assert!(c.child.wait().unwrap().success());
    // The grandchild still runs, holding a copy of the parent's descriptor; once it has
    // let go of it (it may not have run yet), the dead parent's slot is reaped.
    let deadline = Instant::now() + Duration::from_secs(2);
    while node.reap() == 0 {
        assert!(
            Instant::now() < deadline,
            "the dead parent's slot was never reaped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(node.memory_used(0), 0);
    // SAFETY: plain kill of the grandchild this test created.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    let _ = std::fs::remove_file(path);
}

#[test]
fn two_saturating_processes_split_the_engine() {
    let path = temp_state("share");
    let node = small_node(&path);
    let mut a = child(&path, "spin");
    let mut b = child(&path, "spin");
    a.wait_for("ready");
    b.wait_for("ready");
    let busy_a: u64 = a.wait_for("busy").parse().unwrap();
    let busy_b: u64 = b.wait_for("busy").parse().unwrap();
    assert!(a.child.wait().unwrap().success());
    assert!(b.child.wait().unwrap().success());
    let share_a = busy_a as f64 / (busy_a + busy_b) as f64;
    eprintln!("engine shares: a {busy_a} ns, b {busy_b} ns");
    assert!(
        (0.4..=0.6).contains(&share_a),
        "a {busy_a} ns, b {busy_b} ns"
    );
    // Both spun for 1.5 s of wall time on one engine: together they had it about 1.5 s,
    // each about half.
    let busy: Vec<u64> = node.snapshot().devices.iter().map(|d| d.busy_ns).collect();
    assert!(
        busy[0] > 1_300_000_000 && busy[0] < 1_700_000_000,
        "busy {busy:?}"
    );
    let _ = std::fs::remove_file(path);
}

#[test]
fn damaged_files_are_refused_clearly() {
    let path = temp_state("corrupt");
    assert!(matches!(
        Node::open_existing(&path),
        Err(NodeError::Missing(_))
    ));
    std::fs::write(&path, b"not a node").unwrap();
    let err = Node::open_existing(&path).err().unwrap();
    assert!(matches!(err, NodeError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("simgpu reset"), "{err}");
    small_node(&path.with_extension("good"));
    let mut bytes = std::fs::read(path.with_extension("good")).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let err = Node::open_existing(&path).err().unwrap();
    assert!(err.to_string().contains("bad magic"), "{err}");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(path.with_extension("good"));
}

/// A node rebuilt with other tunables (as a process naming other ones does) keeps its
/// devices' UUIDs, as a machine's cards keep theirs: whatever recorded a card by UUID
/// still finds it. A device the node did not have gets a UUID of its own.
#[test]
fn a_rebuilt_node_keeps_its_devices_uuids() {
    let path = temp_state("rebuilt-uuids");
    let one = parse_devices("Small:1GiB:8").unwrap();
    let before = Node::open_or_create(&path, &one, &NodeConfig::of_profile(0))
        .unwrap()
        .device(0)
        .uuid;
    let two = parse_devices("Small:1GiB:8,Small:1GiB:8").unwrap();
    let mut config = NodeConfig::of_profile(0);
    config.context_memory += 1 << 20;
    let node = Node::open_or_create(&path, &two, &config).unwrap();
    assert_eq!(node.device_count(), 2, "the node was rebuilt");
    assert_eq!(node.device(0).uuid, before, "device 0 kept its UUID");
    assert_ne!(node.device(1).uuid, before);
    assert_ne!(node.device(1).uuid, [0; 16]);
    let _ = std::fs::remove_file(&path);
}
