//! `simgpu`: look at and manage the simulated GPU node.

use std::process::ExitCode;

const USAGE: &str = "\
usage: simgpu <command>

commands:
  lib-dir        print a directory holding libcuda.so.1 and libnvidia-ml.so.1 (for LD_LIBRARY_PATH)
  stat [--json]  show the devices and, per process, its memory and engine busy time
  reset          replace the node state with a new one (devices from SIMGPU_DEVICES)
  help           show this text

environment: SIMGPU_STATE (the node state file), SIMGPU_DEVICES, SIMGPU_QUANTUM_US,
SIMGPU_CONTEXT_MEMORY, SIMGPU_KERNEL_NS";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["lib-dir"] => simgpu::cli::lib_dir(),
        ["stat"] => simgpu::cli::stat(false),
        ["stat", "--json"] => simgpu::cli::stat(true),
        ["reset"] => simgpu::cli::reset(),
        [] | ["help"] | ["--help"] | ["-h"] => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("simgpu: unknown arguments `{}`\n\n{USAGE}", args.join(" "));
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("simgpu: {e}");
            ExitCode::FAILURE
        }
    }
}
