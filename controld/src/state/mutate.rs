//! Changes to the containers: add, set, remove and retire, and the config's set applied on
//! a reload.

use super::caps::apply_caps;
use super::{Applied, ContainerInfo, Managed, MemoryChange, Origin, SpecChange, State, StateError};
use crate::spec::ContainerSpec;
use std::sync::Arc;
use tessera_region::{limits_path, Region, RegionInit};

impl State {
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
}
