//! What a declaration must fit before it is taken: the node's GPUs and their memory, and
//! every GPU's guarantees within 100%.

use super::{ContainerSpec, State, StateError};

impl State {
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
    pub(super) fn check_guarantees(&self, spec: &ContainerSpec) -> Result<(), StateError> {
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
}
