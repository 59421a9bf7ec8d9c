//! `libtessera.so`, the library preloaded into CUDA processes.
//!
//! Nothing is hooked yet; interception arrives with the memory-cap work.
