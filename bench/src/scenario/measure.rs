//! Ground truth: the GPU time each process got, sampled on a thread of its own, and the CPU
//! time of a process from `/proc`. Two sources give the same [`Trace`]:
//!
//! - on simgpu, the busy time the engine charged to each process and the memory each holds,
//!   from the node state;
//! - on the system's driver, which keeps no per-process GPU time, the progress each
//!   `gpuload` publishes (its completed kernels times their length, see
//!   [`crate::gpuload::Progress`]), and each process's memory from NVML.

use super::error::ScenarioError;
use crate::driver::{Nvml, NvmlError};
use crate::gpuload::Progress;
use std::collections::{btree_map, BTreeMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One reading of the ground truth: when (node clock), and per process ever seen its busy
/// time on device 0 and whether it was alive. A process that has exited keeps its last
/// figure (the node forgets it), so a container's busy time never goes backwards.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Node clock (`CLOCK_MONOTONIC`) ns.
    pub t_ns: u64,
    /// `(pid, busy ns, alive)`, by pid.
    pub procs: Vec<(u32, u64, bool)>,
    /// `(pid, bytes)`: the device memory each live process held on device 0, by pid. On the
    /// system's driver it is NVML's figure for every process on the GPU, refreshed every
    /// 100 ms, and empty where NVML cannot be loaded.
    pub memory: Vec<(u32, u64)>,
    /// `(pid, ns)`: the work each process ever seen got done on device 0, its completed
    /// kernels each counted whole (more than its busy time where its streams ran kernels at
    /// once), by pid. On the system's driver, its progress (which counts that way).
    pub work: Vec<(u32, u64)>,
}

/// Readings in time order.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// The readings.
    pub samples: Vec<Sample>,
}

impl Trace {
    /// Busy ns of `pids` together at sample `i`.
    pub fn busy(&self, i: usize, pids: &[u32]) -> u64 {
        self.samples[i]
            .procs
            .iter()
            .filter(|(p, _, _)| pids.contains(p))
            .map(|&(_, b, _)| b)
            .sum()
    }

    /// Work ns of `pids` together at sample `i` (see [`Sample::work`]).
    pub fn work(&self, i: usize, pids: &[u32]) -> u64 {
        self.samples[i]
            .work
            .iter()
            .filter(|(p, _)| pids.contains(p))
            .map(|&(_, w)| w)
            .sum()
    }

    /// The work `pids` got done between samples `a` and `b`, per ns of wall time: 1.0 is
    /// one kernel at a time all the time, 4.0 four at once.
    pub fn work_rate(&self, pids: &[u32], a: usize, b: usize) -> f64 {
        let (ta, tb) = (self.samples[a].t_ns, self.samples[b].t_ns);
        if tb <= ta {
            return 0.0;
        }
        self.work(b, pids).saturating_sub(self.work(a, pids)) as f64 / (tb - ta) as f64
    }

    /// Whether `pid` was alive at sample `i`.
    pub fn alive(&self, i: usize, pid: u32) -> bool {
        self.samples[i]
            .procs
            .iter()
            .any(|&(p, _, live)| p == pid && live)
    }

    /// The first sample taken at or after `t_ns` (the last one if none).
    pub fn at(&self, t_ns: u64) -> usize {
        self.samples
            .partition_point(|s| s.t_ns < t_ns)
            .min(self.samples.len().saturating_sub(1))
    }

    /// Busy ns of `pids` together at `t_ns`, interpolated between the samples around it
    /// (the first or the last sample's, outside them).
    pub fn busy_at(&self, t_ns: u64, pids: &[u32]) -> f64 {
        let i = self.samples.partition_point(|s| s.t_ns < t_ns);
        if self.samples.is_empty() {
            return 0.0;
        }
        if i == 0 || i == self.samples.len() {
            return self.busy(i.min(self.samples.len() - 1), pids) as f64;
        }
        let (a, b) = (&self.samples[i - 1], &self.samples[i]);
        let (busy_a, busy_b) = (self.busy(i - 1, pids) as f64, self.busy(i, pids) as f64);
        let f = (t_ns - a.t_ns) as f64 / (b.t_ns - a.t_ns).max(1) as f64;
        busy_a + f * (busy_b - busy_a).max(0.0)
    }

