//! Secondary indexes of tables: which exist (`IndexDefs`, kept in `meta`
//! and in memory) and their entries (the `indexes` database: the index's
//! id and a key of `kura_table::index`, each with the primary keys of the
//! rows that have it). The applier updates a row's entries in the same
//! transaction as the row (`apply_row`), so an index never disagrees with
//! its table.
//!
//! `setindex` builds an index in many transactions, a batch of rows each,
//! so the applier's rounds go on between them and no transaction dirties
//! the whole index (LMDB keeps the buffers of a transaction's dirty pages
//! for the life of the process). Until its last batch the index is
//! *building*: the applier keeps its entries current, as for any index,
//! but no query, check or replica sees it. A building index found when the
//! engine opens was cut short, and is dropped.
//!
//! Indexes are derived from the rows, not entries of the update log: a
//! restore brings those of its snapshot, and a replay keeps them current.

use std::collections::HashMap;
use std::ops::Bound;

use heed::types::Bytes;
use heed::{Database, PutFlags, RoTxn, RwTxn};
use itertools::{Either, EitherOrBoth, Itertools};
use kura_table::index::{index_keys, IndexCommand, IndexKind};
use kura_table::Record;
use parking_lot::{Mutex, RwLock};

use super::rows::{row_key, split_row_key, table_prefix};
use crate::disk::{Inner, WriteFailed};

/// `meta` keys of index definitions: this, then the table's name with its
/// length byte, then the column.
const DEF_PREFIX: &[u8] = b"idx:";
/// `meta` key: the last index id handed out (u32 LE).
const LAST_ID: &[u8] = b"idx_last";
/// Entries a transaction of `setindex` puts or deletes (about: a batch
/// ends with a row, or an index key, whole).
const BATCH_ENTRIES: usize = 1 << 18;

/// Where an index is in its life. `setindex` builds and drops an index a
/// transaction per batch, so a definition says which it is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexState {
    /// Every row has its entries: queries use it.
    Ready,
    /// Rows are still being given their entries; the applier keeps the
    /// entries of rows it writes, queries do not use it.
    Building,
    /// Its entries are being deleted; nothing keeps or uses them.
    Dropping,
}

impl IndexState {
    /// The byte after the kind in `meta` (a ready index has none).
    fn code(self) -> Option<u8> {
        match self {
            IndexState::Ready => None,
            IndexState::Building => Some(1),
            IndexState::Dropping => Some(2),
        }
    }

    fn from_code(code: Option<&u8>) -> Option<IndexState> {
        match code {
            None => Some(IndexState::Ready),
            Some(1) => Some(IndexState::Building),
            Some(2) => Some(IndexState::Dropping),
            Some(_) => None,
        }
    }
}

/// One index of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexDef {
    pub id: u32,
    pub column: Vec<u8>,
    pub kind: IndexKind,
    pub state: IndexState,
}

impl IndexDef {
    fn is_ready(&self) -> bool {
        self.state == IndexState::Ready
    }

    fn encode(&self) -> Vec<u8> {
        let mut value = self.id.to_le_bytes().to_vec();
        value.push(self.kind as u8);
        value.extend(self.state.code());
        value
    }
}

/// Every table's indexes, by table name.
#[derive(Default)]
pub struct IndexDefs {
    defs: RwLock<HashMap<Vec<u8>, Vec<IndexDef>>>,
    /// Held by `setindex` from start to end: a build spans many
    /// transactions, and two changes to one column must not interleave.
    changing: Mutex<()>,
}

impl IndexDefs {
    /// The definitions `meta` holds.
    pub fn load(meta: &Database<Bytes, Bytes>, txn: &RoTxn<'_>) -> heed::Result<IndexDefs> {
        let mut defs: HashMap<Vec<u8>, Vec<IndexDef>> = HashMap::new();
        for entry in meta.prefix_iter(txn, DEF_PREFIX)? {
            let (key, value) = entry?;
            let (Some((table, column)), Some(def)) =
                (split_row_key(&key[DEF_PREFIX.len()..]), decode_def(value))
            else {
                tracing::error!("skipped a damaged index definition");
                continue;
            };
            defs.entry(table.to_vec()).or_default().push(IndexDef {
                column: column.to_vec(),
                ..def
            });
        }
        // In the order `setindex` made them (HandlerSocket numbers them so).
        for list in defs.values_mut() {
            list.sort_by_key(|def| def.id);
        }
        Ok(IndexDefs {
            defs: RwLock::new(defs),
            changing: Mutex::new(()),
        })
    }

