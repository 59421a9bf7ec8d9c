//! The daemon's containers and their regions under the state dir.
//!
//! Each container has `<state_dir>/<name>.region` (what its processes map) and
//! `<state_dir>/<name>.json` (its declaration and where it came from, so that a new
//! `controld` adopts it as it was; written whole: to a temporary file, synced, renamed).
//! At start every declared container is adopted as declared: a region that is missing or
//! spoiled is made again from the declaration (the spoiled file moved into
//! `<state_dir>/quarantine/`). A declaration that cannot be read is moved there too and its
//! container refused, loudly; never replaced by defaults. A region found without any
//! declaration is adopted with what its region says, and reported. Everything read from a
//! region is untrusted: figures are checked and clamped before anyone sees them.
//!
//! One [`State`], its jobs in a file each, every one an `impl State` block that uses this
//! module and, one way, the files below it: `persist` (the declarations on disk),
//! `caps` (the caps and GPUs written into regions and limits files), `check` (what a
//! declaration must fit), `quarantine` (spoiled files set aside, regions made again),
//! `adopt` (opening the state dir), `mutate` (adding, changing, removing, the config's
//! set), `guard` (regions held to the daemon's record, the watchdog's findings) and
//! `status` (what `status` shows).

mod adopt;
mod caps;
mod check;
mod guard;
mod mutate;
mod persist;
mod quarantine;
mod status;

use crate::policy::{ComputePolicy, Priority, Timeslice};
use crate::scheduler::{Member, Roster};
use crate::spec::{ContainerSpec, Gpus, MemorySize};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tessera_region::{Limits, Region, RegionError};

/// Where a container came from; it decides who may change or remove it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// Declared in the config file: a reload adds, changes and removes it.
    Config,
    /// Added through the control API: it stays until removed through it.
    Api,
    /// Added by `controld exec` for one command: removed when that command ends.
    Transient,
    /// Found as a region file with no declaration beside it.
    Adopted,
}

/// A container as `list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerInfo {
    /// Its declaration.
    pub spec: ContainerSpec,
    /// Where it came from.
    pub origin: Origin,
    /// Its region file (`TESSERA_REGION` of its processes).
    pub region: PathBuf,
    /// The time slice its channel groups are asked to run with now: its spec's, or its
    /// priority's beside its neighbours ([`ContainerSpec::timeslice`]).
    pub timeslice: Timeslice,
}

/// Why the daemon refused a change. Each message is one line that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// `add` of a name in use.
    #[error("container {0} already exists; change it with `controld container set` or pick another name")]
    Exists(String),
    /// A name no container has.
    #[error("no container named {0}; `controld container list` shows the containers")]
    Unknown(String),
    /// The guarantees on a GPU would pass 100%.
    #[error("GPU {gpu} would be guaranteed {total}% of its time (at most 100): {detail}; lower a fixed or burst share or use best-effort")]
    Overcommitted {
        /// The GPU.
        gpu: u32,
        /// The sum of guarantees it would have.
        total: u32,
        /// Who holds what.
        detail: String,
    },
    /// `rm` of a container whose processes still run.
    #[error("container {name} has {count} running process(es); stop them first, or remove it anyway with --force")]
    Busy {
        /// The container.
        name: String,
        /// Its live processes.
        count: usize,
    },
    /// A GPU the node does not have.
    #[error("GPU {gpu} does not exist: this node has {count} GPU(s), numbered from 0; pick one of those")]
    NoSuchGpu {
        /// The GPU asked for.
        gpu: u32,
        /// How many the node has.
        count: usize,
    },
    /// A cap larger than the GPU's memory.
    #[error("a memory cap of {cap} is more than GPU {gpu} has ({total}); give a cap of at most {total}, or none")]
    CapTooLarge {
        /// The GPU.
        gpu: u32,
        /// The cap asked for, as written.
        cap: String,
        /// The GPU's memory, as written.
        total: String,
    },
    /// A config container changed through the API.
    #[error("container {0} is declared in the config file; change it there and reload controld (SIGHUP)")]
    Declared(String),
    /// The region could not be made.
    #[error("{0}")]
    Region(#[from] RegionError),
    /// Another daemon holds the state dir.
    #[error("{0}")]
    Locked(#[from] crate::dir_lock::DirLockError),
    /// The declaration could not be written.
    #[error("cannot write {path}: {source}; check that the state dir is writable")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
}

/// Changes to a container; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpecChange {
    /// New GPUs.
    #[serde(default)]
    pub gpus: Option<Gpus>,
    /// New cap; `Some(None)` is written as the string "unlimited" by the CLI and means no cap.
    #[serde(default)]
    pub memory: Option<MemoryChange>,
    /// New compute policy.
    #[serde(default)]
    pub compute: Option<ComputePolicy>,
    /// New priority.
    #[serde(default)]
    pub priority: Option<crate::policy::Priority>,
    /// New time slice.
    #[serde(default)]
    pub timeslice: Option<crate::policy::Timeslice>,
}

/// A new memory cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryChange {
    /// This many bytes per GPU.
    Cap(MemorySize),
    /// No cap.
    Unlimited,
}

