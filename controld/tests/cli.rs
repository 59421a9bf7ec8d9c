//! The command line as a user meets it: help generated from the declaration, usage errors
//! with clap's hint and status 2, and completions. Needs no daemon.

use std::process::{Command, Output, Stdio};
use std::time::Duration;
use tessera_tests::{run_with_timeout, wait_with_timeout};

fn controld(args: &[&str]) -> Output {
    run_with_timeout(
        Command::new(env!("CARGO_BIN_EXE_controld")).args(args),
        Duration::from_secs(60),
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_every_command_and_the_shared_flags() {
    for args in [&["--help"][..], &[]] {
        let out = controld(args);
        let help = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {help}");
        for command in ["run", "container", "status", "exec", "cdi", "completions"] {
            assert!(
                help.contains(&format!("\n  {command} ")),
                "{command}: {help}"
            );
        }
        for flag in ["--config <FILE>", "--state-dir <DIR>"] {
            assert!(help.contains(flag), "{flag}: {help}");
        }
    }
}

#[test]
fn a_commands_help_is_its_own() {
    let out = controld(&["status", "--help"]);
    let help = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{help}");
    assert!(help.contains("Usage: controld status"), "{help}");
    for flag in ["--json", "--socket <PATH>", "--state-dir <DIR>"] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
    // Flags of other commands are not offered here.
    assert!(!help.contains("--memory"), "{help}");
    let out = controld(&["container", "add", "--help"]);
    let help = text(&out.stdout);
    for flag in [
        "<NAME>",
        "--gpus <G[,G...]>",
        "--memory <SIZE>",
        "--compute <POLICY>",
    ] {
        assert!(help.contains(flag), "{flag}: {help}");
    }
}

#[test]
fn a_misspelt_flag_or_command_gets_a_hint_and_status_2() {
    for (args, hint) in [
        (&["status", "--jsn"][..], "'--json'"),
        (
            &["container", "add", "web", "--memroy", "1GiB"],
            "'--memory'",
        ),
        (&["stauts"], "'status'"),
        (&["container", "lsit"], "'list'"),
    ] {
        let out = controld(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("similar") && err.contains(hint),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn completions_come_from_the_same_declaration() {
    let out = controld(&["completions", "bash"]);
    let script = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for word in ["container", "--state-dir", "--force", "--compute"] {
        assert!(script.contains(word), "{word} not offered");
    }
    let out = controld(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_reader_that_went_away_is_not_an_error() {
    // `controld completions bash | head -1`, with the reader gone before the first write.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let child = Command::new(env!("CARGO_BIN_EXE_controld"))
        .args(["completions", "bash"])
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("controld starts");
    let out = wait_with_timeout(child, Duration::from_secs(60), "controld completions bash");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}