    /// The indexes of `table` that queries may use: the ready ones.
    pub fn of(&self, table: &[u8]) -> Vec<IndexDef> {
        let mut defs = self.maintained(table);
        defs.retain(IndexDef::is_ready);
        defs
    }

    /// Every index of `table` whose entries follow its rows, building
    /// ones included.
    fn maintained(&self, table: &[u8]) -> Vec<IndexDef> {
        self.defs.read().get(table).cloned().unwrap_or_default()
    }

    /// Every table's ready indexes, in the order they were made.
    pub(in crate::disk) fn all(&self) -> Vec<(Vec<u8>, IndexDef)> {
        self.defs
            .read()
            .iter()
            .flat_map(|(table, defs)| defs.iter().map(|def| (table.clone(), def.clone())))
            .filter(|(_, def)| def.is_ready())
            .sorted_by_key(|(_, def)| def.id)
            .collect()
    }

    /// Forgets every definition (a replica about to load a snapshot).
    pub(in crate::disk) fn clear(&self) {
        self.defs.write().clear();
    }
}

/// Whether a `meta` key is an index's definition or the last id.
pub(in crate::disk) fn is_index_meta(key: &[u8]) -> bool {
    key.starts_with(DEF_PREFIX) || key == LAST_ID
}

fn decode_def(value: &[u8]) -> Option<IndexDef> {
    let (id, rest) = value.split_first_chunk::<4>()?;
    let (kind, rest) = rest.split_first()?;
    Some(IndexDef {
        id: u32::from_le_bytes(*id),
        column: Vec::new(),
        kind: IndexKind::from_code(*kind)?,
        state: IndexState::from_code(rest.first())?,
    })
}

/// Finishes what a `setindex` was doing when the engine stopped: a build
/// cut short is dropped (run setindex again), a drop completed; both with
/// their entries, in `txn`. Run as the engine opens.
pub(in crate::disk) fn drop_unfinished(
    meta: &Database<Bytes, Bytes>,
    indexes: &Database<Bytes, Bytes>,
    txn: &mut RwTxn<'_>,
) -> heed::Result<()> {
    let mut unfinished = Vec::new();
    for entry in meta.prefix_iter(txn, DEF_PREFIX)? {
        let (key, value) = entry?;
        if let Some(def) = decode_def(value).filter(|def| !def.is_ready()) {
            unfinished.push((key.to_vec(), def));
        }
    }
    for (key, def) in unfinished {
        if def.state == IndexState::Building {
            tracing::warn!("dropped an index whose build was cut short; run setindex again");
        }
        drop_entries(indexes, txn, def.id, None)?;
        meta.delete(txn, &key)?;
    }
    Ok(())
}

/// Deletes the entries of index `id`: all, or (`most`) about as many as
/// that, those of the index key the last of them has included; returns
/// whether any may be left.
fn drop_entries(
    indexes: &Database<Bytes, Bytes>,
    txn: &mut RwTxn<'_>,
    id: u32,
    most: Option<usize>,
) -> heed::Result<bool> {
    let every = span(&id.to_be_bytes(), Bound::Unbounded, false);
    let every = borrowed(&every);
    let last = match most {
        Some(most) => indexes
            .range(txn, &every)?
            .nth(most.saturating_sub(1))
            .transpose()?
            .map(|(key, _)| key.to_vec()),
        None => None,
    };
    let end = last.as_deref().map_or(every.1, Bound::Included);
    indexes.delete_range(txn, &(every.0, end))?;
    Ok(last.is_some())
}

fn def_key(table: &[u8], column: &[u8]) -> Option<Vec<u8>> {
    Some([DEF_PREFIX, &row_key(table, column)?[..]].concat())
}

pub(super) fn entry_key(id: u32, key: &[u8]) -> Vec<u8> {
    [&id.to_be_bytes()[..], key].concat()
}

