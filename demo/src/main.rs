//! `tessera-demo`: three containers sharing one GPU, watched live, then summed up.
//!
//! On a machine without a GPU (or when asked) the GPU is simgpu's: a node of its own in a
//! temporary directory, with one simulated H200. A daemon runs in this process on a
//! temporary state dir; three containers are declared in its config — an online service, an
//! offline trainer and a fixed-share job — and each runs `gpuload` processes the way
//! `controld exec` runs a command. Every half second the view shows, per container, its
//! policy, memory and share of GPU time; at the end a summary gives the averages, the peaks
//! and the workloads' own reports. Everything it started is stopped and everything it made
//! is removed, on Ctrl-C too.
//!
//! A crate of its own so that the daemon's crate never links the simulator. Imports run one
//! way: `run` uses the rest; `view` and `measure` read `workload`, which uses `backend`; all
//! of them read the plain data of `plan` and `error`.

mod backend;
mod error;
mod measure;
mod plan;
mod run;
mod view;
mod workload;

use clap::Parser;

/// tessera-demo: three containers share one GPU (simgpu's when there is none): a live
/// view, then a summary.
#[derive(Debug, Parser)]
#[command(name = "tessera-demo", version)]
struct Cli {
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

/// Exit status: the demo's own (0, 1 when a workload failed, 128 + N after signal N), 1 when
/// it could not run (one line on stderr with the cause), 2 for a command line that does not
/// parse (clap's message).
fn main() {
    // Usage errors exit 2 with clap's hint; `--help` and `--version` exit 0.
    let cli = Cli::parse();
    let seconds = match &cli.seconds {
        Some(text) => match text.parse().ok().filter(|&n| n > 0) {
            Some(n) => n,
            None => {
                eprintln!(
                    "tessera-demo: --seconds {text}: give a whole number of seconds, like 15"
                );
                std::process::exit(1);
            }
        },
        None => run::DEFAULT_SECONDS,
    };
    let options = run::Options {
        seconds,
        live: !cli.no_live,
        force_simgpu: cli.simgpu,
    };
    let code = match run::run(&options) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tessera-demo: {}", tessera_controld::report::one_line(&e));
            1
        }
    };
    std::process::exit(code);
}
