//! `controld`: the Tessera node daemon and its CLI (see `controld --help`).
//!
//! The daemon and its API are the library (`tessera_controld`); this binary adds the command
//! line ([`cli`]), the status table for people ([`render`]) and the demo ([`demo`]). Imports
//! run one way: `cli` uses `demo` and `render`, `demo` uses `render`, all use the library.

mod cli;
mod demo;
mod render;

fn main() {
    std::process::exit(cli::main());
}
