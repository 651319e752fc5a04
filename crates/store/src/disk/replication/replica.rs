//! Replication's replica side. A replica's update log is its master's: each
//! group the master sends is appended as one group with the master's LSNs,
//! time and origin, through the same pending table, journal and applier as
//! a client's writes. So the replica's position is simply its own last
//! entry, kept as every write is kept (journal, then LMDB's `meta` in the
//! transaction that applies it): a crash loses no applied group and
//! applies none twice, and a promoted replica's log goes on where its
//! master's stopped.
//!
//! A snapshot (the master's log no longer reaches back to the replica's
//! position) replaces everything: the data is cleared under a marker in
//! `meta`, the snapshot's records are applied straight into LMDB, and the
//! last transaction records the snapshot's position, removes the marker and
//! starts a new log after it. A replica stopped before that starts without
//! a position and takes a snapshot again.

use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;

use crate::disk::appender::JournalHeld;
use crate::disk::log_format::{self, GroupHead, Record};
use crate::disk::pending::{Change, Pending};
use crate::disk::record::{self, Counts, Keyed, Space};
use crate::disk::tables::{indexes, rows};
use crate::disk::{flushed::FLUSHED, Inner, PARTIAL_ROUND};
use crate::disk::{identity, BASE_INCOMPLETE};
use crate::log_position::LogPosition;
use crate::replication::{BaseLoad, SnapshotPart};

/// Snapshot bytes applied per LMDB transaction at most.
const BASE_TXN_BYTES: usize = 64 << 20;

/// The records of a frame of the master's, after its checks.
pub(super) fn records(bytes: &[u8]) -> Result<Vec<Record<'_>>, String> {
    log_format::decode_all(bytes).ok_or_else(|| "a damaged record from the master".to_string())
}

/// A group of the master's (or a peer's): its head, then its entries (a
/// log holds no group without one, nor an entry numbered 0).
pub(super) fn group_of(bytes: &[u8]) -> Result<(GroupHead, Vec<Record<'_>>), String> {
    let mut records = records(bytes)?;
    // Its last LSN (first + entries - 1) must be a number too.
    let numbered = |head: &GroupHead| {
        head.first_lsn > 0
            && head
                .first_lsn
                .checked_add(u64::from(head.entries) - 1)
                .is_some()
    };
    match records.first() {
        Some(&Record::Group(head))
            if numbered(&head) && records.len() == head.entries as usize + 1 =>
        {
            records.remove(0);
            Ok((head, records))
        }
        Some(Record::Group(_)) => Err(
            "a group numbered from 0 or past 2^64, or not of the entries its head counts"
                .to_string(),
        ),
        _ => Err("a group without its head".to_string()),
    }
}

impl Inner {
    /// Appends one of the master's groups as this server's next group and
    /// leaves it to the applier; returns its last entry's position.
    pub(super) fn take_group(&self, bytes: &[u8]) -> Result<LogPosition, String> {
        let (head, entries) = group_of(bytes)?;
        let mut leader = self.journal_leader.lock();
        if self.pending.is_dirty() {
            // Local writes (a replica refuses them; a promoted one not).
            self.journal_round(&mut leader, None);
        }
        let due = self.journal.last_lsn() + 1;
        if head.first_lsn != due {
            return Err(format!(
                "out of step: the master sent LSN {} where {due} was due",
                head.first_lsn
            ));
        }
        // Read whole before any of it is pending: a refused group must leave
        // nothing behind to be journalled as this server's own.
        let mut writes = Vec::with_capacity(entries.len());
        let mut flush = None;
        let mut max_cas = 0;
        for record in &entries {
            let write = match *record {
                Record::Put { key, record } => {
                    let (header, _) =
                        record::value_in_place(record).ok_or("a put without its value in place")?;
                    max_cas = max_cas.max(header.cas);
                    (Space::Item, key, Change::Put(Keyed::new(key, record)))
                }
                Record::Remove { key } => (Space::Item, key, Change::Remove(key.into())),
                Record::RowPut { key, record } => {
                    (Space::Row, key, Change::Put(Keyed::new(key, record)))
                }
                Record::RowRemove { key } => (Space::Row, key, Change::Remove(key.into())),
                Record::Flush(boundary) => {
                    flush = Some(boundary);
                    continue;
                }
                Record::Group(_) | Record::Move { .. } => {
                    return Err("a group holding more than entries".to_string())
                }
            };
            if !key_fits(write.0, write.1) {
                return Err("a key no protocol takes (empty or too long)".to_string());
            }
            writes.push(write);
        }
        self.last_cas.fetch_max(max_cas, Ordering::AcqRel);
        for (space, key, change) in writes {
            self.pending.lock_in(space, key).put(change);
        }
        if let Some(boundary) = flush {
            self.take_flush(boundary);
        }
        let appended = self.journal_round(&mut leader, Some(head));
        drop(leader);
        match appended {
            Some(count) if count == entries.len() => {}
            Some(count) => {
                return Err(format!(
                    "the master's group of {} entries made {count} here (a key twice?)",
                    entries.len()
                ))
            }
            None => return Err("cannot append to the update log".to_string()),
        }
        self.wait_for_pending_room();
        Ok(head.last())
    }

