//! The environment contract: every `TESSERA_*` variable that Tessera's parts read or set,
//! named once. `include/tessera.h` spells the public ones as `TESSERA_ENV_*`, and a test
//! checks it against [`HEADER`].

/// The container's region file, shared by all of its processes (set by `controld`).
pub const REGION: &str = "TESSERA_REGION";

/// `env` lets a process whose region file cannot be used (unreadable, foreign, of another
/// layout version, spoiled) run under the memory caps of its environment; unset, such a
/// process gets a cap of 0 bytes on every device, so that a cap that was meant never turns
/// into none. [`REGION_FALLBACK_ENV`] is the one value it accepts.
pub const REGION_FALLBACK: &str = "TESSERA_REGION_FALLBACK";

/// The value of [`REGION_FALLBACK`] that turns the fallback on.
pub const REGION_FALLBACK_ENV: &str = "env";

/// The memory cap of every device, like `4GiB`, when no region says otherwise; followed by
/// `_<index>` (`TESSERA_MEMORY_LIMIT_0`, see [`MEMORY_LIMIT_DEVICE`]), one device's cap,
/// which overrides it.
pub const MEMORY_LIMIT: &str = "TESSERA_MEMORY_LIMIT";

/// The prefix of one device's memory cap: `TESSERA_MEMORY_LIMIT_<index>`.
pub const MEMORY_LIMIT_DEVICE: &str = "TESSERA_MEMORY_LIMIT_";

/// A standalone compute share, like `fixed:30`: enforced by the container's processes
/// among themselves on every device `controld` does not manage.
pub const COMPUTE: &str = "TESSERA_COMPUTE";

/// A standalone time slice for the channel groups of the container's processes, like
/// `100us` (see [`crate::units::parse_timeslice_us`]), enforced by each process on its own
/// channel groups when `controld` does not manage its region.
pub const TIMESLICE: &str = "TESSERA_TIMESLICE";

/// The real driver to load instead of `libcuda.so.1`: a file name or a path.
pub const REAL_LIBCUDA: &str = "TESSERA_REAL_LIBCUDA";

/// `controld`'s state directory (regions, board, control socket).
pub const STATE_DIR: &str = "TESSERA_STATE_DIR";

/// How much each part says on stderr: one of [`LogLevel::NAMES`].
pub const LOG: &str = "TESSERA_LOG";

/// `1` turns on the preload library's per-hook call counters (`tessera_debug_counter`).
pub const DEBUG_COUNTERS: &str = "TESSERA_DEBUG_COUNTERS";

/// The preload library `controld exec` puts in `LD_PRELOAD`, when not the one beside it.
pub const PRELOAD: &str = "TESSERA_PRELOAD";

/// The variables `include/tessera.h` declares, in its order.
pub const HEADER: [&str; 8] = [
    REGION,
    MEMORY_LIMIT,
    COMPUTE,
    REAL_LIBCUDA,
    STATE_DIR,
    LOG,
    REGION_FALLBACK,
    TIMESLICE,
];

/// How much to say, as [`LOG`] names it; each level includes the ones before it. The same
/// names mean the same in the daemon, the Kubernetes layer and the preload library; each
/// part picks its own default (the library, living in other people's programs, says only
/// errors; the daemon says what it does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum LogLevel {
    /// Nothing at all.
    Off = 0,
    /// What failed, or what the user must fix.
    Error = 1,
    /// What is wrong but handled.
    Warn = 2,
    /// What the part did.
    Info = 3,
    /// Detail for debugging.
    Debug = 4,
}

impl LogLevel {
    /// Every level, quietest first.
    pub const ALL: [LogLevel; 5] = [
        LogLevel::Off,
        LogLevel::Error,
        LogLevel::Warn,
        LogLevel::Info,
        LogLevel::Debug,
    ];

    /// The names [`LogLevel::parse`] accepts, as an error message lists them.
    pub const NAMES: &'static str = "off, error, warn, info, debug";

    /// Reads a level, in any case and with spaces around it; `none` and `0` also mean off,
    /// `warning` warn and `trace` debug. Allocates nothing (the preload library reads it in
    /// its constructor).
    pub fn parse(value: &str) -> Option<LogLevel> {
        let value = value.trim();
        let is = |name: &str| value.eq_ignore_ascii_case(name);
        Some(if is("off") || is("none") || value == "0" {
            LogLevel::Off
        } else if is("error") {
            LogLevel::Error
        } else if is("warn") || is("warning") {
            LogLevel::Warn
        } else if is("info") {
            LogLevel::Info
        } else if is("debug") || is("trace") {
            LogLevel::Debug
        } else {
            return None;
        })
    }

    /// The level's name, as [`LogLevel::parse`] reads it.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Off => "off",
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        }
    }

    /// The level stored as `u8` by `level as u8`; `None` for any other number.
    pub fn from_u8(value: u8) -> Option<LogLevel> {
        LogLevel::ALL.get(usize::from(value)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_their_names_and_order() {
        for level in LogLevel::ALL {
            assert_eq!(LogLevel::parse(level.name()), Some(level));
            assert_eq!(LogLevel::from_u8(level as u8), Some(level));
            assert!(LogLevel::NAMES.contains(level.name()));
        }
        assert_eq!(LogLevel::parse(" WARN "), Some(LogLevel::Warn));
        assert_eq!(LogLevel::parse("warning"), Some(LogLevel::Warn));
        assert_eq!(LogLevel::parse("none"), Some(LogLevel::Off));
        assert_eq!(LogLevel::parse("0"), Some(LogLevel::Off));
        assert_eq!(LogLevel::parse("trace"), Some(LogLevel::Debug));
        assert_eq!(LogLevel::parse("loud"), None);
        assert_eq!(LogLevel::parse(""), None);
        assert_eq!(LogLevel::from_u8(5), None);
        assert!(LogLevel::Off < LogLevel::Error && LogLevel::Info < LogLevel::Debug);
    }

    #[test]
    fn every_name_is_a_tessera_variable() {
        for name in HEADER
            .iter()
            .chain(&[MEMORY_LIMIT_DEVICE, DEBUG_COUNTERS, PRELOAD])
        {
            assert!(name.starts_with("TESSERA_"), "{name}");
        }
        assert_eq!(MEMORY_LIMIT_DEVICE, format!("{MEMORY_LIMIT}_"));
    }
}
