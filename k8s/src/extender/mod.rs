//! The scheduler extender (`tessera-k8s extender`): kube-scheduler asks it which nodes have
//! a card that fits a pod, how good each is, and lets it bind, so that a pod asking 30 core
//! and 4 GiB lands where one card has both, on the card the policy chooses.
//!
//! - [`protocol`]: the extender protocol's JSON, declared from its definition.
//! - [`policy`]: binpack or spread, per level, with the cluster default and the pod's
//!   overrides; what a pod asks is [`crate::requests`].
//! - [`cluster`]: cards, holders and the assume cache; [`place`]: card choice and node
//!   scores; [`preempt`]: victims that free one card.
//! - [`verbs`]: filter, prioritize, bind, preempt; [`http`]: the routes; [`watch`]: the
//!   GPU objects and pods from the API server.

pub mod cluster;
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

/// Runs the extender on `listen` until the process ends.
pub async fn run(
    config: policy::Config,
    listen: SocketAddr,
    kube: kube::Client,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        format!("cannot listen on {listen}: {e}; is another extender running there?")
    })?;
    let extender = Arc::new(Extender::new(config, Some(kube.clone())));
    tokio::spawn(watch::follow(extender.clone(), kube));
    tracing::info!("extender listening on {listen}");
    http::serve(listener, extender)
        .await
        .map_err(|e| format!("the extender's HTTP server failed: {e}"))
}