/// Opens (or creates) the `indexes` database: an index key's primary keys
/// are its duplicates, which LMDB keeps sorted.
pub(in crate::disk) fn create_database(
    env: &heed::Env,
    txn: &mut RwTxn<'_>,
) -> heed::Result<Database<Bytes, Bytes>> {
    env.database_options()
        .types::<Bytes, Bytes>()
        .name("indexes")
        .flags(heed::DatabaseFlags::DUP_SORT)
        .create(txn)
}

/// Puts an index entry whose primary key is likely past its key's others:
/// appended without a search among them, or put as usual when it is not
/// (LMDB refuses such an append).
fn put_after(
    indexes: &Database<Bytes, Bytes>,
    txn: &mut RwTxn<'_>,
    key: &[u8],
    primary_key: &[u8],
) -> heed::Result<()> {
    match indexes.put_with_flags(txn, PutFlags::APPEND_DUP, key, primary_key) {
        Err(heed::Error::Mdb(heed::MdbError::KeyExist)) => indexes.put(txn, key, primary_key),
        done => done,
    }
}

/// Walks two sorted lists of keys, each key once, beside each other:
/// `on(key, true)` for a key only `before` has, `on(key, false)` for one
/// only `after` has.
fn differences<E>(
    before: &[Vec<u8>],
    after: &[Vec<u8>],
    mut on: impl FnMut(&[u8], bool) -> Result<(), E>,
) -> Result<(), E> {
    before
        .iter()
        .merge_join_by(after, |gone, added| gone.cmp(added))
        .try_for_each(|pair| match pair {
            EitherOrBoth::Left(gone) => on(gone, true),
            EitherOrBoth::Right(added) => on(added, false),
            EitherOrBoth::Both(..) => Ok(()),
        })
}

/// The keys a row has in an index, sorted, each once (none without the
/// row or without the column).
fn keys_of(def: &IndexDef, row: Option<&Record>) -> Vec<Vec<u8>> {
    row.and_then(|row| row.columns.iter().find(|(name, _)| *name == def.column))
        .map(|(_, value)| index_keys(def.kind, value))
        .unwrap_or_default()
}

/// Why `setindex` failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("there is an index on that column already")]
    Exists,
    #[error("there is no index on that column")]
    Missing,
    #[error("an empty or too long table or column name")]
    Invalid,
    #[error("the engine cannot take writes now (disk full or failed)")]
    Unavailable,
    #[error(transparent)]
    Lmdb(#[from] heed::Error),
}

/// The definition of the index of `column` of `kind` as the snapshot
/// `txn` sees it (a `setindex` since may have rebuilt or dropped it).
pub(super) fn def_in(
    meta: &Database<Bytes, Bytes>,
    txn: &RoTxn<'_>,
    table: &[u8],
    column: &[u8],
    kind: IndexKind,
) -> heed::Result<Option<IndexDef>> {
    let Some(key) = def_key(table, column) else {
        return Ok(None);
    };
    let def = meta.get(txn, &key)?.and_then(decode_def);
    Ok(def
        .filter(|def| def.kind == kind && def.is_ready())
        .map(|def| IndexDef {
            column: column.to_vec(),
            ..def
        }))
}

impl Inner {
    /// Moves a row's index entries from its old columns to its new ones
    /// (`new`: `None` when it is removed), in the row's transaction;
    /// returns how many entries it put or deleted.
    pub(super) fn reindex_row(
        &self,
        txn: &mut RwTxn<'_>,
        table: &[u8],
        old: Option<&Record>,
        new: Option<&Record>,
    ) -> heed::Result<usize> {
        let Some(primary_key) = new.or(old).map(|row| &row.key[..]) else {
            return Ok(0);
        };
        let mut changed = 0;
        for def in self.index_defs.maintained(table) {
            differences(&keys_of(&def, old), &keys_of(&def, new), |key, gone| {
                changed += 1;
                if gone {
                    self.indexes
                        .delete_one_duplicate(txn, &entry_key(def.id, key), primary_key)
                        .map(drop)
                } else {
                    self.indexes.put(txn, &entry_key(def.id, key), primary_key)
                }
            })?;
        }
        Ok(changed)
    }

