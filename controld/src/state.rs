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

use crate::policy::{ComputePolicy, Priority, Timeslice};
use crate::scheduler::{Member, Roster};
use crate::spec::{ContainerName, ContainerSpec, Gpus, MemorySize};
use crate::status::{ContainerDevice, ContainerProcess, ContainerStatus, NodeStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tessera_region::units::format_timeslice_us;
use tessera_region::{
    limits_path, Limits, Region, RegionError, RegionInit, TimesliceOutcome, MAX_DEVICES,
};

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

/// Moves the charge of the processes alive in `old`, a region of `m` just set aside, into
/// slots of its new region: that of `old`'s own processes, and that `old` held for the
/// processes of regions set aside before it.
fn carry(m: &mut Managed, old: Arc<Region>, old_path: Option<PathBuf>) {
    // What a context costs, as its processes measured it: a fresh region would reserve a
    // guess for the next one, larger than what the cap has left beside the carried charge.
    for dev in 0..tessera_region::MAX_DEVICES {
        if let Some(bytes) = old.context_bytes(dev) {
            m.region.set_context_bytes(dev, bytes);
        }
    }
    let earlier = std::mem::take(&mut m.carried);
    let processes = old.processes();
    let mut moving = Vec::new();
    for p in &processes {
        match earlier.iter().find(|c| c.slot == p.slot) {
            Some(c) => moving.push((
                c.source.clone(),
                c.source_path.clone(),
                c.source_slot,
                c.pid,
                p.memory.clone(),
            )),
            None => moving.push((
                old.clone(),
                old_path.clone(),
                p.slot,
                p.pid,
                p.memory.clone(),
            )),
        }
    }
    for (source, source_path, source_slot, pid, memory) in moving {
        match m.region.hold_slot(pid, &memory) {
            Ok(slot) => m.carried.push(Carried {
                source,
                source_path,
                source_slot,
                pid,
                slot,
            }),
            Err(e) => m.problems.push(format!(
                "cannot charge process {pid} of its region set aside to its new region: {e}"
            )),
        }
    }
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

/// Kinds of tampering found by [`State::guard_regions`], reported once each.
const TAMPERED_CAP: u32 = 1;
const TAMPERED_USAGE: u32 = 2;
const TAMPERED_LIMITS: u32 = 4;
const LIMITS_GONE: u32 = 8;

/// A cap for a problem line.
fn cap_text(cap: Option<u64>) -> String {
    cap.map_or_else(|| "no cap".to_string(), |c| format!("{c} bytes"))
}

/// Node-wide problems kept for status; older ones are dropped.
const MAX_PROBLEMS: usize = 32;

/// What `status` shows of a process's per-device memory: the devices of the layout.
const DEVICES: usize = MAX_DEVICES;

impl State {
    /// Opens the state dir (creating it) and adopts every region file in it. Returns the
    /// state and what it found worth a log line.
    pub fn open(dir: &Path) -> Result<(State, Vec<String>), StateError> {
        let io = |source| StateError::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let lock = crate::dir_lock::DirLock::take(dir)?;
        let mut state = State {
            dir: dir.to_path_buf(),
            _lock: lock,
            containers: BTreeMap::new(),
            problems: Vec::new(),
            roster: Arc::new(Roster::default()),
            devices: None,
            uuids: Vec::new(),
        };
        let mut log = Vec::new();
        let mut stems: Vec<String> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "region" || e == "json"))
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
            .collect();
        stems.sort();
        stems.dedup();
        for stem in stems {
            let region = state.region_path(&stem);
            match state.declaration(&stem) {
                Declaration::Found(saved) => log.extend(state.adopt_declared(saved)),
                Declaration::Unreadable(reason) => {
                    let line = state.quarantine(&state.spec_path(&stem), &reason);
                    let line = format!(
                        "container {stem} refused: {line}; its region is left as it is, unmanaged; declare it again with `controld container add` or in the config"
                    );
                    state.note(line.clone());
                    log.push(line);
                }
                Declaration::Missing if region.exists() => match state.adopt(&region) {
                    Ok(name) => log.push(format!(
                        "adopted container {name} ({}) without a declaration: best-effort, online, with the caps in its region",
                        region.display()
                    )),
                    Err(reason) => {
                        let line = state.quarantine(&region, &reason);
                        log.push(line);
                    }
                },
                Declaration::Missing => {}
            }
        }
        state.publish();
        Ok((state, log))
    }

    /// What `<name>.json` says, if it is there.
    fn declaration(&self, stem: &str) -> Declaration {
        let path = self.spec_path(stem);
        let bytes = match read_no_follow(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Declaration::Missing,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Declaration::Unreadable(
                    "it is a symbolic link, which is never followed".into(),
                )
            }
            Err(e) => return Declaration::Unreadable(format!("cannot read it: {e}")),
        };
        match serde_json::from_slice::<Saved>(&bytes) {
            Ok(saved) if saved.spec.name.as_str() == stem => Declaration::Found(saved),
            Ok(saved) => Declaration::Unreadable(format!(
                "it declares container {}, not {stem}",
                saved.spec.name
            )),
            Err(e) => Declaration::Unreadable(format!("it is not a declaration: {e}")),
        }
    }

    /// Adopts a declared container as declared: its region if whole, else one made again
    /// from the declaration (a spoiled one set aside first). Returns the log lines.
    fn adopt_declared(&mut self, saved: Saved) -> Vec<String> {
        let name = saved.spec.name.to_string();
        let path = self.region_path(&name);
        let mut log = Vec::new();
        let mut problems = Vec::new();
        let mut quarantines = 0;
        let limits = self.make_limits(&path, &saved.spec, &mut problems);
        let existing = match Region::open(&path) {
            Ok(region) if region.name() == name => Some(region),
            Ok(region) => {
                let reason = format!("it holds container {:?}", region.name());
                drop(region);
                quarantines += 1;
                problems.push(self.quarantine(&path, &reason));
                None
            }
            Err(RegionError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                problems.push("its region was missing; made again from its declaration".into());
                None
            }
            Err(e) => {
                quarantines += 1;
                problems.push(self.quarantine(&path, &e.to_string()));
                None
            }
        };
        let region = match existing {
            Some(region) => region,
            None => {
                let init = RegionInit {
                    name: name.clone(),
                    memory_caps: saved.spec.memory_caps(),
                };
                match Region::open_or_create(&path, &init) {
                    Ok(region) => region,
                    Err(e) => {
                        let line = format!(
                            "container {name} refused: its region cannot be made again ({e}); its declaration stays in {}",
                            self.spec_path(&name).display()
                        );
                        self.note(line.clone());
                        log.push(line);
                        return log;
                    }
                }
            }
        };
        // The declaration is the record: caps written into the region while no daemon ran
        // are put back.
        apply_caps(&region, limits.as_deref(), &saved.spec, &self.uuids);
        if problems.is_empty() {
            log.push(format!("adopted container {name} ({})", path.display()));
        }
        log.extend(problems.iter().map(|p| format!("container {name}: {p}")));
        let retiring = saved.origin == Origin::Transient;
        if retiring {
            problems.push(
                "its exec command was started under an earlier controld; removed once its processes end"
                    .to_string(),
            );
        }
        self.containers.insert(
            name,
            Managed {
                spec: saved.spec,
                origin: saved.origin,
                region: Arc::new(region),
                problems,
                retiring,
                quarantines,
                limits,
                tampering_noted: 0,
                carried: Vec::new(),
            },
        );
        log
    }

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
                        m.spec.timeslice().us(),
                    )
                })
                .collect(),
        );
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

    /// Adopts a region file found without a declaration, returning its container's name,
    /// or why it is unusable.
    fn adopt(&mut self, path: &Path) -> Result<String, String> {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let name = ContainerName::new(&stem).map_err(|e| e.to_string())?;
        let region = Region::open(path).map_err(|e| e.to_string())?;
        if region.name() != stem {
            return Err(format!(
                "it holds container {:?}, not {stem:?}",
                region.name()
            ));
        }
        let spec = spec_from_region(name, &region);
        let mut problems = vec![
            "found without a declaration: best-effort, online, with the caps in its region; `controld container set` declares it"
                .to_string(),
        ];
        // Processes that open the region from now on find its limits; those that have it
        // open already are held to them once they reopen.
        let limits = self.make_limits(path, &spec, &mut problems);
        self.containers.insert(
            stem.clone(),
            Managed {
                spec,
                origin: Origin::Adopted,
                region: Arc::new(region),
                problems,
                retiring: false,
                quarantines: 0,
                limits,
                tampering_noted: 0,
                carried: Vec::new(),
            },
        );
        Ok(stem)
    }

    /// Moves a bad region file into `quarantine/` and records why; returns the log line.
    fn quarantine(&mut self, path: &Path, reason: &str) -> String {
        self.quarantine_to(path, reason).0
    }

    /// [`State::quarantine`], and where the file went if it could be moved.
    fn quarantine_to(&mut self, path: &Path, reason: &str) -> (String, Option<PathBuf>) {
        let qdir = self.dir.join("quarantine");
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
        let target = qdir.join(format!("{}.{stamp}", file.unwrap_or_default()));
        let moved = std::fs::create_dir_all(&qdir)
            .and_then(|()| {
                // Never into a link someone put in its place: the files set aside stay here.
                if std::fs::symlink_metadata(&qdir)?.file_type().is_dir() {
                    Ok(())
                } else {
                    Err(std::io::Error::other(format!(
                        "{} is not a directory",
                        qdir.display()
                    )))
                }
            })
            .and_then(|()| std::fs::rename(path, &target));
        let (line, moved_to) = match moved {
            Ok(()) => (
                format!(
                    "quarantined {} (moved to {}): {reason}",
                    path.display(),
                    target.display()
                ),
                Some(target),
            ),
            Err(e) => (
                format!(
                    "cannot quarantine {} ({e}); it is ignored: {reason}",
                    path.display()
                ),
                None,
            ),
        };
        self.note(line.clone());
        (line, moved_to)
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

    /// Tells the state each GPU's UUID (by index), and writes them into every region: a
    /// container runtime may show a container its cards renumbered from 0, and the library
    /// finds which of its accounts a device is by these.
    pub fn set_device_uuids(&mut self, uuids: Vec<Option<[u8; 16]>>) {
        self.uuids = uuids;
        for m in self.containers.values() {
            write_uuids(&m.region, &self.uuids);
        }
    }

    /// Checks that `spec` names GPUs the node has and caps none beyond its memory (when the
    /// node's GPUs are known).
    fn check_devices(&self, spec: &ContainerSpec) -> Result<(), StateError> {
        let Some(devices) = &self.devices else {
            return Ok(());
        };
        for &gpu in spec.gpus.as_slice() {
            let Some(&total) = devices.get(gpu as usize) else {
                return Err(StateError::NoSuchGpu {
                    gpu,
                    count: devices.len(),
                });
            };
            if let Some(cap) = spec.memory.filter(|cap| cap.0 > total) {
                return Err(StateError::CapTooLarge {
                    gpu,
                    cap: cap.to_string(),
                    total: tessera_region::units::format_size(total),
                });
            }
        }
        Ok(())
    }

    /// Checks that `spec` (replacing the container of its name, if any) keeps every GPU's
    /// guarantees within 100%, and fits the node's GPUs.
    fn check_guarantees(&self, spec: &ContainerSpec) -> Result<(), StateError> {
        self.check_devices(spec)?;
        for &gpu in spec.gpus.as_slice() {
            let mut holders: Vec<(String, u32)> = self
                .containers
                .values()
                .filter(|m| m.spec.name != spec.name && m.spec.gpus.as_slice().contains(&gpu))
                .map(|m| (m.spec.name.to_string(), m.spec.compute.guarantee()))
                .filter(|&(_, g)| g > 0)
                .collect();
            holders.push((spec.name.to_string(), spec.compute.guarantee()));
            let total: u32 = holders.iter().map(|(_, g)| g).sum();
            if total > 100 {
                let detail = holders
                    .iter()
                    .map(|(n, g)| format!("{n} {g}%"))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(StateError::Overcommitted { gpu, total, detail });
            }
        }
        Ok(())
    }

    /// Adds a container and creates its region (or takes over an existing region file of
    /// that name, with the new caps).
    pub fn add(
        &mut self,
        spec: ContainerSpec,
        origin: Origin,
    ) -> Result<ContainerInfo, StateError> {
        let name = spec.name.to_string();
        if self.containers.contains_key(&name) {
            return Err(StateError::Exists(name));
        }
        self.check_guarantees(&spec)?;
        let path = self.region_path(&name);
        let init = RegionInit {
            name: name.clone(),
            memory_caps: spec.memory_caps(),
        };
        let mut problems = Vec::new();
        let limits = self.make_limits(&path, &spec, &mut problems);
        let region = match Region::open_or_create(&path, &init) {
            Ok(r) if r.name() == name => r,
            result => {
                let reason = match result {
                    Ok(r) => format!("it holds container {:?}", r.name()),
                    Err(e) => e.to_string(),
                };
                let line = self.quarantine(&path, &reason);
                problems.push(line);
                Region::open_or_create(&path, &init)?
            }
        };
        apply_caps(&region, limits.as_deref(), &spec, &self.uuids);
        self.save(&spec, origin)?;
        self.containers.insert(
            name.clone(),
            Managed {
                spec,
                origin,
                region: Arc::new(region),
                problems,
                retiring: false,
                quarantines: 0,
                limits,
                tampering_noted: 0,
                carried: Vec::new(),
            },
        );
        self.publish();
        Ok(self.info(&name).expect("just added"))
    }

    /// Changes a container; its processes see new caps at their next allocation and
    /// memory query.
    pub fn set(&mut self, name: &str, change: &SpecChange) -> Result<ContainerInfo, StateError> {
        let m = self
            .containers
            .get(name)
            .ok_or_else(|| StateError::Unknown(name.to_string()))?;
        let mut spec = m.spec.clone();
        if let Some(gpus) = &change.gpus {
            spec.gpus = gpus.clone();
        }
        match change.memory {
            Some(MemoryChange::Cap(size)) => spec.memory = Some(size),
            Some(MemoryChange::Unlimited) => spec.memory = None,
            None => {}
        }
        if let Some(compute) = change.compute {
            spec.compute = compute;
        }
        if let Some(priority) = change.priority {
            spec.priority = priority;
        }
        if let Some(timeslice) = change.timeslice {
            spec.timeslice = Some(timeslice);
        }
        self.replace(spec)?;
        Ok(self.info(name).expect("present"))
    }

    /// Puts `spec` in place of the container of its name, keeping its origin.
    fn replace(&mut self, spec: ContainerSpec) -> Result<(), StateError> {
        self.check_guarantees(&spec)?;
        let name = spec.name.to_string();
        let origin = self.containers[&name].origin;
        self.save(&spec, origin)?;
        let m = self.containers.get_mut(&name).expect("present");
        apply_caps(&m.region, m.limits.as_deref(), &spec, &self.uuids);
        m.spec = spec;
        self.publish();
        Ok(())
    }

    /// Removes a container: its region file and declaration. With live processes only when
    /// `force`: they keep the caps they mapped, but the container is no longer managed.
    pub fn remove(&mut self, name: &str, force: bool) -> Result<(), StateError> {
        let m = self
            .containers
            .get(name)
            .ok_or_else(|| StateError::Unknown(name.to_string()))?;
        let count = m.region.processes().len();
        if count > 0 && !force {
            return Err(StateError::Busy {
                name: name.to_string(),
                count,
            });
        }
        self.containers.remove(name);
        let _ = std::fs::remove_file(limits_path(&self.region_path(name)));
        let _ = std::fs::remove_file(self.region_path(name));
        let _ = std::fs::remove_file(self.spec_path(name));
        self.publish();
        Ok(())
    }

    /// The origin of a container.
    pub fn origin(&self, name: &str) -> Option<Origin> {
        self.containers.get(name).map(|m| m.origin)
    }

    /// Marks a container for removal once it has no live processes, and removes it now if
    /// it has none. True if it was removed.
    pub fn retire(&mut self, name: &str, why: &str) -> bool {
        let Some(m) = self.containers.get_mut(name) else {
            return false;
        };
        if !m.retiring {
            m.retiring = true;
            m.problems
                .push(format!("{why}; removed once its processes end"));
        }
        self.remove(name, false).is_ok()
    }

    /// Removes the retiring containers that have no live process left; returns their names.
    pub fn sweep_retired(&mut self) -> Vec<String> {
        let idle: Vec<String> = self
            .containers
            .iter()
            .filter(|(_, m)| m.retiring && m.region.processes().is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        idle.into_iter()
            .filter(|n| self.remove(n, false).is_ok())
            .collect()
    }

    /// Makes (or takes over) the limits file of the region at `path` with the caps of
    /// `spec`, before the region is opened; a failure is a problem of the container's (its
    /// processes are then held to the caps in the region alone).
    fn make_limits(
        &self,
        path: &Path,
        spec: &ContainerSpec,
        problems: &mut Vec<String>,
    ) -> Option<Arc<Limits>> {
        match Limits::create(&limits_path(path), &spec.memory_caps()) {
            Ok(limits) => Some(Arc::new(limits)),
            Err(e) => {
                problems.push(format!(
                    "its limits file cannot be made ({e}); its processes can raise their own caps"
                ));
                None
            }
        }
    }

    /// Holds every region to the daemon's record (its processes can write the region): a
    /// memory cap changed in the region is put back, and a container's usage counter that
    /// is lower than what its own processes' slots hold is raised to it. Each kind of
    /// tampering is reported once per container, in its status and as a returned log line.
    pub fn guard_regions(&mut self) -> Vec<String> {
        let mut log = Vec::new();
        let mut remade = false;
        let dir = self.dir.clone();
        for (name, m) in &mut self.containers {
            // The processes of regions set aside that have ended give their charge back.
            let region = m.region.clone();
            m.carried.retain(|c| {
                let alive = c
                    .source
                    .processes()
                    .iter()
                    .any(|p| p.slot == c.source_slot && p.pid == c.pid);
                if !alive {
                    region.release_held_slot(c.slot);
                    tracing::debug!(
                        "container {name}: process {} of a region set aside ended; its charge is given back",
                        c.pid
                    );
                }
                alive
            });
            let caps = m.spec.memory_caps();
            let mut found = 0u32;
            let mut lines = Vec::new();
            for &gpu in m.spec.gpus.as_slice() {
                let dev = gpu as usize;
                let declared = caps.get(dev).copied().flatten();
                let own = m.region.own_memory_cap(dev);
                if own != declared {
                    m.region.set_memory_cap(dev, declared);
                    found |= TAMPERED_CAP;
                    lines.push(format!(
                        "GPU {gpu}: its region's memory cap was changed to {} where {} is declared; put back (its allocations were held to the declared cap)",
                        cap_text(own),
                        cap_text(declared)
                    ));
                }
                if let Some((was, held)) = m.region.restore_memory_used(dev) {
                    found |= TAMPERED_USAGE;
                    lines.push(format!(
                        "GPU {gpu}: its region's usage counter was lowered to {was} bytes below the {held} bytes its processes hold; put back"
                    ));
                }
            }
            if m.limits.is_some() {
                // Removed, or something else put in its place: made again, so that the
                // container's next processes find their caps where only this daemon writes.
                let path = limits_path(&region_file(&dir, name));
                let whole =
                    std::fs::symlink_metadata(&path).is_ok_and(|md| md.file_type().is_file());
                if !whole {
                    let _ = std::fs::remove_file(&path);
                    found |= LIMITS_GONE;
                    match Limits::create(&path, &caps) {
                        Ok(limits) => {
                            m.limits = Some(Arc::new(limits));
                            remade = true;
                            lines.push("its limits file was removed or replaced by something that is not a file; made again".to_string());
                        }
                        Err(e) => lines.push(format!(
                            "its limits file was removed or replaced and cannot be made again ({e}); its processes can raise their own caps"
                        )),
                    }
                }
            }
            if let Some(limits) = &m.limits {
                for (dev, &declared) in caps.iter().enumerate() {
                    if limits.memory_cap(dev) != declared {
                        // Only this daemon writes the file: someone else did.
                        limits.set_memory_cap(dev, declared);
                        found |= TAMPERED_LIMITS;
                        lines.push(format!("its limits file was changed (GPU {dev}); put back"));
                    }
                }
            }
            if found & !m.tampering_noted != 0 {
                m.tampering_noted |= found;
                for line in lines {
                    log.push(format!("container {name}: {line}"));
                    if m.problems.len() >= MAX_PROBLEMS {
                        m.problems.remove(0);
                    }
                    m.problems.push(line);
                }
            }
        }
        if remade {
            // The scheduler writes the new file's compute words from now on.
            self.publish();
        }
        log
    }

    /// Checks every region's header; a spoiled region is quarantined and its container gets
    /// a fresh one with its caps (its running processes keep the spoiled mapping). Returns
    /// a log line per region replaced.
    pub fn verify_regions(&mut self) -> Vec<String> {
        let bad: Vec<(String, String)> = self
            .containers
            .iter()
            .filter_map(|(n, m)| m.region.verify().err().map(|e| (n.clone(), e.to_string())))
            .collect();
        let mut log = Vec::new();
        for (name, reason) in bad {
            let path = self.region_path(&name);
            let (line, set_aside) = self.quarantine_to(&path, &reason);
            let spec = self.containers[&name].spec.clone();
            let init = RegionInit {
                name: name.clone(),
                memory_caps: spec.memory_caps(),
            };
            let m = self.containers.get_mut(&name).expect("present");
            // A region that cannot be made again is found spoiled again each pass: keep the
            // newest lines only.
            if m.problems.len() >= MAX_PROBLEMS {
                m.problems.drain(..2);
            }
            m.problems.push(line.clone());
            m.quarantines += 1;
            match Region::open_or_create(&path, &init) {
                Ok(region) => {
                    let old = std::mem::replace(&mut m.region, Arc::new(region));
                    carry(m, old, set_aside);
                }
                Err(e) => m.problems.push(format!("cannot recreate its region: {e}")),
            }
            log.push(line);
        }
        if !log.is_empty() {
            self.publish();
        }
        log
    }

    /// Makes the config's containers the config-origin set: adds the new ones, changes the
    /// changed ones and retires the ones no longer declared. Each container is handled on
    /// its own; returns a log line per change, and a line per container whose declaration
    /// was refused (it stays as it was, or absent).
    pub fn apply_config(
        &mut self,
        declared: &[ContainerSpec],
        previous: &[ContainerSpec],
    ) -> Applied {
        let mut log = Vec::new();
        let mut refused = Vec::new();
        for spec in declared {
            let name = spec.name.to_string();
            let result = match self.containers.get(&name) {
                None => self.add(spec.clone(), Origin::Config).map(|_| "added"),
                // Unchanged in the file: changes made since through the API stand.
                Some(m) if m.origin == Origin::Config && !m.retiring && previous.contains(spec) => {
                    continue
                }
                Some(_) => self.take_over(spec).map(|()| "set from the config"),
            };
            match result {
                Ok(what) => log.push(format!("container {name}: {what}")),
                Err(e) => {
                    let line = format!("container {name}: {e}");
                    refused.push((name, line));
                }
            }
        }
        let gone: Vec<String> = self
            .containers
            .iter()
            .filter(|(n, m)| {
                m.origin == Origin::Config
                    && !m.retiring
                    && !declared.iter().any(|s| s.name.as_str() == n.as_str())
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            if self.retire(&name, "no longer declared in the config") {
                log.push(format!(
                    "container {name}: removed (no longer in the config)"
                ));
            } else {
                log.push(format!(
                    "container {name}: no longer in the config; removed once its processes end"
                ));
            }
        }
        Applied { log, refused }
    }

    /// Makes an existing container the config's, with the config's declaration.
    fn take_over(&mut self, spec: &ContainerSpec) -> Result<(), StateError> {
        let name = spec.name.to_string();
        self.check_guarantees(spec)?;
        let m = self.containers.get_mut(&name).expect("present");
        m.origin = Origin::Config;
        if m.retiring {
            m.retiring = false;
            m.problems.clear();
        }
        self.replace(spec.clone())
    }

    /// Writes `<name>.json` whole: a temporary file, synced, renamed over the old one, and
    /// the directory synced, so that a crash leaves the old declaration or the new one.
    fn save(&self, spec: &ContainerSpec, origin: Origin) -> Result<(), StateError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.spec_path(spec.name.as_str());
        let saved = Saved {
            spec: spec.clone(),
            origin,
        };
        let bytes = serde_json::to_vec_pretty(&saved).expect("plain data serializes");
        let tmp = path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, &path))
            .and_then(|()| std::fs::File::open(&self.dir)?.sync_all())
            .map_err(|source| StateError::Io { path, source })
    }

    /// One container as `list` shows it.
    pub fn info(&self, name: &str) -> Option<ContainerInfo> {
        self.containers.get(name).map(|m| ContainerInfo {
            spec: m.spec.clone(),
            origin: m.origin,
            region: self.region_path(name),
        })
    }

    /// Every container, by name.
    pub fn list(&self) -> Vec<ContainerInfo> {
        self.containers
            .keys()
            .filter_map(|n| self.info(n))
            .collect()
    }

    /// Acts on what the watchdog found: holds, through their limits files, the containers
    /// running past their compute grant (`compute_held` in `status`) and lets go of those
    /// that paid it back; and ignores the claims of work of an online container that has
    /// claimed work without a break for [`UNTRUE_CLAIM`] while NVML shows it running nothing.
    pub fn act_on_watchdog(&self, status: &NodeStatus) {
        let (_, members) = self.roster.snapshot();
        for c in &status.containers {
            for member in members.iter().filter(|m| m.name == c.name) {
                for device in &c.devices {
                    let Some(real) = device.real_share else {
                        continue;
                    };
                    let gpu = device.gpu as usize;
                    // Only an online container's claims stop anyone; an offline one claims
                    // work it cannot do while it is held, which is no lie.
                    let untrue = member.priority == Priority::Online
                        && real < IDLE_SHARE
                        && member.claiming_for(gpu) >= UNTRUE_CLAIM;
                    if member.ignore_claims(gpu, untrue) && untrue {
                        tracing::warn!(
                            "container {}: claims work on GPU {gpu} that NVML shows it does not do; its claims and its board bit are ignored until it runs something",
                            c.name
                        );
                    }
                }
            }
        }
        for c in &status.containers {
            let Some(m) = self.containers.get(&c.name) else {
                continue;
            };
            let Some(limits) = &m.limits else {
                continue;
            };
            for device in &c.devices {
                let gpu = device.gpu as usize;
                if gpu < MAX_DEVICES
                    && limits.set_compute_hold(
                        gpu,
                        tessera_region::layout::HOLD_OVER_GRANT,
                        device.compute_held,
                    )
                    && !device.compute_held
                {
                    // Launches sleeping in the gate look again.
                    m.region.compute(gpu).wake_gate();
                }
            }
        }
    }

    /// Every region, for the reaper (which works without holding the state).
    pub fn regions(&self) -> Vec<Arc<Region>> {
        self.containers.values().map(|m| m.region.clone()).collect()
    }

    /// The node as the regions show it: containers, their memory and processes. GPU-wide
    /// figures, host pids and real usage are the watchdog's to add.
    pub fn node_status(&self) -> NodeStatus {
        let (_, members) = self.roster.snapshot();
        let containers = self
            .containers
            .iter()
            .map(|(name, m)| {
                let mut status = container_status(name, m, &self.region_path(name));
                let mine: Vec<_> = members
                    .iter()
                    .filter(|member| &member.name == name)
                    .collect();
                let tampering = mine
                    .iter()
                    .fold(0, |bits, member| bits | member.tampering());
                for device in &status.devices {
                    if mine.iter().any(|m| m.claims_ignored(device.gpu as usize)) {
                        status.problems.push(format!(
                            "it claims work on GPU {} that NVML shows it does not do: its claims and its board bit are ignored until it runs something",
                            device.gpu
                        ));
                    }
                }
                // The share granted as the daemon knows it, not as the region says.
                for device in &mut status.devices {
                    if let Some(granted) = mine.iter().find_map(|m| m.granted(device.gpu as usize))
                    {
                        device.share_target = Some(granted);
                    }
                }
                status.problems.extend(
                    crate::scheduler::Tampering::describe(tampering)
                        .into_iter()
                        .map(String::from),
                );
                status
            })
            .collect();
        NodeStatus {
            taken_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            gpus: Vec::new(),
            containers,
            unmanaged: Vec::new(),
            problems: self.problems.clone(),
        }
    }
}

