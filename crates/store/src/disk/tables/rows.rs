//! Table rows. A row is written as an item is: a pending write under its
//! key's shard lock (so `putkeep` and `putcat` decide atomically), appended
//! to the update log and acknowledged, then applied to LMDB by the
//! applier's round. Rows have their own keyspace in the pending table
//! (`Space::Row`), their own journal records (`row put`, `row remove`) and
//! their own LMDB database, `rows`. So LMDB holds exactly the log's entries
//! up to the segment it names, rows included, and backups, restores to a
//! point in time and the log's readers see rows as they see items.
//!
//! A row's key is one length byte, its table's name (1 to 255 bytes) and
//! its primary key: a table's rows lie together, in primary-key order.

use kura_table::{Record, StoredRecord};

use crate::disk::pending::{Change, Pending, Shard};
use crate::disk::record::{Keyed, Space};
use crate::disk::{appender, DiskStore, Inner, WriteFailed};
use crate::{AckFence, RowEdit, RowMode, RowOutcome, Tables};
use kura_table::{IndexCommand, IndexKind, Lookup};

/// LMDB's longest key: a row's key must fit.
const MAX_ROW_KEY: usize = 511;

/// The first key of a table's rows.
pub(super) fn table_prefix(table: &[u8]) -> Option<Vec<u8>> {
    prefixed(table, &[])
}

/// The key of a row: `None` when the table name or the primary key is
/// empty, or they are too long together.
pub fn row_key(table: &[u8], primary_key: &[u8]) -> Option<Vec<u8>> {
    if primary_key.is_empty() || 1 + table.len() + primary_key.len() > MAX_ROW_KEY {
        return None;
    }
    prefixed(table, primary_key)
}

/// The table's name with its length byte, then `rest`.
fn prefixed(table: &[u8], rest: &[u8]) -> Option<Vec<u8>> {
    let len = u8::try_from(table.len()).ok().filter(|len| *len > 0)?;
    Some([&[len][..], table, rest].concat())
}

/// The table and primary key of a row's key.
pub fn split_row_key(key: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = key.split_first()?;
    let len = usize::from(len);
    (rest.len() > len).then(|| rest.split_at(len))
}

impl Inner {
    /// Applies a row's write to LMDB (in the applier's transaction, or the
    /// replay's). A record no row write makes (a damaged log) is skipped.
    /// Returns how many index entries it changed.
    pub(in crate::disk) fn apply_row(
        &self,
        txn: &mut heed::RwTxn<'_>,
        key: &[u8],
        change: Pending<'_>,
    ) -> heed::Result<usize> {
        let sound = |&(_, primary_key): &(&[u8], &[u8])| {
            key.len() <= MAX_ROW_KEY
                && match change {
                    Pending::Put(stored) => StoredRecord::new(primary_key, stored).is_some(),
                    Pending::Remove => true,
                }
        };
        let Some((table, primary_key)) = split_row_key(key).filter(sound) else {
            tracing::error!("skipped a damaged row record in the log");
            return Ok(0);
        };
        let old_stored = self.rows.get(txn, key)?;
        let old = old_stored.and_then(|stored| Record::decode_columns(primary_key, stored));
        if old_stored.is_some() && old.is_none() {
            // Its index keys cannot be read from it: take the row out of
            // every index of its table wherever it is.
            tracing::error!(table = %String::from_utf8_lossy(table), "replaced a damaged row");
            self.unindex_row(txn, table, primary_key)?;
        }
        match change {
            Pending::Put(stored) => {
                let new = Record::decode_columns(primary_key, stored);
                let changed = self.reindex_row(txn, table, old.as_ref(), new.as_ref())?;
                self.rows.put(txn, key, stored)?;
                Ok(changed)
            }
            Pending::Remove => {
                let changed = self.reindex_row(txn, table, old.as_ref(), None)?;
                self.rows.delete(txn, key)?;
                Ok(changed)
            }
        }
    }

    /// The row's stored columns: its pending write, else the read cache's
    /// copy, else LMDB's; `cache`: a row read from LMDB may enter the read
    /// cache (a read's, not a write's, which would drop it at once). The
    /// caller holds the key's shard lock. A pending write not journalled
    /// yet raises `fence`, as in [`with_record`](Inner::with_record).
    fn stored_row(
        &self,
        shard: &mut Shard<'_>,
        key: &[u8],
        cache: bool,
        fence: &AckFence,
    ) -> Result<Option<Vec<u8>>, WriteFailed> {
        match shard.get_for_reply(key, fence) {
            Some(Pending::Put(stored)) => return Ok(Some(stored.to_vec())),
            Some(Pending::Remove) => return Ok(None),
            None => {}
        }
        if let Some(stored) = shard.cached(key) {
            return Ok(Some(stored.to_vec()));
        }
        let txn = self.env.read_txn()?;
        let stored = self.rows.get(&txn, key)?;
        if let Some(stored) = stored.filter(|_| cache) {
            shard.cache(key, stored);
        }
        Ok(stored.map(<[u8]>::to_vec))
    }

