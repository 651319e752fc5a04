//! Committed records recently read, so that a hot read costs one hash
//! lookup instead of a B-tree descent. Each pending shard owns one and
//! touches it only under the shard's lock (`pending.rs` says why what it
//! holds is never older than LMDB).
//!
//! A record is cached on its key's second miss, not its first (a set of
//! recently missed key hashes keeps the door), so a scan or random reads
//! over data larger than the cache do not pay a copy per read. Eviction is
//! first in, first out, by bytes.

use std::collections::VecDeque;

use hashbrown::HashTable;

use super::record::{Keyed, Space};

/// Bookkeeping charged per entry on top of key and record.
pub(super) const ENTRY_OVERHEAD: usize = 64;
/// Larger records are not cached: copying them costs more than a descent.
pub const MAX_CACHED_RECORD: usize = 16 * 1024;
/// Keys missed once that each cache remembers (then it starts over).
const DOORKEEPER_KEYS: usize = 4096;

/// Bytes charged for an entry of the pending table or the read cache.
pub(super) fn entry_charge(key: &[u8], record_len: usize) -> usize {
    key.len() + record_len + ENTRY_OVERHEAD
}

/// A cached committed record, with its key, the key's space and hash.
struct CachedRecord {
    hash: u64,
    space: Space,
    keyed: Keyed,
}

impl CachedRecord {
    fn is(&self, hash: u64, space: Space, key: &[u8]) -> bool {
        self.hash == hash && self.space == space && self.keyed.key() == key
    }
}

/// Committed records recently read, bounded by bytes.
#[derive(Default)]
pub(super) struct ReadCache {
    records: HashTable<CachedRecord>,
    /// Key hashes in insertion order; may name records since removed
    /// (skipped when evicting).
    order: VecDeque<u64>,
    bytes: usize,
    /// Hashes of keys missed once and not cached yet.
    missed_once: hashbrown::HashSet<u64, foldhash::fast::FixedState>,
}

impl ReadCache {
    /// Bytes charged for the records held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    /// The cached record of `key` (of `hash`, in `space`).
    pub(super) fn get(&self, hash: u64, space: Space, key: &[u8]) -> Option<&[u8]> {
        self.records
            .find(hash, |cached| cached.is(hash, space, key))
            .map(|cached| cached.keyed.record())
    }

    pub(super) fn remove(&mut self, hash: u64, space: Space, key: &[u8]) {
        self.remove_where(hash, |cached| cached.is(hash, space, key));
    }

    /// Removes the record of `hash` that `is_it` picks.
    fn remove_where(&mut self, hash: u64, is_it: impl Fn(&CachedRecord) -> bool) {
        if let Ok(found) = self.records.find_entry(hash, is_it) {
            let (cached, _) = found.remove();
            self.bytes -= entry_charge(cached.keyed.key(), cached.keyed.record().len());
        }
    }

    /// Whether a record just missed should be cached: yes on its key's
    /// second miss since the doorkeeper last started over.
    pub(super) fn admit(&mut self, hash: u64) -> bool {
        if self.missed_once.remove(&hash) {
            return true;
        }
        if self.missed_once.len() >= DOORKEEPER_KEYS {
            self.missed_once.clear();
        }
        self.missed_once.insert(hash);
        false
    }

    /// Caches a record within `budget` bytes, evicting the oldest first;
    /// one larger than an eighth of the budget is not cached.
    pub(super) fn insert(&mut self, hash: u64, space: Space, keyed: Keyed, budget: usize) {
        let charge = entry_charge(keyed.key(), keyed.record().len());
        if charge > budget / 8 {
            return;
        }
        while self.bytes + charge > budget {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            // 64-bit hashes: another record with the same one is not worth a key copy.
            self.remove_where(oldest, |cached| cached.hash == oldest);
        }
        self.remove(hash, space, keyed.key());
        let cached = CachedRecord { hash, space, keyed };
        self.records
            .insert_unique(hash, cached, |cached| cached.hash);
        self.bytes += charge;
        self.order.push_back(hash);
        // Writes remove records but leave their hashes in `order`.
        if self.order.len() > 2 * self.records.len() + 64 {
            let records = &self.records;
            self.order
                .retain(|&hash| records.find(hash, |cached| cached.hash == hash).is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(key: &[u8], len: usize) -> Keyed {
        Keyed::new(key, &vec![7; len])
    }

    #[test]
    fn the_oldest_records_leave_first_and_the_cache_keeps_to_its_budget() {
        let mut cache = ReadCache::default();
        let budget = 4096;
        for i in 0..200u64 {
            let key = format!("key{i}");
            cache.insert(i, Space::Item, keyed(key.as_bytes(), 100), budget);
        }
        assert!(cache.bytes() <= budget, "{}", cache.bytes());
        assert!(cache.len() > 10, "{}", cache.len());
        assert_eq!(cache.get(0, Space::Item, b"key0"), None);
        assert!(cache.get(199, Space::Item, b"key199").is_some());
        // A record larger than an eighth of the budget is not cached.
        cache.insert(1000, Space::Item, keyed(b"big", 600), budget);
        assert_eq!(cache.get(1000, Space::Item, b"big"), None);
        // Removed records leave their hashes behind; the order is pruned.
        for i in 150..200u64 {
            cache.remove(i, Space::Item, format!("key{i}").as_bytes());
        }
        assert_eq!(cache.len(), 0);
        assert_eq!(cache.bytes(), 0);
        // Each write of a cached key removes its record but leaves its hash
        // in the order; those are pruned, even when nothing is evicted.
        let mut roomy = ReadCache::default();
        for i in 0..1000u64 {
            roomy.insert(i, Space::Item, keyed(b"k", 10), 1 << 20);
            roomy.remove(i, Space::Item, b"k");
        }
        assert_eq!(roomy.len(), 0);
        assert!(roomy.order.len() <= 64, "{}", roomy.order.len());
    }

    #[test]
    fn the_same_bytes_in_two_spaces_are_two_records() {
        let mut cache = ReadCache::default();
        cache.insert(5, Space::Item, keyed(b"k", 1), 4096);
        cache.insert(5, Space::Row, keyed(b"k", 2), 4096);
        assert_eq!(cache.get(5, Space::Item, b"k").map(<[u8]>::len), Some(1));
        assert_eq!(cache.get(5, Space::Row, b"k").map(<[u8]>::len), Some(2));
        cache.remove(5, Space::Row, b"k");
        assert_eq!(cache.get(5, Space::Row, b"k"), None);
        assert!(cache.get(5, Space::Item, b"k").is_some());
    }

    #[test]
    fn a_key_is_admitted_on_its_second_miss() {
        let mut cache = ReadCache::default();
        assert!(!cache.admit(9));
        assert!(cache.admit(9));
        assert!(!cache.admit(9), "the door starts over for it");
    }
}
