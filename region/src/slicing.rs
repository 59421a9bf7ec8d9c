//! How a GPU time-slices the contexts that share it: the figures `controld`'s settlement
//! assumes, and simgpu's engine runs by, declared once.
//!
//! Between processes a GPU runs one context at a time. A context with work keeps the
//! engine for its time slice, then, if another context has work, the GPU saves the state
//! of the kernels it cuts (registers and shared memory of every SM) and switches, round
//! robin; a context that runs out of work gives the engine up at once. While a switch goes
//! on, no context's kernel advances: that dead time is nobody's GPU time.
//!
//! The H200's figures were measured on the card (driver 580.159.04) with `gpuload slice`:
//! this process's slice 2.09 ms beside 1, 2 and 3 others, and the others' time between two
//! of its slices 2.40, 4.65 and 6.89 ms, n slices and n + 1 switches of about 0.16 ms. The
//! A100's and T4's switch costs are estimates, scaled to the state they hold per SM and
//! their SM counts; their slice is the driver's (the same on every GPU since Kepler).

/// How one GPU model time-slices contexts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicing {
    /// How long a context keeps the engine while another waits, in ns.
    pub timeslice_ns: u64,
    /// Dead time of a switch away from a context cut in the middle of its kernels, in ns.
    pub switch_ns: u64,
    /// Dead time of a switch away from a context that had run out of work, in ns (an
    /// estimate on every model: nothing of the outgoing context is saved).
    pub idle_switch_ns: u64,
}

impl Slicing {
    /// The dead time of a switch between two contexts whose channel groups run slices of
    /// `a_ns` and `b_ns` (0: the GPU's own slice); see [`switch_between_ns`].
    pub fn switch_between_ns(&self, a_ns: u64, b_ns: u64) -> u64 {
        let own = |s: u64| if s == 0 { self.timeslice_ns } else { s };
        switch_between_ns(self.switch_ns, self.timeslice_ns, own(a_ns).min(own(b_ns)))
    }
}

/// The dead time of a switch on a GPU that loses `switch_ns` between two contexts of its
/// own slice `timeslice_ns`, when the shorter of the two slices it lies between is
/// `shorter_ns`: in proportion to it, up to the whole. A context cut after a short slice
/// has had little time to fill the SMs with state to save; the rule is fitted to the two
/// things measured on an H200 (docs/simgpu.md): saturating contexts of the driver's slice
/// lose about 0.16 ms per switch, and an online process beside an offline one whose groups
/// ran 100 µs slices saw its latency rise 5 %, where whole switches would make it 17 %.
pub fn switch_between_ns(switch_ns: u64, timeslice_ns: u64, shorter_ns: u64) -> u64 {
    if timeslice_ns == 0 || shorter_ns >= timeslice_ns {
        return switch_ns;
    }
    // u128: a switch of up to a slice times a slice.
    (u128::from(switch_ns) * u128::from(shorter_ns) / u128::from(timeslice_ns)) as u64
}

/// The NVIDIA H200, measured. On simgpu its slice is 12 µs shorter than the 2.088 ms
/// `gpuload slice` reads on the card: the probe's 54 µs kernels round the reading up.
pub const H200: Slicing = Slicing {
    timeslice_ns: 2_076_000,
    switch_ns: 163_000,
    idle_switch_ns: 20_000,
};

/// The A100, estimated.
pub const A100: Slicing = Slicing {
    timeslice_ns: 2_076_000,
    switch_ns: 115_000,
    idle_switch_ns: 20_000,
};

/// The T4, estimated.
pub const T4: Slicing = Slicing {
    timeslice_ns: 2_076_000,
    switch_ns: 60_000,
    idle_switch_ns: 15_000,
};

/// The slicing of a GPU model, by its marketing name (NVML's, `cuDeviceGetName`'s): the
/// H200's, the one measured, for any model not estimated otherwise (the H100 is the same
/// generation).
pub fn for_model(name: &str) -> Slicing {
    if name.contains("T4") {
        T4
    } else if name.contains("A100") {
        A100
    } else {
        H200
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_find_their_figures() {
        assert_eq!(for_model("NVIDIA H200"), H200);
        assert_eq!(for_model("NVIDIA H100 80GB HBM3"), H200);
        assert_eq!(for_model("NVIDIA A100-SXM4-80GB"), A100);
        assert_eq!(for_model("Tesla T4"), T4);
        assert_eq!(for_model("Small"), H200);
    }

    #[test]
    fn a_switch_costs_in_proportion_to_the_shorter_slice() {
        assert_eq!(H200.switch_between_ns(0, 0), H200.switch_ns);
        assert_eq!(H200.switch_between_ns(5_000_000, 0), H200.switch_ns);
        let short = H200.switch_between_ns(100_000, 0);
        assert_eq!(short, H200.switch_between_ns(0, 100_000));
        assert_eq!(short, H200.switch_ns * 100_000 / H200.timeslice_ns);
        assert!(short < H200.switch_ns / 20 + 1_000);
    }
}
