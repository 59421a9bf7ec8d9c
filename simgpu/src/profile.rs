//! Hardware profiles: what a GPU model and its driver cost, in the figures simgpu runs by.
//!
//! A model is only as good as its figures, so each profile says where its figures come from.
//! The H200's were measured on the card (driver 580.159.04, CUDA 13.0) with the project's own
//! probes, `gpuload slice` and `gpuload probe`; `docs/simgpu.md` sets every simulated figure
//! beside the measured one. The T4 and A100 figures are estimates from the H200's and from
//! published sizes of the cards (state to save at a switch, context sizes), labelled as such.
//!
//! What a profile sets:
//! - the *time slice* a context keeps the engine for while others wait, and the *dead time*
//!   of a switch, when no context's kernel advances: large when the outgoing context is cut
//!   in the middle of its kernels (their state is saved and, later, restored), small when it
//!   had run out of work (`tessera_region::slicing`, which `controld` assumes too);
//! - the device memory a context holds;
//! - the host cost of each driver call: how long the call takes on the CPU before it returns
//!   (the driver's own work; simgpu's bodies are 10–40 times cheaper than a real driver's, and
//!   a layer that adds driver calls must pay for them in the model as on the hardware).

use tessera_region::slicing::{self, Slicing};

/// The host cost of one driver call, in ns: the least time the call takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCosts {
    /// `cuLaunchKernel` and the other kernel launches, `cuGraphLaunch`.
    pub launch_ns: u32,
    /// `cuEventRecord`.
    pub event_record_ns: u32,
    /// `cuEventQuery` of an event that has completed.
    pub event_query_done_ns: u32,
    /// `cuEventQuery` of an event still pending, and `cuStreamQuery` likewise.
    pub event_query_pending_ns: u32,
    /// `cuEventElapsedTime`.
    pub event_elapsed_ns: u32,
    /// `cuEventCreate`, `cuEventDestroy`.
    pub event_create_ns: u32,
    /// The synchronizations, on top of the wait: `cuStreamSynchronize`,
    /// `cuEventSynchronize`, `cuCtxSynchronize`.
    pub synchronize_ns: u32,
    /// `cuMemAlloc` and its kin.
    pub mem_alloc_ns: u32,
    /// `cuMemFree`.
    pub mem_free_ns: u32,
    /// `cuMemGetInfo`.
    pub mem_get_info_ns: u32,
    /// Calls that read the thread's state only: `cuCtxGetCurrent`, `cuCtxGetDevice`,
    /// `cuStreamIsCapturing`, `cuStreamGetCtx`.
    pub query_ns: u32,
}

impl HostCosts {
    /// No host cost beyond simgpu's own work.
    pub const NONE: HostCosts = HostCosts {
        launch_ns: 0,
        event_record_ns: 0,
        event_query_done_ns: 0,
        event_query_pending_ns: 0,
        event_elapsed_ns: 0,
        event_create_ns: 0,
        synchronize_ns: 0,
        mem_alloc_ns: 0,
        mem_free_ns: 0,
        mem_get_info_ns: 0,
        query_ns: 0,
    };

    /// The cost of the entry point `name` when it returned `result` (0 is success; 600, not
    /// ready, is a query of pending work).
    pub fn of(&self, name: &str, result: u32) -> u32 {
        let base = name
            .trim_end_matches("_ptsz")
            .trim_end_matches("_ptds")
            .trim_end_matches("_v2")
            .trim_end_matches("_v3");
        match base {
            "cuLaunchKernel"
            | "cuLaunchKernelEx"
            | "cuLaunchCooperativeKernel"
            | "cuGraphLaunch"
            | "cuLaunchHostFunc" => self.launch_ns,
            "cuEventRecord" | "cuEventRecordWithFlags" => self.event_record_ns,
            "cuEventQuery" | "cuStreamQuery"
                if result == tessera_cuda_abi::CUDA_ERROR_NOT_READY =>
            {
                self.event_query_pending_ns
            }
            "cuEventQuery" | "cuStreamQuery" => self.event_query_done_ns,
            "cuEventElapsedTime" => self.event_elapsed_ns,
            "cuEventCreate" | "cuEventDestroy" => self.event_create_ns,
            "cuStreamSynchronize" | "cuEventSynchronize" | "cuCtxSynchronize" => {
                self.synchronize_ns
            }
            "cuMemAlloc" | "cuMemAllocPitch" | "cuMemAllocManaged" | "cuMemAllocAsync"
            | "cuMemAllocHost" => self.mem_alloc_ns,
            "cuMemFree" | "cuMemFreeAsync" | "cuMemFreeHost" => self.mem_free_ns,
            "cuMemGetInfo" => self.mem_get_info_ns,
            "cuCtxGetCurrent" | "cuCtxGetDevice" | "cuStreamIsCapturing" | "cuStreamGetCtx" => {
                self.query_ns
            }
            _ => 0,
        }
    }
}

