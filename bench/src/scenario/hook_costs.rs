//! The hook-cost figures: `cargo bench -p tessera-bench --bench hooks` (criterion) run into
//! a folder of its own, and its estimates read back as the report's two tables.
//!
//! Criterion keeps each benchmark's estimates in `<home>/<group>/<id>/new/estimates.json`;
//! the median's point estimate and 95 % confidence interval are what the tables show.

use super::error::ScenarioError;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Criterion's settings for the report's run, passed after `--`: 1 s of warm-up and 3 s
/// of measurement per benchmark (criterion's defaults are 3 s and 5 s), so that the 18
/// benchmarks take about a minute and a half.
pub const CRITERION_ARGS: [&str; 4] = ["--warm-up-time", "1", "--measurement-time", "3"];

/// The command that measures the hook costs, as the report shows it.
pub fn bench_command() -> String {
    format!(
        "cargo bench -p tessera-bench --bench hooks -- {}",
        CRITERION_ARGS.join(" ")
    )
}

/// One criterion estimate, in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// The median's point estimate.
    pub median: f64,
    /// The 95 % confidence interval of the median.
    pub low: f64,
    /// Its upper end.
    pub high: f64,
}

/// One call, measured directly in the driver and through `libtessera.so`.
#[derive(Debug, Clone)]
pub struct HookCost {
    /// The call, as the table names it (Markdown).
    pub call: &'static str,
    /// What "direct" means on this row, when it is not the driver (the real `dlsym`).
    pub direct_is: Option<&'static str>,
    /// The direct call.
    pub direct: Estimate,
    /// Through the library.
    pub tessera: Estimate,
    /// The most the library may add, in ns, where this row is judged.
    pub target_ns: Option<f64>,
    /// Whether the target is judged on the stub's row of this call instead of this one.
    pub judged_elsewhere: bool,
}

impl HookCost {
    /// What the library adds: the difference of the medians.
    pub fn added(&self) -> f64 {
        self.tessera.median - self.direct.median
    }

    /// Whether the two confidence intervals are apart, so that the difference is a figure
    /// rather than noise.
    pub fn resolved(&self) -> bool {
        self.tessera.low > self.direct.high || self.tessera.high < self.direct.low
    }

    /// Whether the target is met; `None` where this row has none to judge.
    pub fn pass(&self) -> Option<bool> {
        if self.judged_elsewhere {
            return None;
        }
        self.target_ns.map(|t| self.added() <= t)
    }
}

/// The figures of one run of the benchmark.
#[derive(Debug, Clone, Default)]
pub struct HookCosts {
    /// Against the stub driver: the library's own cost.
    pub stub: Vec<HookCost>,
    /// Against simgpu.
    pub simgpu: Vec<HookCost>,
    /// Benchmarks whose estimates were not found (`group/id`).
    pub missing: Vec<String>,
}

/// A row of the tables: the call, criterion's group and the two ids, the target in ns.
struct RowSpec {
    call: &'static str,
    group: &'static str,
    direct: &'static str,
    tessera: &'static str,
    direct_is: Option<&'static str>,
    target_ns: Option<f64>,
}

const LAUNCH: &str = "`cuLaunchKernel` (no limit)";
const ALLOC: &str = "`cuMemAlloc_v2` + `cuMemFree_v2` (1 MiB)";
const MEM_INFO: &str = "`cuMemGetInfo_v2`";

/// The driver calls, measured on both drivers.
const CALLS: [(&str, &str, Option<f64>); 3] = [
    (LAUNCH, "cuLaunchKernel", Some(50.0)),
    (ALLOC, "cuMemAlloc_v2+cuMemFree_v2", Some(200.0)),
    (MEM_INFO, "cuMemGetInfo_v2", None),
];

/// Routing, measured on simgpu only (the stub answers driver calls, not lookups), and the
/// `ioctl` every process call makes through the library, for a request that is not the
/// driver's.
const ROUTING: [RowSpec; 4] = [
    RowSpec {
        call: "`dlsym`, hooked name (`cuMemAlloc_v2`)",
        group: "dlsym",
        direct: "hooked/real",
        tessera: "hooked/libtessera",
        direct_is: Some("real `dlsym`"),
        target_ns: Some(100.0),
    },
    RowSpec {
        call: "`dlsym`, unhooked name (`cuDeviceGetName`)",
        group: "dlsym",
        direct: "unhooked/real",
        tessera: "unhooked/libtessera",
        direct_is: Some("real `dlsym`"),
        target_ns: Some(100.0),
    },
    RowSpec {
        call: "`ioctl`, not the driver's (`FIONREAD` on a pipe)",
        group: "ioctl",
        direct: "other/libc",
        tessera: "other/libtessera",
        direct_is: Some("the C library's `ioctl`"),
        target_ns: Some(20.0),
    },
    RowSpec {
        call: "`cuGetProcAddress_v2` (`cuMemAlloc`, 12000)",
        group: "cuGetProcAddress_v2",
        direct: "simgpu",
        tessera: "libtessera",
        direct_is: None,
        target_ns: None,
    },
];

