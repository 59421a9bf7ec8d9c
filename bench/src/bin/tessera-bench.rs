//! `tessera-bench`: the scenario runner and the report. `scenario` runs isolation scenarios
//! on a simulated node with the programs of its own build directory and prints their table;
//! `report` builds the programs, runs the hook benchmarks and every scenario, and writes
//! `bench/RESULTS.md` and its plots from that one run.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};
use tessera_bench::scenario::hook_costs;
use tessera_bench::scenario::{
    self, Bins, HookFigures, Options, Outcome, Report, RunInfo, ScenarioError, REPORT_COMMAND,
    SCENARIOS,
};

/// tessera-bench: Tessera's isolation scenarios and hook costs, measured on simgpu.
#[derive(Debug, Parser)]
#[command(name = "tessera-bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Every command.
#[derive(Debug, Subcommand)]
enum Command {
    /// Build the programs the scenarios run (cargo build --release), run the hook
    /// benchmarks and every scenario with its baseline, and write RESULTS.md and
    /// plots/*.svg from that run into bench/ (replacing them).
    Report(ReportArgs),
    /// Run scenarios and print their table; writes nothing.
    Scenario(ScenarioArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish or powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// How the scenarios run, for both commands.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Length of each scenario's main phase (default: the scenario's own).
    #[arg(long, value_name = "S", value_parser = positive_seconds)]
    seconds: Option<f64>,
    /// Skip the runs without Tessera.
    #[arg(long)]
    no_baseline: bool,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

/// `tessera-bench report`.
#[derive(Debug, clap::Args)]
struct ReportArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Run only these scenarios.
    #[arg(long, value_name = "A,B", value_delimiter = ',', value_parser = scenario_names(false))]
    only: Option<Vec<&'static str>>,
    /// Skip the hook benchmarks.
    #[arg(long)]
    no_criterion: bool,
    /// Use the programs already built beside this one.
    #[arg(long)]
    no_build: bool,
    /// Write RESULTS.md and plots/ into DIR (default: bench/).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// `tessera-bench scenario`.
#[derive(Debug, clap::Args)]
struct ScenarioArgs {
    /// The scenario to run, or all.
    #[arg(value_name = "NAME|all", required_unless_present = "list", value_parser = scenario_names(true))]
    name: Option<&'static str>,
    /// List the scenarios.
    #[arg(long, conflicts_with = "name")]
    list: bool,
    #[command(flatten)]
    run: RunArgs,
}

/// The word that names every scenario.
const ALL: &str = "all";

/// The scenarios' names (and [`ALL`]) as the values a name may take: clap checks them and
/// suggests the nearest for a misspelt one.
fn scenario_names(all: bool) -> impl TypedValueParser<Value = &'static str> {
    let names = SCENARIOS.iter().map(|s| s.name);
    let names: Vec<&str> = if all {
        names.chain([ALL]).collect()
    } else {
        names.collect()
    };
    PossibleValuesParser::new(names).try_map(|name| match scenario::find(&name) {
        Some(s) => Ok(s.name),
        None if name == ALL => Ok(ALL),
        None => Err(format!("no scenario `{name}`")),
    })
}

/// `--seconds`: a length of time in seconds, more than 0.
fn positive_seconds(text: &str) -> Result<f64, &'static str> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        Ok(_) => Err("must be more than 0"),
        Err(_) => Err("not a number"),
    }
}

/// The command line with its help: the declaration above, and after it what only this
/// build knows (the report's commands and the scenarios).
fn command() -> clap::Command {
    let mut after = format!(
        "The report command a newcomer runs: {REPORT_COMMAND}\n\
         Its hook benchmarks: {}\n\n\
         The scenarios run controld, gpuload, simgpu and libtessera.so from this program's own\n\
         directory (`scenario` needs them built first: cargo build --release --workspace).\n\
         Exit status 0 when every check passed, 1 when one failed (the report is still\n\
         written), 2 when something could not run.\n\nScenarios:\n",
        hook_costs::bench_command()
    );
    for s in SCENARIOS {
        after += &format!("  {:<16} {}. {}\n", s.name, s.item, s.about);
    }
    Cli::command().after_help(after)
}

/// What to do.
#[derive(Debug)]
enum Action {
    /// Run scenarios and print their table.
    Scenario,
    /// Build, benchmark, run the scenarios and write the report.
    Report {
        build: bool,
        criterion: bool,
        out: PathBuf,
    },
}

/// A run the command line asks for.
#[derive(Debug)]
struct Args {
    action: Action,
    names: Vec<&'static str>,
    options: Options,
}

/// What the command line asks.
enum Parsed {
    Run(Args),
    List,
    Completions(clap_complete::Shell),
}

fn options(run: &RunArgs) -> Options {
    Options {
        seconds: run.seconds,
        baseline: !run.no_baseline,
        verbose: !run.quiet,
    }
}

