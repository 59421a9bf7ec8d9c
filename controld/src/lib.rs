//! `controld`, the node daemon and its CLI.
//!
//! Nothing is here yet; the daemon arrives after the region ABI.