/// Reads criterion's estimate of one benchmark.
fn estimate(home: &Path, group: &str, id: &str) -> Option<Estimate> {
    let path = home.join(group).join(id).join("new/estimates.json");
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    let median = &json["median"];
    let ci = &median["confidence_interval"];
    Some(Estimate {
        median: median["point_estimate"].as_f64()?,
        low: ci["lower_bound"].as_f64()?,
        high: ci["upper_bound"].as_f64()?,
    })
}

/// Reads the estimates criterion left in `home` (its `CRITERION_HOME`).
pub fn read(home: &Path) -> HookCosts {
    let mut costs = HookCosts::default();
    let mut row = |spec: &RowSpec, judged_elsewhere: bool| -> Option<HookCost> {
        let get = |id: &str| {
            let e = estimate(home, spec.group, id);
            (e, format!("{}/{id}", spec.group))
        };
        let (direct, d) = get(spec.direct);
        let (tessera, t) = get(spec.tessera);
        match (direct, tessera) {
            (Some(direct), Some(tessera)) => Some(HookCost {
                call: spec.call,
                direct_is: spec.direct_is,
                direct,
                tessera,
                target_ns: spec.target_ns,
                judged_elsewhere,
            }),
            (a, b) => {
                if a.is_none() {
                    costs.missing.push(d);
                }
                if b.is_none() {
                    costs.missing.push(t);
                }
                None
            }
        }
    };
    let mut stub = Vec::new();
    let mut simgpu = Vec::new();
    for (call, group, target_ns) in CALLS {
        let on = |direct, tessera| RowSpec {
            call,
            group,
            direct,
            tessera,
            direct_is: None,
            target_ns,
        };
        stub.extend(row(&on("stub", "libtessera-on-stub"), false));
        simgpu.extend(row(&on("simgpu", "libtessera"), true));
    }
    for spec in &ROUTING {
        simgpu.extend(row(spec, false));
    }
    costs.stub = stub;
    costs.simgpu = simgpu;
    costs
}

/// Runs the benchmark with `cargo` in `workspace`, criterion writing into `home` (emptied
/// first, so that nothing of an earlier run is read back). Its output goes to stderr.
pub fn run(cargo: &Path, workspace: &Path, home: &Path) -> Result<Duration, ScenarioError> {
    let _ = std::fs::remove_dir_all(home);
    std::fs::create_dir_all(home).map_err(ScenarioError::file("create", home))?;
    let start = Instant::now();
    let status = Command::new(cargo)
        .current_dir(workspace)
        .args(["bench", "-p", "tessera-bench", "--bench", "hooks", "--"])
        .args(CRITERION_ARGS)
        .env("CRITERION_HOME", home)
        .stdin(Stdio::null())
        .stdout(stderr())
        .status()
        .map_err(ScenarioError::start(format!("run {}", cargo.display())))?;
    if !status.success() {
        return Err(ScenarioError::Failed {
            what: bench_command(),
            status,
        });
    }
    Ok(start.elapsed())
}

/// This process's stderr, for a child's stdout.
fn stderr() -> Stdio {
    use std::os::fd::AsFd;
    std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_or_else(|_| Stdio::inherit(), Stdio::from)
}

/// The folder the report's criterion run writes into, under the cargo target folder.
pub fn home(target_dir: &Path) -> PathBuf {
    target_dir.join("tessera-report").join("criterion")
}

/// Nanoseconds as the tables show them: one decimal below 1 µs, whole ns with a space
/// between thousands above.
pub fn ns(v: f64) -> String {
    let out = if v.abs() < 999.95 {
        format!("{:.1}", v.abs())
    } else {
        let whole = format!("{:.0}", v.abs());
        let mut out = String::new();
        for (i, c) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i) % 3 == 0 {
                out.push(' ');
            }
            out.push(c);
        }
        out
    };
    // A typographic minus, as the tables' other figures; none on a figure that rounds to 0.
    if v < 0.0 && out.chars().any(|c| c.is_ascii_digit() && c != '0') {
        format!("−{out}")
    } else {
        out
    }
}