fn parse(cli: Cli) -> Parsed {
    let every = || SCENARIOS.iter().map(|s| s.name).collect();
    match cli.command {
        Command::Report(r) => Parsed::Run(Args {
            action: Action::Report {
                build: !r.no_build,
                criterion: !r.no_criterion,
                out: r
                    .out
                    .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
            },
            names: r.only.unwrap_or_else(every),
            options: options(&r.run),
        }),
        Command::Scenario(s) if s.list => Parsed::List,
        Command::Scenario(s) => Parsed::Run(Args {
            action: Action::Scenario,
            names: match s.name {
                Some(ALL) | None => every(),
                Some(name) => vec![name],
            },
            options: options(&s.run),
        }),
        Command::Completions { shell } => Parsed::Completions(shell),
    }
}

/// Prints to stdout; a reader that went away (`tessera-bench scenario --list | head`) is not
/// an error, and the exit status stays the run's.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("tessera-bench: cannot write the output: {e}");
        }
    }
}

/// Runs the named scenarios in order; the outcomes, and the scenarios that could not run
/// with why.
fn run_scenarios(
    names: &[&'static str],
    bins: &Bins,
    options: &Options,
) -> (Vec<Outcome>, Vec<(String, String)>) {
    let mut outcomes = Vec::new();
    let mut broken = Vec::new();
    for name in names {
        if options.verbose {
            eprintln!("scenario {name}");
        }
        match scenario::run_named(name, bins, options) {
            Ok(o) => {
                if options.verbose {
                    eprintln!("  took {:.0} s", o.wall.as_secs_f64());
                }
                outcomes.push(o);
            }
            Err(e) => {
                eprintln!("tessera-bench: scenario {name} could not run: {e}");
                broken.push((name.to_string(), e.to_string()));
            }
        }
    }
    (outcomes, broken)
}

/// The workspace this program was built from.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The cargo that runs this program (`cargo run` sets `CARGO`), else `cargo` on `PATH`.
fn cargo() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from)
}

/// This process's stderr, for a child's stdout: the console table stays alone on stdout.
fn stderr() -> Stdio {
    use std::os::fd::AsFd;
    std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_or_else(|_| Stdio::inherit(), Stdio::from)
}

/// The packages of the programs the scenarios run (the test crates need not be built).
const PACKAGES: [&str; 6] = [
    "tessera-controld",
    "tessera-bench",
    "tessera-intercept",
    "simgpu",
    "simgpu-cuda",
    "simgpu-nvml",
];

/// `cargo build` of [`PACKAGES`] in the profile of this program's own directory, so that
/// every program the scenarios run is there and current.
fn build_programs(verbose: bool) -> Result<Duration, ScenarioError> {
    let exe = std::env::current_exe().map_err(ScenarioError::start("find this program"))?;
    let profile = match exe
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
    {
        Some("debug") => None,
        Some(other) => Some(other.to_string()),
        None => None,
    };
    let mut cmd = std::process::Command::new(cargo());
    cmd.current_dir(workspace()).arg("build");
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    if let Some(p) = &profile {
        cmd.args(["--profile", p]);
    }
    if verbose {
        eprintln!(
            "report: building the programs (cargo build{} -p {})",
            profile
                .map(|p| format!(" --profile {p}"))
                .unwrap_or_default(),
            PACKAGES.join(" -p ")
        );
    }
    let start = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(stderr())
        .status()
        .map_err(ScenarioError::start("run cargo"))?;
    if !status.success() {
        return Err(ScenarioError::Failed {
            what: "cargo build".into(),
            status,
        });
    }
    Ok(start.elapsed())
}

/// The command line as it was given, behind `cargo run --release -p tessera-bench --`.
fn command_line() -> String {
    let mut command = String::from("cargo run --release -p tessera-bench --");
    for a in std::env::args().skip(1) {
        command += " ";
        command += &a;
    }
    command
}

