//! What the plugin tests share: a simulated node of two GPUs with controld running on it,
//! the fake kubelet and the fake API server, and the real `tessera-k8s device-plugin`
//! between them.

#![allow(dead_code)]

/// The fake API server is the simulator's.
pub mod fake_api {
    pub use tessera_k8s::sim::api::*;
}
pub mod dra;
pub mod fake_kubelet;

use fake_api::FakeApi;
use fake_kubelet::FakeKubelet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tessera_k8s::controld::Controld;
use tessera_tests::{artifacts, cargo, cargo_build, workspace_root, SimNode};

pub const GIB: u64 = 1 << 30;
pub const NODE: &str = "node-a";

/// The `controld` of this build.
pub fn controld_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let a = artifacts();
            let mut build = Command::new(cargo());
            build
                .current_dir(workspace_root())
                .args(["build", "-p", "tessera-controld"]);
            cargo_build(&mut build, &a.profile, "controld");
            a.profile_dir.join("controld")
        })
        .clone()
}

/// A fresh directory, removed on drop. Short, because Unix socket paths are.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tk-{what}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child killed on drop.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The node under test.
pub struct Cluster {
    pub sim: SimNode,
    pub dir: TempDir,
    pub api: FakeApi,
    pub kubelet: FakeKubelet,
    pub controld: Controld,
    daemon: Process,
    plugin: Option<Process>,
    plugin_runs: u32,
    extra_args: Vec<String>,
}

impl Cluster {
    /// Two A100-40GB, controld, the fakes and the plugin (registered).
    pub async fn start(what: &str) -> Cluster {
        Cluster::start_with(what, &[]).await
    }

    /// Like [`Cluster::start`], with more arguments for the plugin.
    pub async fn start_with(what: &str, extra_args: &[&str]) -> Cluster {
        let dir = TempDir::new(what);
        let faults = dir.0.join("faults");
        let sim = SimNode::new(
            "A100-40GB,A100-40GB",
            &[(simgpu::config::ENV_FAULTS, faults.to_str().unwrap())],
        );
        let state = dir.0.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let controld_bin = tokio::task::spawn_blocking(controld_binary).await.unwrap();
        let mut cmd = sim.command(&controld_bin);
        cmd.env_remove("TESSERA_STATE_DIR")
            .args(["run", "--state-dir"])
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("controld.log")).unwrap());
        let daemon = Process(cmd.spawn().expect("start controld"));
        let controld = Controld::new(&state);
        wait_until(Duration::from_secs(20), "controld answers", || async {
            controld.list().await.is_ok()
        })
        .await;
        let api = FakeApi::start().await;
        std::fs::write(dir.0.join("kubeconfig"), api.kubeconfig()).unwrap();
        let kubelet = FakeKubelet::start(&dir.0.join("dp"), &dir.0.join("pod-resources.sock"));
        let mut cluster = Cluster {
            sim,
            dir,
            api,
            kubelet,
            controld,
            daemon,
            plugin: None,
            plugin_runs: 0,
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
        };
        cluster.start_plugin().await;
        cluster
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.0.join("state")
    }

    pub fn faults(&self) -> PathBuf {
        self.dir.0.join("faults")
    }

    /// The plugin's log of its current run.
    pub fn plugin_log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join(format!("plugin-{}.log", self.plugin_runs)))
            .unwrap_or_default()
    }

    /// Starts the plugin and waits for both registrations.
    pub async fn start_plugin(&mut self) {
        let before = self.kubelet.registrations().len();
        self.plugin_runs += 1;
        let log =
            std::fs::File::create(self.dir.0.join(format!("plugin-{}.log", self.plugin_runs)))
                .unwrap();
        let mut cmd = self.sim.command(env!("CARGO_BIN_EXE_tessera-k8s"));
        cmd.env("KUBECONFIG", self.dir.0.join("kubeconfig"))
            .env("TESSERA_LOG", "debug")
            .env_remove("TESSERA_STATE_DIR")
            .args(["device-plugin", "--kubelet-dir"])
            .arg(&self.kubelet.dir)
            .arg("--state-dir")
            .arg(self.state_dir())
            .arg("--pod-resources-socket")
            .arg(&self.kubelet.pod_resources)
            .args(["--node-name", NODE])
            .arg("--library")
            .arg(&artifacts().libtessera)
            .arg("--dev-dir")
            .arg(self.dir.0.join("dev"))
            .args(["--health-interval-ms", "100"])
            .args(["--reconcile-interval-ms", "200"])
            .args(["--publish-interval-ms", "500"])
            .args(&self.extra_args)
            .stdout(Stdio::null())
            .stderr(log);
        self.plugin = Some(Process(cmd.spawn().expect("start tessera-k8s")));
        self.kubelet
            .wait_registrations(before + 2, Duration::from_secs(60))
            .await;
    }

    /// Kills the plugin (SIGKILL: nothing of it runs on).
    pub fn kill_plugin(&mut self) {
        self.plugin = None;
    }

    /// controld's containers of pods, by name.
    pub async fn containers(&self) -> Vec<tessera_controld::state::ContainerInfo> {
        self.controld
            .list()
            .await
            .unwrap()
            .into_iter()
            .filter(|c| tessera_k8s::ids::is_plugin_container(c.spec.name.as_str()))
            .collect()
    }
}

/// Polls `check` every 20 ms until it holds; panics after `timeout`. Returns how long it took.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return start.elapsed();
        }
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The controld container an Allocate answer set up: the name in its region path.
pub fn container_of(
    answer: &tessera_k8s::proto::deviceplugin::ContainerAllocateResponse,
) -> String {
    let region = &answer.envs["TESSERA_REGION"];
    Path::new(region)
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}
