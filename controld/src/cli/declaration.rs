//! The command line, declared once: the commands and flags below drive parsing, help,
//! "did you mean" hints and shell completions alike.

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

/// controld: the Tessera node daemon and its CLI.
#[derive(Debug, Parser)]
#[command(name = "controld", version)]
pub struct Cli {
    #[command(flatten)]
    pub place: Place,
    /// Without one, the help is printed.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Where the node's daemon keeps its state; every command takes these.
#[derive(Debug, Args)]
pub struct Place {
    /// Config file (default /etc/tessera/controld.toml; clients read only its [daemon]).
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// State dir: regions and the control socket (default $TESSERA_STATE_DIR, the
    /// config's, /run/tessera).
    #[arg(long, value_name = "DIR", global = true)]
    pub state_dir: Option<PathBuf>,
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
    pub path: Option<PathBuf>,
}

/// A container's limits, as given. Read by [`connect`] so that a bad value is a one-line
/// error of the command (status 1) that names what to write.
#[derive(Debug, Args)]
pub struct Limits {
    /// GPU indices it may use (default 0).
    #[arg(long, alias = "gpu", value_name = "G[,G...]")]
    pub gpus: Option<String>,
    /// Memory cap per GPU, like 4GiB, or unlimited (default unlimited).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// fixed:Q, burst:Q or best-effort (default best-effort).
    #[arg(long, value_name = "POLICY")]
    pub compute: Option<String>,
    /// online or offline (default online).
    #[arg(long, value_name = "CLASS")]
    pub priority: Option<String>,
    /// Its GPU time slice, like 100us, or driver for the driver's own (default 100us
    /// offline; online 16ms, or the driver's beside another online container).
    #[arg(long, value_name = "TIME")]
    pub timeslice: Option<String>,
}

/// `controld exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The transient container's name (default exec-<pid>).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    #[command(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    pub socket: Socket,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD [ARGS...]")]
    pub command: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;

    use clap::CommandFactory;

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
