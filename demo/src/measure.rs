//! What the demo shows, measured: per container its memory (the daemon's status), its
//! share of GPU time over the last second and on average, and what the daemon reports of
//! its compute (target, measured share, time throttled, preemptions) once it has a
//! scheduler.
//!
//! On simgpu the measured share is ground truth: each process's engine busy time, from the
//! node's snapshot, summed per container (by the pids the demo started). On a real GPU it is
//! the daemon's own figure.

use crate::backend::Gpu;
use crate::plan::PLANS;
use crate::workload::Fleet;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use tessera_controld::status::{ContainerDevice, NodeStatus};

/// The window of the "now" share.
const WINDOW: Duration = Duration::from_secs(1);

/// One container's figures.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Its name.
    pub name: &'static str,
    /// Its compute policy.
    pub compute: &'static str,
    /// Its priority.
    pub priority: &'static str,
    /// Memory its processes hold on GPU 0, by its region.
    pub memory_used: u64,
    /// The most they held at once.
    pub memory_peak: u64,
    /// Its cap; `None` is unlimited.
    pub memory_cap: Option<u64>,
    /// Its live processes.
    pub processes: usize,
    /// The daemon's compute figures, when it has a scheduler.
    pub scheduled: Option<Scheduled>,
    /// Its share of GPU time over the last second, from simgpu.
    pub measured: Option<f64>,
    /// Engine busy time of its processes since the start, from simgpu.
    pub busy_ns: u64,
    /// The daemon's measured shares, summed, and how many.
    reported: (f64, u32),
}

/// What the daemon says of a container's compute.
#[derive(Debug, Clone, Default)]
pub struct Scheduled {
    /// Its target share.
    pub target: Option<f64>,
    /// Its share as the daemon measured it.
    pub measured: Option<f64>,
    /// Time its launches waited.
    pub throttled_ns: u64,
    /// How often online work preempted it.
    pub preemptions: u64,
}

impl Row {
    /// The mean of the daemon's measured shares.
    fn mean_reported(&self) -> Option<f64> {
        (self.reported.1 > 0).then(|| self.reported.0 / f64::from(self.reported.1))
    }

    fn update(&mut self, device: &ContainerDevice, processes: usize, together: bool) {
        self.memory_used = device.memory_used;
        self.memory_peak = self.memory_peak.max(device.memory_used);
        self.memory_cap = device.memory_cap;
        self.processes = processes;
        let scheduled = device.share_target.is_some()
            || device.share_measured.is_some()
            || device.throttled_ns > 0
            || device.preemptions > 0;
        self.scheduled = scheduled.then_some(Scheduled {
            target: device.share_target,
            measured: device.share_measured,
            throttled_ns: device.throttled_ns,
            preemptions: device.preemptions,
        });
        if let Some(share) = device.share_measured.filter(|_| together) {
            self.reported.0 += share;
            self.reported.1 += 1;
        }
    }
}

/// The node's busy times at one moment (simgpu).
#[derive(Debug, Clone)]
struct Mark {
    at: Instant,
    /// Per container, in [`PLANS`] order.
    busy: Vec<u64>,
    /// GPU 0's.
    gpu: u64,
}

/// The figures over time.
pub struct Meter {
    /// Per container, in [`PLANS`] order.
    pub rows: Vec<Row>,
    /// Whether the GPU is simgpu's (so shares are ground truth).
    pub simulated: bool,
    /// What the GPU is, for people.
    pub gpu: String,
    /// GPU 0's busy share over the last second (simgpu).
    pub gpu_busy: Option<f64>,
    start: Instant,
    end: Option<Instant>,
    /// The last busy time seen of every pid.
    busy_by_pid: HashMap<u32, u64>,
    /// The last second or so.
    history: VecDeque<Mark>,
    /// When every workload had used the GPU, and when the first one ended: the averages
    /// are taken between the two, while all three ran.
    together: (Option<Mark>, Option<Mark>),
}

impl Meter {
    /// Starts the clock (call it just before the workloads start).
    pub fn new(gpu: &Gpu) -> Meter {
        let rows: Vec<Row> = PLANS
            .iter()
            .map(|p| Row {
                name: p.name,
                compute: p.compute,
                priority: p.priority,
                ..Row::default()
            })
            .collect();
        let now = Instant::now();
        let gpu_busy = gpu
            .node
            .as_ref()
            .and_then(|n| n.snapshot().devices.first().map(|d| d.busy_ns))
            .unwrap_or(0);
        Meter {
            history: VecDeque::from([Mark {
                at: now,
                busy: vec![0; rows.len()],
                gpu: gpu_busy,
            }]),
            rows,
            simulated: gpu.node.is_some(),
            gpu: gpu.label.clone(),
            gpu_busy: None,
            start: now,
            end: None,
            busy_by_pid: HashMap::new(),
            together: (None, None),
        }
    }

