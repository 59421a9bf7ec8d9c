//! A fake API server on 127.0.0.1 that the real kube client talks to: pods (get, list and
//! watch, by node or all; merge patch; the `binding` subresource), events (create), and the
//! cluster-scoped `gpus` of tessera.dev/v1alpha1 (list and watch, server-side apply of the
//! object and of its status, delete), and of resource.k8s.io/v1 the ResourceSlices (list,
//! get, server-side apply, delete) and the ResourceClaims (get; a test writes them, as the
//! scheduler would). Bindings can be made to fail at a set rate, as an
//! overloaded API server's do.

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// The two kinds that can be watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Pods,
    Gpus,
}

/// What the server holds.
#[derive(Default)]
struct Store {
    version: u64,
    pods: BTreeMap<(String, String), Value>,
    /// Every watch event so far, by version, so that a watch from a version misses none.
    history: Vec<(u64, Kind, Value)>,
    events: Vec<Value>,
    gpus: BTreeMap<String, Value>,
    /// ResourceSlices by name.
    slices: BTreeMap<String, Value>,
    /// ResourceClaims by namespace and name.
    claims: BTreeMap<(String, String), Value>,
    /// Percent of bindings refused, and the state of the generator that picks them.
    bind_failures: (u32, u64),
    /// Bindings refused so far.
    binds_refused: u32,
}

impl Store {
    /// Records a watch event and returns it with its version for the live watchers.
    fn record(&mut self, kind: Kind, event_type: &str, object: &mut Value) -> (u64, Kind, Value) {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        let event = json!({"type": event_type, "object": object.clone()});
        self.history.push((self.version, kind, event.clone()));
        (self.version, kind, event)
    }
}

type Shared = Arc<(Mutex<Store>, broadcast::Sender<(u64, Kind, Value)>)>;

/// Stores a GPU object as changed, records the change and tells the watchers.
fn commit_gpu(
    shared: &Shared,
    mut store: MutexGuard<'_, Store>,
    name: String,
    mut gpu: Value,
    event_type: &str,
) -> Value {
    let event = store.record(Kind::Gpus, event_type, &mut gpu);
    store.gpus.insert(name, gpu.clone());
    drop(store);
    let _ = shared.1.send(event);
    gpu
}

/// The same for a pod.
fn commit_pod(
    shared: &Shared,
    mut store: MutexGuard<'_, Store>,
    key: (String, String),
    mut pod: Value,
    event_type: &str,
) -> Value {
    let event = store.record(Kind::Pods, event_type, &mut pod);
    store.pods.insert(key, pod.clone());
    drop(store);
    let _ = shared.1.send(event);
    pod
}

/// A pod object with this spec; its UID is made from its name.
pub fn pod(namespace: &str, name: &str, annotations: &BTreeMap<&str, &str>, spec: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": format!("uid-{namespace}-{name}"),
            "annotations": annotations,
        },
        "spec": spec,
    })
}

/// The server.
pub struct FakeApi {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Shared,
}

