//! A simulated GPU node.
//!
//! Every process on the node maps one state file (`SIMGPU_STATE`): the devices, the memory
//! each process holds on each, and one execution engine per device that the processes
//! time-slice. The simulated driver (`libcuda.so.1`, in `cuda/`) and NVML
//! (`libnvidia-ml.so.1`, in `nvml/`) are thin layers over this crate; the `simgpu` CLI reads
//! the same state.

pub mod cli;
pub mod clock;
pub mod config;
pub mod device;
pub mod engine;
mod futex;
pub mod node;
pub mod units;
