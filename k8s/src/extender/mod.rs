//! The scheduler extender (`tessera-k8s extender`): kube-scheduler asks it which nodes have
//! a card that fits a pod, how good each is, and lets it bind, so that a pod asking 30 core
//! and 4 GiB lands where one card has both, on the card the policy chooses.
//!
//! - [`protocol`]: the extender protocol's JSON, declared from its definition.
//! - [`policy`]: binpack or spread, per level, with the cluster default and the pod's
//!   overrides; what a pod asks is [`crate::requests`].
//! - [`cluster`]: cards, holders and the assume cache; [`fit`]: whether and where a pod
//!   fits a node, the one judgement of every verb; [`place`]: card choice and node scores;
//!   [`preempt`]: victims that free one card.
//! - [`verbs`]: filter, prioritize, bind, preempt; [`http`]: the routes; [`watch`]: the
//!   GPU objects and pods from the API server.

pub mod cluster;
pub mod fit;
pub mod http;
pub mod place;
pub mod policy;
pub mod preempt;
pub mod protocol;
pub mod verbs;
pub mod watch;

pub use verbs::Extender;

use std::net::SocketAddr;
use std::sync::Arc;

/// Runs the extender on `listen` (and its probes alone on `health`, if given) until the
/// process ends.
pub async fn run(
    config: policy::Config,
    listen: SocketAddr,
    health: Option<SocketAddr>,
    kube: kube::Client,
) -> Result<(), String> {
    let bind = |addr: SocketAddr| async move {
        tokio::net::TcpListener::bind(addr).await.map_err(|e| {
            format!("cannot listen on {addr}: {e}; is another extender running there?")
        })
    };
    let listener = bind(listen).await?;
    let extender = Arc::new(Extender::new(config, Some(kube.clone())));
    if let Some(addr) = health {
        let probes = bind(addr).await?;
        let router = http::health_router(extender.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(probes, router).await {
                tracing::error!("the extender's probes on {addr} stopped: {e}");
            }
        });
    }
    tokio::spawn(watch::follow(extender.clone(), kube));
    tracing::info!("extender listening on {listen}");
    http::serve(listener, extender)
        .await
        .map_err(|e| format!("the extender's HTTP server failed: {e}"))
}
