//! Shares on the launch shapes of real applications (items 11 and 12): programs that queue
//! hundreds or thousands of kernels and synchronize once — on the legacy default stream,
//! over several streams, as a CUDA graph, on the per-thread default stream, from several
//! host threads — rather than `gpuload train`'s few kernels in flight. Each is measured from
//! the node's ground truth, beside the same program without Tessera, and `controld`'s own
//! measure of each container is checked against that ground truth.

use super::shares::{shares_chart, shown, within, SECOND, TENTH};
use super::{pct, train_together, Bins, Options, Outcome, Spec, TrainRun, Workload};

/// The shapes under `fixed:30`: mode, its count, kernel length in ms, and a label.
const SHAPES: &[(&str, usize, f64, &str)] = &[
    ("queue", 1, 1.0, "null stream, 1 ms kernels"),
    ("queue", 1, 0.02, "null stream, 20 µs kernels"),
    ("queue", 1, 50.0, "null stream, 50 ms kernels"),
    ("streams", 4, 1.0, "4 streams"),
    ("graph", 4, 1.0, "graph of 4 kernels"),
    ("ptsz", 1, 1.0, "per-thread default stream"),
    ("threads", 4, 1.0, "4 host threads"),
];

/// How far `controld`'s measured share of each container lies from the ground truth over
/// the second its figure covers (settled bins end 100 ms before the reading), in points;
/// `None` without the daemon's view.
fn daemon_error(run: &TrainRun) -> Option<f64> {
    let end = run.to_ns.saturating_sub(100_000_000);
    let start = end.saturating_sub(1_000_000_000);
    let t = &run.trace;
    run.daemon_view
        .iter()
        .zip(&run.pids)
        .map(|((_, measured), pid)| {
            let truth = t.share(&[*pid], t.at(start), t.at(end));
            measured.map(|m| (m - truth).abs() * 100.0)
        })
        .collect::<Option<Vec<f64>>>()
        .map(|v| v.into_iter().fold(0.0, f64::max))
}

/// The row for [`daemon_error`].
fn daemon_row(out: &mut Outcome, what: &str, run: &TrainRun) {
    let err = daemon_error(run);
    if let Some(e) = err {
        out.set(&format!("{what}_daemon_error_points"), e);
    }
    out.row(
        &format!("{what}: controld's measure vs ground truth"),
        "± 1 point",
        err.map_or("—".into(), |e| format!("{e:.2} points")),
        String::new(),
        Some(err.is_some_and(|e| e <= 1.0)),
    );
}

/// Item 11: `fixed:30` alone, each shape: 30 ± 2 % in every 1 s window.
pub(super) fn fixed_shapes(bins: &Bins, o: &Options) -> Result<Outcome, String> {
    let mut out = Outcome::new("shapes");
    let specs = [Spec::online("fixed30", "fixed:30")];
    let phase = o.phase(10.0);
    for &(mode, count, kernel_ms, label) in SHAPES {
        let workload = Workload::deep(mode, count, kernel_ms);
        let key = format!("{mode}_{count}_{kernel_ms}ms");
        o.say(&format!("fixed:30, {label}, with Tessera"));
        let run = train_together(bins, &specs, true, &workload, SECOND, phase, TENTH)?;
        let windows = run.windows(0, SECOND);
        let lo = windows.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = windows.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        out.set(&format!("{key}_share"), run.share(0));
        out.set(&format!("{key}_min_window"), lo);
        out.set(&format!("{key}_max_window"), hi);
        let base = if o.baseline {
            o.say(&format!("fixed:30, {label}, without Tessera"));
            let p = phase.min(3 * SECOND);
            Some(train_together(
                bins,
                &specs,
                false,
                &workload,
                SECOND / 2,
                p,
                TENTH,
            )?)
        } else {
            None
        };
        if mode == "queue" && kernel_ms == 1.0 {
            out.charts.push(shares_chart(
                "shapes-queue-shares",
                "fixed:30, 1000 kernels queued on the null stream per synchronize: share of GPU time",
                &specs,
                &[0.30],
                [Some(&run), base.as_ref()],
                SECOND / 2,
            ));
        }
        out.row(
            &format!("fixed:30, {label}, each 1 s window"),
            "30 ± 2 %",
            format!("{}–{} over {} windows", pct(lo), pct(hi), windows.len()),
            shown(&base, 0),
            Some(!windows.is_empty() && windows.iter().all(|&w| within(w, 0.30, 0.02))),
        );
        daemon_row(&mut out, &key, &run);
    }
    Ok(out)
}

/// Item 12: deep-queueing containers side by side: `fixed:20` + `burst:30` + `best-effort`
/// at 20 / 55 / 25 ± 3 %, and `fixed:30` + `fixed:70` at 30 / 70 ± 2 %.
pub(super) fn mixed_deep(bins: &Bins, o: &Options) -> Result<Outcome, String> {
    let mut out = Outcome::new("mixed-deep");
    let phase = o.phase(10.0);
    let workload = Workload::deep("queue", 1, 1.0);
    let sets: [(&str, Vec<Spec>, Vec<f64>, f64); 2] = [
        (
            "mixed",
            vec![
                Spec::online("fixed20", "fixed:20"),
                Spec::online("burst30", "burst:30"),
                Spec::online("besteffort", "best-effort"),
            ],
            vec![0.20, 0.55, 0.25],
            0.03,
        ),
        (
            "pair",
            vec![
                Spec::online("fixed30", "fixed:30"),
                Spec::online("fixed70", "fixed:70"),
            ],
            vec![0.30, 0.70],
            0.02,
        ),
    ];
    for (set, specs, targets, tolerance) in sets {
        o.say(&format!(
            "{set}, every container queueing 1000 kernels a round, with Tessera"
        ));
        let run = train_together(bins, &specs, true, &workload, SECOND, phase, TENTH)?;
        let base = if o.baseline {
            o.say("the same without Tessera");
            let p = phase.min(3 * SECOND);
            Some(train_together(
                bins,
                &specs,
                false,
                &workload,
                SECOND / 2,
                p,
                TENTH,
            )?)
        } else {
            None
        };
        out.charts.push(shares_chart(
            &format!("mixed-deep-{set}-shares"),
            &format!(
                "{}, each queueing 1000 kernels per synchronize: shares of GPU time",
                specs
                    .iter()
                    .map(|s| s.compute)
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
            &specs,
            &targets,
            [Some(&run), base.as_ref()],
            SECOND / 2,
        ));
        for (i, (spec, target)) in specs.iter().zip(&targets).enumerate() {
            let share = run.share(i);
            out.set(&format!("{set}_{}", spec.name), share);
            out.row(
                &format!("{} beside {}", spec.compute, others(&specs, i)),
                &format!("{:.0} ± {:.0} %", target * 100.0, tolerance * 100.0),
                pct(share),
                shown(&base, i),
                Some(within(share, *target, tolerance)),
            );
        }
        daemon_row(&mut out, set, &run);
    }
    Ok(out)
}

/// The other containers' policies, for a row's label.
fn others(specs: &[Spec], i: usize) -> String {
    specs
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != i)
        .map(|(_, s)| s.compute)
        .collect::<Vec<_>>()
        .join(" + ")
}
