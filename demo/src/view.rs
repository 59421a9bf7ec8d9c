//! What the demo prints: the introduction, the live table (redrawn in place on a terminal),
//! a plain line per second otherwise, and the summary.

use crate::measure::{Meter, Row};
use crate::plan::PLANS;
use crate::workload::Results;
use serde_json::Value;
use std::io::Write;
use std::time::Duration;
use tessera_region::units::format_size_rounded;

/// Shown where a figure is not known.
const NONE: &str = "—";
/// Width of the share bar.
const BAR: usize = 10;

/// The introduction: the GPU and the three containers.
pub fn intro(gpu: &str, seconds: u32) -> String {
    let mut out = format!(
        "Tessera demo: three containers share {gpu} for {seconds} s,\n\
         under a controld running in this process.\n\n"
    );
    out += &format!(
        "  {:<10} {:<16} {:<12} {:<9} {:>6}  {}\n",
        "CONTAINER", "ROLE", "COMPUTE", "PRIORITY", "MEMORY", "RUNS (gpuload)"
    );
    for p in &PLANS {
        out += &format!(
            "  {:<10} {:<16} {:<12} {:<9} {:>6}  {} {}; holds {}\n",
            p.name, p.role, p.compute, p.priority, p.memory, p.work[0], p.work_text, p.holds
        );
    }
    out + "\n"
}

fn percent(share: Option<f64>) -> String {
    share.map_or(NONE.to_string(), |s| format!("{:.0}%", s * 100.0))
}

fn memory(used: u64, cap: Option<u64>) -> String {
    format!(
        "{} / {}",
        format_size_rounded(used),
        cap.map_or("unlimited".into(), format_size_rounded)
    )
}

/// The measured share: simgpu's on simgpu, the daemon's elsewhere.
fn measured(row: &Row, simulated: bool) -> Option<f64> {
    if simulated {
        row.measured
    } else {
        row.scheduled.as_ref().and_then(|s| s.measured)
    }
}

fn bar(share: Option<f64>) -> String {
    let filled = ((share.unwrap_or(0.0) * BAR as f64).round() as usize).min(BAR);
    "█".repeat(filled) + &"·".repeat(BAR - filled)
}

/// The live table.
pub fn live(meter: &Meter, elapsed: Duration, seconds: u32) -> String {
    let mut out = format!(
        "{:.1} s of {seconds} s   GPU busy {}   Ctrl-C stops the demo\n",
        elapsed.as_secs_f64(),
        percent(meter.gpu_busy)
    );
    out += &format!(
        "  {:<10} {:<12} {:<9} {:>17}  {:>6} {:>5} {:<BAR$} {:>8}  {:>9} {:>7}\n",
        "CONTAINER",
        "COMPUTE",
        "PRIORITY",
        "MEMORY USED / CAP",
        "RATE",
        "GOT",
        "",
        "CONTROLD",
        "THROTTLED",
        "PREEMPT"
    );
    for row in &meter.rows {
        let got = measured(row, meter.simulated);
        let s = row.scheduled.as_ref();
        out += &format!(
            "  {:<10} {:<12} {:<9} {:>17}  {:>6} {:>5} {} {:>8}  {:>9} {:>7}\n",
            row.name,
            row.compute,
            row.priority,
            memory(row.memory_used, row.memory_cap),
            percent(s.and_then(|s| s.target)),
            percent(got),
            bar(got),
            percent(s.and_then(|s| s.measured)),
            s.map_or(NONE.into(), |s| format!(
                "{:.2} s",
                s.throttled_ns as f64 / 1e9
            )),
            s.map_or(NONE.into(), |s| s.preemptions.to_string()),
        );
    }
    let got = if meter.simulated {
        "simgpu's count of engine time"
    } else {
        "the daemon's measure"
    };
    out += &format!(
        "  Shares of GPU time over the last second. RATE: what the scheduler gives it now; \
         GOT: {got};\n  CONTROLD: the daemon's own measure. The latency of {} comes with \
         its report at the end.\n",
        PLANS[0].name
    );
    out
}

/// Replaces the `previous` lines drawn last with `block`; returns its line count.
pub fn redraw(out: &mut impl Write, previous: usize, block: &str) -> usize {
    // Line wrapping off while drawing, so that a narrow terminal clips the lines rather
    // than wrapping them, and the block stays `previous` lines high.
    let mut text = String::from("\x1b[?7l");
    if previous > 0 {
        // Up to the block's first line, then clear to the end of the screen.
        text += &format!("\x1b[{previous}A\r\x1b[J");
    }
    text += block;
    text += "\x1b[?7h";
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    block.lines().count()
}