    /// The share of device time `pids` got from `from_ns` to `to_ns` (0–1), the busy time
    /// interpolated at both ends: the very window another figure covers, where
    /// [`Trace::share`] runs between samples (up to a sampling period off at each end,
    /// which alone is points of a share that changes hands every few tens of ms).
    pub fn share_between(&self, pids: &[u32], from_ns: u64, to_ns: u64) -> f64 {
        if to_ns <= from_ns {
            return 0.0;
        }
        (self.busy_at(to_ns, pids) - self.busy_at(from_ns, pids)).max(0.0)
            / (to_ns - from_ns) as f64
    }

    /// The share of device time `pids` got between samples `a` and `b` (0–1).
    pub fn share(&self, pids: &[u32], a: usize, b: usize) -> f64 {
        let (ta, tb) = (self.samples[a].t_ns, self.samples[b].t_ns);
        if tb <= ta {
            return 0.0;
        }
        self.busy(b, pids).saturating_sub(self.busy(a, pids)) as f64 / (tb - ta) as f64
    }

    /// Shares over consecutive windows of `window_ns` from `from_ns` while they fit in the
    /// trace (each window runs between the samples nearest its ends).
    pub fn windows(&self, pids: &[u32], from_ns: u64, window_ns: u64) -> Vec<f64> {
        let Some(last) = self.samples.last() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut start = from_ns;
        while start + window_ns <= last.t_ns {
            out.push(self.share(pids, self.at(start), self.at(start + window_ns)));
            start += window_ns;
        }
        out
    }

    /// When `pid` had first been charged busy time (the first sample showing any).
    pub fn first_busy(&self, pid: u32) -> Option<u64> {
        self.samples
            .iter()
            .find(|s| s.procs.iter().any(|&(p, b, _)| p == pid && b > 0))
            .map(|s| s.t_ns)
    }

    /// The first sample where every one of `pids` had been charged busy time.
    pub fn all_busy(&self, pids: &[u32]) -> Option<usize> {
        self.samples.iter().position(|s| {
            pids.iter()
                .all(|pid| s.procs.iter().any(|&(p, b, _)| p == *pid && b > 0))
        })
    }

    /// The last sample where `pid` was alive.
    pub fn last_alive(&self, pid: u32) -> Option<usize> {
        (0..self.samples.len()).rev().find(|&i| self.alive(i, pid))
    }
}

/// Reads the ground truth every `period` on a thread until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<Trace, ScenarioError>>>,
}

/// One reading of a source: when (node clock), `(pid, busy ns, work ns, alive)` of each
/// process it shows, and `(pid, bytes)` of device memory, by pid.
type Reading = (u64, Vec<(u32, u64, u64, bool)>, Vec<(u32, u64)>);

/// Where the readings come from.
enum Source {
    /// A simgpu node.
    Node(simgpu::node::Node),
    /// A directory of progress files, and NVML for memory.
    Progress(ProgressDir),
}

impl Source {
    fn read(&mut self) -> Reading {
        match self {
            Source::Node(node) => {
                let snap = node.snapshot();
                let mut busy = Vec::with_capacity(snap.processes.len());
                let mut memory = Vec::with_capacity(snap.processes.len());
                for p in &snap.processes {
                    let d = p.devices.first();
                    busy.push((
                        p.pid,
                        d.map_or(0, |d| d.busy_ns),
                        d.map_or(0, |d| d.work_ns),
                        true,
                    ));
                    memory.push((p.pid, d.map_or(0, |d| d.memory)));
                }
                memory.sort_unstable();
                (snap.taken_ns, busy, memory)
            }
            Source::Progress(dir) => dir.read(),
        }
    }
}

