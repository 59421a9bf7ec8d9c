//! `gpuload`: a GPU workload through the CUDA driver API, the way applications use it. Each
//! mode prints one JSON object on stdout; errors go to stderr with a non-zero exit.
//!
//! The modes and their options are declared once below: parsing, defaults, checks, help,
//! "did you mean" hints and completions all come from the declaration. Each mode is one
//! function that opens the GPU and calls its workload in [`tessera_bench::gpuload`].

use clap::{Args, CommandFactory, Parser, Subcommand};
use serde_json::Value;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;
use tessera_bench::gpu::Gpu;
use tessera_bench::gpuload::{self, shapes::Shape};

/// gpuload: a GPU workload through the CUDA driver API (libcuda.so.1).
#[derive(Debug, Parser)]
#[command(
    name = "gpuload",
    subcommand_value_name = "MODE",
    subcommand_help_heading = "Modes",
    after_help = "Sizes take B, KiB, MiB, GiB (or k, m, g). Each mode prints one JSON object on \
                  stdout; errors go to stderr, exit status 1 (2 for bad usage)."
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

/// Every mode.
#[derive(Debug, Subcommand)]
enum Mode {
    /// Copy a pattern to the device, fill its middle with a kernel, copy back, verify.
    Memcheck {
        #[command(flatten)]
        device: Device,
        /// Buffer size.
        #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = at_least_4_bytes)]
        bytes: u64,
    },
    /// Allocate device memory in chunks until it runs out; report how much.
    Alloc {
        #[command(flatten)]
        device: Device,
        /// First chunk; halved on each out-of-memory down to 1MiB.
        #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = nonzero_size)]
        chunk: u64,
        /// Stop once this much is allocated instead of at out-of-memory.
        #[arg(long, value_name = "SIZE", value_parser = size)]
        limit: Option<u64>,
        /// Keep the memory this long after reporting.
        #[arg(long, value_name = "SECONDS", default_value = "0", value_parser = seconds)]
        hold: Duration,
        /// Wait this long after each chunk allocated: a use that grows slowly.
        #[arg(long, value_name = "SECONDS", default_value = "0", value_parser = seconds)]
        interval: Duration,
    },
    /// A saturating stream of spin kernels; report kernels/s.
    Train {
        #[command(flatten)]
        device: Device,
        #[command(flatten)]
        spin: Spin,
        /// Kernels in flight at most.
        #[arg(long, value_name = "N", default_value_t = 4, value_parser = at_least_1)]
        window: usize,
    },
    /// Rounds of --depth kernels on the null stream, one cuCtxSynchronize each.
    Queue(Rounds),
    /// Rounds of --depth kernels over --count non-blocking streams, one cuCtxSynchronize
    /// each.
    Streams(CountedRounds),
    /// A graph of --count kernels, launched --depth/--count times a round, then
    /// synchronized.
    Graph(CountedRounds),
    /// Rounds of --depth kernels on the per-thread default stream (the _ptsz entry points).
    Ptsz(Rounds),
    /// --count host threads, each rounds of --depth/--count kernels on its own stream.
    Threads(CountedRounds),
    /// Requests at a fixed rate, each a few spin kernels and a synchronize; report latency.
    Infer {
        #[command(flatten)]
        device: Device,
        #[command(flatten)]
        spin: Spin,
        /// Requests per second.
        #[arg(long, value_name = "R", default_value = "50", value_parser = positive)]
        rate: f64,
        /// Kernels per request.
        #[arg(long, value_name = "K", default_value_t = 4)]
        kernels: u32,
    },
    /// The device's name, driver version, and free and total memory.
    Info {
        #[command(flatten)]
        device: Device,
    },
    /// Host cost per call of launch, event record and query, alloc+free, cuMemGetInfo.
    Probe {
        #[command(flatten)]
        device: Device,
        /// Calls per timed batch.
        #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        calls: u32,
        /// Timed batches per call (after one of warm-up).
        #[arg(long, value_name = "N", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
        batches: u32,
    },
    /// The time slice between this process and others saturating the same GPU.
    Slice(SliceArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish or powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// The device every mode runs on.
#[derive(Debug, Args)]
struct Device {
    /// Device ordinal.
    #[arg(long = "device", value_name = "N", default_value_t = 0)]
    ordinal: i32,
}

/// The spin kernels of the modes that run for a time.
#[derive(Debug, Args)]
struct Spin {
    /// Length of each spin kernel.
    #[arg(long = "kernel-ms", value_name = "MS", default_value = "1", value_parser = kernel_ns, allow_negative_numbers = true)]
    kernel_ns: u64,
    /// How long to run.
    #[arg(long, value_name = "S", default_value = "5", value_parser = seconds)]
    seconds: Duration,
}

/// The deep-queueing shapes without a count ([`gpuload::shapes`]).
#[derive(Debug, Args)]
struct Rounds {
    #[command(flatten)]
    device: Device,
    #[command(flatten)]
    spin: Spin,
    /// Kernels queued per round, before one synchronization.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = at_least_1)]
    depth: usize,
}

/// The deep-queueing shapes over several streams, graph kernels or threads.
#[derive(Debug, Args)]
struct CountedRounds {
    #[command(flatten)]
    rounds: Rounds,
    /// Streams, kernels per graph, or host threads.
    #[arg(long, value_name = "K", default_value_t = 4, value_parser = at_least_1)]
    count: usize,
}

/// `gpuload slice`: short kernels, so that the slice shows; its own defaults.
#[derive(Debug, Args)]
struct SliceArgs {
    #[command(flatten)]
    device: Device,
    /// Length of each spin kernel.
    #[arg(long = "kernel-ms", value_name = "MS", default_value = "0.05", value_parser = nonzero_kernel_ns, allow_negative_numbers = true)]
    kernel_ns: u64,
    /// How long to measure, after the warm-up.
    #[arg(long, value_name = "S", default_value = "3", value_parser = seconds)]
    seconds: Duration,
    /// Seconds run before measuring, while the competitors start.
    #[arg(long, value_name = "S", default_value = "1", value_parser = seconds)]
    warmup: Duration,
    /// Kernels in flight at most.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = at_least_1)]
    window: usize,
    /// Saturating `gpuload train` processes started beside this one (0: alone).
    #[arg(long, value_name = "N", default_value_t = 1)]
    competitors: usize,
}

/// Why an option's value was refused; clap adds the option and the value.
#[derive(Debug, thiserror::Error)]
enum BadValue {
    #[error("not a valid number")]
    Number,
    #[error("not a duration in seconds")]
    Duration,
    #[error("must be 0 or more")]
    Negative,
    #[error("must be more than 0")]
    NotPositive,
    #[error("must be at least {0}")]
    Below(u64),
    #[error(transparent)]
    Size(#[from] tessera_region::units::SizeError),
}

fn number(text: &str) -> Result<f64, BadValue> {
    text.trim().parse().map_err(|_| BadValue::Number)
}

fn positive(text: &str) -> Result<f64, BadValue> {
    let v = number(text)?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(BadValue::NotPositive)
    }
}

fn seconds(text: &str) -> Result<Duration, BadValue> {
    Duration::try_from_secs_f64(number(text)?).map_err(|_| BadValue::Duration)
}

fn kernel_ns(text: &str) -> Result<u64, BadValue> {
    let ms = number(text)?;
    if !(ms.is_finite() && ms >= 0.0) {
        return Err(BadValue::Negative);
    }
    Ok((ms * 1e6).round() as u64)
}

fn nonzero_kernel_ns(text: &str) -> Result<u64, BadValue> {
    match kernel_ns(text)? {
        0 => Err(BadValue::NotPositive),
        ns => Ok(ns),
    }
}

fn at_least_1(text: &str) -> Result<usize, BadValue> {
    match text.trim().parse().map_err(|_| BadValue::Number)? {
        0 => Err(BadValue::Below(1)),
        n => Ok(n),
    }
}

fn size(text: &str) -> Result<u64, BadValue> {
    Ok(tessera_region::units::parse_size(text)?)
}

fn nonzero_size(text: &str) -> Result<u64, BadValue> {
    match size(text)? {
        0 => Err(BadValue::NotPositive),
        bytes => Ok(bytes),
    }
}

fn at_least_4_bytes(text: &str) -> Result<u64, BadValue> {
    match size(text)? {
        bytes if bytes < 4 => Err(BadValue::Below(4)),
        bytes => Ok(bytes),
    }
}

/// Why a mode that started could not finish.
#[derive(Debug, thiserror::Error)]
enum RunError {
    /// The GPU refused.
    #[error(transparent)]
    Gpu(#[from] tessera_bench::gpu::Error),
    /// `slice` could not find itself to start its competitors.
    #[error("cannot find gpuload itself: {0}")]
    Exe(std::io::Error),
    /// `slice` could not start a competitor.
    #[error("cannot start a competing gpuload train: {0}")]
    Competitor(std::io::Error),
    /// A competitor of `slice` ended early, so the slice was not measured under contention.
    #[error("a competing gpuload train ended before the measurement did ({0})")]
    CompetitorEnded(std::process::ExitStatus),
}

/// Prints one report; a closed stdout (a reader that went away) is not an error.
fn emit(report: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{report}").and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("gpuload: cannot write the report: {e}");
        }
    }
}

/// `memcheck`: exit 1 when a word read back wrong.
fn memcheck(device: &Device, bytes: u64) -> Result<bool, RunError> {
    let gpu = Gpu::open(device.ordinal)?;
    let report = gpuload::memcheck(&gpu, bytes)?;
    let verified = report["verified"] == true;
    if !verified {
        eprintln!(
            "gpuload: memcheck read back {} wrong words, the first at byte offset {}",
            report["mismatched_words"], report["first_mismatch_offset"]
        );
    }
    emit(&report.to_string());
    Ok(verified)
}

/// `alloc`: reports, then holds the memory for `hold`.
fn alloc(
    device: &Device,
    chunk: u64,
    limit: Option<u64>,
    hold: Duration,
    interval: Duration,
) -> Result<bool, RunError> {
    let gpu = Gpu::open(device.ordinal)?;
    let allocation = gpuload::alloc(&gpu, chunk, limit, interval)?;
    emit(&allocation.report.to_string());
    std::thread::sleep(hold);
    Ok(true)
}

/// A mode whose whole result is its report.
fn report(
    device: &Device,
    work: impl FnOnce(&Gpu) -> tessera_bench::gpu::Result<Value>,
) -> Result<bool, RunError> {
    let gpu = Gpu::open(device.ordinal)?;
    emit(&work(&gpu)?.to_string());
    Ok(true)
}

/// The deep-queueing modes.
fn shape(rounds: &Rounds, shape: Shape) -> Result<bool, RunError> {
    report(&rounds.device, |gpu| {
        gpuload::shapes::run(
            gpu,
            shape,
            rounds.spin.kernel_ns,
            rounds.depth,
            rounds.spin.seconds,
        )
    })
}

/// `slice`: starts the competitors (`gpuload train` on the same device, running past the
/// end), measures, and checks that they ran throughout.
fn slice(args: &SliceArgs) -> Result<bool, RunError> {
    let exe = std::env::current_exe().map_err(RunError::Exe)?;
    let run_for = format!("{}", (args.warmup + args.seconds).as_secs_f64() + 30.0);
    let kernel = format!("{}", args.kernel_ns as f64 / 1e6);
    let mut others = Vec::new();
    for _ in 0..args.competitors {
        let child = std::process::Command::new(&exe)
            .args(["train", "--device", &args.device.ordinal.to_string()])
            .args(["--kernel-ms", &kernel, "--window", &args.window.to_string()])
            .args(["--seconds", &run_for])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(RunError::Competitor)?;
        others.push(Competitor(child));
    }
    let gpu = Gpu::open(args.device.ordinal)?;
    let mut report =
        gpuload::slice::measure(&gpu, args.kernel_ns, args.warmup, args.seconds, args.window)?;
    for c in &mut others {
        if let Ok(Some(status)) = c.0.try_wait() {
            return Err(RunError::CompetitorEnded(status));
        }
    }
    report["competitors"] = args.competitors.into();
    report["warmup_s"] = args.warmup.as_secs_f64().into();
    emit(&report.to_string());
    Ok(true)
}

/// A competing process, killed and reaped when dropped.
struct Competitor(std::process::Child);

impl Drop for Competitor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `completions SHELL`.
fn completions(shell: clap_complete::Shell) -> Result<bool, RunError> {
    let mut script = Vec::new();
    // Into memory first: the generator cannot take a closed pipe as `emit` does.
    clap_complete::generate(shell, &mut Cli::command(), "gpuload", &mut script);
    emit(String::from_utf8_lossy(&script).trim_end());
    Ok(true)
}

/// Runs the mode. `Ok(false)` is a run that completed and reported a failure (memcheck
/// found wrong data).
fn run(mode: Mode) -> Result<bool, RunError> {
    match mode {
        Mode::Memcheck { device, bytes } => memcheck(&device, bytes),
        Mode::Alloc {
            device,
            chunk,
            limit,
            hold,
            interval,
        } => alloc(&device, chunk, limit, hold, interval),
        Mode::Train {
            device,
            spin,
            window,
        } => report(&device, |gpu| {
            gpuload::train(gpu, spin.kernel_ns, spin.seconds, window)
        }),
        Mode::Queue(rounds) => shape(&rounds, Shape::Queue),
        Mode::Ptsz(rounds) => shape(&rounds, Shape::PerThread),
        Mode::Streams(c) => shape(&c.rounds, Shape::Streams(c.count)),
        Mode::Graph(c) => shape(&c.rounds, Shape::Graph(c.count)),
        Mode::Threads(c) => shape(&c.rounds, Shape::Threads(c.count)),
        Mode::Infer {
            device,
            spin,
            rate,
            kernels,
        } => report(&device, |gpu| {
            gpuload::infer(gpu, rate, kernels, spin.kernel_ns, spin.seconds)
        }),
        Mode::Info { device } => report(&device, gpuload::info),
        Mode::Probe {
            device,
            calls,
            batches,
        } => report(&device, |gpu| gpuload::probe(gpu, calls, batches)),
        Mode::Slice(args) => slice(&args),
        Mode::Completions { shell } => completions(shell),
    }
}

fn main() -> ExitCode {
    // Usage errors exit 2 with clap's hint; `--help` exits 0.
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    match run(cli.mode) {
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

    fn mode(line: &str) -> Result<Mode, clap::Error> {
        Cli::try_parse_from(std::iter::once("gpuload").chain(line.split_whitespace()))
            .map(|c| c.mode)
    }

    #[test]
    fn the_declaration_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn options_parse_with_defaults() {
        let Mode::Train {
            device,
            spin,
            window,
        } = mode("train --kernel-ms 2.5 --seconds=3").unwrap()
        else {
            panic!("not train")
        };
        assert_eq!(spin.kernel_ns, 2_500_000);
        assert_eq!(spin.seconds, Duration::from_secs(3));
        assert_eq!(window, 4);
        assert_eq!(device.ordinal, 0);
        let Mode::Slice(s) = mode("slice").unwrap() else {
            panic!("not slice")
        };
        assert_eq!(s.kernel_ns, 50_000);
        assert_eq!(s.window, 32);
        assert_eq!(s.seconds, Duration::from_secs(3));
        let Mode::Slice(s) = mode("slice --kernel-ms 0.2 --competitors 0").unwrap() else {
            panic!("not slice")
        };
        assert_eq!(s.kernel_ns, 200_000);
        assert_eq!(s.competitors, 0);
        let Mode::Probe { calls, .. } = mode("probe").unwrap() else {
            panic!("not probe")
        };
        assert_eq!(calls, 100);
        let Mode::Alloc { chunk, limit, .. } = mode("alloc --chunk 1GiB").unwrap() else {
            panic!("not alloc")
        };
        assert_eq!(chunk, 1 << 30);
        assert_eq!(limit, None);
        let Mode::Streams(c) = mode("streams --count 8 --depth 64").unwrap() else {
            panic!("not streams")
        };
        assert_eq!((c.count, c.rounds.depth), (8, 64));
    }

    #[test]
    fn bad_usage_is_explained() {
        use clap::error::ErrorKind;
        let kind = |line| mode(line).unwrap_err().kind();
        assert_eq!(
            kind(""),
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
        assert_eq!(kind("fly"), ErrorKind::InvalidSubcommand);
        assert_eq!(kind("train --bogus 1"), ErrorKind::UnknownArgument);
        // An option of another mode does not apply.
        assert_eq!(kind("train --bytes 1"), ErrorKind::UnknownArgument);
        assert_eq!(kind("probe --kernel-ms 1"), ErrorKind::UnknownArgument);
        assert_eq!(kind("train --seconds"), ErrorKind::InvalidValue);
        assert_eq!(kind("train extra"), ErrorKind::UnknownArgument);
        assert_eq!(kind("infer --help"), ErrorKind::DisplayHelp);
        assert_eq!(kind("infer --rate 0"), ErrorKind::ValueValidation);
        assert_eq!(kind("memcheck --bytes lots"), ErrorKind::ValueValidation);
        assert_eq!(kind("memcheck --bytes 2"), ErrorKind::ValueValidation);
        assert_eq!(kind("train --window 0"), ErrorKind::ValueValidation);
        assert_eq!(kind("slice --kernel-ms 0"), ErrorKind::ValueValidation);
        assert_eq!(kind("probe --calls 0"), ErrorKind::ValueValidation);
        assert_eq!(kind("train --kernel-ms -1"), ErrorKind::ValueValidation);
    }

    #[test]
    fn help_lists_every_mode_and_the_shapes_match_the_library() {
        let cli = Cli::command();
        let h = cli.clone().render_long_help().to_string();
        for m in cli.get_subcommands() {
            assert!(h.contains(m.get_name()), "{} not in help", m.get_name());
        }
        for m in gpuload::shapes::MODES {
            let shape = cli.find_subcommand(m).expect("every shape is a mode");
            assert!(shape.get_arguments().any(|a| a.get_id() == "depth"), "{m}");
        }
    }
}
