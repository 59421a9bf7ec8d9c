//! A fake kubelet that speaks the real protocols over Unix sockets: it serves Registration
//! on `kubelet.sock` and pod-resources List on its own socket, and calls the plugin's
//! DevicePlugin service the way the kubelet does when it admits and starts a pod:
//! GetPreferredAllocation and Allocate (one pod at a time, as the kubelet's admission does),
//! then, with the pod recorded in pod-resources, PreStartContainer for each resource.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_k8s::ids::Resource;
use tessera_k8s::proto::deviceplugin::device_plugin_client::DevicePluginClient;
use tessera_k8s::proto::deviceplugin::registration_server::{Registration, RegistrationServer};
use tessera_k8s::proto::deviceplugin::{
    AllocateRequest, ContainerAllocateRequest, ContainerAllocateResponse,
    ContainerPreferredAllocationRequest, Device, Empty, PreStartContainerRequest,
    PreferredAllocationRequest, RegisterRequest,
};
use tessera_k8s::proto::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use tessera_k8s::proto::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources,
};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

#[derive(Clone, Default)]
struct Registrations {
    seen: Arc<Mutex<Vec<RegisterRequest>>>,
    notify: Arc<Notify>,
}

#[tonic::async_trait]
impl Registration for Registrations {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        self.seen.lock().unwrap().push(request.into_inner());
        self.notify.notify_waiters();
        Ok(Response::new(Empty {}))
    }
}

#[derive(Clone, Default)]
struct PodStore {
    pods: Arc<Mutex<Vec<PodResources>>>,
}

#[tonic::async_trait]
impl PodResourcesLister for PodStore {
    async fn list(
        &self,
        _: Request<ListPodResourcesRequest>,
    ) -> Result<Response<ListPodResourcesResponse>, Status> {
        Ok(Response::new(ListPodResourcesResponse {
            pod_resources: self.pods.lock().unwrap().clone(),
        }))
    }
}

/// What one container asks.
#[derive(Debug, Clone)]
pub struct PodAsk {
    pub namespace: String,
    pub name: String,
    pub core: usize,
    pub memory_gib: usize,
}

/// What the kubelet gave a container.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub core_ids: Vec<String>,
    pub memory_ids: Vec<String>,
    pub core: ContainerAllocateResponse,
    pub memory: ContainerAllocateResponse,
}

/// A resource's device list as ListAndWatch keeps it, and the registration count it was
/// read under.
type Followed = (usize, watch::Receiver<Vec<Device>>);

/// The fake kubelet.
pub struct FakeKubelet {
    pub dir: PathBuf,
    pub pod_resources: PathBuf,
    registrations: Registrations,
    registration_server: Mutex<Option<JoinHandle<()>>>,
    pod_store: PodStore,
    pod_resources_server: Mutex<Option<JoinHandle<()>>>,
    allocated: Mutex<HashSet<String>>,
    admission: tokio::sync::Mutex<()>,
    /// Each resource's device list, with the registration count it was read under.
    devices: Mutex<HashMap<Resource, Followed>>,
}

fn serve_registration(dir: &Path, registrations: Registrations) -> JoinHandle<()> {
    let incoming = tessera_k8s::uds::bind(&dir.join("kubelet.sock")).unwrap();
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(registrations))
            .serve_with_incoming(incoming)
            .await;
    })
}

fn serve_pod_resources(path: &Path, store: PodStore) -> JoinHandle<()> {
    let incoming = tessera_k8s::uds::bind(path).unwrap();
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(store))
            .serve_with_incoming(incoming)
            .await;
    })
}

impl FakeKubelet {
    /// Serves `dir/kubelet.sock` and the pod-resources socket.
    pub fn start(dir: &Path, pod_resources: &Path) -> FakeKubelet {
        std::fs::create_dir_all(dir).unwrap();
        let registrations = Registrations::default();
        let pod_store = PodStore::default();
        FakeKubelet {
            dir: dir.to_path_buf(),
            pod_resources: pod_resources.to_path_buf(),
            registration_server: Mutex::new(Some(serve_registration(dir, registrations.clone()))),
            registrations,
            pod_resources_server: Mutex::new(Some(serve_pod_resources(
                pod_resources,
                pod_store.clone(),
            ))),
            pod_store,
            allocated: Mutex::new(HashSet::new()),
            admission: tokio::sync::Mutex::new(()),
            devices: Mutex::new(HashMap::new()),
        }
    }

