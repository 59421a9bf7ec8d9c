//! The shared-memory ABI between `libtessera.so` and `controld`: one region file per
//! container, read and written only through this crate.
//!
//! Nothing is defined here yet; the layout arrives with the memory-cap work.
