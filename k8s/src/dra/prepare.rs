//! NodePrepareResources and NodeUnprepareResources. Each claim is answered on its own: one
//! that cannot be prepared gets its error (what is wrong, what to do) and the others go on.
//!
//! A claim's devices of this node each become a controld container named
//! `claim-<hash of the claim's UID>-<n>` (made as the device plugin makes a share, see
//! [`crate::plugin::prestart::set_up`]) and a CDI device of that name, which the answer gives
//! the kubelet for the runtime. Unprepare finds them by the claim's UID alone, without the
//! API server (the claim may be gone by then); both calls may come again and again.

use super::claim::{self, Allocated};
use super::{Driver, CONTAINER_PREFIX};
use crate::ids::hash_lines;
use crate::plugin::cdi;
use crate::plugin::prestart::{set_up, unlink_board, Share};
use crate::proto::dra::dra_plugin_server::DraPlugin;
use crate::proto::dra::{
    Claim, Device, NodePrepareResourceResponse, NodePrepareResourcesRequest,
    NodePrepareResourcesResponse, NodeUnprepareResourceResponse, NodeUnprepareResourcesRequest,
    NodeUnprepareResourcesResponse,
};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;
use std::sync::Arc;
use tessera_region::units::format_size;
use tonic::{Request, Response, Status};

/// The DRA service.
pub struct DraService {
    driver: Arc<Driver>,
}

impl DraService {
    /// The service of `driver`.
    pub fn new(driver: Arc<Driver>) -> DraService {
        DraService { driver }
    }
}

#[tonic::async_trait]
impl DraPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        request: Request<NodePrepareResourcesRequest>,
    ) -> Result<Response<NodePrepareResourcesResponse>, Status> {
        let mut answers = NodePrepareResourcesResponse::default();
        for claim in request.into_inner().claims {
            let answer = match prepare(&self.driver, &claim).await {
                Ok(devices) => NodePrepareResourceResponse {
                    devices,
                    error: String::new(),
                },
                Err(error) => {
                    tracing::error!("{error}");
                    NodePrepareResourceResponse {
                        devices: Vec::new(),
                        error,
                    }
                }
            };
            answers.claims.insert(claim.uid, answer);
        }
        Ok(Response::new(answers))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<NodeUnprepareResourcesRequest>,
    ) -> Result<Response<NodeUnprepareResourcesResponse>, Status> {
        let mut answers = NodeUnprepareResourcesResponse::default();
        for claim in request.into_inner().claims {
            let error = match unprepare(&self.driver, &claim).await {
                Ok(()) => String::new(),
                Err(error) => {
                    tracing::error!("{error}");
                    error
                }
            };
            answers
                .claims
                .insert(claim.uid, NodeUnprepareResourceResponse { error });
        }
        Ok(Response::new(answers))
    }
}

/// What every container of the claim `uid` is called first.
pub fn claim_prefix(uid: &str) -> String {
    format!("{CONTAINER_PREFIX}{:016x}-", hash_lines(&[uid]))
}

/// The container of the claim's `n`th device of this driver on this node.
pub fn container_name(uid: &str, n: usize) -> String {
    format!("{}{n}", claim_prefix(uid))
}

/// Whether `name` is one of the DRA driver's containers.
pub fn is_claim_container(name: &str) -> bool {
    name.strip_prefix(CONTAINER_PREFIX).is_some_and(|rest| {
        rest.split_once('-').is_some_and(|(hex, n)| {
            hex.len() == 16
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
                && !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
        })
    })
}

fn who(claim: &Claim) -> String {
    format!("ResourceClaim {}/{}", claim.namespace, claim.name)
}

/// Prepares one claim: its containers and CDI specs, or none of them and why.
async fn prepare(driver: &Driver, claim: &Claim) -> Result<Vec<Device>, String> {
    let api: Api<ResourceClaim> = Api::namespaced(driver.kube.clone(), &claim.namespace);
    let stored = api.get_opt(&claim.name).await.map_err(|e| {
        format!(
            "cannot read {} from the API server: {e}; the kubelet asks again",
            who(claim)
        )
    })?;
    let Some(stored) = stored else {
        return Err(format!(
            "{} is not on the API server; it was deleted before its pod started: delete the pod",
            who(claim)
        ));
    };
    let devices = claim::read(&stored, &claim.uid, driver.config.pool(), &driver.cards)?;
    let _busy = driver.busy.lock().await;
    check_memory_left(driver, claim, &devices).await?;
    let mut answer = Vec::new();
    for (n, device) in devices.iter().enumerate() {
        let name = container_name(&claim.uid, n);
        let share = Share {
            name: name.clone(),
            memory: device.memory,
            compute: device.compute.policy(device.cores),
            priority: device.priority,
        };
        if let Err(e) = set_up(&driver.config.host, &driver.controld, &device.card, &share).await {
            // None of the claim or all of it: what was made for it goes.
            let _ = remove_containers(driver, &claim.uid).await;
            return Err(format!(
                "{}: cannot set up {} on GPU {}: {e}",
                who(claim),
                device.device,
                device.card.index
            ));
        }
        tracing::info!(
            "{} request {} is {name} on GPU {}: memory {}, compute {}, {}",
            who(claim),
            device.request,
            device.card.index,
            format_size(device.memory),
            share.compute,
            share.priority
        );
        answer.push(Device {
            request_names: vec![device.request.clone()],
            pool_name: driver.config.pool().into(),
            device_name: device.device.clone(),
            cdi_device_ids: vec![cdi::device_name(&name)],
        });
    }
    Ok(answer)
}

