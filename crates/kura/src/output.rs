//! What a command prints on standard output. `println!` panics when the
//! output cannot be written (a full disk, a reader that went away); here
//! a reader gone ends the output quietly (`kura log stats | head -1`) and
//! any other failure is one line of error.

use std::io::Write;

use anyhow::Context;

/// Writes `text` to standard output.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("writing to standard output"),
    }
}

/// `println!` through [`print`]: a `Result` to pass on with `?`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::print(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;
