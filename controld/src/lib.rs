//! `controld`, the node daemon and its CLI.
//!
//! The daemon ([`daemon`]) owns the node's Tessera state ([`state`]): one region per
//! container under the state dir, declared in the config file ([`config`]) or added through
//! the control socket ([`api`]); the reaper ([`reaper`]) returns what dead processes held.
//! The CLI ([`cli`]) is a thin client of the socket.

pub mod api;
pub mod cdi;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod dir_lock;
pub mod exec;
pub mod logging;
pub mod metrics;
pub mod policy;
pub mod reaper;
pub mod scheduler;
pub mod signals;
pub mod spec;
pub mod state;
pub mod status;
pub mod watchdog;
