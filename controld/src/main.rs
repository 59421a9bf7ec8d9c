//! `controld`: the Tessera node daemon and its CLI (see `controld --help`).
//!
//! The daemon and its API are the library (`tessera_controld`); this binary adds the command
//! line ([`cli`]) and the demo ([`demo`]). Imports run one way: `cli` uses `demo`, both use
//! the library.

mod cli;
mod demo;

fn main() {
    std::process::exit(cli::main());
}
