//! The workloads of `gpuload`, each a function from options to one JSON report. They use only
//! the driver API, so they measure simgpu and a real GPU alike.

use crate::driver::{
    Nvml, CUDA_ERROR_NOT_READY, CUDA_ERROR_OUT_OF_MEMORY, CU_EVENT_BLOCKING_SYNC,
    CU_EVENT_DISABLE_TIMING,
};
use crate::gpu::{DeviceBuffer, Error, Event, Gpu, Result, Stream};
use crate::kernels::Kernels;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

mod progress;
pub mod shapes;
pub mod slice;

pub use progress::{Progress, PROGRESS_DIR_ENV};

/// `alloc` halves its chunk on each out-of-memory down to this size, so it stops within this
/// many bytes of what the device had free. 1 MiB is far below any context overhead and
/// cheap enough that filling an 80 GiB device takes a few hundred calls after the big chunks.
pub const MIN_CHUNK: u64 = 1 << 20;

/// The word `memcheck` writes at index `i` before the kernel runs: varied, so that a copy
/// that lands at the wrong offset is caught.
fn pattern(i: u64) -> u32 {
    (i as u32).wrapping_mul(0x9e37_79b9) ^ 0x5a5a_5a5a
}

/// The word the fill kernel writes.
const FILL_VALUE: u32 = 0xc0ff_ee11;

/// Device, driver and memory as this process's context sees them.
pub fn info(gpu: &Gpu) -> Result<Value> {
    let memory = gpu.memory_info()?;
    // The driver's own version (like 550.54.15) only NVML knows; a machine without NVML
    // still reports the rest.
    let nvml = Nvml::open();
    let nvml_version = nvml
        .as_ref()
        .map_err(Clone::clone)
        .and_then(Nvml::driver_version);
    let context = nvml
        .as_ref()
        .map_err(ToString::to_string)
        .and_then(|n| own_context(n, gpu));
    Ok(json!({
        "mode": "info",
        "device": gpu.ordinal(),
        "name": gpu.name()?,
        "driver_version": gpu.driver_version()?,
        "nvml_driver_version": nvml_version.as_ref().ok(),
        "nvml_error": nvml_version.as_ref().err().map(ToString::to_string),
        "total": memory.total,
        "free": memory.free,
        // What this process's context holds by NVML (it has allocated nothing): what every
        // context of a program like this one costs on this driver and GPU.
        "context_bytes": context.as_ref().ok(),
        "context_error": context.as_ref().err(),
    }))
}

/// How long [`info`] waits for NVML to list this process: a driver may list a process a while
/// after its context exists.
const LISTING_WAIT: Duration = Duration::from_secs(3);

