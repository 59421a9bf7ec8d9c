//! Messages on stderr, as much as `TESSERA_LOG` asks for.
//!
//! The library lives inside other people's programs, so by default it says nothing but
//! errors — and errors are kept for what the user must fix, like a malformed limit.

use std::sync::atomic::{AtomicU8, Ordering};
pub(crate) use tessera_region::env::LogLevel as Level;

/// Not read from the environment yet.
const UNSET: u8 = u8::MAX;

static LEVEL: AtomicU8 = AtomicU8::new(UNSET);

/// What a line of `at` starts with, after `tessera: `.
fn label(at: Level) -> &'static str {
    match at {
        Level::Off | Level::Error => "",
        Level::Warn => "warning: ",
        Level::Info => "info: ",
        Level::Debug => "debug: ",
    }
}

/// The configured level, read from the environment on first use.
fn level() -> Level {
    // Relaxed: the level is a value on its own; two threads that both read the environment
    // store the same value.
    if let Some(level) = Level::from_u8(LEVEL.load(Ordering::Relaxed)) {
        return level;
    }
    let value = crate::env::var(crate::env::LOG);
    let parsed = value.as_deref().map(Level::parse);
    let level = parsed.flatten().unwrap_or(Level::Error);
    LEVEL.store(level as u8, Ordering::Relaxed);
    if let (Some(value), Some(None)) = (&value, parsed) {
        write(
            Level::Error,
            format_args!(
                "{}={value:?} is not one of {}; using error",
                crate::env::LOG,
                Level::NAMES
            ),
        );
    }
    level
}

/// Whether messages of `at` are written.
pub(crate) fn enabled(at: Level) -> bool {
    at <= level()
}

/// Writes one line, `tessera: <message>`, in one `write` so that lines of concurrent
/// threads and processes do not interleave. Failures to write are ignored: there is nowhere
/// else to report them.
pub(crate) fn write(at: Level, message: std::fmt::Arguments<'_>) {
    let line = format!("tessera: {}{message}\n", label(at));
    let mut rest = line.as_bytes();
    while !rest.is_empty() {
        // SAFETY: `rest` is a live byte slice; fd 2 is only written, never closed, here.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// `tlog!(error, "format", args…)`: one line on stderr when `TESSERA_LOG` asks for the level
/// (`error`, `warn`, `info` or `debug`).
macro_rules! tlog {
    (error, $($arg:tt)+) => { $crate::log::tlog!(@ $crate::log::Level::Error, $($arg)+) };
    (warn, $($arg:tt)+) => { $crate::log::tlog!(@ $crate::log::Level::Warn, $($arg)+) };
    (info, $($arg:tt)+) => { $crate::log::tlog!(@ $crate::log::Level::Info, $($arg)+) };
    (debug, $($arg:tt)+) => { $crate::log::tlog!(@ $crate::log::Level::Debug, $($arg)+) };
    (@ $level:expr, $($arg:tt)+) => {
        if $crate::log::enabled($level) {
            $crate::log::write($level, format_args!($($arg)+));
        }
    };
}
pub(crate) use tlog;
