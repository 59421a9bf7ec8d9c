//! What the compute tests share: the scenario runner of `tessera-bench`, pointed at the
//! programs of this test build (controld included), with short phases and no baseline.

// Each test binary uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use tessera_bench::scenario::{self, Bins, Options, Outcome};
use tessera_tests::{artifacts, cargo, cargo_build, workspace_root};

/// Where the programs of this build are: the test support builds simgpu, gpuload and
/// libtessera.so; controld is built here, into the same profile.
pub fn bin_dir() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let arts = artifacts();
        let mut build = Command::new(cargo());
        build
            .current_dir(workspace_root())
            .args(["build", "-p", "tessera-controld"]);
        cargo_build(&mut build, &arts.profile, "controld");
        arts.profile_dir.clone()
    })
}

/// The programs of this build, as the scenario runner finds them.
pub fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| Bins::find(bin_dir()).unwrap_or_else(|e| panic!("{e}")))
}

/// Runs scenario `name` with a main phase of `seconds`, without the baseline, and prints
/// its table on stderr (shown when the test fails). Hold `timing_lock` around it.
pub fn run(name: &str, seconds: f64) -> Outcome {
    let options = Options {
        seconds: Some(seconds),
        baseline: false,
        verbose: false,
    };
    let outcome = scenario::run_named(name, bins(), &options)
        .unwrap_or_else(|e| panic!("scenario {name} could not run: {e}"));
    eprint!("{}", scenario::render_table(std::slice::from_ref(&outcome)));
    outcome
}

/// Panics unless `value` is within `tolerance` of `target`, naming `what`.
pub fn assert_near(what: &str, value: f64, target: f64, tolerance: f64) {
    assert!(
        (value - target).abs() <= tolerance,
        "{what}: {:.1} %, want {:.0} ± {:.0} %",
        value * 100.0,
        target * 100.0,
        tolerance * 100.0
    );
}
