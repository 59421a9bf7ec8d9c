//! A real OCI runtime runs a container from the Allocate answer (criterion 3): `runc` starts
//! `gpuload` in a rootfs assembled from the answer's env, mounts and device nodes, with the
//! node's driver (simgpu's libcuda.so.1, as the NVIDIA runtime would add the real one).
//! Inside, `gpuload info` reports the requested memory as the total and `gpuload alloc`
//! stops at it. Needs root and runc (installed by `.ci/run`); elsewhere it says why it did
//! not run.

mod support;

use serde_json::{json, Value};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::fake_kubelet::PodAsk;
use support::{Cluster, GIB, NODE};
use tessera_k8s::ids::DeviceId;
use tessera_k8s::proto::deviceplugin::{ContainerAllocateResponse, DeviceSpec, Mount};
use tessera_tests::{artifacts, run_with_timeout, stdout_json};

const MIB: u64 = 1 << 20;

/// Why runc cannot run containers here, if it cannot.
fn runc_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some(
            "runc needs root to make namespaces and mounts; this test runs as another user".into(),
        );
    }
    match Command::new("runc").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("runc is not installed (`apt-get install runc`; .ci/run does)".into()),
    }
}

/// A bundle: a rootfs with the host's programs and libraries read-only, the node's driver,
/// and everything the Allocate answer says.
fn bundle(
    cluster: &Cluster,
    dir: &Path,
    answer: &ContainerAllocateResponse,
    args: &[&str],
) -> PathBuf {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).unwrap();
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]}),
    ];
    let bind = |host: &Path, container: &str, read_only: bool| {
        let mut options = vec!["rbind"];
        if read_only {
            options.push("ro");
        }
        json!({"destination": container, "type": "bind", "source": host, "options": options})
    };
    // The image: the host's system directories (symbolic links as links).
    for system in [
        "/bin",
        "/lib",
        "/lib64",
        "/sbin",
        "/usr/bin",
        "/usr/lib",
        "/usr/lib64",
        "/usr/sbin",
    ] {
        let host = Path::new(system);
        let inside = rootfs.join(&system[1..]);
        match std::fs::symlink_metadata(host) {
            Ok(m) if m.file_type().is_symlink() => {
                let _ = std::os::unix::fs::symlink(std::fs::read_link(host).unwrap(), &inside);
            }
            Ok(m) if m.is_dir() => {
                std::fs::create_dir_all(&inside).unwrap();
                mounts.push(bind(host, system, true));
            }
            _ => {}
        }
    }
    // The workload and the node's driver.
    mounts.push(bind(&artifacts().gpuload, "/opt/bin/gpuload", true));
    for lib in ["libcuda.so.1", "libnvidia-ml.so.1"] {
        let real = std::fs::canonicalize(artifacts().lib_dir.join(lib)).unwrap();
        mounts.push(bind(&real, &format!("/opt/driver/{lib}"), true));
    }
    mounts.push(bind(cluster.sim.state(), "/run/simgpu/node.state", false));
    // What the device plugin answered.
    for m in &answer.mounts {
        mounts.push(bind(
            Path::new(&m.host_path),
            &m.container_path,
            m.read_only,
        ));
    }
    let mut env = vec![
        "PATH=/opt/bin:/usr/bin:/bin".to_string(),
        "LD_LIBRARY_PATH=/opt/driver".to_string(),
        "SIMGPU_STATE=/run/simgpu/node.state".to_string(),
        "SIMGPU_DEVICES=A100-40GB,A100-40GB".to_string(),
    ];
    env.extend(answer.envs.iter().map(|(k, v)| format!("{k}={v}")));
    let mut devices = Vec::new();
    let mut allowed = vec![json!({"allow": false, "access": "rwm"})];
    for d in &answer.devices {
        let meta = std::fs::metadata(&d.host_path).unwrap();
        assert!(meta.file_type().is_char_device(), "{}", d.host_path);
        let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
        devices.push(json!({"path": d.container_path, "type": "c", "major": major, "minor": minor, "fileMode": 0o666, "uid": 0, "gid": 0}));
        allowed.push(json!({"allow": true, "type": "c", "major": major, "minor": minor, "access": d.permissions}));
    }
    let config = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": env,
            "cwd": "/",
            "noNewPrivileges": true,
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": "pod",
        "mounts": mounts,
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "devices": devices,
            "resources": {"devices": allowed},
        },
    });
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&config).unwrap(),
    )
    .unwrap();
    dir.to_path_buf()
}