/// One managed container.
struct Managed {
    spec: ContainerSpec,
    origin: Origin,
    region: Arc<Region>,
    /// What went wrong with it, for status.
    problems: Vec<String>,
    /// To be removed once it has no live process (a transient container whose command
    /// ended, a config container no longer declared).
    retiring: bool,
    /// How often its region was found spoiled and set aside.
    quarantines: u64,
    /// Its limits file, where the daemon could make one: the caps its processes can only
    /// read.
    limits: Option<Arc<Limits>>,
    /// The kinds of tampering already reported in `problems` (one line each, not one a
    /// pass).
    tampering_noted: u32,
    /// Processes still alive in regions of it that were set aside, each charged in a slot
    /// of its region until it ends.
    carried: Vec<Carried>,
}

/// A live process of a region set aside (quarantined): it keeps its memory through its old
/// mapping, so a slot of the container's new region holds the same charge under its pid
/// ([`Region::hold_slot`]) until it ends. Without that, a container could spoil its
/// region's header to be given a fresh one counted from zero, and a full cap beside what
/// it holds.
struct Carried {
    /// The region set aside, where it was put (if it could be moved), and the process's
    /// slot there (its liveness).
    source: Arc<Region>,
    source_path: Option<PathBuf>,
    source_slot: usize,
    pid: u32,
    /// The slot holding its charge in the container's region.
    slot: usize,
}

/// The daemon's containers.
pub struct State {
    dir: PathBuf,
    /// Held for the state's life: one daemon per state dir.
    _lock: crate::dir_lock::DirLock,
    containers: BTreeMap<String, Managed>,
    /// Node-wide problems (quarantined files, a failed reload), newest last.
    problems: Vec<String>,
    /// The containers as the compute scheduler sees them, republished on every change.
    roster: Arc<Roster>,
    /// The memory of each GPU of the node, by index, where the daemon could learn it.
    devices: Option<Vec<u64>>,
    /// The UUID of each GPU of the node, by index, where the daemon could learn it: written
    /// into every region, so that a container's library finds its devices by UUID.
    uuids: Vec<Option<[u8; 16]>>,
}

/// Node-wide problems kept for status; older ones are dropped.
const MAX_PROBLEMS: usize = 32;

/// What applying a config did.
#[derive(Debug, Default)]
pub struct Applied {
    /// A line per change.
    pub log: Vec<String>,
    /// Per container whose declaration was refused: its name and a line saying why.
    pub refused: Vec<(String, String)>,
}

/// Container `name`'s region file in state dir `dir`.
fn region_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.region"))
}

impl State {
    /// The compute scheduler's view of the containers, kept up to date by every change.
    pub fn roster(&self) -> Arc<Roster> {
        self.roster.clone()
    }

    /// Publishes the containers to the compute scheduler.
    fn publish(&self) {
        self.roster.publish(
            self.containers
                .iter()
                .map(|(name, m)| {
                    Member::new(
                        name.clone(),
                        m.region.clone(),
                        m.limits.clone(),
                        m.spec.gpus.as_slice().to_vec(),
                        m.spec.compute,
                        m.spec.priority,
                        self.timeslice(name, &m.spec).us(),
                    )
                })
                .collect(),
        );
    }

    /// The time slice container `name` of `spec` runs with: its spec's, or its priority's,
    /// which for online work depends on whether another online container shares a GPU.
    fn timeslice(&self, name: &str, spec: &ContainerSpec) -> Timeslice {
        let online_beside = self.containers.iter().any(|(other, m)| {
            other != name && m.spec.priority == Priority::Online && m.spec.shares_a_gpu_with(spec)
        });
        spec.timeslice(online_beside)
    }

    /// The state dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn region_path(&self, name: &str) -> PathBuf {
        region_file(&self.dir, name)
    }

    fn spec_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Records a node-wide problem for status.
    pub fn note(&mut self, problem: String) {
        if self.problems.len() == MAX_PROBLEMS {
            self.problems.remove(0);
        }
        self.problems.push(problem);
    }

    /// Forgets node-wide problems that start with `prefix` (a reload that now succeeds).
    pub fn forget(&mut self, prefix: &str) {
        self.problems.retain(|p| !p.starts_with(prefix));
    }

    /// Tells the state the node's GPUs (each one's memory, by index), so that declarations
    /// naming a GPU the node lacks, or a cap beyond a GPU's memory, are refused.
    pub fn set_devices(&mut self, memory: Vec<u64>) {
        self.devices = Some(memory);
    }

    /// The origin of a container.
    pub fn origin(&self, name: &str) -> Option<Origin> {
        self.containers.get(name).map(|m| m.origin)
    }

    /// One container as `list` shows it.
    pub fn info(&self, name: &str) -> Option<ContainerInfo> {
        self.containers.get(name).map(|m| ContainerInfo {
            spec: m.spec.clone(),
            origin: m.origin,
            region: self.region_path(name),
            timeslice: self.timeslice(name, &m.spec),
        })
    }

    /// Every container, by name.
    pub fn list(&self) -> Vec<ContainerInfo> {
        self.containers
            .keys()
            .filter_map(|n| self.info(n))
            .collect()
    }

    /// Every region, for the reaper (which works without holding the state).
    pub fn regions(&self) -> Vec<Arc<Region>> {
        self.containers.values().map(|m| m.region.clone()).collect()
    }
}