/// How often NVML is asked for memory: a query costs far more than reading the progress
/// files, and memory changes slowly next to the 1–100 ms sampling periods.
const NVML_PERIOD_NS: u64 = 100_000_000;

/// The progress files of the workloads in one directory.
struct ProgressDir {
    dir: PathBuf,
    files: BTreeMap<u32, Progress>,
    /// NVML, or why not (then no memory is reported).
    nvml: Result<Nvml, NvmlError>,
    memory: Vec<(u32, u64)>,
    memory_at: Option<u64>,
}

impl ProgressDir {
    fn new(dir: &Path) -> ProgressDir {
        ProgressDir {
            dir: dir.to_path_buf(),
            files: BTreeMap::new(),
            nvml: Nvml::open(),
            memory: Vec::new(),
            memory_at: None,
        }
    }

    fn read(&mut self) -> Reading {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(pid) = name.to_str().and_then(Progress::pid_of) else {
                    continue;
                };
                if let btree_map::Entry::Vacant(slot) = self.files.entry(pid) {
                    // A file being created may not have its length yet: tried again next time.
                    if let Ok(p) = Progress::open(&entry.path()) {
                        slot.insert(p);
                    }
                }
            }
        }
        let t_ns = simgpu::clock::now_ns();
        // A finished workload's file keeps its final figure, read like the others.
        let busy = self
            .files
            .iter()
            .map(|(&pid, p)| {
                let progress = p.busy_ns();
                let alive = !p.finished() && process_alive(pid);
                (pid, progress, progress, alive)
            })
            .collect();
        if let Ok(nvml) = &self.nvml {
            if self
                .memory_at
                .is_none_or(|at| t_ns.saturating_sub(at) >= NVML_PERIOD_NS)
            {
                self.memory = nvml.process_memory(0).unwrap_or_default();
                self.memory_at = Some(t_ns);
            }
        }
        (t_ns, busy, self.memory.clone())
    }
}

