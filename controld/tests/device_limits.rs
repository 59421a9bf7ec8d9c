//! Declarations are checked against the node's GPUs: a cap beyond a GPU's memory or a GPU
//! the node lacks is refused with an error that says so, from the config (at start and at
//! a reload, which is then reported as refused, not as a success) and from
//! `container add/set`.

mod support;

use std::time::Duration;
use support::*;
use tessera_tests::json_u64;

const CONFIG: &str = r#"
[[container]]
name = "fits"
gpus = [0]
memory = "1GiB"

[[container]]
name = "big"
gpus = [0]
memory = "64GiB"

[[container]]
name = "ghost"
gpus = [3]
"#;

fn problems(node: &Node) -> String {
    node.status()["problems"].to_string()
}

#[test]
fn caps_beyond_the_device_and_missing_gpus_are_refused() {
    // One A100 with 40 GiB.
    let mut node = Node::new("device-limits");
    let config = node.write_config(CONFIG);
    node.start(Some(&config));
    let status = node.status();
    assert!(container(&status, "fits").is_some());
    assert!(container(&status, "big").is_none());
    assert!(container(&status, "ghost").is_none());
    let all = status["problems"].to_string();
    assert!(
        all.contains(
            "config refused: container big: a memory cap of 64GiB is more than GPU 0 has (40GiB)"
        ),
        "{all}"
    );
    assert!(
        all.contains(
            "config refused: container ghost: GPU 3 does not exist: this node has 1 GPU(s)"
        ),
        "{all}"
    );

    for (args, want) in [
        (
            &["container", "add", "x", "--memory", "100GiB"][..],
            "more than GPU 0 has",
        ),
        (
            &["container", "add", "y", "--gpus", "5"],
            "GPU 5 does not exist",
        ),
        (
            &["container", "set", "fits", "--memory", "50GiB"],
            "more than GPU 0 has",
        ),
    ] {
        let out = node.ctl(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    assert_eq!(
        json_u64(&node.container("fits").unwrap(), "/devices/0/memory_cap"),
        GIB
    );

    // A reload that asks for too much is refused, said so, and changes nothing of it.
    std::fs::write(
        &config,
        CONFIG
            .replace("\"1GiB\"", "\"41GiB\"")
            .replace("\"64GiB\"", "\"2GiB\""),
    )
    .unwrap();
    node.signal(libc::SIGHUP);
    wait_until(Duration::from_secs(10), "the reload applied", || {
        node.container("big").is_some()
    });
    let now = problems(&node);
    assert!(
        now.contains(
            "config refused: container fits: a memory cap of 41GiB is more than GPU 0 has"
        ),
        "{now}"
    );
    assert_eq!(
        json_u64(&node.container("fits").unwrap(), "/devices/0/memory_cap"),
        GIB
    );
    // Fixed, the same declaration is tried again and the refusals go.
    std::fs::write(
        &config,
        CONFIG
            .replace("\"1GiB\"", "\"3GiB\"")
            .replace("\"64GiB\"", "\"2GiB\"")
            .replace("[3]", "[0]"),
    )
    .unwrap();
    node.signal(libc::SIGHUP);
    wait_until(Duration::from_secs(10), "the fixed reload applied", || {
        node.container("fits")
            .is_some_and(|c| json_u64(&c, "/devices/0/memory_cap") == 3 * GIB)
    });
    assert!(node.container("ghost").is_some());
    assert!(!problems(&node).contains("config refused"));
    assert!(node.daemon_alive());
}
