//! `tessera-k8s`: Tessera on Kubernetes, on the node (see `tessera-k8s --help`).

fn main() {
    std::process::exit(tessera_k8s::cli::main());
}
