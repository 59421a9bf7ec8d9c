//! The results: the table on the console, and `bench/RESULTS.md` with its plots, written
//! from scratch by `tessera-bench report` from the figures of one run. The prose around the
//! figures is fixed text that states no figure of its own: every number on the page is
//! computed in the run that writes it.

use super::error::ScenarioError;
use super::hook_costs::{self, HookCost, HookCosts};
use super::{testbed, Options, Outcome, SCENARIOS};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where and how a run was made.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// The command line.
    pub command: String,
    /// `git rev-parse --short HEAD`, with `+changes` for a dirty tree; `None` outside git.
    pub commit: Option<String>,
    /// [`machine`].
    pub machine: String,
    /// The UTC date, `YYYY-MM-DD`.
    pub date: String,
}

/// The machine in words: CPUs, CPU model, kernel.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| format!(", Linux {}", k.trim()))
        .unwrap_or_default();
    format!("{cpus} CPUs, {model}{kernel}")
}

/// Today's date in UTC, `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil(secs / 86_400)
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

fn item(name: &str) -> u32 {
    SCENARIOS
        .iter()
        .find(|s| s.name == name)
        .map_or(0, |s| s.item)
}

fn verdict(pass: Option<bool>) -> &'static str {
    match pass {
        Some(true) => "pass",
        Some(false) => "FAIL",
        None => "—",
    }
}

/// The rows of the outcomes as cells: item, scenario, check, target, measured, baseline,
/// result.
fn cells(outcomes: &[Outcome]) -> Vec<[String; 7]> {
    outcomes
        .iter()
        .flat_map(|o| {
            o.rows.iter().map(move |r| {
                [
                    item(o.name).to_string(),
                    o.name.to_string(),
                    r.check.clone(),
                    r.target.clone(),
                    r.measured.clone(),
                    r.baseline.clone(),
                    verdict(r.pass).to_string(),
                ]
            })
        })
        .collect()
}

const HEADER: [&str; 7] = [
    "#",
    "scenario",
    "check",
    "target",
    "measured (Tessera)",
    "baseline (no Tessera)",
    "result",
];

/// The outcomes as an aligned plain-text table.
pub fn render_table(outcomes: &[Outcome]) -> String {
    let rows = cells(outcomes);
    let mut widths = HEADER.map(|h| h.chars().count());
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(widths).enumerate() {
            if i > 0 {
                s += "  ";
            }
            s += c;
            if i + 1 < cells.len() {
                s += &" ".repeat(w - c.chars().count());
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&HEADER.map(String::from));
    out += &line(&widths.map(|w| "-".repeat(w)));
    for r in &rows {
        out += &line(r);
    }
    for o in outcomes {
        for n in &o.notes {
            out += &format!("{}: {n}\n", o.name);
        }
    }
    out
}

/// What the hook benchmarks gave in a report run.
#[derive(Debug, Clone)]
pub enum HookFigures {
    /// Measured: criterion's estimates, and how long the benchmark took.
    Measured(HookCosts, Duration),
    /// Not run (`--no-criterion`).
    Skipped,
    /// The benchmark failed, with why.
    Failed(String),
}

/// Everything one `tessera-bench report` run measured, and how.
#[derive(Debug, Clone)]
pub struct Report {
    /// Where and how it ran.
    pub info: RunInfo,
    /// The hook costs.
    pub hooks: HookFigures,
    /// The scenarios that ran, in the table's order.
    pub outcomes: Vec<Outcome>,
    /// The scenarios that could not run: name and why.
    pub broken: Vec<(String, String)>,
    /// The scenario settings it ran with.
    pub options: Options,
    /// How long each part took (build, hook benchmarks, scenarios), in order.
    pub phases: Vec<(String, Duration)>,
    /// How long the whole run took.
    pub took: Duration,
}

/// The command that regenerates the report, as the page shows it.
pub const REPORT_COMMAND: &str = "cargo run --release -p tessera-bench -- report";

/// The plots' folder, relative to the results file.
pub const PLOTS: &str = "plots";

/// `git rev-parse --short HEAD` of the tree at `root`, with `+changes` when tracked files
/// have uncommitted changes; `None` outside git.
pub fn commit(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root)
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

/// A duration as people read it: `42 s`, `3 min 05 s`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

/// A Markdown table cell: no line breaks, `|` escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn row_line(cells: &[String]) -> String {
    let escaped: Vec<String> = cells.iter().map(|c| cell(c)).collect();
    format!("| {} |\n", escaped.join(" | "))
}