fn lock(shared: &Shared) -> MutexGuard<'_, Store> {
    shared.0.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeApi {
    /// Starts it on the current runtime.
    pub async fn start() -> FakeApi {
        let (tx, _) = broadcast::channel(1 << 16);
        let shared: Shared = Arc::new((Mutex::new(Store::default()), tx));
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}",
                get(get_pod).patch(patch_pod),
            )
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}/binding",
                post(bind_pod),
            )
            .route("/api/v1/pods", get(list_pods))
            .route("/api/v1/namespaces/{ns}/events", post(create_event))
            .route("/apis/tessera.dev/v1alpha1/gpus", get(list_gpus))
            .route(
                "/apis/tessera.dev/v1alpha1/gpus/{name}",
                patch(apply_gpu).delete(delete_gpu).get(get_gpu),
            )
            .route(
                "/apis/tessera.dev/v1alpha1/gpus/{name}/status",
                patch(apply_gpu_status),
            )
            .route("/apis/resource.k8s.io/v1/resourceslices", get(list_slices))
            .route(
                "/apis/resource.k8s.io/v1/resourceslices/{name}",
                patch(apply_slice).get(get_slice).delete(delete_slice),
            )
            .route(
                "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}",
                get(get_claim),
            )
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port on 127.0.0.1");
        let addr = listener
            .local_addr()
            .expect("a bound listener has an address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeApi { addr, shared }
    }

    /// A kubeconfig that points at it.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\n",
            self.addr
        )
    }

    /// A kube client of it.
    pub fn client(&self) -> kube::Client {
        let uri: axum::http::Uri = format!("http://{}", self.addr)
            .parse()
            .expect("an address is a URI");
        let config = kube::Config::new(uri);
        kube::Client::try_from(config).expect("a client of a plain HTTP server")
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.shared)
    }

    fn publish(&self, event: (u64, Kind, Value)) {
        let _ = self.shared.1.send(event);
    }

    /// Creates or changes a pod on `node` with these annotations.
    pub fn put_pod(&self, namespace: &str, name: &str, node: &str, annotations: &[(&str, &str)]) {
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        self.create_pod(pod(
            namespace,
            name,
            &annotations,
            json!({"nodeName": node, "containers": [{"name": "main", "image": "app"}]}),
        ));
    }

    /// Creates or replaces a pod object as given (its `metadata.namespace` and `name` say
    /// which).
    pub fn create_pod(&self, pod: Value) {
        let key = (
            pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        let store = self.store();
        let kind = if store.pods.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        commit_pod(&self.shared, store, key, pod, kind);
    }

    /// Deletes a pod.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        let mut store = self.store();
        if let Some(mut pod) = store
            .pods
            .remove(&(namespace.to_string(), name.to_string()))
        {
            let event = store.record(Kind::Pods, "DELETED", &mut pod);
            drop(store);
            self.publish(event);
        }
    }

    /// A pod as stored.
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Value> {
        self.store()
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Every pod, by namespace and name.
    pub fn pods(&self) -> BTreeMap<(String, String), Value> {
        self.store().pods.clone()
    }

    /// Refuses `percent` of the bindings from now on, picked by a generator seeded with
    /// `seed` (the same seed refuses the same calls).
    pub fn fail_bindings(&self, percent: u32, seed: u64) {
        self.store().bind_failures = (percent.min(100), seed | 1);
    }

    /// How many bindings were refused.
    pub fn bindings_refused(&self) -> u32 {
        self.store().binds_refused
    }

    /// Every event created so far.
    pub fn events(&self) -> Vec<Value> {
        self.store().events.clone()
    }

    /// Stores a GPU object as another writer left it.
    pub fn put_gpu(&self, name: &str, mut gpu: Value) {
        let store = self.store();
        let kind = if store.gpus.contains_key(name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        gpu["metadata"]["name"] = json!(name);
        commit_gpu(&self.shared, store, name.to_string(), gpu, kind);
    }

    /// Every GPU object, by name.
    pub fn gpus(&self) -> BTreeMap<String, Value> {
        self.store().gpus.clone()
    }

    /// Every ResourceSlice, by name.
    pub fn resource_slices(&self) -> BTreeMap<String, Value> {
        self.store().slices.clone()
    }

    /// Deletes a ResourceSlice, as the kubelet does when a driver goes.
    pub fn delete_resource_slice(&self, name: &str) {
        self.store().slices.remove(name);
    }

    /// Creates or replaces a ResourceClaim as given, status included (its
    /// `metadata.namespace` and `name` say which).
    pub fn put_resource_claim(&self, mut claim: Value) {
        let key = (
            claim["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            claim["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        let mut store = self.store();
        store.version += 1;
        claim["metadata"]["resourceVersion"] = json!(store.version.to_string());
        store.claims.insert(key, claim);
    }

    /// Deletes a ResourceClaim.
    pub fn delete_resource_claim(&self, namespace: &str, name: &str) {
        self.store()
            .claims
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    (
        code,
        Json(json!({
            "apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16(),
        })),
    )
        .into_response()
}

/// A request body as JSON, or the 400 that says it is not.
fn json_body(body: &[u8]) -> Result<Value, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("not JSON: {e}"),
        ))
    })
}

fn not_found(what: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{what} not found"),
    )
}

async fn get_pod(
    State(shared): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let store = lock(&shared);
    match store.pods.get(&(ns, name.clone())) {
        Some(pod) => Json(pod.clone()).into_response(),
        None => not_found(&format!("pods \"{name}\"")),
    }
}

