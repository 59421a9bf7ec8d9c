//! `tessera-bench`: the scenario runner and the report. `scenario` runs isolation scenarios
//! on a simulated node with the programs of its own build directory and prints their table;
//! `report` builds the programs, runs the hook benchmarks and every scenario, and writes
//! `bench/RESULTS.md` and its plots from that one run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};
use tessera_bench::scenario::hook_costs;
use tessera_bench::scenario::{
    self, Bins, HookFigures, Options, Outcome, Report, RunInfo, REPORT_COMMAND, SCENARIOS,
};

fn help() -> String {
    let mut h = format!(
        "tessera-bench: Tessera's isolation scenarios and hook costs, measured on simgpu\n\n\
         usage: tessera-bench report [options]\n       \
         tessera-bench scenario NAME|all [options]\n       \
         tessera-bench scenario --list\n\n\
         report     builds the programs the scenarios run (cargo build --release), runs the\n           \
         hook benchmarks ({}) and every\n           \
         scenario with its baseline, and writes RESULTS.md and plots/*.svg from that run\n           \
         into bench/ (replacing them). The command a newcomer runs:\n           \
         {REPORT_COMMAND}\n\
         scenario   runs scenarios and prints their table; writes nothing\n\n\
         options:\n  \
         --seconds S      length of each scenario's main phase (default: the scenario's own)\n  \
         --no-baseline    skip the runs without Tessera\n  \
         --quiet          no progress lines\n  \
         -h, --help       this text\n\
         report only:\n  \
         --only A,B       run only these scenarios\n  \
         --no-criterion   skip the hook benchmarks\n  \
         --no-build       use the programs already built beside this one\n  \
         --out DIR        write RESULTS.md and plots/ into DIR (default: bench/)\n\n\
         The scenarios run controld, gpuload, simgpu and libtessera.so from this program's own\n\
         directory (`scenario` needs them built first: cargo build --release --workspace).\n\
         Exit status 0 when every check passed, 1 when one failed (the report is still\n\
         written), 2 when something could not run.\n\nscenarios:\n",
        hook_costs::bench_command()
    );
    for s in SCENARIOS {
        h += &format!("  {:<16} {}. {}\n", s.name, s.item, s.about);
    }
    h
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

#[derive(Debug)]
struct Args {
    action: Action,
    names: Vec<&'static str>,
    options: Options,
}

enum Parsed {
    Run(Args),
    Help,
    List,
}

fn scenario_named(name: &str) -> Result<&'static str, String> {
    scenario::find(name)
        .map(|s| s.name)
        .ok_or_else(|| format!("no scenario `{name}` (see tessera-bench scenario --list)"))
}

fn parse(argv: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut argv = argv.into_iter();
    let mut command: Option<String> = None;
    let mut name = None;
    let mut only: Option<Vec<&'static str>> = None;
    let (mut build, mut criterion) = (true, true);
    let mut out = None;
    let mut options = Options {
        verbose: true,
        ..Options::default()
    };
    let mut report_only = Vec::new();
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--list" => return Ok(Parsed::List),
            "--no-baseline" => options.baseline = false,
            "--quiet" => options.verbose = false,
            "--seconds" => {
                let v = argv.next().ok_or("--seconds needs a value")?;
                let s: f64 = v
                    .parse()
                    .map_err(|_| format!("--seconds `{v}`: not a number"))?;
                if !(s.is_finite() && s > 0.0) {
                    return Err("--seconds must be more than 0".into());
                }
                options.seconds = Some(s);
            }
            "--only" => {
                let v = argv.next().ok_or("--only needs scenario names")?;
                only = Some(
                    v.split(',')
                        .map(|n| scenario_named(n.trim()))
                        .collect::<Result<_, _>>()?,
                );
                report_only.push("--only");
            }
            "--no-criterion" => {
                criterion = false;
                report_only.push("--no-criterion");
            }
            "--no-build" => {
                build = false;
                report_only.push("--no-build");
            }
            "--out" => {
                out = Some(PathBuf::from(argv.next().ok_or("--out needs a folder")?));
                report_only.push("--out");
            }
            other if other.starts_with('-') => return Err(format!("unknown option {other}")),
            other if command.is_none() => {
                if other != "scenario" && other != "report" {
                    return Err(format!("unknown command `{other}`"));
                }
                command = Some(other.to_string());
            }
            other if name.is_none() && command.as_deref() == Some("scenario") => {
                name = Some(other.to_string())
            }
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    match command.as_deref() {
        None => Err("no command given".into()),
        Some("report") => Ok(Parsed::Run(Args {
            action: Action::Report {
                build,
                criterion,
                out: out.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
            },
            names: only.unwrap_or_else(|| SCENARIOS.iter().map(|s| s.name).collect()),
            options,
        })),
        Some(_) => {
            if let Some(flag) = report_only.first() {
                return Err(format!("{flag} applies to report only"));
            }
            let name = name.ok_or("name a scenario, or all")?;
            let names = if name == "all" {
                SCENARIOS.iter().map(|s| s.name).collect()
            } else {
                vec![scenario_named(&name)?]
            };
            Ok(Parsed::Run(Args {
                action: Action::Scenario,
                names,
                options,
            }))
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
                broken.push((name.to_string(), e));
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
fn build_programs(verbose: bool) -> Result<Duration, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let profile = match exe
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
    {
        Some("debug") => None,
        Some(other) => Some(other.to_string()),
        None => None,
    };
    let mut cmd = Command::new(cargo());
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
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed ({status})"));
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
                HookFigures::Failed(e)
            }
        }
    } else {
        HookFigures::Skipped
    };
    let scenarios_start = Instant::now();
    let (outcomes, broken) = run_scenarios(&args.names, &bins, &args.options);
    phases.push(("scenarios".to_string(), scenarios_start.elapsed()));
    print!("{}", scenario::render_table(&outcomes));
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
    let args = match parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help) => {
            print!("{}", help());
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::List) => {
            for s in SCENARIOS {
                println!("{:<16} {}. {}", s.name, s.item, s.about);
            }
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tessera-bench: {e} (see tessera-bench --help)");
            return ExitCode::from(2);
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
    print!("{}", scenario::render_table(&outcomes));
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

    fn args(line: &str) -> Result<Args, String> {
        match parse(line.split_whitespace().map(String::from))? {
            Parsed::Run(a) => Ok(a),
            Parsed::Help => Err("help".into()),
            Parsed::List => Err("list".into()),
        }
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
        assert!(args("scenario nope").unwrap_err().contains("no scenario"));
        assert!(args("scenario").unwrap_err().contains("name a scenario"));
        assert!(args("run all").unwrap_err().contains("unknown command"));
        assert!(args("scenario all --seconds 0").is_err());
        assert!(args("scenario all --bogus")
            .unwrap_err()
            .contains("unknown option"));
        assert!(args("scenario all --no-criterion")
            .unwrap_err()
            .contains("report only"));
        assert_eq!(args("scenario --list").unwrap_err(), "list");
        assert_eq!(args("--help").unwrap_err(), "help");
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
            .contains("no scenario `nope`"));
        assert!(args("report all").unwrap_err().contains("unexpected"));
    }

    #[test]
    fn help_names_every_scenario_and_the_report_command() {
        let h = help();
        assert!(SCENARIOS.iter().all(|s| h.contains(s.name)));
        assert!(h.contains(REPORT_COMMAND));
    }
}