/// A share of a GPU below which NVML shows a container running nothing.
const IDLE_SHARE: f64 = 0.01;
/// How long a container must claim work without a break, running nothing, before its
/// claims are ignored: longer than any request of a service, which drops its claim when
/// nothing is in flight.
const UNTRUE_CLAIM: Duration = Duration::from_secs(1);

/// What applying a config did.
#[derive(Debug, Default)]
pub struct Applied {
    /// A line per change.
    pub log: Vec<String>,
    /// Per container whose declaration was refused: its name and a line saying why.
    pub refused: Vec<(String, String)>,
}

/// What a state dir holds of one container's declaration.
enum Declaration {
    Found(Saved),
    Unreadable(String),
    Missing,
}

/// A file's bytes, refusing a symbolic link in its place.
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking: opening a FIFO put in a declaration's place must not hang the daemon
    // (it would wait for a writer); a regular file reads as ever.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::other(format!(
            "it is not a regular file but {}",
            describe_kind(kind)
        )));
    }
    let mut bytes = Vec::new();
    file.take(1 << 20).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A file type in words, for a log line.
fn describe_kind(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a file"
    }
}

/// Container `name`'s region file in state dir `dir`.
fn region_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.region"))
}

/// The declaration file beside a region.
#[derive(Serialize, Deserialize)]
struct Saved {
    spec: ContainerSpec,
    origin: Origin,
}