    /// Takes `primary_key` out of every index of `table`, under whatever
    /// keys: for a row whose stored columns are damaged, so its keys cannot
    /// be known. Walks every entry of the table's indexes; damage is rare.
    pub(super) fn unindex_row(
        &self,
        txn: &mut RwTxn<'_>,
        table: &[u8],
        primary_key: &[u8],
    ) -> heed::Result<()> {
        for def in self.index_defs.maintained(table) {
            let stale: Vec<Vec<u8>> = self
                .indexes
                .prefix_iter(txn, &def.id.to_be_bytes())?
                .filter_ok(|(_, row)| *row == primary_key)
                .map_ok(|(key, _)| key.to_vec())
                .collect::<heed::Result<_>>()?;
            for key in stale {
                self.indexes.delete_one_duplicate(txn, &key, primary_key)?;
            }
        }
        Ok(())
    }

    /// `setindex`: builds, rebuilds, optimizes or drops the index of a
    /// table's column, once every write made before is applied. A build
    /// returns when the index is ready.
    pub(in crate::disk) fn set_index(
        &self,
        table: &[u8],
        column: &[u8],
        command: IndexCommand,
    ) -> Result<(), IndexError> {
        let key = def_key(table, column).ok_or(IndexError::Invalid)?;
        let _changing = self.index_defs.changing.lock();
        self.catch_up().map_err(|_| IndexError::Unavailable)?;
        if let Some(mut def) = self.replace_def(table, column, &key, command)? {
            let built = self.build_entries(table, &def, &key).and_then(|()| {
                def.state = IndexState::Ready;
                self.put_def(table, &key, Some(&def))
            });
            if let Err(error) = built {
                // The index goes with what entries it has, or the next open
                // drops it.
                let _ = self.drop_index(table, &key, def);
                return Err(error.into());
            }
        }
        // Durable before the reply: definitions are not in the update log,
        // and these commits are not synced (the applier syncs its rounds).
        if !self.fsync("fsync failed", || self.config.io.sync_data(&self.env)) {
            return Err(IndexError::Unavailable);
        }
        Ok(())
    }

    /// The first step of `setindex`: drops the column's index if there is
    /// one, and defines the new one, building; returns that one.
    fn replace_def(
        &self,
        table: &[u8],
        column: &[u8],
        key: &[u8],
        command: IndexCommand,
    ) -> Result<Option<IndexDef>, IndexError> {
        let existing = self
            .index_defs
            .maintained(table)
            .into_iter()
            .find(|def| def.column == column);
        let kind = match (command, &existing) {
            (IndexCommand::Build { keep: true, .. }, Some(_)) => return Err(IndexError::Exists),
            (IndexCommand::Optimize, Some(_)) => return Ok(None),
            (IndexCommand::Optimize | IndexCommand::Void, None) => return Err(IndexError::Missing),
            (IndexCommand::Build { kind, .. }, _) => Some(kind),
            (IndexCommand::Void, Some(_)) => None,
        };
        if let Some(old) = existing {
            self.drop_index(table, key, old)?;
        }
        let Some(kind) = kind else {
            return Ok(None);
        };
        let mut txn = self.env.write_txn()?;
        let id = self
            .meta
            .get(&txn, LAST_ID)?
            .and_then(|bytes| bytes.try_into().ok())
            .map_or(0, u32::from_le_bytes)
            + 1;
        self.meta.put(&mut txn, LAST_ID, &id.to_le_bytes())?;
        let def = IndexDef {
            id,
            column: column.to_vec(),
            kind,
            state: IndexState::Building,
        };
        self.commit_def(txn, table, key, Some(&def))?;
        Ok(Some(def))
    }

    /// Marks `def` dropping (no longer kept by the applier nor used), then
    /// deletes its entries a transaction per batch, then its definition.
    fn drop_index(&self, table: &[u8], key: &[u8], mut def: IndexDef) -> heed::Result<()> {
        def.state = IndexState::Dropping;
        self.put_def(table, key, Some(&def))?;
        loop {
            let mut txn = self.env.write_txn()?;
            let more = drop_entries(&self.indexes, &mut txn, def.id, Some(BATCH_ENTRIES))?;
            self.config.io.commit(txn)?;
            if !more {
                return self.put_def(table, key, None);
            }
        }
    }

