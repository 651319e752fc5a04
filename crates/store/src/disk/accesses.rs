//! When each item was last stored or read, and whether it was read since it
//! was stored, nearly: what memcached's `mg … l` and `h`, `me`, `lru_crawler
//! metadump` (`la=`, `fetch=`) and the `*_unfetched` counters report.
//!
//! The disk engine's items carry neither (a read would have to write, and
//! a first read committed with the next group doubled the applier's work
//! in a read-mostly load). Instead a table in memory holds a slot per key
//! hash: the server-clock second of the last access, and the CAS value of
//! the item last read there (its low 32 bits). Every store and read writes
//! its key's slot. An item is fetched when its slot names its CAS, so a key
//! stored again (a new CAS) is unread until it is read.
//!
//! Keys that share a slot show the later access of either, and a read of
//! one makes the other look unread: both are hints, never data (memcached's
//! own access time moves at most once a minute). The table is not kept
//! across restarts; a record applied while its item was read since it was
//! stored carries the fetched bit into LMDB, which stays.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of memory budget per slot: 8 bytes a slot, 0.8 % of the budget.
const BUDGET_PER_SLOT: usize = 1024;
const MIN_SLOTS: usize = 1 << 16;
const MAX_SLOTS: usize = 1 << 24;

pub(super) struct Accesses {
    /// Per slot: server-clock seconds of the last access (0: none since
    /// start) in the high half, the read item's CAS tag (0: none) in the low.
    slots: Box<[AtomicU64]>,
    started: u32,
}

/// The low 32 bits of `cas`, never 0 (which marks a slot read by none).
fn tag_of(cas: u64) -> u64 {
    (cas & u64::from(u32::MAX)).max(1)
}

impl Accesses {
    pub(super) fn new(memory_budget: usize, now: u32) -> Accesses {
        let count = (memory_budget / BUDGET_PER_SLOT)
            .clamp(MIN_SLOTS, MAX_SLOTS)
            .next_power_of_two();
        Accesses {
            slots: (0..count).map(|_| AtomicU64::new(0)).collect(),
            started: now,
        }
    }

    fn slot(&self, key_hash: u64) -> &AtomicU64 {
        // Bits 32 and up, where the pending table's shard comes from too
        // (`shard_of`): harmless, the slots are one table, not one a shard.
        &self.slots[(key_hash >> 32) as usize & (self.slots.len() - 1)]
    }

    /// The key of `key_hash` was stored at `now`: a new item, unread.
    pub(super) fn stored(&self, key_hash: u64, now: u32) {
        // A plain store: the table is larger than the CPU's caches, and a
        // load to compare first would stall each write on a cache miss (a
        // store does not; `docs/BENCHMARKS.md`).
        self.slot(key_hash)
            .store(u64::from(now) << 32, Ordering::Relaxed);
    }

    /// The item `cas` under the key of `key_hash` was read at `now`; a read
    /// without `bump` (`GetOptions::no_bump`) leaves whether it was read.
    pub(super) fn read(&self, key_hash: u64, cas: u64, bump: bool, now: u32) {
        let slot = self.slot(key_hash);
        let tag = if bump {
            tag_of(cas)
        } else {
            slot.load(Ordering::Relaxed) & u64::from(u32::MAX)
        };
        slot.store(u64::from(now) << 32 | tag, Ordering::Relaxed);
    }

    /// Whether the item `cas` under the key of `key_hash` was read since
    /// it was stored (in this process).
    pub(super) fn fetched(&self, key_hash: u64, cas: u64) -> bool {
        self.slot(key_hash).load(Ordering::Relaxed) & u64::from(u32::MAX) == tag_of(cas)
    }

    /// Seconds since the key of `key_hash` was last stored or read.
    pub(super) fn idle_seconds(&self, key_hash: u64, now: u32) -> u32 {
        let at = (self.slot(key_hash).load(Ordering::Relaxed) >> 32) as u32;
        now.saturating_sub(if at == 0 { self.started } else { at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_resets_the_idle_time_and_the_unknown_past_counts_from_the_start() {
        let accesses = Accesses::new(0, 100);
        assert_eq!(accesses.slots.len(), MIN_SLOTS);
        let key = 0xdead_beef_0000_0001;
        assert_eq!(accesses.idle_seconds(key, 130), 30, "not seen since start");
        accesses.stored(key, 120);
        assert_eq!(accesses.idle_seconds(key, 130), 10);
        accesses.read(key, 5, true, 130);
        assert_eq!(accesses.idle_seconds(key, 130), 0);
        assert_eq!(
            accesses.idle_seconds(key, 125),
            0,
            "a clock never runs back"
        );
    }

    #[test]
    fn an_item_is_fetched_once_read_until_its_key_is_stored_again() {
        let accesses = Accesses::new(0, 1);
        let key = 0x1234_5678_0000_0000;
        accesses.stored(key, 2);
        assert!(!accesses.fetched(key, 7));
        accesses.read(key, 7, false, 3);
        assert!(!accesses.fetched(key, 7), "a read without bump");
        accesses.read(key, 7, true, 4);
        assert!(accesses.fetched(key, 7));
        accesses.read(key, 7, false, 5);
        assert!(accesses.fetched(key, 7), "a read without bump keeps it");
        assert!(!accesses.fetched(key, 8), "another item of the key");
        accesses.stored(key, 6);
        assert!(!accesses.fetched(key, 7), "stored again");
        accesses.read(key, 1 << 32, true, 7);
        assert!(accesses.fetched(key, 1 << 32), "a CAS whose low half is 0");
    }

    #[test]
    fn the_table_grows_with_the_budget_within_its_bounds() {
        assert_eq!(Accesses::new(1 << 30, 1).slots.len(), 1 << 20);
        assert_eq!(Accesses::new(usize::MAX, 1).slots.len(), MAX_SLOTS);
    }
}
