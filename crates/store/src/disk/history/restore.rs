//! Point-in-time restore: a chain of backups becomes a new data directory
//! holding the state at one point of the log.
//!
//! The full backup's copy of LMDB and every segment of the chain are
//! copied in; the engine's own replay then applies the entries after the
//! snapshot up to the point and no further ([`DiskConfig::replay_until`]).
//! Last, the restored directory lets go of the log: values kept in it are
//! put into LMDB and the segments deleted, so the restored server's log
//! starts after the point, with no entries of the timeline it left.
//!
//! [`DiskConfig::replay_until`]: crate::disk::DiskConfig::replay_until

use std::fs::{self, File};
use std::io;
use std::ops::{Bound, ControlFlow};
use std::path::Path;

use heed::types::Bytes;
use heed::{Database, EnvOpenOptions};

use super::backup::{self, io_error, BackupError};
use super::target;
use crate::disk::history::{self, LogPoint, Values};
use crate::disk::io::OsIo;
use crate::disk::journal;
use crate::disk::record::{self, Header};
use crate::disk::{identity, in_log, log_live, DiskConfig, DiskStore, RESTORE_UNFINISHED};
use crate::log_position::LogPosition;

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The full backup's snapshot.
    pub snapshot: LogPosition,
    /// The newest entry the restored directory holds.
    pub restored: LogPosition,
    /// The newest entry the backups held.
    pub available: LogPosition,
}

/// Restores the backup in `from` (a full one, or the last of a chain) into
/// the empty or absent directory `to`, up to `until` (all of it if `None`).
pub fn restore(
    from: &Path,
    until: Option<LogPoint>,
    to: &Path,
) -> Result<RestoreReport, BackupError> {
    let chain = backup::verify(from)?;
    let snapshot = chain.snapshot();
    let earliest = chain.earliest();
    let available = chain.last();
    let refuse = |message: String| Err(BackupError::Refused(message));
    let too_early = match until {
        Some(LogPoint::Lsn(lsn)) => lsn < earliest.lsn,
        Some(LogPoint::Micros(micros)) => micros < earliest.micros,
        None => false,
    };
    if too_early {
        return refuse(format!(
            "the full backup is consistent from {earliest} on; restore from an earlier full backup"
        ));
    }
    if let Some(LogPoint::Lsn(lsn)) = until {
        if lsn > available.lsn {
            return refuse(format!(
                "the backups hold entries up to LSN {}; they lack entries {}",
                available.lsn,
                history::describe_ranges(&[(available.lsn + 1, lsn)])
            ));
        }
    }
    let restored = target::write_into(to, || restore_into(&chain, snapshot, until, to))?;
    Ok(RestoreReport {
        snapshot,
        restored,
        available,
    })
}