/// Passed and failed checks of the scenarios.
fn tally(outcomes: &[Outcome]) -> (usize, Vec<String>) {
    let mut passed = 0;
    let mut failed = Vec::new();
    for o in outcomes {
        for r in &o.rows {
            match r.pass {
                Some(true) => passed += 1,
                Some(false) => failed.push(format!("{}: {}", o.name, r.check)),
                None => {}
            }
        }
    }
    (passed, failed)
}

/// Passed and failed hook-cost targets.
fn hook_tally(costs: &HookCosts) -> (usize, Vec<String>) {
    let mut passed = 0;
    let mut failed = Vec::new();
    for r in costs.stub.iter().chain(&costs.simgpu) {
        match r.pass() {
            Some(true) => passed += 1,
            Some(false) => failed.push(format!("hook cost: {}", r.call)),
            None => {}
        }
    }
    (passed, failed)
}

/// The file a chart is written to, relative to the results file.
fn plot_path(file: &str) -> String {
    format!("{PLOTS}/{file}.svg")
}

const INTRO: &str = "\
Every figure and plot on this page comes from one run of the command below, on a Linux
machine with Rust and a C compiler; no GPU is needed: the GPU is simgpu, a simulated node
that real CUDA programs run on unchanged. The command builds the programs, runs the hook
benchmarks and every scenario with its baseline, and rewrites this file and the plots in
`plots/`. `cargo run --release -p tessera-bench -- --help` lists its options (one scenario,
shorter phases, no baseline).
";

const HOOKS_INTRO: &str = "\
Each benchmark calls one entry point through `libtessera.so`'s export and through the
driver directly, in the same process (both opened with `dlopen`), so the difference of the
medians is what the library adds. Two drivers, each measured in its own process:

- **stub**: [`benches/stub_driver.c`](benches/stub_driver.c), a driver that answers each call in a few instructions
  (allocations from a bump counter, never backed; one device, one always-current context),
  given to libtessera as `TESSERA_REAL_LIBCUDA`. Against it the library's own cost is
  resolvable to a few nanoseconds; the speed targets are judged here.
- **simgpu**: the simulated `libcuda.so.1` every test runs on. Its allocations are backed
  by `mmap`/`munmap`, which hides the library's share of an allocation; kept for the
  figures that only make sense on a full driver (`dlsym`, `cuGetProcAddress_v2`) and as a
  sanity check.

The container is anonymous with `TESSERA_MEMORY_LIMIT=64GiB`, so allocations take the full
accounting path (reserve against the cap, registry insert, registry remove, release).
Figures are criterion's median (`median.point_estimate` in
`<criterion home>/<group>/<id>/new/estimates.json`) with its 95 % confidence interval, in
ns. A difference is in bold where the two intervals are apart, and marked (within noise)
where they overlap. [`benches/hooks.rs`](benches/hooks.rs) says how each is set up.
";

/// The scenarios' introduction, after the sentence naming the simulated card.
const SCENARIOS_INTRO: &str = "\
Each starts `controld run` on a private node and state dir with a config
declaring its containers, runs `gpuload` in them with `libtessera.so` preloaded and the
container's region (as `controld exec` does), and measures from ground truth: the busy
time simgpu's engine charged to each process and the device memory it holds, read from the
node state every 100 ms (every 1 ms in `burst-join`, 10 ms in `memory-caps`, 20 ms in
`online-offline`) and summed per container; `gpuload infer`'s request latencies;
`controld`'s CPU time from `/proc/<pid>/stat`. Preemption latency runs from the online
library's stamp at the launch call (`active_raised_ns`) until the offline container is
stopped: the online library's stamp right after it sets its bit on the node's board
(`board_set_ns`), from which instant the offline library refuses every launch, or the
daemon's stamp right after its store of the offline region's `blocked` word
(`blocked_at_ns`) if that came first; the daemon's path alone is shown too. A watcher
follows each episode and counts offline launches admitted while stopped. The baseline runs
the same workloads without Tessera: no preload, no daemon, no caps, plain time-slicing.
";

