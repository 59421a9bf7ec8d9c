//! `gpuload`: a GPU workload through the CUDA driver API, the way applications use it. Each
//! mode prints one JSON object on stdout; errors go to stderr with a non-zero exit.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;
use tessera_bench::gpu::Gpu;
use tessera_bench::gpuload;

/// The modes, with their one-line help.
const MODES: &[(&str, &str)] = &[
    (
        "memcheck",
        "copy a pattern to the device, fill its middle with a kernel, copy back, verify",
    ),
    (
        "alloc",
        "allocate device memory in chunks until it runs out; report how much",
    ),
    (
        "train",
        "a saturating stream of spin kernels; report kernels/s",
    ),
    (
        "queue",
        "rounds of --depth kernels on the null stream, one cuCtxSynchronize each",
    ),
    (
        "streams",
        "rounds of --depth kernels over --count non-blocking streams, one cuCtxSynchronize each",
    ),
    (
        "graph",
        "a graph of --count kernels, launched --depth/--count times a round, then synchronized",
    ),
    (
        "ptsz",
        "rounds of --depth kernels on the per-thread default stream (the _ptsz entry points)",
    ),
    (
        "threads",
        "--count host threads, each rounds of --depth/--count kernels on its own stream",
    ),
    (
        "infer",
        "requests at a fixed rate, each a few spin kernels and a synchronize; report latency",
    ),
    (
        "info",
        "the device's name, driver version, and free and total memory",
    ),
    (
        "probe",
        "host cost per call of launch, event record and query, alloc+free, cuMemGetInfo",
    ),
    (
        "slice",
        "the time slice between this process and others saturating the same GPU",
    ),
];

/// One option: `--name VALUE`.
struct Flag {
    name: &'static str,
    value: &'static str,
    default: Option<&'static str>,
    modes: &'static [&'static str],
    help: &'static str,
}

const ALL: &[&str] = &[
    "memcheck", "alloc", "train", "queue", "streams", "graph", "ptsz", "threads", "infer", "info",
    "probe", "slice",
];

/// The modes that queue deep rounds of kernels ([`gpuload::shapes`]).
const SHAPES: &[&str] = &gpuload::shapes::MODES;

/// The modes that run spin kernels for a time.
const TIMED: &[&str] = &[
    "train", "queue", "streams", "graph", "ptsz", "threads", "infer", "slice",
];

/// Defaults that differ by mode: `(mode, option, value)`.
const MODE_DEFAULTS: &[(&str, &str, &str)] = &[
    ("slice", "kernel-ms", "0.05"),
    ("slice", "seconds", "3"),
    ("slice", "window", "32"),
];

/// Every option, declared once: parsing, defaults and help all read this table.
const FLAGS: &[Flag] = &[
    Flag {
        name: "device",
        value: "N",
        default: Some("0"),
        modes: ALL,
        help: "device ordinal",
    },
    Flag {
        name: "bytes",
        value: "SIZE",
        default: Some("64MiB"),
        modes: &["memcheck"],
        help: "buffer size",
    },
    Flag {
        name: "chunk",
        value: "SIZE",
        default: Some("256MiB"),
        modes: &["alloc"],
        help: "first chunk; halved on each out-of-memory down to 1MiB",
    },
    Flag {
        name: "limit",
        value: "SIZE",
        default: None,
        modes: &["alloc"],
        help: "stop once this much is allocated instead of at out-of-memory",
    },
    Flag {
        name: "hold",
        value: "SECONDS",
        default: Some("0"),
        modes: &["alloc"],
        help: "keep the memory this long after reporting",
    },
    Flag {
        name: "kernel-ms",
        value: "MS",
        default: Some("1"),
        modes: TIMED,
        help: "length of each spin kernel",
    },
    Flag {
        name: "seconds",
        value: "S",
        default: Some("5"),
        modes: TIMED,
        help: "how long to run (slice: to measure, after the warm-up)",
    },
    Flag {
        name: "window",
        value: "N",
        default: Some("4"),
        modes: &["train", "slice"],
        help: "kernels in flight at most",
    },
    Flag {
        name: "depth",
        value: "N",
        default: Some("1000"),
        modes: SHAPES,
        help: "kernels queued per round, before one synchronization",
    },
    Flag {
        name: "count",
        value: "K",
        default: Some("4"),
        modes: &["streams", "graph", "threads"],
        help: "streams, kernels per graph, or host threads",
    },
    Flag {
        name: "rate",
        value: "R",
        default: Some("50"),
        modes: &["infer"],
        help: "requests per second",
    },
    Flag {
        name: "kernels",
        value: "K",
        default: Some("4"),
        modes: &["infer"],
        help: "kernels per request",
    },
    Flag {
        name: "calls",
        value: "N",
        default: Some("100"),
        modes: &["probe"],
        help: "calls per timed batch",
    },
    Flag {
        name: "batches",
        value: "N",
        default: Some("50"),
        modes: &["probe"],
        help: "timed batches per call (after one of warm-up)",
    },
    Flag {
        name: "competitors",
        value: "N",
        default: Some("1"),
        modes: &["slice"],
        help: "saturating `gpuload train` processes started beside this one (0: alone)",
    },
    Flag {
        name: "warmup",
        value: "S",
        default: Some("1"),
        modes: &["slice"],
        help: "seconds run before measuring, while the competitors start",
    },
];