    /// Changes a row as `edit` decides from its current state, atomically
    /// (under the key's shard lock).
    pub(in crate::disk) fn modify_row(
        &self,
        table: &[u8],
        primary_key: &[u8],
        edit: &mut dyn FnMut(Option<Record>) -> RowEdit,
        fence: &AckFence,
    ) -> Result<RowOutcome, WriteFailed> {
        let Some(key) = row_key(table, primary_key) else {
            return Ok(RowOutcome::Invalid);
        };
        let mut shard = self.pending.lock_in(Space::Row, &key);
        // A row whose stored columns are damaged is edited as if absent, so
        // that a write repairs it (reads of it fail until then).
        let current = self
            .stored_row(&mut shard, &key, false, fence)?
            .and_then(|stored| Record::decode_columns(primary_key, &stored));
        let change = match edit(current) {
            RowEdit::Leave => return Ok(RowOutcome::Kept),
            RowEdit::Put(row) => {
                let stored = row.encode_columns();
                if stored.len() > self.config.max_value_bytes {
                    return Ok(RowOutcome::TooLarge);
                }
                Change::Put(Keyed::new(&key, &stored))
            }
            RowEdit::Remove => Change::Remove(key.as_slice().into()),
        };
        fence.raise(shard.put(change));
        drop(shard);
        self.wait_for_pending_room();
        Ok(RowOutcome::Done)
    }

    fn remove_row(
        &self,
        table: &[u8],
        primary_key: &[u8],
        fence: &AckFence,
    ) -> Result<RowOutcome, WriteFailed> {
        let Some(key) = row_key(table, primary_key) else {
            return Ok(RowOutcome::Invalid);
        };
        let mut shard = self.pending.lock_in(Space::Row, &key);
        if self.stored_row(&mut shard, &key, false, fence)?.is_none() {
            return Ok(RowOutcome::Missing);
        }
        fence.raise(shard.put(Change::Remove(key.as_slice().into())));
        drop(shard);
        self.wait_for_pending_room();
        Ok(RowOutcome::Done)
    }

    pub(in crate::disk) fn get_row(
        &self,
        table: &[u8],
        primary_key: &[u8],
        fence: &AckFence,
    ) -> Result<Option<Record>, WriteFailed> {
        let Some(key) = row_key(table, primary_key) else {
            return Ok(None);
        };
        let mut shard = self.pending.lock_in(Space::Row, &key);
        let stored = self.stored_row(&mut shard, &key, true, fence)?;
        drop(shard);
        let decoded = stored.map(|stored| Record::decode_columns(primary_key, &stored));
        decoded.map(|record| record.ok_or(WriteFailed)).transpose()
    }

    /// Every row of `table` in primary-key order, once every write made
    /// before is in LMDB.
    fn visit_rows(
        &self,
        table: &[u8],
        visit: &mut dyn FnMut(StoredRecord<'_>) -> bool,
    ) -> Result<(), WriteFailed> {
        let Some(prefix) = table_prefix(table) else {
            return Ok(());
        };
        self.catch_up()?;
        let txn = self.env.read_txn()?;
        for entry in self.rows.prefix_iter(&txn, &prefix)? {
            let (key, stored) = entry?;
            let Some(record) = StoredRecord::new(&key[prefix.len()..], stored) else {
                tracing::error!(table = %String::from_utf8_lossy(table), "a damaged row");
                return Err(WriteFailed);
            };
            if !visit(record) {
                break;
            }
        }
        Ok(())
    }

    /// Brings LMDB up to every write made so far, for a read of a whole
    /// table or an index; fails rather than waits for ever when the
    /// engine cannot apply (disk full, failed, stopping), where LMDB would
    /// not show acknowledged rows.
    pub(in crate::disk) fn catch_up(&self) -> Result<(), WriteFailed> {
        // A thread that keeps the journal waits for what is journalled: a
        // number taken since (a reclaim's, say) needs an append it blocks.
        let seq = match appender::HOLDS_THE_JOURNAL.get() {
            true => self.logged.lock().through,
            false => self.pending.last_seq(),
        };
        while self.applied.decided() < seq {
            self.signals.wake_writer();
            self.signals.wake_applier_to_apply_only();
            if !self.health.applies() || self.signals.stopping() {
                return Err(WriteFailed);
            }
            self.applied.wait(seq, std::time::Duration::from_millis(10));
        }
        Ok(())
    }
}

impl Tables for DiskStore {
    fn put_row(&self, table: &[u8], row: &Record, mode: RowMode, fence: &AckFence) -> RowOutcome {
        self.modify_row(
            table,
            &row.key,
            &mut |current| match (mode, current) {
                (RowMode::Keep, Some(_)) => RowEdit::Leave,
                (RowMode::Cat, Some(mut merged)) => {
                    merged.add_missing(row);
                    RowEdit::Put(merged)
                }
                _ => RowEdit::Put(row.clone()),
            },
            fence,
        )
    }

    fn modify_row(
        &self,
        table: &[u8],
        primary_key: &[u8],
        edit: &mut dyn FnMut(Option<Record>) -> RowEdit,
        fence: &AckFence,
    ) -> RowOutcome {
        if !self.inner.health.takes_write() {
            return RowOutcome::Failed;
        }
        self.inner
            .modify_row(table, primary_key, edit, fence)
            .unwrap_or(RowOutcome::Failed)
    }

