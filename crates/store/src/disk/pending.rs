//! Writes applied but not yet committed to LMDB.
//!
//! Workers never wait for LMDB's single writer: a write lands here (under
//! its key's shard lock, which also makes read-modify-writes such as incr
//! and append atomic) and the writer thread commits everything pending in
//! one transaction. Reads look here first, so a write is visible at once.
//! An entry leaves only after the commit that carried it, and only if no
//! newer write replaced it meanwhile.
//!
//! Each shard also caches committed records that were read (`cache`), so a
//! hot read costs one hash lookup instead of a B-tree descent. A record
//! enters the cache only under its shard's lock, read from LMDB when the key
//! had no pending write, and every write of the key removes it under the
//! same lock: the cache never holds anything older than LMDB's newest
//! commit of that key. A record is cached on its key's second miss, not its
//! first (a set of recently missed key hashes keeps the door), so a scan or
//! random reads over data larger than the cache do not pay a copy per read.
//! Eviction is first in, first out, by bytes.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::{Mutex, MutexGuard};

const SHARDS: usize = 64;
/// Bookkeeping charged per entry on top of key and record.
const ENTRY_OVERHEAD: usize = 64;
/// Larger records are not cached: copying them costs more than a descent.
pub const MAX_CACHED_RECORD: usize = 16 * 1024;
/// Keys missed once that each shard remembers (then it starts over).
const DOORKEEPER_KEYS: usize = 4096;

/// What a pending write does to its key.
#[derive(Debug, Clone)]
pub enum Change {
    /// The key's new record (header and value, as stored).
    Put(Arc<Vec<u8>>),
    Remove,
    /// Sets the fetched bit of the committed record if it is still the item
    /// of that CAS value. Never held in the table: first reads wait in
    /// `marks.rs` and reach the writer as this change.
    MarkFetched {
        cas: u64,
    },
}

#[derive(Debug, Clone)]
pub struct Pending {
    pub change: Change,
    /// Order of the write; the writer acknowledges by sequence.
    pub seq: u64,
    /// Changed since the writer last drained: listed in the shard's queue.
    queued: bool,
}

impl Pending {
    fn charge(&self, key: &[u8]) -> usize {
        let record = match &self.change {
            Change::Put(record) => record.len(),
            Change::Remove | Change::MarkFetched { .. } => 0,
        };
        entry_charge(key, record)
    }
}

/// Bytes charged for an entry of the pending table or the read cache.
fn entry_charge(key: &[u8], record_len: usize) -> usize {
    key.len() + record_len + ENTRY_OVERHEAD
}

/// One pending write taken by the writer for a commit.
pub struct Drained {
    pub key: Arc<[u8]>,
    pub pending: Pending,
}

impl Drained {
    /// A first-read mark for the writer. Sequence 0: no reply waits for it,
    /// and retiring it leaves the table alone.
    pub fn mark(key: Arc<[u8]>, cas: u64) -> Self {
        Drained {
            key,
            pending: Pending {
                change: Change::MarkFetched { cas },
                seq: 0,
                queued: false,
            },
        }
    }
}

type Entries = HashMap<Arc<[u8]>, Pending, foldhash::fast::FixedState>;

/// One shard: its pending writes, and the keys changed since the last
/// drain (so a drain does not walk a table that is mostly committed).
#[derive(Default)]
struct ShardState {
    entries: Entries,
    queue: Vec<Arc<[u8]>>,
    cache: ReadCache,
}

/// Committed records recently read, bounded by bytes.
#[derive(Default)]
struct ReadCache {
    records: HashMap<Arc<[u8]>, Arc<Vec<u8>>, foldhash::fast::FixedState>,
    /// Insertion order; may name keys since removed (skipped when evicting).
    order: VecDeque<Arc<[u8]>>,
    bytes: usize,
    /// Hashes of keys missed once and not cached yet.
    missed_once: hashbrown::HashSet<u64, foldhash::fast::FixedState>,
}

impl ReadCache {
    fn remove(&mut self, key: &[u8]) {
        if let Some(record) = self.records.remove(key) {
            self.bytes -= entry_charge(key, record.len());
        }
    }

    /// Whether a record just missed should be cached: yes on its key's
    /// second miss since the doorkeeper last started over.
    fn admit(&mut self, key: &[u8]) -> bool {
        let hash = self.records.hasher().hash_one(key);
        if self.missed_once.remove(&hash) {
            return true;
        }
        if self.missed_once.len() >= DOORKEEPER_KEYS {
            self.missed_once.clear();
        }
        self.missed_once.insert(hash);
        false
    }