fn help() -> String {
    let mut h = String::from(
        "gpuload: a GPU workload through the CUDA driver API (libcuda.so.1)\n\n\
         usage: gpuload <mode> [options]\n\nmodes:\n",
    );
    for (mode, text) in MODES {
        h += &format!("  {mode:<10} {text}\n");
    }
    h += "\noptions:\n";
    for f in FLAGS {
        let flag = format!("--{} {}", f.name, f.value);
        let mut default = f
            .default
            .map(|d| format!(" (default {d}"))
            .unwrap_or_default();
        for (mode, _, value) in MODE_DEFAULTS.iter().filter(|(_, o, _)| *o == f.name) {
            default += &format!("; {value} for {mode}");
        }
        if !default.is_empty() {
            default += ")";
        }
        let modes = if f.modes == ALL {
            "all modes".to_string()
        } else {
            f.modes.join(", ")
        };
        h += &format!("  {flag:<18} {}{default} [{modes}]\n", f.help);
    }
    h += "  -h, --help         this text\n\n\
          Sizes take B, KiB, MiB, GiB (or k, m, g). Each mode prints one JSON object on stdout;\n\
          errors go to stderr, exit status 1 (2 for bad usage).\n";
    h
}

/// The command line, checked against [`FLAGS`].
#[derive(Debug)]
struct Args {
    mode: &'static str,
    values: HashMap<&'static str, String>,
}

enum Parsed {
    Run(Args),
    Help,
}

fn parse(argv: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut mode = None;
    let mut values = HashMap::new();
    let mut argv = argv.into_iter();
    while let Some(arg) = argv.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(Parsed::Help);
        }
        if let Some(option) = arg.strip_prefix("--") {
            let (name, inline) = match option.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (option, None),
            };
            let flag = FLAGS
                .iter()
                .find(|f| f.name == name)
                .ok_or_else(|| format!("unknown option --{name}"))?;
            let value = match inline.or_else(|| argv.next()) {
                Some(v) => v,
                None => return Err(format!("--{name} needs a value ({})", flag.value)),
            };
            values.insert(flag.name, value);
        } else if mode.is_none() {
            let m = MODES
                .iter()
                .find(|(m, _)| *m == arg)
                .ok_or_else(|| format!("unknown mode `{arg}`"))?;
            mode = Some(m.0);
        } else {
            return Err(format!("unexpected argument `{arg}`"));
        }
    }
    let mode = mode.ok_or("no mode given")?;
    if let Some(name) = values.keys().find(|n| {
        !FLAGS
            .iter()
            .any(|f| f.name == **n && f.modes.contains(&mode))
    }) {
        return Err(format!("--{name} does not apply to {mode}"));
    }
    Ok(Parsed::Run(Args { mode, values }))
}

impl Args {
    /// The option's text: given, or its default.
    fn text(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str).or_else(|| {
            MODE_DEFAULTS
                .iter()
                .find(|(m, o, _)| *m == self.mode && *o == name)
                .map(|(_, _, v)| *v)
                .or_else(|| {
                    FLAGS
                        .iter()
                        .find(|f| f.name == name)
                        .and_then(|f| f.default)
                })
        })
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<T, String> {
        let text = self.text(name).expect("every numeric option has a default");
        text.trim()
            .parse()
            .map_err(|_| format!("--{name} `{text}`: not a valid number"))
    }

