//! `println!` for the commands, through [`kura_tools::output::print`]:
//! an output that cannot be written is an error to pass on, not a panic.

/// `println!` as a `Result` (`anyhow`) to pass on with `?`.
macro_rules! outln {
    ($($arg:tt)*) => {
        kura_tools::output::print(&format!("{}\n", format_args!($($arg)*))).map_err(anyhow::Error::from)
    };
}
pub(crate) use outln;