    /// Writes `def` as the definition of its column (`None`: none), in a
    /// transaction of its own.
    fn put_def(&self, table: &[u8], key: &[u8], def: Option<&IndexDef>) -> heed::Result<()> {
        self.commit_def(self.env.write_txn()?, table, key, def)
    }

    /// Writes `def` as its column's definition in `txn`, commits, and
    /// makes the applier's list say the same.
    fn commit_def(
        &self,
        mut txn: RwTxn<'_>,
        table: &[u8],
        key: &[u8],
        def: Option<&IndexDef>,
    ) -> heed::Result<()> {
        match def {
            Some(def) => self.meta.put(&mut txn, key, &def.encode())?,
            None => self.meta.delete(&mut txn, key).map(drop)?,
        }
        // LMDB's writer first, then the definitions, held until both say
        // the same: the applier reads them inside its transaction.
        let mut defs = self.index_defs.defs.write();
        self.config.io.commit(txn)?;
        let column = &key[DEF_PREFIX.len()..];
        let list = defs.entry(table.to_vec()).or_default();
        list.retain(|old| row_key(table, &old.column).as_deref() != Some(column));
        list.extend(def.filter(|def| def.state != IndexState::Dropping).cloned());
        Ok(())
    }

    /// Writes the entries of every row of `table` into the building index
    /// `def`, a transaction per batch of rows.
    fn build_entries(&self, table: &[u8], def: &IndexDef, key: &[u8]) -> heed::Result<()> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let mut txn = self.env.write_txn()?;
            // Still ours: a replica loading a snapshot clears every index.
            if self.meta.get(&txn, key)? != Some(&def.encode()[..]) {
                return Err(heed::Error::Io(std::io::Error::other(
                    "the index was dropped while it was built",
                )));
            }
            after = self.build_batch(&mut txn, table, def, after.as_deref())?;
            self.config.io.commit(txn)?;
            if after.is_none() {
                return Ok(());
            }
        }
    }

    /// Puts the entries of the rows of `table` after row key `after` (from
    /// the first without it) into index `def`, until a batch is full;
    /// returns the last row key of a full batch, `None` at the table's end.
    ///
    /// The rows come in primary-key order, so each index key's rows do too:
    /// a batch is grouped by index key (no sort of its entries), and each
    /// key's rows are appended after its duplicates, which spares LMDB the
    /// search among them (a row the applier indexed first is put as usual).
    fn build_batch(
        &self,
        txn: &mut RwTxn<'_>,
        table: &[u8],
        def: &IndexDef,
        after: Option<&[u8]>,
    ) -> heed::Result<Option<Vec<u8>>> {
        let Some(prefix) = table_prefix(table) else {
            return Ok(None);
        };
        let mut range = span(&prefix, Bound::Unbounded, false);
        if let Some(key) = after {
            range.0 = Bound::Excluded(key.to_vec());
        }
        let mut primary_keys: Vec<Vec<u8>> = Vec::new();
        let mut rows_of: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
        let mut entries = 0;
        let mut last = None;
        for entry in self.rows.range(txn, &borrowed(&range))? {
            let (key, stored) = entry?;
            let primary_key = &key[prefix.len()..];
            let index_keys = keys_of(def, Record::decode_columns(primary_key, stored).as_ref());
            // Only rows with entries are held: a column few rows have
            // must not hold the whole table's keys.
            if !index_keys.is_empty() {
                let at = primary_keys.len() as u32;
                for index_key in index_keys {
                    rows_of.entry(index_key).or_default().push(at);
                    entries += 1;
                }
                primary_keys.push(primary_key.to_vec());
            }
            if entries >= BATCH_ENTRIES {
                last = Some(key.to_vec());
                break;
            }
        }
        for (index_key, rows) in rows_of.into_iter().sorted_unstable_by(|a, b| a.0.cmp(&b.0)) {
            let key = entry_key(def.id, &index_key);
            for at in rows {
                put_after(&self.indexes, txn, &key, &primary_keys[at as usize])?;
            }
        }
        Ok(last)
    }

    /// Whether every index of `table` holds exactly what its rows say;
    /// returns what disagrees.
    pub(super) fn check_indexes(&self, table: &[u8]) -> Result<Vec<String>, WriteFailed> {
        self.catch_up()?;
        let txn = self.env.read_txn()?;
        let mut problems = Vec::new();
        let Some(prefix) = table_prefix(table) else {
            return Ok(problems);
        };
        for def in self.index_defs.of(table) {
            let mut expected = Vec::new();
            for entry in self.rows.prefix_iter(&txn, &prefix)? {
                let (key, stored) = entry?;
                let primary_key = &key[prefix.len()..];
                let Some(row) = Record::decode_columns(primary_key, stored) else {
                    problems.push(format!(
                        "row {} is damaged",
                        String::from_utf8_lossy(primary_key)
                    ));
                    continue;
                };
                for index_key in keys_of(&def, Some(&row)) {
                    expected.push((entry_key(def.id, &index_key), primary_key.to_vec()));
                }
            }
            // In LMDB's order (key, then primary key), to walk beside it.
            expected.sort_unstable();
            let mut expected = expected.into_iter().peekable();
            let column = String::from_utf8_lossy(&def.column);
            let mut report = |(key, primary_key): (&[u8], &[u8]), lacking: bool| {
                let key = String::from_utf8_lossy(&key[4..]);
                let row = String::from_utf8_lossy(primary_key);
                let kind = def.kind.name();
                problems.push(if lacking {
                    format!("index {column} ({kind}) lacks {key:?} for row {row}")
                } else {
                    format!(
                        "index {column} ({kind}) has {key:?} for row {row}, which its row does not"
                    )
                });
            };
            for entry in self.indexes.prefix_iter(&txn, &def.id.to_be_bytes())? {
                let found = entry?;
                while let Some(lacking) =
                    expected.next_if(|(key, row)| (&key[..], &row[..]) < found)
                {
                    report((&lacking.0, &lacking.1), true);
                }
                if expected
                    .next_if(|(key, row)| (&key[..], &row[..]) == found)
                    .is_none()
                {
                    report(found, false);
                }
            }
            for lacking in expected {
                report((&lacking.0, &lacking.1), true);
            }
        }
        Ok(problems)
    }
}

