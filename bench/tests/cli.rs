//! The command lines of `gpuload` and `tessera-bench` as a user meets them: help generated
//! from the declaration, a misspelt mode or option refused with status 2 and clap's hint,
//! and a reader that goes away. Needs no GPU.

use std::process::{Command, Output};

fn gpuload(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuload"))
        .args(args)
        .output()
        .expect("gpuload runs")
}

#[test]
fn help_lists_every_mode_and_each_modes_options() {
    let out = gpuload(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{help}");
    for mode in [
        "memcheck", "alloc", "train", "queue", "streams", "graph", "ptsz", "threads", "infer",
        "info", "probe", "slice",
    ] {
        assert!(help.contains(&format!("\n  {mode} ")), "{mode}: {help}");
    }
    // Each mode's defaults are its own: slice runs shorter kernels than train.
    let slice = gpuload(&["slice", "--help"]);
    let slice = String::from_utf8_lossy(&slice.stdout);
    assert!(
        slice.contains("--kernel-ms <MS>") && slice.contains("[default: 0.05]"),
        "{slice}"
    );
    let train = gpuload(&["train", "--help"]);
    let train = String::from_utf8_lossy(&train.stdout);
    assert!(
        train.contains("[default: 1]") && !train.contains("--competitors"),
        "{train}"
    );
}

#[test]
fn a_misspelt_mode_or_option_gets_a_hint_and_status_2() {
    for (args, hint) in [
        (&["train", "--kernl-ms", "1"][..], "'--kernel-ms'"),
        (&["trian"], "'train'"),
        (&["alloc", "--chunks", "1GiB"], "'--chunk'"),
    ] {
        let out = gpuload(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("similar") && err.contains(hint),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // A value out of range is usage too, named with its option.
    let out = gpuload(&["memcheck", "--bytes", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--bytes") && err.contains("at least 4"),
        "{err}"
    );
}

/// Runs `program args` with a stdout whose reader is already gone.
fn into_closed_pipe(program: &str, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Command::new(program)
        .args(args)
        .stdout(writer)
        .output()
        .expect("it runs")
}

#[test]
fn a_reader_that_went_away_is_not_an_error() {
    for (program, args) in [
        (env!("CARGO_BIN_EXE_gpuload"), &["completions", "bash"][..]),
        (env!("CARGO_BIN_EXE_tessera-bench"), &["scenario", "--list"]),
        (env!("CARGO_BIN_EXE_tessera-bench"), &["completions", "zsh"]),
    ] {
        let out = into_closed_pipe(program, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{program} {args:?}: {err}");
        assert!(err.is_empty(), "{program} {args:?}: {err}");
    }
}
