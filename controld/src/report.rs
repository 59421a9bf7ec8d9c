//! An error for one line on stderr: its message and every cause it does not already tell.
//! The library's errors already say what to do, so a command line passes them on this way.

use std::error::Error;

/// The message and every cause it does not already tell, on one line: `cannot write the
/// CDI spec to /etc/cdi/x.json: Permission denied (os error 13)`.
pub fn one_line(error: &dyn Error) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let text = e.to_string();
        // Most library errors name their cause in their own message already.
        if !line.contains(&text) {
            line += ": ";
            line += &text;
        }
        cause = e.source();
    }
    line
}
