//! `controld status` for a terminal: per GPU, its containers in one table, then what is
//! wrong.

use std::collections::BTreeSet;
use tessera_controld::status::{ContainerDevice, ContainerStatus, NodeStatus};
use tessera_region::units::format_size_rounded as human;

fn share(value: Option<f64>) -> String {
    value.map_or("-".to_string(), |v| format!("{:.0}%", v * 100.0))
}

/// The status as a table per GPU.
pub fn render_status(status: &NodeStatus) -> String {
    let mut gpus: BTreeSet<u32> = status.gpus.iter().map(|g| g.index).collect();
    for c in &status.containers {
        gpus.extend(c.devices.iter().map(|d| d.gpu));
    }
    let mut out = String::new();
    if gpus.is_empty() {
        out += "no GPUs and no containers\n";
    }
    for gpu in gpus {
        match status.gpus.iter().find(|g| g.index == gpu) {
            Some(g) => {
                out += &format!(
                    "GPU {gpu}  {}  memory {} / {}",
                    g.name,
                    human(g.memory_used),
                    human(g.memory_total)
                );
                if let Some(u) = g.utilization_percent {
                    out += &format!("  utilization {u:.0}%");
                }
                out += "\n";
            }
            None => out += &format!("GPU {gpu}\n"),
        }
        let rows: Vec<(&ContainerStatus, &ContainerDevice)> = status
            .containers
            .iter()
            .filter_map(|c| c.devices.iter().find(|d| d.gpu == gpu).map(|d| (c, d)))
            .collect();
        if rows.is_empty() {
            out += "  (no containers)\n";
            continue;
        }
        out += &format!(
            "  {:<24} {:<12} {:<8} {:>21} {:>13} {:>6}  {}\n",
            "CONTAINER",
            "COMPUTE",
            "PRIORITY",
            "MEMORY USED / CAP",
            "SHARE TGT/GOT",
            "PROCS",
            "PIDS"
        );
        for (c, d) in rows {
            let cap = d.memory_cap.map_or("unlimited".to_string(), human);
            let memory = format!("{} / {cap}", human(d.memory_used));
            let shares = format!("{} / {}", share(d.share_target), share(d.share_measured));
            let holders: Vec<String> = c
                .processes
                .iter()
                .filter(|p| {
                    p.memory.get(gpu as usize).is_some_and(|&m| m > 0) || c.devices.len() == 1
                })
                .map(|p| match p.host_pids.first() {
                    Some(&h) if h != p.pid => format!("{}({h})", p.pid),
                    _ => p.pid.to_string(),
                })
                .collect();
            let mut pids = holders
                .iter()
                .take(6)
                .cloned()
                .collect::<Vec<_>>()
                .join(",");
            if holders.len() > 6 {
                pids += &format!(",+{}", holders.len() - 6);
            }
            out += &format!(
                "  {:<24} {:<12} {:<8} {:>21} {:>13} {:>6}  {}\n",
                c.name,
                c.compute,
                c.priority,
                memory,
                shares,
                c.processes.len(),
                pids
            );
        }
    }
    for c in status
        .containers
        .iter()
        .filter(|c| !c.timeslice_state.is_empty())
    {
        out += &format!("  {}: GPU time slice: {}\n", c.name, c.timeslice_state);
    }
    for u in &status.unmanaged {
        out += &format!(
            "! GPU {}: pid {} holds {} outside every container\n",
            u.gpu,
            u.pid,
            human(u.memory)
        );
    }
    for c in &status.containers {
        for p in &c.problems {
            out += &format!("! {}: {p}\n", c.name);
        }
    }
    for p in &status.problems {
        out += &format!("! {p}\n");
    }
    out
}