    /// Every registration so far.
    pub fn registrations(&self) -> Vec<RegisterRequest> {
        self.registrations.seen.lock().unwrap().clone()
    }

    /// Waits until `count` registrations have come, or panics after `timeout`.
    pub async fn wait_registrations(&self, count: usize, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.registrations.notify.notified();
            if self.registrations().len() >= count {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "{} registrations within {timeout:?}, not {count}",
                    self.registrations().len()
                );
            }
        }
    }

    /// A kubelet restart: the device-plugin directory emptied, `kubelet.sock` recreated.
    pub fn restart(&self) {
        if let Some(server) = self.registration_server.lock().unwrap().take() {
            server.abort();
        }
        for entry in std::fs::read_dir(&self.dir).unwrap() {
            let _ = std::fs::remove_file(entry.unwrap().path());
        }
        self.devices.lock().unwrap().clear();
        *self.registration_server.lock().unwrap() =
            Some(serve_registration(&self.dir, self.registrations.clone()));
    }

    /// Only `kubelet.sock` deleted and served anew (the plugin's sockets stay).
    pub fn recreate_socket(&self) {
        if let Some(server) = self.registration_server.lock().unwrap().take() {
            server.abort();
        }
        let _ = std::fs::remove_file(self.dir.join("kubelet.sock"));
        *self.registration_server.lock().unwrap() =
            Some(serve_registration(&self.dir, self.registrations.clone()));
    }

    /// Stops answering on the pod-resources socket (and removes it).
    pub fn stop_pod_resources(&self) {
        if let Some(server) = self.pod_resources_server.lock().unwrap().take() {
            server.abort();
        }
        let _ = std::fs::remove_file(&self.pod_resources);
    }

    /// Answers on the pod-resources socket again.
    pub fn start_pod_resources(&self) {
        *self.pod_resources_server.lock().unwrap() = Some(serve_pod_resources(
            &self.pod_resources,
            self.pod_store.clone(),
        ));
    }

    /// A client of the plugin's socket for `resource`, as registered.
    pub async fn plugin(
        &self,
        resource: Resource,
    ) -> DevicePluginClient<tonic::transport::Channel> {
        let endpoint = self
            .registrations()
            .iter()
            .rev()
            .find(|r| r.resource_name == resource.name())
            .map(|r| r.endpoint.clone())
            .expect("the resource registered");
        let channel = tessera_k8s::uds::connect(&self.dir.join(endpoint))
            .await
            .unwrap();
        DevicePluginClient::new(channel)
    }

    /// The plugin's device list for `resource`, followed through ListAndWatch.
    pub async fn devices(&self, resource: Resource) -> watch::Receiver<Vec<Device>> {
        // A new registration (a restarted plugin) is followed anew, as the kubelet does.
        let registered = self.registrations().len();
        if let Some((seen, rx)) = self.devices.lock().unwrap().get(&resource) {
            if *seen == registered {
                return rx.clone();
            }
        }
        let mut client = self.plugin(resource).await;
        let mut stream = client.list_and_watch(Empty {}).await.unwrap().into_inner();
        let first = stream
            .message()
            .await
            .unwrap()
            .expect("a first device list");
        let (tx, rx) = watch::channel(first.devices);
        tokio::spawn(async move {
            while let Ok(Some(list)) = stream.message().await {
                if tx.send(list.devices).is_err() {
                    break;
                }
            }
        });
        self.devices
            .lock()
            .unwrap()
            .insert(resource, (registered, rx.clone()));
        rx
    }

    /// Admits and starts a pod of one container `main`, as the kubelet does. Errors are the
    /// plugin's messages.
    pub async fn run_pod(&self, ask: &PodAsk) -> Result<Admitted, String> {
        let admitted = {
            let _one_at_a_time = self.admission.lock().await;
            let mut ids = HashMap::new();
            let mut answers = HashMap::new();
            // The kubelet walks a container's resources in no set order (a Go map): half the
            // pods here ask memory first.
            let mut order = [
                (Resource::Core, ask.core),
                (Resource::Memory, ask.memory_gib),
            ];
            let memory_first = ask.name.bytes().map(u32::from).sum::<u32>() % 2 == 1;
            if memory_first {
                order.reverse();
            }
            for (resource, size) in order {
                // A resource the container does not ask for is not called at all.
                if size == 0 {
                    ids.insert(resource, Vec::new());
                    answers.insert(resource, ContainerAllocateResponse::default());
                    continue;
                }
                let devices = self.devices(resource).await.borrow().clone();
                let available: Vec<String> = {
                    let allocated = self.allocated.lock().unwrap();
                    devices
                        .iter()
                        .filter(|d| d.health == "Healthy" && !allocated.contains(&d.id))
                        .map(|d| d.id.clone())
                        .collect()
                };
                if available.len() < size {
                    return Err(format!(
                        "the node has {} free {} IDs",
                        available.len(),
                        resource.name()
                    ));
                }
                let mut client = self.plugin(resource).await;
                let preferred = client
                    .get_preferred_allocation(PreferredAllocationRequest {
                        container_requests: vec![ContainerPreferredAllocationRequest {
                            available_device_i_ds: available.clone(),
                            must_include_device_i_ds: vec![],
                            allocation_size: size as i32,
                        }],
                    })
                    .await
                    .map_err(|e| e.message().to_string())?
                    .into_inner();
                let chosen = preferred.container_responses[0].device_i_ds.clone();
                assert_eq!(
                    chosen.len(),
                    size,
                    "the preferred allocation has the asked size"
                );
                assert!(
                    chosen.iter().all(|id| available.contains(id)),
                    "preferred only available IDs"
                );
                let answer = client
                    .allocate(AllocateRequest {
                        container_requests: vec![ContainerAllocateRequest {
                            devices_ids: chosen.clone(),
                        }],
                    })
                    .await
                    .map_err(|e| e.message().to_string())?
                    .into_inner();
                assert_eq!(answer.container_responses.len(), 1);
                self.allocated
                    .lock()
                    .unwrap()
                    .extend(chosen.iter().cloned());
                ids.insert(resource, chosen);
                answers.insert(resource, answer.container_responses[0].clone());
            }
            let core_ids = ids.remove(&Resource::Core).unwrap();
            let memory_ids = ids.remove(&Resource::Memory).unwrap();
            self.pod_store.pods.lock().unwrap().push(PodResources {
                name: ask.name.clone(),
                namespace: ask.namespace.clone(),
                containers: vec![ContainerResources {
                    name: "main".into(),
                    devices: [(Resource::Core, &core_ids), (Resource::Memory, &memory_ids)]
                        .into_iter()
                        .filter(|(_, ids)| !ids.is_empty())
                        .map(|(resource, ids)| ContainerDevices {
                            resource_name: resource.name().into(),
                            device_ids: ids.clone(),
                        })
                        .collect(),
                }],
            });
            Admitted {
                core_ids,
                memory_ids,
                core: answers.remove(&Resource::Core).unwrap(),
                memory: answers.remove(&Resource::Memory).unwrap(),
            }
        };
        let mut starts = [
            (Resource::Memory, &admitted.memory_ids),
            (Resource::Core, &admitted.core_ids),
        ];
        if ask.name.len() % 2 == 1 {
            starts.reverse();
        }
        for (resource, ids) in starts {
            if ids.is_empty() {
                continue;
            }
            self.plugin(resource)
                .await
                .pre_start_container(PreStartContainerRequest {
                    devices_ids: ids.clone(),
                })
                .await
                .map_err(|e| e.message().to_string())?;
        }
        Ok(admitted)
    }

    /// Starts a container of an admitted pod again (the kubelet restarts a container that
    /// exited): PreStartContainer once more for each resource, with the same IDs.
    pub async fn restart_container(&self, admitted: &Admitted) -> Result<(), String> {
        for (resource, ids) in [
            (Resource::Core, &admitted.core_ids),
            (Resource::Memory, &admitted.memory_ids),
        ] {
            self.plugin(resource)
                .await
                .pre_start_container(PreStartContainerRequest {
                    devices_ids: ids.clone(),
                })
                .await
                .map_err(|e| e.message().to_string())?;
        }
        Ok(())
    }

    /// Forgets a pod: pod-resources no longer lists it and its IDs are free.
    pub fn remove_pod(&self, namespace: &str, name: &str) {
        let mut pods = self.pod_store.pods.lock().unwrap();
        let mut allocated = self.allocated.lock().unwrap();
        pods.retain(|p| {
            let gone = p.namespace == namespace && p.name == name;
            if gone {
                for c in &p.containers {
                    for d in &c.devices {
                        for id in &d.device_ids {
                            allocated.remove(id);
                        }
                    }
                }
            }
            !gone
        });
    }
}
