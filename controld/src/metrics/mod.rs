//! Prometheus metrics: [`render`] writes a [`NodeStatus`](crate::status::NodeStatus) in the
//! text exposition format (version 0.0.4), and [`MetricsServer`] serves it at
//! `GET /metrics` over HTTP/1.1. It runs only where the config names an address.

mod exposition;
mod server;

pub use exposition::{render, CONTENT_TYPE};
pub use server::{MetricsError, MetricsServer, StatusSource};
