//! Pods, read from the API server, and the events the plugin leaves on them.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, PostParams};
use std::time::{SystemTime, UNIX_EPOCH};

/// The component named in the events the plugin leaves.
pub const COMPONENT: &str = "tessera-device-plugin";

/// A pod by namespace and name.
pub async fn get(client: &kube::Client, namespace: &str, name: &str) -> Result<Pod, kube::Error> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
}

/// The pods bound to `node`.
pub async fn on_node(client: &kube::Client, node: &str) -> Result<Vec<Pod>, kube::Error> {
    let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
    Ok(Api::<Pod>::all(client.clone()).list(&on_node).await?.items)
}

/// Leaves a warning on a pod, for `kubectl describe pod` to show. Best effort: a failure is
/// logged, the plugin's own log line already says the same.
pub async fn warn(client: &kube::Client, node: &str, pod: &Pod, reason: &str, message: &str) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    // When, for `kubectl describe pod` to order and age it.
    let now = Some(Time(k8s_openapi::chrono::Utc::now()));
    let event = Event {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{pod_name}.{nanos:x}")),
            namespace: Some(namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod_name.clone()),
            namespace: Some(namespace.clone()),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: now.clone(),
        last_timestamp: now,
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.into()),
        }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.into()),
        ..Default::default()
    };
    let posted = Api::<Event>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &event)
        .await;
    if let Err(e) = posted {
        tracing::warn!("cannot leave an event on pod {namespace}/{pod_name}: {e}");
    }
}
