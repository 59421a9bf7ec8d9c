//! `tessera-bench report` end to end, on a tiny configuration: two scenarios (one share
//! scenario, the memory caps) with one-second phases and their baselines, no hook
//! benchmarks and no build of its own, writing into a folder of the test's. The page must
//! name the command, the commit and the machine, hold every row of both scenarios and link
//! each plot, and each plot must be an SVG with its lines and legend.

mod compute;

use std::path::Path;
use std::time::Duration;
use tessera_bench::scenario::machine;
use tessera_tests::{run_with_timeout, timing_lock};

/// Every `](plots/NAME.svg)` link of the page.
fn plot_links(page: &str) -> Vec<String> {
    let mut links: Vec<String> = page
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(link, _)| link.to_string()))
        .filter(|link| link.starts_with("plots/") && link.ends_with(".svg"))
        .collect();
    links.sort();
    links.dedup();
    links
}

/// Checks an SVG file: one document, its text elements closed, and at least one line of
/// data; returns its text.
fn svg(path: &Path) -> String {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(text.starts_with("<svg"), "{}: not an SVG", path.display());
    assert!(
        text.trim_end().ends_with("</svg>"),
        "{}: cut short",
        path.display()
    );
    assert_eq!(
        text.matches("<text").count(),
        text.matches("</text>").count(),
        "{}: unbalanced text elements",
        path.display()
    );
    // A measured line is a polyline of many points.
    let longest = text
        .split("<polyline")
        .skip(1)
        .filter_map(|p| p.split("points=\"").nth(1))
        .filter_map(|p| p.split('"').next())
        .map(|p| p.split_whitespace().count())
        .max()
        .unwrap_or(0);
    assert!(longest >= 5, "{}: no line of data", path.display());
    text
}

#[test]
fn report_writes_the_page_and_its_plots_from_one_run() {
    let _serial = timing_lock();
    let bins = compute::bins();
    let out = std::env::temp_dir().join(format!("tessera-report-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = run_with_timeout(
        std::process::Command::new(bins.dir.join("tessera-bench"))
            .args([
                "report",
                "--only",
                "fixed-alone,memory-caps",
                "--seconds",
                "1",
            ])
            .args(["--no-criterion", "--no-build", "--quiet", "--out"])
            .arg(&out),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    // 0: every check passed; 1: one failed (a one-second debug phase may miss a share).
    assert!(
        matches!(run.status.code(), Some(0 | 1)),
        "report failed ({}):\n{stderr}",
        run.status
    );
    let page = std::fs::read_to_string(out.join("RESULTS.md"))
        .unwrap_or_else(|e| panic!("no RESULTS.md ({e}):\n{stderr}"));

    // The run: command, commit, machine.
    assert!(
        page.contains("| command | `cargo run --release -p tessera-bench -- report --only fixed-alone,memory-caps --seconds 1"),
        "{page}"
    );
    let commit = page
        .lines()
        .find(|l| l.starts_with("| commit | `"))
        .expect("a commit line");
    assert!(
        commit.len() > "| commit | `` |".len(),
        "empty commit: {commit}"
    );
    assert!(
        page.contains(&format!("| machine | {} |", machine())),
        "{page}"
    );
    assert!(page.contains("Not measured in this run (`--no-criterion`)."));

    // Every row of both scenarios, with a baseline.
    assert!(page.contains("| 1 | fixed-alone | fixed:30, each 1 s window | 30 ± 2 % |"));
    // Three caps, sized from the measured context (518 MiB on simgpu's H200 profile).
    let mut caps: Vec<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| 10 | memory-caps | "))
        .filter_map(|l| l.split(':').next())
        .filter(|c| c.starts_with("cap-"))
        .map(str::to_string)
        .collect();
    caps.dedup();
    assert_eq!(caps.len(), 3, "{caps:?}:\n{page}");
    for cap in &caps {
        for check in [
            "peak device memory",
            "asked beyond the cap",
            "a new process once the steps exited",
        ] {
            let row = format!("| 10 | memory-caps | {cap}: {check} |");
            let line = page
                .lines()
                .find(|l| l.starts_with(&row))
                .unwrap_or_else(|| panic!("no row {row}:\n{page}"));
            // Seven cells; the baseline's is not empty.
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            assert_eq!(cells.len(), 7, "{line}");
            assert!(!cells[5].trim().is_empty(), "no baseline: {line}");
        }
        // The cap holds with Tessera, to the byte: the peak row passes.
        let peak = format!("| 10 | memory-caps | {cap}: peak device memory |");
        let line = page.lines().find(|l| l.starts_with(&peak)).unwrap();
        assert!(line.ends_with("| pass |"), "{line}");
    }

    // Every plot linked, each one written, with its legend.
    let links = plot_links(&page);
    assert_eq!(
        links,
        ["plots/fixed-alone-shares.svg", "plots/memory-caps.svg"],
        "{page}"
    );
    let shares = svg(&out.join("plots/fixed-alone-shares.svg"));
    for text in [
        "fixed30 (fixed:30)",
        "target 30 %",
        "with Tessera",
        "without Tessera",
    ] {
        assert!(shares.contains(text), "the shares plot has no `{text}`");
    }
    let memory = svg(&out.join("plots/memory-caps.svg"));
    let largest = format!("{}: cap", caps[2]);
    for text in [caps[0].as_str(), &largest, "device memory (GiB)"] {
        assert!(memory.contains(text), "the memory plot has no `{text}`");
    }
    let _ = std::fs::remove_dir_all(&out);
}