/// A hook-cost row by call, from either table.
fn hook<'a>(rows: &'a [HookCost], call: &str) -> Option<&'a HookCost> {
    rows.iter().find(|r| r.call.starts_with(call))
}

/// What the hook tables say, with this run's figures.
fn hook_reading(costs: &HookCosts) -> String {
    let mut s = String::from("Reading them:\n\n");
    let added = |r: &HookCost| {
        let v = hook_costs::ns(r.added().abs());
        if r.added() < 0.0 {
            format!("{v} ns less")
        } else {
            format!("{v} ns")
        }
    };
    if let Some(r) = hook(&costs.stub, "`cuLaunchKernel`") {
        let _ = writeln!(
            s,
            "- **Launch**: the wrapper adds {} over the stub: a relaxed load for the debug \
             counters and the call through the real-function slot.",
            added(r)
        );
    }
    if let Some(r) = hook(&costs.stub, "`cuMemAlloc_v2`") {
        let _ = write!(
            s,
            "- **Allocate + free**: {} per pair over a driver that costs nothing: two driver \
             queries for the current context and device, the compare-and-swap against the cap \
             and the slot's counter, and a registry insert and remove.",
            added(r)
        );
        if let Some(g) = hook(&costs.simgpu, "`cuMemAlloc_v2`") {
            let _ = write!(
                s,
                " On simgpu the pair itself costs {} ns{}.",
                hook_costs::ns(g.direct.median),
                if g.resolved() {
                    ""
                } else {
                    ", and the library's share is within its noise"
                }
            );
        }
        s.push('\n');
    }
    if let Some(r) = hook(&costs.stub, "`cuMemGetInfo_v2`") {
        let _ = writeln!(
            s,
            "- **`cuMemGetInfo_v2`**: {} over the stub. The query asks the driver for the \
             current device only, and reaps dead processes only when another process of the \
             container holds memory on that device (reaping visits every process slot).",
            added(r)
        );
    }
    let hooked = hook(&costs.simgpu, "`dlsym`, hooked");
    let unhooked = hook(&costs.simgpu, "`dlsym`, unhooked");
    if let (Some(h), Some(u)) = (hooked, unhooked) {
        let _ = writeln!(
            s,
            "- **`dlsym` routing**: a hooked name is answered from the library's own sorted \
             table ({} against the real `dlsym`); an unhooked one costs that lookup plus the \
             real `dlsym` ({}).",
            added(h),
            added(u)
        );
    }
    if let Some(r) = hook(&costs.simgpu, "`cuGetProcAddress_v2`") {
        let _ = writeln!(
            s,
            "- **`cuGetProcAddress_v2`**: {} against simgpu's own lookup (the library adds a \
             table lookup for substitution); no target set, since applications resolve each \
             entry point once.",
            added(r)
        );
    }
    s
}

