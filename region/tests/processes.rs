//! Regions shared by real processes: the test binary re-runs itself as the children
//! (`TESSERA_REGION_TEST_CHILD` says what a child does, `TESSERA_REGION_TEST_PATH` where the
//! region is).

use std::io::{BufRead, BufReader, Lines, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_region::{Region, RegionError, RegionInit, MAX_DEVICES, MAX_PROCESSES};

const CHILD: &str = "TESSERA_REGION_TEST_CHILD";
const PATH: &str = "TESSERA_REGION_TEST_PATH";
/// The cap of the hammer test: small, so that the cap is hit constantly.
const HAMMER_CAP: u64 = 1 << 20;
const HAMMER_PROCESSES: usize = 4;
const HAMMER_THREADS: usize = 4;

fn temp_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tessera-procs-{tag}-{}.region", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn region(path: &Path, cap0: Option<u64>) -> &'static Region {
    let mut memory_caps = [None; MAX_DEVICES];
    memory_caps[0] = cap0;
    let init = RegionInit {
        name: "test".into(),
        memory_caps,
    };
    Box::leak(Box::new(Region::open_or_create(path, &init).unwrap()))
}

/// A child process running `what` on the region at `path`, with a pipe each way.
struct Kid {
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

impl Kid {
    fn start(path: &Path, what: &str) -> Kid {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_main", "--nocapture", "--test-threads=1"])
            .env(CHILD, what)
            .env(PATH, path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        Kid { child, out }
    }

    /// Reads the child's output up to a line holding `want`; returns what follows it.
    fn wait_for(&mut self, want: &str) -> String {
        loop {
            let line = self.out.next().expect("child ended early").unwrap();
            if let Some(at) = line.find(want) {
                return line[at + want.len()..].trim().to_string();
            }
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }
}

/// Waits for the parent's next line on stdin.
fn hear() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    line.trim().to_string()
}

/// Writes `text` to stdout with one `write`: usable in a fork child, where the stdout lock
/// may be held by a thread that no longer exists.
fn raw_print(args: std::fmt::Arguments<'_>) {
    let mut buf = [0u8; 128];
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    let _ = cursor.write_fmt(args);
    let n = cursor.position() as usize;
    // SAFETY: writes n initialised bytes of buf to fd 1; write is async-signal-safe.
    unsafe { libc::write(1, buf.as_ptr().cast(), n) };
}

/// xorshift64: a deterministic stream without dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The body of child processes; a no-op when run as an ordinary test.
#[test]
fn child_main() {
    let Ok(what) = std::env::var(CHILD) else {
        return;
    };
    let path = PathBuf::from(std::env::var(PATH).unwrap());
    let region: &'static Region = Box::leak(Box::new(Region::open(&path).unwrap()));
    let me: &'static _ = Box::leak(Box::new(region.claim_slot().unwrap()));
    match what.as_str() {
        "hold" => {
            me.reserve_memory(0, 512 << 20).unwrap();
            me.reserve_memory(3, 1 << 20).unwrap();
            println!("ready {}", me.index());
            std::thread::sleep(Duration::from_secs(60));
        }
        "hammer" => hammer(region, me),
        "fork" | "fork-without-release" => {
            me.reserve_memory(0, 256 << 20).unwrap();
            // SAFETY: the child makes only calls that are safe after fork in a multithreaded
            // process (release_after_fork is async-signal-safe; claiming uses fcntl and
            // atomics; printing uses one write) before it sleeps and ends.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                if what == "fork" {
                    region.release_after_fork();
                    let stale_refused = me.reserve_memory(0, 1).is_err() && me.memory_held(0) == 0;
                    match region.claim_slot() {
                        Ok(own) => {
                            let reserved = own.reserve_memory(0, 1 << 20).is_ok();
                            raw_print(format_args!(
                                "grandchild slot {} reserved {reserved} stale_refused {stale_refused}\n",
                                own.index()
                            ));
                            std::mem::forget(own);
                        }
                        Err(_) => raw_print(format_args!("grandchild claim failed\n")),
                    }
                }
                // SAFETY: async-signal-safe calls only.
                unsafe {
                    libc::sleep(30);
                    libc::_exit(0);
                }
            }
            if what == "fork" {
                // Its line comes first, so the parent reads the slot before our exit.
                let _ = hear();
            }
            println!("grandchild {pid}");
            std::process::exit(0);
        }
        "gate" => gate_waiter(region),
        other => panic!("unknown child {other}"),
    }
}