/// `runc run` of a bundle.
fn runc_output(cluster: &Cluster, bundle: &Path, id: &str) -> std::process::Output {
    let mut cmd = Command::new("runc");
    cmd.arg("--root")
        .arg(cluster.dir.0.join("runc"))
        .args(["run", "--bundle"])
        .arg(bundle)
        .arg(id);
    run_with_timeout(&mut cmd, Duration::from_secs(120))
}

/// `runc run` of a bundle; its stdout as JSON.
fn runc(cluster: &Cluster, bundle: &Path, id: &str) -> Value {
    stdout_json(&runc_output(cluster, bundle, id), &format!("runc run {id}"))
}

/// A character device node, as the NVIDIA driver makes them.
fn mknod(path: &Path, major: u32, minor: u32) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; mknod only creates a file.
    let rc = unsafe {
        libc::mknod(
            c_path.as_ptr(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    assert_eq!(
        rc,
        0,
        "mknod {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Whether runc can run here; if not, says why (and fails in CI, which must run it).
fn runc_usable(test: &str) -> bool {
    let Some(why) = runc_missing() else {
        return true;
    };
    // CI runs as root with runc installed by .ci/run: there it must run.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(!(root && std::env::var_os("CI").is_some()), "{why}");
    eprintln!("{test}: not run: {why}");
    false
}

/// A CDI spec's edits of one device, as an Allocate answer would carry them.
fn cdi_edits(spec: &Value, device: &str) -> ContainerAllocateResponse {
    let device = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == device)
        .unwrap_or_else(|| panic!("no device {device} in {spec}"));
    let edits = &device["containerEdits"];
    let mut answer = ContainerAllocateResponse::default();
    for e in edits["env"].as_array().unwrap() {
        let (k, v) = e.as_str().unwrap().split_once('=').unwrap();
        answer.envs.insert(k.into(), v.into());
    }
    for m in edits["mounts"].as_array().unwrap() {
        answer.mounts.push(Mount {
            host_path: m["hostPath"].as_str().unwrap().into(),
            container_path: m["containerPath"].as_str().unwrap().into(),
            read_only: m["options"].as_array().unwrap().iter().any(|o| o == "ro"),
        });
    }
    for d in edits["deviceNodes"].as_array().unwrap() {
        answer.devices.push(DeviceSpec {
            host_path: d["hostPath"].as_str().unwrap().into(),
            container_path: d["path"].as_str().unwrap().into(),
            permissions: d["permissions"].as_str().unwrap().into(),
        });
    }
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runc_runs_containers_from_the_plugins_cdi_specs() {
    if !runc_usable("runc_runs_containers_from_the_plugins_cdi_specs") {
        return;
    }
    let cdi = std::env::temp_dir().join(format!("tk-cdi-{}", std::process::id()));
    let cluster = Cluster::start_with("cdi", &["--cdi-dir", cdi.to_str().unwrap()]).await;
    for (pod, priority, board) in [
        ("online", "online", "writable"),
        ("offline", "offline", "read-only"),
    ] {
        cluster
            .api
            .put_pod("ml", pod, NODE, &[("tessera.dev/priority", priority)]);
        let admitted = cluster
            .kubelet
            .run_pod(&PodAsk {
                namespace: "ml".into(),
                name: pod.into(),
                core: 20,
                memory_gib: 3,
            })
            .await
            .unwrap();
        // The answer names the CDI device only; PreStart wrote its spec.
        let name = tessera_k8s::ids::container_name(&admitted.core_ids);
        let cdi_names: Vec<&str> = admitted
            .core
            .cdi_devices
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(cdi_names, [format!("tessera.dev/container={name}")]);
        assert!(admitted.core.envs.is_empty() && admitted.core.mounts.is_empty());
        let file = cdi.join(format!("tessera-{name}.json"));
        let spec: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(spec["kind"], "tessera.dev/container");
        let edits = cdi_edits(&spec, &name);
        let index = cluster
            .containers()
            .await
            .iter()
            .find(|c| c.spec.name.as_str() == name)
            .unwrap()
            .spec
            .gpus
            .as_slice()[0];
        let script = format!(
            "if [ -w /run/tessera/board ]; then echo board=writable >&2; else echo board=read-only >&2; fi; exec gpuload info --device {index}"
        );
        let dir = cluster.dir.0.join(format!("b-{pod}"));
        let b = bundle(&cluster, &dir, &edits, &["/bin/sh", "-c", &script]);
        let out = runc_output(&cluster, &b, &format!("tk-{pod}-{}", std::process::id()));
        let report = stdout_json(&out, "gpuload info in runc");
        assert_eq!(report["total"].as_u64(), Some(3 * GIB), "{report}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("board={board}")),
            "{pod}: {stderr}"
        );
        // The pod goes: its spec with it.
        cluster.api.delete_pod("ml", pod);
        cluster.kubelet.remove_pod("ml", pod);
        support::wait_until(Duration::from_secs(5), "the CDI spec removed", || async {
            !file.exists()
        })
        .await;
    }
    let _ = std::fs::remove_dir_all(&cdi);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runc_runs_a_container_from_the_allocate_answer() {
    if !runc_usable("runc_runs_a_container_from_the_allocate_answer") {
        return;
    }
    let cluster = Cluster::start("runc").await;
    // The node's device nodes (the plugin hands out those that exist).
    let dev = cluster.dir.0.join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    mknod(&dev.join("nvidiactl"), 195, 255);
    mknod(&dev.join("nvidia0"), 195, 0);
    mknod(&dev.join("nvidia1"), 195, 1);

    cluster
        .api
        .put_pod("ml", "job", NODE, &[("tessera.dev/compute", "burst")]);
    let admitted = cluster
        .kubelet
        .run_pod(&PodAsk {
            namespace: "ml".into(),
            name: "job".into(),
            core: 30,
            memory_gib: 4,
        })
        .await
        .unwrap();
    let uuid = DeviceId::parse(&admitted.core_ids[0]).unwrap().uuid;
    let gpus = cluster.controld.status().await.unwrap().gpus;
    let index = gpus.iter().find(|g| g.uuid == uuid).unwrap().index;
    let answer = &admitted.core;
    let devices: Vec<&str> = answer
        .devices
        .iter()
        .map(|d| d.container_path.as_str())
        .collect();
    assert_eq!(
        devices,
        ["/dev/nvidiactl".to_string(), format!("/dev/nvidia{index}")]
    );

    let info = bundle(&cluster, &cluster.dir.0.join("b-info"), answer, &[
        "/bin/sh",
        "-c",
        &format!("test -c /dev/nvidia{index} && test -s /etc/ld.so.preload && exec gpuload info --device {index}"),
    ]);
    let report = runc(&cluster, &info, &format!("tk-info-{}", std::process::id()));
    assert_eq!(report["total"].as_u64(), Some(4 * GIB), "{report}");

    let alloc = bundle(
        &cluster,
        &cluster.dir.0.join("b-alloc"),
        answer,
        &["gpuload", "alloc", "--device", &index.to_string()],
    );
    let report = runc(
        &cluster,
        &alloc,
        &format!("tk-alloc-{}", std::process::id()),
    );
    assert_eq!(report["error"], "CUDA_ERROR_OUT_OF_MEMORY", "{report}");
    let total = report["total"].as_u64().unwrap();
    let held = report["bytes"].as_u64().unwrap() + total - report["context_free"].as_u64().unwrap();
    assert_eq!(total, 4 * GIB, "{report}");
    assert!(held <= 4 * GIB && 4 * GIB - held < 2 * MIB, "{report}");
}
