//! `kura`: one binary, several tools. `kura serve` runs the server.

mod admin;
mod backup;
mod command_client;
mod engine_bench;
mod log;
mod output;
mod query;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kura (蔵, "storehouse"): a memcached-compatible key-value server.
#[derive(Parser)]
#[command(name = "kura", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server (takes memcached's flags).
    Serve(Box<serve::ServeArgs>),
    /// Load-test a memcached or Redis server (takes mcperf's options).
    Bench(Box<kura_tools::bench::BenchArgs>),
    /// Time the disk engine without the network, as Tokyo Cabinet's tchtest does.
    BenchEngine(engine_bench::EngineBenchArgs),
    /// Read the update log of a data directory or a backup (dump, stats).
    Log(log::LogArgs),
    /// Take a hot backup of a running server (full or incremental), or verify one.
    Backup(Box<backup::BackupArgs>),
    /// Make a data directory from a backup, at a point in time or an LSN.
    Restore(backup::RestoreArgs),
    /// Query a table a server serves on its tyrant port (put, get, index, search, check).
    Query(query::QueryArgs),
    /// Check a table's indexes against a full scan (a running server or a data directory).
    Table(query::TableArgs),
    /// A running server's replication: replicas and lag, promote, follow a master.
    Admin(admin::AdminArgs),
}

/// Exit code for bad command lines (BSD's EX_USAGE), as scripts expect.
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::BenchEngine(args) => engine_bench::run(args),
        Command::Log(args) => log::run(args),
        Command::Backup(args) => backup::run_backup(*args),
        Command::Restore(args) => backup::run_restore(args),
        Command::Query(args) => query::run(args),
        Command::Table(args) => query::run_table(args),
        Command::Admin(args) => admin::run(args),
        Command::Bench(args) => kura_tools::bench::run(*args).map_err(|e| match e {
            kura_tools::bench::BenchError::Usage(message) => Failure::Usage(message),
            kura_tools::bench::BenchError::Io(error) => Failure::Runtime(error.into()),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("kura: {message}");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Runtime(error)) => {
            eprintln!("kura: {}", describe(&error));
            ExitCode::FAILURE
        }
    }
}

/// clap's own errors: help and version go to stdout with success; anything
/// else is one line and exit code 64.
fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        let _ = error.print();
        return ExitCode::SUCCESS;
    }
    let rendered = error.to_string();
    if matches!(
        error.kind(),
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        match command_path(&rendered).filter(|path| path != "kura") {
            Some(path) => eprintln!("kura: `{path}` needs a subcommand; `{path} --help` lists them"),
            None => eprintln!(
                "kura: no command given; `kura serve` runs the server, `kura --help` lists the others"
            ),
        }
        return ExitCode::from(EXIT_USAGE);
    }
    eprintln!("kura: {}", first_statement(&rendered));
    ExitCode::from(EXIT_USAGE)
}

/// The command a help text's `Usage:` line is for (`kura log`).
fn command_path(help: &str) -> Option<String> {
    let usage = help
        .lines()
        .find_map(|line| line.trim().strip_prefix("Usage: "))?;
    let words: Vec<&str> = usage
        .split_whitespace()
        .take_while(|word| !word.starts_with(['<', '[', '-']))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// A clap error's first line, with the indented lines that complete it
/// ("the following required arguments were not provided: --to <TO>").
fn first_statement(rendered: &str) -> String {
    let mut lines = rendered.lines().skip_while(|line| line.trim().is_empty());
    let Some(first) = lines.next() else {
        return "invalid command line".to_string();
    };
    let mut statement = first.trim_start_matches("error: ").to_string();
    for line in
        lines.take_while(|line| line.starts_with(char::is_whitespace) && !line.trim().is_empty())
    {
        statement.push(' ');
        statement.push_str(line.trim());
    }
    statement
}

/// An error and its causes, each said once: kura's error types often say
/// their cause in their own message already.
pub fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain().map(ToString::to_string) {
        if text != cause && !text.ends_with(&format!(": {cause}")) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    text
}

/// Why a command failed: the user's command line, or the world.
pub enum Failure {
    Usage(String),
    Runtime(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Failure::Runtime(error)
    }
}

#[cfg(test)]
mod tests {
    use super::describe;
    use kura_store::disk::OpenError;

    #[test]
    fn a_cause_its_error_already_says_is_said_once() {
        let journal = OpenError::Journal(std::io::Error::other("Is a directory"));
        let error = anyhow::Error::new(journal).context("opening the data directory /d");
        assert_eq!(
            describe(&error),
            "opening the data directory /d: cannot open or replay the journal: Is a directory"
        );
        // A cause its error does not say is said.
        let error = anyhow::Error::new(std::io::Error::other("Is a directory")).context("reading");
        assert_eq!(describe(&error), "reading: Is a directory");
    }
}
