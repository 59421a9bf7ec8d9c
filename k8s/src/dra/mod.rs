//! The DRA driver: Tessera's shares through Kubernetes Dynamic Resource Allocation
//! (`resource.k8s.io/v1`), the other way to run it on a node, in place of the device plugin
//! (one mode per cluster).
//!
//! - [`slice`] publishes the node's cards as one ResourceSlice: a device per card with
//!   consumable capacity ([`CORES`], [`MEMORY`]) that many claims share.
//! - [`registration`] serves the kubelet's plugin registration and the DRA service on their
//!   Unix sockets.
//! - [`claim`] reads what the scheduler wrote into a ResourceClaim: the card, the capacity
//!   consumed, and the opaque parameters of [`DRIVER`].
//! - [`prepare`] answers NodePrepareResources and NodeUnprepareResources: a controld container
//!   and a CDI spec per allocated share, made as the device plugin makes them.

pub mod claim;
pub mod prepare;
pub mod registration;
pub mod slice;

use crate::cards::{Card, Cards};
use crate::controld::Controld;
use crate::plugin::HostPaths;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The driver's name: in the ResourceSlice, the DeviceClass's selector, the allocation
/// results and the registration.
pub const DRIVER: &str = "gpu.tessera.dev";
/// The consumable capacity of GPU time: percent of a card, 100 per card.
pub const CORES: &str = "cores";
/// The consumable capacity of GPU memory, in bytes.
pub const MEMORY: &str = "memory";
/// The granularity of memory requests (the ResourceSlice's step).
pub const MEMORY_STEP: u64 = 1 << 20;
/// The plugin type the kubelet's plugin watcher hands to its DRA handler.
pub const PLUGIN_TYPE: &str = "DRAPlugin";
/// The gRPC services the driver serves, as the registration lists them
/// (`<package>.<service>`).
pub const SERVICES: [&str; 1] = ["v1.DRAPlugin"];
/// The kubelet's directory of registration sockets, which its plugin watcher scans.
pub const DEFAULT_REGISTRY_DIR: &str = "/var/lib/kubelet/plugins_registry";
/// The kubelet's directory of plugin data; the driver's socket is in its own folder there.
pub const DEFAULT_PLUGINS_DIR: &str = "/var/lib/kubelet/plugins";
/// The DRA service's socket in the driver's folder.
pub const DRA_SOCKET: &str = "dra.sock";
/// What every controld container of a claim is called first.
pub const CONTAINER_PREFIX: &str = "claim-";

/// The driver's folder in the kubelet's plugin directory `plugins_dir`.
pub fn plugin_dir(plugins_dir: &Path) -> PathBuf {
    plugins_dir.join(DRIVER)
}

/// The registration socket's name: the plugin watcher reads any socket in its directory;
/// `<driver>-reg.sock` is the convention that tells whose it is.
pub fn registration_socket() -> String {
    format!("{DRIVER}-reg.sock")
}

/// How the driver is set up (from the command line).
#[derive(Debug, Clone)]
pub struct Config {
    /// The kubelet's plugins_registry directory.
    pub registry_dir: PathBuf,
    /// The driver's own folder, where [`DRA_SOCKET`] is.
    pub plugin_dir: PathBuf,
    /// This node's name: the ResourceSlice's node and pool.
    pub node_name: String,
    /// How often the ResourceSlice is applied again (the kubelet deletes a node's slices
    /// when its driver goes away; this brings them back).
    pub publish_interval: Duration,
    /// The shared containers' host paths; the CDI dir is required.
    pub host: HostPaths,
}

impl Config {
    /// The DRA service's socket.
    pub fn dra_socket(&self) -> PathBuf {
        self.plugin_dir.join(DRA_SOCKET)
    }

    /// The pool of this node's devices: one per node, named after it.
    pub fn pool(&self) -> &str {
        &self.node_name
    }

    /// Where the CDI specs go.
    pub fn cdi_dir(&self) -> &Path {
        self.host
            .cdi_dir
            .as_deref()
            .expect("the DRA driver's command line requires a CDI dir")
    }
}

/// Everything the driver's tasks share.
pub struct Driver {
    /// The setup.
    pub config: Config,
    /// The node's cards, by NVML index.
    pub cards: Vec<Card>,
    /// The daemon.
    pub controld: Controld,
    /// The API server.
    pub kube: kube::Client,
    /// Held through each prepare and unprepare, so that the memory left on a card is
    /// counted against one claim at a time.
    pub busy: tokio::sync::Mutex<()>,
}

/// The device name of a card in the ResourceSlice and the allocation results.
pub fn device_name(card: &Card) -> String {
    format!("gpu-{}", card.index)
}

/// Runs the driver until the process is stopped.
pub async fn run(config: Config, kube: kube::Client) -> Result<(), String> {
    let cards = tokio::task::spawn_blocking(Cards::load)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot list the node's GPUs: {e}"))?;
    if cards.list.is_empty() {
        return Err("NVML lists no GPU on this node; nothing to offer".into());
    }
    crate::plugin::allocate::prepare_files(&config.host).map_err(|e| {
        format!(
            "cannot write the driver's files under {}: {e}",
            config.host.own_dir().display()
        )
    })?;
    for dir in [&config.plugin_dir, &config.registry_dir] {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    }
    for card in &cards.list {
        tracing::info!(
            "GPU {}: {} {} ({} GiB) as device {}",
            card.index,
            card.uuid,
            card.model,
            card.memory >> 30,
            device_name(card)
        );
    }
    let driver = Arc::new(Driver {
        controld: Controld::new(&config.host.state_dir),
        config,
        cards: cards.list.clone(),
        kube,
        busy: tokio::sync::Mutex::new(()),
    });
    tokio::spawn(slice::run(driver.clone()));
    registration::run(driver).await;
    Ok(())
}
