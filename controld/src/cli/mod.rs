//! The command line: its declaration ([`declaration`]), one short function per command
//! ([`commands`]), each a thin client of the control socket (or, for `run`, of the library's
//! daemon), and errors as one line with their causes ([`error`]).
//!
//! Exit status: 0, the command's own status (`exec`), 1 when the command failed
//! (one line on stderr with the cause), 2 for a command line that does not parse (clap's
//! message, with a hint for a misspelt command or flag).

mod commands;
mod connect;
mod declaration;
mod error;
mod output;
mod render;

use clap::{CommandFactory, Parser};
use declaration::{Cli, Command, ContainerCommand, ExecArgs};
use error::CliError;

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
fn run(cli: Cli) -> Result<i32, CliError> {
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
        Command::Completions { shell } => commands::completions(shell, &mut Cli::command()),
    }
}
