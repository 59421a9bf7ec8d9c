//! Tessera on Kubernetes. On the node: one device plugin for two extended resources,
//! `tessera.dev/gpu-core` (percent of a card's time, 100 per card) and
//! `tessera.dev/gpu-memory` (GiB), and a cluster-scoped `GPU` object per card that shows who
//! holds what.
//!
//! The plugin talks to the kubelet through its gRPC protocols ([`proto`], declared in
//! `proto/`), to controld through its control API only ([`controld`]), and to the API server
//! through kube ([`pods`], [`gpu`]).
//!
//! What a pod asks of the cards ([`requests`]) is read one way for both sides.
//!
//! The other node mode, in place of the device plugin: a Kubernetes DRA driver ([`dra`]) that
//! publishes the cards as a ResourceSlice with consumable capacity and prepares the claims
//! the scheduler allocated into the same controld containers.
//!
//! In the cluster: the kube-scheduler extender ([`extender`]) that places pods on nodes and
//! cards. `sim` (with the cargo feature `sim`, which the tests and the benchmark turn on) is
//! an in-process cluster (a fake API server, simulated nodes and cards, a scheduler loop that
//! calls the extender over HTTP); the binary is built without it.

pub mod annotations;
pub mod cards;
pub mod cli;
pub mod controld;
pub mod dra;
pub mod extender;
pub mod gpu;
pub mod ids;
pub mod plugin;
pub mod podresources;
pub mod pods;
pub mod proto;
pub mod requests;
#[cfg(feature = "sim")]
pub mod sim;
pub mod uds;