/// NVML's figure for this process on the GPU's device (NVML's index taken to be the CUDA
/// ordinal, as on a node whose devices are not reordered).
fn own_context(nvml: &Nvml, gpu: &Gpu) -> std::result::Result<u64, String> {
    let me = std::process::id();
    let index = u32::try_from(gpu.ordinal()).map_err(|_| "no device".to_string())?;
    let deadline = Instant::now() + LISTING_WAIT;
    loop {
        let listed = nvml.process_memory(index).map_err(|e| e.to_string())?;
        if let Some(&(_, bytes)) = listed.iter().find(|(pid, _)| *pid == me) {
            return Ok(bytes);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "NVML did not list this process (pid {me}) with a figure within {LISTING_WAIT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Copies a pattern of `bytes` to the device, fills the middle half with a kernel, copies it
/// back and checks every word. `verified` is false if any word is wrong.
pub fn memcheck(gpu: &Gpu, bytes: u64) -> Result<Value> {
    let words = (bytes / 4).max(1);
    let kernels = Kernels::load(gpu)?;
    let stream = gpu.stream()?;
    let buffer = gpu.alloc(words * 4)?;
    let host: Vec<u8> = (0..words).flat_map(|i| pattern(i).to_le_bytes()).collect();
    buffer.copy_from_host(&host)?;
    let fill = words / 4..words / 4 + words / 2;
    let fill_ptr = buffer.ptr() + fill.start * 4;
    kernels.fill_u32(&stream, fill_ptr, fill.end - fill.start, FILL_VALUE)?;
    stream.synchronize()?;
    let mut back = vec![0u8; host.len()];
    buffer.copy_to_host(&mut back)?;
    let mut mismatches = 0u64;
    let mut first_mismatch = None;
    for (i, word) in back.chunks_exact(4).enumerate() {
        let i = i as u64;
        let want = if fill.contains(&i) {
            FILL_VALUE
        } else {
            pattern(i)
        };
        if u32::from_le_bytes(word.try_into().expect("4-byte chunk")) != want {
            mismatches += 1;
            first_mismatch.get_or_insert(i * 4);
        }
    }
    Ok(json!({
        "mode": "memcheck",
        "device": gpu.ordinal(),
        "bytes": words * 4,
        "filled": (fill.end - fill.start) * 4,
        "verified": mismatches == 0,
        "mismatched_words": mismatches,
        "first_mismatch_offset": first_mismatch,
    }))
}

/// What `alloc` took: the report and the memory, held until dropped.
pub struct Allocation<'g> {
    pub report: Value,
    pub buffers: Vec<DeviceBuffer<'g>>,
}

/// Allocates `chunk`-sized buffers until the device runs out, halving the chunk on each
/// out-of-memory down to [`MIN_CHUNK`], or until `limit` bytes are held; waits `interval`
/// after each chunk allocated.
pub fn alloc(
    gpu: &Gpu,
    chunk: u64,
    limit: Option<u64>,
    interval: Duration,
) -> Result<Allocation<'_>> {
    let before = gpu.memory_info()?;
    let min_chunk = MIN_CHUNK.min(chunk).max(1);
    let mut chunk = chunk.max(min_chunk);
    let mut buffers = Vec::new();
    let mut total = 0u64;
    let mut error = None;
    loop {
        let size = match limit {
            Some(limit) if total >= limit => break,
            Some(limit) => chunk.min(limit - total),
            None => chunk,
        };
        match gpu.alloc(size) {
            Ok(buffer) => {
                total += size;
                buffers.push(buffer);
                std::thread::sleep(interval);
            }
            Err(Error::Driver(e)) if e.code == CUDA_ERROR_OUT_OF_MEMORY => {
                if chunk == min_chunk {
                    error = Some(e.name);
                    break;
                }
                chunk = (chunk / 2).max(min_chunk);
            }
            Err(e) => return Err(e),
        }
    }
    let after = gpu.memory_info()?;
    let report = json!({
        "mode": "alloc",
        "device": gpu.ordinal(),
        "total": before.total,
        "context_free": before.free,
        "min_chunk": min_chunk,
        "bytes": total,
        "chunks": buffers.len(),
        "error": error,
        "free_after": after.free,
    });
    Ok(Allocation { report, buffers })
}

/// Queues `tessera_spin(kernel_ns)` back to back on one stream for `duration`, with at most
/// `window` kernels in flight (each launch past the window waits for the kernel `window`
/// launches earlier), then drains.
pub fn train(gpu: &Gpu, kernel_ns: u64, duration: Duration, window: usize) -> Result<Value> {
    let kernels = Kernels::load(gpu)?;
    let stream = gpu.stream()?;
    let window = window.max(1);
    let events: Vec<Event<'_>> = (0..window)
        .map(|_| gpu.event(CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC))
        .collect::<Result<_>>()?;
    warm_up(&kernels, &stream)?;
    let progress = Progress::from_env();
    let start = Instant::now();
    let mut launched = 0u64;
    // Kernels known to have completed (and published as progress).
    let mut completed = 0u64;
    while start.elapsed() < duration {
        let slot = &events[(launched % window as u64) as usize];
        if launched >= window as u64 {
            slot.synchronize()?;
            // The kernel `window` launches back has run, and every one before it.
            let now = launched - window as u64 + 1;
            if let Some(p) = &progress {
                p.add(now - completed, (now - completed) * kernel_ns);
            }
            completed = now;
        }
        kernels.spin(&stream, kernel_ns)?;
        slot.record(&stream)?;
        launched += 1;
    }
    stream.synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(p) = &progress {
        p.add(launched - completed, (launched - completed) * kernel_ns);
        p.finish();
    }
    Ok(json!({
        "mode": "train",
        "device": gpu.ordinal(),
        "kernel_ms": kernel_ns as f64 / 1e6,
        "window": window,
        "seconds": seconds,
        "kernels": launched,
        "kernels_per_s": launched as f64 / seconds,
        // The share of the wall time this process's kernels occupied the GPU, if each ran
        // for its nominal length.
        "gpu_fraction": launched as f64 * kernel_ns as f64 / 1e9 / seconds,
    }))
}

/// Open-loop requests: request `i` is due at `i / rate` seconds; each queues `kernels` spin
/// kernels and synchronizes. Latency runs from the due time (so queueing behind a slow
/// request counts) to the end of the synchronize.
pub fn infer(
    gpu: &Gpu,
    rate: f64,
    kernels_per_request: u32,
    kernel_ns: u64,
    duration: Duration,
) -> Result<Value> {
    let kernels = Kernels::load(gpu)?;
    let stream = gpu.stream()?;
    warm_up(&kernels, &stream)?;
    let progress = Progress::from_env();
    let start = Instant::now();
    let mut latencies = Vec::new();
    loop {
        let due = start + Duration::from_secs_f64(latencies.len() as f64 / rate);
        if due >= start + duration {
            break;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        for _ in 0..kernels_per_request {
            kernels.spin(&stream, kernel_ns)?;
        }
        stream.synchronize()?;
        latencies.push(due.elapsed().as_secs_f64() * 1e3);
        if let Some(p) = &progress {
            let n = u64::from(kernels_per_request);
            p.add(n, n * kernel_ns);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Some(p) = &progress {
        p.finish();
    }
    latencies.sort_by(f64::total_cmp);
    let mean = latencies.iter().sum::<f64>() / latencies.len().max(1) as f64;
    Ok(json!({
        "mode": "infer",
        "device": gpu.ordinal(),
        "rate": rate,
        "kernels": kernels_per_request,
        "kernel_ms": kernel_ns as f64 / 1e6,
        "seconds": seconds,
        "count": latencies.len(),
        "p50_ms": percentile(&latencies, 0.50),
        "p99_ms": percentile(&latencies, 0.99),
        "max_ms": latencies.last().copied().unwrap_or(0.0),
        "mean_ms": mean,
        // Every request, sorted: the scenario runner draws its distribution.
        "latencies_ms": latencies,
    }))
}

/// Host cost of the calls a sharing layer hooks on the hot path: `calls` calls per batch,
/// `batches` batches after one batch of warm-up; per call, the median (and the 10th and 90th
/// percentiles) over batches of the batch's time divided by its calls. Work the calls queue
/// is drained between batches, outside the timed part, so that a full launch queue never
/// makes a launch wait for the GPU.
pub fn probe(gpu: &Gpu, calls: u32, batches: u32) -> Result<Value> {
    let kernels = Kernels::load(gpu)?;
    let stream = gpu.stream()?;
    let event = gpu.event(CU_EVENT_DISABLE_TIMING)?;
    warm_up(&kernels, &stream)?;
    let api = gpu.driver().api();
    let calls = calls.max(1);
    // Times `batches + 1` batches of `calls` calls of `one` (the first is warm-up), running
    // `between` after each, untimed.
    let time = |one: &mut dyn FnMut() -> Result<()>,
                between: &mut dyn FnMut() -> Result<()>|
     -> Result<Value> {
        let mut per_call = Vec::with_capacity(batches as usize);
        for b in 0..=batches {
            let start = Instant::now();
            for _ in 0..calls {
                one()?;
            }
            let ns = start.elapsed().as_nanos() as f64 / f64::from(calls);
            between()?;
            if b > 0 {
                per_call.push(ns);
            }
        }
        per_call.sort_by(f64::total_cmp);
        Ok(json!({
            "median_ns": percentile(&per_call, 0.5),
            "p10_ns": percentile(&per_call, 0.1),
            "p90_ns": percentile(&per_call, 0.9),
        }))
    };
    let sync = &mut || stream.synchronize();
    let launch = time(&mut || kernels.spin(&stream, 0), sync)?;
    let record = time(&mut || event.record(&stream), sync)?;
    event.record(&stream)?;
    stream.synchronize()?;
    let query = time(
        &mut || {
            // SAFETY: `event` is a live event of this context.
            let r = unsafe { (api.cuEventQuery)(event.raw()) };
            gpu.check("cuEventQuery", r)
        },
        &mut || Ok(()),
    )?;
    // A query of an event the GPU has not reached yet: the case a sharing layer that polls
    // its own events meets most. One long kernel ahead of the event keeps it pending.
    // 100 ms is far longer than the batches take; `still_pending` says whether it was.
    kernels.spin(&stream, 100_000_000)?;
    event.record(&stream)?;
    let mut still_pending = true;
    let mut query_pending = time(
        &mut || {
            // SAFETY: `event` is a live event of this context.
            let r = unsafe { (api.cuEventQuery)(event.raw()) };
            if r == CUDA_ERROR_NOT_READY {
                return Ok(());
            }
            still_pending = false;
            gpu.check("cuEventQuery", r)
        },
        &mut || Ok(()),
    )?;
    query_pending["still_pending"] = still_pending.into();
    stream.synchronize()?;
    const ALLOC_BYTES: u64 = 1 << 20;
    let alloc_free = time(&mut || gpu.alloc(ALLOC_BYTES).map(drop), &mut || Ok(()))?;
    let mem_get_info = time(&mut || gpu.memory_info().map(drop), &mut || Ok(()))?;
    Ok(json!({
        "mode": "probe",
        "device": gpu.ordinal(),
        "calls": calls,
        "batches": batches,
        "cuLaunchKernel": launch,
        "cuEventRecord": record,
        "cuEventQuery": query,
        "cuEventQuery_pending": query_pending,
        "cuMemAlloc_cuMemFree_1MiB": alloc_free,
        "cuMemGetInfo": mem_get_info,
        // What libtessera.so was told, when it is preloaded (for the report).
        "preloaded": std::env::var_os("LD_PRELOAD").is_some_and(|v| !v.is_empty()),
        "memory_limit": std::env::var(tessera_region::env::MEMORY_LIMIT).ok(),
    }))
}

/// One empty kernel, so that first-launch costs (lazy loading on a real driver) stay out of
/// the measurement.
fn warm_up(kernels: &Kernels<'_>, stream: &Stream<'_>) -> Result<()> {
    kernels.spin(stream, 0)?;
    stream.synchronize()
}

/// The nearest-rank percentile of sorted values; 0 for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.50), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(percentile(&[1.0, 2.0], 0.0), 1.0);
    }

    #[test]
    fn pattern_varies() {
        assert_ne!(pattern(0), pattern(1));
        assert_ne!(pattern(1), FILL_VALUE);
    }
}
