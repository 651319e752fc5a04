//! When each item was last stored or read, nearly: what memcached's `mg …
//! l`, `me` and `lru_crawler metadump` report as seconds since the last
//! access. The disk engine's items carry no access time (a read would have
//! to write); instead a table in memory holds a server-clock second per
//! slot, a slot per key hash, and every store and read writes its key's
//! slot. Keys that share a slot show the later access of either: an item
//! may look more recently used than it is (memcached's own is coarse too:
//! it moves an item's time at most once a minute). What happened before
//! this process started is not known: such an item counts as accessed at
//! the start.

use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of memory budget per slot: 4 bytes a slot, 0.4 % of the budget.
const BUDGET_PER_SLOT: usize = 1024;
const MIN_SLOTS: usize = 1 << 16;
const MAX_SLOTS: usize = 1 << 24;

pub(super) struct AccessTimes {
    /// Server-clock seconds of the last access; 0 for none since start.
    slots: Box<[AtomicU32]>,
    started: u32,
}

impl AccessTimes {
    pub(super) fn new(memory_budget: usize, now: u32) -> AccessTimes {
        let count = (memory_budget / BUDGET_PER_SLOT)
            .clamp(MIN_SLOTS, MAX_SLOTS)
            .next_power_of_two();
        AccessTimes {
            slots: (0..count).map(|_| AtomicU32::new(0)).collect(),
            started: now,
        }
    }

    fn slot(&self, key_hash: u64) -> &AtomicU32 {
        // Bits 32 and up, where the pending table's shard comes from too
        // (`shard_of`): harmless, the slots are one table, not one a shard.
        &self.slots[(key_hash >> 32) as usize & (self.slots.len() - 1)]
    }

    /// The key of `key_hash` was stored or read at `now`.
    pub(super) fn note(&self, key_hash: u64, now: u32) {
        // A plain store: the table is larger than the CPU's caches, and a
        // load to compare first would stall each write on a cache miss (a
        // store does not; `docs/BENCHMARKS.md`).
        self.slot(key_hash).store(now, Ordering::Relaxed);
    }

    /// Seconds since the key of `key_hash` was last stored or read.
    pub(super) fn idle_seconds(&self, key_hash: u64, now: u32) -> u32 {
        let at = self.slot(key_hash).load(Ordering::Relaxed);
        now.saturating_sub(if at == 0 { self.started } else { at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_resets_the_idle_time_and_the_unknown_past_counts_from_the_start() {
        let times = AccessTimes::new(0, 100);
        assert_eq!(times.slots.len(), MIN_SLOTS);
        let key = 0xdead_beef_0000_0001;
        assert_eq!(times.idle_seconds(key, 130), 30, "not seen since start");
        times.note(key, 120);
        assert_eq!(times.idle_seconds(key, 130), 10);
        times.note(key, 130);
        assert_eq!(times.idle_seconds(key, 130), 0);
        assert_eq!(times.idle_seconds(key, 125), 0, "a clock never runs back");
    }

    #[test]
    fn the_table_grows_with_the_budget_within_its_bounds() {
        assert_eq!(AccessTimes::new(1 << 30, 1).slots.len(), 1 << 20);
        assert_eq!(AccessTimes::new(usize::MAX, 1).slots.len(), MAX_SLOTS);
    }
}
