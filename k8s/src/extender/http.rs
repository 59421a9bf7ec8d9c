//! The extender over HTTP, as kube-scheduler calls it: `POST /filter`, `/prioritize`,
//! `/bind`, `/preempt` (the scheduler's `urlPrefix` is the address; the verb names are the
//! paths), and `GET /healthz` (ready: the cluster is read) and `GET /livez` (serving) for
//! the Deployment's probes, also served alone on an address of their own
//! ([`health_router`]) where the kubelet can reach them and the verbs are not exposed.
//!
//! A body that cannot be read is answered, where the protocol has an `Error` field (filter,
//! bind), with that field set and status 200, so that kube-scheduler shows the message on
//! the pod; prioritize and preempt have none and answer 400 with the message as text.

use super::protocol::{
    ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult, ExtenderFilterResult,
    ExtenderPreemptionArgs,
};
use super::verbs::Extender;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// The extender's routes.
pub fn router(extender: Arc<Extender>) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .route("/preempt", post(preempt))
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .with_state(extender)
}

/// The probes alone.
pub fn health_router(extender: Arc<Extender>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .with_state(extender)
}

/// Serves until the listener fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    extender: Arc<Extender>,
) -> std::io::Result<()> {
    axum::serve(listener, router(extender)).await
}

fn read<T: DeserializeOwned>(verb: &str, body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("cannot read the {verb} request: {e}"))
}

fn bad_request(message: String) -> Response {
    tracing::warn!("{message}");
    (StatusCode::BAD_REQUEST, message).into_response()
}

async fn filter(State(extender): State<Arc<Extender>>, body: Bytes) -> Json<ExtenderFilterResult> {
    match read::<ExtenderArgs>("filter", &body) {
        Ok(args) => Json(extender.filter(&args)),
        Err(error) => {
            tracing::warn!("{error}");
            Json(ExtenderFilterResult {
                error,
                ..Default::default()
            })
        }
    }
}

async fn prioritize(State(extender): State<Arc<Extender>>, body: Bytes) -> Response {
    match read::<ExtenderArgs>("prioritize", &body).and_then(|args| extender.prioritize(&args)) {
        Ok(scores) => Json(scores).into_response(),
        Err(message) => bad_request(message),
    }
}

async fn bind(State(extender): State<Arc<Extender>>, body: Bytes) -> Json<ExtenderBindingResult> {
    match read::<ExtenderBindingArgs>("bind", &body) {
        Ok(args) => Json(extender.bind(&args).await),
        Err(error) => {
            tracing::warn!("{error}");
            Json(ExtenderBindingResult { error })
        }
    }
}

async fn preempt(State(extender): State<Arc<Extender>>, body: Bytes) -> Response {
    match read::<ExtenderPreemptionArgs>("preempt", &body).and_then(|args| extender.preempt(&args))
    {
        Ok(result) => Json(result).into_response(),
        Err(message) => bad_request(message),
    }
}

async fn livez() -> &'static str {
    "ok"
}

async fn healthz(State(extender): State<Arc<Extender>>) -> Response {
    if extender.is_ready() {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "reading the cluster").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extender::policy::Config;
    use axum::body::Body;
    use axum::http::{Method, Request};
    use tower::ServiceExt;

    async fn status(router: &Router, method: Method, path: &str) -> StatusCode {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::from("{}"))
            .unwrap();
        router.clone().oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn the_probe_address_serves_the_probes_and_no_verb() {
        let extender = Arc::new(Extender::new(Config::default(), None));
        let probes = health_router(extender.clone());
        // Alive at once; ready once the cluster is read.
        assert_eq!(status(&probes, Method::GET, "/livez").await, StatusCode::OK);
        assert_eq!(
            status(&probes, Method::GET, "/healthz").await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        extender.set_ready();
        assert_eq!(
            status(&probes, Method::GET, "/healthz").await,
            StatusCode::OK
        );
        // The verbs act with the scheduler's rights: never on the address the kubelet
        // reaches.
        for verb in ["/filter", "/prioritize", "/bind", "/preempt"] {
            assert_eq!(
                status(&probes, Method::POST, verb).await,
                StatusCode::NOT_FOUND,
                "{verb}"
            );
        }
        let all = router(extender);
        assert_eq!(status(&all, Method::GET, "/livez").await, StatusCode::OK);
        assert_ne!(
            status(&all, Method::POST, "/filter").await,
            StatusCode::NOT_FOUND
        );
    }
}