fn restore_into(
    chain: &backup::Chain,
    snapshot: LogPosition,
    until: Option<LogPoint>,
    to: &Path,
) -> Result<LogPosition, BackupError> {
    // Until the log is let go, the directory holds entries past the point:
    // a restore stopped before then must not be served as if finished.
    let unfinished = to.join(RESTORE_UNFINISHED);
    File::create(&unfinished)
        .and_then(|file| file.sync_all())
        .and_then(|()| File::open(to)?.sync_all())
        .map_err(io_error(format!("writing {}", unfinished.display())))?;
    // Oldest backup first (the full one, whose manifest alone names the
    // data file): a segment copied again later has only grown.
    for (dir, manifest) in &chain.backups {
        for file in &manifest.files {
            let (from, into) = (dir.join(&file.name), to.join(&file.name));
            // Either side may have failed: the message names both.
            fs::copy(&from, &into).map_err(io_error(format!(
                "copying {} to {}",
                from.display(),
                into.display()
            )))?;
        }
    }
    // The manifest names the entries to replay after the copy: it must
    // say where the copy stands (else the copy, past the point, is served).
    let (full_dir, full) = &chain.backups[0];
    let copied = backup::read_meta(to)?;
    let consistent_from = copied.partial.filter(|partial| *partial > copied.applied);
    if full.snapshot != Some(copied.applied) || full.consistent_from != consistent_from {
        let consistent = |from: Option<LogPosition>| match from {
            Some(from) => format!(", consistent from {from}"),
            None => String::new(),
        };
        let said = match full.snapshot {
            Some(snapshot) => format!("{snapshot}{}", consistent(full.consistent_from)),
            None => "no snapshot".to_string(),
        };
        return Err(BackupError::Refused(format!(
            "{}: its copy of LMDB holds the log up to {}{}, and its manifest says {said}",
            full_dir.display(),
            copied.applied,
            consistent(consistent_from),
        )));
    }
    let target = target_of(to, snapshot, chain.last(), until)
        .map_err(io_error("reading the restored log"))?;
    reaches(target, chain.earliest())?;
    // Up to the LSN asked for, not only to where the replay would stop.
    let through = match until {
        Some(LogPoint::Lsn(lsn)) => lsn.max(target.lsn),
        _ => target.lsn,
    };
    let missing = history::missing(to, snapshot.lsn + 1, through)
        .map_err(io_error("reading the restored log"))?;
    if !missing.is_empty() {
        return Err(BackupError::Refused(format!(
            "the backups lack entries {}",
            history::describe_ranges(&missing)
        )));
    }
    let map_size = map_size_for(chain);
    let store = DiskStore::open(DiskConfig {
        replay_until: Some(target.lsn),
        background_expiry: false,
        map_size,
        ..DiskConfig::new(to)
    })
    .map_err(|error| BackupError::Refused(format!("replaying the log: {error}")))?;
    drop(store);
    forget_log(to, map_size)?;
    fs::remove_file(&unfinished)
        .and_then(|()| File::open(to)?.sync_all())
        .map_err(io_error(format!("removing {}", unfinished.display())))?;
    Ok(target)
}

/// LMDB's map for the restored directory: the default, or twice what the
/// chain holds (its copy of LMDB and the log whose values come in), if
/// more. A server run with a larger `--map-size` leaves a copy that the
/// default map could not grow.
pub fn map_size_for(chain: &backup::Chain) -> usize {
    let held: u64 = chain
        .backups
        .iter()
        .flat_map(|(_, manifest)| &manifest.files)
        .map(|file| file.bytes)
        .sum();
    let wanted = held
        .saturating_mul(2)
        .checked_next_multiple_of(1 << 20)
        .and_then(|bytes| usize::try_from(bytes).ok());
    DiskConfig::new(Path::new(""))
        .map_size
        .max(wanted.unwrap_or(usize::MAX))
}

/// Refuses a target before the entry the full backup's copy of LMDB is
/// consistent from: LMDB holds that much already. A time past the earliest
/// one can still stop there when the clock stepped back within the round
/// the copy caught (group times are the wall clock's).
fn reaches(target: LogPosition, earliest: LogPosition) -> Result<(), BackupError> {
    if target.lsn < earliest.lsn {
        return Err(BackupError::Refused(format!(
            "the log's times go back before {earliest}, which the full backup holds already; \
             restore to an LSN (--lsn) instead"
        )));
    }
    Ok(())
}

/// The newest entry at or before `until` (from the snapshot on, the
/// longest prefix of the log whose groups are all at or before it), and
/// never past the chain's `last`: the manifests name what was verified.
fn target_of(
    dir: &Path,
    snapshot: LogPosition,
    last: LogPosition,
    until: Option<LogPoint>,
) -> io::Result<LogPosition> {
    let mut target = snapshot;
    history::read(dir, Values::Skip, |entry| {
        if entry.lsn <= snapshot.lsn {
            return ControlFlow::Continue(());
        }
        let past = until.is_some_and(|point| !point.covers(entry.lsn, entry.micros));
        if past || entry.lsn > last.lsn {
            return ControlFlow::Break(());
        }
        target = LogPosition {
            lsn: entry.lsn,
            micros: entry.micros,
        };
        ControlFlow::Continue(())
    })?;
    Ok(target)
}

