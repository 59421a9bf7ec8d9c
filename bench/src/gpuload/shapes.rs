//! The launch shapes of real applications. A training loop, a PyTorch program running ahead
//! of the GPU, a CUDA graph replayed step after step: each queues hundreds or thousands of
//! kernels and synchronizes once, never waiting per kernel. Each shape here does the same in
//! rounds: it queues `depth` spin kernels its own way, synchronizes, and goes again until its
//! time is up, so a limiter is tested on what applications do rather than on a polite
//! workload that keeps a few kernels in flight.

use crate::driver::{
    CUgraph, CUgraphExec, CUstream, CU_EVENT_DISABLE_TIMING, CU_STREAM_CAPTURE_MODE_RELAXED,
    CU_STREAM_NON_BLOCKING,
};
use crate::gpu::{Event, Gpu, Result, Stream};
use crate::gpuload::Progress;
use crate::kernels::Kernels;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How a shape puts its kernels on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// All on the legacy default stream (the null stream), one `cuCtxSynchronize`.
    Queue,
    /// Round robin over `k` non-blocking streams, one `cuCtxSynchronize`.
    Streams(usize),
    /// A graph of `k` kernels captured once and launched `depth / k` times a round.
    Graph(usize),
    /// On the per-thread default stream, through the `_ptsz` entry points a program built
    /// with `--default-stream per-thread` gets.
    PerThread,
    /// `k` host threads, each queueing `depth / k` kernels on a stream of its own and
    /// synchronizing it.
    Threads(usize),
}

impl Shape {
    /// The mode name `gpuload` knows the shape by.
    pub fn mode(self) -> &'static str {
        match self {
            Shape::Queue => "queue",
            Shape::Streams(_) => "streams",
            Shape::Graph(_) => "graph",
            Shape::PerThread => "ptsz",
            Shape::Threads(_) => "threads",
        }
    }

    /// The shape's `k` (streams, graph kernels or threads), 1 where it has none.
    pub fn count(self) -> usize {
        match self {
            Shape::Queue | Shape::PerThread => 1,
            Shape::Streams(k) | Shape::Graph(k) | Shape::Threads(k) => k.max(1),
        }
    }
}

/// Every shape's mode name.
pub const MODES: [&str; 5] = ["queue", "streams", "graph", "ptsz", "threads"];

/// Kernels between two progress markers.
const MARK_EVERY: u64 = 16;

/// The progress a shape publishes while its round runs, for a real driver, which keeps no
/// per-process count of GPU time: a marker event (no timing) after every [`MARK_EVERY`]
/// kernels, polled without waiting after each launch, so that the scenario runner sees
/// progress every few milliseconds rather than once a round. Nothing at all when no one
/// reads progress: the shape is then exactly the application's.
struct Marks<'g> {
    gpu: &'g Gpu,
    progress: Option<&'g Progress>,
    kernel_ns: u64,
    pending: VecDeque<(Event<'g>, u64)>,
    since_mark: u64,
    /// Kernels published this round.
    published: u64,
}

impl<'g> Marks<'g> {
    fn new(gpu: &'g Gpu, progress: Option<&'g Progress>, kernel_ns: u64) -> Marks<'g> {
        Marks {
            gpu,
            progress,
            kernel_ns,
            pending: VecDeque::new(),
            since_mark: 0,
            published: 0,
        }
    }

    /// After `kernels` kernels were queued on `stream`.
    fn launched(&mut self, stream: CUstream, kernels: u64) -> Result<()> {
        let Some(progress) = self.progress else {
            return Ok(());
        };
        self.since_mark += kernels;
        if self.since_mark >= MARK_EVERY {
            let e = self.gpu.event(CU_EVENT_DISABLE_TIMING)?;
            e.record_on(stream)?;
            self.pending.push_back((e, self.since_mark));
            self.since_mark = 0;
        }
        while let Some((e, n)) = self.pending.front() {
            if !e.done()? {
                break;
            }
            progress.add(*n, n * self.kernel_ns);
            self.published += n;
            self.pending.pop_front();
        }
        Ok(())
    }

    /// After the round of `kernels` kernels was synchronized: publishes what the markers
    /// did not.
    fn round_done(&mut self, kernels: u64) {
        if let Some(p) = self.progress {
            let rest = kernels.saturating_sub(self.published);
            p.add(rest, rest * self.kernel_ns);
        }
        self.pending.clear();
        self.since_mark = 0;
        self.published = 0;
    }
}

