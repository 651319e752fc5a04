//! What a command prints on standard output. `print!` panics when the
//! output cannot be written (a full disk, a reader that went away); here
//! a reader gone ends the output quietly (`kura log stats | head -1`) and
//! any other failure is an error that names standard output.

use std::io::{self, Write};

/// Writes `text` to standard output.
pub fn print(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => Err(io::Error::new(
            error.kind(),
            format!("writing to standard output: {error}"),
        )),
        Ok(()) => Ok(()),
    }
}