    fn positive(&self, name: &str) -> Result<f64, String> {
        let v: f64 = self.number(name)?;
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(format!("--{name} must be more than 0"))
        }
    }

    fn size(&self, name: &str) -> Result<Option<u64>, String> {
        self.text(name)
            .map(|t| simgpu::units::parse_size(t).map_err(|e| format!("--{name}: {e}")))
            .transpose()
    }

    fn seconds(&self, name: &str) -> Result<Duration, String> {
        let s: f64 = self.number(name)?;
        Duration::try_from_secs_f64(s).map_err(|_| format!("--{name} `{s}`: not a duration"))
    }

    fn kernel_ns(&self) -> Result<u64, String> {
        let ms: f64 = self.number("kernel-ms")?;
        if !(ms.is_finite() && ms >= 0.0) {
            return Err("--kernel-ms must be 0 or more".into());
        }
        Ok((ms * 1e6).round() as u64)
    }
}

/// Prints one report; a closed stdout (a reader that went away) is not an error.
fn emit(report: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{report}").and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("gpuload: cannot write the report: {e}");
        }
    }
}

/// Runs the mode; `Err` carries the message for stderr. `Ok(false)` is a run that completed
/// and reported a failure (memcheck found wrong data).
fn run(args: &Args) -> Result<bool, String> {
    let device: i32 = args.number("device")?;
    // Validate every option before touching the GPU.
    let mut ok = true;
    let report = match args.mode {
        "memcheck" => {
            let bytes = args.size("bytes")?.unwrap_or(0);
            if bytes < 4 {
                return Err("--bytes must be at least 4".into());
            }
            let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
            let report = gpuload::memcheck(&gpu, bytes).map_err(|e| e.to_string())?;
            if report["verified"] != true {
                eprintln!(
                    "gpuload: memcheck read back {} wrong words, the first at byte offset {}",
                    report["mismatched_words"], report["first_mismatch_offset"]
                );
                ok = false;
            }
            report
        }
        "alloc" => {
            let chunk = args.size("chunk")?.unwrap_or(0);
            if chunk == 0 {
                return Err("--chunk must be more than 0".into());
            }
            let limit = args.size("limit")?;
            let hold = args.seconds("hold")?;
            let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
            let allocation = gpuload::alloc(&gpu, chunk, limit).map_err(|e| e.to_string())?;
            emit(&allocation.report);
            std::thread::sleep(hold);
            return Ok(true);
        }
        "train" => {
            let kernel_ns = args.kernel_ns()?;
            let seconds = args.seconds("seconds")?;
            let window: usize = args.number("window")?;
            if window == 0 {
                return Err("--window must be at least 1".into());
            }
            let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
            gpuload::train(&gpu, kernel_ns, seconds, window).map_err(|e| e.to_string())?
        }
        mode if SHAPES.contains(&mode) => {
            let kernel_ns = args.kernel_ns()?;
            let seconds = args.seconds("seconds")?;
            let depth: usize = args.number("depth")?;
            let count: usize = args.number("count")?;
            if depth == 0 || count == 0 {
                return Err("--depth and --count must be at least 1".into());
            }
            let shape = gpuload::shapes::Shape::of(mode, count).expect("a shape's mode");
            let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
            gpuload::shapes::run(&gpu, shape, kernel_ns, depth, seconds)
                .map_err(|e| e.to_string())?
        }
        "infer" => {
            let rate = args.positive("rate")?;
            let kernels: u32 = args.number("kernels")?;
            let kernel_ns = args.kernel_ns()?;
            let seconds = args.seconds("seconds")?;
            let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
            gpuload::infer(&gpu, rate, kernels, kernel_ns, seconds).map_err(|e| e.to_string())?
        }
        "info" => {
            let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
            gpuload::info(&gpu).map_err(|e| e.to_string())?
        }
        "probe" => {
            let calls: u32 = args.number("calls")?;
            let batches: u32 = args.number("batches")?;
            if calls == 0 || batches == 0 {
                return Err("--calls and --batches must be at least 1".into());
            }
            let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
            gpuload::probe(&gpu, calls, batches).map_err(|e| e.to_string())?
        }
        "slice" => slice(args, device)?,
        other => unreachable!("mode {other} is in MODES but has no body"),
    };
    emit(&report);
    Ok(ok)
}

