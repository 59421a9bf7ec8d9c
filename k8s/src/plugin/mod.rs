//! The device plugin: `tessera.dev/gpu-core` and `tessera.dev/gpu-memory`, each served on its
//! own socket in the kubelet's device-plugin directory and registered with the kubelet.
//!
//! - [`registration`] serves the sockets and registers them, again whenever the kubelet
//!   restarts (its socket is recreated, or ours are gone).
//! - [`service`] answers the kubelet: ListAndWatch (health from NVML), GetPreferredAllocation
//!   ([`prefer`], on the card the scheduler recorded for the pod [`admitting`]), Allocate ([`allocate`]) and PreStartContainer ([`prestart`]), where the
//!   pod is found through the pod-resources API and controld creates the container.
//! - [`publish`] keeps this node's `GPU` objects ([`crate::gpu`]) up to date.
//! - [`reconcile`] removes the containers of pods that are gone and rebuilds the table of
//!   holders after a restart; [`resize`] follows the annotations of running pods.

pub mod admitting;
pub mod allocate;
pub mod cdi;
pub mod holders;
pub mod prefer;
pub mod prestart;
pub mod publish;
pub mod reconcile;
pub mod registration;
pub mod resize;
pub mod service;

use crate::cards::Cards;
use crate::controld::Controld;
use holders::Holders;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// How the plugin is set up (from the command line).
#[derive(Debug, Clone)]
pub struct Config {
    /// The kubelet's device-plugin directory: `kubelet.sock` and our sockets.
    pub kubelet_dir: PathBuf,
    /// The kubelet's pod-resources socket.
    pub pod_resources_socket: PathBuf,
    /// This node's name.
    pub node_name: String,
    /// How often NVML is asked whether each card is healthy.
    pub health_interval: Duration,
    /// How often pod-resources and controld are compared.
    pub reconcile_interval: Duration,
    /// How often the GPU objects are refreshed (they are also on every change).
    pub publish_interval: Duration,
    /// What the shared containers are given on the host.
    pub host: HostPaths,
}

/// The host paths a shared container's edits name: the same in device-plugin and DRA mode.
#[derive(Debug, Clone)]
pub struct HostPaths {
    /// controld's state dir: its socket and the regions.
    pub state_dir: PathBuf,
    /// `libtessera.so` on the host, mounted into each shared container.
    pub library: PathBuf,
    /// Where the host's device nodes are.
    pub dev_dir: PathBuf,
    /// Where to write CDI specs, when the runtime reads them: then Allocate answers name a
    /// CDI device instead of listing mounts (DRA answers always do).
    pub cdi_dir: Option<PathBuf>,
}

impl HostPaths {
    /// Tessera's own files in the state dir: the preload list, the board links.
    pub fn own_dir(&self) -> PathBuf {
        self.state_dir.join("k8s")
    }

    /// Where the board links are, one per shared container.
    pub fn boards_dir(&self) -> PathBuf {
        self.own_dir().join("boards")
    }

    /// The host path mounted as a container's board: a link made at PreStart. Here, below
    /// both the Allocate answer that mounts it and the CDI spec that replaces it.
    pub fn board_link(&self, name: &str) -> PathBuf {
        self.boards_dir().join(name)
    }
}

/// Everything the plugin's tasks share.
pub struct Node {
    /// The setup.
    pub config: Config,
    /// The cards, by NVML index.
    pub cards: Arc<Cards>,
    /// Each card's health, by index.
    pub health: watch::Receiver<Vec<bool>>,
    /// Who holds what.
    pub holders: Mutex<Holders>,
    /// The daemon.
    pub controld: Controld,
    /// The API server.
    pub kube: kube::Client,
    /// Woken when holders change, so that the GPU objects follow at once.
    pub changed: Notify,
    /// The card the last preferred allocation of one resource chose, for the other resource
    /// of the same container (the kubelet asks for one container at a time).
    pub pairing: Mutex<Option<prefer::Pending>>,
    /// What the kubelet's last core request said of each card's free core IDs.
    pub core_view: Mutex<prefer::CoreView>,
}

impl Node {
    /// Whether the card of `index` is healthy now.
    pub fn healthy(&self, index: u32) -> bool {
        self.health
            .borrow()
            .get(index as usize)
            .copied()
            .unwrap_or(false)
    }
}

/// Runs the plugin until the process is stopped.
pub async fn run(config: Config, kube: kube::Client) -> Result<(), String> {
    let cards = tokio::task::spawn_blocking(Cards::load)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot list the node's GPUs: {e}"))?;
    if cards.list.is_empty() {
        return Err("NVML lists no GPU on this node; nothing to offer".into());
    }
    for card in &cards.list {
        tracing::info!(
            "GPU {}: {} {} ({} GiB): {} core IDs, {} memory IDs",
            card.index,
            card.uuid,
            card.model,
            card.memory >> 30,
            card.units(crate::ids::Resource::Core),
            card.units(crate::ids::Resource::Memory)
        );
    }
    allocate::prepare_files(&config.host).map_err(|e| {
        format!(
            "cannot write the plugin's files under {}: {e}",
            config.host.own_dir().display()
        )
    })?;
    let cards = Arc::new(cards);
    let (health_tx, health) = watch::channel(cards.health());
    let node = Arc::new(Node {
        controld: Controld::new(&config.host.state_dir),
        config,
        cards: cards.clone(),
        health,
        holders: Mutex::new(Holders::default()),
        kube,
        changed: Notify::new(),
        pairing: Mutex::new(None),
        core_view: Mutex::new(prefer::CoreView::default()),
    });
    // What survived a restart first, so that nothing is counted twice or lost.
    reconcile::rebuild(&node).await;
    tokio::spawn(crate::cards::watch_health(
        cards,
        node.config.health_interval,
        health_tx,
    ));
    tokio::spawn(reconcile::run(node.clone()));
    tokio::spawn(resize::run(node.clone()));
    tokio::spawn(publish::run(node.clone()));
    registration::run(node).await;
    Ok(())
}
