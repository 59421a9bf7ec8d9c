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
    assert_eq!(spec["cdiVersion"], "0.5.0");
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

/// Why podman cannot run containers here, if it cannot.
fn podman_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("podman reads /var/run/cdi and makes namespaces as root; this test runs as another user".into());
    }
    match std::process::Command::new("podman")
        .arg("--version")
        .output()
    {
        Ok(out) if out.status.success() => None,
        _ => Some("podman is not installed (`apt-get install podman`)".into()),
    }
}

/// Removes a file on drop.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn podman_runs_a_tessera_container_from_the_cdi_spec() {
    if let Some(why) = podman_missing() {
        eprintln!("podman_runs_a_tessera_container_from_the_cdi_spec: not run: {why}");
        return;
    }
    use tessera_tests::{artifacts, run_with_timeout, stdout_json};
    let mut node = Node::new("podman");
    node.start(None);
    // A name of this run's own: podman reads every spec in /var/run/cdi, and two runs of
    // this test at once would otherwise declare the same device twice.
    let job = format!("job-{}", std::process::id());
    node.ctl_ok(&["container", "add", &job, "--memory", "2GiB", "--gpus", "0"]);
    std::fs::create_dir_all("/var/run/cdi").unwrap();
    let spec = Removed(std::path::PathBuf::from(format!(
        "/var/run/cdi/tessera-test-{}.json",
        std::process::id()
    )));
    node.ctl_ok(&["cdi", "--output", spec.0.to_str().unwrap()]);
    // An image of the host's programs: links into /usr, whose program and library
    // directories are mounted read-only (the rest stays writable, as in an image).
    let rootfs = node.dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr")).unwrap();
    for dir in ["bin", "lib", "lib64", "sbin"] {
        std::os::unix::fs::symlink(format!("usr/{dir}"), rootfs.join(dir)).unwrap();
    }
    // The directory of the C library, like /usr/lib/x86_64-linux-gnu.
    let multiarch = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .into_iter()
    .find(|d| std::path::Path::new(d).join("libc.so.6").exists())
    .expect("a C library under /usr/lib");
    let real = |lib: &str| std::fs::canonicalize(artifacts().lib_dir.join(lib)).unwrap();
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new("podman");
        cmd.args(["run", "--rm", "--network", "none"])
            // Limits below the host's: a sandbox may refuse to raise them.
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1000:1000",
            ])
            .args([
                "-v",
                "/usr/bin:/usr/bin:ro",
                "-v",
                "/usr/lib64:/usr/lib64:ro",
            ])
            .arg("-v")
            .arg(format!("{multiarch}:{multiarch}:ro"))
            .arg("-v")
            .arg(format!(
                "{}:/opt/bin/gpuload:ro",
                artifacts().gpuload.display()
            ))
            .arg("-v")
            .arg(format!(
                "{}:/opt/driver/libcuda.so.1:ro",
                real("libcuda.so.1").display()
            ))
            .arg("-v")
            .arg(format!(
                "{}:/opt/driver/libnvidia-ml.so.1:ro",
                real("libnvidia-ml.so.1").display()
            ))
            .arg("-v")
            .arg(format!(
                "{}:/run/simgpu/node.state",
                node.sim.state().display()
            ))
            .args([
                "-e",
                "LD_LIBRARY_PATH=/opt/driver",
                "-e",
                "SIMGPU_STATE=/run/simgpu/node.state",
            ])
            .args(["-e", "SIMGPU_DEVICES=A100-40GB"])
            .arg("--device")
            .arg(format!("tessera.dev/container={job}"))
            .arg("--rootfs")
            .arg(&rootfs)
            .arg("/opt/bin/gpuload")
            .args(args);
        run_with_timeout(&mut cmd, std::time::Duration::from_secs(180))
    };
    let info = stdout_json(&run(&["info"]), "gpuload info under podman");
    assert_eq!(info["total"].as_u64(), Some(2 << 30), "{info}");
    let alloc = stdout_json(&run(&["alloc"]), "gpuload alloc under podman");
    assert_eq!(alloc["error"], "CUDA_ERROR_OUT_OF_MEMORY", "{alloc}");
    let total = alloc["total"].as_u64().unwrap();
    let held = alloc["bytes"].as_u64().unwrap() + total - alloc["context_free"].as_u64().unwrap();
    assert!(held <= 2 << 30 && (2 << 30) - held < 2 << 20, "{alloc}");
}
