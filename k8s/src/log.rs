//! The plugin's log: one line per event on stderr, `tessera-k8s: <level>: <message>`,
//! filtered by `TESSERA_LOG` (error, warn, info (default), debug), like controld's.

use std::sync::OnceLock;

/// How much a line matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed.
    Error,
    /// Something is wrong but handled.
    Warn,
    /// What the plugin did.
    Info,
    /// Detail for debugging.
    Debug,
}

fn threshold() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("TESSERA_LOG").as_deref() {
        Ok("error") => Level::Error,
        Ok("warn") => Level::Warn,
        Ok("debug") => Level::Debug,
        _ => Level::Info,
    })
}

/// Writes one line (newlines in `message` become spaces).
pub fn log(level: Level, message: &str) {
    if level > threshold() {
        return;
    }
    let name = match level {
        Level::Error => "error",
        Level::Warn => "warn",
        Level::Info => "info",
        Level::Debug => "debug",
    };
    eprintln!("tessera-k8s: {name}: {}", message.replace('\n', " "));
}

/// `log(Level::Info, …)`.
pub fn info(message: &str) {
    log(Level::Info, message);
}

/// `log(Level::Warn, …)`.
pub fn warn(message: &str) {
    log(Level::Warn, message);
}

/// `log(Level::Error, …)`.
pub fn error(message: &str) {
    log(Level::Error, message);
}

/// `log(Level::Debug, …)`.
pub fn debug(message: &str) {
    log(Level::Debug, message);
}