/// The range of the keys starting with `prefix`, from `prefix ‖ start`
/// on (`Unbounded`: all of them), ascending or descending.
pub(super) fn span(
    prefix: &[u8],
    start: Bound<&[u8]>,
    descending: bool,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let at = |key: &[u8]| [prefix, key].concat();
    let first = Bound::Included(prefix.to_vec());
    let past = prefix_end(prefix).map_or(Bound::Unbounded, Bound::Excluded);
    match (start, descending) {
        (Bound::Unbounded, _) => (first, past),
        (Bound::Included(key), false) => (Bound::Included(at(key)), past),
        (Bound::Excluded(key), false) => (Bound::Excluded(at(key)), past),
        // Every key equal to `key` (an index key's duplicates too) is
        // before `key ‖ 0`, and nothing else is between them: LMDB's reverse
        // walk from an included bound would start at the first duplicate.
        (Bound::Included(key), true) => (first, Bound::Excluded([&at(key)[..], &[0]].concat())),
        (Bound::Excluded(key), true) => (first, Bound::Excluded(at(key))),
    }
}

/// Bounds of owned keys as LMDB's range takes them.
pub(super) fn borrowed(bounds: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (
        bounds.0.as_ref().map(Vec::as_slice),
        bounds.1.as_ref().map(Vec::as_slice),
    )
}