/// Writes a spec's caps and GPUs into its region and its limits file: the container's
/// processes see only its GPUs.
fn apply_caps(
    region: &Region,
    limits: Option<&Limits>,
    spec: &ContainerSpec,
    uuids: &[Option<[u8; 16]>],
) {
    write_uuids(region, uuids);
    for (dev, cap) in spec.memory_caps().into_iter().enumerate() {
        if let Some(limits) = limits {
            if limits.memory_cap(dev) != cap {
                limits.set_memory_cap(dev, cap);
            }
        }
        if region.own_memory_cap(dev) != cap {
            region.set_memory_cap(dev, cap);
        }
    }
    let gpus = spec
        .gpus
        .as_slice()
        .iter()
        .fold(0u32, |mask, &g| mask | 1 << g);
    if region.gpus() != Some(gpus) {
        region.set_gpus(Some(gpus));
    }
}

/// Writes the node's GPU UUIDs (by index) into a region; the devices past them unknown.
fn write_uuids(region: &Region, uuids: &[Option<[u8; 16]>]) {
    for dev in 0..MAX_DEVICES {
        let uuid = uuids.get(dev).copied().flatten();
        if region.uuid(dev) != uuid {
            region.set_uuid(dev, uuid);
        }
    }
}

/// A declaration for a region found without one: its GPUs are those the region names, else
/// the devices whose cap is not zero (all of them when it has no zero cap), its cap the
/// largest of theirs.
fn spec_from_region(name: ContainerName, region: &Region) -> ContainerSpec {
    let open: Vec<u32> = (0..MAX_DEVICES as u32)
        .filter(|&d| match region.gpus() {
            Some(mask) => mask & 1 << d != 0,
            None => region.memory_cap(d as usize) != Some(0),
        })
        .collect();
    let gpus = Gpus::new(open.clone()).unwrap_or_else(|_| Gpus::new(vec![0]).expect("valid"));
    let caps: Vec<Option<u64>> = open
        .iter()
        .map(|&d| region.memory_cap(d as usize))
        .collect();
    let memory = if caps.iter().any(Option::is_none) || caps.is_empty() {
        None
    } else {
        caps.iter().flatten().max().copied().map(MemorySize)
    };
    ContainerSpec {
        name,
        gpus,
        memory,
        compute: ComputePolicy::BestEffort,
        priority: crate::policy::Priority::Online,
        timeslice: None,
    }
}

