//! Workloads and benchmarks.
//!
//! [`driver`] binds the CUDA driver API the way applications reach it (through
//! `cuGetProcAddress_v2`), [`gpu`] wraps a device's primary context and resources, [`kernels`]
//! holds the workload PTX, [`gpuload`] the workloads of the `gpuload` program, and
//! [`scenario`] the isolation scenarios of the `tessera-bench` runner.

pub mod driver;
pub mod gpu;
pub mod gpuload;
pub mod kernels;
pub mod scenario;
