//! `controld`: the Tessera node daemon and its CLI (see `controld --help`).
//!
//! The daemon and its API are the library (`tessera_controld`); this binary adds the command
//! line ([`cli`]), which uses the library.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
