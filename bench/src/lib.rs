//! Workloads and benchmarks.
//!
//! [`driver`] binds the CUDA driver API the way applications reach it (through
//! `cuGetProcAddress_v2`), [`gpu`] wraps a device's primary context and resources, [`kernels`]
//! holds the workload PTX, and [`gpuload`] the workloads of the `gpuload` program.

pub mod driver;
pub mod gpu;
pub mod gpuload;
pub mod kernels;
