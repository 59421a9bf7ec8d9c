//! How the running-process queries answer, so that tests reproduce what real drivers do
//! (`SIMGPU_NVML_PROCESSES`, a comma-separated list, read at each query):
//!
//! - `late:<ms>`: a process is listed only once it has run for that long; a real driver may
//!   list a process some time after its context exists;
//! - `no-memory`: every process's memory is `NVML_VALUE_NOT_AVAILABLE`, as NVML reports it for
//!   processes it cannot attribute (another container's, on some systems every one);
//! - `entry:32`: the `_v3` query writes 32-byte entries (`nvmlProcessInfo_t` with
//!   `usedGpuCcProtectedMemory`, as the 535 drivers wrote it) instead of 24-byte ones.

use std::sync::Once;
use std::time::Duration;

/// The variable.
pub const ENV: &str = "SIMGPU_NVML_PROCESSES";

pub use tessera_cuda_abi::nvml::VALUE_NOT_AVAILABLE;

/// What [`ENV`] asks for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Behaviour {
    /// Processes younger than this are not listed.
    pub late: Option<Duration>,
    /// Memory is reported as not available.
    pub no_memory: bool,
    /// `_v3` writes 32-byte entries.
    pub entry_32: bool,
}

impl Behaviour {
    /// Parses a value of [`ENV`]; `Err` names a word it does not know.
    pub fn parse(text: &str) -> Result<Behaviour, String> {
        let mut b = Behaviour::default();
        for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word.split_once(':') {
                Some(("late", ms)) => {
                    let ms: u64 = ms.parse().map_err(|_| word.to_string())?;
                    b.late = Some(Duration::from_millis(ms));
                }
                Some(("entry", "32")) => b.entry_32 = true,
                None if word == "no-memory" => b.no_memory = true,
                _ => return Err(word.to_string()),
            }
        }
        Ok(b)
    }

    /// What [`ENV`] asks for now; a word it does not know is said once on stderr and ignored.
    pub fn from_env() -> Behaviour {
        let Some(text) = std::env::var_os(ENV) else {
            return Behaviour::default();
        };
        match Behaviour::parse(&text.to_string_lossy()) {
            Ok(b) => b,
            Err(word) => {
                static SAID: Once = Once::new();
                SAID.call_once(|| {
                    eprintln!("simgpu: {ENV}: `{word}` is not late:<ms>, no-memory or entry:32")
                });
                Behaviour::default()
            }
        }
    }

    /// Whether process `pid` is listed: with `late`, once it has run that long (a process
    /// whose age cannot be read, in another pid namespace, is listed).
    pub fn lists(&self, pid: u32) -> bool {
        match self.late {
            Some(late) => age(pid).is_none_or(|a| a >= late),
            None => true,
        }
    }

    /// The memory reported for a process holding `bytes`.
    pub fn memory(&self, bytes: u64) -> u64 {
        if self.no_memory {
            VALUE_NOT_AVAILABLE
        } else {
            bytes
        }
    }
}

/// How long process `pid` has run: the system's uptime less its start time
/// (`/proc/<pid>/stat`, field 22, in clock ticks).
fn age(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: fields are counted after it.
    let after = &stat[stat.rfind(')')? + 1..];
    let start_ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let started = start_ticks as f64 / hz as f64;
    Some(Duration::from_secs_f64((uptime - started).max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_parses() {
        assert_eq!(Behaviour::parse(""), Ok(Behaviour::default()));
        assert_eq!(
            Behaviour::parse("late:250, no-memory,entry:32"),
            Ok(Behaviour {
                late: Some(Duration::from_millis(250)),
                no_memory: true,
                entry_32: true
            })
        );
        assert_eq!(Behaviour::parse("late:x"), Err("late:x".into()));
        assert_eq!(Behaviour::parse("entry:40"), Err("entry:40".into()));
        assert_eq!(Behaviour::parse("soon"), Err("soon".into()));
    }

    #[test]
    fn a_young_process_is_not_listed_late() {
        let me = std::process::id();
        let age = age(me).expect("this process's age");
        assert!(age < Duration::from_secs(24 * 3600), "{age:?}");
        let late = Behaviour {
            late: Some(age + Duration::from_secs(3600)),
            ..Behaviour::default()
        };
        assert!(!late.lists(me));
        assert!(Behaviour::default().lists(me));
        let soon = Behaviour {
            late: Some(Duration::ZERO),
            ..Behaviour::default()
        };
        assert!(soon.lists(me));
    }
}
