//! Our sockets and the kubelet's: serve both resources, register them, and start over when
//! the kubelet restarts. A restarting kubelet empties the device-plugin directory and
//! recreates `kubelet.sock`; the plugin notices either (polling the socket's identity, a few
//! times a second), recreates its sockets, serves on them, and only then registers again.

use super::service::{options, PluginService};
use super::Node;
use crate::ids::Resource;
use crate::proto::deviceplugin::device_plugin_server::DevicePluginServer;
use crate::proto::deviceplugin::registration_client::RegistrationClient;
use crate::proto::deviceplugin::RegisterRequest;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// The kubelet's registration socket in its device-plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The device plugin API version the plugin speaks.
pub const VERSION: &str = "v1beta1";
/// How often the sockets are looked at.
const POLL: Duration = Duration::from_millis(200);
/// How long to wait before trying a failed registration again.
const RETRY: Duration = Duration::from_secs(1);

/// A file's identity: a recreated socket has a new one. The inode number alone may be
/// reused at once by the file system; its change time is new.
pub type Identity = (u64, u64, i64, i64);

/// The identity of the file at `path`, if there is one.
pub fn identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Serves and registers until the process ends.
pub async fn run(node: Arc<Node>) {
    let dir = node.config.kubelet_dir.clone();
    let kubelet = dir.join(KUBELET_SOCKET);
    loop {
        let servers = match serve(&node) {
            Ok(servers) => servers,
            Err(e) => {
                tracing::error!("cannot serve in {}: {e}; trying again", dir.display());
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let ours: Vec<_> = Resource::ALL
            .iter()
            .map(|r| identity(&dir.join(r.socket())))
            .collect();
        let registered = register_all(&kubelet).await;
        // Watch until the kubelet restarts or our sockets are gone.
        loop {
            tokio::time::sleep(POLL).await;
            let mine_now: Vec<_> = Resource::ALL
                .iter()
                .map(|r| identity(&dir.join(r.socket())))
                .collect();
            if mine_now != ours {
                tracing::info!(
                    "our sockets are gone (the kubelet restarted); serving and registering again"
                );
                break;
            }
            let kubelet_now = identity(&kubelet);
            if kubelet_now.is_some() && kubelet_now != registered {
                tracing::info!(
                    "kubelet.sock was recreated (the kubelet restarted); registering again"
                );
                break;
            }
        }
        for server in servers {
            server.abort();
        }
    }
}

/// Binds both sockets and serves them.
fn serve(node: &Arc<Node>) -> std::io::Result<Vec<JoinHandle<()>>> {
    let mut servers = Vec::new();
    for resource in Resource::ALL {
        let path = node.config.kubelet_dir.join(resource.socket());
        let incoming = crate::uds::bind(&path)?;
        let service = DevicePluginServer::new(PluginService::new(node.clone(), resource));
        servers.push(tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
            if let Err(e) = served {
                tracing::error!("serving {} stopped: {e}", resource.name());
            }
        }));
    }
    Ok(servers)
}

/// Registers both resources, trying until the kubelet accepts; returns the identity of the
/// `kubelet.sock` that accepted.
async fn register_all(kubelet: &Path) -> Option<Identity> {
    loop {
        let before = identity(kubelet);
        if before.is_some() {
            let mut all = true;
            for resource in Resource::ALL {
                if let Err(e) = register(kubelet, resource).await {
                    tracing::warn!(
                        "cannot register {} with the kubelet at {}: {e}; trying again",
                        resource.name(),
                        kubelet.display()
                    );
                    all = false;
                    break;
                }
            }
            if all {
                tracing::info!(
                    "registered {} and {} with the kubelet",
                    Resource::Core.name(),
                    Resource::Memory.name()
                );
                return before;
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}

async fn register(kubelet: &Path, resource: Resource) -> Result<(), String> {
    let channel = crate::uds::connect(kubelet)
        .await
        .map_err(|e| crate::podresources::source_chain(&e))?;
    RegistrationClient::new(channel)
        .register(RegisterRequest {
            version: VERSION.into(),
            endpoint: resource.socket().into(),
            resource_name: resource.name().into(),
            options: Some(options()),
        })
        .await
        .map_err(|e| e.message().to_string())?;
    Ok(())
}
