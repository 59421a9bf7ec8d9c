//! The table: printed on the console, and kept in a section of `bench/RESULTS.md` where a
//! run replaces the rows of the scenarios it ran and keeps the others.

use super::{Outcome, SCENARIOS};
use std::path::Path;

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

const BEGIN: &str = "<!-- scenarios:begin -->";
const END: &str = "<!-- scenarios:end -->";

const INTRO: &str = "\
## Compute sharing: the scenarios

The acceptance scenarios of compute sharing, run by the scenario runner on simgpu (one
simulated `A100-80GB`, 1 ms time-slice quantum between processes). Each scenario starts
`controld run` on a private node and state dir with a config declaring its containers, runs
`gpuload` in them with `libtessera.so` preloaded and the container's region (as `controld
exec` does), and measures from ground truth: the busy time simgpu's engine charged to each
process, read from the node state every 100 ms (every 1 ms in `burst-join`), summed per
container and divided by the wall time; `gpuload infer`'s request latencies; `controld`'s
CPU time from `/proc/<pid>/stat`. Preemption latency runs from the online library's stamp
at the launch call (`active_raised_ns`) until the daemon's stamp right after its store of
the offline region's `blocked` word (`blocked_at_ns`); a watcher looking every 200 µs
follows each episode and counts offline launches admitted while blocked. The baseline
runs the same workloads without Tessera: no preload, no daemon, plain time-slicing.

```sh
cargo build --release --workspace
cargo run --release -p tessera-bench -- scenario all        # or one: scenario mixed
cargo run --release -p tessera-bench -- scenario --list
```
";

fn cell_line(cells: &[String]) -> String {
    let escaped: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
    format!("| {} |", escaped.join(" | "))
}

fn split_cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_start_matches('|')
        .trim_end_matches('|')
        .split(" | ")
        .map(|c| c.trim().replace("\\|", "|"))
        .collect()
}

/// Rows of the two tables in an existing section, as cells.
fn old_rows(section: &str) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let (mut results, mut runs) = (Vec::new(), Vec::new());
    let mut table = 0;
    for line in section.lines() {
        let line = line.trim();
        if line.starts_with("| # |") {
            table = 1;
        } else if line.starts_with("| scenario | commit") {
            table = 2;
        } else if !line.starts_with('|') {
            table = 0;
        } else if line.starts_with("|---") || line.starts_with("| ---") {
        } else if table == 1 {
            results.push(split_cells(line));
        } else if table == 2 {
            runs.push(split_cells(line));
        }
    }
    (results, runs)
}

fn order(name: &str) -> usize {
    SCENARIOS
        .iter()
        .position(|s| s.name == name)
        .unwrap_or(usize::MAX)
}

/// The section for `outcomes`, keeping the rows of scenarios they do not cover from `old`.
fn section(old: &str, outcomes: &[Outcome], info: &RunInfo) -> String {
    let ran: Vec<&str> = outcomes.iter().map(|o| o.name).collect();
    let (mut results, mut runs) = old_rows(old);
    results.retain(|r| r.len() == 7 && !ran.contains(&r[1].as_str()));
    runs.retain(|r| r.len() == 6 && !ran.contains(&r[0].as_str()));
    results.extend(cells(outcomes).into_iter().map(Vec::from));
    for o in outcomes {
        runs.push(vec![
            o.name.to_string(),
            info.commit.clone().unwrap_or_else(|| "—".into()),
            info.date.clone(),
            format!("{:.0} s", o.wall.as_secs_f64()),
            info.machine.clone(),
            o.notes.join("; "),
        ]);
    }
    // Stable: rows of one scenario keep their order.
    results.sort_by_key(|r| order(&r[1]));
    runs.sort_by_key(|r| order(&r[0]));
    let mut s = format!("{BEGIN}\n{INTRO}\n");
    s += &cell_line(&HEADER.map(String::from));
    s += "\n|---:|---|---|---|---|---|---|\n";
    for r in &results {
        s += &cell_line(r);
        s += "\n";
    }
    s += "\nEach scenario's last run (`";
    s += &info.command;
    s += "` or an earlier command):\n\n";
    s += "| scenario | commit | date | took | machine | notes |\n|---|---|---|---:|---|---|\n";
    for r in &runs {
        s += &cell_line(r);
        s += "\n";
    }
    s += END;
    s
}

/// Writes the outcomes into the scenario section of the results file (appended if absent).
pub fn update_results(path: &Path, outcomes: &[Outcome], info: &RunInfo) -> Result<(), String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let new = match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if e > b => {
            let old = &text[b..e];
            format!(
                "{}{}{}",
                &text[..b],
                section(old, outcomes, info),
                &text[e + END.len()..]
            )
        }
        _ => {
            let sep = if text.is_empty() || text.ends_with("\n\n") {
                ""
            } else if text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            };
            format!("{text}{sep}{}\n", section("", outcomes, info))
        }
    };
    std::fs::write(path, new).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::super::Row;
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn outcome(name: &'static str, measured: &str) -> Outcome {
        Outcome {
            name,
            rows: vec![Row {
                check: "check".into(),
                target: "30 ± 2 %".into(),
                measured: measured.into(),
                baseline: "100.0 %".into(),
                pass: Some(true),
            }],
            figures: BTreeMap::new(),
            notes: vec![],
            wall: Duration::from_secs(12),
        }
    }

    fn info() -> RunInfo {
        RunInfo {
            command: "scenario x".into(),
            commit: Some("abc1234".into()),
            machine: "2 CPUs".into(),
            date: "2025-01-02".into(),
        }
    }

    #[test]
    fn dates() {
        assert_eq!(civil(0), "1970-01-01");
        assert_eq!(civil(19_723), "2024-01-01");
        assert_eq!(civil(19_782), "2024-02-29");
    }

    #[test]
    fn a_run_replaces_its_rows_and_keeps_the_others() {
        let dir = std::env::temp_dir().join(format!("tessera-results-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("RESULTS.md");
        std::fs::write(&path, "# Results\n\nbefore\n").unwrap();
        update_results(
            &path,
            &[outcome("fixed-alone", "30.1 %"), outcome("mixed", "20.0 %")],
            &info(),
        )
        .unwrap();
        update_results(&path, &[outcome("fixed-alone", "29.9 %")], &info()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# Results\n\nbefore\n\n<!-- scenarios:begin -->"));
        assert!(text.contains("29.9 %") && !text.contains("30.1 %"));
        assert!(text.contains("| 2 | mixed | check | 30 ± 2 % | 20.0 % | 100.0 % | pass |"));
        assert_eq!(text.matches("| fixed-alone | abc1234 |").count(), 1);
        assert_eq!(text.matches("| mixed | abc1234 |").count(), 1);
        let fixed = text.find("| 1 | fixed-alone").unwrap();
        assert!(fixed < text.find("| 2 | mixed").unwrap());
        assert_eq!(text.matches(BEGIN).count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_console_table_lines_up() {
        let t = render_table(&[outcome("fixed-alone", "30.1 %")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[0].find("scenario"),
            lines[2].find("fixed-alone"),
            "{t}"
        );
    }
}
