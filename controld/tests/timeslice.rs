//! The GPU time slice per container, end to end on simgpu: an offline container's processes
//! run their channel groups in 100 µs slices, an online one in 16 ms slices while it is the
//! only online container on its GPU and in the driver's beside another, a container's own
//! setting wins and a change reaches a running process; status, the container list and
//! metrics say what is in force, and a refusing driver is reported, not failed on.

mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;
use tessera_controld::policy::ONLINE_TIMESLICE_US;
use tessera_tests::{artifacts, json_u64, stat_process, Running};

/// Starts a long trainer in container `name`.
fn trainer(node: &Node, name: &str) -> Running {
    let mut cmd = node.in_container(name, &artifacts().gpuload);
    cmd.args(["train", "--kernel-ms", "1", "--seconds", "60"]);
    Running::spawn_captured(&mut cmd, &format!("gpuload train in {name}"))
}

/// Process `pid`'s time slice on device 0 by simgpu's ground truth, once it has one.
fn slice_ns(node: &Node, pid: u32) -> Option<u64> {
    let out = node.sim.simgpu(&["stat", "--json"]);
    let stat: Value = serde_json::from_slice(&out.stdout).ok()?;
    stat_process(&stat, pid).map(|p| json_u64(p, "/devices/0/timeslice_ns"))
}

fn config(extra: &str) -> String {
    format!(
        "[[container]]\nname = \"web\"\ngpus = [0]\npriority = \"online\"\n\n\
         [[container]]\nname = \"batch\"\ngpus = [0]\npriority = \"offline\"\n\n{extra}"
    )
}

#[test]
fn offline_work_runs_in_short_slices_and_status_says_so() {
    let mut node = Node::new("timeslice");
    let config = node.write_config(&config(
        "[[container]]\nname = \"tuned\"\ngpus = [0]\npriority = \"offline\"\ntimeslice = \"250us\"\n",
    ));
    node.start(Some(&config));
    let mut batch = trainer(&node, "batch");
    let mut web = trainer(&node, "web");
    let mut tuned = trainer(&node, "tuned");
    wait_until(Duration::from_secs(30), "batch at 100 µs", || {
        slice_ns(&node, batch.pid()) == Some(100_000)
    });
    wait_until(Duration::from_secs(30), "tuned at 250 µs", || {
        slice_ns(&node, tuned.pid()) == Some(250_000)
    });
    let online_ns = u64::from(ONLINE_TIMESLICE_US) * 1_000;
    wait_until(
        Duration::from_secs(30),
        "web, the only online container, at 16 ms",
        || slice_ns(&node, web.pid()) == Some(online_ns),
    );

    wait_until(Duration::from_secs(10), "batch's report", || {
        node.container("batch").unwrap()["timeslice_set_us"] == 100
    });
    let status = node.status();
    let batch_status = container(&status, "batch").unwrap();
    assert_eq!(batch_status["timeslice"], "100us");
    assert_eq!(batch_status["timeslice_state"], "100us on 1 channel group");
    wait_until(Duration::from_secs(10), "web's report", || {
        node.container("web").unwrap()["timeslice_set_us"] == ONLINE_TIMESLICE_US
    });
    let web_status = node.container("web").unwrap();
    assert_eq!(web_status["timeslice"], "16ms");
    assert_eq!(web_status["timeslice_state"], "16ms on 1 channel group");
    let text = node.ctl_ok(&["status"]);
    assert!(
        text.contains("batch: GPU time slice: 100us on 1 channel group"),
        "{text}"
    );
    let list = node.ctl_ok(&["container", "list"]);
    assert!(list.contains("TIMESLICE"), "{list}");
    let row = |list: &str, name: &str| {
        list.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .map(|l| l.split_whitespace().nth(5).unwrap_or_default().to_string())
    };
    assert_eq!(row(&list, "web").as_deref(), Some("16ms"), "{list}");

    // A second online container on the GPU: web's requests must not keep its work waiting
    // for 16 ms, so web goes back to the driver's slice, at its next wait in the gate (the
    // two take turns).
    node.ctl_ok(&["container", "add", "api", "--gpus", "0"]);
    let mut api = trainer(&node, "api");
    wait_until(
        Duration::from_secs(30),
        "web back at the driver's slice",
        || slice_ns(&node, web.pid()).is_some_and(|ns| ns != online_ns && ns > 1_000_000),
    );
    let web_status = node.container("web").unwrap();
    assert_eq!(web_status["timeslice"], "driver");
    assert_eq!(web_status["timeslice_state"], "");
    assert!(
        web_status["problems"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| !p.as_str().unwrap().contains("time slice")),
        "{web_status}"
    );
    let list = node.ctl_ok(&["container", "list"]);
    assert_eq!(row(&list, "web").as_deref(), Some("driver"), "{list}");
    assert_eq!(row(&list, "api").as_deref(), Some("driver"), "{list}");
    api.kill();
    node.ctl_ok(&["container", "rm", "api", "--force"]);
    let list = node.ctl_ok(&["container", "list"]);
    assert_eq!(row(&list, "web").as_deref(), Some("16ms"), "{list}");

    // A change reaches the running process: at its next wait in the gate at the latest
    // (online work blocks it now and then), here while it is blocked by web's work.
    node.ctl_ok(&["container", "set", "batch", "--timeslice", "500us"]);
    wait_until(Duration::from_secs(30), "batch at 500 µs", || {
        slice_ns(&node, batch.pid()) == Some(500_000)
    });
    for t in [&mut batch, &mut web, &mut tuned] {
        t.kill();
    }
}

#[test]
fn a_refused_slice_is_reported_and_the_work_goes_on() {
    let mut node = Node {
        sim: tessera_tests::SimNode::new(
            "A100-40GB",
            &[
                ("SIMGPU_CONTEXT_MEMORY", CONTEXT_MEMORY),
                ("SIMGPU_RM", "refuse-timeslice"),
            ],
        ),
        dir: TempDir::new("timeslice-refused"),
        daemon: None,
    };
    let addr = free_local_addr();
    let config = node.write_config(&format!("[daemon]\nmetrics = \"{addr}\"\n\n{}", config("")));
    node.start(Some(&config));
    let mut batch = trainer(&node, "batch");
    wait_until(Duration::from_secs(30), "the refusal reported", || {
        node.container("batch").unwrap()["timeslice_unavailable"] == true
    });
    let c = node.container("batch").unwrap();
    let state = c["timeslice_state"].as_str().unwrap();
    assert!(
        state.starts_with("not available: the driver refused it (NV_ERR_INSUFFICIENT_PERMISSIONS"),
        "{state}"
    );
    assert!(c["timeslice_set_us"].is_null(), "{c}");
    // The work goes on as without the lever.
    let busy = || {
        let out = node.sim.simgpu(&["stat", "--json"]);
        let stat: Value = serde_json::from_slice(&out.stdout).unwrap();
        json_u64(
            stat_process(&stat, batch.pid()).unwrap(),
            "/devices/0/busy_ns",
        )
    };
    let before = busy();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        busy() > before + 100_000_000,
        "the trainer's kernels stopped"
    );
    let scraped = scrape(addr, Duration::from_secs(10)).unwrap();
    assert_eq!(
        sample(
            &scraped,
            "tessera_container_timeslice_unavailable{container=\"batch\"}"
        ),
        Some(1.0),
        "{scraped}"
    );
    assert_eq!(
        sample(
            &scraped,
            "tessera_container_timeslice_microseconds{container=\"batch\"}"
        ),
        Some(0.0)
    );
    assert!(batch.try_status().is_none(), "the trainer stopped");
    batch.kill();
}
