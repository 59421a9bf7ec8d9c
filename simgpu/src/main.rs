//! `simgpu`: look at and manage the simulated GPU node. The commands are declared once
//! below (parsing, help, hints and completions); each is a function of [`simgpu::cli`].

use clap::{CommandFactory, Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

/// simgpu: look at and manage the simulated GPU node.
#[derive(Debug, Parser)]
#[command(
    name = "simgpu",
    after_help = "Environment: SIMGPU_STATE (the node state file), SIMGPU_DEVICES, \
                  SIMGPU_QUANTUM_US, SIMGPU_CONTEXT_MEMORY, SIMGPU_KERNEL_NS"
)]
struct Cli {
    /// Without one, the help is printed.
    #[command(subcommand)]
    command: Option<Command>,
}

/// Every command.
#[derive(Debug, Subcommand)]
enum Command {
    /// Print a directory holding libcuda.so.1 and libnvidia-ml.so.1 (for LD_LIBRARY_PATH).
    LibDir,
    /// Show the devices and, per process, its memory and engine busy time.
    Stat {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Replace the node state with a new one (devices from SIMGPU_DEVICES).
    Reset,
    /// Print a completion script for SHELL (bash, zsh, fish, elvish or powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Prints `text`; a reader that went away is not an error.
fn print(text: &[u8]) -> simgpu::cli::CliResult {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2 with clap's hint; `--help` exits 0.
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::LibDir) => simgpu::cli::lib_dir(),
        Some(Command::Stat { json }) => simgpu::cli::stat(json),
        Some(Command::Reset) => simgpu::cli::reset(),
        Some(Command::Completions { shell }) => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "simgpu", &mut script);
            print(&script)
        }
        None => print(Cli::command().render_help().to_string().as_bytes()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("simgpu: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declaration_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn commands_parse_and_mistakes_are_usage() {
        let parse = |line: &str| {
            Cli::try_parse_from(std::iter::once("simgpu").chain(line.split_whitespace()))
        };
        assert!(matches!(
            parse("stat --json").unwrap().command,
            Some(Command::Stat { json: true })
        ));
        assert!(matches!(
            parse("lib-dir").unwrap().command,
            Some(Command::LibDir)
        ));
        assert!(parse("").unwrap().command.is_none());
        for bad in ["stat --jsn", "rest", "reset now", "lib-dir --json"] {
            assert_eq!(parse(bad).unwrap_err().exit_code(), 2, "{bad}");
        }
    }
}
