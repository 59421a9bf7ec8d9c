//! The kubelet's pod-resources API: which pod and container hold which device IDs.

use crate::proto::podresources::pod_resources_lister_client::PodResourcesListerClient;
use crate::proto::podresources::{ListPodResourcesRequest, PodResources};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The kubelet's pod-resources socket.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// How long one List may take.
const PATIENCE: Duration = Duration::from_secs(5);

/// Why the kubelet could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// Nothing answers on the socket.
    #[error("cannot reach the kubelet's pod-resources API at {0}: {1}; check that the kubelet runs and that the socket is mounted into the plugin's pod")]
    Connect(PathBuf, String),
    /// The call failed.
    #[error("the kubelet's pod-resources List at {0} failed: {1}")]
    Call(PathBuf, String),
}

/// One container that holds devices of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name.
    pub container: String,
    /// Its `tessera.dev/gpu-core` IDs.
    pub core: Vec<String>,
    /// Its `tessera.dev/gpu-memory` IDs.
    pub memory: Vec<String>,
}

/// Every container of the node that holds IDs of ours.
pub async fn list(socket: &Path) -> Result<Vec<Holding>, PodResourcesError> {
    let call = async {
        let channel = crate::uds::connect(socket)
            .await
            .map_err(|e| PodResourcesError::Connect(socket.to_path_buf(), source_chain(&e)))?;
        PodResourcesListerClient::new(channel)
            .list(ListPodResourcesRequest {})
            .await
            .map_err(|e| PodResourcesError::Call(socket.to_path_buf(), e.message().to_string()))
    };
    let answer = tokio::time::timeout(PATIENCE, call)
        .await
        .map_err(|_| PodResourcesError::Call(socket.to_path_buf(), "no answer in 5 s".into()))??;
    Ok(holdings(answer.into_inner().pod_resources))
}

fn holdings(pods: Vec<PodResources>) -> Vec<Holding> {
    let mut out = Vec::new();
    for pod in pods {
        for container in pod.containers {
            let mut holding = Holding {
                namespace: pod.namespace.clone(),
                pod: pod.name.clone(),
                container: container.name,
                core: Vec::new(),
                memory: Vec::new(),
            };
            for devices in container.devices {
                match crate::ids::Resource::from_name(&devices.resource_name) {
                    Some(crate::ids::Resource::Core) => holding.core.extend(devices.device_ids),
                    Some(crate::ids::Resource::Memory) => holding.memory.extend(devices.device_ids),
                    None => {}
                }
            }
            if !holding.core.is_empty() || !holding.memory.is_empty() {
                out.push(holding);
            }
        }
    }
    out
}

/// An error with its causes, on one line.
pub fn source_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