/// A signed difference in ns.
fn signed(v: f64) -> String {
    if v < 0.0 {
        ns(v)
    } else {
        format!("+{}", ns(v))
    }
}

/// An estimate as `median [low, high]`.
fn shown(e: &Estimate) -> String {
    format!("{} [{}, {}]", ns(e.median), ns(e.low), ns(e.high))
}

/// One of the two tables, in Markdown.
pub fn table(rows: &[HookCost], driver: &str) -> String {
    let mut s = format!(
        "| call | {driver} direct | through libtessera | added | target | result |\n\
         |---|---:|---:|---:|---:|---|\n"
    );
    for r in rows {
        let direct = match r.direct_is {
            Some(what) => format!("{} ({what})", shown(&r.direct)),
            None => shown(&r.direct),
        };
        let added = if r.resolved() {
            format!("**{}**", signed(r.added()))
        } else {
            format!("{} (within noise)", signed(r.added()))
        };
        let target = match (r.target_ns, r.judged_elsewhere) {
            (Some(t), false) => format!("≤ {t:.0}"),
            (Some(_), true) => "judged on the stub".to_string(),
            (None, _) => "—".to_string(),
        };
        let result = match r.pass() {
            Some(true) => "pass",
            Some(false) => "FAIL",
            None => "—",
        };
        s += &format!(
            "| {} | {direct} | {} | {added} | {target} | {result} |\n",
            r.call,
            shown(&r.tessera)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(home: &Path, group: &str, id: &str, median: f64) {
        let dir = home.join(group).join(id).join("new");
        std::fs::create_dir_all(&dir).unwrap();
        let ci = |p: f64| {
            serde_json::json!({
                "confidence_interval": {"confidence_level": 0.95, "lower_bound": p * 0.98, "upper_bound": p * 1.02},
                "point_estimate": p,
                "standard_error": 0.1,
            })
        };
        let json = serde_json::json!({"mean": ci(median * 1.1), "median": ci(median)});
        std::fs::write(dir.join("estimates.json"), json.to_string()).unwrap();
    }

    #[test]
    fn estimates_become_rows_with_differences_and_verdicts() {
        let home = std::env::temp_dir().join(format!("tessera-hooks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        write(&home, "cuLaunchKernel", "stub", 2.0);
        write(&home, "cuLaunchKernel", "libtessera-on-stub", 4.5);
        write(&home, "cuMemAlloc_v2+cuMemFree_v2", "stub", 9.0);
        write(
            &home,
            "cuMemAlloc_v2+cuMemFree_v2",
            "libtessera-on-stub",
            309.0,
        );
        write(&home, "dlsym", "hooked/real", 50.0);
        write(&home, "dlsym", "hooked/libtessera", 50.5);
        let costs = read(&home);
        let _ = std::fs::remove_dir_all(&home);
        assert_eq!(costs.stub.len(), 2);
        assert_eq!(costs.stub[0].call, LAUNCH);
        assert!((costs.stub[0].added() - 2.5).abs() < 1e-9);
        assert_eq!(costs.stub[0].pass(), Some(true));
        assert_eq!(costs.stub[1].pass(), Some(false));
        assert_eq!(costs.simgpu.len(), 1);
        assert!(!costs.simgpu[0].resolved());
        assert!(costs.missing.contains(&"cuMemGetInfo_v2/stub".to_string()));
        assert!(costs
            .missing
            .contains(&"cuGetProcAddress_v2/libtessera".to_string()));
        let t = table(&costs.stub, "stub");
        assert!(t.contains("| `cuLaunchKernel` (no limit) | 2.0 [2.0, 2.0] | 4.5 [4.4, 4.6] | **+2.5** | ≤ 50 | pass |"), "{t}");
        assert!(t.contains("| **+300.0** | ≤ 200 | FAIL |"), "{t}");
        let t = table(&costs.simgpu, "simgpu");
        assert!(t.contains("+0.5 (within noise) | ≤ 100 | pass |"), "{t}");
    }

    #[test]
    fn nanoseconds_read_well() {
        assert_eq!(ns(24.54), "24.5");
        assert_eq!(ns(13_169.4), "13 169");
        assert_eq!(ns(1_234_567.0), "1 234 567");
        assert_eq!(ns(-2481.0), "−2 481");
        assert_eq!(signed(-11.44), "−11.4");
        assert_eq!(signed(1.75), "+1.8");
    }
}