/// What a container's library reports of its time slice, in words, and the slice in force.
fn timeslice_words(outcome: TimesliceOutcome) -> (String, Option<u32>) {
    let refused = |why: String| format!("not available: {why}; the launch gate alone holds it");
    match outcome {
        TimesliceOutcome::Pending => (
            "not applied yet (no GPU work since it was asked)".into(),
            None,
        ),
        TimesliceOutcome::Set { us, groups } => (
            format!(
                "{} on {groups} channel group{}",
                format_timeslice_us(us),
                if groups == 1 { "" } else { "s" }
            ),
            Some(us),
        ),
        TimesliceOutcome::NoGroups => (
            refused("no channel group of the driver was seen".into()),
            None,
        ),
        TimesliceOutcome::RefusedStatus(status) => (
            refused(format!(
                "the driver refused it ({}, {status:#x})",
                tessera_nvrm::status::name(status)
            )),
            None,
        ),
        TimesliceOutcome::RefusedErrno(errno) => (
            refused(format!(
                "the driver's file refused it ({})",
                std::io::Error::from_raw_os_error(errno as i32)
            )),
            None,
        ),
        TimesliceOutcome::Unknown(state) => (
            format!("unknown (the region holds state {state}, which no library writes)"),
            None,
        ),
    }
}