    fn insert(&mut self, key: &[u8], record: Arc<Vec<u8>>, budget: usize) {
        let charge = entry_charge(key, record.len());
        if charge > budget / 8 {
            return;
        }
        while self.bytes + charge > budget {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.remove(&oldest);
        }
        let key: Arc<[u8]> = Arc::from(key);
        if let Some(old) = self.records.insert(key.clone(), record) {
            self.bytes -= entry_charge(&key, old.len());
        }
        self.bytes += charge;
        self.order.push_back(key);
        // Writes remove records but leave their keys in `order`.
        if self.order.len() > 2 * self.records.len() + 64 {
            let records = &self.records;
            self.order.retain(|key| records.contains_key(key));
        }
    }
}

pub struct PendingWrites {
    shards: Box<[Mutex<ShardState>]>,
    hasher: foldhash::fast::FixedState,
    last_seq: AtomicU64,
    /// Set by every write, cleared by the writer when it drains.
    dirty: AtomicBool,
    bytes: AtomicUsize,
    /// Bytes each shard's read cache may hold.
    cache_budget_per_shard: usize,
}

/// A locked shard, for reading and writing the keys that hash to it.
pub struct Shard<'a> {
    state: MutexGuard<'a, ShardState>,
    owner: &'a PendingWrites,
}

impl Shard<'_> {
    pub fn get(&self, key: &[u8]) -> Option<&Pending> {
        self.state.entries.get(key)
    }

    /// The committed record of `key`, if it is cached.
    pub fn cached(&self, key: &[u8]) -> Option<&Arc<Vec<u8>>> {
        self.state.cache.records.get(key)
    }

    /// Whether the record of `key`, just missed, should be cached (see the
    /// module's notes); ask before copying it.
    pub fn admit(&mut self, key: &[u8]) -> bool {
        self.owner.cache_budget_per_shard > 0 && self.state.cache.admit(key)
    }

    /// Caches a record just read from LMDB. The caller holds this shard's
    /// lock since it found no pending write of `key`, before reading LMDB.
    pub fn cache(&mut self, key: &[u8], record: Arc<Vec<u8>>) {
        let budget = self.owner.cache_budget_per_shard;
        self.state.cache.insert(key, record, budget);
    }

    /// Records a write; returns its sequence number.
    pub fn put(&mut self, key: &[u8], change: Change) -> u64 {
        let seq = self.owner.last_seq.fetch_add(1, Ordering::AcqRel) + 1;
        let pending = Pending {
            change,
            seq,
            queued: true,
        };
        let added = pending.charge(key);
        let state = &mut *self.state;
        state.cache.remove(key);
        let removed = match state.entries.get_key_value_mut(key) {
            Some((stored_key, entry)) => {
                if !entry.queued {
                    state.queue.push(stored_key.clone());
                }
                let removed = entry.charge(key);
                *entry = pending;
                removed
            }
            None => {
                let stored_key: Arc<[u8]> = Arc::from(key);
                state.queue.push(stored_key.clone());
                state.entries.insert(stored_key, pending);
                0
            }
        };
        self.owner.bytes.fetch_add(added, Ordering::Relaxed);
        self.owner.bytes.fetch_sub(removed, Ordering::Relaxed);
        self.owner.dirty.store(true, Ordering::Release);
        seq
    }
}

