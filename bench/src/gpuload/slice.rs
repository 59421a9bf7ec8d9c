//! The time slice a GPU gives each of two processes that both keep it busy.
//!
//! The measuring process queues short spin kernels back to back on one stream with a timing
//! event after each. While it holds the GPU, consecutive events are one kernel apart; while
//! the other process holds it, nothing of this stream runs, so the interval that spans the
//! other's slice is one kernel plus that slice. From the event times alone:
//!
//! - a *typical* interval is the median (most intervals lie inside this process's slices);
//! - an interval longer than twice the typical one plus 10 µs is a *gap*: the other process's
//!   slice is the gap less one typical interval;
//! - between two gaps, this process's slice is the sum of the intervals plus one typical
//!   interval (the slice begins and ends inside a kernel; the two partial kernels make one
//!   on average).

use super::{percentile, warm_up};
use crate::gpu::{Event, Gpu, Result};
use crate::kernels::Kernels;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// What the event times show.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceStats {
    /// Intervals between consecutive events.
    pub intervals: usize,
    /// The median interval, ms.
    pub typical_ms: f64,
    /// The other process's slices (each gap less one typical interval), ms, sorted.
    pub other_ms: Vec<f64>,
    /// This process's slices between two gaps, ms, sorted.
    pub own_ms: Vec<f64>,
    /// The time the stamps span, ms.
    pub span_ms: f64,
}

impl SliceStats {
    /// The figures as JSON: counts, and median, p90 and mean of each kind of slice.
    pub fn to_json(&self) -> Value {
        let describe = |v: &[f64]| {
            if v.is_empty() {
                return Value::Null;
            }
            json!({
                "count": v.len(),
                "median_ms": percentile(v, 0.5),
                "p90_ms": percentile(v, 0.9),
                "mean_ms": v.iter().sum::<f64>() / v.len() as f64,
            })
        };
        json!({
            "intervals": self.intervals,
            "typical_interval_ms": self.typical_ms,
            "span_ms": self.span_ms,
            "switches_per_s": if self.span_ms > 0.0 {
                self.other_ms.len() as f64 / (self.span_ms / 1e3)
            } else {
                0.0
            },
            "other_slice": describe(&self.other_ms),
            "own_slice": describe(&self.own_ms),
        })
    }
}

/// Reads the slices from event times (ms, in completion order).
pub fn slices(stamps_ms: &[f64]) -> SliceStats {
    let intervals: Vec<f64> = stamps_ms.windows(2).map(|w| w[1] - w[0]).collect();
    let mut sorted = intervals.clone();
    sorted.sort_by(f64::total_cmp);
    let typical = percentile(&sorted, 0.5);
    let gap = 2.0 * typical + 0.010;
    let mut other = Vec::new();
    let mut own = Vec::new();
    // The running sum of intervals since the last gap; `None` before the first gap, whose
    // run is not a whole slice.
    let mut run: Option<f64> = None;
    for &d in &intervals {
        if d > gap {
            other.push(d - typical);
            if let Some(r) = run {
                own.push(r + typical);
            }
            run = Some(0.0);
        } else if let Some(r) = run.as_mut() {
            *r += d;
        }
    }
    other.sort_by(f64::total_cmp);
    own.sort_by(f64::total_cmp);
    SliceStats {
        intervals: intervals.len(),
        typical_ms: typical,
        other_ms: other,
        own_ms: own,
        span_ms: match (stamps_ms.first(), stamps_ms.last()) {
            (Some(a), Some(b)) => b - a,
            _ => 0.0,
        },
    }
}

/// Queues `tessera_spin(kernel_ns)` back to back with a timing event after each, at most
/// `window` in flight, for `warmup + duration`; reads the slices from the events of the last
/// `duration`. Another process saturating the same GPU is the caller's to start.
pub fn measure(
    gpu: &Gpu,
    kernel_ns: u64,
    warmup: Duration,
    duration: Duration,
    window: usize,
) -> Result<Value> {
    let kernels = Kernels::load(gpu)?;
    let stream = gpu.stream()?;
    let window = window.max(1);
    // Timing events; each time is read against `origin` once the event has completed, before
    // its slot is recorded again.
    let origin = gpu.event(0)?;
    let events: Vec<Event<'_>> = (0..window).map(|_| gpu.event(0)).collect::<Result<_>>()?;
    warm_up(&kernels, &stream)?;
    origin.record(&stream)?;
    let mut stamps = Vec::new();
    let start = Instant::now();
    let mut launched = 0usize;
    while start.elapsed() < warmup + duration {
        let slot = &events[launched % window];
        if launched >= window {
            slot.synchronize()?;
            stamps.push(f64::from(slot.elapsed_ms_since(&origin)?));
        }
        kernels.spin(&stream, kernel_ns)?;
        slot.record(&stream)?;
        launched += 1;
    }
    for k in launched.saturating_sub(window)..launched {
        let slot = &events[k % window];
        slot.synchronize()?;
        stamps.push(f64::from(slot.elapsed_ms_since(&origin)?));
    }
    let from = warmup.as_secs_f64() * 1e3;
    let measured: Vec<f64> = stamps.into_iter().filter(|&t| t >= from).collect();
    let stats = slices(&measured);
    let mut report = json!({
        "mode": "slice",
        "device": gpu.ordinal(),
        "kernel_ms": kernel_ns as f64 / 1e6,
        "window": window,
        "kernels": launched,
        "seconds": start.elapsed().as_secs_f64(),
    });
    if let (Value::Object(r), Value::Object(s)) = (&mut report, stats.to_json()) {
        r.extend(s);
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Times of events 0.1 ms apart while this process holds the GPU: it holds it for
    /// `own` ms, then the other process for `other` ms, `cycles` times.
    fn alternating(own: f64, other: f64, cycles: usize) -> Vec<f64> {
        let k = 0.1;
        let mut t = 0.0;
        let mut v = vec![t];
        for _ in 0..cycles {
            let per = (own / k).round() as usize;
            for _ in 0..per - 1 {
                t += k;
                v.push(t);
            }
            // The last kernel of the slice completes after the other's slice.
            t += k + other;
            v.push(t);
        }
        v
    }

    #[test]
    fn two_processes_with_one_ms_slices() {
        let s = slices(&alternating(1.0, 1.0, 50));
        assert!((s.typical_ms - 0.1).abs() < 1e-9, "{s:?}");
        assert_eq!(s.other_ms.len(), 50);
        assert_eq!(s.own_ms.len(), 49);
        for v in s.other_ms.iter().chain(&s.own_ms) {
            assert!((v - 1.0).abs() < 1e-6, "{s:?}");
        }
    }

    #[test]
    fn unequal_slices_are_told_apart() {
        let s = slices(&alternating(2.0, 0.5, 20));
        assert!((percentile(&s.own_ms, 0.5) - 2.0).abs() < 1e-6, "{s:?}");
        assert!((percentile(&s.other_ms, 0.5) - 0.5).abs() < 1e-6, "{s:?}");
    }

    #[test]
    fn alone_there_are_no_gaps() {
        let stamps: Vec<f64> = (0..1000).map(|i| f64::from(i) * 0.05).collect();
        let s = slices(&stamps);
        assert!(s.other_ms.is_empty() && s.own_ms.is_empty(), "{s:?}");
        assert_eq!(s.to_json()["other_slice"], Value::Null);
        assert!(slices(&[]).other_ms.is_empty());
    }
}
