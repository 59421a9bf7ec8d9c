//! Workloads and benchmarks.
