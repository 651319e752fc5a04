//! The hash database: memcached's items (flags 0, no expiry). A key must
//! be 1 to 250 bytes and a value at most the item size limit (`-I`), else
//! the command fails (status 1).

use kura_proto::tyrant::PutMode;
use kura_proto::MAX_KEY_LEN;
use kura_store::{
    DeleteCommand, DeleteOutcome, GetOptions, RowOutcome, StoreCommand, StoreMode, StoreOutcome,
};

use super::{KeyIterator, KeyValues, ValueChange};
use crate::exec::reply_limit::ReplyLimit;
use crate::exec::Context;

/// Read-modify-write commands retry this often when another write of the
/// key comes between their read and their write.
const CAS_RETRIES: usize = 16;

pub struct Items<'a> {
    pub ctx: &'a Context<'a>,
}

fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

/// A store's outcome in a record's terms.
fn row_outcome(outcome: StoreOutcome) -> RowOutcome {
    match outcome {
        StoreOutcome::Stored { .. } => RowOutcome::Done,
        StoreOutcome::NotStored | StoreOutcome::Exists => RowOutcome::Kept,
        StoreOutcome::NotFound => RowOutcome::Missing,
        StoreOutcome::OutOfMemory | StoreOutcome::Failed => RowOutcome::Failed,
    }
}

impl Items<'_> {
    fn store(&self, mode: StoreMode, key: &[u8], value: &[u8], cas: Option<u64>) -> StoreOutcome {
        let ctx = self.ctx;
        if !valid_key(key) || value.len() > ctx.shared.config.max_item_size {
            return StoreOutcome::NotStored;
        }
        ctx.shared.store.store(
            &StoreCommand {
                mode,
                key,
                value,
                flags: 0,
                expiry: ctx.shared.store.clock().expiry(0),
                compare_cas: cas,
                stale_if_older: false,
            },
            &ctx.fence,
        )
    }

    fn get_with_cas(&self, key: &[u8]) -> Option<(Vec<u8>, u64)> {
        if !valid_key(key) {
            return None;
        }
        let mut found = None;
        self.ctx
            .shared
            .store
            .get(key, &GetOptions::default(), &self.ctx.fence, &mut |item| {
                found = Some((item.value.to_vec(), item.cas))
            });
        found
    }

    /// The length of the key's value, if it has one.
    fn value_len(&self, key: &[u8]) -> Option<usize> {
        let mut len = None;
        let store = &self.ctx.shared.store;
        store.get(key, &GetOptions::default(), &self.ctx.fence, &mut |item| {
            len = Some(item.value.len())
        });
        len
    }
}

impl KeyValues for Items<'_> {
    fn kind(&self) -> &'static str {
        "hash"
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.get_with_cas(key).map(|(value, _)| value)
    }

    fn put(&self, mode: PutMode, key: &[u8], value: &[u8]) -> RowOutcome {
        if !valid_key(key) {
            return RowOutcome::Invalid;
        }
        if value.len() > self.ctx.shared.config.max_item_size {
            return RowOutcome::TooLarge;
        }
        match mode {
            PutMode::Put | PutMode::NoReply => {
                row_outcome(self.store(StoreMode::Set, key, value, None))
            }
            PutMode::Keep => row_outcome(self.store(StoreMode::Add, key, value, None)),
            // Append, or create: memcached's append alone fails on a missing
            // key. A refusal ends it at once.
            PutMode::Cat => {
                for _ in 0..CAS_RETRIES {
                    for mode in [StoreMode::Append, StoreMode::Add] {
                        match row_outcome(self.store(mode, key, value, None)) {
                            RowOutcome::Done => return RowOutcome::Done,
                            RowOutcome::Failed => return RowOutcome::Failed,
                            _ => {}
                        }
                    }
                }
                // The append was refused because the value would grow past
                // `-I`, not lost in a race.
                let max = self.ctx.shared.config.max_item_size;
                match self.value_len(key) {
                    Some(len) if len + value.len() > max => RowOutcome::TooLarge,
                    _ => RowOutcome::Failed,
                }
            }
        }
    }

    fn out(&self, key: &[u8]) -> RowOutcome {
        if !valid_key(key) {
            return RowOutcome::Invalid;
        }
        let command = DeleteCommand::default();
        match self.ctx.shared.store.delete(key, &command, &self.ctx.fence) {
            DeleteOutcome::Deleted => RowOutcome::Done,
            DeleteOutcome::Failed => RowOutcome::Failed,
            _ => RowOutcome::Missing,
        }
    }

    /// With the item's CAS, retried when another write comes between.
    fn modify(&self, key: &[u8], change: &mut ValueChange<'_>) -> Option<Vec<u8>> {
        for _ in 0..CAS_RETRIES {
            let old = self.get_with_cas(key);
            let new = change(old.as_ref().map(|(value, _)| &value[..]))?;
            let outcome = match &old {
                Some((_, cas)) => self.store(StoreMode::Set, key, &new, Some(*cas)),
                None => self.store(StoreMode::Add, key, &new, None),
            };
            match outcome {
                StoreOutcome::Stored { .. } => return Some(new),
                // Changed, removed or created meanwhile: read again (a key
                // or value out of bounds is refused for good).
                StoreOutcome::NotStored if !valid_key(key) => return None,
                StoreOutcome::NotStored if new.len() > self.ctx.shared.config.max_item_size => {
                    return None
                }
                StoreOutcome::Exists | StoreOutcome::NotFound | StoreOutcome::NotStored => {}
                StoreOutcome::OutOfMemory | StoreOutcome::Failed => return None,
            }
        }
        None
    }

    fn iterator(&self) -> KeyIterator {
        KeyIterator::over_items(self.ctx)
    }

    /// The live items, sorted (the engines keep no order, so every key
    /// with the prefix is read first, keeping the `max` smallest).
    fn keys(&self, prefix: &[u8], max: Option<usize>, within: usize) -> Option<Vec<Vec<u8>>> {
        let max = max.unwrap_or(usize::MAX);
        let mut smallest = std::collections::BinaryHeap::new();
        let mut budget = ReplyLimit::new(within);
        let complete = self.ctx.shared.store.scan(&mut |item| {
            if max == 0 || !budget.fits() || !item.key.starts_with(prefix) {
                return;
            }
            budget.take(item.key.len());
            smallest.push(item.key.to_vec());
            if smallest.len() > max {
                budget.give_back(smallest.pop().map_or(0, |largest| largest.len()));
            }
        });
        (complete && budget.fits()).then(|| smallest.into_sorted_vec())
    }

    fn count_and_size(&self) -> (u64, u64) {
        let stats = self.ctx.shared.store.stats();
        (stats.curr_items, stats.bytes)
    }
}