/// `slice`: starts the competitors (`gpuload train` on the same device, running past the
/// end), measures, and checks that they ran throughout.
fn slice(args: &Args, device: i32) -> Result<serde_json::Value, String> {
    let kernel_ns = args.kernel_ns()?;
    if kernel_ns == 0 {
        return Err("--kernel-ms must be more than 0 for slice".into());
    }
    let seconds = args.seconds("seconds")?;
    let warmup = args.seconds("warmup")?;
    let window: usize = args.number("window")?;
    let competitors: usize = args.number("competitors")?;
    if window == 0 {
        return Err("--window must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find gpuload itself: {e}"))?;
    let run_for = format!("{}", (warmup + seconds).as_secs_f64() + 30.0);
    let kernel = format!("{}", kernel_ns as f64 / 1e6);
    let mut others = Vec::new();
    for _ in 0..competitors {
        let child = std::process::Command::new(&exe)
            .args(["train", "--device", &device.to_string()])
            .args(["--kernel-ms", &kernel, "--window", &window.to_string()])
            .args(["--seconds", &run_for])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start a competing gpuload train: {e}"))?;
        others.push(Competitor(child));
    }
    let gpu = Gpu::open(device).map_err(|e| e.to_string())?;
    let mut report = gpuload::slice::measure(&gpu, kernel_ns, warmup, seconds, window)
        .map_err(|e| e.to_string())?;
    for c in &mut others {
        if let Ok(Some(status)) = c.0.try_wait() {
            return Err(format!(
                "a competing gpuload train ended before the measurement did ({status})"
            ));
        }
    }
    report["competitors"] = competitors.into();
    report["warmup_s"] = warmup.as_secs_f64().into();
    Ok(report)
}

/// A competing process, killed and reaped when dropped.
struct Competitor(std::process::Child);

impl Drop for Competitor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(args)) => args,
        Ok(Parsed::Help) => {
            print!("{}", help());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("gpuload: {e} (see gpuload --help)");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("gpuload: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Args, String> {
        match parse(line.split_whitespace().map(String::from))? {
            Parsed::Run(a) => Ok(a),
            Parsed::Help => Err("help".into()),
        }
    }

    #[test]
    fn options_parse_with_defaults() {
        let a = args("train --kernel-ms 2.5 --seconds=3").unwrap();
        assert_eq!(a.mode, "train");
        assert_eq!(a.kernel_ns().unwrap(), 2_500_000);
        assert_eq!(a.seconds("seconds").unwrap(), Duration::from_secs(3));
        assert_eq!(a.number::<usize>("window").unwrap(), 4);
        assert_eq!(a.number::<i32>("device").unwrap(), 0);
        let a = args("slice").unwrap();
        assert_eq!(a.kernel_ns().unwrap(), 50_000);
        assert_eq!(a.number::<usize>("window").unwrap(), 32);
        assert_eq!(a.seconds("seconds").unwrap(), Duration::from_secs(3));
        let a = args("slice --kernel-ms 0.2 --competitors 0").unwrap();
        assert_eq!(a.kernel_ns().unwrap(), 200_000);
        assert_eq!(a.number::<usize>("competitors").unwrap(), 0);
        let a = args("probe").unwrap();
        assert_eq!(a.number::<u32>("calls").unwrap(), 100);
        let a = args("alloc --chunk 1GiB").unwrap();
        assert_eq!(a.size("chunk").unwrap(), Some(1 << 30));
        assert_eq!(a.size("limit").unwrap(), None);
    }

    #[test]
    fn bad_usage_is_explained() {
        assert!(args("").unwrap_err().contains("no mode"));
        assert!(args("fly").unwrap_err().contains("unknown mode"));
        assert!(args("train --bogus 1")
            .unwrap_err()
            .contains("unknown option"));
        assert!(args("train --bytes 1")
            .unwrap_err()
            .contains("does not apply"));
        assert!(args("train --seconds")
            .unwrap_err()
            .contains("needs a value"));
        assert!(args("train extra").unwrap_err().contains("unexpected"));
        assert_eq!(args("infer --help").unwrap_err(), "help");
        let a = args("infer --rate 0").unwrap();
        assert!(a.positive("rate").is_err());
        let a = args("memcheck --bytes lots").unwrap();
        assert!(a.size("bytes").is_err());
        assert!(args("probe --kernel-ms 1")
            .unwrap_err()
            .contains("does not apply"));
    }

    #[test]
    fn help_lists_every_mode_and_option() {
        let h = help();
        assert!(MODES.iter().all(|(m, _)| h.contains(m)));
        assert!(FLAGS.iter().all(|f| h.contains(&format!("--{}", f.name))));
        assert!(FLAGS
            .iter()
            .all(|f| f.modes.iter().all(|m| ALL.contains(m))));
    }
}
