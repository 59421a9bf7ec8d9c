//! What a command prints on stdout.

use super::error::CliError;
use std::io::Write;

/// Prints `text`; a closed pipe (`controld status | head`) is not an error. Returns the exit
/// status of a command that printed and is done.
pub fn print(text: &str) -> Result<i32, CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(CliError::Output(e)),
    }
}

/// Plain data as indented JSON, one document per line's end.
pub fn json<T: serde::Serialize>(value: &T) -> String {
    // Serializing the API's plain data types (strings, numbers, lists, maps with string
    // keys) cannot fail; a failure would be a bug in those types, not in the input.
    serde_json::to_string_pretty(value).expect("plain data serializes") + "\n"
}
