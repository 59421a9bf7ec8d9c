//! Holding the containers to the daemon's record: what their processes wrote into their
//! regions and limits files put back, and what the watchdog found acted on.

use super::{region_file, State, MAX_PROBLEMS};
use crate::policy::Priority;
use crate::status::NodeStatus;
use std::sync::Arc;
use std::time::Duration;
use tessera_region::{limits_path, Limits, MAX_DEVICES};

/// Kinds of tampering found by [`State::guard_regions`], reported once each.
const TAMPERED_CAP: u32 = 1;
const TAMPERED_USAGE: u32 = 2;
const TAMPERED_LIMITS: u32 = 4;
const LIMITS_GONE: u32 = 8;

/// A cap for a problem line.
fn cap_text(cap: Option<u64>) -> String {
    cap.map_or_else(|| "no cap".to_string(), |c| format!("{c} bytes"))
}

impl State {
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
}

/// A share of a GPU below which NVML shows a container running nothing.
const IDLE_SHARE: f64 = 0.01;

/// How long a container must claim work without a break, running nothing, before its
/// claims are ignored: longer than any request of a service, which drops its claim when
/// nothing is in flight.
const UNTRUE_CLAIM: Duration = Duration::from_secs(1);
