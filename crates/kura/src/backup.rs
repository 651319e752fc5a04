//! `kura backup` (hot backups of a running server, and their checks) and
//! `kura restore` (a backup, or a chain of them, to a point in time).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use kura_store::disk::format_micros;
use kura_store::disk::history::backup::{self, BackupKind, Manifest};
use kura_store::disk::history::restore;
use kura_store::disk::history::LogPoint;

use crate::command_client::CommandClient;
use crate::log::{not_a_point, parse_rfc3339, parse_unix_seconds};
use crate::output::outln;
use crate::Failure;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BackupArgs {
    #[command(subcommand)]
    command: Option<BackupCommand>,
    #[command(flatten)]
    take: TakeArgs,
}

#[derive(Subcommand, Debug)]
enum BackupCommand {
    /// Check a backup, or the chain an incremental one ends: files and
    /// checksums, one server, no entry missing from the snapshot on.
    Verify {
        /// The backup (the last of a chain).
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
struct TakeArgs {
    /// The running server (its memcached port).
    #[arg(long, default_value = "127.0.0.1:11211")]
    server: String,
    /// Directory to write the backup into, on the server's machine (absent
    /// or empty).
    #[arg(long)]
    to: Option<PathBuf>,
    /// Copy only the update log written since the backup `--since` names.
    #[arg(long, requires = "since")]
    incremental: bool,
    /// The backup an incremental one continues.
    #[arg(long, requires = "incremental")]
    since: Option<PathBuf>,
    /// Seconds to wait for the server to finish the backup (it replies
    /// once every file is written and synced).
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
}

pub fn run_backup(args: BackupArgs) -> Result<(), Failure> {
    if let Some(BackupCommand::Verify { dir }) = args.command {
        return verify(&dir);
    }
    let take = args.take;
    let Some(to) = take.to else {
        return Err(Failure::Usage(
            "backup: --to DIR is required (or `kura backup verify DIR`)".to_string(),
        ));
    };
    let absolute = |path: &Path| {
        std::path::absolute(path)
            .with_context(|| format!("resolving {}", path.display()))
            .map_err(Failure::Runtime)
    };
    let to = absolute(&to)?;
    let since = take.since.as_deref().map(absolute).transpose()?;
    for path in std::iter::once(&to).chain(&since) {
        if path
            .to_str()
            .is_none_or(|text| text.contains(char::is_whitespace))
        {
            return Err(Failure::Usage(format!(
                "backup: {path:?} must be UTF-8 without whitespace (it travels in a memcached command)"
            )));
        }
    }
    let mut command = format!("backup {}", to.display());
    if let Some(since) = &since {
        command.push_str(&format!(" since {}", since.display()));
    }
    let timeout = Duration::from_secs(take.timeout);
    // The server writes the backup whether this client waits or not.
    // The reply carries the manifest, in one line.
    let reply_limit = backup::MAX_MANIFEST_BYTES + 64;
    let mut client = CommandClient::send(&take.server, &command, timeout)?;
    let reply = client.line_within(reply_limit).map_err(|error| {
        anyhow::anyhow!(
            "{}; the server may still be writing the backup: `kura backup verify {}` tells when it is whole",
            crate::describe(&error),
            to.display()
        )
    })?;
    let manifest = match reply.strip_prefix("OK ") {
        Some(json) => serde_json::from_str::<Manifest>(json)
            .context("reading the server's manifest")
            .map_err(Failure::Runtime)?,
        None => {
            return Err(Failure::Runtime(anyhow::anyhow!(
                "the server refused the backup: {reply}"
            )))
        }
    };
    print_manifest(&to, &manifest)?;
    Ok(())
}

fn print_manifest(dir: &Path, manifest: &Manifest) -> anyhow::Result<()> {
    // A server's manifest is not checked here: its sizes may overflow.
    let bytes = (manifest.files.iter())
        .try_fold(0u64, |sum, file| sum.checked_add(file.bytes))
        .context("the manifest's files add up to more bytes than a file system holds")?;
    let kind = match manifest.kind {
        BackupKind::Full => "full",
        BackupKind::Incremental => "incremental",
    };
    let entries = match manifest.first_lsn > manifest.last.lsn {
        true => "no entries".to_string(),
        false => format!("entries {} to {}", manifest.first_lsn, manifest.last.lsn),
    };
    outln!(
        "{kind} backup of server {} in {}: {entries} (last at {}), {} files, {bytes} bytes",
        manifest.server_id,
        dir.display(),
        format_micros(manifest.last.micros),
        manifest.files.len()
    )?;
    if let Some(snapshot) = manifest.snapshot {
        outln!("snapshot at {snapshot}")?;
    }
    if let Some(since) = manifest.continues(dir) {
        outln!("continues {}", since.display())?;
    }
    Ok(())
}

fn verify(dir: &Path) -> Result<(), Failure> {
    let chain = backup::verify(dir).map_err(|e| Failure::Runtime(e.into()))?;
    for (dir, manifest) in &chain.backups {
        outln!("ok\t{}", dir.display())?;
        print_manifest(dir, manifest)?;
    }
    // A full backup copied while a round was applied in parts restores
    // from that round's end, not from its snapshot.
    let (earliest, last) = (chain.earliest(), chain.last());
    outln!("restorable from {earliest} to {last}")?;
    Ok(())
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// A full backup, or the last incremental backup of a chain.
    #[arg(long)]
    from: PathBuf,
    /// Restore the state at this instant: RFC 3339 (fractions allowed) or
    /// Unix seconds (with or without a leading `@`).
    #[arg(long, conflicts_with = "lsn")]
    until: Option<String>,
    /// Restore the state after this log entry.
    #[arg(long)]
    lsn: Option<u64>,
    /// The data directory to create (absent or empty).
    #[arg(long)]
    to: PathBuf,
}

pub fn run_restore(args: RestoreArgs) -> Result<(), Failure> {
    let until = match (&args.until, args.lsn) {
        (Some(text), _) => Some(LogPoint::Micros(
            parse_unix_seconds(text.strip_prefix('@').unwrap_or(text))
                .or_else(|| parse_rfc3339(text))
                .ok_or_else(|| not_a_point("--until", text, "an RFC 3339 time nor Unix seconds"))?,
        )),
        (None, Some(lsn)) => Some(LogPoint::Lsn(lsn)),
        (None, None) => None,
    };
    let report = restore::restore(&args.from, until, &args.to)
        .map_err(|e| Failure::Runtime(anyhow::anyhow!("restore: {e}")))?;
    outln!(
        "restored {} to {}; the backups hold LSN {} to {} ({})",
        args.to.display(),
        report.restored,
        report.snapshot.lsn,
        report.available.lsn,
        format_micros(report.available.micros)
    )?;
    outln!("serve it with: kura serve --dir {}", args.to.display())?;
    Ok(())
}