/// A container's compute figures on one device, as the scheduler and the library wrote
/// them into its region.
struct ComputeFigures {
    target: Option<f64>,
    measured: Option<f64>,
    measured_until_ns: Option<u64>,
    throttled_ns: u64,
    preemptions: u64,
}

/// Reads [`ComputeFigures`] (untrusted: shares are clamped to the whole GPU). An unmetered
/// container that measured nothing has no measured share (its launches are not timed).
fn compute_figures(region: &Region, dev: usize) -> ComputeFigures {
    use std::sync::atomic::Ordering::Relaxed;
    use tessera_region::layout::{COMPUTE_UNLIMITED, PPM_ALL};
    let a = region.compute(dev);
    let share = |ppm: u32| f64::from(ppm.min(PPM_ALL)) / f64::from(PPM_ALL);
    // Relaxed (all): momentary figures for people; nothing is published under them.
    let measured = a.share_measured_ppm.load(Relaxed);
    let metered = a.mode.load(Relaxed) != COMPUTE_UNLIMITED;
    ComputeFigures {
        target: Some(share(a.share_target_ppm.load(Relaxed))),
        measured: (metered || measured > 0).then(|| share(measured)),
        measured_until_ns: Some(a.share_measured_until_ns.load(Relaxed)).filter(|&t| t > 0),
        throttled_ns: a.throttled_ns.load(Relaxed),
        preemptions: a.preemptions.load(Relaxed),
    }
}

