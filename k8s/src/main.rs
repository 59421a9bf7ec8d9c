//! `tessera-k8s`: Tessera's node agent on Kubernetes (see `tessera-k8s --help`).

fn main() {
    std::process::exit(tessera_k8s::cli::main());
}
