//! The disk engine's reads: pending writes first, then the read cache,
//! then LMDB (and the log for a value kept there); a read that changes its
//! item (vivify, a recache win, touch) is redone as a write.

use std::ops::Bound;
use std::sync::atomic::Ordering;

use crate::semantics::{self};
use crate::{AckFence, ClassCommand, GetOptions, GetOutcome, ItemInfo, ItemView, ScanCursor};

use super::pending::{Change, Pending, Shard};
use super::record::{item_size, Header, Keyed, LogPointer, Old, FETCHED, STALE, WIN_SENT};
use super::{current, in_log, journal, log_read_failed, Inner, WriteFailed};

/// What `with_record` does when the log cannot give an item's value (a
/// damaged record, a failed read).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueLost {
    /// The call fails.
    Fails,
    /// The item goes on with an empty value: the caller decides on its
    /// header alone (a delete, an add, a compare of CAS), so a damaged
    /// value can still be deleted or written over.
    HeaderWillDo,
}

impl Inner {
    /// Runs `f` on the key's current stored record: its pending write if it
    /// has one, else its cached record, else what LMDB holds (then cached).
    /// The caller holds the key's shard lock, so no write of the key comes
    /// between the look in the pending table and the read of LMDB: a write
    /// the applier has just retired is seen committed, and what is cached is
    /// LMDB's newest. A pending write not journalled yet raises `fence`:
    /// what the caller replies from it waits until it is acknowledged.
    pub(super) fn with_record<R>(
        &self,
        shard: &mut Shard<'_>,
        key: &[u8],
        fence: &AckFence,
        lost: ValueLost,
        f: impl FnOnce(Option<(Header, &[u8])>) -> R,
    ) -> Result<R, WriteFailed> {
        let header_alone = |error: std::io::Error, header: Header, pointer: &LogPointer| {
            let failed = log_read_failed(&error, pointer);
            match lost {
                ValueLost::HeaderWillDo => Ok(Some((header, &[] as &[u8]))),
                ValueLost::Fails => Err(failed),
            }
        };
        let hash = shard.hash();
        match shard.get_for_reply(key, fence) {
            Some(Pending::Put(record)) => {
                let Some((header, pointer)) = Header::decode(record).and_then(in_log) else {
                    return Ok(f(self.with_fetched(hash, Some(record))));
                };
                // Journalled, and its value dropped from memory: read it
                // there (its segment stays until LMDB has it).
                return match self.with_logged_value(key, &header, &pointer) {
                    Ok(logged) => Ok(f(self.with_fetched(hash, Some(logged.record())))),
                    Err(error) => header_alone(error, header, &pointer).map(f),
                };
            }
            Some(Pending::Remove) => return Ok(f(None)),
            None => {}
        }
        if let Some(record) = shard.cached(key) {
            return Ok(f(self.with_fetched(hash, Some(record))));
        }
        let mut attempts = 0;
        loop {
            let txn = self.env.read_txn()?;
            let stored = self.items.get(&txn, key)?;
            let Some((header, pointer)) = stored.and_then(Header::decode).and_then(in_log) else {
                if let Some(record) = stored {
                    self.cache_item(shard, key, record);
                }
                return Ok(f(self.with_fetched(hash, stored)));
            };
            drop(txn);
            let logged = match self.with_logged_value(key, &header, &pointer) {
                Ok(logged) => logged,
                // Compacted since the pointer was read: its segment is gone.
                // LMDB has the new place.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound && attempts < 3 => {
                    attempts += 1;
                    continue;
                }
                Err(error) => return header_alone(error, header, &pointer).map(f),
            };
            self.cache_item(shard, key, logged.record());
            return Ok(f(self.with_fetched(hash, Some(logged.record()))));
        }
    }

    /// Keeps an item's record read from LMDB (or the log) in the read cache
    /// if it is alive: an expired or flushed one is not worth the memory,
    /// and one a flush covers would outlive the round that clears it.
    fn cache_item(&self, shard: &mut Shard<'_>, key: &[u8], record: &[u8]) {
        if Header::decode(record).is_some_and(|(header, _)| self.alive(&header)) {
            shard.cache(key, record);
        }
    }

    /// The record of an item whose value is in the log: `header` (LMDB's or
    /// the pending write's, whose bits are the newest; as `in_log` gives it,
    /// without `IN_LOG`) and the value `pointer` leads to.
    pub(super) fn with_logged_value(
        &self,
        key: &[u8],
        header: &Header,
        pointer: &LogPointer,
    ) -> std::io::Result<journal::Stored> {
        let mut logged = self.journal.read_stored(key, pointer)?;
        header.write_over(logged.record_mut());
        Ok(logged)
    }

    /// A stored record's header and value, with the fetched bit set if the
    /// item was read since it was stored (`accesses.rs`).
    fn with_fetched<'v>(&self, hash: u64, record: Option<&'v [u8]>) -> Option<(Header, &'v [u8])> {
        let (mut header, value) = Header::decode(record?)?;
        if self.fetched(hash, &header) {
            header.bits |= FETCHED;
        }
        Some((header, value))
    }

    /// Whether the item `header` describes (of `hash`) was read: its bit in
    /// LMDB, or a read since it was stored.
    pub(super) fn fetched(&self, hash: u64, header: &Header) -> bool {
        header.has(FETCHED) || self.accesses.fetched(hash, header.cas)
    }

    /// What a read of the item (of `key_hash`) shows; `idle_seconds` is up
    /// to this access, which it then notes (as a read of the item if
    /// `bump`).
    fn view<'a>(
        &self,
        key: &'a [u8],
        key_hash: u64,
        header: &Header,
        value: &'a [u8],
        won: bool,
        bump: bool,
    ) -> ItemView<'a> {
        let now = self.clock.now();
        let idle_seconds = self.accesses.idle_seconds(key_hash, now);
        // An item known read keeps the slot as it is: its tag would only
        // make a key that shares the slot look unread.
        let bump = bump && !header.has(FETCHED);
        self.accesses.read(key_hash, header.cas, bump, now);
        ItemView {
            key,
            value,
            flags: header.flags,
            cas: header.cas,
            ttl: self.ttl(header.expiry_unix),
            fetched_before: header.has(FETCHED),
            idle_seconds,
            stale: header.has(STALE),
            won,
            win_taken: header.has(WIN_SENT) && !won,
        }
    }

    pub(super) fn get(
        &self,
        key: &[u8],
        options: &GetOptions,
        fence: &AckFence,
        visit: &mut dyn FnMut(&ItemView<'_>),
    ) -> GetOutcome {
        self.start_due_flush(fence);
        // The common case reads without writing: `None` when the read changes
        // the item (touch, recache win) and is redone as a write.
        let mut shard = self.pending.lock(key);
        let key_hash = shard.hash();
        let looked = self.with_record(&mut shard, key, fence, ValueLost::Fails, |found| {
            let Some((header, value)) = found else {
                return Some(GetOutcome::Miss);
            };
            if !self.alive(&header) {
                let counter = if self.flushes.covers(header.cas) {
                    &self.counters.get_flushed
                } else {
                    &self.counters.get_expired
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return Some(GetOutcome::Miss);
            }
            let ttl = self.ttl(header.expiry_unix);
            if options.touch.is_some()
                || semantics::wins_recache(&current(&header, value), ttl, options.recache)
            {
                return None;
            }
            visit(&self.view(key, key_hash, &header, value, false, !options.no_bump));
            self.count_command(key, value.len(), ClassCommand::GetHit);
            Some(GetOutcome::Hit)
        });
        drop(shard);
        match looked {
            Ok(Some(GetOutcome::Miss)) if options.vivify.is_some() => {}
            Ok(Some(outcome)) => return outcome,
            Ok(None) => {}
            // A value the log could not give (logged there): a miss for
            // this read.
            Err(WriteFailed) => return GetOutcome::Miss,
        }
        if !self.health.takes_write() {
            return GetOutcome::Failed;
        }
        let written = self.modify(key, fence, ValueLost::Fails, |found, _| {
            let Some((old, value)) = found else {
                let Some(expiry) = options.vivify else {
                    return (None, GetOutcome::Miss);
                };
                let header = self.header_for(&semantics::vivified(expiry), None);
                self.counters.total_items.fetch_add(1, Ordering::Relaxed);
                // Created now: its reader sees it accessed now.
                self.accesses.stored(key_hash, self.clock.now());
                visit(&self.view(key, key_hash, &header, &[], true, false));
                let change = Change::Put(Keyed::encode(key, &header, &[]));
                return (Some(change), GetOutcome::Hit);
            };
            let mut header = old;
            let mut hit = ClassCommand::GetHit;
            if let Some(expiry) = options.touch {
                hit = ClassCommand::TouchHit;
                header.expiry_unix = self.to_unix(expiry);
                if self.stamps.is_some() {
                    // A dual master's peers take only newer stamps.
                    header.cas = self.next_cas();
                }
            }
            let ttl = self.ttl(header.expiry_unix);
            let won = semantics::wins_recache(&current(&old, value), ttl, options.recache);
            if won {
                header.bits |= WIN_SENT;
            }
            // The reader sees the old state with the new expiry.
            let seen = Header {
                expiry_unix: header.expiry_unix,
                ..old
            };
            // Its record keeps the fetched bit (below), not the slot.
            visit(&self.view(key, key_hash, &seen, value, won, false));
            self.count_command(key, value.len(), hit);
            if !options.no_bump {
                header.bits |= FETCHED;
            }
            let change = Change::Put(Keyed::encode(key, &header, &[value]));
            (Some(change), GetOutcome::Hit)
        });
        written.unwrap_or(GetOutcome::Failed)
    }
    /// Visits up to `items` live items in key order, after the key `after`
    /// (from the first: `None`); where the next part starts, if any.
    pub(super) fn scan_items(
        &self,
        after: Option<&[u8]>,
        items: usize,
        visit: &mut dyn FnMut(&ItemInfo<'_>),
    ) -> heed::Result<Option<ScanCursor>> {
        let txn = self.env.read_txn()?;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let (mut left, mut examined) = (items, crate::scan_examined(items));
        let mut last = after;
        for entry in self.items.range(&txn, &(from, Bound::Unbounded))? {
            let (key, bytes) = entry?;
            if left == 0 || examined == 0 {
                return Ok(Some(ScanCursor([&[1], last.unwrap_or_default()].concat())));
            }
            (last, examined) = (Some(key), examined - 1);
            let Some(Old {
                header, value_len, ..
            }) = Old::of(bytes).filter(|old| self.alive(&old.header))
            else {
                continue;
            };
            left -= 1;
            let hash = self.pending.item_hash(key);
            visit(&ItemInfo {
                key,
                ttl: self.ttl(header.expiry_unix),
                idle_seconds: self.accesses.idle_seconds(hash, self.clock.now()),
                cas: header.cas,
                fetched: self.fetched(hash, &header),
                class: self.class_of(key, value_len),
                size: item_size(key, value_len),
                value_len,
            });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use crate::disk::{DiskConfig, DiskStore};
    use crate::{AckFence, GetOptions, Store, StoreCommand, StoreMode};

    fn set(store: &DiskStore, key: &[u8]) {
        let command = StoreCommand {
            mode: StoreMode::Set,
            key,
            value: b"v",
            flags: 0,
            expiry: 0,
            compare_cas: None,
            stale_if_older: false,
        };
        store.store(&command, &AckFence::default());
    }

    /// A plain get: whether it found the item read before.
    fn fetched_before(store: &DiskStore, key: &[u8]) -> Option<bool> {
        let mut seen = None;
        let options = GetOptions::default();
        store.get(key, &options, &AckFence::default(), &mut |item| {
            seen = Some(item.fetched_before)
        });
        seen
    }

    #[test]
    fn a_read_of_an_item_known_read_leaves_the_tag_of_a_key_sharing_its_slot() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
        let inner = &store.inner;
        let slot_of = |key: &[u8]| inner.accesses.slot(inner.pending.item_hash(key));
        let other = (0..)
            .map(|n| format!("b{n}"))
            .find(|key| slot_of(key.as_bytes()) == slot_of(b"a"))
            .unwrap();
        let other = other.as_bytes();
        // `other` read before its record is applied: the fetched bit goes
        // into LMDB with it.
        set(&store, other);
        assert_eq!(fetched_before(&store, other), Some(false));
        store.wait_until_all_applied();
        set(&store, b"a");
        assert_eq!(fetched_before(&store, b"a"), Some(false));
        assert_eq!(fetched_before(&store, other), Some(true));
        assert_eq!(
            fetched_before(&store, b"a"),
            Some(true),
            "reading an item known read took the slot"
        );
    }
}