/// One container's status from its region. Host pids are left to the watchdog, which
/// links them by the processes that map the region file.
fn container_status(name: &str, m: &Managed, path: &Path) -> ContainerStatus {
    let mut problems = m.problems.clone();
    let processes: Vec<ContainerProcess> = m
        .region
        .processes()
        .into_iter()
        .map(|p| ContainerProcess {
            slot: p.slot,
            pid: p.pid,
            host_pids: Vec::new(),
            memory: p.memory.into_iter().take(DEVICES).collect(),
        })
        .collect();
    let devices = m
        .spec
        .gpus
        .as_slice()
        .iter()
        .map(|&gpu| {
            let dev = gpu as usize;
            // The daemon's record, not what the region says: its processes can write that.
            let cap = m.spec.memory_caps()[dev];
            let used = m.region.memory_used(dev);
            // Untrusted: the processes' own figures must add up to the container's.
            let held: u64 = processes
                .iter()
                .map(|p| p.memory.get(dev).copied().unwrap_or(0))
                .fold(0, u64::saturating_add);
            if held > used {
                problems.push(format!(
                    "GPU {gpu}: its processes claim {held} bytes but the container counts {used}; its region was tampered with"
                ));
            }
            if cap.is_some_and(|c| used > c) && m.region.memory_cap(dev) == cap {
                problems.push(format!(
                    "GPU {gpu}: {used} bytes in use, over its cap (lowered below its usage)"
                ));
            }
            let compute = compute_figures(&m.region, dev);
            ContainerDevice {
                gpu,
                memory_used: used,
                memory_cap: cap,
                real_memory_used: None,
                share_target: compute.target,
                share_measured: compute.measured,
                share_measured_until_ns: compute.measured_until_ns,
                real_share: None,
                compute_held: false,
                throttled_ns: compute.throttled_ns,
                preemptions: compute.preemptions,
            }
        })
        .collect();
    let timeslice = m.spec.timeslice();
    let outcome = m.region.timeslice_report().outcome();
    let (timeslice_state, timeslice_set_us) = match timeslice {
        Timeslice::Driver => (String::new(), None),
        Timeslice::Us(_) => timeslice_words(outcome),
    };
    let timeslice_unavailable = timeslice != Timeslice::Driver
        && matches!(
            outcome,
            TimesliceOutcome::NoGroups
                | TimesliceOutcome::RefusedStatus(_)
                | TimesliceOutcome::RefusedErrno(_)
        );
    ContainerStatus {
        name: name.to_string(),
        compute: m.spec.compute.to_string(),
        priority: m.spec.priority.to_string(),
        timeslice: timeslice.to_string(),
        timeslice_state,
        timeslice_set_us,
        timeslice_unavailable,
        region: path.to_path_buf(),
        regions_set_aside: {
            let mut paths: Vec<PathBuf> = m
                .carried
                .iter()
                .filter_map(|c| c.source_path.clone())
                .collect();
            paths.sort();
            paths.dedup();
            paths
        },
        devices,
        processes,
        problems,
        region_quarantines: m.quarantines,
        watchdog_kills: 0,
    }
}
