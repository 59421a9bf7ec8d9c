//! Opening the state dir: every declared container adopted as declared, a region found
//! without a declaration adopted with what it says, the rest set aside.

use super::caps::apply_caps;
use super::persist::{Declaration, Saved};
use super::{Managed, Origin, State, StateError};
use crate::policy::ComputePolicy;
use crate::scheduler::Roster;
use crate::spec::{ContainerName, ContainerSpec, Gpus, MemorySize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tessera_region::{Region, RegionError, RegionInit, MAX_DEVICES};

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
