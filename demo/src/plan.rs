//! The demo's three containers: what each is declared with and what it runs. Plain data,
//! which the config, the workloads, the measure and the view all read.

/// One container of the demo.
pub struct Plan {
    /// Its name.
    pub name: &'static str,
    /// What it stands for.
    pub role: &'static str,
    /// Its compute policy.
    pub compute: &'static str,
    /// `online` or `offline`.
    pub priority: &'static str,
    /// Its memory cap.
    pub memory: &'static str,
    /// Its workload: `gpuload` and its arguments (`--seconds` is added).
    pub work: &'static [&'static str],
    /// What the workload does, for people.
    pub work_text: &'static str,
    /// The memory its holder process keeps allocated.
    pub holds: &'static str,
}

/// The three containers.
pub const PLANS: [Plan; 3] = [
    Plan {
        name: "inference",
        role: "online service",
        compute: "burst:50",
        priority: "online",
        memory: "8GiB",
        work: &[
            "infer",
            "--rate",
            "20",
            "--kernels",
            "5",
            "--kernel-ms",
            "1",
        ],
        work_text: "20 requests/s, each 5 kernels of 1 ms",
        holds: "6GiB",
    },
    Plan {
        name: "training",
        role: "offline trainer",
        compute: "best-effort",
        priority: "offline",
        memory: "16GiB",
        work: &["train", "--kernel-ms", "2"],
        work_text: "2 ms kernels back to back",
        holds: "12GiB",
    },
    Plan {
        name: "batch",
        role: "fixed-share job",
        compute: "fixed:20",
        priority: "offline",
        memory: "4GiB",
        work: &["train", "--kernel-ms", "1"],
        work_text: "1 ms kernels back to back",
        holds: "3GiB",
    },
];
