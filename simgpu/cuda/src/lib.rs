//! The simulated CUDA driver, `libcuda.so.1`.
//!
//! Every entry point is exported under the driver's own name (and its `_v2`, `_ptsz`, `_ptds`
//! variants) through [`ffi::cuda_entry!`], which catches panics and maps `Err` to the
//! driver's error codes. State shared with other processes (devices, memory in use, the
//! execution engine) lives in the node state of the `simgpu` crate.
//!
//! Two layers: [`model`] holds the driver's state and what can be done with it, and exports
//! nothing; the files beside it (`context.rs`, `stream.rs`, `memory/`, ...) are the entry
//! points, which translate C arguments into calls into the model and its results into
//! result codes. The model imports nothing from them.

#[macro_use]
pub mod ffi;

mod absent;
mod context;
mod device;
mod driver;
mod error;
mod event;
mod export_table;
mod graph;
mod init;
mod launch;
mod memory;
mod model;
mod module;
mod peer;
mod proc_address;
mod rm;
mod stream;
mod tensor_map;
