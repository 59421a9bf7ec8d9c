//! The command line, declared once: the commands and flags below drive parsing, help,
//! "did you mean" hints and shell completions alike. Each command is one short function in
//! [`commands`], a thin client of the control socket (or, for `run` and `demo`, of the
//! library's daemon).
//!
//! Exit status: 0, the command's own status (`exec`, `demo`), 1 when the command failed
//! (one line on stderr with the cause), 2 for a command line that does not parse.

mod commands;
mod connect;
mod error;
mod output;

use clap::{Args, CommandFactory, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

pub use error::CliError;

/// controld: the Tessera node daemon and its CLI.
#[derive(Debug, Parser)]
#[command(name = "controld", version)]
pub struct Cli {
    #[command(flatten)]
    place: Place,
    /// Without one, the help is printed.
    #[command(subcommand)]
    command: Option<Command>,
}

/// Where the node's daemon keeps its state; every command takes these.
#[derive(Debug, Args)]
pub struct Place {
    /// Config file (default /etc/tessera/controld.toml; clients read only its [daemon]).
    #[arg(long, value_name = "FILE", global = true)]
    config: Option<PathBuf>,
    /// State dir: regions and the control socket (default $TESSERA_STATE_DIR, the
    /// config's, /run/tessera).
    #[arg(long, value_name = "DIR", global = true)]
    state_dir: Option<PathBuf>,
}

/// Every command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (SIGHUP reloads the config; SIGTERM stops it, regions stay).
    Run,
    /// Add, change, remove or list containers.
    #[command(subcommand)]
    Container(ContainerCommand),
    /// Per GPU: containers, policy, priority, memory used/cap, shares, processes.
    Status {
        #[command(flatten)]
        socket: Socket,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run CMD in a transient container, removed when it exits; exits with its code.
    Exec(ExecArgs),
    /// Print a CDI spec with a device tessera.dev/container=NAME per container (or write it
    /// with --output).
    Cdi {
        #[command(flatten)]
        socket: Socket,
        /// Write the spec to FILE, like /etc/cdi/tessera.json, instead of printing it.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Three containers share one GPU (simgpu's when there is none): a live view, then a
    /// summary.
    Demo(DemoArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish or powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `controld container ...`.
#[derive(Debug, Subcommand)]
pub enum ContainerCommand {
    /// Add a container.
    Add {
        /// The container's name.
        name: String,
        #[command(flatten)]
        limits: Limits,
        #[command(flatten)]
        socket: Socket,
    },
    /// Change a container; its processes see new caps at their next allocation.
    Set {
        /// The container's name.
        name: String,
        #[command(flatten)]
        limits: Limits,
        #[command(flatten)]
        socket: Socket,
    },
    /// Remove a container.
    Rm {
        /// The container's name.
        name: String,
        /// Remove it even while its processes run (they keep their caps).
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        socket: Socket,
    },
    /// List the containers.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        socket: Socket,
    },
}

/// The control socket of a client command.
#[derive(Debug, Args)]
pub struct Socket {
    /// Control socket (default <state dir>/control.sock).
    #[arg(long = "socket", value_name = "PATH")]
    path: Option<PathBuf>,
}

/// A container's limits, as given. Read by [`connect`] so that a bad value is a one-line
/// error of the command (status 1) that names what to write.
#[derive(Debug, Args)]
pub struct Limits {
    /// GPU indices it may use (default 0).
    #[arg(long, alias = "gpu", value_name = "G[,G...]")]
    gpus: Option<String>,
    /// Memory cap per GPU, like 4GiB, or unlimited (default unlimited).
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// fixed:Q, burst:Q or best-effort (default best-effort).
    #[arg(long, value_name = "POLICY")]
    compute: Option<String>,
    /// online or offline (default online).
    #[arg(long, value_name = "CLASS")]
    priority: Option<String>,
}

/// `controld exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The transient container's name (default exec-<pid>).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    #[command(flatten)]
    limits: Limits,
    #[command(flatten)]
    socket: Socket,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD [ARGS...]")]
    command: Vec<OsString>,
}

/// `controld demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long the demo's workloads run, in whole seconds (default 15).
    #[arg(long, value_name = "N")]
    seconds: Option<String>,
    /// Print only the start and the summary.
    #[arg(long)]
    no_live: bool,
    /// Use a simulated GPU even where a real one is present.
    #[arg(long)]
    simgpu: bool,
}

/// Runs the command line of this process; returns its exit status.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Usage errors exit 2 with clap's hint; `--help` and `--version` exit 0 (also
        // into a closed pipe: clap ignores the write error).
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("controld: {}", e.chain());
            1
        }
    }
}

/// Runs one parsed command line; the exit status of a command that ran.
pub fn run(cli: Cli) -> Result<i32, CliError> {
    let place = &cli.place;
    let Some(command) = cli.command else {
        return output::print(&Cli::command().render_help().to_string());
    };
    match command {
        Command::Run => commands::run_daemon(place),
        Command::Container(ContainerCommand::Add {
            name,
            limits,
            socket,
        }) => commands::container_add(&connect::Target { place, socket }, &name, &limits),
        Command::Container(ContainerCommand::Set {
            name,
            limits,
            socket,
        }) => commands::container_set(&connect::Target { place, socket }, name, &limits),
        Command::Container(ContainerCommand::Rm {
            name,
            force,
            socket,
        }) => commands::container_rm(&connect::Target { place, socket }, name, force),
        Command::Container(ContainerCommand::List { json, socket }) => {
            commands::container_list(&connect::Target { place, socket }, json)
        }
        Command::Status { socket, json } => {
            commands::status(&connect::Target { place, socket }, json)
        }
        Command::Exec(ExecArgs {
            name,
            limits,
            socket,
            command,
        }) => commands::exec(
            &connect::Target { place, socket },
            name.as_deref(),
            &limits,
            &command,
        ),
        Command::Cdi { socket, output } => {
            commands::cdi(&connect::Target { place, socket }, output.as_deref())
        }
        Command::Demo(args) => commands::demo(&args),
        Command::Completions { shell } => commands::completions(shell, &mut Cli::command()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("controld").chain(line.split_whitespace()))
    }

    #[test]
    fn the_declaration_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn commands_and_flags() {
        let cli = parse("container add web --gpu 0,1 --memory=4GiB").unwrap();
        let Some(Command::Container(ContainerCommand::Add { name, limits, .. })) = cli.command
        else {
            panic!("not container add: {cli:?}")
        };
        assert_eq!(name, "web");
        assert_eq!(limits.gpus.as_deref(), Some("0,1"));
        assert_eq!(limits.memory.as_deref(), Some("4GiB"));
        let cli = parse("exec --memory 2GiB -- gpuload alloc --chunk 1").unwrap();
        let Some(Command::Exec(exec)) = cli.command else {
            panic!("not exec: {cli:?}")
        };
        assert_eq!(exec.command, ["gpuload", "alloc", "--chunk", "1"]);
        let cli = parse("status --state-dir /srv/tessera --json").unwrap();
        assert_eq!(cli.place.state_dir, Some(PathBuf::from("/srv/tessera")));
        assert!(parse("").unwrap().command.is_none());
        assert_eq!(
            parse("status --help").unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelp
        );
    }

    #[test]
    fn mistakes_are_usage_errors() {
        for bad in [
            "bogus",
            "container",
            "container add",
            "container add a b",
            "status --force",
            "status --json --json",
            "container add a --memory",
            "exec --memory 1g",
            "status -x",
        ] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.exit_code(), 2, "{bad}: {err}");
        }
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("container"), "{help}");
    }
}
