//! The command line: `tessera-k8s device-plugin` or `tessera-k8s dra` (the node side, one or
//! the other), `tessera-k8s extender` (the cluster side) and `tessera-k8s crd`.

use crate::plugin::{Config, HostPaths};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;
use tessera_region::env::LogLevel;

/// Where the node's `libtessera.so` is by default (where `deploy/node.yaml` installs it).
pub const DEFAULT_LIBRARY: &str = "/usr/local/lib/tessera/libtessera.so";

/// Tessera on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "tessera-k8s", version, about)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serves tessera.dev/gpu-core and tessera.dev/gpu-memory to the kubelet and keeps the
    /// node's GPU objects.
    DevicePlugin(PluginArgs),
    /// Serves the kube-scheduler extender: filter, prioritize, bind and preempt over HTTP.
    Extender(ExtenderArgs),
    /// Serves Tessera's shares as a Kubernetes DRA driver (resource.k8s.io/v1): publishes the
    /// node's ResourceSlice and prepares the claims the kubelet asks for. In place of
    /// device-plugin, not beside it.
    Dra(DraArgs),
    /// Prints the GPU custom resource definition (deploy/crd.yaml).
    Crd,
}

#[derive(Debug, clap::Args)]
struct DraArgs {
    /// The kubelet's plugin registration directory.
    #[arg(long, default_value = crate::dra::DEFAULT_REGISTRY_DIR)]
    registry_dir: PathBuf,
    /// The kubelet's plugin directory; the driver's socket goes in its folder there.
    #[arg(long, default_value = crate::dra::DEFAULT_PLUGINS_DIR)]
    plugins_dir: PathBuf,
    /// controld's state dir: its control socket and the regions.
    #[arg(long, env = tessera_region::env::STATE_DIR, default_value = tessera_controld::daemon::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// This node's name (the downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// libtessera.so on the host, mounted read-only into each shared container.
    #[arg(long, default_value = DEFAULT_LIBRARY)]
    library: PathBuf,
    /// Where the host's NVIDIA device nodes are.
    #[arg(long, default_value = "/dev")]
    dev_dir: PathBuf,
    /// Where the container runtime reads CDI specs: one is written per prepared device.
    #[arg(long, default_value = "/var/run/cdi")]
    cdi_dir: PathBuf,
    /// How often the ResourceSlice is applied again, in milliseconds.
    #[arg(long, default_value_t = 30000)]
    publish_interval_ms: u64,
}

#[derive(Debug, clap::Args)]
struct ExtenderArgs {
    /// Where to listen, like 127.0.0.1:8888 (the scheduler's urlPrefix points here).
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// Where to serve the probes alone (GET /healthz, /livez), like 0.0.0.0:8889, so that
    /// the kubelet reaches them while the verbs stay on a local address.
    #[arg(long)]
    health_listen: Option<std::net::SocketAddr>,
    /// A YAML file with the cluster's default placement per priority and the assume TTL.
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct PluginArgs {
    /// The kubelet's device-plugin directory.
    #[arg(long, default_value = "/var/lib/kubelet/device-plugins")]
    kubelet_dir: PathBuf,
    /// controld's state dir: its control socket and the regions.
    #[arg(long, env = tessera_region::env::STATE_DIR, default_value = tessera_controld::daemon::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// The kubelet's pod-resources socket.
    #[arg(long, default_value = crate::podresources::DEFAULT_SOCKET)]
    pod_resources_socket: PathBuf,
    /// This node's name (the downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// libtessera.so on the host, mounted read-only into each shared container.
    #[arg(long, default_value = DEFAULT_LIBRARY)]
    library: PathBuf,
    /// Where the host's NVIDIA device nodes are.
    #[arg(long, default_value = "/dev")]
    dev_dir: PathBuf,
    /// How often each card's health is checked, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    health_interval_ms: u64,
    /// How often pod-resources and controld are compared (teardown), in milliseconds.
    #[arg(long, default_value_t = 2000)]
    reconcile_interval_ms: u64,
    /// How often the GPU objects' status is refreshed, in milliseconds.
    #[arg(long, default_value_t = 10000)]
    publish_interval_ms: u64,
    /// Write a CDI spec per shared container here (like /var/run/cdi) and answer Allocate
    /// with its CDI device name, for runtimes with CDI enabled.
    #[arg(long)]
    cdi_dir: Option<PathBuf>,
}

/// A runtime for a command's tasks.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start: {e}"))
}

/// The API server, from the pod's service account or KUBECONFIG.
async fn kube_client() -> Result<kube::Client, String> {
    kube::Client::try_default().await.map_err(|e| {
        format!("cannot reach the API server: {e}; run in a pod with a service account, or set KUBECONFIG")
    })
}

/// Runs the command line; returns the exit code.
pub fn main() -> i32 {
    let args = Args::parse();
    match args.command {
        Command::Crd => {
            print!("{}", crate::gpu::crd_yaml());
            0
        }
        Command::Extender(a) => {
            tessera_controld::logging::init("tessera-k8s", LogLevel::Info);
            let result = (|| {
                let config = match &a.config {
                    Some(path) => {
                        crate::extender::policy::Config::load(path).map_err(|e| e.to_string())?
                    }
                    None => Default::default(),
                };
                runtime()?.block_on(async {
                    crate::extender::run(config, a.listen, a.health_listen, kube_client().await?)
                        .await
                })
            })();
            match result {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!("{e}");
                    1
                }
            }
        }
        Command::Dra(a) => {
            tessera_controld::logging::init("tessera-k8s", LogLevel::Info);
            let config = crate::dra::Config {
                registry_dir: a.registry_dir,
                plugin_dir: crate::dra::plugin_dir(&a.plugins_dir),
                node_name: a.node_name,
                publish_interval: Duration::from_millis(a.publish_interval_ms.max(1)),
                host: HostPaths {
                    state_dir: a.state_dir,
                    library: a.library,
                    dev_dir: a.dev_dir,
                    cdi_dir: Some(a.cdi_dir),
                },
            };
            let result = runtime().and_then(|runtime| {
                runtime.block_on(async { crate::dra::run(config, kube_client().await?).await })
            });
            match result {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!("{e}");
                    1
                }
            }
        }
        Command::DevicePlugin(a) => {
            tessera_controld::logging::init("tessera-k8s", LogLevel::Info);
            let config = Config {
                kubelet_dir: a.kubelet_dir,
                pod_resources_socket: a.pod_resources_socket,
                node_name: a.node_name,
                health_interval: Duration::from_millis(a.health_interval_ms.max(1)),
                reconcile_interval: Duration::from_millis(a.reconcile_interval_ms.max(1)),
                publish_interval: Duration::from_millis(a.publish_interval_ms.max(1)),
                host: HostPaths {
                    state_dir: a.state_dir,
                    library: a.library,
                    dev_dir: a.dev_dir,
                    cdi_dir: a.cdi_dir,
                },
            };
            let runtime = match runtime() {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("{e}");
                    return 1;
                }
            };
            let result =
                runtime.block_on(async { crate::plugin::run(config, kube_client().await?).await });
            match result {
                Ok(()) => 0,
                Err(e) => {
                    tracing::error!("{e}");
                    1
                }
            }
        }
    }
}