/// Sleeps in the gate of device 0 (with a timeout far longer than the test) until the
/// bucket is positive, following the waiter's protocol; says how long it slept.
fn gate_waiter(region: &'static Region) {
    let acct = region.compute(0);
    acct.waiting.fetch_add(1, Ordering::SeqCst);
    println!("waiting");
    let started = Instant::now();
    loop {
        let seen = acct.gate.load(Ordering::SeqCst);
        if acct.bucket_ns.load(Ordering::SeqCst) > 0 {
            break;
        }
        acct.wait_gate(seen, 20_000_000_000);
    }
    acct.waiting.fetch_sub(1, Ordering::SeqCst);
    println!("admitted after {} ms", started.elapsed().as_millis());
}

/// 4 threads: fill the cap one byte at a time together, then reserve and release random
/// sizes, checking the container's usage after every step.
fn hammer(region: &'static Region, me: &'static tessera_region::ProcessSlot) {
    println!("ready");
    assert_eq!(hear(), "fill");
    let filled = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..HAMMER_THREADS {
            s.spawn(|| {
                let mut n = 0;
                while me.reserve_memory(0, 1).is_ok() {
                    n += 1;
                }
                let err = me.reserve_memory(0, 1).unwrap_err();
                assert_eq!(err.cap, HAMMER_CAP);
                filled.fetch_add(n, Ordering::Relaxed);
            });
        }
    });
    println!(
        "filled {} {}",
        filled.load(Ordering::Relaxed),
        me.memory_held(0)
    );
    assert_eq!(hear(), "hammer");
    me.release_memory(0, me.memory_held(0));
    let over = AtomicBool::new(false);
    let (ok, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    let end = Instant::now() + Duration::from_millis(1500);
    std::thread::scope(|s| {
        for t in 0..HAMMER_THREADS {
            let (over, ok, failed) = (&over, &ok, &failed);
            s.spawn(move || {
                let mut rng =
                    Rng(0x2545_f491_4f6c_dd1d ^ (std::process::id() as u64) << 8 ^ t as u64);
                let mut held: Vec<u64> = Vec::new();
                while Instant::now() < end {
                    if !held.is_empty() && rng.next().is_multiple_of(2) {
                        let i = (rng.next() as usize) % held.len();
                        me.release_memory(0, held.swap_remove(i));
                    } else {
                        let n = 1 + rng.next() % (HAMMER_CAP / 16);
                        match me.reserve_memory(0, n) {
                            Ok(()) => {
                                held.push(n);
                                ok.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    if region.memory_used(0) > HAMMER_CAP {
                        over.store(true, Ordering::Relaxed);
                    }
                }
                for n in held {
                    me.release_memory(0, n);
                }
            });
        }
    });
    println!(
        "done over={} ok={} failed={} held={}",
        over.load(Ordering::Relaxed),
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        me.memory_held(0)
    );
}

#[test]
fn reservations_across_processes_reach_the_cap_exactly_and_never_pass_it() {
    let path = temp_path("hammer");
    let r = region(&path, Some(HAMMER_CAP));
    let mut kids: Vec<Kid> = (0..HAMMER_PROCESSES)
        .map(|_| Kid::start(&path, "hammer"))
        .collect();
    for k in &mut kids {
        k.wait_for("ready");
    }
    for k in &mut kids {
        k.say("fill");
    }
    let mut total = 0;
    for k in &mut kids {
        let f: Vec<u64> = k
            .wait_for("filled")
            .split(' ')
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(
            f[0], f[1],
            "a process's slot holds what its threads reserved"
        );
        total += f[0];
    }
    assert_eq!(total, HAMMER_CAP, "together they reserved exactly the cap");
    assert_eq!(r.memory_used(0), HAMMER_CAP);
    let held: u64 = r.processes().iter().map(|p| p.memory[0]).sum();
    assert_eq!(held, HAMMER_CAP);

    for k in &mut kids {
        k.say("hammer");
    }
    // Sample the container's usage while they hammer.
    let (mut samples, mut peak) = (0u64, 0);
    let end = Instant::now() + Duration::from_millis(1400);
    while Instant::now() < end {
        let used = r.memory_used(0);
        assert!(
            used <= HAMMER_CAP,
            "usage {used} passed the cap {HAMMER_CAP}"
        );
        peak = peak.max(used);
        samples += 1;
    }
    for k in &mut kids {
        let done = k.wait_for("done");
        eprintln!("child: {done}");
        assert!(done.starts_with("over=false"), "{done}");
        assert!(done.ends_with("held=0"), "{done}");
        assert!(!done.contains("ok=0 "), "{done}");
        assert!(!done.contains("failed=0 "), "the cap was never hit: {done}");
        assert!(k.child.wait().unwrap().success());
    }
    eprintln!("{samples} samples, peak {peak} of {HAMMER_CAP}");
    assert_eq!(r.memory_used(0), 0);
    // The children ended without giving their slots back: reaped now (a child that hit the
    // cap after a sibling ended may already have reaped that sibling).
    assert!(r.reap_dead() <= HAMMER_PROCESSES);
    assert!(r.processes().is_empty());
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_killed_process_gives_its_memory_and_slot_back() {
    let path = temp_path("kill");
    let r = region(&path, Some(512 << 20));
    let mut kid = Kid::start(&path, "hold");
    let slot: usize = kid.wait_for("ready").parse().unwrap();
    assert_eq!(r.memory_used(0), 512 << 20);
    assert_eq!(r.memory_used(3), 1 << 20);
    let procs = r.processes();
    assert_eq!(procs.len(), 1);
    assert_eq!((procs[0].slot, procs[0].pid), (slot, kid.child.id()));
    assert_eq!(procs[0].memory[0], 512 << 20);
    assert_eq!(procs[0].memory.len(), MAX_DEVICES);
    assert_eq!(r.reap_dead(), 0, "a live process is never reaped");

    // Take every other slot: the table is full while the child lives.
    let mine: Vec<_> = (1..MAX_PROCESSES)
        .map(|_| r.claim_slot().unwrap())
        .collect();
    assert!(matches!(r.claim_slot(), Err(RegionError::Full)));
    assert!(
        mine[0].reserve_memory(0, 1).is_err(),
        "the child holds the whole cap"
    );

    kid.child.kill().unwrap();
    kid.child.wait().unwrap();
    // Hitting the cap reaps the dead process: its memory is ours to take at once.
    let killed_at = Instant::now();
    mine[0].reserve_memory(0, 512 << 20).unwrap();
    assert!(killed_at.elapsed() < Duration::from_secs(1));
    assert_eq!(r.memory_used(3), 0);
    assert_eq!(r.processes().len(), MAX_PROCESSES - 1);
    // And its slot is free again.
    let last = r.claim_slot().unwrap();
    assert_eq!(last.index(), slot);
    assert!(matches!(r.claim_slot(), Err(RegionError::Full)));
    drop(mine);
    assert_eq!(r.memory_used(0), 0);
    drop(last);
    assert!(r.processes().is_empty());
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_forked_child_keeps_neither_its_parents_slot_nor_its_memory() {
    let path = temp_path("fork");
    let r = region(&path, None);
    let mut kid = Kid::start(&path, "fork");
    let line = kid.wait_for("grandchild slot");
    kid.say("go");
    let grandchild: i32 = kid.wait_for("grandchild").parse().unwrap();
    assert!(kid.child.wait().unwrap().success());
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(
        fields[1..],
        ["reserved", "true", "stale_refused", "true"],
        "{line}"
    );
    let own_slot: usize = fields[0].parse().unwrap();

    // The parent is dead; the grandchild, which shares its descriptors, has let go of its
    // lock, so the parent's slot is reaped and its 256 MiB returned.
    let deadline = Instant::now() + Duration::from_secs(2);
    while r.reap_dead() == 0 {
        assert!(
            Instant::now() < deadline,
            "the dead parent's slot was never reaped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        r.memory_used(0),
        1 << 20,
        "only the grandchild's own 1 MiB is left"
    );
    let procs = r.processes();
    assert_eq!(procs.len(), 1, "{procs:?}");
    assert_eq!((procs[0].slot, procs[0].pid), (own_slot, grandchild as u32));
    // SAFETY: kills the grandchild this test created.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(2);
    while r.reap_dead() == 0 {
        assert!(
            Instant::now() < deadline,
            "the grandchild's slot was never reaped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(r.memory_used(0), 0);
    let _ = std::fs::remove_file(path);
}

#[test]
fn without_release_after_fork_the_child_keeps_the_parents_slot_alive() {
    // The control for the test above: the lock is what keeps a slot alive.
    let path = temp_path("fork-control");
    let r = region(&path, None);
    let mut kid = Kid::start(&path, "fork-without-release");
    let grandchild: i32 = kid.wait_for("grandchild").parse().unwrap();
    assert!(kid.child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(r.reap_dead(), 0);
    assert_eq!(r.memory_used(0), 256 << 20);
    // SAFETY: kills the grandchild this test created.
    unsafe { libc::kill(grandchild, libc::SIGKILL) };
    let deadline = Instant::now() + Duration::from_secs(2);
    while r.reap_dead() == 0 {
        assert!(
            Instant::now() < deadline,
            "the parent's slot was never reaped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(r.memory_used(0), 0);
    let _ = std::fs::remove_file(path);
}

#[test]
fn a_full_table_is_full_for_every_opener_until_a_slot_is_released() {
    let path = temp_path("full");
    let a = region(&path, None);
    // A second opener has its own open file description: to it, `a` is another process.
    let b = region(&path, None);
    let slots: Vec<_> = (0..MAX_PROCESSES)
        .map(|_| a.claim_slot().unwrap())
        .collect();
    let mut seen: Vec<usize> = slots.iter().map(|s| s.index()).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), MAX_PROCESSES, "every slot claimed once");
    assert!(matches!(a.claim_slot(), Err(RegionError::Full)));
    assert!(matches!(b.claim_slot(), Err(RegionError::Full)));
    assert_eq!(a.reap_dead(), 0, "a process never reaps itself");
    assert_eq!(b.reap_dead(), 0, "live slots are never reaped");
    let msg = RegionError::Full.to_string();
    assert!(msg.contains("1024"), "{msg}");
    slots[100].reserve_memory(0, 7).unwrap();
    drop(slots);
    assert_eq!(a.memory_used(0), 0);
    let s = b.claim_slot().unwrap();
    assert_eq!(s.index(), 0);
}

#[test]
fn threads_of_one_process_claim_distinct_slots() {
    let path = temp_path("threads");
    let r = region(&path, Some(1 << 30));
    let mut indices: Vec<usize> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    (0..32)
                        .map(|_| {
                            let slot = r.claim_slot().unwrap();
                            slot.reserve_memory(0, 1).unwrap();
                            let i = slot.index();
                            std::mem::forget(slot);
                            i
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    indices.sort_unstable();
    indices.dedup();
    assert_eq!(indices.len(), 16 * 32);
    assert_eq!(r.memory_used(0), 16 * 32);
    assert_eq!(r.reap_dead(), 0);
    let _ = std::fs::remove_file(path);
}

#[test]
fn release_never_returns_more_than_the_slot_holds() {
    let path = temp_path("release");
    let r = region(&path, Some(1000));
    let a = r.claim_slot().unwrap();
    let b = r.claim_slot().unwrap();
    a.reserve_memory(0, 600).unwrap();
    b.reserve_memory(0, 400).unwrap();
    assert_eq!(a.reserve_memory(0, 1).unwrap_err().used, 1000);
    // A double free in `b` must not hand out `a`'s memory.
    b.release_memory(0, 400);
    b.release_memory(0, 400);
    assert_eq!(b.memory_held(0), 0);
    assert_eq!(r.memory_used(0), 600);
    assert!(b.reserve_memory(0, 401).is_err());
    b.reserve_memory(0, 400).unwrap();
    // Devices past the table are refused, never a panic.
    assert!(a.reserve_memory(MAX_DEVICES, 1).is_err());
    a.release_memory(MAX_DEVICES, 1);
    assert_eq!(a.memory_held(MAX_DEVICES), 0);
    // A raised cap is seen at once.
    r.set_memory_cap(0, Some(2000));
    a.reserve_memory(0, 1000).unwrap();
    drop(a);
    assert_eq!(r.memory_used(0), 400);
    drop(b);
    assert_eq!(r.memory_used(0), 0);
    let _ = std::fs::remove_file(path);
}

#[test]
fn an_anonymous_region_is_shared_with_forked_children() {
    let mut memory_caps = [None; MAX_DEVICES];
    memory_caps[0] = Some(1000);
    let init = RegionInit {
        name: "solo".into(),
        memory_caps,
    };
    let r: &'static Region = Box::leak(Box::new(Region::anonymous(&init).unwrap()));
    let me = r.claim_slot().unwrap();
    me.reserve_memory(0, 100).unwrap();
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the 2-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child makes only fork-safe calls (see `child_main`) and ends with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        r.release_after_fork();
        let stale_refused = me.reserve_memory(0, 1).is_err();
        let ok = match r.claim_slot() {
            Ok(own) => {
                let reserved = own.reserve_memory(0, 300).is_ok();
                std::mem::forget(own);
                reserved && stale_refused
            }
            Err(_) => false,
        };
        // SAFETY: writes one byte from a local; then sleeps and exits, async-signal-safe.
        unsafe {
            libc::write(fds[1], [ok as u8].as_ptr().cast(), 1);
            libc::sleep(30);
            libc::_exit(0);
        }
    }
    let mut byte = [0u8; 1];
    // SAFETY: reads one byte into a local buffer from the pipe this test made.
    let n = unsafe { libc::read(fds[0], byte.as_mut_ptr().cast(), 1) };
    assert_eq!(n, 1);
    assert_eq!(
        byte[0], 1,
        "the child could not claim its own slot and reserve"
    );
    assert_eq!(
        r.memory_used(0),
        400,
        "the child's reservation is seen here"
    );
    assert_eq!(r.processes().len(), 2);
    assert!(me.reserve_memory(0, 601).is_err());
    // SAFETY: kills and waits for the child this test forked; closes the pipe it made.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    assert_eq!(r.reap_dead(), 1);
    assert_eq!(r.memory_used(0), 100);
    assert_eq!(me.memory_held(0), 100, "the parent's slot is untouched");
    me.reserve_memory(0, 900).unwrap();
}

#[test]
fn a_waiter_in_another_process_is_woken_by_the_refill() {
    let path = temp_path("gate");
    let r = region(&path, None);
    let acct = r.compute(0);
    let mut kid = Kid::start(&path, "gate");
    kid.wait_for("waiting");
    // Let it reach the futex, then refill and wake.
    std::thread::sleep(Duration::from_millis(300));
    let (old, new) = acct.credit(1_000_000, 2_000_000);
    assert!(old <= 0 && new > 0);
    acct.wake_gate();
    let after: u64 = kid
        .wait_for("admitted after")
        .trim_end_matches(" ms")
        .parse()
        .unwrap();
    assert!(
        (300..5_000).contains(&after),
        "the waiter slept {after} ms; a wake-up must end its 20 s wait"
    );
    assert!(kid.child.wait().unwrap().success());
    assert_eq!(acct.waiting.load(Ordering::SeqCst), 0);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn busy_spans_written_by_two_mappings_are_taken_once() {
    let path = temp_path("spans");
    let r = region(&path, None);
    let acct = r.compute(0);
    // Two writers: this mapping and another of the same file.
    let other = Region::open(&path).unwrap();
    acct.add_span(5_000_000_000, 5_002_500_000);
    other.compute(0).add_span(5_001_500_000, 5_003_000_000);
    let mut spans = other.compute(0).take_spans(5_010_000_000);
    spans.sort_by_key(|s| s.start_ns);
    let got: Vec<(u64, u64)> = spans.iter().map(|s| (s.start_ns, s.end_ns)).collect();
    assert_eq!(
        got,
        vec![
            (5_000_000_000, 5_002_500_000),
            (5_001_500_000, 5_003_000_000)
        ]
    );
    assert!(acct.take_spans(5_010_000_000).is_empty());
    let _ = std::fs::remove_file(&path);
}
