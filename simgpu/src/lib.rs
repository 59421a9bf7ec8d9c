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
pub mod node;
pub mod profile;
/// Sizes as every Tessera tool reads and writes them (`16GiB`), from the region crate.
pub use tessera_region::units;

/// The CUDA version the simulated driver implements, as `cuDriverGetVersion` encodes it
/// (1000 × major + 10 × minor): CUDA 13.0, which every runtime from 11.x to 13.0 accepts.
pub const CUDA_DRIVER_VERSION: i32 = 13000;
/// The kernel-mode driver release the node reports through NVML: the R580 branch, which
/// ships CUDA 13.0.
pub const DRIVER_RELEASE: &str = "580.65.06";