fn report(args: &Args, build: bool, criterion: bool, out: &Path) -> ExitCode {
    let start = Instant::now();
    // The commit the run measures: read before the build, so that edits made while it runs
    // are not credited to it.
    let commit = scenario::commit(&workspace());
    let verbose = args.options.verbose;
    let mut phases = Vec::new();
    if build {
        match build_programs(verbose) {
            Ok(took) => phases.push(("build".to_string(), took)),
            Err(e) => {
                eprintln!("tessera-bench: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let bins = match Bins::beside_current_exe() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tessera-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let hooks = if criterion {
        let target = bins.dir.parent().unwrap_or(&bins.dir);
        let home = hook_costs::home(target);
        if verbose {
            eprintln!("report: hook benchmarks ({})", hook_costs::bench_command());
        }
        match hook_costs::run(&cargo(), &workspace(), &home) {
            Ok(took) => {
                phases.push(("hook benchmarks".to_string(), took));
                HookFigures::Measured(hook_costs::read(&home), took)
            }
            Err(e) => {
                eprintln!("tessera-bench: {e}");
                HookFigures::Failed(e.to_string())
            }
        }
    } else {
        HookFigures::Skipped
    };
    let scenarios_start = Instant::now();
    let (outcomes, broken) = run_scenarios(&args.names, &bins, &args.options);
    phases.push(("scenarios".to_string(), scenarios_start.elapsed()));
    emit(&scenario::render_table(&outcomes));
    let report = Report {
        info: RunInfo {
            command: command_line(),
            commit,
            machine: scenario::machine(),
            date: scenario::today(),
        },
        hooks,
        outcomes,
        broken,
        options: args.options.clone(),
        phases,
        took: start.elapsed(),
    };
    let mut trouble = !report.broken.is_empty() || matches!(report.hooks, HookFigures::Failed(_));
    match scenario::write_report(out, &report) {
        Ok(files) => {
            for f in files {
                eprintln!("wrote {}", f.display());
            }
            eprintln!("the run took {}", scenario::span(report.took));
        }
        Err(e) => {
            eprintln!("tessera-bench: {e}");
            trouble = true;
        }
    }
    let hooks_pass = match &report.hooks {
        HookFigures::Measured(costs, _) => costs
            .stub
            .iter()
            .chain(&costs.simgpu)
            .all(|c| c.pass() != Some(false)),
        _ => true,
    };
    if trouble {
        ExitCode::from(2)
    } else if hooks_pass && report.outcomes.iter().all(Outcome::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2 with clap's hint; `--help` exits 0.
    let cli = command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
        .unwrap_or_else(|e| e.exit());
    let args = match parse(cli) {
        Parsed::Run(a) => a,
        Parsed::List => {
            let list: String = SCENARIOS
                .iter()
                .map(|s| format!("{:<16} {}. {}\n", s.name, s.item, s.about))
                .collect();
            emit(&list);
            return ExitCode::SUCCESS;
        }
        Parsed::Completions(shell) => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command(), "tessera-bench", &mut script);
            emit(&String::from_utf8_lossy(&script));
            return ExitCode::SUCCESS;
        }
    };
    if let Action::Report {
        build,
        criterion,
        out,
    } = &args.action
    {
        return report(&args, *build, *criterion, out);
    }
    let bins = match Bins::beside_current_exe() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tessera-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let (outcomes, broken) = run_scenarios(&args.names, &bins, &args.options);
    emit(&scenario::render_table(&outcomes));
    if !broken.is_empty() {
        ExitCode::from(2)
    } else if outcomes.iter().all(Outcome::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Parsed, clap::Error> {
        let cli = command()
            .try_get_matches_from(std::iter::once("tessera-bench").chain(line.split_whitespace()))
            .and_then(|m| Cli::from_arg_matches(&m))?;
        Ok(parse(cli))
    }

    /// The run `line` asks for, or what is said instead: clap's message, `list` or
    /// `completions`.
    fn args(line: &str) -> Result<Args, String> {
        match parsed(line) {
            Ok(Parsed::Run(a)) => Ok(a),
            Ok(Parsed::List) => Err("list".into()),
            Ok(Parsed::Completions(_)) => Err("completions".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn the_declaration_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn scenario_command_lines() {
        let a = args("scenario all").unwrap();
        assert_eq!(a.names.len(), SCENARIOS.len());
        assert!(a.options.baseline && matches!(a.action, Action::Scenario));
        let a = args("scenario mixed --seconds 2.5 --no-baseline").unwrap();
        assert_eq!(a.names, ["mixed"]);
        assert_eq!(a.options.seconds, Some(2.5));
        assert!(!a.options.baseline);
        assert!(args("scenario nope")
            .unwrap_err()
            .contains("invalid value 'nope'"));
        assert!(args("scenario mixd").unwrap_err().contains("'mixed'"));
        assert!(args("scenario").unwrap_err().contains("NAME|all"));
        assert!(args("run all")
            .unwrap_err()
            .contains("unrecognized subcommand"));
        assert!(args("scenario all --seconds 0").is_err());
        assert!(args("scenario all --bogus")
            .unwrap_err()
            .contains("unexpected argument"));
        assert!(args("scenario all --no-criterion")
            .unwrap_err()
            .contains("unexpected argument"));
        assert_eq!(args("scenario --list").unwrap_err(), "list");
        assert!(args("--help").unwrap_err().contains("Usage: tessera-bench"));
    }

    #[test]
    fn report_command_lines() {
        let a = args("report").unwrap();
        assert_eq!(a.names.len(), SCENARIOS.len());
        match a.action {
            Action::Report {
                build,
                criterion,
                out,
            } => {
                assert!(build && criterion);
                assert!(out.ends_with("bench"), "{}", out.display());
            }
            Action::Scenario => panic!("not a report"),
        }
        let a = args(
            "report --only fixed-alone,memory-caps --seconds 1 --no-criterion --no-build --out x",
        )
        .unwrap();
        assert_eq!(a.names, ["fixed-alone", "memory-caps"]);
        assert!(matches!(
            a.action,
            Action::Report { build: false, criterion: false, ref out } if out == Path::new("x")
        ));
        assert!(args("report --only fixed-alone,nope")
            .unwrap_err()
            .contains("invalid value 'nope'"));
        assert!(args("report all").unwrap_err().contains("unexpected"));
    }

    #[test]
    fn help_names_every_scenario_and_the_report_command() {
        let h = command().render_help().to_string();
        assert!(SCENARIOS.iter().all(|s| h.contains(s.name)));
        assert!(h.contains(REPORT_COMMAND));
    }
}
