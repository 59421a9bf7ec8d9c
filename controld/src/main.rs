//! `controld`: the Tessera node daemon and its CLI (see `controld --help`).

fn main() {
    let code = tessera_controld::cli::main(std::env::args_os().skip(1).collect());
    std::process::exit(code);
}