    fn remove_row(&self, table: &[u8], primary_key: &[u8], fence: &AckFence) -> RowOutcome {
        if !self.inner.health.takes_delete() {
            return RowOutcome::Failed;
        }
        self.inner
            .remove_row(table, primary_key, fence)
            .unwrap_or(RowOutcome::Failed)
    }

    fn get_row(
        &self,
        table: &[u8],
        primary_key: &[u8],
        fence: &AckFence,
    ) -> Result<Option<Record>, ()> {
        self.inner
            .get_row(table, primary_key, fence)
            .map_err(|_| ())
    }

    fn visit_rows(
        &self,
        table: &[u8],
        visit: &mut dyn FnMut(StoredRecord<'_>) -> bool,
    ) -> Result<(), ()> {
        self.inner.visit_rows(table, visit).map_err(|_| ())
    }

    fn set_index(&self, table: &[u8], column: &[u8], command: IndexCommand) -> Result<(), String> {
        if !self.inner.health.takes_write() {
            return Err("the engine refuses writes".to_string());
        }
        self.inner
            .set_index(table, column, command)
            .map_err(|error| error.to_string())
    }

    fn indexes(&self, table: &[u8]) -> Vec<(Vec<u8>, IndexKind)> {
        self.inner
            .index_defs
            .of(table)
            .into_iter()
            .map(|def| (def.column, def.kind))
            .collect()
    }

    fn lookup_rows(
        &self,
        table: &[u8],
        lookups: &[Lookup],
        lazily: bool,
        visit: &mut dyn FnMut(StoredRecord<'_>) -> bool,
    ) -> Result<Option<u64>, ()> {
        self.inner
            .lookup_rows(table, lookups, lazily, visit)
            .map_err(|_| ())
    }

    fn walk_rows(
        &self,
        table: &[u8],
        index: Option<(&[u8], IndexKind)>,
        start: std::ops::Bound<&[u8]>,
        descending: bool,
        visit: &mut dyn FnMut(&[u8], Record) -> bool,
    ) -> Result<bool, ()> {
        self.inner
            .walk_rows(table, index, start, descending, visit)
            .map_err(|_| ())
    }

    fn check_indexes(&self, table: &[u8]) -> Result<Vec<String>, ()> {
        self.inner.check_indexes(table).map_err(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_keys_hold_the_table_then_the_primary_key() {
        let key = row_key(b"users", b"k1").unwrap();
        assert_eq!(key, b"\x05usersk1");
        assert_eq!(split_row_key(&key), Some((&b"users"[..], &b"k1"[..])));
        assert_eq!(row_key(b"", b"k"), None);
        assert_eq!(row_key(b"t", b""), None);
        assert_eq!(row_key(&[b't'; 256], b"k"), None);
        assert_eq!(row_key(b"t", &[b'k'; 510]), None);
        assert!(row_key(b"t", &[b'k'; 509]).is_some());
        assert_eq!(split_row_key(b"\x05user"), None);
    }
}

#[cfg(test)]
mod damage_tests {
    use super::*;
    use crate::{AckFence, DiskConfig, IndexCommand, IndexKind};

    fn row(key: &str, city: &str) -> Record {
        let mut row = Record::new(key.as_bytes());
        row.put(b"city", city.as_bytes());
        row
    }

    #[test]
    fn a_damaged_row_written_over_leaves_no_stale_index_entry() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
        let fence = AckFence::default();
        for (key, city) in [("a", "Kyoto"), ("b", "Osaka")] {
            let done = store.put_row(b"t", &row(key, city), RowMode::Put, &fence);
            assert_eq!(done, RowOutcome::Done);
        }
        let lexical = IndexCommand::Build {
            kind: IndexKind::Lexical,
            keep: false,
        };
        store.set_index(b"t", b"city", lexical).unwrap();
        store.wait_until_all_applied();
        // The stored columns of "a" go bad where LMDB keeps them.
        let key = row_key(b"t", b"a").unwrap();
        let mut txn = store.inner.env.write_txn().unwrap();
        store.inner.rows.put(&mut txn, &key, b"\xff\xff").unwrap();
        txn.commit().unwrap();
        assert_eq!(
            store.check_indexes(b"t").unwrap().len(),
            2,
            "damaged, and an entry no row has"
        );

        let done = store.put_row(b"t", &row("a", "Nara"), RowMode::Put, &fence);
        assert_eq!(done, RowOutcome::Done);
        store.wait_until_all_applied();
        assert_eq!(store.check_indexes(b"t").unwrap(), Vec::<String>::new());

        let mut txn = store.inner.env.write_txn().unwrap();
        store.inner.rows.put(&mut txn, &key, b"\xff\xff").unwrap();
        txn.commit().unwrap();
        assert_eq!(store.remove_row(b"t", b"a", &fence), RowOutcome::Done);
        store.wait_until_all_applied();
        assert_eq!(store.check_indexes(b"t").unwrap(), Vec::<String>::new());
    }
}