/// Runs `shape` in rounds of `depth` kernels of `kernel_ns` for `duration` (a round that
/// has started is finished), and reports the kernels run and the share of the wall time
/// they held the GPU if each ran for its nominal length.
pub fn run(
    gpu: &Gpu,
    shape: Shape,
    kernel_ns: u64,
    depth: usize,
    duration: Duration,
) -> Result<Value> {
    let kernels = Kernels::load(gpu)?;
    let depth = depth.max(shape.count());
    let progress = Progress::from_env();
    let done = AtomicU64::new(0);
    let round_done = |marks: &mut Marks<'_>, n: u64| {
        // Relaxed: a total read after every thread has joined.
        done.fetch_add(n, Ordering::Relaxed);
        marks.round_done(n);
    };
    let start = Instant::now();
    let mut rounds = 0u64;
    match shape {
        Shape::Queue | Shape::PerThread => {
            let launch = match shape {
                Shape::Queue => gpu.driver().api().cuLaunchKernel,
                _ => gpu.driver().per_thread().cuLaunchKernel,
            };
            let mut marks = Marks::new(gpu, progress.as_ref(), kernel_ns);
            let stream = match shape {
                Shape::Queue => std::ptr::null_mut(),
                // The per-thread stream, for the markers' plain cuEventRecord.
                _ => crate::driver::CU_STREAM_PER_THREAD,
            };
            while start.elapsed() < duration {
                for _ in 0..depth {
                    kernels.spin_with(launch, std::ptr::null_mut(), kernel_ns)?;
                    marks.launched(stream, 1)?;
                }
                gpu.synchronize()?;
                round_done(&mut marks, depth as u64);
                rounds += 1;
            }
        }
        Shape::Streams(k) => {
            let streams: Vec<Stream<'_>> = (0..k.max(1))
                .map(|_| gpu.stream_with_flags(CU_STREAM_NON_BLOCKING))
                .collect::<Result<_>>()?;
            let mut marks = Marks::new(gpu, progress.as_ref(), kernel_ns);
            while start.elapsed() < duration {
                for i in 0..depth {
                    let stream = &streams[i % streams.len()];
                    kernels.spin(stream, kernel_ns)?;
                    // The markers go on the last stream of each turn round the streams.
                    if (i + 1) % streams.len() == 0 {
                        marks.launched(stream.raw(), streams.len() as u64)?;
                    }
                }
                gpu.synchronize()?;
                round_done(&mut marks, depth as u64);
                rounds += 1;
            }
        }
        Shape::Graph(k) => {
            let stream = gpu.stream_with_flags(CU_STREAM_NON_BLOCKING)?;
            let graph = Graph::capture(gpu, &stream, |s| {
                (0..k.max(1)).try_for_each(|_| kernels.spin(s, kernel_ns))
            })?;
            let launches = depth / k.max(1);
            let mut marks = Marks::new(gpu, progress.as_ref(), kernel_ns);
            while start.elapsed() < duration {
                for _ in 0..launches {
                    graph.launch(&stream)?;
                    marks.launched(stream.raw(), k.max(1) as u64)?;
                }
                stream.synchronize()?;
                round_done(&mut marks, (launches * k.max(1)) as u64);
                rounds += 1;
            }
        }
        Shape::Threads(k) => {
            let per_thread = (depth / k.max(1)).max(1);
            let kernels = &kernels;
            let round_done = &round_done;
            let progress = progress.as_ref();
            let results: Vec<Result<u64>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..k.max(1))
                    .map(|_| {
                        scope.spawn(move || -> Result<u64> {
                            gpu.make_current()?;
                            let stream = gpu.stream_with_flags(CU_STREAM_NON_BLOCKING)?;
                            let mut marks = Marks::new(gpu, progress, kernel_ns);
                            let mut rounds = 0;
                            while start.elapsed() < duration {
                                for _ in 0..per_thread {
                                    kernels.spin(&stream, kernel_ns)?;
                                    marks.launched(stream.raw(), 1)?;
                                }
                                stream.synchronize()?;
                                round_done(&mut marks, per_thread as u64);
                                rounds += 1;
                            }
                            Ok(rounds)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a workload thread panicked"))
                    .collect()
            });
            for r in results {
                rounds = rounds.max(r?);
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Some(p) = &progress {
        p.finish();
    }
    // Relaxed: every thread has joined.
    let launched = done.load(Ordering::Relaxed);
    Ok(json!({
        "mode": shape.mode(),
        "device": gpu.ordinal(),
        "count": shape.count(),
        "depth": depth,
        "kernel_ms": kernel_ns as f64 / 1e6,
        "rounds": rounds,
        "seconds": seconds,
        "kernels": launched,
        "kernels_per_s": launched as f64 / seconds,
        "gpu_fraction": launched as f64 * kernel_ns as f64 / 1e9 / seconds,
    }))
}

/// An instantiated graph and the graph it came from, destroyed on drop.
struct Graph<'g> {
    gpu: &'g Gpu,
    graph: CUgraph,
    exec: CUgraphExec,
}

impl<'g> Graph<'g> {
    /// Captures what `record` queues on `stream` into a graph and instantiates it.
    fn capture(
        gpu: &'g Gpu,
        stream: &Stream<'_>,
        record: impl FnOnce(&Stream<'_>) -> Result<()>,
    ) -> Result<Graph<'g>> {
        let api = gpu.driver().api();
        // SAFETY: a live stream and a capture mode the driver defines.
        let r =
            unsafe { (api.cuStreamBeginCapture_v2)(stream.raw(), CU_STREAM_CAPTURE_MODE_RELAXED) };
        gpu.check("cuStreamBeginCapture", r)?;
        let recorded = record(stream);
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is capturing; `graph` is a valid out-pointer. Ending the
        // capture even after a failed launch leaves the stream usable.
        let r = unsafe { (api.cuStreamEndCapture)(stream.raw(), &mut graph) };
        recorded?;
        gpu.check("cuStreamEndCapture", r)?;
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` was just captured; `exec` is a valid out-pointer; flags 0.
        let r = unsafe { (api.cuGraphInstantiateWithFlags)(&mut exec, graph, 0) };
        if let Err(e) = gpu.check("cuGraphInstantiateWithFlags", r) {
            // SAFETY: the graph captured above, destroyed once.
            unsafe { (api.cuGraphDestroy)(graph) };
            return Err(e);
        }
        Ok(Graph { gpu, graph, exec })
    }

    fn launch(&self, stream: &Stream<'_>) -> Result<()> {
        // SAFETY: a live executable graph and stream.
        let r = unsafe { (self.gpu.driver().api().cuGraphLaunch)(self.exec, stream.raw()) };
        self.gpu.check("cuGraphLaunch", r)
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        let api = self.gpu.driver().api();
        // SAFETY: both were made by `capture` and are destroyed only here.
        unsafe { (api.cuGraphExecDestroy)(self.exec) };
        // SAFETY: as above.
        unsafe { (api.cuGraphDestroy)(self.graph) };
    }
}
