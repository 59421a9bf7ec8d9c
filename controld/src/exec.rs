//! `controld exec`: one command in a transient container. The container is registered
//! through the daemon (and belongs to this connection, so the daemon removes it even if
//! this process is killed); the command runs with `LD_PRELOAD=libtessera.so` and
//! `TESSERA_REGION`; signals sent to `controld exec` go to the command; when it exits the
//! container is removed and its exit status becomes ours.

use crate::api::{Answer, Client, ClientError, Request};
use crate::signals::{wait_in, BlockedSignals};
use crate::spec::ContainerSpec;
use nix::sys::signal::{SigSet, Signal};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// The signals passed on to the command.
const FORWARDED: [Signal; 6] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Why the command could not be run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The preload library is missing.
    #[error("cannot find libtessera.so at {0}; install it next to the controld binary or set TESSERA_PRELOAD to its path")]
    NoPreload(PathBuf),
    /// The daemon refused or cannot be reached.
    #[error("{0}")]
    Daemon(#[from] ClientError),
    /// The command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The program.
        command: String,
        /// The system's reason.
        source: std::io::Error,
    },
    /// Signals could not be set up.
    #[error("cannot forward signals: {0}")]
    Signals(std::io::Error),
}

/// The preload library: `TESSERA_PRELOAD`, else `libtessera.so` beside this binary.
pub fn preload_library() -> Result<PathBuf, ExecError> {
    let path = match std::env::var_os(tessera_region::env::PRELOAD).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("libtessera.so")))
            .unwrap_or_else(|| PathBuf::from("libtessera.so")),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(ExecError::NoPreload(path))
    }
}

/// Runs `command` in a transient container made from `spec`; returns the exit status to
/// exit with (128 + the signal when the command was killed by one).
pub fn exec(socket: &Path, spec: ContainerSpec, command: &[OsString]) -> Result<i32, ExecError> {
    let preload = preload_library()?;
    let mut client = Client::connect(socket)?;
    let name = spec.name.to_string();
    let caps = spec.memory_caps();
    let answer = client.call(&Request::Add {
        container: spec,
        transient: true,
    })?;
    let Answer::Container(info) = answer else {
        return Err(ClientError::Protocol(socket.to_path_buf()).into());
    };
    client.wait_forever();
    let blocked = BlockedSignals::block(&FORWARDED).map_err(ExecError::Signals)?;
    let (mask, original) = (blocked.set(), blocked.before());
    // They stay blocked until this process exits: a signal that comes after the command
    // ended must not end `controld exec` before it reports the command's exit code.
    std::mem::forget(blocked);
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    let mut preloads = preload.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preloads.push(":");
        preloads.push(old);
    }
    cmd.env("LD_PRELOAD", preloads)
        .env(tessera_region::env::REGION, &info.region);
    // The caps again, for the library's fallback should it ever have to create the region
    // itself: a missing region must never mean "unlimited".
    cmd.env(tessera_region::env::MEMORY_LIMIT, "0");
    for (dev, cap) in caps.iter().enumerate() {
        match cap {
            Some(bytes) => cmd.env(
                format!("{}{dev}", tessera_region::env::MEMORY_LIMIT_DEVICE),
                bytes.to_string(),
            ),
            None => cmd.env_remove(format!("{}{dev}", tessera_region::env::MEMORY_LIMIT_DEVICE)),
        };
    }
    // The command starts with the mask this process started with, not the forwarding mask
    // (with the forwarded signals blocked it would never see them).
    // SAFETY: the closure runs in the forked child before exec and only calls
    // pthread_sigmask (nix's is the bare call), which is async-signal-safe and allocates
    // nothing, on a sigset_t copied in by value.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            original.thread_set_mask()?;
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(source) => {
            let _ = client.call(&Request::Rm { name, force: false });
            let code = if source.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!(
                "controld: {}",
                ExecError::Spawn {
                    command: command[0].to_string_lossy().into_owned(),
                    source
                }
            );
            return Ok(code);
        }
    };
    let pid = child.id() as libc::pid_t;
    // True once the command has exited; the forwarder signals only while it is false, and
    // the command is reaped (its pid freed for reuse) only after it is set, under the lock.
    let exited = Arc::new(Mutex::new(false));
    let flag = exited.clone();
    let _ = std::thread::Builder::new()
        .name("forward-signals".into())
        .spawn(move || forward(mask, pid, &flag));
    wait_without_reaping(pid);
    *exited.lock().unwrap_or_else(|p| p.into_inner()) = true;
    let status = child.wait();
    // Removed now if nothing of it still runs; otherwise the daemon removes it once its
    // last process ends (this connection's close tells it to).
    let _ = client.call(&Request::Rm { name, force: false });
    drop(client);
    use std::os::unix::process::ExitStatusExt;
    Ok(match status {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(_) => 1,
    })
}

/// Waits until the command has exited, leaving it a zombie (so its pid stays ours).
fn wait_without_reaping(pid: libc::pid_t) {
    loop {
        // SAFETY: siginfo_t is plain data that waitid fills; `pid` is our child.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; WNOWAIT leaves the child to be reaped by `Child::wait`.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Passes each blocked signal on to the command while it runs.
fn forward(set: SigSet, pid: libc::pid_t, exited: &Mutex<bool>) {
    loop {
        let sig = wait_in(&set);
        let exited = exited.lock().unwrap_or_else(|p| p.into_inner());
        if *exited {
            return;
        }
        // SAFETY: `pid` is our child, not yet reaped (it is reaped only after `exited` is
        // set, which waits for this lock), so it names no other process; the signal number
        // came from sigwait.
        unsafe { libc::kill(pid, sig) };
    }
}