/// One line for a log: the time, and per container its share and memory.
pub fn line(meter: &Meter, elapsed: Duration) -> String {
    let mut line = format!("{:>5.1} s ", elapsed.as_secs_f64());
    for row in &meter.rows {
        line += &format!(
            " | {} {} {}",
            row.name,
            percent(measured(row, meter.simulated)),
            memory(row.memory_used, row.memory_cap).replace(' ', "")
        );
    }
    line + &format!(" | GPU busy {}", percent(meter.gpu_busy))
}

/// The summary: per container its target, average share, memory peak and result; then the
/// workloads' reports.
pub fn summary(meter: &Meter, results: &Results) -> String {
    let (averages, gpu_busy) = meter.averages();
    let mut out = format!(
        "Summary: {} over the {:.1} s all three ran\n",
        meter.gpu,
        meter.span().as_secs_f64()
    );
    out += &format!(
        "  {:<10} {:<12} {:<9} {:>9}  {:<23} {:>17}  {}\n",
        "CONTAINER", "COMPUTE", "PRIORITY", "AVG SHARE", "TARGET", "MEMORY PEAK / CAP", "RESULT"
    );
    for (row, average) in meter.rows.iter().zip(averages) {
        let report = results
            .iter()
            .find(|(name, _)| *name == row.name)
            .and_then(|(_, r)| r.as_ref());
        out += &format!(
            "  {:<10} {:<12} {:<9} {:>9}  {:<23} {:>17}  {}\n",
            row.name,
            row.compute,
            row.priority,
            percent(average),
            target(row.compute),
            memory(row.memory_peak, row.memory_cap),
            report.map_or("no report (stopped early)".into(), result)
        );
    }
    if let Some(busy) = gpu_busy {
        out += &format!(
            "  GPU busy {}. Shares are simgpu's count of each container's engine time.\n",
            percent(Some(busy))
        );
    }
    if meter.rows.iter().all(|r| r.scheduled.is_none()) {
        out += &format!(
            "  Targets are {NONE}: this controld sets no compute shares, so the GPU is \
             time-sliced among whoever has work.\n"
        );
    }
    out += "  TARGET: fixed:Q gets exactly Q % of the GPU's time; burst:Q at least Q % whenever \
            it has work,\n  and idle time beyond; best-effort what the guarantees leave, \
            shared with burst; offline work\n  yields to online work while it runs.\n";
    out
}

/// What a policy promises, in words: `fixed:20` → `20 %`, `burst:50` → `≥ 50 % when it has work`,
/// `best-effort` → `what is left`.
fn target(compute: &str) -> String {
    match compute.split_once(':') {
        Some(("fixed", q)) => format!("{q} %"),
        Some(("burst", q)) => format!("≥ {q} % when it has work"),
        _ => "what is left".to_string(),
    }
}

/// A workload's report in a few words.
fn result(report: &Value) -> String {
    let f = |key: &str| report.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    match report.get("mode").and_then(Value::as_str) {
        Some("infer") => format!(
            "{:.0} requests, latency p50 {:.1} ms, p99 {:.1} ms",
            f("count"),
            f("p50_ms"),
            f("p99_ms")
        ),
        Some("train") => format!(
            "{:.0} kernels of {} ms ({:.0}/s)",
            f("kernels"),
            f("kernel_ms"),
            f("kernels_per_s")
        ),
        _ => report.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_and_percentages() {
        assert_eq!(percent(None), NONE);
        assert_eq!(percent(Some(0.456)), "46%");
        assert_eq!(
            bar(Some(0.5)).chars().filter(|&c| c == '█').count(),
            BAR / 2
        );
        assert_eq!(bar(Some(2.0)).chars().count(), BAR);
        assert_eq!(bar(None).chars().count(), BAR);
    }

    #[test]
    fn results_read_at_a_glance() {
        let infer =
            serde_json::json!({"mode": "infer", "count": 300, "p50_ms": 5.31, "p99_ms": 12.0});
        assert_eq!(
            result(&infer),
            "300 requests, latency p50 5.3 ms, p99 12.0 ms"
        );
        let train = serde_json::json!({"mode": "train", "kernels": 3000, "kernel_ms": 2.0, "kernels_per_s": 200.4});
        assert_eq!(result(&train), "3000 kernels of 2 ms (200/s)");
    }

    #[test]
    fn targets_say_what_each_policy_promises() {
        assert_eq!(target("fixed:20"), "20 %");
        assert_eq!(target("burst:50"), "≥ 50 % when it has work");
        assert_eq!(target("best-effort"), "what is left");
    }
}