impl PendingWrites {
    /// `cache_budget`: bytes of committed records kept for reads (0: none).
    pub fn new(cache_budget: usize) -> Self {
        PendingWrites {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(ShardState::default()))
                .collect(),
            hasher: foldhash::fast::FixedState::default(),
            last_seq: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            bytes: AtomicUsize::new(0),
            cache_budget_per_shard: cache_budget / SHARDS,
        }
    }

    pub fn lock(&self, key: &[u8]) -> Shard<'_> {
        let index = (self.hasher.hash_one(key) as usize) % SHARDS;
        Shard {
            state: self.shards[index].lock(),
            owner: self,
        }
    }

    /// The newest sequence number handed out.
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Acquire)
    }

    /// A sequence number for an event that is not a key's write (a flush).
    pub fn next_seq(&self) -> u64 {
        self.last_seq.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Bytes held by pending writes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Bytes held by the read caches, and their records.
    pub fn cache_usage(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(bytes, records), shard| {
            let state = shard.lock();
            (
                bytes + state.cache.bytes,
                records + state.cache.records.len(),
            )
        })
    }

    /// Empties the read caches (after a flush, whose records are all dead).
    pub fn clear_cache(&self) {
        for shard in self.shards.iter() {
            shard.lock().cache = ReadCache::default();
        }
    }

    /// Takes a copy of every pending write. Returns the sequence number up to
    /// which every write is among them: a write takes its number under its
    /// shard's lock, so one numbered before this call is visible once that
    /// shard is locked here.
    pub fn drain(&self) -> (u64, Vec<Drained>) {
        self.dirty.store(false, Ordering::Release);
        let through = self.last_seq();
        let mut drained = Vec::new();
        for shard in self.shards.iter() {
            let mut state = shard.lock();
            let state = &mut *state;
            for key in state.queue.drain(..) {
                if let Some(pending) = state.entries.get_mut(&key) {
                    pending.queued = false;
                    drained.push(Drained {
                        key,
                        pending: pending.clone(),
                    });
                }
            }
        }
        (through, drained)
    }

    /// Forgets the writes a commit carried, unless a newer write replaced one.
    pub fn retire(&self, committed: &[Drained]) {
        for done in committed {
            let mut shard = self.lock(&done.key);
            let entries = &mut shard.state.entries;
            if entries
                .get(&done.key[..])
                .is_some_and(|p| p.seq == done.pending.seq)
            {
                if let Some(pending) = entries.remove(&done.key[..]) {
                    self.bytes
                        .fetch_sub(pending.charge(&done.key), Ordering::Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_sees_every_numbered_write_and_retire_keeps_newer_ones() {
        let pending = PendingWrites::new(0);
        pending.lock(b"a").put(b"a", Change::Remove);
        pending
            .lock(b"b")
            .put(b"b", Change::Put(Arc::new(vec![0; 20])));
        let (through, drained) = pending.drain();
        assert_eq!(through, 2);
        assert_eq!(drained.len(), 2);
        assert!(!pending.is_dirty());
        // "b" is written again before the commit lands: it must stay pending.
        pending.lock(b"b").put(b"b", Change::Remove);
        pending.retire(&drained);
        assert!(pending.lock(b"a").get(b"a").is_none());
        assert_eq!(pending.lock(b"b").get(b"b").map(|p| p.seq), Some(3));
        assert_eq!(pending.bytes(), 1 + ENTRY_OVERHEAD);
    }

    #[test]
    fn a_write_removes_the_cached_record_and_the_cache_keeps_to_its_budget() {
        let pending = PendingWrites::new(SHARDS * 4096);
        assert!(!pending.lock(b"k").admit(b"k"), "not on the first miss");
        assert!(pending.lock(b"k").admit(b"k"), "on the second");
        assert!(!PendingWrites::new(0).lock(b"k").admit(b"k"));
        let record = Arc::new(vec![7u8; 100]);
        pending.lock(b"k").cache(b"k", record.clone());
        assert_eq!(pending.lock(b"k").cached(b"k"), Some(&record));
        pending.lock(b"k").put(b"k", Change::Remove);
        assert_eq!(pending.lock(b"k").cached(b"k"), None);
        assert_eq!(pending.cache_usage(), (0, 0));

        // One shard, many records: the oldest leave first, within budget.
        let shard_of_k = {
            let mut keys = Vec::new();
            let mut i = 0u32;
            while keys.len() < 200 {
                let key = format!("key{i}").into_bytes();
                if (pending.hasher.hash_one(&key) as usize) % SHARDS
                    == (pending.hasher.hash_one(b"k") as usize) % SHARDS
                {
                    keys.push(key);
                }
                i += 1;
            }
            keys
        };
        for key in &shard_of_k {
            pending.lock(key).cache(key, record.clone());
        }
        let (bytes, records) = pending.cache_usage();
        assert!(bytes <= 4096, "{bytes}");
        assert!(records > 10, "{records}");
        assert_eq!(pending.lock(&shard_of_k[0]).cached(&shard_of_k[0]), None);
        let last = shard_of_k.last().unwrap();
        assert!(pending.lock(last).cached(last).is_some());
        // A record too large for the budget is not cached.
        pending.lock(b"big").cache(b"big", Arc::new(vec![0; 4096]));
        assert_eq!(pending.lock(b"big").cached(b"big"), None);
        pending.clear_cache();
        assert_eq!(pending.cache_usage(), (0, 0));
    }
}