/// Applies a JSON merge patch (RFC 7386) to `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(object), Some(changes)) => {
            for (key, value) in changes {
                if value.is_null() {
                    object.remove(key);
                } else {
                    merge(object.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

async fn patch_pod(
    State(shared): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let changes = match json_body(&body) {
        Ok(value) => value,
        Err(refused) => return *refused,
    };
    let store = lock(&shared);
    let key = (ns, name.clone());
    let Some(mut pod) = store.pods.get(&key).cloned() else {
        return not_found(&format!("pods \"{name}\""));
    };
    merge(&mut pod, &changes);
    Json(commit_pod(&shared, store, key, pod, "MODIFIED")).into_response()
}

async fn bind_pod(
    State(shared): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let binding = match json_body(&body) {
        Ok(value) => value,
        Err(refused) => return *refused,
    };
    let Some(node) = binding["target"]["name"].as_str() else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "a binding names its target".into(),
        );
    };
    let mut store = lock(&shared);
    let (percent, seed) = store.bind_failures;
    if percent > 0 {
        // xorshift64: the same seed refuses the same calls.
        let mut x = seed;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        store.bind_failures.1 = x;
        if (x % 100) < u64::from(percent) {
            store.binds_refused += 1;
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "etcdserver: request timed out".into(),
            );
        }
    }
    let key = (ns, name.clone());
    let Some(mut pod) = store.pods.get(&key).cloned() else {
        return not_found(&format!("pods \"{name}\""));
    };
    if pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
    {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "pod {name} is already assigned to node {}",
                pod["spec"]["nodeName"]
            ),
        );
    }
    pod["spec"]["nodeName"] = json!(node);
    commit_pod(&shared, store, key, pod, "MODIFIED");
    (
        StatusCode::CREATED,
        Json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})),
    )
        .into_response()
}

fn on_node(pod: &Value, selector: Option<&String>) -> bool {
    match selector.and_then(|s| s.strip_prefix("spec.nodeName=")) {
        Some(node) => pod["spec"]["nodeName"] == node,
        None => true,
    }
}

