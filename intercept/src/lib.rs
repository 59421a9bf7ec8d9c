//! `libtessera.so`, the library preloaded into CUDA processes (`LD_PRELOAD`).
//!
//! It intercepts the driver entry points listed in the hook table ([`hooks`]) on every path an
//! application resolves them by: symbol interposition (apps linked with `-lcuda`), `dlsym` on
//! the driver's handle ([`dlsym`]), and `cuGetProcAddress` ([`proc_address`]). The handlers
//! enforce the container's memory caps ([`memory`], [`container`]) and compute shares
//! ([`compute`], [`launch`]); everything not hooked
//! goes straight to the real driver ([`driver`]).
//!
//! Nothing here may unwind into the application: every export catches panics. The library is
//! quiet unless `TESSERA_LOG` asks ([`log`]).

mod log;
pub(crate) use log::tlog;

mod compute;
mod container;
mod current;
mod dlsym;
mod driver;
mod env;
mod fork;
mod fork_lock;
mod hooks;
mod launch;
mod memory;
mod nvml_list;
mod proc_address;
mod rm;
mod visibility;

/// Runs when the library is loaded, before the application's `main`: finds the real `dlsym`
/// while no other thread can be asking for it, and registers the fork handler.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn constructor() {
    driver::c_dlsym::init();
    rm::init();
    fork::register();
}

// The loader calls the functions listed in `.init_array`. Not in unit tests: the test binary
// is not a preloaded library.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;
