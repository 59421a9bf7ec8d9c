//! Where the daemon's and the Kubernetes layer's `tracing` events go: one line each on
//! stderr, `<program>: <level>: <message>`, as much as `TESSERA_LOG` asks for. The level
//! names are the region crate's ([`LogLevel`]), so that they mean the same here as in the
//! preload library; only the default differs (here `info`: a daemon says what it does).

use std::fmt;
use tessera_region::env::{LogLevel, LOG};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Installs the process's subscriber, for `program`'s lines, at the level `TESSERA_LOG`
/// names or at `default` when it is unset. A value that names no level is said once, at
/// `warn`, and `default` is used. Does nothing when a subscriber is already installed (a
/// second daemon in one test process, say).
pub fn init(program: &'static str, default: LogLevel) {
    let value = std::env::var(LOG).ok();
    let parsed = value.as_deref().map(LogLevel::parse);
    let level = parsed.flatten().unwrap_or(default);
    let installed = tracing_subscriber::fmt()
        .with_max_level(filter(level))
        .with_writer(std::io::stderr)
        .event_format(Line { program })
        .try_init()
        .is_ok();
    if let (true, Some(value), Some(None)) = (installed, value, parsed) {
        tracing::warn!(
            "{LOG}={value:?} is not one of {}; using {}",
            LogLevel::NAMES,
            default.name()
        );
    }
}

/// The `tracing` filter of a level.
fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Off => LevelFilter::OFF,
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
    }
}

/// One event as one line: `<program>: <level>: <message and fields>`.
struct Line {
    program: &'static str,
}

impl<S, N> FormatEvent<S, N> for Line
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => LogLevel::Error,
            Level::WARN => LogLevel::Warn,
            Level::INFO => LogLevel::Info,
            _ => LogLevel::Debug,
        };
        write!(writer, "{}: {}: ", self.program, level.name())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_lets_through_itself_and_the_ones_before() {
        assert_eq!(filter(LogLevel::Off), LevelFilter::OFF);
        for (quieter, louder) in LogLevel::ALL.iter().zip(&LogLevel::ALL[1..]) {
            assert!(filter(*quieter) < filter(*louder), "{quieter:?} {louder:?}");
        }
    }
}
