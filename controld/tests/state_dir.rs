//! The state dir across daemons: a second daemon on it refuses to start and names the
//! first; a restart after a corrupt declaration or a missing region keeps each container as
//! declared or refuses it loudly, never changing it silently.

mod support;

use std::time::Duration;
use support::*;
use tessera_region::Region;
use tessera_tests::json_u64;

#[test]
fn a_second_daemon_on_the_same_state_dir_refuses_and_names_the_first() {
    let mut node = Node::new("second");
    node.start(None);
    // Another socket, so that only the state dir is shared.
    let config = node.write_config(&format!(
        "[daemon]\nsocket = \"{}\"\n",
        node.dir.path().join("other.sock").display()
    ));
    let mut cmd = node.command();
    cmd.arg("run")
        .arg("--state-dir")
        .arg(node.state_dir())
        .arg("--config")
        .arg(&config);
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("in use by controld pid {}", node.daemon_pid())),
        "{err}"
    );
    assert!(!node.dir.path().join("other.sock").exists());
    assert!(node.daemon_alive());
    // Once the first is gone, a new one takes the dir.
    node.daemon.as_mut().unwrap().kill();
    node.start(None);
}

#[test]
fn a_restart_keeps_containers_as_declared_or_refuses_them_loudly() {
    let mut node = Node::new("restart");
    node.start(None);
    for args in [
        &[
            "container",
            "add",
            "spoilt",
            "--memory",
            "1GiB",
            "--compute",
            "fixed:20",
        ][..],
        &[
            "container",
            "add",
            "lost",
            "--memory",
            "2GiB",
            "--compute",
            "burst:30",
            "--priority",
            "offline",
        ],
        &["container", "add", "kept", "--memory", "512MiB"],
    ] {
        node.ctl_ok(args);
    }
    let dir = node.state_dir();
    assert!(std::fs::read_dir(&dir).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".tmp")));
    node.daemon.as_mut().unwrap().kill();

    std::fs::write(dir.join("spoilt.json"), b"{\"spec\": garbage").unwrap();
    std::fs::remove_file(node.region("lost")).unwrap();
    // A cap raised in the region while no daemon ran.
    Region::open(&node.region("kept"))
        .unwrap()
        .set_memory_cap(0, Some(40 * GIB));

    node.start(None);
    let status = node.status();
    // Refused loudly: not managed, said in status, its declaration kept aside.
    assert!(container(&status, "spoilt").is_none(), "{status}");
    let problems = status["problems"].to_string();
    assert!(problems.contains("container spoilt refused"), "{problems}");
    let aside: Vec<String> = std::fs::read_dir(dir.join("quarantine"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        aside.iter().any(|f| f.starts_with("spoilt.json")),
        "{aside:?}"
    );
    assert!(
        node.region("spoilt").exists(),
        "its region is left as it was"
    );
    // Made again from its declaration, and said so.
    let lost = container(&status, "lost").expect("lost kept");
    assert_eq!(json_u64(&lost, "/devices/0/memory_cap"), 2 * GIB);
    assert_eq!(lost["compute"], "burst:30");
    assert_eq!(lost["priority"], "offline");
    assert!(
        lost["problems"]
            .to_string()
            .contains("made again from its declaration"),
        "{lost}"
    );
    assert!(node.region("lost").exists());
    // As declared, the region's raised cap put back.
    let kept = container(&status, "kept").expect("kept");
    assert_eq!(json_u64(&kept, "/devices/0/memory_cap"), 512 * MIB);
    assert_eq!(
        Region::open(&node.region("kept")).unwrap().memory_cap(0),
        Some(512 * MIB)
    );
    let list: serde_json::Value =
        serde_json::from_str(&node.ctl_ok(&["container", "list", "--json"])).unwrap();
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["origin"] == "api"));
    // Declared again, it is managed again, over the region left in place.
    node.ctl_ok(&["container", "add", "spoilt", "--memory", "1GiB"]);
    assert!(node.container("spoilt").is_some());
}

/// Files that are no regular files, named like state files (a FIFO, a socket, a symbolic
/// link, as a declaration or as a region): the daemon starts, sets each aside and says so,
/// instead of waiting on a FIFO for a writer that never comes.
#[test]
fn odd_files_named_like_state_files_are_set_aside_not_waited_on() {
    use std::os::unix::net::UnixListener;
    let mut node = Node::new("odd-files");
    let dir = node.state_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["fifo.json", "pipe.region"] {
        let path =
            std::ffi::CString::new(dir.join(name).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo has no other precondition.
        let made = unsafe { libc::mkfifo(path.as_ptr(), 0o600) };
        assert_eq!(made, 0, "mkfifo {name}");
    }
    drop(UnixListener::bind(dir.join("sock.json")).unwrap());
    std::os::unix::fs::symlink("/etc/hostname", dir.join("link.json")).unwrap();
    // Bounded: a daemon that waited on the FIFO would not answer within start's 20 s.
    node.start(None);
    let status = node.status();
    let problems = status["problems"].to_string();
    for (name, why) in [
        ("fifo.json", "not a regular file but a FIFO"),
        ("sock.json", "cannot read it"),
        ("link.json", "symbolic link"),
        ("pipe.region", "pipe.region"),
    ] {
        assert!(problems.contains(name), "{name} not named in {problems}");
        assert!(problems.contains(why), "{name}: no {why:?} in {problems}");
        assert!(
            std::fs::symlink_metadata(dir.join(name)).is_err(),
            "{name} was left in the state dir"
        );
    }
    // And it serves as ever.
    node.ctl_ok(&["container", "add", "after", "--memory", "1GiB"]);
}