/// The results page.
pub fn render_markdown(r: &Report) -> String {
    let mut s = String::from("# Tessera: measured results\n\n");
    s += "<!-- Written by `tessera-bench report`; the next run replaces this file and the plots. -->\n\n";
    s += INTRO;
    let _ = writeln!(s, "\n```sh\n{REPORT_COMMAND}\n```\n");

    // Where and how.
    let (passed, mut failed) = tally(&r.outcomes);
    let (mut hooks_passed, mut hooks_failed) = (0, Vec::new());
    if let HookFigures::Measured(costs, _) = &r.hooks {
        (hooks_passed, hooks_failed) = hook_tally(costs);
    }
    failed.extend(hooks_failed);
    let phases: Vec<String> = r
        .phases
        .iter()
        .map(|(what, d)| format!("{what} {}", span(*d)))
        .collect();
    let scenario_settings = format!(
        "{}; {}",
        match r.options.seconds {
            Some(sec) => format!("main phases of {sec} s (shorter than the scenarios' own)"),
            None => "each scenario's own length".to_string(),
        },
        if r.options.baseline {
            "baselines run"
        } else {
            "no baselines"
        }
    );
    s += "| this run | |\n|---|---|\n";
    s += &row_line(&["command".into(), format!("`{}`", r.info.command)]);
    s += &row_line(&[
        "commit".into(),
        format!(
            "`{}`",
            r.info
                .commit
                .as_deref()
                .unwrap_or("unknown (not a git tree)")
        ),
    ]);
    s += &row_line(&["date".into(), format!("{} (UTC)", r.info.date)]);
    s += &row_line(&["machine".into(), r.info.machine.clone()]);
    s += &row_line(&[
        "took".into(),
        format!("{} ({})", span(r.took), phases.join(", ")),
    ]);
    s += &row_line(&["scenarios".into(), scenario_settings]);
    s += &row_line(&[
        "checks".into(),
        if failed.is_empty() {
            format!("all {} passed", passed + hooks_passed)
        } else {
            format!(
                "{} passed, {} failed: {}",
                passed + hooks_passed,
                failed.len(),
                failed.join("; ")
            )
        },
    ]);
    for (name, why) in &r.broken {
        s += &row_line(&[
            "could not run".into(),
            format!("{name}: {}", why.lines().next().unwrap_or("")),
        ]);
    }

    // At a glance.
    s += "\n## At a glance\n\n";
    s += "| # | scenario | what it shows | checks | plot |\n|---:|---|---|---|---|\n";
    for o in &r.outcomes {
        let scenario = SCENARIOS.iter().find(|sc| sc.name == o.name);
        let checked = o.rows.iter().filter(|r| r.pass.is_some()).count();
        let ok = o.rows.iter().filter(|r| r.pass == Some(true)).count();
        let plots: Vec<String> = o
            .charts
            .iter()
            .map(|c| format!("[{}]({})", c.file, plot_path(&c.file)))
            .collect();
        s += &row_line(&[
            item(o.name).to_string(),
            format!("[{}](#{})", o.name, anchor(o.name)),
            scenario.map_or("", |sc| sc.about).to_string(),
            if ok == checked {
                format!("{ok} of {checked} pass")
            } else {
                format!("**{} of {checked} FAIL**", checked - ok)
            },
            if plots.is_empty() {
                "—".into()
            } else {
                plots.join(", ")
            },
        ]);
    }

    // Hook costs.
    s += "\n## Hook costs: what libtessera.so adds to a driver call\n\n";
    s += HOOKS_INTRO;
    let _ = writeln!(
        s,
        "\nMeasured with `{}` (criterion 0.7; the flags after `--` shorten criterion's \
         default warm-up and measurement so that the whole report fits its time).\n",
        hook_costs::bench_command()
    );
    match &r.hooks {
        HookFigures::Measured(costs, took) => {
            let _ = writeln!(s, "The benchmark took {}.\n", span(*took));
            s += "### Against the stub driver (the library's own cost)\n\n";
            s += &hook_costs::table(&costs.stub, "stub");
            s += "\n### Against simgpu\n\n";
            s += &hook_costs::table(&costs.simgpu, "simgpu");
            if !costs.missing.is_empty() {
                let _ = writeln!(
                    s,
                    "\nNo estimate was found for: {}.",
                    costs.missing.join(", ")
                );
            }
            s += "\n";
            s += &hook_reading(costs);
        }
        HookFigures::Skipped => {
            s += "Not measured in this run (`--no-criterion`).\n";
        }
        HookFigures::Failed(why) => {
            let _ = writeln!(s, "Not measured: the benchmark failed ({}).", cell(why));
        }
    }

    // Scenarios.
    s += "\n## Isolation scenarios\n\n";
    let slicing = tessera_region::slicing::for_model(testbed::DEVICE);
    let _ = write!(
        s,
        "The scenarios run on simgpu: one simulated `{}` with its card's profile \
         ([`docs/simgpu.md`](../docs/simgpu.md)): a context keeps the GPU {:.2} ms while \
         another waits, {:.2} ms of each switch is nobody's GPU time, and every driver call \
         costs the host what it cost on the card. ",
        testbed::DEVICE,
        slicing.timeslice_ns as f64 / 1e6,
        slicing.switch_ns as f64 / 1e6,
    );
    s += SCENARIOS_INTRO;
    s += "\n| # | scenario | check | target | measured (Tessera) | baseline (no Tessera) | result |\n";
    s += "|---:|---|---|---|---|---|---|\n";
    for c in cells(&r.outcomes) {
        s += &row_line(&c);
    }
    for o in &r.outcomes {
        let _ = writeln!(s, "\n### {}\n", o.name);
        if let Some(sc) = SCENARIOS.iter().find(|sc| sc.name == o.name) {
            let _ = writeln!(s, "{}. Took {}.", sc.about, span(o.wall));
        }
        if !o.notes.is_empty() {
            s.push('\n');
        }
        for n in &o.notes {
            let _ = writeln!(s, "- {n}");
        }
        for c in &o.charts {
            let _ = writeln!(s, "\n![{}]({})", c.title, plot_path(&c.file));
        }
    }
    s
}