    /// Flushes through another server's `boundary`: reads skip what it
    /// covers at once, and the next group journals it (a failed append
    /// leaves it requested for the next).
    pub(super) fn take_flush(&self, boundary: u64) {
        self.request_flush(|| {
            self.last_cas.fetch_max(boundary, Ordering::AcqRel);
            boundary
        });
    }

    /// Clears this server for a snapshot (see the module's notes).
    pub(in crate::disk) fn load_base(&self) -> Result<BaseLoader<'_>, String> {
        let failed = |error: heed::Error| format!("clearing for a snapshot: {error}");
        let mut leader = self.journal_leader.lock();
        let held = JournalHeld::mark();
        // Even with nothing to append: the round journals "through" every
        // number taken so far, which the catch-up (and an index part's)
        // waits for while this thread keeps the journal.
        self.journal_round(&mut leader, None);
        // The segment ends too: with appends held, the applier then has
        // none to switch from while `finish` switches.
        (self.catch_up().and_then(|()| self.end_segment()))
            .map_err(|_| "the engine cannot take writes (disk full or failed)".to_string())?;
        let mut txn = self.env.write_txn().map_err(failed)?;
        let cleared = (|| {
            self.items.clear(&mut txn)?;
            self.expiry.clear(&mut txn)?;
            self.rows.clear(&mut txn)?;
            self.indexes.clear(&mut txn)?;
            let stale: Vec<Vec<u8>> = self
                .meta
                .iter(&txn)?
                .filter_map(Result::ok)
                .map(|(key, _)| key.to_vec())
                .filter(|key| {
                    record::log_live_segment(key).is_some()
                        || indexes::is_index_meta(key)
                        || key == FLUSHED
                        || key == PARTIAL_ROUND
                })
                .collect();
            for key in stale {
                self.meta.delete(&mut txn, &key)?;
            }
            self.meta.put(&mut txn, BASE_INCOMPLETE, &[1])
        })();
        cleared.map_err(failed)?;
        (self.commit_counted(txn, &mut Counts::default(), None)).map_err(failed)?;
        // Durable before retention trusts the counts just cleared: LMDB on
        // disk must no longer point into the segments it may then remove.
        if !self.fsync("fsync failed", || self.config.io.sync_data(&self.env)) {
            return Err("clearing for a snapshot: fsync failed".to_string());
        }
        self.base_incomplete.store(true, Ordering::Release);
        self.index_defs.clear();
        self.flushes.reset();
        self.pending.clear_cache();
        self.accesses.forget_reads();
        Ok(BaseLoader {
            inner: self,
            _leader: leader,
            _held: held,
            max_cas: 0,
        })
    }
}

/// Whether a key from another server is one this engine can hold: an
/// item's 1–250 bytes (memcached's limit, which every protocol checks), a
/// row's table and primary key within LMDB's 511. LMDB refusing it would
/// poison the engine, and again at every replay of the log.
pub(super) fn key_fits(space: Space, key: &[u8]) -> bool {
    match space {
        Space::Item => (1..=MAX_ITEM_KEY).contains(&key.len()),
        Space::Row => rows::split_row_key(key)
            .is_some_and(|(table, primary_key)| rows::row_key(table, primary_key).is_some()),
    }
}

/// The longest item key: memcached's.
const MAX_ITEM_KEY: usize = 250;

/// A snapshot being loaded: it holds the journal's leader lock, so nothing
/// is appended meanwhile.
pub(in crate::disk) struct BaseLoader<'s> {
    inner: &'s Inner,
    _leader: MutexGuard<'s, Vec<u8>>,
    _held: JournalHeld,
    max_cas: u64,
}

impl BaseLoader<'_> {
    fn add_records(&mut self, bytes: &[u8]) -> Result<(), String> {
        let inner = self.inner;
        let failed = |error: heed::Error| format!("loading a snapshot: {error}");
        let records = records(bytes)?;
        let mut txn = inner.env.write_txn().map_err(failed)?;
        let mut counts = inner.applied_counts.lock().clone();
        let mut written = 0;
        for record in records {
            let fits = match record {
                Record::Put { key, .. } => key_fits(Space::Item, key),
                Record::RowPut { key, .. } => key_fits(Space::Row, key),
                _ => true,
            };
            if !fits {
                return Err("a key no protocol takes (empty or too long)".into());
            }
            let result = match record {
                Record::Put { key, record } => {
                    let (header, _) = record::value_in_place(record)
                        .ok_or("a snapshot put without its value in place")?;
                    self.max_cas = self.max_cas.max(header.cas);
                    written += key.len() + record.len();
                    let put = (Space::Item, key, Pending::Put(record));
                    inner.apply(&mut txn, put, 0, &mut counts).map(drop)
                }
                Record::RowPut { key, record } => {
                    written += key.len() + record.len();
                    inner
                        .apply_row(&mut txn, key, Pending::Put(record))
                        .map(drop)
                }
                // The master's newest flush: what it stamped before stays
                // dead here too (its items are not in the snapshot).
                Record::Flush(boundary) => {
                    inner.flushes.raise(boundary);
                    self.max_cas = self.max_cas.max(boundary);
                    inner.meta.put(&mut txn, FLUSHED, &boundary.to_le_bytes())
                }
                _ => return Err("a snapshot holds puts and a flush only".to_string()),
            };
            result.map_err(failed)?;
            if written >= BASE_TXN_BYTES {
                (inner.commit_counted(txn, &mut counts, None)).map_err(failed)?;
                txn = inner.env.write_txn().map_err(failed)?;
                written = 0;
            }
        }
        (inner.commit_counted(txn, &mut counts, None)).map_err(failed)
    }
}

