//! `tessera-bench`: the scenario runner. Runs the compute-sharing scenarios on a simulated
//! node with the programs of its own build directory, prints the table and keeps it in
//! `bench/RESULTS.md`.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use tessera_bench::scenario::{self, Bins, Options, RunInfo, SCENARIOS};

fn help() -> String {
    let mut h = String::from(
        "tessera-bench: the compute-sharing scenarios, measured on simgpu\n\n\
         usage: tessera-bench scenario NAME|all [options]\n       \
         tessera-bench scenario --list\n\n\
         options:\n  \
         --seconds S      length of each scenario's main phase (default: the scenario's own)\n  \
         --no-baseline    skip the runs without Tessera\n  \
         --results FILE   the results file to update (default bench/RESULTS.md)\n  \
         --no-write       print the table only\n  \
         --quiet          no progress lines\n  \
         -h, --help       this text\n\n\
         It runs controld, gpuload, simgpu and libtessera.so from its own directory; build them\n\
         first: cargo build --release --workspace. Exit status 0 when every check passed, 1\n\
         when one failed, 2 when a scenario could not run.\n\nscenarios:\n",
    );
    for s in SCENARIOS {
        h += &format!("  {:<16} {}. {}\n", s.name, s.item, s.about);
    }
    h
}

#[derive(Debug)]
struct Args {
    names: Vec<&'static str>,
    options: Options,
    results: Option<PathBuf>,
}

enum Parsed {
    Run(Args),
    Help,
    List,
}

fn parse(argv: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut argv = argv.into_iter();
    let mut command = None;
    let mut name = None;
    let mut options = Options {
        verbose: true,
        ..Options::default()
    };
    let mut results = Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("RESULTS.md"));
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--list" => return Ok(Parsed::List),
            "--no-baseline" => options.baseline = false,
            "--no-write" => results = None,
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
            "--results" => {
                results = Some(PathBuf::from(argv.next().ok_or("--results needs a file")?))
            }
            other if other.starts_with('-') => return Err(format!("unknown option {other}")),
            other if command.is_none() => {
                if other != "scenario" {
                    return Err(format!("unknown command `{other}`"));
                }
                command = Some(());
            }
            other if name.is_none() => name = Some(other.to_string()),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    command.ok_or("no command given")?;
    let name = name.ok_or("name a scenario, or all")?;
    let names = if name == "all" {
        SCENARIOS.iter().map(|s| s.name).collect()
    } else {
        vec![
            scenario::find(&name)
                .ok_or_else(|| format!("no scenario `{name}` (see tessera-bench scenario --list)"))?
                .name,
        ]
    };
    Ok(Parsed::Run(Args {
        names,
        options,
        results,
    }))
}

/// `git rev-parse --short HEAD` of the source tree, `+changes` when it has uncommitted
/// changes; `None` outside git.
fn commit() -> Option<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(&root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty {
        format!("{head}+changes")
    } else {
        head
    })
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
    let bins = match Bins::beside_current_exe() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("tessera-bench: {e}");
            return ExitCode::from(2);
        }
    };
    let mut outcomes = Vec::new();
    let mut broken = false;
    for name in &args.names {
        if args.options.verbose {
            eprintln!("scenario {name}");
        }
        match scenario::run_named(name, &bins, &args.options) {
            Ok(o) => {
                if args.options.verbose {
                    eprintln!("  took {:.0} s", o.wall.as_secs_f64());
                }
                outcomes.push(o);
            }
            Err(e) => {
                eprintln!("tessera-bench: scenario {name} could not run: {e}");
                broken = true;
            }
        }
    }
    print!("{}", scenario::render_table(&outcomes));
    if let Some(path) = &args.results {
        if !outcomes.is_empty() {
            let mut command = String::from("cargo run --release -p tessera-bench --");
            for a in std::env::args().skip(1) {
                command += " ";
                command += &a;
            }
            let info = RunInfo {
                command,
                commit: commit(),
                machine: scenario::machine(),
                date: scenario::today(),
            };
            match scenario::update_results(path, &outcomes, &info) {
                Ok(()) => eprintln!("updated {}", path.display()),
                Err(e) => {
                    eprintln!("tessera-bench: {e}");
                    broken = true;
                }
            }
        }
    }
    if broken {
        ExitCode::from(2)
    } else if outcomes.iter().all(scenario::Outcome::passed) {
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
    fn command_lines() {
        let a = args("scenario all").unwrap();
        assert_eq!(a.names.len(), SCENARIOS.len());
        assert!(a.options.baseline && a.results.is_some());
        let a = args("scenario mixed --seconds 2.5 --no-baseline --no-write").unwrap();
        assert_eq!(a.names, ["mixed"]);
        assert_eq!(a.options.seconds, Some(2.5));
        assert!(!a.options.baseline && a.results.is_none());
        assert!(args("scenario nope").unwrap_err().contains("no scenario"));
        assert!(args("scenario").unwrap_err().contains("name a scenario"));
        assert!(args("run all").unwrap_err().contains("unknown command"));
        assert!(args("scenario all --seconds 0").is_err());
        assert!(args("scenario all --bogus")
            .unwrap_err()
            .contains("unknown option"));
        assert_eq!(args("scenario --list").unwrap_err(), "list");
        assert_eq!(args("--help").unwrap_err(), "help");
    }

    #[test]
    fn help_names_every_scenario() {
        let h = help();
        assert!(SCENARIOS.iter().all(|s| h.contains(s.name)));
    }
}
