//! The simulated NVML.
