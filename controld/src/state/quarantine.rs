//! Spoiled files set aside in `<state_dir>/quarantine/`, and regions found spoiled made
//! again, the charge of their live processes carried into the new one.

use super::{Carried, Managed, State, MAX_PROBLEMS};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tessera_region::{Region, RegionInit};

impl State {
    /// Moves a bad region file into `quarantine/` and records why; returns the log line.
    pub(super) fn quarantine(&mut self, path: &Path, reason: &str) -> String {
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
