//! The DRA driver's node: a simulated node of two GPUs with controld, the fake API server,
//! the real `tessera-k8s dra`, and a fake kubelet that speaks the real protocols over Unix
//! sockets: it finds the registration socket in its plugins_registry directory, calls
//! GetInfo and NotifyRegistrationStatus as the plugin watcher does, then calls the DRA
//! service at the endpoint the driver gave, as the kubelet does around a pod's start and end.

use super::fake_api::FakeApi;
use super::{controld_binary, wait_until, Process, TempDir, NODE};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tessera_k8s::controld::Controld;
use tessera_k8s::proto::dra::dra_plugin_client::DraPluginClient;
use tessera_k8s::proto::dra::{
    Claim, NodePrepareResourceResponse, NodePrepareResourcesRequest, NodeUnprepareResourceResponse,
    NodeUnprepareResourcesRequest,
};
use tessera_k8s::proto::pluginregistration::registration_client::RegistrationClient;
use tessera_k8s::proto::pluginregistration::{InfoRequest, PluginInfo, RegistrationStatus};
use tessera_tests::{artifacts, SimNode};
use tonic::transport::Channel;

/// What the kubelet's DRA handler accepts: the v1 service.
const KUBELET_SERVICE: &str = "v1.DRAPlugin";

/// The fake kubelet, once the driver registered.
pub struct FakeDraKubelet {
    /// The registration socket it found.
    pub registration_socket: PathBuf,
    /// What GetInfo answered.
    pub info: PluginInfo,
    client: DraPluginClient<Channel>,
}

impl FakeDraKubelet {
    /// Waits for a socket in `registry` and registers the driver behind it.
    pub async fn register(registry: &Path, timeout: Duration) -> FakeDraKubelet {
        let mut found = None;
        wait_until(timeout, "a registration socket", || {
            found = std::fs::read_dir(registry).ok().and_then(|entries| {
                entries
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| p.extension().is_some_and(|x| x == "sock"))
            });
            let done = found.is_some();
            async move { done }
        })
        .await;
        let registration_socket = found.unwrap();
        let channel = tessera_k8s::uds::connect(&registration_socket)
            .await
            .expect("connect to the registration socket");
        let mut registration = RegistrationClient::new(channel);
        let info = registration
            .get_info(InfoRequest {})
            .await
            .expect("GetInfo")
            .into_inner();
        // The plugin watcher's checks: a DRA plugin, a service the kubelet speaks, a socket.
        let refusal = if info.r#type != "DRAPlugin" {
            Some(format!("plugin type {:?} is not DRAPlugin", info.r#type))
        } else if !info.supported_versions.iter().any(|v| v == KUBELET_SERVICE) {
            Some(format!(
                "none of {:?} is {KUBELET_SERVICE}",
                info.supported_versions
            ))
        } else if !Path::new(&info.endpoint).is_absolute() {
            Some(format!(
                "endpoint {:?} is not an absolute path",
                info.endpoint
            ))
        } else {
            None
        };
        registration
            .notify_registration_status(RegistrationStatus {
                plugin_registered: refusal.is_none(),
                error: refusal.clone().unwrap_or_default(),
            })
            .await
            .expect("NotifyRegistrationStatus");
        if let Some(why) = refusal {
            panic!("the fake kubelet refused the driver: {why}");
        }
        let channel = tessera_k8s::uds::connect(Path::new(&info.endpoint))
            .await
            .expect("connect to the DRA endpoint");
        FakeDraKubelet {
            registration_socket,
            info,
            client: DraPluginClient::new(channel),
        }
    }

    /// NodePrepareResources of `claims`; the answers by claim UID, checked to cover them all.
    pub async fn prepare(
        &self,
        claims: &[Claim],
    ) -> std::collections::HashMap<String, NodePrepareResourceResponse> {
        let answer = self
            .client
            .clone()
            .node_prepare_resources(NodePrepareResourcesRequest {
                claims: claims.to_vec(),
            })
            .await
            .expect("NodePrepareResources answers")
            .into_inner()
            .claims;
        for claim in claims {
            assert!(answer.contains_key(&claim.uid), "no answer for {claim:?}");
        }
        answer
    }

    /// NodeUnprepareResources of `claims`; the answers by claim UID.
    pub async fn unprepare(
        &self,
        claims: &[Claim],
    ) -> std::collections::HashMap<String, NodeUnprepareResourceResponse> {
        let answer = self
            .client
            .clone()
            .node_unprepare_resources(NodeUnprepareResourcesRequest {
                claims: claims.to_vec(),
            })
            .await
            .expect("NodeUnprepareResources answers")
            .into_inner()
            .claims;
        for claim in claims {
            assert!(answer.contains_key(&claim.uid), "no answer for {claim:?}");
        }
        answer
    }
}

/// A claim as the kubelet names it.
pub fn claim(namespace: &str, name: &str, uid: &str) -> Claim {
    Claim {
        namespace: namespace.into(),
        uid: uid.into(),
        name: name.into(),
    }
}

/// The node under test, in DRA mode.
pub struct DraNode {
    pub sim: SimNode,
    pub dir: TempDir,
    pub api: FakeApi,
    pub controld: Controld,
    pub kubelet: FakeDraKubelet,
    daemon: Process,
    driver: Process,
}

impl DraNode {
    /// Two A100-40GB, controld, the fake API server, the driver, registered.
    pub async fn start(what: &str) -> DraNode {
        let dir = TempDir::new(what);
        let sim = SimNode::new("A100-40GB,A100-40GB", &[]);
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
        let registry = dir.0.join("registry");
        std::fs::create_dir_all(&registry).unwrap();
        let mut cmd = sim.command(env!("CARGO_BIN_EXE_tessera-k8s"));
        cmd.env("KUBECONFIG", dir.0.join("kubeconfig"))
            .env("TESSERA_LOG", "debug")
            .env_remove("TESSERA_STATE_DIR")
            .args(["dra", "--registry-dir"])
            .arg(&registry)
            .arg("--plugins-dir")
            .arg(dir.0.join("plugins"))
            .arg("--state-dir")
            .arg(&state)
            .args(["--node-name", NODE])
            .arg("--library")
            .arg(&artifacts().libtessera)
            .arg("--dev-dir")
            .arg(dir.0.join("dev"))
            .arg("--cdi-dir")
            .arg(dir.0.join("cdi"))
            .args(["--publish-interval-ms", "300"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("driver.log")).unwrap());
        let driver = Process(cmd.spawn().expect("start tessera-k8s dra"));
        let kubelet = FakeDraKubelet::register(&registry, Duration::from_secs(60)).await;
        DraNode {
            sim,
            dir,
            api,
            controld,
            kubelet,
            daemon,
            driver,
        }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.0.join("state")
    }

    pub fn cdi_dir(&self) -> PathBuf {
        self.dir.0.join("cdi")
    }

    /// The driver's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("driver.log")).unwrap_or_default()
    }

    /// Whether the driver is still running.
    pub fn driver_running(&mut self) -> bool {
        matches!(self.driver.0.try_wait(), Ok(None))
    }

    /// controld's containers of claims.
    pub async fn containers(&self) -> Vec<tessera_controld::state::ContainerInfo> {
        self.controld
            .list()
            .await
            .unwrap()
            .into_iter()
            .filter(|c| tessera_k8s::dra::prepare::is_claim_container(c.spec.name.as_str()))
            .collect()
    }
}
