//! `controld cdi`: one CDI device per container, with the region, the library and the board
//! (read-only for offline containers) mounted and the variables set.

mod support;

use serde_json::Value;
use support::Node;

#[test]
fn cdi_names_a_device_per_container() {
    let mut node = Node::new("cdi");
    node.start(None);
    node.ctl_ok(&[
        "container",
        "add",
        "web",
        "--memory",
        "4GiB",
        "--compute",
        "burst:30",
    ]);
    node.ctl_ok(&["container", "add", "batch", "--priority", "offline"]);
    let out = node.ctl_ok(&["cdi"]);
    let spec: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(spec["kind"], "tessera.dev/container");
    assert_eq!(spec["cdiVersion"], "0.6.0");
    let devices = spec["devices"].as_array().unwrap();
    let names: Vec<&str> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["batch", "web"]);
    let board = node.state_dir().join("board").display().to_string();
    for (device, name, board_option) in [(&devices[0], "batch", "ro"), (&devices[1], "web", "rw")] {
        let region = node.region(name).display().to_string();
        let edits = &device["containerEdits"];
        let env: Vec<&str> = edits["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e.as_str().unwrap())
            .collect();
        assert_eq!(
            env,
            [
                format!("TESSERA_REGION={region}"),
                "LD_PRELOAD=/usr/lib/tessera/libtessera.so".to_string()
            ]
        );
        let mounts = edits["mounts"].as_array().unwrap();
        let find = |path: &str| {
            mounts
                .iter()
                .find(|m| m["containerPath"] == path)
                .unwrap_or_else(|| panic!("{name}: no mount at {path}: {mounts:?}"))
        };
        assert_eq!(find(&region)["hostPath"], region.as_str());
        assert_eq!(find(&region)["options"][1], "rw");
        let library = find("/usr/lib/tessera/libtessera.so");
        assert!(std::path::Path::new(library["hostPath"].as_str().unwrap()).is_file());
        assert_eq!(library["options"][1], "ro");
        assert_eq!(find(&board)["options"][1], board_option, "{name}");
    }
    // --output writes the same spec.
    let file = node.dir.path().join("tessera.json");
    node.ctl_ok(&["cdi", "--output", file.to_str().unwrap()]);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written, spec);
}
