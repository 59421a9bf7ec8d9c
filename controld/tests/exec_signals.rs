//! `controld exec` and signals: SIGTERM or SIGINT sent to exec ends the command at once
//! and exec exits 128 + N; the command starts with the signal mask exec itself started
//! with (never with the forwarded signals blocked).

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
        let mut running = Running::spawn(
            &mut exec(&node, &["sh", "-c", "echo started $$; exec sleep 100"]),
            &format!("controld exec -- sleep 100, for {name}"),
        );
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

/// The blocked-signal mask of a command under exec, when exec starts with `blocked` (the
/// command is `grep` itself: a shell may reset its mask when it starts).
fn command_mask(node: &Node, blocked: &[i32]) -> u64 {
    let blocked = blocked.to_vec();
    let mut cmd = exec(node, &["grep", "SigBlk", "/proc/self/status"]);
    // SAFETY: runs in the forked child before exec; sigemptyset, sigaddset and
    // pthread_sigmask are async-signal-safe and touch only this set and the child's mask.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &sig in &blocked {
                libc::sigaddset(&mut set, sig);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let out = tessera_tests::run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .unwrap_or_else(|| panic!("no SigBlk in {text}"));
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

#[test]
fn the_command_starts_with_the_mask_exec_started_with() {
    let mut node = Node::new("exec-mask");
    node.start(None);
    let bit = |sig: i32| 1u64 << (sig - 1);
    assert_eq!(command_mask(&node, &[]), 0);
    assert_eq!(command_mask(&node, &[libc::SIGWINCH]), bit(libc::SIGWINCH));
    // A forwarded signal blocked by exec's own parent stays blocked: it is what exec got.
    assert_eq!(
        command_mask(&node, &[libc::SIGUSR1, libc::SIGWINCH]),
        bit(libc::SIGUSR1) | bit(libc::SIGWINCH)
    );
}
