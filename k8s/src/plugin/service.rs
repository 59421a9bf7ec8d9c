//! The DevicePlugin service of one resource: what the kubelet calls on our socket.

use super::prefer::{self, Ask, Hints, Pending};
use super::Node;
use crate::ids::Resource;
use crate::proto::deviceplugin::device_plugin_server::DevicePlugin;
use crate::proto::deviceplugin::{
    AllocateRequest, AllocateResponse, ContainerPreferredAllocationResponse, Device,
    DevicePluginOptions, Empty, ListAndWatchResponse, PreStartContainerRequest,
    PreStartContainerResponse, PreferredAllocationRequest, PreferredAllocationResponse,
};
use futures_util::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tonic::{Request, Response, Status};

/// The kubelet's words for a device's health.
const HEALTHY: &str = "Healthy";
const UNHEALTHY: &str = "Unhealthy";

/// One resource's service.
#[derive(Clone)]
pub struct PluginService {
    node: Arc<Node>,
    resource: Resource,
}

impl PluginService {
    /// The service of `resource`.
    pub fn new(node: Arc<Node>, resource: Resource) -> PluginService {
        PluginService { node, resource }
    }
}

/// What the plugin asks of the kubelet, for both resources.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: true,
        get_preferred_allocation_available: true,
    }
}

/// Every ID of `resource` with its card's health.
pub fn devices(node: &Node, resource: Resource, health: &[bool]) -> Vec<Device> {
    node.cards
        .list
        .iter()
        .flat_map(|card| {
            let healthy = health.get(card.index as usize).copied().unwrap_or(false);
            card.ids(resource).map(move |id| Device {
                id: id.to_string(),
                health: if healthy { HEALTHY } else { UNHEALTHY }.into(),
                topology: None,
            })
        })
        .collect()
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl DevicePlugin for PluginService {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let node = self.node.clone();
        let resource = self.resource;
        let health = node.health.clone();
        // The list now, then again at every change of health.
        let stream = futures_util::stream::unfold((health, true), move |(mut health, first)| {
            let node = node.clone();
            async move {
                if !first && health.changed().await.is_err() {
                    return None;
                }
                let now = health.borrow_and_update().clone();
                let list = ListAndWatchResponse {
                    devices: devices(&node, resource, &now),
                };
                Some((Ok(list), (health, false)))
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let order: Vec<String> = self
            .node
            .cards
            .list
            .iter()
            .map(|c| c.uuid.clone())
            .collect();
        let mut responses = Vec::new();
        for container in request.into_inner().container_requests {
            let ask = Ask {
                available: container.available_device_i_ds,
                must_include: container.must_include_device_i_ds,
                size: usize::try_from(container.allocation_size).unwrap_or(0),
            };
            // Looked up before the locks are taken: it waits on the API server and the kubelet.
            let admitting = super::admitting::lookup(&self.node, self.resource, &ask).await;
            let scheduled = admitting.as_ref().map_or(&[][..], |a| a.cards.as_slice());
            let now = Instant::now();
            let mut slot = self.node.pairing.lock().expect("pairing lock");
            let mut view = self.node.core_view.lock().expect("core view lock");
            let paired = prefer::pair(&mut slot, self.resource, now);
            let room = |uuid: &str| view.room(uuid);
            let hints = Hints {
                scheduled,
                paired: paired.as_deref(),
                room: &room,
            };
            let (ids, card) = prefer::choose(self.resource, &ask, &order, hints);
            if let Some(admitting) = &admitting {
                if card.as_ref().is_some_and(|c| !admitting.cards.contains(c)) {
                    tracing::warn!(
                        "container {}: the scheduler recorded {} but {} IDs fit only elsewhere",
                        admitting.who,
                        admitting.cards.join(","),
                        self.resource.name()
                    );
                } else {
                    tracing::debug!(
                        "container {}: {} IDs on the recorded {}",
                        admitting.who,
                        self.resource.name(),
                        admitting.cards.join(",")
                    );
                }
            }
            if self.resource == Resource::Core {
                view.saw(&ask, &ids);
            }
            if paired.is_none() {
                *slot = card.map(|uuid| Pending {
                    resource: self.resource,
                    uuid,
                    at: now,
                });
            }
            responses.push(ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(Response::new(PreferredAllocationResponse {
            container_responses: responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let mut responses = Vec::new();
        for container in request.into_inner().container_requests {
            let answer = super::allocate::answer(
                &self.node.config.host,
                &self.node.cards.list,
                self.resource,
                &container.devices_ids,
            )
            .map_err(|e| {
                let message = format!("cannot allocate {}: {e}", self.resource.name());
                tracing::error!("{message}");
                Status::invalid_argument(message)
            })?;
            responses.push(answer);
        }
        Ok(Response::new(AllocateResponse {
            container_responses: responses,
        }))
    }

    async fn pre_start_container(
        &self,
        request: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        let ids = request.into_inner().devices_ids;
        super::prestart::pre_start(&self.node, self.resource, ids).await?;
        Ok(Response::new(PreStartContainerResponse {}))
    }
}