/// The first key after every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl Inner {
    /// Walks a table's rows in the order of an index (`None`: the primary
    /// key) from `start`: ascending, keys at or after it (`Included`) or
    /// after it; descending, keys at or before it or before it. Hands
    /// `visit` each row's key in that order and the row until it answers
    /// false. `Ok(false)`: there is no such index.
    pub(super) fn walk_rows(
        &self,
        table: &[u8],
        index: Option<(&[u8], IndexKind)>,
        start: Bound<&[u8]>,
        descending: bool,
        visit: &mut dyn FnMut(&[u8], Record) -> bool,
    ) -> Result<bool, WriteFailed> {
        let Some(prefix) = table_prefix(table) else {
            return Ok(true);
        };
        self.catch_up()?;
        let txn = self.env.read_txn()?;
        let def = match index {
            None => None,
            Some((column, kind)) => match def_in(&self.meta, &txn, table, column, kind)? {
                Some(def) => Some(def),
                None => return Ok(false),
            },
        };
        // The rows' own entries, or the index's: those hold the primary
        // keys of their rows, which are read by them.
        let (database, base) = match &def {
            None => (&self.rows, prefix),
            Some(def) => (&self.indexes, def.id.to_be_bytes().to_vec()),
        };
        let range = span(&base, start, descending);
        let range = borrowed(&range);
        let entries = if descending {
            Either::Left(database.rev_range(&txn, &range)?)
        } else {
            Either::Right(database.range(&txn, &range)?)
        };
        for entry in entries {
            let (key, value) = entry?;
            // What `visit` is handed: the primary key, or the index key.
            let key = &key[base.len()..];
            let (primary_key, stored) = if def.is_none() {
                (key, value)
            } else {
                let Some(row_key) = row_key(table, value) else {
                    continue;
                };
                let Some(stored) = self.rows.get(&txn, &row_key)? else {
                    continue;
                };
                (value, stored)
            };
            let Some(row) = Record::decode_columns(primary_key, stored) else {
                continue;
            };
            if !visit(key, row) {
                break;
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row's old and new keys give exactly the keys to take out and to
    /// put, as the difference of the two sets does.
    #[test]
    fn the_keys_a_write_changes_are_the_two_sets_differences() {
        let keys = |words: &str| -> Vec<Vec<u8>> {
            let mut keys: Vec<Vec<u8>> = words.split_whitespace().map(|w| w.into()).collect();
            keys.sort_unstable();
            keys.dedup();
            keys
        };
        let cases = [
            ("", ""),
            ("a b c", ""),
            ("", "a b c"),
            ("a b c", "a b c"),
            ("a c e g", "b c d g h"),
            ("m", "a z"),
            ("a b", "b c"),
        ];
        for (old, new) in cases {
            let (before, after) = (keys(old), keys(new));
            let mut gone = Vec::new();
            let mut added = Vec::new();
            differences(&before, &after, |key, is_gone| {
                if is_gone { &mut gone } else { &mut added }.push(key.to_vec());
                Ok::<(), ()>(())
            })
            .unwrap();
            let expected_gone: Vec<Vec<u8>> = before
                .iter()
                .filter(|k| !after.contains(k))
                .cloned()
                .collect();
            let expected_added: Vec<Vec<u8>> = after
                .iter()
                .filter(|k| !before.contains(k))
                .cloned()
                .collect();
            assert_eq!(gone, expected_gone, "{old:?} -> {new:?}");
            assert_eq!(added, expected_added, "{old:?} -> {new:?}");
        }
    }

    /// An entry the applier put first, before or at the one the build
    /// appends, leaves the duplicates sorted and each once.
    #[test]
    fn an_entry_put_after_others_lands_in_order_whatever_was_there() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: a new directory, opened once.
        #[allow(unsafe_code)]
        let env = unsafe {
            heed::EnvOpenOptions::new()
                .max_dbs(1)
                .map_size(1 << 20)
                .open(dir.path())
                .unwrap()
        };
        let mut txn = env.write_txn().unwrap();
        let indexes = create_database(&env, &mut txn).unwrap();
        indexes.put(&mut txn, b"k", b"m").unwrap();
        for primary_key in [&b"a"[..], b"m", b"z", b"n", b"z"] {
            put_after(&indexes, &mut txn, b"k", primary_key).unwrap();
        }
        let found: Vec<&[u8]> = indexes
            .get_duplicates(&txn, b"k")
            .unwrap()
            .unwrap()
            .map(|entry| entry.unwrap().1)
            .collect();
        assert_eq!(found, [&b"a"[..], b"m", b"n", b"z"]);
    }
}
