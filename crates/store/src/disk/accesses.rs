//! When each item was last stored or read, and whether it was read since it
//! was stored, nearly: what memcached's `mg … l` and `h`, `me`, `lru_crawler
//! metadump` (`la=`, `fetch=`) and the `*_unfetched` counters report.
//!
//! The disk engine's items carry neither (a read would have to write, and
//! a first read committed with the next group doubled the applier's work
//! in a read-mostly load). Instead two tables in memory hold a slot per key
//! hash each: the server-clock second of the key's last access, which
//! every store and read writes, and the CAS value (folded to 32 bits) of the
//! item last read there, which only reads of items not known read yet
//! write. An item is fetched when
//! its slot names its CAS, so a key stored again (a new CAS) is unread
//! until it is read; a set touches only the first table.
//!
//! Keys that share a slot show the later access of either, and a read of
//! one makes the other look unread: both are hints, never data (memcached's
//! own access time moves at most once a minute). The tables are not kept
//! across restarts; a record applied while its item was read since it was
//! stored carries the fetched bit into LMDB, which stays.

use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of memory budget per slot: 4 bytes a slot in each table, 0.8 %
/// of the budget in all.
const BUDGET_PER_SLOT: usize = 1024;
const MIN_SLOTS: usize = 1 << 16;
const MAX_SLOTS: usize = 1 << 24;

pub(super) struct Accesses {
    /// Server-clock seconds of the last access; 0 for none since start.
    times: Box<[AtomicU32]>,
    /// The read item's CAS tag ([`tag_of`]); 0 for none.
    reads: Box<[AtomicU32]>,
    started: u32,
}

/// `cas` folded to 32 bits, never 0 (which marks a slot read by none). Not
/// the low half alone: a dual master's stamps keep their milliseconds above
/// bit 24 (`stamp.rs`), and their low half repeats every 256 ms.
fn tag_of(cas: u64) -> u32 {
    ((cas ^ (cas >> 32)) as u32).max(1)
}

impl Accesses {
    pub(super) fn new(memory_budget: usize, now: u32) -> Accesses {
        let count = (memory_budget / BUDGET_PER_SLOT)
            .clamp(MIN_SLOTS, MAX_SLOTS)
            .next_power_of_two();
        let table = || (0..count).map(|_| AtomicU32::new(0)).collect();
        Accesses {
            times: table(),
            reads: table(),
            started: now,
        }
    }

    pub(super) fn slot(&self, key_hash: u64) -> usize {
        // Bits 32 and up, where the pending table's shard comes from too
        // (`shard_of`): harmless, each table serves all shards.
        (key_hash >> 32) as usize & (self.times.len() - 1)
    }

    /// The key of `key_hash` was stored at `now`.
    pub(super) fn stored(&self, key_hash: u64, now: u32) {
        // A plain store: the table is larger than the CPU's caches, and a
        // load to compare first would stall each write on a cache miss (a
        // store does not; `docs/BENCHMARKS.md`).
        self.times[self.slot(key_hash)].store(now, Ordering::Relaxed);
    }

    /// The item `cas` under the key of `key_hash` was read at `now`; a read
    /// without `bump` (`GetOptions::no_bump`) leaves whether it was read.
    pub(super) fn read(&self, key_hash: u64, cas: u64, bump: bool, now: u32) {
        let slot = self.slot(key_hash);
        self.times[slot].store(now, Ordering::Relaxed);
        if bump {
            self.reads[slot].store(tag_of(cas), Ordering::Relaxed);
        }
    }

    /// Whether the item `cas` under the key of `key_hash` was read since
    /// it was stored (in this process).
    pub(super) fn fetched(&self, key_hash: u64, cas: u64) -> bool {
        self.reads[self.slot(key_hash)].load(Ordering::Relaxed) == tag_of(cas)
    }

    /// Every item looks unread: the items were replaced by others whose CAS
    /// values may repeat those read here (a replica's snapshot).
    pub(super) fn forget_reads(&self) {
        for tag in &self.reads {
            tag.store(0, Ordering::Relaxed);
        }
    }

    /// Seconds since the key of `key_hash` was last stored or read.
    pub(super) fn idle_seconds(&self, key_hash: u64, now: u32) -> u32 {
        let at = self.times[self.slot(key_hash)].load(Ordering::Relaxed);
        now.saturating_sub(if at == 0 { self.started } else { at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_resets_the_idle_time_and_the_unknown_past_counts_from_the_start() {
        let accesses = Accesses::new(0, 100);
        assert_eq!(accesses.times.len(), MIN_SLOTS);
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
    fn an_item_is_fetched_once_read_and_a_new_item_of_its_key_is_not() {
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
        assert!(!accesses.fetched(key, 9), "stored again: a new item");
        accesses.read(key, 1 << 32, true, 7);
        assert!(accesses.fetched(key, 1 << 32), "a CAS whose low half is 0");
    }

    #[test]
    fn stamps_256_ms_apart_are_two_items() {
        // `stamp.rs`: milliseconds from bit 24, a counter, the origin's rank.
        let stamp = |millis: u64| millis << 24 | 5;
        let accesses = Accesses::new(0, 1);
        let key = 0x0000_0042_0000_0000;
        accesses.read(key, stamp(1_000_000), true, 2);
        assert!(accesses.fetched(key, stamp(1_000_000)));
        assert!(!accesses.fetched(key, stamp(1_000_256)));
    }

    #[test]
    fn forgotten_reads_leave_every_item_unread_and_the_times_as_they_were() {
        let accesses = Accesses::new(0, 1);
        let key = 0x0000_0007_0000_0000;
        accesses.read(key, 3, true, 5);
        accesses.forget_reads();
        assert!(!accesses.fetched(key, 3));
        assert_eq!(accesses.idle_seconds(key, 6), 1);
    }

    #[test]
    fn the_table_grows_with_the_budget_within_its_bounds() {
        assert_eq!(Accesses::new(1 << 30, 1).times.len(), 1 << 20);
        assert_eq!(Accesses::new(usize::MAX, 1).reads.len(), MAX_SLOTS);
    }
}
