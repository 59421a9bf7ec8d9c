//! Tessera on Kubernetes, on the node: one device plugin for two extended resources,
//! `tessera.dev/gpu-core` (percent of a card's time, 100 per card) and
//! `tessera.dev/gpu-memory` (GiB), and a cluster-scoped `GPU` object per card that shows who
//! holds what.
//!
//! The plugin talks to the kubelet through its gRPC protocols ([`proto`], declared in
//! `proto/`), to controld through its control API only ([`controld`]), and to the API server
//! through kube ([`pods`], [`gpu`]).

pub mod annotations;
pub mod cards;
pub mod cli;
pub mod controld;
pub mod gpu;
pub mod ids;
pub mod plugin;
pub mod podresources;
pub mod pods;
pub mod proto;
pub mod uds;
