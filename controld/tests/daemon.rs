//! controld with real processes on simgpu: the config, `container set` reaching a running
//! application, `exec`, reaping, restart and adoption, bad configs and reloads, garbage on
//! the socket and corrupt regions.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use support::*;
use tessera_tests::{json_u64, tessera_client, ClientKind, Running};

const THREE: &str = r#"
[[container]]
name = "inference"
gpus = [0]
memory = "1GiB"
compute = "burst:50"
priority = "online"

[[container]]
name = "trainer"
gpus = [0]
memory = "4GiB"
compute = "best-effort"
priority = "offline"

[[container]]
name = "batch"
gpus = [0]
memory = "2GiB"
compute = "fixed:30"
priority = "offline"
"#;

fn cap(c: &serde_json::Value) -> u64 {
    json_u64(c, "/devices/0/memory_cap")
}

#[test]
fn a_config_starts_and_set_reaches_a_running_application() {
    let mut node = Node::new("accept1");
    let config = node.write_config(THREE);
    node.start(Some(&config));
    let status = node.status();
    let names: Vec<&str> = status["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["batch", "inference", "trainer"]);
    let inference = container(&status, "inference").unwrap();
    assert_eq!(cap(&inference), GIB);
    assert_eq!(inference["compute"], "burst:50");
    assert_eq!(inference["priority"], "online");
    assert_eq!(container(&status, "batch").unwrap()["compute"], "fixed:30");
    let table = node.ctl_ok(&["status"]);
    assert!(
        table.contains("GPU 0") && table.contains("inference"),
        "{table}"
    );
    println!("{table}");

    // An application fills the 1 GiB cap, then the cap is raised to 2 GiB under it.
    let client = tessera_client(ClientKind::CDlopen);
    let mut app = Running::spawn_interactive(
        node.in_container("inference", &client).arg("capfill"),
        "capfill in inference",
    );
    let full = app.wait_for_json("full ", Duration::from_secs(60));
    assert_eq!(json_u64(&full, "/total_full"), GIB, "{full}");
    assert_ne!(json_u64(&full, "/one_more_rc"), 0, "{full}");
    let used_full = GIB - json_u64(&full, "/free_full");
    let seen = node.container("inference").unwrap();
    assert_eq!(json_u64(&seen, "/devices/0/memory_used"), used_full);
    assert_eq!(seen["processes"].as_array().unwrap().len(), 1);

    node.ctl_ok(&["container", "set", "inference", "--memory", "2GiB"]);
    assert_eq!(cap(&node.container("inference").unwrap()), 2 * GIB);
    app.send_line("go");
    let done = app.wait_for_json("done ", Duration::from_secs(60));
    let freed = json_u64(&done, "/freed");
    // Its next allocations pass the old cap, and cuMemGetInfo reports the new one.
    assert_eq!(json_u64(&done, "/one_more_rc"), 0, "{done}");
    assert_eq!(
        json_u64(&done, "/free_after_free"),
        2 * GIB - (used_full - freed),
        "{done}"
    );
    assert!(app.wait(Duration::from_secs(30)).success());
}

#[test]
fn exec_runs_a_command_under_its_cap_and_passes_its_exit_code() {
    let mut node = Node::new("accept2");
    node.start(None);
    let gpuload = &tessera_tests::artifacts().gpuload;
    let out = node.ctl(&[
        "exec",
        "--name",
        "job",
        "--gpu",
        "0",
        "--memory",
        "2GiB",
        "--compute",
        "burst:40",
        "--priority",
        "offline",
        "--",
        gpuload.to_str().unwrap(),
        "alloc",
    ]);
    assert!(
        out.status.success(),
        "exec gpuload failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = json_u64(&report, "/total");
    let held = json_u64(&report, "/bytes") + total - json_u64(&report, "/context_free");
    assert_eq!(total, 2 * GIB, "{report}");
    assert!(held <= 2 * GIB && 2 * GIB - held < 2 * MIB, "{report}");
    let list = node.ctl_ok(&["container", "list", "--json"]);
    assert_eq!(list.trim(), "[]", "the transient container is gone");
    assert!(!node.region("job").exists());

    let code = node.ctl(&["exec", "--memory", "1GiB", "--", "sh", "-c", "exit 7"]);
    assert_eq!(code.status.code(), Some(7));
    let missing = node.ctl(&["exec", "--", "/nonexistent/program"]);
    assert_eq!(missing.status.code(), Some(127));
    assert_eq!(node.ctl_ok(&["container", "list", "--json"]).trim(), "[]");

    // Signals go to the command: it exits by its own TERM handler's code.
    let mut cmd = node.command();
    cmd.args(["exec", "--name", "sig", "--state-dir"])
        .arg(node.state_dir())
        .args([
            "--",
            "sh",
            "-c",
            "trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done",
        ]);
    let mut exec = Running::spawn(&mut cmd, "controld exec sh");
    exec.wait_for_line("ready", Duration::from_secs(30));
    // SAFETY: kill on our own live child.
    unsafe { libc::kill(exec.pid() as i32, libc::SIGTERM) };
    assert_eq!(exec.wait(Duration::from_secs(10)).code(), Some(42));
    wait_until(Duration::from_secs(5), "sig removed", || {
        node.container("sig").is_none()
    });
}

#[test]
fn a_killed_holder_is_reaped_within_a_second() {
    let mut node = Node::new("accept3");
    node.start(None);
    node.ctl_ok(&["container", "add", "r", "--gpus", "0", "--memory", "4GiB"]);
    let client = tessera_client(ClientKind::CLinked);
    let mut holder = Running::spawn(
        node.in_container("r", &client)
            .args(["hold", &GIB.to_string()]),
        "hold 1GiB",
    );
    holder.wait_for_line("ready", Duration::from_secs(60));
    let before = node.container("r").unwrap();
    assert!(json_u64(&before, "/devices/0/memory_used") >= GIB);
    assert_eq!(before["processes"].as_array().unwrap().len(), 1);
    holder.kill();
    let took = wait_until(Duration::from_secs(5), "reaped", || {
        let c = node.container("r").unwrap();
        json_u64(&c, "/devices/0/memory_used") == 0 && c["processes"].as_array().unwrap().is_empty()
    });
    println!("reaped {took:?} after SIGKILL");
    assert!(took < Duration::from_secs(1), "reaped after {took:?}");

    // A new allocation of 3 GiB fits, and status counts what it holds.
    let mut again = Running::spawn(
        node.in_container("r", &client)
            .args(["hold", &(3 * GIB).to_string()]),
        "hold 3GiB",
    );
    again.wait_for_line("ready", Duration::from_secs(60));
    let after = node.container("r").unwrap();
    let used = json_u64(&after, "/devices/0/memory_used");
    assert!((3 * GIB..4 * GIB).contains(&used), "{after}");
    assert_eq!(json_u64(&after, "/processes/0/memory/0"), used);
}

#[test]
fn a_new_daemon_adopts_the_regions_of_a_killed_one() {
    let mut node = Node::new("accept4");
    node.start(None);
    node.ctl_ok(&[
        "container",
        "add",
        "one",
        "--memory",
        "1GiB",
        "--compute",
        "fixed:20",
    ]);
    node.ctl_ok(&[
        "container",
        "add",
        "two",
        "--memory",
        "2GiB",
        "--priority",
        "offline",
    ]);
    let client = tessera_client(ClientKind::CDlopen);
    let mut holders: Vec<Running> = ["one", "two"]
        .iter()
        .map(|name| {
            let mut r = Running::spawn(
                node.in_container(name, &client)
                    .args(["hold", &(256 * MIB).to_string()]),
                "hold",
            );
            r.wait_for_line("ready", Duration::from_secs(60));
            r
        })
        .collect();
    node.daemon.as_mut().unwrap().kill();

    // Without a daemon the caps stay in force for new processes too.
    let mut fill = Running::spawn_interactive(
        node.in_container("one", &client).arg("capfill"),
        "capfill in one",
    );
    let full = fill.wait_for_json("full ", Duration::from_secs(60));
    assert_eq!(json_u64(&full, "/total_full"), GIB);
    drop(fill);

    node.start(None);
    let status = node.status();
    for (name, cap_bytes) in [("one", GIB), ("two", 2 * GIB)] {
        let c = container(&status, name).unwrap_or_else(|| panic!("{name} adopted: {status}"));
        assert_eq!(cap(&c), cap_bytes);
        assert!(json_u64(&c, "/devices/0/memory_used") >= 256 * MIB);
    }
    wait_until(Duration::from_secs(5), "capfill reaped", || {
        node.container("one").unwrap()["processes"]
            .as_array()
            .unwrap()
            .len()
            == 1
    });
    assert_eq!(container(&status, "one").unwrap()["compute"], "fixed:20");
    assert_eq!(container(&status, "two").unwrap()["priority"], "offline");
    let list: serde_json::Value =
        serde_json::from_str(&node.ctl_ok(&["container", "list", "--json"])).unwrap();
    assert_eq!(list[0]["origin"], "api");
    holders.clear();
}

#[test]
fn bad_configs_name_file_line_and_key() {
    let node = Node::new("accept5");
    let cases = [
        (
            THREE.replace("priority = \"online\"", "priorty = \"online\""),
            7,
            "priorty",
        ),
        (THREE.replace("\"2GiB\"", "\"2GB\""), 19, "memory"),
        (THREE.replace("fixed:30", "fixed:51"), 20, "compute"),
        (THREE.replace("\"batch\"", "\"team/batch\""), 17, "name"),
    ];
    for (text, line, key) in cases {
        let config = node.write_config(&text);
        let mut cmd = node.command();
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .arg("--state-dir")
            .arg(node.state_dir());
        let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let want = format!("{}:{line}: key `{key}`", config.display());
        assert!(err.contains(&want), "want {want:?} in: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn a_bad_reload_keeps_the_running_config() {
    let mut node = Node::new("reload");
    let config = node.write_config(THREE);
    node.start(Some(&config));
    std::fs::write(
        &config,
        THREE.replace("\"1GiB\"", "\"3GiB\"").replace(
            "gpus = [0]\nmemory = \"4GiB\"",
            "gpus = [0]\nmemroy = \"4GiB\"",
        ),
    )
    .unwrap();
    node.signal(libc::SIGHUP);
    wait_until(Duration::from_secs(5), "reload failure reported", || {
        node.status()["problems"]
            .to_string()
            .contains("config reload failed")
    });
    assert!(node.daemon_alive());
    assert_eq!(cap(&node.container("inference").unwrap()), GIB);
    let problems = node.status()["problems"].to_string();
    assert!(problems.contains("memroy"), "{problems}");

    // Fixed: the change applies, a container dropped from the file goes.
    std::fs::write(
        &config,
        THREE
            .replace("\"1GiB\"", "\"3GiB\"")
            .split("[[container]]\nname = \"batch\"")
            .next()
            .unwrap(),
    )
    .unwrap();
    node.signal(libc::SIGHUP);
    wait_until(Duration::from_secs(5), "reload applied", || {
        node.container("inference").map(|c| cap(&c)) == Some(3 * GIB)
    });
    assert!(node.container("batch").is_none());
    assert!(!node.status()["problems"]
        .to_string()
        .contains("reload failed"));

    // SIGTERM stops it cleanly; the regions stay for the applications.
    node.signal(libc::SIGTERM);
    let code = node.daemon.as_mut().unwrap().wait(Duration::from_secs(10));
    assert_eq!(code.code(), Some(0));
    assert!(node.region("inference").exists());
    assert!(!node.socket().exists());
}

#[test]
fn garbage_and_corrupt_regions_hurt_no_one_else() {
    let mut node = Node::new("accept6");
    std::fs::create_dir_all(node.state_dir()).unwrap();
    // A corrupt region file waiting in the state dir.
    std::fs::write(node.region("junk"), b"not a region at all").unwrap();
    let config = node.write_config(THREE);
    node.start(Some(&config));
    let status = node.status();
    assert!(container(&status, "junk").is_none());
    assert!(
        status["problems"].to_string().contains("quarantined"),
        "{status}"
    );
    assert!(!node.region("junk").exists());

    let mut sock = UnixStream::connect(node.socket()).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(sock.try_clone().unwrap());
    for garbage in [
        &b"hello\n"[..],
        b"{\"op\":\"bogus\"}\n",
        b"\xff\xfe\x00\x01\n",
        b"{\"op\":\"rm\",\"name\":\"../../etc\"}\n",
        b"{\"op\":\"add\",\"container\":{\"name\":\"a/b\",\"gpus\":[0]}}\n",
        b"[1,2,3]\n",
    ] {
        sock.write_all(garbage).unwrap();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("{\"error\":"), "{garbage:?} → {line}");
    }
    // The same connection still serves a good request.
    sock.write_all(b"{\"op\":\"list\"}\n").unwrap();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("{\"ok\":{\"containers\":"), "{line}");
    // An endless line closes that connection only.
    let mut long = UnixStream::connect(node.socket()).unwrap();
    let _ = long.write_all(&vec![b'x'; 200 * 1024]);
    drop(long);
    // A client that connects and says nothing holds nothing up.
    let _silent = UnixStream::connect(node.socket()).unwrap();

    // A region spoiled under the daemon is quarantined and replaced; the others go on.
    let client = tessera_client(ClientKind::CDlopen);
    let mut trainer = Running::spawn(
        node.in_container("trainer", &client)
            .args(["hold", &(512 * MIB).to_string()]),
        "hold in trainer",
    );
    trainer.wait_for_line("ready", Duration::from_secs(60));
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(node.region("batch"))
            .unwrap();
        f.write_all_at(b"GARBAGE!", 0).unwrap();
    }
    wait_until(Duration::from_secs(5), "spoiled region quarantined", || {
        node.container("batch")
            .is_some_and(|c| c["problems"].to_string().contains("quarantined"))
    });
    assert!(node.daemon_alive());
    let status = node.status();
    assert_eq!(cap(&container(&status, "batch").unwrap()), 2 * GIB);
    let trainer_status = container(&status, "trainer").unwrap();
    assert_eq!(cap(&trainer_status), 4 * GIB);
    assert!(json_u64(&trainer_status, "/devices/0/memory_used") >= 512 * MIB);
    assert!(trainer_status["problems"].as_array().unwrap().is_empty());
    assert!(
        node.state_dir()
            .join("quarantine")
            .read_dir()
            .unwrap()
            .count()
            >= 2
    );
    // The fresh region works for a new process.
    let mut fill = Running::spawn_interactive(
        node.in_container("batch", &client).arg("capfill"),
        "capfill in batch",
    );
    let full = fill.wait_for_json("full ", Duration::from_secs(60));
    assert_eq!(json_u64(&full, "/total_full"), 2 * GIB);
}

#[test]
fn cli_errors_are_one_line_that_says_what_to_do() {
    let mut node = Node::new("errors");
    let out = node.ctl(&["status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("not running") && err.contains("controld run"),
        "{err}"
    );
    node.start(None);
    for (args, want) in [
        (
            &["container", "set", "nobody", "--memory", "1GiB"][..],
            "no container named nobody",
        ),
        (
            &["container", "add", "x", "--compute", "fixed:0"],
            "invalid compute policy",
        ),
        (
            &["container", "add", "x", "--priority", "urgent"],
            "invalid priority",
        ),
        (
            &["container", "add", "x", "--memory", "1GB"],
            "invalid size",
        ),
        (&["container", "add", "a/b"], "invalid container name"),
    ] {
        let out = node.ctl(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    node.ctl_ok(&["container", "add", "a", "--compute", "burst:60"]);
    let out = node.ctl(&["container", "add", "b", "--compute", "fixed:50"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("GPU 0 would be guaranteed 110%"), "{err}");
    let usage = node.ctl(&["container", "frob"]);
    assert_eq!(usage.status.code(), Some(2));
    // The socket is the daemon user's only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(node.socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        // A copy anyone may run: built under a umask like 077, the binary is root's alone.
        let binary = std::env::temp_dir().join(format!("controld-nobody-{}", std::process::id()));
        std::fs::copy(node.command().get_program(), &binary).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = std::process::Command::new(&binary);
        cmd.args(["status", "--state-dir"])
            .arg(node.state_dir())
            .uid(65534)
            .gid(65534);
        let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(30));
        let _ = std::fs::remove_file(&binary);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("permission denied"), "{err}");
    }
}