    /// Takes in the daemon's status: memory, and its compute figures.
    pub fn sample_status(&mut self, status: &NodeStatus, fleet: &Fleet) {
        let together = fleet.workloads_ended() == 0;
        for row in &mut self.rows {
            let Some(c) = status.containers.iter().find(|c| c.name == row.name) else {
                continue;
            };
            if let Some(device) = c.devices.iter().find(|d| d.gpu == 0) {
                row.update(device, c.processes.len(), together);
            }
        }
    }

    /// Takes in the simulated node's ground truth: each process's busy time. Call it often:
    /// a process's figures are gone from the node once it has exited.
    pub fn sample_gpu(&mut self, fleet: &Fleet, gpu: &Gpu) {
        let Some(node) = &gpu.node else { return };
        let snapshot = node.snapshot();
        for p in &snapshot.processes {
            if let Some(usage) = p.devices.first() {
                self.busy_by_pid.insert(p.pid, usage.busy_ns);
            }
        }
        for row in &mut self.rows {
            row.busy_ns = fleet
                .pids(row.name)
                .filter_map(|pid| self.busy_by_pid.get(&pid))
                .sum();
        }
        let now = Mark {
            at: Instant::now(),
            busy: self.rows.iter().map(|r| r.busy_ns).collect(),
            gpu: snapshot.devices.first().map_or(0, |d| d.busy_ns),
        };
        match &self.together {
            (None, _) if now.busy.iter().all(|&b| b > 0) => {
                self.together.0 = Some(now.clone());
            }
            (Some(_), None) if fleet.workloads_ended() > 0 => {
                self.together.1 = Some(now.clone());
            }
            _ => {}
        }
        self.history.push_back(now);
        let now = self.history.back().expect("just pushed").at;
        // Keeps as the front the newest mark at least a window old.
        while self.history.len() > 2 && now.duration_since(self.history[1].at) >= WINDOW {
            self.history.pop_front();
        }
        let (then, last) = (
            self.history.front().expect("never empty"),
            self.history.back().expect("never empty"),
        );
        let shares = shares(then, last);
        if let Some((rows, gpu)) = shares {
            for (row, share) in self.rows.iter_mut().zip(rows) {
                row.measured = Some(share);
            }
            self.gpu_busy = Some(gpu);
        }
    }

    /// Stops the clock of the averages.
    pub fn finish(&mut self) {
        self.end.get_or_insert_with(Instant::now);
        if self.together.0.is_some() && self.together.1.is_none() {
            self.together.1 = self.history.back().cloned();
        }
    }

    /// The span the averages cover: while all three workloads ran, else from the start to
    /// [`Meter::finish`].
    pub fn span(&self) -> Duration {
        match &self.together {
            (Some(from), Some(to)) => to.at.duration_since(from.at),
            _ => self
                .end
                .unwrap_or_else(Instant::now)
                .duration_since(self.start),
        }
    }

    /// Per container its average share, and the GPU's busy share, over [`Meter::span`]:
    /// simgpu's busy times, else the mean of the daemon's figures.
    pub fn averages(&self) -> (Vec<Option<f64>>, Option<f64>) {
        if !self.simulated {
            let rows = self.rows.iter().map(Row::mean_reported).collect();
            return (rows, None);
        }
        let first = self.history.front().cloned();
        let span = match &self.together {
            (Some(from), Some(to)) => Some((from.clone(), to.clone())),
            // Stopped before all three ran: from the start to the last mark.
            _ => first.zip(self.history.back().cloned()),
        };
        match span.and_then(|(from, to)| shares(&from, &to)) {
            Some((rows, gpu)) => (rows.into_iter().map(Some).collect(), Some(gpu)),
            None => (vec![None; self.rows.len()], None),
        }
    }
}

/// Per container its share of the time between two marks, and the GPU's busy share.
fn shares(from: &Mark, to: &Mark) -> Option<(Vec<f64>, f64)> {
    let span = to.at.duration_since(from.at).as_nanos() as f64;
    if span <= 0.0 {
        return None;
    }
    let share = |to: u64, from: u64| (to.saturating_sub(from) as f64 / span).min(1.0);
    let rows = to
        .busy
        .iter()
        .zip(&from.busy)
        .map(|(&t, &f)| share(t, f))
        .collect();
    Some((rows, share(to.gpu, from.gpu)))
}
