//! The control API: JSON lines over a Unix socket in the state dir (mode 0600; a peer must
//! be the daemon's user or root, checked with `SO_PEERCRED`). The CLI speaks it, and so will
//! the Kubernetes device plugin.
//!
//! Each request is one line, each answer one line:
//!
//! ```text
//! {"op":"add","container":{"name":"a","gpus":[0],"memory":"4GiB","compute":"burst:50"}}
//! {"ok":{"container":{"spec":{…},"origin":"api","region":"/run/tessera/a.region"}}}
//! {"op":"set","name":"a","change":{"memory":{"cap":"8GiB"}}}
//! {"op":"rm","name":"a"}                      {"ok":"done"}
//! {"op":"list"}                               {"ok":{"containers":[…]}}
//! {"op":"status"}                             {"ok":{"status":{…}}}
//! {"op":"bogus"}                              {"error":"…"}
//! ```

mod client;
mod protocol;
mod server;

pub use client::{Client, ClientError};
pub use protocol::{Answer, Request, Response, MAX_LINE};
pub use server::{bind, serve, BindError};