/// GitHub's anchor for a heading.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '_' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

/// Writes `RESULTS.md` and the plots into `dir` (the plots into `dir/plots`, where every
/// older `.svg` is removed first: each plot on the page is from this run). Returns the
/// files written.
pub fn write_report(dir: &Path, report: &Report) -> Result<Vec<PathBuf>, ScenarioError> {
    let plots = dir.join(PLOTS);
    std::fs::create_dir_all(&plots).map_err(ScenarioError::file("create", &plots))?;
    let old = std::fs::read_dir(&plots).map_err(ScenarioError::file("read", &plots))?;
    for entry in old.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "svg") {
            std::fs::remove_file(&path).map_err(ScenarioError::file("remove", &path))?;
        }
    }
    let mut written = Vec::new();
    for chart in report.outcomes.iter().flat_map(|o| &o.charts) {
        let path = plots.join(format!("{}.svg", chart.file));
        std::fs::write(&path, chart.to_svg()?).map_err(ScenarioError::file("write", &path))?;
        written.push(path);
    }
    let results = dir.join("RESULTS.md");
    std::fs::write(&results, render_markdown(report))
        .map_err(ScenarioError::file("write", &results))?;
    written.insert(0, results);
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::super::hook_costs::{Estimate, HookCost};
    use super::super::plot::{Chart, Panel, Series};
    use super::super::Row;
    use super::*;
    use std::collections::BTreeMap;

    fn outcome(name: &'static str, measured: &str, pass: Option<bool>) -> Outcome {
        Outcome {
            name,
            rows: vec![Row {
                check: "fixed:30 | window".into(),
                target: "30 ± 2 %".into(),
                measured: measured.into(),
                baseline: "100.0 %".into(),
                pass,
            }],
            figures: BTreeMap::new(),
            notes: vec!["a note".into()],
            charts: vec![],
            wall: Duration::from_secs(12),
        }
    }

    fn chart(file: &str) -> Chart {
        Chart {
            file: file.into(),
            title: "shares over time".into(),
            x_label: "time (s)".into(),
            y_label: "share (%)".into(),
            y_range: None,
            shared_x: true,
            panels: vec![Panel {
                title: "with Tessera".into(),
                series: vec![Series::line("fixed30", 0, vec![(0.0, 30.0), (1.0, 31.0)])],
            }],
        }
    }

    fn estimate(median: f64) -> Estimate {
        Estimate {
            median,
            low: median - 0.5,
            high: median + 0.5,
        }
    }

    fn report() -> Report {
        let mut fixed = outcome("fixed-alone", "29.8 %–30.1 %", Some(true));
        fixed.charts.push(chart("fixed-alone-shares"));
        let costs = HookCosts {
            stub: vec![HookCost {
                call: "`cuLaunchKernel` (no limit)",
                direct_is: None,
                direct: estimate(2.25),
                tessera: estimate(4.5),
                target_ns: Some(50.0),
                judged_elsewhere: false,
            }],
            simgpu: vec![],
            missing: vec!["dlsym/hooked/real".into()],
        };
        Report {
            info: RunInfo {
                command: REPORT_COMMAND.into(),
                commit: Some("abc1234+changes".into()),
                machine: "2 CPUs, Some CPU, Linux 6.1".into(),
                date: "2025-01-02".into(),
            },
            hooks: HookFigures::Measured(costs, Duration::from_secs(95)),
            outcomes: vec![fixed, outcome("mixed", "52.0 %", Some(false))],
            broken: vec![("daemon-cpu".into(), "controld did not answer\nmore".into())],
            options: Options::default(),
            phases: vec![
                ("build".into(), Duration::from_secs(3)),
                ("scenarios".into(), Duration::from_secs(200)),
            ],
            took: Duration::from_secs(298),
        }
    }

    #[test]
    fn the_page_names_the_run_and_holds_every_figure_and_plot() {
        let page = render_markdown(&report());
        for text in [
            "```sh\ncargo run --release -p tessera-bench -- report\n```",
            "| command | `cargo run --release -p tessera-bench -- report` |",
            "| commit | `abc1234+changes` |",
            "| date | 2025-01-02 (UTC) |",
            "| machine | 2 CPUs, Some CPU, Linux 6.1 |",
            "| took | 4 min 58 s (build 3 s, scenarios 3 min 20 s) |",
            "| checks | 2 passed, 1 failed: mixed: fixed:30 \\| window |",
            "| could not run | daemon-cpu: controld did not answer |",
            // Every row, with its `|` escaped.
            "| 1 | fixed-alone | fixed:30 \\| window | 30 ± 2 % | 29.8 %–30.1 % | 100.0 % | pass |",
            "| 2 | mixed | fixed:30 \\| window | 30 ± 2 % | 52.0 % | 100.0 % | FAIL |",
            // The hook table, the benchmark's command and what was missing.
            "| `cuLaunchKernel` (no limit) | 2.2 [1.8, 2.8] | 4.5 [4.0, 5.0] | **+2.2** | ≤ 50 | pass |",
            "`cargo bench -p tessera-bench --bench hooks -- --warm-up-time 1 --measurement-time 3`",
            "No estimate was found for: dlsym/hooked/real.",
            "The benchmark took 1 min 35 s.",
            "the wrapper adds 2.2 ns over the stub",
            // The plot, linked in the glance table and shown under its scenario.
            "[fixed-alone-shares](plots/fixed-alone-shares.svg)",
            "![shares over time](plots/fixed-alone-shares.svg)",
            "**1 of 1 FAIL**",
            "- a note",
        ] {
            assert!(page.contains(text), "no `{text}` in:\n{page}");
        }
        assert!(!page.contains("\nmore"), "only a reason's first line");
    }

    #[test]
    fn a_page_without_hook_figures_says_so() {
        let mut r = report();
        r.hooks = HookFigures::Skipped;
        r.options.seconds = Some(1.0);
        r.options.baseline = false;
        let page = render_markdown(&r);
        assert!(page.contains("Not measured in this run (`--no-criterion`)."));
        assert!(page.contains("main phases of 1 s (shorter than the scenarios' own); no baselines"));
        assert!(!page.contains("### Against the stub driver"));
    }

    #[test]
    fn writing_replaces_the_page_and_every_old_plot() {
        let dir = std::env::temp_dir().join(format!("tessera-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(PLOTS)).unwrap();
        std::fs::write(dir.join(PLOTS).join("stale.svg"), "<svg/>").unwrap();
        std::fs::write(dir.join(PLOTS).join("keep.txt"), "not a plot").unwrap();
        std::fs::write(dir.join("RESULTS.md"), "old").unwrap();
        let written = write_report(&dir, &report()).unwrap();
        assert_eq!(
            written,
            [
                dir.join("RESULTS.md"),
                dir.join(PLOTS).join("fixed-alone-shares.svg")
            ]
        );
        assert!(!dir.join(PLOTS).join("stale.svg").exists());
        assert!(dir.join(PLOTS).join("keep.txt").exists());
        let svg = std::fs::read_to_string(dir.join(PLOTS).join("fixed-alone-shares.svg")).unwrap();
        assert!(svg.contains("fixed30"));
        let page = std::fs::read_to_string(dir.join("RESULTS.md")).unwrap();
        assert!(page.starts_with("# Tessera: measured results"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dates_and_durations() {
        assert_eq!(civil(0), "1970-01-01");
        assert_eq!(civil(19_723), "2024-01-01");
        assert_eq!(civil(19_782), "2024-02-29");
        assert_eq!(span(Duration::from_millis(41_600)), "42 s");
        assert_eq!(span(Duration::from_secs(185)), "3 min 05 s");
        assert_eq!(anchor("online-offline"), "online-offline");
    }

    #[test]
    fn the_console_table_lines_up() {
        let t = render_table(&[outcome("fixed-alone", "30.1 %", Some(true))]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert_eq!(
            lines[0].find("scenario"),
            lines[2].find("fixed-alone"),
            "{t}"
        );
    }
}