/// Refuses a claim whose memory would not fit beside the containers already on its cards
/// (the scheduler counts the same; this keeps a stale allocation from overcommitting).
async fn check_memory_left(
    driver: &Driver,
    claim: &Claim,
    devices: &[Allocated],
) -> Result<(), String> {
    let containers = driver
        .controld
        .list()
        .await
        .map_err(|e| format!("cannot prepare {}: {e}", who(claim)))?;
    let prefix = claim_prefix(&claim.uid);
    for card in &driver.cards {
        let asked: u64 = devices
            .iter()
            .filter(|d| d.card.index == card.index)
            .map(|d| d.memory)
            .sum();
        if asked == 0 {
            continue;
        }
        let held: u64 = containers
            .iter()
            .filter(|c| !c.spec.name.as_str().starts_with(&prefix))
            .filter(|c| c.spec.gpus.as_slice().contains(&card.index))
            .map(|c| c.spec.memory.map_or(card.memory, |m| m.0))
            .sum();
        if held + asked > card.memory {
            return Err(format!(
                "{} asks {} of GPU {} ({}), which has {} left of {}; delete the pod so that the claim is allocated again",
                who(claim),
                format_size(asked),
                card.index,
                card.uuid,
                format_size(card.memory.saturating_sub(held)),
                format_size(card.memory)
            ));
        }
    }
    Ok(())
}

/// Unprepares one claim: its containers, board links and CDI specs go, whatever is left of
/// them; nothing left is not an error.
async fn unprepare(driver: &Driver, claim: &Claim) -> Result<(), String> {
    let _busy = driver.busy.lock().await;
    let removed = remove_containers(driver, &claim.uid).await.map_err(|e| {
        format!(
            "cannot unprepare {}: {e}; the kubelet asks again",
            who(claim)
        )
    })?;
    if removed > 0 {
        tracing::info!("{}: removed {removed} containers", who(claim));
    }
    Ok(())
}

/// Removes the claim's containers and what was made beside them; returns how many
/// containers there were.
async fn remove_containers(driver: &Driver, uid: &str) -> Result<usize, String> {
    let prefix = claim_prefix(uid);
    let containers = driver.controld.list().await.map_err(|e| e.to_string())?;
    let mut removed = 0;
    for c in containers {
        let name = c.spec.name.as_str();
        if name.starts_with(&prefix) {
            driver
                .controld
                .remove(name)
                .await
                .map_err(|e| e.to_string())?;
            removed += 1;
        }
    }
    // Files of containers that never reached controld (a failed prepare) go too.
    let host = &driver.config.host;
    let mut leftovers = Vec::new();
    if let Ok(entries) = std::fs::read_dir(driver.config.cdi_dir()) {
        leftovers.extend(entries.flatten().filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let name = file.strip_prefix("tessera-")?.strip_suffix(".json")?;
            name.starts_with(&prefix).then(|| name.to_string())
        }));
    }
    if let Ok(entries) = std::fs::read_dir(host.own_dir().join("boards")) {
        leftovers.extend(entries.flatten().filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.starts_with(&prefix).then_some(name)
        }));
    }
    for name in leftovers {
        unlink_board(host, &name);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_come_from_the_claim_uid() {
        let a = container_name("8f0c5a2e-1b2c-4d5e-8f90-a1b2c3d4e5f6", 0);
        assert!(is_claim_container(&a), "{a}");
        assert!(tessera_region::is_valid_name(&a));
        assert!(a.starts_with(&claim_prefix("8f0c5a2e-1b2c-4d5e-8f90-a1b2c3d4e5f6")));
        assert_ne!(claim_prefix("a"), claim_prefix("b"));
        // Never a name the device plugin's reconciler would take for its own.
        assert!(!crate::ids::is_plugin_container(&a));
        assert!(!is_claim_container("claim-x-1"));
        assert!(!is_claim_container("pod-0123456789abcdef"));
    }
}