impl BaseLoad for BaseLoader<'_> {
    fn add(&mut self, part: SnapshotPart<'_>) -> Result<(), String> {
        match part {
            SnapshotPart::Records(bytes) => self.add_records(bytes),
            SnapshotPart::Index {
                table,
                column,
                kind,
            } => self
                .inner
                .set_index(
                    table,
                    column,
                    kura_table::IndexCommand::Build { kind, keep: false },
                )
                .map_err(|error| format!("making an index of the snapshot: {error}")),
        }
    }

    fn finish(self: Box<Self>, at: LogPosition) -> Result<(), String> {
        let inner = self.inner;
        let failed = |error: heed::Error| format!("finishing a snapshot: {error}");
        let io_failed = |error: std::io::Error| format!("finishing a snapshot: {error}");
        // What the log held is older than the snapshot: a new log starts
        // after it, in a new segment.
        let next = inner.journal.prepare().map_err(io_failed)?;
        let logged = inner.logged.lock();
        let retired = inner.journal.switch(next);
        drop(logged);
        // A failed fsync poisons, as everywhere (docs/DESIGN.md).
        if !inner.fsync("journal fsync failed", || {
            inner.journal.sync_retired(&retired)
        }) {
            return Err("finishing a snapshot: journal fsync failed".to_string());
        }
        inner.last_cas.fetch_max(self.max_cas, Ordering::AcqRel);
        // The snapshot's pages reach the disk before the marker's removal
        // does: under MDB_NOSYNC, LMDB's writes keep their order only where
        // the file system keeps it, and the log cannot repair a snapshot.
        let sync_data = || {
            (inner.fsync("fsync failed", || inner.config.io.sync_data(&inner.env)))
                .then_some(())
                .ok_or_else(|| "finishing a snapshot: fsync failed".to_string())
        };
        sync_data()?;
        let mut txn = inner.env.write_txn().map_err(failed)?;
        let mut counts = inner.applied_counts.lock().clone();
        inner
            .meta
            .delete(&mut txn, BASE_INCOMPLETE)
            .map_err(failed)?;
        // The log goes on from the master's point, not from its own.
        identity::start_history(&inner.meta, &mut txn).map_err(failed)?;
        (inner.commit_counted(txn, &mut counts, Some((retired.number, at)))).map_err(failed)?;
        sync_data()?;
        inner
            .applied_segment
            .fetch_max(retired.number, Ordering::AcqRel);
        // Segments of the history left behind go before the log numbers on:
        // read on, they would pass for this one's. A backup or a snapshot
        // sent that holds them is waited for (none begins meanwhile: both
        // are refused while the snapshot is incomplete).
        for segment in inner.journal.older_segments() {
            loop {
                match inner.journal.remove(segment.number) {
                    Ok(true) => break,
                    Ok(false) => std::thread::sleep(std::time::Duration::from_millis(10)),
                    Err(error) => {
                        tracing::warn!(%error, segment = segment.number, "cannot remove a journal segment older than a snapshot");
                        break;
                    }
                }
            }
        }
        inner.journal.restart_at(at);
        inner.base_incomplete.store(false, Ordering::Release);
        inner.measure_lmdb_usage();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(records: &[Record<'_>]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for record in records {
            log_format::encode(&mut bytes, *record);
        }
        bytes
    }

    #[test]
    fn a_group_needs_its_head_the_entries_it_counts_and_lsns_from_1_to_2_to_the_64() {
        let counting = |first_lsn, entries| {
            Record::Group(GroupHead {
                first_lsn,
                micros: 5,
                origin: 1,
                entries,
            })
        };
        let head = |first_lsn| counting(first_lsn, 1);
        let remove = Record::Remove { key: b"k" };
        let bytes = framed(&[head(7), remove]);
        let (found, entries) = group_of(&bytes).unwrap();
        assert_eq!(found.last().lsn, 7);
        assert_eq!((found.first_lsn, entries), (7, vec![remove]));
        for refused in [
            framed(&[head(7)]),
            framed(&[head(0), remove]),
            framed(&[remove]),
            // Its last LSN past 2^64 − 1.
            framed(&[counting(u64::MAX, 2), remove, remove]),
            // Fewer entries, or more, than its head counts.
            framed(&[counting(7, 2), remove]),
            framed(&[head(7), remove, remove]),
        ] {
            assert!(group_of(&refused).is_err());
        }
        assert!(group_of(&bytes[..bytes.len() - 1]).is_err());
    }
}
