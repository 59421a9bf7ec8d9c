//! `controld`, the node daemon and its API.
//!
//! The daemon ([`daemon`]) owns the node's Tessera state ([`state`]): one region per
//! container under the state dir, declared in the config file ([`config`]) or added through
//! the control socket ([`api`]); the reaper ([`reaper`]) returns what dead processes held.
//! The daemon's threads share the state through a [`shared::Core`].
//! The `controld` binary (`src/main.rs`) adds the command line, a thin client of the socket
//! ([`api::Client`]); the `tessera-demo` crate runs a [`daemon::Daemon`] in its own process
//! beside a simulated GPU, which keeps the simulator out of this crate.

pub mod api;
pub mod cdi;
pub mod config;
pub mod daemon;
pub mod dir_lock;
pub mod exec;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod reaper;
pub mod report;
pub mod scheduler;
pub mod shared;
pub mod signals;
pub mod spec;
pub mod state;
pub mod status;
pub mod watchdog;
