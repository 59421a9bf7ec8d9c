//! `controld exec` and signals: SIGTERM or SIGINT sent to exec ends the command at once
//! and exec exits 128 + N; the command starts with the signal mask exec itself started
//! with (never with the forwarded signals blocked), and with the dispositions exec started
//! with: a wrapper passes on what it was given, as `env` or `nice` do.

mod support;

use std::os::unix::process::CommandExt;
use std::time::Duration;
use support::*;
use tessera_tests::Running;

/// `controld exec` on `node` running `command`.
fn exec(node: &Node, command: &[&str]) -> std::process::Command {
    let mut cmd = node.command();
    cmd.args(["exec", "--state-dir"])
        .arg(node.state_dir())
        .args(["--memory", "1GiB", "--"])
        .args(command);
    cmd
}

#[test]
fn a_signal_to_exec_ends_the_command_at_once() {
    let mut node = Node::new("exec-signals");
    node.start(None);
    for (sig, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let mut cmd = exec(&node, &["sh", "-c", "echo started $$; exec sleep 100"]);
        // As from a terminal's shell: the signal's default action, whatever this test
        // inherited (a job started with `&` from a script ignores SIGINT, and so would the
        // command under exec).
        // SAFETY: runs in the forked child before exec; signal is async-signal-safe and
        // changes only the child's disposition of `sig`.
        unsafe {
            cmd.pre_exec(move || {
                libc::signal(sig, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut running =
            Running::spawn(&mut cmd, &format!("controld exec -- sleep 100, for {name}"));
        let line = running.wait_for_line("started", Duration::from_secs(60));
        let command_pid: i32 = line["started ".len()..].trim().parse().unwrap();
        // SAFETY: kill on our own live child.
        assert_eq!(unsafe { libc::kill(running.pid() as i32, sig) }, 0);
        // Far less than the 100 s the command would otherwise run, with room for a loaded
        // machine.
        let status = running.wait(Duration::from_secs(30));
        assert_eq!(status.code(), Some(128 + sig), "{name}: {status:?}");
        assert!(
            !std::path::Path::new(&format!("/proc/{command_pid}")).exists(),
            "{name}: the command still runs"
        );
    }
}

/// Field `field` (`SigBlk` or `SigIgn`) of a command under exec when exec starts with
/// `blocked` blocked and `ignored` ignored (the command is `grep` itself: a shell may reset
/// its mask when it starts).
fn command_signals(node: &Node, field: &str, blocked: &[i32], ignored: &[i32]) -> u64 {
    let (blocked, ignored) = (blocked.to_vec(), ignored.to_vec());
    let mut cmd = exec(node, &["grep", field, "/proc/self/status"]);
    // SAFETY: runs in the forked child before exec; sigemptyset, sigaddset, signal and
    // pthread_sigmask are async-signal-safe and touch only this set and the child's mask
    // and dispositions.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in &blocked {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                let action = if ignored.contains(&sig) {
                    libc::SIG_IGN
                } else {
                    libc::SIG_DFL
                };
                libc::signal(sig, action);
            }
            Ok(())
        });
    }
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in {text}"));
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

#[test]
fn the_command_starts_with_the_mask_exec_started_with() {
    let mut node = Node::new("exec-mask");
    node.start(None);
    let mask = |blocked: &[i32]| command_signals(&node, "SigBlk", blocked, &[]);
    assert_eq!(mask(&[]), 0);
    assert_eq!(mask(&[libc::SIGWINCH]), bit(libc::SIGWINCH));
    // A forwarded signal blocked by exec's own parent stays blocked: it is what exec got.
    assert_eq!(
        mask(&[libc::SIGUSR1, libc::SIGWINCH]),
        bit(libc::SIGUSR1) | bit(libc::SIGWINCH)
    );
}

#[test]
fn the_command_ignores_what_exec_was_started_ignoring() {
    let mut node = Node::new("exec-ignored");
    node.start(None);
    let forwarded = bit(libc::SIGINT) | bit(libc::SIGTERM) | bit(libc::SIGHUP);
    let ignored = |ignored: &[i32]| command_signals(&node, "SigIgn", &[], ignored) & forwarded;
    assert_eq!(ignored(&[]), 0);
    // A job started with `&` from a script: its SIGINT is ignored, under exec as well.
    assert_eq!(ignored(&[libc::SIGINT]), bit(libc::SIGINT));
}
