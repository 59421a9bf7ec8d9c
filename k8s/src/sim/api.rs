//! A fake API server on 127.0.0.1 that the real kube client talks to: pods (get, list and
//! watch by node), events (create), and the cluster-scoped `gpus` of tessera.dev/v1alpha1
//! (list, server-side apply of the object and of its status, delete).

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// What the server holds.
#[derive(Default)]
pub struct Store {
    version: u64,
    pods: BTreeMap<(String, String), Value>,
    /// Every pod watch event so far, by version, so that a watch from a version misses none.
    history: Vec<(u64, Value)>,
    events: Vec<Value>,
    gpus: BTreeMap<String, Value>,
}

type Shared = Arc<(Mutex<Store>, broadcast::Sender<(u64, Value)>)>;

/// The server.
pub struct FakeApi {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Shared,
}

impl FakeApi {
    /// Starts it on the current runtime.
    pub async fn start() -> FakeApi {
        let (tx, _) = broadcast::channel(4096);
        let shared: Shared = Arc::new((Mutex::new(Store::default()), tx));
        let app = Router::new()
            .route("/api/v1/namespaces/{ns}/pods/{name}", get(get_pod))
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
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
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

    /// Creates or changes a pod on `node` with these annotations.
    pub fn put_pod(&self, namespace: &str, name: &str, node: &str, annotations: &[(&str, &str)]) {
        let (store, tx) = &*self.shared;
        let mut store = store.lock().unwrap();
        store.version += 1;
        let version = store.version;
        let key = (namespace.to_string(), name.to_string());
        let kind = if store.pods.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": format!("uid-{namespace}-{name}"),
                "resourceVersion": version.to_string(),
                "annotations": annotations,
            },
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app"}]},
        });
        store.pods.insert(key, pod.clone());
        let event = json!({"type": kind, "object": pod});
        store.history.push((version, event.clone()));
        let _ = tx.send((version, event));
    }

    /// Deletes a pod.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        let (store, tx) = &*self.shared;
        let mut store = store.lock().unwrap();
        if let Some(pod) = store
            .pods
            .remove(&(namespace.to_string(), name.to_string()))
        {
            store.version += 1;
            let version = store.version;
            let event = json!({"type": "DELETED", "object": pod});
            store.history.push((version, event.clone()));
            let _ = tx.send((version, event));
        }
    }

    /// Every event created so far.
    pub fn events(&self) -> Vec<Value> {
        self.shared.0.lock().unwrap().events.clone()
    }

    /// Stores a GPU object as another writer left it.
    pub fn put_gpu(&self, name: &str, gpu: Value) {
        self.shared
            .0
            .lock()
            .unwrap()
            .gpus
            .insert(name.to_string(), gpu);
    }

    /// Every GPU object, by name.
    pub fn gpus(&self) -> BTreeMap<String, Value> {
        self.shared.0.lock().unwrap().gpus.clone()
    }
}

fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({
            "apiVersion": "v1", "kind": "Status", "status": "Failure",
            "message": format!("{what} not found"), "reason": "NotFound", "code": 404,
        })),
    )
        .into_response()
}

async fn get_pod(
    State(shared): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let store = shared.0.lock().unwrap();
    match store.pods.get(&(ns, name.clone())) {
        Some(pod) => Json(pod.clone()).into_response(),
        None => not_found(&format!("pods \"{name}\"")),
    }
}

fn on_node(pod: &Value, selector: Option<&String>) -> bool {
    match selector.and_then(|s| s.strip_prefix("spec.nodeName=")) {
        Some(node) => pod["spec"]["nodeName"] == node,
        None => true,
    }
}

async fn list_pods(
    State(shared): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let selector = q.get("fieldSelector").cloned();
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let (store, tx) = &*shared;
    let store_now = store.lock().unwrap();
    if !watch {
        let items: Vec<Value> = store_now
            .pods
            .values()
            .filter(|p| on_node(p, selector.as_ref()))
            .cloned()
            .collect();
        return Json(json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": store_now.version.to_string()},
            "items": items,
        }))
        .into_response();
    }
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(store_now.version);
    let past: Vec<(u64, Value)> = store_now
        .history
        .iter()
        .filter(|(v, _)| *v > from)
        .cloned()
        .collect();
    let rx = tx.subscribe();
    drop(store_now);
    let last = past.last().map(|(v, _)| *v).unwrap_or(from);
    let state = (past.into_iter(), rx, last, selector);
    let stream =
        futures_util::stream::unfold(state, |(mut past, mut rx, mut last, selector)| async move {
            loop {
                let (version, event) = match past.next() {
                    Some(e) => e,
                    None => match rx.recv().await {
                        Ok(e) => e,
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return None,
                    },
                };
                if version <= last && version != 0 {
                    continue;
                }
                last = version;
                if !on_node(&event["object"], selector.as_ref()) {
                    continue;
                }
                let mut line = serde_json::to_vec(&event).unwrap();
                line.push(b'\n');
                return Some((
                    Ok::<_, std::io::Error>(Bytes::from(line)),
                    (past, rx, last, selector),
                ));
            }
        });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn create_event(
    State(shared): State<Shared>,
    Path(_ns): Path<String>,
    Json(event): Json<Value>,
) -> Response {
    shared.0.lock().unwrap().events.push(event.clone());
    (StatusCode::CREATED, Json(event)).into_response()
}

async fn list_gpus(State(shared): State<Shared>) -> Response {
    let store = shared.0.lock().unwrap();
    Json(json!({
        "apiVersion": "tessera.dev/v1alpha1", "kind": "GPUList",
        "metadata": {"resourceVersion": store.version.to_string()},
        "items": store.gpus.values().cloned().collect::<Vec<_>>(),
    }))
    .into_response()
}

async fn get_gpu(State(shared): State<Shared>, Path(name): Path<String>) -> Response {
    match shared.0.lock().unwrap().gpus.get(&name) {
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
    let Ok(applied) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let mut store = shared.0.lock().unwrap();
    store.version += 1;
    let version = store.version.to_string();
    let gpu = store.gpus.entry(name.clone()).or_insert_with(|| json!({}));
    gpu["apiVersion"] = applied["apiVersion"].clone();
    gpu["kind"] = applied["kind"].clone();
    gpu["metadata"] = json!({"name": name, "resourceVersion": version});
    gpu["spec"] = applied["spec"].clone();
    Json(gpu.clone()).into_response()
}

async fn apply_gpu_status(
    State(shared): State<Shared>,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let Ok(applied) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let mut store = shared.0.lock().unwrap();
    store.version += 1;
    let version = store.version.to_string();
    let Some(gpu) = store.gpus.get_mut(&name) else {
        return not_found(&format!("gpus.tessera.dev \"{name}\""));
    };
    gpu["status"] = applied["status"].clone();
    gpu["metadata"]["resourceVersion"] = json!(version);
    Json(gpu.clone()).into_response()
}

async fn delete_gpu(State(shared): State<Shared>, Path(name): Path<String>) -> Response {
    match shared.0.lock().unwrap().gpus.remove(&name) {
        Some(gpu) => Json(gpu).into_response(),
        None => not_found(&format!("gpus.tessera.dev \"{name}\"")),
    }
}
