//! Index lookups: a query's indexed conditions turned into sorted streams
//! of primary keys from the `indexes` database (`kura_table::streams`
//! finds the rows every one holds), and those rows read.
//!
//! Under one index key, LMDB keeps the primary keys sorted (the database is
//! DUP_SORT), so a lookup is one key's duplicates, a merge of a few keys'
//! (a range, a prefix, an OR of words), or, over more keys than are worth
//! merging, their entries in index order.

use std::ops::Bound;

use heed::types::Bytes;
use heed::{Database, RoTxn};
use kura_table::streams::{self, distinct_streams, Merged};
use kura_table::{KeyRange, Lookup, StoredRecord};

use super::indexes::{borrowed, def_in, entry_key, span};
use super::rows::row_key;
use crate::disk::{Inner, WriteFailed};

/// Index keys a lookup merges as sorted streams; with more, it reads their
/// entries in index order (an unsorted stream).
const MAX_MERGED_KEYS: usize = 64;
/// A row read by its key costs about this many times a row read in a scan
/// (measured: STRINC over a million rows, 0.6-1.0 µs a candidate read by
/// key, 0.2-0.3 µs a row scanned), so candidates past this share of the
/// rows are read faster by a scan.
const SCAN_SHARE: u64 = 4;
/// Candidates always read by key, however few rows there are.
const ALWAYS_BY_KEY: usize = 1024;

type Keys<'t> = streams::Keys<'t, WriteFailed>;
type Stream<'t> = streams::Stream<'t, WriteFailed>;
type Entries<'t> = Box<dyn Iterator<Item = heed::Result<(&'t [u8], &'t [u8])>> + 't>;

impl Inner {
    /// Hands `visit`, in primary-key order, each row of `table` that every
    /// lookup holds, until it answers false; `lazily`: the caller expects
    /// to stop after a few. `Ok(None)` when one of the indexes does not
    /// exist, or when the lookups hold so many rows that a scan reads them
    /// faster (a caller scans then); else how many rows it read.
    pub(super) fn lookup_rows(
        &self,
        table: &[u8],
        lookups: &[Lookup],
        lazily: bool,
        visit: &mut dyn FnMut(StoredRecord<'_>) -> bool,
    ) -> Result<Option<u64>, WriteFailed> {
        self.catch_up()?;
        let txn = self.env.read_txn()?;
        let mut indexed = Vec::with_capacity(lookups.len());
        for lookup in lookups {
            let Some(def) = def_in(&self.meta, &txn, table, &lookup.column, lookup.kind)? else {
                return Ok(None);
            };
            indexed.push((def.id, &lookup.probes));
        }
        let wanted = distinct_streams(indexed);
        let mut streams = Vec::with_capacity(wanted.len());
        for (id, ranges) in &wanted {
            streams.push(self.stream(&txn, *id, ranges)?);
        }
        let mut read = 0;
        let mut rows = |primary_key: &[u8]| -> Result<bool, WriteFailed> {
            let Some(key) = row_key(table, primary_key) else {
                return Ok(true);
            };
            // An entry whose row is gone would be a bug; skip it.
            let Some(stored) = self.rows.get(&txn, &key)? else {
                return Ok(true);
            };
            read += 1;
            let row = StoredRecord::new(primary_key, stored).ok_or(WriteFailed)?;
            Ok(visit(row))
        };
        let sorted = streams
            .iter()
            .any(|stream| matches!(stream, Stream::Sorted(_)));
        if lazily && sorted {
            let streams = streams
                .into_iter()
                .filter_map(|stream| match stream {
                    Stream::Sorted(keys) => Some(keys),
                    Stream::Unsorted(_) => None,
                })
                .collect();
            streams::intersect_lazily(streams::sparse_only(streams)?, &mut rows)?;
        } else {
            let most = (self.rows.len(&txn)? / SCAN_SHARE).max(ALWAYS_BY_KEY as u64) as usize;
            let Some(candidates) = streams::narrow(streams, most)? else {
                return Ok(None);
            };
            for primary_key in candidates {
                if !rows(primary_key)? {
                    break;
                }
            }
        }
        Ok(Some(read))
    }

    /// The primary keys under any of `ranges` of index `id`.
    fn stream<'t>(
        &self,
        txn: &'t RoTxn<'_>,
        id: u32,
        ranges: &[KeyRange],
    ) -> Result<Stream<'t>, WriteFailed> {
        let mut keys = Vec::new();
        for range in ranges {
            // The index keys (with the index's id) under `range`, each once.
            for entry in entries(self.indexes, txn, id, range, true)? {
                let (key, _) = entry?;
                keys.push(key);
                if keys.len() > MAX_MERGED_KEYS {
                    return self.collected(txn, id, ranges.to_vec());
                }
            }
        }
        let mut streams = Vec::new();
        for key in keys {
            if let Some(duplicates) = self.indexes.get_duplicates(txn, key)? {
                streams.push(Box::new(duplicates.map(primary_key)) as Keys);
            }
        }
        Ok(Stream::Sorted(match streams.len() {
            1 => streams.pop().expect("one stream"),
            _ => Box::new(Merged::new(streams)?),
        }))
    }

    /// Every primary key under `ranges`, in index order.
    fn collected<'t>(
        &self,
        txn: &'t RoTxn<'_>,
        id: u32,
        ranges: Vec<KeyRange>,
    ) -> Result<Stream<'t>, WriteFailed> {
        // A cursor per range as the walk comes to it, not all at once.
        let indexes = self.indexes;
        let parts = ranges.into_iter().map(move |range| -> Keys<'t> {
            match entries(indexes, txn, id, &range, false) {
                Ok(entries) => Box::new(entries.map(primary_key)),
                Err(error) => Box::new(std::iter::once(Err(error.into()))),
            }
        });
        Ok(Stream::Unsorted(Box::new(parts.flatten())))
    }
}

/// The entries of index `id` (in `indexes`) under `range`: every one, or the
/// first of each index key (`first_of_each`).
fn entries<'t>(
    indexes: Database<Bytes, Bytes>,
    txn: &'t RoTxn<'_>,
    id: u32,
    range: &KeyRange,
    first_of_each: bool,
) -> heed::Result<Entries<'t>> {
    let bounds = match range {
        KeyRange::Prefix(prefix) => span(&entry_key(id, prefix), Bound::Unbounded, false),
        KeyRange::Span(from, to) => entry_bounds(id, from, to),
    };
    let entries = indexes.range(txn, &borrowed(&bounds))?;
    Ok(match first_of_each {
        true => Box::new(entries.move_between_keys()),
        false => Box::new(entries),
    })
}

/// The bounds of `from..to` (index keys) among the entries of index `id`.
fn entry_bounds(
    id: u32,
    from: &Bound<Vec<u8>>,
    to: &Bound<Vec<u8>>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let bound = |bound: &Bound<Vec<u8>>, edge: Bound<Vec<u8>>| match bound {
        Bound::Included(key) => Bound::Included(entry_key(id, key)),
        Bound::Excluded(key) => Bound::Excluded(entry_key(id, key)),
        Bound::Unbounded => edge,
    };
    let (first, past) = span(&id.to_be_bytes(), Bound::Unbounded, false);
    (bound(from, first), bound(to, past))
}

/// The primary key of an index entry read.
fn primary_key<'t>(entry: heed::Result<(&'t [u8], &'t [u8])>) -> Result<&'t [u8], WriteFailed> {
    Ok(entry?.1)
}