/// One GPU model's figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// The name `SIMGPU_PROFILE` takes (lower case).
    pub name: &'static str,
    /// Where the figures come from, for people.
    pub source: &'static str,
    /// How the model time-slices contexts: its slice and the dead time of its switches
    /// (the figures `controld` assumes too, declared in the region crate).
    pub slicing: Slicing,
    /// Engine time every kernel takes beyond its own work: the GPU's launch and completion
    /// of its blocks, between two kernels of a stream.
    pub kernel_overhead_ns: u64,
    /// Device memory a context holds.
    pub context_memory: u64,
    /// Host cost per driver call.
    pub host: HostCosts,
}

/// The driver's host costs measured beside the H200 (medians of `gpuload probe`, two runs;
/// the figures not probed yet are estimates, marked so).
const H200_HOST: HostCosts = HostCosts {
    // 2 965 and 4 648 measured.
    launch_ns: 3_800,
    // 121 and 282 measured.
    event_record_ns: 200,
    // 1 241 and 1 636 measured.
    event_query_done_ns: 1_440,
    // 105 and 257 measured.
    event_query_pending_ns: 180,
    // Estimate: a read of two completed timestamps.
    event_elapsed_ns: 300,
    // Estimate.
    event_create_ns: 1_000,
    // Estimate: the work of a completed query once the wait is over.
    synchronize_ns: 1_500,
    // 57 443 and 99 916 measured for an allocation and a free of 1 MiB together; the
    // split between the two is an estimate.
    mem_alloc_ns: 48_000,
    mem_free_ns: 30_000,
    // 3 948 and 7 062 measured.
    mem_get_info_ns: 5_500,
    // Estimate: a read of the thread's state.
    query_ns: 30,
};

/// Every profile. The first is what a device that is not a preset gets.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "h200",
        source: "measured on an NVIDIA H200, driver 580.159.04 (the idle switch is an estimate)",
        slicing: slicing::H200,
        // Events after back-to-back 50 µs spin kernels were 54 µs apart; `gpuload train`
        // ran 41 220 kernels of 20 µs a second (24.3 µs each) and 4 914 of 0.2 ms.
        kernel_overhead_ns: 4_000,
        // One `gpuload` context, by NVML.
        context_memory: 518 << 20,
        host: H200_HOST,
    },
    Profile {
        name: "a100",
        source: "estimated: the H200's driver costs and time slice, a switch scaled to the A100's \
                 smaller register files and shared memory, a published context size",
        slicing: slicing::A100,
        kernel_overhead_ns: 4_000,
        context_memory: 430 << 20,
        host: H200_HOST,
    },
    Profile {
        name: "t4",
        source: "estimated: the H200's driver costs and time slice, a switch scaled to the T4's \
                 40 SMs, a published context size",
        slicing: slicing::T4,
        kernel_overhead_ns: 4_000,
        context_memory: 300 << 20,
        host: H200_HOST,
    },
    Profile {
        name: "free",
        source: "no hardware: 1 ms slices, switches and driver calls that cost nothing (the \
                 model before it was measured against a GPU)",
        slicing: Slicing {
            timeslice_ns: 1_000_000,
            switch_ns: 0,
            idle_switch_ns: 0,
        },
        kernel_overhead_ns: 0,
        context_memory: 300 << 20,
        host: HostCosts::NONE,
    },
];

/// The profile named `name` (any case), and its index in [`PROFILES`].
pub fn by_name(name: &str) -> Option<(usize, &'static Profile)> {
    PROFILES
        .iter()
        .enumerate()
        .find(|(_, p)| p.name.eq_ignore_ascii_case(name.trim()))
}

/// The profile of a device model, by its marketing name: the H200's (the measured one) for
/// anything that is not a T4 or an A100, the H100 included (the same generation).
pub fn for_model(name: &str) -> (usize, &'static Profile) {
    let key = if name.contains("T4") {
        "t4"
    } else if name.contains("A100") {
        "a100"
    } else {
        "h200"
    };
    by_name(key).expect("every key names a profile")
}

/// The profile at `index` of [`PROFILES`] (a node's header keeps the index), the first one
/// for an index out of range.
pub fn at(index: u32) -> &'static Profile {
    PROFILES.get(index as usize).unwrap_or(&PROFILES[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_find_their_profiles() {
        assert_eq!(for_model("NVIDIA H200").1.name, "h200");
        assert_eq!(for_model("NVIDIA A100-SXM4-80GB").1.name, "a100");
        assert_eq!(for_model("Tesla T4").1.name, "t4");
        assert_eq!(for_model("Small").1.name, "h200");
        assert_eq!(by_name(" FREE ").unwrap().1.slicing.switch_ns, 0);
        assert!(by_name("v100").is_none());
    }

    #[test]
    fn calls_cost_by_base_name_and_result() {
        let h = &at(0).host;
        assert_eq!(h.of("cuLaunchKernel_ptsz", 0), h.launch_ns);
        assert_eq!(h.of("cuMemAlloc_v2", 0), h.mem_alloc_ns);
        assert_eq!(h.of("cuEventQuery", 0), h.event_query_done_ns);
        assert_eq!(h.of("cuEventQuery", 600), h.event_query_pending_ns);
        assert_eq!(h.of("cuDeviceGetName", 0), 0);
        assert_eq!(HostCosts::NONE.of("cuLaunchKernel", 0), 0);
    }
}