/// Whether `pid` runs (exists and is not a zombie waiting to be reaped).
fn process_alive(pid: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state is the first field after the command name, which is in parentheses.
    let state = text
        .rfind(')')
        .and_then(|i| text[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X" | "x") | None)
}

impl Sampler {
    /// Starts sampling `truth`: a simgpu node's state file, or a directory of `gpuload`
    /// progress files (what [`super::Testbed::node_state`] names on the system's driver).
    pub fn start(truth: &Path, period: Duration) -> Result<Sampler, ScenarioError> {
        let mut source = if truth.is_dir() {
            Source::Progress(ProgressDir::new(truth))
        } else {
            Source::Node(simgpu::node::Node::open_existing(truth)?)
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("busy-sampler".into())
            .spawn(move || {
                let mut trace = Trace::default();
                let mut known: BTreeMap<u32, u64> = BTreeMap::new();
                let mut worked: BTreeMap<u32, u64> = BTreeMap::new();
                let period_ns = period.as_nanos() as u64;
                let mut next = simgpu::clock::now_ns();
                // Relaxed: the flag orders nothing; the join publishes the trace.
                while !flag.load(Ordering::Relaxed) {
                    let (t_ns, busy, memory) = source.read();
                    let mut live = Vec::with_capacity(busy.len());
                    for (pid, busy, work, alive) in busy {
                        let entry = known.entry(pid).or_insert(0);
                        *entry = (*entry).max(busy);
                        let entry = worked.entry(pid).or_insert(0);
                        *entry = (*entry).max(work);
                        if alive {
                            live.push(pid);
                        }
                    }
                    trace.samples.push(Sample {
                        t_ns,
                        procs: known
                            .iter()
                            .map(|(&pid, &busy)| (pid, busy, live.contains(&pid)))
                            .collect(),
                        memory,
                        work: worked.iter().map(|(&pid, &w)| (pid, w)).collect(),
                    });
                    next += period_ns;
                    let now = simgpu::clock::now_ns();
                    if next > now {
                        simgpu::clock::sleep_until(next);
                    } else {
                        next = now;
                    }
                }
                Ok(trace)
            })
            .map_err(ScenarioError::start("start the sampler"))?;
        Ok(Sampler {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops and returns what it read.
    pub fn stop(mut self) -> Result<Trace, ScenarioError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<Trace, ScenarioError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take() {
            Some(h) => h
                .join()
                .map_err(|_| ScenarioError::Run("the sampler panicked".into()))?,
            None => Err(ScenarioError::Run("the sampler was already stopped".into())),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if self.handle.is_some() {
            let _ = self.finish();
        }
    }
}

/// CPU time (user + system, all threads, living and exited) a process has used, in ns,
/// from `/proc/<pid>/stat`.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields count from the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15 (man 5 proc).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|&t| t > 0)?;
    Some((utime + stime) * 1_000_000_000 / ticks)
}

/// The nearest-rank percentile of unsorted values; 0 for none.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    crate::gpuload::percentile(&v, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Trace {
        // Two processes; 7 alone until t = 2 ms, then 7 and 8 alternate.
        let ms = 1_000_000;
        let s = |t: u64, a: u64, b: Option<u64>| Sample {
            t_ns: t * ms,
            procs: std::iter::once((7, a * ms / 2, true))
                .chain(b.map(|b| (8, b * ms / 2, true)))
                .collect(),
            memory: Vec::new(),
            work: Vec::new(),
        };
        Trace {
            samples: vec![
                s(0, 0, None),
                s(1, 2, None),
                s(2, 4, Some(0)),
                s(3, 5, Some(1)),
                s(4, 6, Some(2)),
            ],
        }
    }

    #[test]
    fn shares_from_busy_time() {
        let t = trace();
        assert_eq!(t.share(&[7], 0, 2), 1.0);
        assert_eq!(t.share(&[7], 2, 4), 0.5);
        assert_eq!(t.share(&[8], 2, 4), 0.5);
        assert_eq!(t.share(&[7, 8], 2, 4), 1.0);
        assert_eq!(t.windows(&[7], 0, 2_000_000), vec![1.0, 0.5]);
        assert_eq!(t.first_busy(8), Some(3_000_000));
        assert_eq!(t.all_busy(&[7, 8]), Some(3));
        assert_eq!(t.share_between(&[7], 500_000, 1_500_000), 1.0);
        assert_eq!(t.share_between(&[7], 1_500_000, 2_500_000), 0.75);
        assert_eq!(t.share_between(&[8], 0, 3_000_000), 0.5 / 3.0);
        assert_eq!(t.busy_at(99_000_000, &[7]), 3_000_000.0);
        assert_eq!(t.at(2_500_000), 3);
        assert_eq!(t.at(99_000_000), 4);
        assert_eq!(t.last_alive(8), Some(4));
    }

    #[test]
    fn progress_files_are_a_source_of_busy_time() {
        let dir = std::env::temp_dir().join(format!("sampler-progress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sampler = Sampler::start(&dir, Duration::from_millis(1)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let progress = Progress::create(&dir).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        progress.add(5, 5_000_000);
        std::thread::sleep(Duration::from_millis(20));
        progress.add(1, 1_000_000);
        progress.finish();
        std::thread::sleep(Duration::from_millis(20));
        let trace = sampler.stop().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let me = std::process::id();
        let last = trace.samples.len() - 1;
        assert_eq!(trace.busy(last, &[me]), 6_000_000);
        assert!(!trace.alive(last, me), "a finished workload is not alive");
        let first = trace.first_busy(me).expect("busy time seen");
        assert_eq!(trace.busy(trace.at(first), &[me]), 5_000_000);
        assert!(trace.last_alive(me).is_some());
        assert!(trace.samples.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    }

    #[test]
    fn cpu_time_of_this_process() {
        let me = std::process::id();
        let before = cpu_ns(me).expect("own stat");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(60) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        assert!(cpu_ns(me).unwrap() > before);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.5), 2.0);
    }
}
