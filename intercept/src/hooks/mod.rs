//! The hook table's machinery: what one declaration in [`table`] turns into.
//!
//! For each hooked entry
//! - the exported `extern "C"` function ([`exports`]), which counts the call (when asked),
//!   finds the real function, and runs the handler under `catch_unwind` — a panic returns
//!   `CUDA_ERROR_UNKNOWN` / `NVML_ERROR_UNKNOWN`, a missing real function
//!   `CUDA_ERROR_NOT_FOUND` / `NVML_ERROR_FUNCTION_NOT_FOUND` without running the handler;
//! - a module of the same name in [`real`] holding the real function's C signature (`Real`),
//!   its slot, resolved on first use with the C library's `dlsym` on the real library's
//!   handle, and the call counter;
//! - one [`hook::Hook`] in [`HOOKS`], sorted by name (checked at compile time), from which `dlsym`
//!   routing, `cuGetProcAddress` substitution and `tessera_debug_counter` work.
//!
//! A call-only entry gets its module in [`real`] (signature and slot) and nothing else.
//!
//! Imports run one way: [`routing`] → [`exports`] → the handlers → [`real`]; [`exports`] is
//! built with [`hook`] and [`counters`]. The one loop left is the handler of
//! `cuGetProcAddress`, which answers with the table's own exports (itself among them) and so
//! uses [`routing`].

pub(crate) mod counters;
pub(crate) mod exports;
pub(crate) mod hook;
pub(crate) mod real;
pub(crate) mod routing;
mod table;

pub(crate) use exports::HOOKS;
pub(crate) use routing::{find, for_proc_address};

#[cfg(test)]
mod tests;