/// Values put into LMDB per transaction when a restore lets go of the log:
/// LMDB keeps a transaction's dirty pages in memory until it commits.
const FORGET_LOG_BATCH_BYTES: usize = 64 << 20;

/// Puts every value LMDB keeps in the log into LMDB itself, a batch per
/// transaction, then deletes the log's segments: the restored directory
/// starts a new history. Killed midway, the restore is run again (the
/// directory says it did not finish).
fn forget_log(dir: &Path, map_size: usize) -> Result<(), BackupError> {
    let mut options = EnvOpenOptions::new();
    options.max_dbs(4).map_size(map_size);
    // SAFETY: the restored directory; the engine that replayed it is closed.
    #[allow(unsafe_code)]
    let env = unsafe { options.open(dir)? };
    let mut txn = env.write_txn()?;
    let items: Database<Bytes, Bytes> = env.create_database(&mut txn, Some("items"))?;
    let meta: Database<Bytes, Bytes> = env.create_database(&mut txn, Some("meta"))?;
    let mut open: Option<(u64, File)> = None;
    let mut after: Option<Vec<u8>> = None;
    loop {
        let batch = pointed_after(&items, &txn, after.as_deref())?;
        let Some((last, _, _)) = batch.last() else {
            break;
        };
        after = Some(last.clone());
        for (key, inline, pointer) in batch {
            let segment = pointer.at.segment;
            if open.as_ref().is_none_or(|(number, _)| *number != segment) {
                let path = journal::segment_path(dir, segment);
                let reading = format!("reading a value from the restored log ({})", path.display());
                let file = File::open(&path).map_err(io_error(reading))?;
                open = Some((segment, file));
            }
            let (_, file) = open.as_ref().expect("opened above");
            let mut logged =
                journal::read_stored(&OsIo, file, &key, &pointer).map_err(|error| {
                    let reading =
                        format!("reading a value from the restored log (segment {segment})");
                    io_error(reading)(error)
                })?;
            inline.write_over(logged.record_mut());
            items.put(&mut txn, &key, logged.record())?;
        }
        txn.commit()?;
        txn = env.write_txn()?;
    }
    for (segment, _) in log_live(&meta, &txn)? {
        meta.delete(&mut txn, &record::log_live_key(segment))?;
    }
    identity::start_history(&meta, &mut txn)?;
    txn.commit()?;
    env.force_sync()?;
    env.prepare_for_closing().wait();
    let segments = journal::segments(dir).map_err(io_error("listing the restored log"))?;
    for (_, path) in segments {
        fs::remove_file(&path).map_err(io_error(format!("removing {}", path.display())))?;
    }
    Ok(())
}

/// The items after `after` whose values are in the log, in key order, up
/// to [`FORGET_LOG_BATCH_BYTES`] of values (one at least).
fn pointed_after(
    items: &Database<Bytes, Bytes>,
    txn: &heed::RoTxn<'_>,
    after: Option<&[u8]>,
) -> heed::Result<Vec<(Vec<u8>, Header, record::LogPointer)>> {
    let start = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut batch = Vec::new();
    let mut bytes = 0;
    for entry in items.range(txn, &(start, Bound::Unbounded))? {
        let (key, stored) = entry?;
        if let Some((inline, pointer)) = Header::decode(stored).and_then(in_log) {
            bytes += pointer.record_len();
            batch.push((key.to_vec(), inline, pointer));
            if bytes >= FORGET_LOG_BATCH_BYTES {
                break;
            }
        }
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_before_what_the_copy_of_lmdb_holds_is_refused() {
        let at = |lsn| LogPosition { lsn, micros: 0 };
        assert!(reaches(at(150), at(150)).is_ok());
        assert!(reaches(at(151), at(150)).is_ok());
        let refused = reaches(at(119), at(150)).unwrap_err().to_string();
        assert!(refused.contains("restore to an LSN"), "{refused}");
    }
}
