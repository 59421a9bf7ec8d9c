//! `controld`, the node daemon and its CLI.

pub mod status;
