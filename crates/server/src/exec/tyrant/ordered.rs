//! The B+ tree database (`--tyrant-db btree:NAME`): keys in byte order,
//! kept as the rows of the table NAME, each with one column, `value` (so a
//! table query or `kura log` shows them as such). Writes go through the
//! update log as every row's do; `modify` is one atomic row edit.

use kura_proto::tyrant::PutMode;
use kura_store::{Record, RowEdit, RowMode, RowOutcome, Tables};

use super::{KeyIterator, KeyValues, ValueChange};
use crate::exec::reply_limit::ReplyLimit;
use crate::exec::Context;

/// The one column of an ordered keyspace's rows.
pub const VALUE_COLUMN: &[u8] = b"value";

pub struct OrderedKeys<'a> {
    pub name: &'a [u8],
    pub tables: &'a dyn Tables,
    pub ctx: &'a Context<'a>,
}

fn row(key: &[u8], value: &[u8]) -> Record {
    let mut row = Record::new(key);
    row.put(VALUE_COLUMN, value);
    row
}

fn value_of(row: &Record) -> Vec<u8> {
    row.columns
        .iter()
        .find(|(name, _)| name == VALUE_COLUMN)
        .map(|(_, value)| value.clone())
        .unwrap_or_default()
}

impl OrderedKeys<'_> {
    /// Every record from `begin` on, in key order, until `visit` says
    /// stop; false if the records could not be read.
    fn walk(&self, begin: &[u8], visit: &mut dyn FnMut(&Record) -> bool) -> bool {
        let start = std::ops::Bound::Included(begin);
        self.tables
            .walk_rows(self.name, None, start, false, &mut |_, row| visit(&row))
            .is_ok()
    }
}

impl KeyValues for OrderedKeys<'_> {
    fn kind(&self) -> &'static str {
        "B+ tree"
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let row = self
            .tables
            .get_row(self.name, key, &self.ctx.fence)
            .ok()??;
        Some(value_of(&row))
    }

    fn put(&self, mode: PutMode, key: &[u8], value: &[u8]) -> RowOutcome {
        if value.len() > self.ctx.shared.config.max_item_size {
            return RowOutcome::TooLarge;
        }
        let fence = &self.ctx.fence;
        match mode {
            PutMode::Put | PutMode::NoReply => {
                self.tables
                    .put_row(self.name, &row(key, value), RowMode::Put, fence)
            }
            PutMode::Keep => self
                .tables
                .put_row(self.name, &row(key, value), RowMode::Keep, fence),
            PutMode::Cat => {
                let joined = self.modify(key, &mut |old| {
                    Some([old.unwrap_or_default(), value].concat())
                });
                match joined {
                    Some(_) => RowOutcome::Done,
                    None => RowOutcome::Failed,
                }
            }
        }
    }

    fn out(&self, key: &[u8]) -> RowOutcome {
        self.tables.remove_row(self.name, key, &self.ctx.fence)
    }

    fn modify(&self, key: &[u8], change: &mut ValueChange<'_>) -> Option<Vec<u8>> {
        let max = self.ctx.shared.config.max_item_size;
        let mut written = None;
        let outcome = self.tables.modify_row(
            self.name,
            key,
            &mut |current| {
                let old = current.as_ref().map(value_of);
                match change(old.as_deref()) {
                    Some(new) if new.len() <= max => {
                        written = Some(new.clone());
                        RowEdit::Put(row(key, &new))
                    }
                    _ => RowEdit::Leave,
                }
            },
            &self.ctx.fence,
        );
        written.filter(|_| outcome == RowOutcome::Done)
    }

    fn iterator(&self) -> KeyIterator {
        KeyIterator::over_rows(self.name, std::ops::Bound::Unbounded)
    }

    fn keys(&self, prefix: &[u8], max: Option<usize>, within: usize) -> Option<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        let max = max.unwrap_or(usize::MAX);
        if max == 0 {
            return Some(keys);
        }
        let mut budget = ReplyLimit::new(within);
        // In key order: the walk stops at the last key wanted.
        let read = self.walk(prefix, &mut |row| {
            let more = row.key.starts_with(prefix) && budget.take(row.key.len());
            if more {
                keys.push(row.key.clone());
            }
            more && keys.len() < max
        });
        (read && budget.fits()).then_some(keys)
    }

    fn count_and_size(&self) -> (u64, u64) {
        let (mut count, mut size) = (0, 0);
        // Figures for `stat`: a read that fails counts what it saw.
        self.walk(b"", &mut |row| {
            count += 1;
            size += (row.key.len() + value_of(row).len()) as u64;
            true
        });
        (count, size)
    }

    fn range(
        &self,
        begin: &[u8],
        end: Option<&[u8]>,
        max: Option<usize>,
        limit: usize,
    ) -> Option<Vec<Vec<u8>>> {
        let mut found = Vec::new();
        let max = max.unwrap_or(usize::MAX);
        let mut budget = ReplyLimit::new(limit);
        let read = self.walk(begin, &mut |row| {
            if found.len() / 2 >= max || end.is_some_and(|end| row.key.as_slice() >= end) {
                return false;
            }
            let value = value_of(row);
            if !budget.take(row.key.len() + value.len()) {
                return false;
            }
            found.push(row.key.clone());
            found.push(value);
            true
        });
        (read && budget.fits()).then_some(found)
    }
}