/// A list, or a watch from `resourceVersion` when the query says `watch`.
fn list_or_watch(shared: &Shared, kind: Kind, q: &HashMap<String, String>) -> Response {
    let selector = q.get("fieldSelector").cloned();
    let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let store = lock(shared);
    if !watching {
        let (list_kind, api_version, items): (&str, &str, Vec<Value>) = match kind {
            Kind::Pods => (
                "PodList",
                "v1",
                store
                    .pods
                    .values()
                    .filter(|p| on_node(p, selector.as_ref()))
                    .cloned()
                    .collect(),
            ),
            Kind::Gpus => (
                "GPUList",
                "tessera.dev/v1alpha1",
                store.gpus.values().cloned().collect(),
            ),
        };
        return Json(json!({
            "apiVersion": api_version, "kind": list_kind,
            "metadata": {"resourceVersion": store.version.to_string()},
            "items": items,
        }))
        .into_response();
    }
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(store.version);
    let past: Vec<(u64, Kind, Value)> = store
        .history
        .iter()
        .filter(|(v, k, _)| *v > from && *k == kind)
        .cloned()
        .collect();
    let rx = shared.1.subscribe();
    drop(store);
    let last = past.last().map(|(v, _, _)| *v).unwrap_or(from);
    let state = (past.into_iter(), rx, last, selector);
    let stream = futures_util::stream::unfold(
        state,
        move |(mut past, mut rx, mut last, selector)| async move {
            loop {
                let (version, of, event) = match past.next() {
                    Some(e) => e,
                    None => match rx.recv().await {
                        Ok(e) => e,
                        // A watcher that fell behind is ended, as the API server ends a
                        // watch whose version is gone: the client lists again.
                        Err(_) => return None,
                    },
                };
                if of != kind || version <= last {
                    continue;
                }
                last = version;
                if !on_node(&event["object"], selector.as_ref()) {
                    continue;
                }
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                line.push(b'\n');
                return Some((
                    Ok::<_, std::io::Error>(Bytes::from(line)),
                    (past, rx, last, selector),
                ));
            }
        },
    );
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn list_pods(
    State(shared): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    list_or_watch(&shared, Kind::Pods, &q)
}

async fn list_gpus(
    State(shared): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    list_or_watch(&shared, Kind::Gpus, &q)
}

async fn create_event(
    State(shared): State<Shared>,
    Path(_ns): Path<String>,
    Json(event): Json<Value>,
) -> Response {
    lock(&shared).events.push(event.clone());
    (StatusCode::CREATED, Json(event)).into_response()
}

async fn get_gpu(State(shared): State<Shared>, Path(name): Path<String>) -> Response {
    match lock(&shared).gpus.get(&name) {
        Some(gpu) => Json(gpu.clone()).into_response(),
        None => not_found(&format!("gpus.tessera.dev \"{name}\"")),
    }
}

/// Server-side apply by the only manager there is: the applied spec replaces the stored one.
async fn apply_gpu(
    State(shared): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let applied = match json_body(&body) {
        Ok(value) => value,
        Err(refused) => return *refused,
    };
    let store = lock(&shared);
    let existed = store.gpus.contains_key(&name);
    let mut gpu = store.gpus.get(&name).cloned().unwrap_or_else(|| json!({}));
    gpu["apiVersion"] = applied["apiVersion"].clone();
    gpu["kind"] = applied["kind"].clone();
    gpu["metadata"] = json!({"name": name});
    gpu["spec"] = applied["spec"].clone();
    let kind = if existed { "MODIFIED" } else { "ADDED" };
    Json(commit_gpu(&shared, store, name, gpu, kind)).into_response()
}

async fn apply_gpu_status(
    State(shared): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let applied = match json_body(&body) {
        Ok(value) => value,
        Err(refused) => return *refused,
    };
    let store = lock(&shared);
    let Some(mut gpu) = store.gpus.get(&name).cloned() else {
        return not_found(&format!("gpus.tessera.dev \"{name}\""));
    };
    gpu["status"] = applied["status"].clone();
    Json(commit_gpu(&shared, store, name, gpu, "MODIFIED")).into_response()
}

async fn delete_gpu(State(shared): State<Shared>, Path(name): Path<String>) -> Response {
    let mut store = lock(&shared);
    match store.gpus.remove(&name) {
        Some(mut gpu) => {
            let event = store.record(Kind::Gpus, "DELETED", &mut gpu);
            drop(store);
            let _ = shared.1.send(event);
            Json(gpu).into_response()
        }
        None => not_found(&format!("gpus.tessera.dev \"{name}\"")),
    }
}

async fn list_slices(State(shared): State<Shared>) -> Response {
    let store = lock(&shared);
    Json(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
        "metadata": {"resourceVersion": store.version.to_string()},
        "items": store.slices.values().cloned().collect::<Vec<_>>(),
    }))
    .into_response()
}

async fn get_slice(State(shared): State<Shared>, Path(name): Path<String>) -> Response {
    match lock(&shared).slices.get(&name) {
        Some(slice) => Json(slice.clone()).into_response(),
        None => not_found(&format!("resourceslices.resource.k8s.io \"{name}\"")),
    }
}

/// Server-side apply by the only manager there is: the applied object replaces the stored one.
async fn apply_slice(
    State(shared): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let mut applied = match json_body(&body) {
        Ok(value) => value,
        Err(refused) => return *refused,
    };
    if applied["apiVersion"] != "resource.k8s.io/v1" || applied["kind"] != "ResourceSlice" {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "apply of {} {} to resourceslices",
                applied["apiVersion"], applied["kind"]
            ),
        );
    }
    let mut store = lock(&shared);
    store.version += 1;
    applied["metadata"]["name"] = json!(name);
    applied["metadata"]["resourceVersion"] = json!(store.version.to_string());
    store.slices.insert(name, applied.clone());
    Json(applied).into_response()
}

async fn delete_slice(State(shared): State<Shared>, Path(name): Path<String>) -> Response {
    match lock(&shared).slices.remove(&name) {
        Some(slice) => Json(slice).into_response(),
        None => not_found(&format!("resourceslices.resource.k8s.io \"{name}\"")),
    }
}

async fn get_claim(
    State(shared): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    match lock(&shared).claims.get(&(ns, name.clone())) {
        Some(claim) => Json(claim.clone()).into_response(),
        None => not_found(&format!("resourceclaims.resource.k8s.io \"{name}\"")),
    }
}
