//! Writes not yet in LMDB.
//!
//! Workers never wait for LMDB's single writer: a write lands here (under
//! its key's shard lock, which also makes read-modify-writes such as incr
//! and append atomic), the thread leading the next append (the writer, or
//! a worker) journals it with its group, and the applier later puts many
//! groups into LMDB in one round. Reads look here first, so a write is
//! visible at once.
//!
//! Each shard keeps four generations. `fresh` takes the writes; when an
//! append starts a group it swaps `fresh` for an empty map and shares the
//! old one as `appending`, which nobody changes. Once the group is in the
//! journal its writes move into `logged` (a newer write of a key replaces
//! the older). The applier swaps `logged` out as `applying`, and drops it
//! once LMDB has committed it: LMDB now answers for those keys, and a newer
//! write of one is in a younger generation. Reads look from the youngest to
//! the oldest. A write is never copied, and never looked up again to be
//! retired: the swaps and the drops are one step per shard.
//!
//! Each shard also keeps a read cache of committed records
//! (`read_cache.rs`) under the same lock: a record enters it only while
//! the key has no pending write, and every write of the key removes it, so
//! the cache never holds anything older than LMDB's newest commit of that
//! key.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::log_format::Location;
use super::read_cache::{entry_charge, ReadCache, MAX_CACHED_RECORD};
use super::record::{self, Header, Keyed, Space};

/// Shards for each worker thread, from 8 to 64 in all: enough that
/// workers seldom want the same one, few enough that a worker's shards stay
/// in its CPU's caches between its writes to each. One worker with 64
/// shards paid about 4 % more CPU per 1–10 KB set than with 8
/// (`docs/decisions/disk-sets-budget.md`, "Fewer shards").
const SHARDS_PER_WORKER: usize = 8;
const MIN_SHARDS: usize = 8;
const MAX_SHARDS: usize = 64;
/// A shard's emptied map is kept for its next round unless it grew past
/// this many entries (a burst should not pin its memory).
const SPARE_MAP_ENTRIES: usize = 16 * 1024;

/// The shard of a key's hash. Middle bits: the shard's tables probe with
/// the same hash, and hashbrown takes the bucket from the low bits and the
/// tag from the top seven, so shard bits taken from either end would crowd
/// every key of a shard into a fraction of the buckets or share one tag.
fn shard_of(hash: u64, shards: usize) -> usize {
    (hash >> 32) as usize & (shards - 1)
}

/// How many shards a table used by `workers` threads has (a power of two).
fn shard_count(workers: usize) -> usize {
    (workers.saturating_mul(SHARDS_PER_WORKER))
        .clamp(MIN_SHARDS, MAX_SHARDS)
        .next_power_of_two()
}

/// Mixed into a row key's hash, so rows and items with the same bytes
/// spread over shards independently.
const ROW_HASH_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// A write to a key, as a worker hands it over and as it is held.
#[derive(Debug, Clone)]
pub enum Change {
    /// The key's new record (header and value, as stored), with the key.
    Put(Keyed),
    /// The key's removal.
    Remove(Box<[u8]>),
}

impl Change {
    fn key(&self) -> &[u8] {
        match self {
            Change::Put(keyed) => keyed.key(),
            Change::Remove(key) => key,
        }
    }
}

/// A pending write as it is held: its hash (so moving the entry from map
/// to map never hashes the key again) and the change.
#[derive(Clone)]
struct Entry {
    hash: u64,
    space: Space,
    /// The write's sequence number.
    seq: u64,
    held: Change,
}

/// A pending write, as reads and the append see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending<'a> {
    /// The key's new record.
    Put(&'a [u8]),
    Remove,
}

impl Entry {
    /// The full hash first: the table matches 7 bits of it, and the key
    /// compare reads another allocation.
    fn is(&self, hash: u64, space: Space, key: &[u8]) -> bool {
        self.hash == hash && self.space == space && self.held.key() == key
    }

    fn pending(&self) -> Pending<'_> {
        match &self.held {
            Change::Put(keyed) => Pending::Put(keyed.record()),
            Change::Remove(_) => Pending::Remove,
        }
    }

    fn charge(&self) -> usize {
        match &self.held {
            Change::Put(keyed) => entry_charge(keyed.key(), keyed.record().len()),
            Change::Remove(key) => entry_charge(key, 0),
        }
    }
}

/// Pending writes by key, looked up with the hash the shard's lock computed.
type Entries = HashTable<Entry>;

/// Puts `entry` in `map` in place of the key's older one; returns what the
/// older one was charged (0: none).
fn replace(map: &mut Entries, entry: Entry) -> usize {
    let (hash, space) = (entry.hash, entry.space);
    match map.find_mut(hash, |old| old.is(hash, space, entry.held.key())) {
        Some(old) => std::mem::replace(old, entry).charge(),
        None => {
            map.insert_unique(hash, entry, |entry| entry.hash);
            0
        }
    }
}

/// One shard: the writes since the last drain, the ones being journalled,
/// those journalled and waiting for LMDB, those being applied to LMDB, and
/// the read cache. Reads look in that order: newest first.
#[derive(Default)]
struct ShardState {
    fresh: Entries,
    /// Bytes charged for `fresh`.
    fresh_bytes: usize,
    appending: Option<Arc<Entries>>,
    /// Journalled (acknowledged) writes the applier has not taken yet; the
    /// newest write of a key replaces an older one here.
    logged: Entries,
    logged_bytes: usize,
    /// Usually one map; more only while a failed transaction is retried
    /// with the writes logged since (oldest first).
    applying: Vec<Arc<Entries>>,
    /// An emptied map for the next drain, so maps do not regrow each round.
    spare: Option<Entries>,
    cache: ReadCache,
}

impl ShardState {
    /// The key's newest pending write, youngest generation first, and
    /// whether it is journalled (not in `fresh` or `appending`).
    #[inline]
    fn newest<'s>(&'s self, hash: u64, space: Space, key: &[u8]) -> Option<(&'s Entry, bool)> {
        let find = |map: &'s Entries| map.find(hash, |entry| entry.is(hash, space, key));
        if let Some(entry) = find(&self.fresh).or_else(|| find(self.appending.as_ref()?)) {
            return Some((entry, false));
        }
        find(&self.logged)
            .or_else(|| self.applying.iter().rev().find_map(|map| find(map)))
            .map(|entry| (entry, true))
    }
}

/// The writes one journal group carries (every shard's `fresh` map at the
/// drain), or one LMDB transaction (every shard's `logged` map).
pub struct Batch {
    /// The sequence number up to which every write is in this batch (or,
    /// for an apply, in this one or an earlier one).
    pub through: u64,
    /// A drain's batch may hold writes numbered after `through` (made while
    /// it walked the shards), none after this: if its append fails, every
    /// write up to here is failed. (An apply's: `through`, unused.)
    pub newest: u64,
    maps: Vec<(usize, Arc<Entries>)>,
    bytes: usize,
}

impl Batch {
    /// The batch's writes, in no particular order.
    pub fn writes(&self) -> impl Iterator<Item = (Space, &[u8], Pending<'_>)> {
        self.maps.iter().flat_map(|(_, map)| {
            map.iter()
                .map(|entry| (entry.space, entry.held.key(), entry.pending()))
        })
    }

    pub fn len(&self) -> usize {
        self.maps.iter().map(|(_, map)| map.len()).sum()
    }
}

pub struct PendingWrites {
    shards: Box<[Mutex<ShardState>]>,
    hasher: foldhash::fast::FixedState,
    last_seq: AtomicU64,
    /// Set by every write, cleared by the append that drains.
    dirty: AtomicBool,
    /// Bytes held by pending writes of every generation.
    bytes: AtomicUsize,
    /// Bytes held by `logged` maps.
    logged_bytes: AtomicUsize,
    /// Bytes each shard's read cache may hold.
    cache_budget_per_shard: usize,
}

/// A locked shard, for reading and writing the key it was locked for
/// (the methods take the key again, and use the hash computed at the lock).
pub struct Shard<'a> {
    state: MutexGuard<'a, ShardState>,
    owner: &'a PendingWrites,
    hash: u64,
    space: Space,
}

impl Shard<'_> {
    /// The hash of the key this shard was locked for.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The key's newest pending write, of any generation, for a read whose
    /// reply shows the write: one not journalled yet (so not acknowledged:
    /// it may still fail) raises `fence` to its number, and the reply waits
    /// for it as the writer's own does.
    pub fn get_for_reply(&self, key: &[u8], fence: &crate::AckFence) -> Option<Pending<'_>> {
        debug_assert_eq!(self.owner.hash(self.space, key), self.hash);
        let (entry, journalled) = self.state.newest(self.hash, self.space, key)?;
        if !journalled {
            fence.raise(entry.seq);
        }
        Some(entry.pending())
    }

    /// The committed record of `key`, if it is cached.
    pub fn cached(&self, key: &[u8]) -> Option<&[u8]> {
        self.state.cache.get(self.hash, self.space, key)
    }

    /// Caches a record just read from LMDB (or the log), if it is small
    /// enough and the doorkeeper admits it (see the module's notes). The
    /// caller holds this shard's lock since it found no pending write of
    /// `key`, before reading LMDB.
    pub fn cache(&mut self, key: &[u8], record: &[u8]) {
        let budget = self.owner.cache_budget_per_shard;
        if record.len() <= MAX_CACHED_RECORD && budget > 0 && self.state.cache.admit(self.hash) {
            (self.state.cache).insert(self.hash, self.space, Keyed::new(key, record), budget);
        }
    }

    /// Records a write; returns its sequence number.
    pub fn put(&mut self, change: Change) -> u64 {
        debug_assert_eq!(self.owner.hash(self.space, change.key()), self.hash);
        let seq = self.owner.next_seq();
        let (hash, space) = (self.hash, self.space);
        let entry = Entry {
            hash,
            space,
            seq,
            held: change,
        };
        let added = entry.charge();
        self.state.cache.remove(hash, space, entry.held.key());
        let removed = replace(&mut self.state.fresh, entry);
        self.state.fresh_bytes = self.state.fresh_bytes + added - removed;
        // One update (wrapping: the older write may weigh more).
        (self.owner.bytes).fetch_add(added.wrapping_sub(removed), Ordering::Relaxed);
        self.owner.dirty.store(true, Ordering::Release);
        seq
    }
}

impl PendingWrites {
    /// `cache_budget`: bytes of committed records kept for reads (0: none);
    /// `workers`: the threads that serve requests.
    pub fn new(cache_budget: usize, workers: usize) -> Self {
        let shards = shard_count(workers);
        PendingWrites {
            shards: (0..shards).map(|_| Mutex::default()).collect(),
            hasher: foldhash::fast::FixedState::default(),
            last_seq: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            bytes: AtomicUsize::new(0),
            logged_bytes: AtomicUsize::new(0),
            cache_budget_per_shard: cache_budget / shards,
        }
    }

    /// Locks the shard of the item `key`.
    pub fn lock(&self, key: &[u8]) -> Shard<'_> {
        self.lock_in(Space::Item, key)
    }

    /// Locks the shard of a key of `space`.
    pub fn lock_in(&self, space: Space, key: &[u8]) -> Shard<'_> {
        let hash = self.hash(space, key);
        Shard {
            state: self.shards[shard_of(hash, self.shards.len())].lock(),
            owner: self,
            hash,
            space,
        }
    }

    /// Drops the cached record of the item `key`, once LMDB no longer
    /// holds it.
    pub fn forget_cached(&self, key: &[u8]) {
        let mut shard = self.lock(key);
        shard.state.cache.remove(shard.hash, Space::Item, key);
    }

    /// The hash of the item key `key`, as its shard and `accesses.rs` use it.
    pub fn item_hash(&self, key: &[u8]) -> u64 {
        self.hash(Space::Item, key)
    }

    fn hash(&self, space: Space, key: &[u8]) -> u64 {
        let hash = self.hasher.hash_one(key);
        match space {
            Space::Item => hash,
            Space::Row => hash.rotate_left(29) ^ ROW_HASH_SALT,
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
            (bytes + state.cache.bytes(), records + state.cache.len())
        })
    }

    /// Empties the read caches (after a flush, whose records are all dead).
    pub fn clear_cache(&self) {
        for shard in self.shards.iter() {
            shard.lock().cache = ReadCache::default();
        }
    }

    /// Takes every fresh write for a journal group; they stay readable as
    /// `appending` until [`merge_logged`](Self::merge_logged). The batch's `through`
    /// is the sequence number up to which every write is in it: a write
    /// takes its number under its shard's lock, so one numbered before this
    /// call is in the map swapped out once that shard is locked here. Its
    /// `newest` is read after the walk, so it bounds every write taken.
    pub fn drain(&self) -> Batch {
        self.dirty.store(false, Ordering::Release);
        let mut batch = self.take_maps(self.last_seq(), |state| {
            if state.fresh.is_empty() {
                return None;
            }
            debug_assert!(state.appending.is_none(), "the last batch is retired");
            let spare = state.spare.take().unwrap_or_default();
            let map = Arc::new(std::mem::replace(&mut state.fresh, spare));
            state.appending = Some(map.clone());
            Some((map, std::mem::take(&mut state.fresh_bytes)))
        });
        batch.newest = self.last_seq();
        batch
    }

    /// A batch of the maps `take` takes from each shard (with the bytes
    /// charged for them), every write up to `through` in it.
    fn take_maps(
        &self,
        through: u64,
        mut take: impl FnMut(&mut ShardState) -> Option<(Arc<Entries>, usize)>,
    ) -> Batch {
        let mut batch = Batch {
            through,
            newest: through,
            maps: Vec::new(),
            bytes: 0,
        };
        for (index, shard) in self.shards.iter().enumerate() {
            if let Some((map, bytes)) = take(&mut shard.lock()) {
                batch.bytes += bytes;
                batch.maps.push((index, map));
            }
        }
        batch
    }

    /// Moves a journalled batch into the shards' `logged` maps, where it
    /// waits for the applier; a newer write of a key replaces the older.
    /// The journal holds each write at its offset in `offsets` (in the order
    /// of [`Batch::writes`]) from the group's `start`. A value of a length
    /// `keeps_in_log` is dropped from memory: the entry keeps a pointer to it
    /// in the journal instead (the record LMDB will get), so large values do
    /// not fill the pending memory and force small rounds.
    pub fn merge_logged(
        &self,
        batch: Batch,
        start: Location,
        offsets: &[u64],
        keeps_in_log: impl Fn(usize) -> bool,
    ) {
        debug_assert!(offsets.is_empty() || offsets.len() == batch.len());
        let mut replaced = 0;
        let mut shrunk = 0;
        let mut offsets = offsets.iter();
        for (index, map) in batch.maps {
            let mut state = self.shards[index].lock();
            drop(state.appending.take());
            // The writer held the only other reference: the map is ours.
            let mut map = Arc::unwrap_or_clone(map);
            // Unchanged since the batch was encoded: the same order (and
            // without offsets, no pointers).
            for (entry, &offset) in map.iter_mut().zip(&mut offsets) {
                // Rows live in LMDB whole, never in the log.
                let (Space::Item, Change::Put(keyed)) = (entry.space, &mut entry.held) else {
                    continue;
                };
                let at = Location::new(start.segment, start.offset + offset);
                let pointed =
                    record::pointer_for_put(keyed.key(), keyed.record(), at, &keeps_in_log);
                if let Some(pointed) = pointed {
                    shrunk += keyed.record().len() - pointed.len();
                    *keyed = Keyed::new(keyed.key(), &pointed);
                }
            }
            for entry in map.drain() {
                let added = entry.charge();
                let removed = replace(&mut state.logged, entry);
                state.logged_bytes = state.logged_bytes + added - removed;
                replaced += removed;
            }
            if map.capacity() <= SPARE_MAP_ENTRIES {
                state.spare = Some(map);
            }
        }
        self.bytes.fetch_sub(replaced + shrunk, Ordering::Relaxed);
        let logged = (batch.bytes - shrunk).wrapping_sub(replaced);
        self.logged_bytes.fetch_add(logged, Ordering::Relaxed);
    }

    /// Bytes of journalled writes waiting for the applier.
    pub fn logged_bytes(&self) -> usize {
        self.logged_bytes.load(Ordering::Relaxed)
    }

    /// Takes every journalled write for one LMDB transaction; they stay
    /// readable as `applying` until [`retire_applied`](Self::retire_applied).
    /// `through`: every write numbered up to it was journalled before.
    pub fn take_logged(&self, through: u64) -> Batch {
        let batch = self.take_maps(through, |state| {
            if state.logged.is_empty() {
                return None;
            }
            let map = Arc::new(std::mem::take(&mut state.logged));
            state.applying.push(map.clone());
            Some((map, std::mem::take(&mut state.logged_bytes)))
        });
        self.logged_bytes.fetch_sub(batch.bytes, Ordering::Relaxed);
        batch
    }

    /// Forgets writes LMDB now holds (every `applying` map): reads of their
    /// keys go to LMDB, or to a newer pending write. A record worth caching
    /// (`worth_caching(hash, header)`: alive, and read while pending or
    /// carrying the fetched bit) moves into the read cache, with its fetched
    /// bit set, unless a newer write of its key is pending.
    pub fn retire_applied(
        &self,
        batches: Vec<Batch>,
        worth_caching: impl Fn(u64, &Header) -> bool,
    ) {
        let promote = batches.len() == 1 && self.cache_budget_per_shard > 0;
        let budget = self.cache_budget_per_shard;
        for batch in batches {
            for (index, map) in batch.maps {
                let mut guard = self.shards[index].lock();
                // Each map `applying` holds is in one of the batches too: this
                // frees none of them.
                guard.applying.clear();
                if !promote {
                    // `map` is freed after `guard`, outside the lock.
                    continue;
                }
                // The shard held the only other reference: the map is ours.
                let mut map = Arc::unwrap_or_clone(map);
                let mut freed = Vec::new();
                // Cached if it was read and no newer write is pending
                // (`applying` is taken), its value in place.
                let wanted = |hash, keyed: &Keyed, state: &ShardState| {
                    record::value_in_place(keyed.record()).is_some_and(|(header, _)| {
                        keyed.record().len() <= MAX_CACHED_RECORD
                            && worth_caching(hash, &header)
                            && state.newest(hash, Space::Item, keyed.key()).is_none()
                    })
                };
                for entry in map.drain() {
                    match entry.held {
                        Change::Put(mut keyed)
                            if entry.space == Space::Item && wanted(entry.hash, &keyed, &guard) =>
                        {
                            record::set_bits(keyed.record_mut(), record::FETCHED);
                            guard.cache.insert(entry.hash, Space::Item, keyed, budget);
                        }
                        _ => freed.push(entry),
                    }
                }
                drop(guard);
                drop(freed);
            }
            self.bytes.fetch_sub(batch.bytes, Ordering::Relaxed);
        }
    }

    /// Drops a batch whose journal append failed: it was never acknowledged,
    /// and reads go back to what was there before it.
    pub fn drop_failed(&self, batch: Batch) {
        for (index, map) in batch.maps {
            let shared = self.shards[index].lock().appending.take();
            drop((shared, map));
        }
        self.bytes.fetch_sub(batch.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::super::read_cache::ENTRY_OVERHEAD;
    use super::*;

    /// Where a batch lands when no test reads it.
    const NOWHERE: Location = Location {
        segment: 0,
        offset: 0,
    };

    /// What a reader with nothing to wait for sees pending under `key`.
    fn pending_of<'a>(shard: &'a Shard<'_>, key: &[u8]) -> Option<Pending<'a>> {
        shard.get_for_reply(key, &crate::AckFence::default())
    }

    fn put_of(shard: &Shard<'_>, key: &[u8]) -> Option<Vec<u8>> {
        match pending_of(shard, key)? {
            Pending::Put(record) => Some(record.to_vec()),
            Pending::Remove => None,
        }
    }

    fn put(key: &[u8], record: &[u8]) -> Change {
        Change::Put(Keyed::new(key, record))
    }

    #[test]
    fn a_row_and_an_item_with_the_same_bytes_are_two_keys() {
        let pending = PendingWrites::new(0, 1);
        pending.lock(b"k").put(put(b"k", b"item"));
        pending.lock_in(Space::Row, b"k").put(put(b"k", b"row"));
        assert_eq!(put_of(&pending.lock(b"k"), b"k"), Some(b"item".to_vec()));
        assert_eq!(
            put_of(&pending.lock_in(Space::Row, b"k"), b"k"),
            Some(b"row".to_vec())
        );
        pending
            .lock_in(Space::Row, b"k")
            .put(Change::Remove(b"k"[..].into()));
        let batch = pending.drain();
        let mut writes: Vec<_> = batch
            .writes()
            .map(|(space, _, change)| (space, change))
            .collect();
        writes.sort_by_key(|(space, _)| *space == Space::Row);
        assert_eq!(
            writes,
            [
                (Space::Item, Pending::Put(b"item")),
                (Space::Row, Pending::Remove)
            ]
        );
        pending.merge_logged(batch, NOWHERE, &[], |_| false);
        assert_eq!(put_of(&pending.lock(b"k"), b"k"), Some(b"item".to_vec()));
        assert_eq!(
            pending_of(&pending.lock_in(Space::Row, b"k"), b"k"),
            Some(Pending::Remove)
        );
    }

    #[test]
    fn writes_stay_readable_through_every_generation_and_newer_ones_win() {
        let pending = PendingWrites::new(0, 1);
        pending.lock(b"a").put(Change::Remove(b"a"[..].into()));
        pending.lock(b"b").put(put(b"b", &[1; 20]));
        let batch = pending.drain();
        assert_eq!(batch.through, 2);
        assert_eq!(batch.len(), 2);
        assert!(!pending.is_dirty());
        assert_eq!(pending_of(&pending.lock(b"a"), b"a"), Some(Pending::Remove));
        assert_eq!(put_of(&pending.lock(b"b"), b"b"), Some(vec![1; 20]));
        // "b" is written again while its group is journalled: the new write
        // wins now, and after the group moves to `logged`.
        pending.lock(b"b").put(put(b"b", &[2; 5]));
        assert_eq!(put_of(&pending.lock(b"b"), b"b"), Some(vec![2; 5]));
        pending.merge_logged(batch, NOWHERE, &[], |_| false);
        assert_eq!(pending_of(&pending.lock(b"a"), b"a"), Some(Pending::Remove));
        assert_eq!(put_of(&pending.lock(b"b"), b"b"), Some(vec![2; 5]));
        let next = pending.drain();
        assert_eq!((next.through, next.len()), (3, 1));
        pending.merge_logged(next, NOWHERE, &[], |_| false);
        // The newer write of "b" replaced the older one in `logged`.
        assert_eq!(pending.logged_bytes(), 1 + 1 + 5 + 2 * ENTRY_OVERHEAD);
        assert_eq!(pending.bytes(), pending.logged_bytes());
        let applying = pending.take_logged(3);
        assert_eq!((applying.through, applying.len()), (3, 2));
        assert_eq!(pending.logged_bytes(), 0);
        // Still readable while LMDB takes them; a newer write wins.
        pending.lock(b"a").put(put(b"a", &[3; 2]));
        assert_eq!(put_of(&pending.lock(b"a"), b"a"), Some(vec![3; 2]));
        assert_eq!(put_of(&pending.lock(b"b"), b"b"), Some(vec![2; 5]));
        pending.retire_applied(vec![applying], |_, _| false);
        assert!(pending_of(&pending.lock(b"b"), b"b").is_none());
        assert_eq!(put_of(&pending.lock(b"a"), b"a"), Some(vec![3; 2]));
        let failed = pending.drain();
        pending.drop_failed(failed);
        assert!(pending_of(&pending.lock(b"a"), b"a").is_none());
        assert_eq!(pending.bytes(), 0);
    }

    #[test]
    fn each_worker_has_eight_shards_within_eight_to_sixty_four() {
        let shards = |workers| PendingWrites::new(0, workers).shards.len();
        assert_eq!([shards(0), shards(1), shards(2), shards(3)], [8, 8, 16, 32]);
        assert_eq!([shards(8), shards(1024), shards(usize::MAX)], [64, 64, 64]);
    }

    #[test]
    fn every_write_numbered_up_to_a_batchs_through_is_in_it_or_an_earlier_one() {
        let pending = PendingWrites::new(0, 4);
        let writers = 4;
        let per_writer = 5_000;
        let (seqs, batches) = std::thread::scope(|scope| {
            let writing: Vec<_> = (0..writers)
                .map(|writer| {
                    let pending = &pending;
                    scope.spawn(move || {
                        (0..per_writer)
                            .map(|n| {
                                let key = format!("w{writer}-{n}").into_bytes();
                                let seq = pending.lock(&key).put(put(&key, b"v"));
                                (key, seq)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut batches = Vec::new();
            let mut taken = 0;
            while taken < writers * per_writer {
                let batch = pending.drain();
                let keys: Vec<Vec<u8>> = batch.writes().map(|(_, key, _)| key.to_vec()).collect();
                taken += keys.len();
                if keys.is_empty() {
                    std::thread::yield_now();
                }
                batches.push((batch.through, keys));
                pending.merge_logged(batch, NOWHERE, &[], |_| false);
            }
            let seqs: Vec<(Vec<u8>, u64)> = writing
                .into_iter()
                .flat_map(|writer| writer.join().unwrap())
                .collect();
            (seqs, batches)
        });
        // The batch each key was taken in.
        let mut taken_in = std::collections::HashMap::new();
        for (index, (_, keys)) in batches.iter().enumerate() {
            for key in keys {
                assert!(taken_in.insert(key.clone(), index).is_none(), "taken twice");
            }
        }
        let throughs: Vec<u64> = batches.iter().map(|(through, _)| *through).collect();
        for (key, seq) in &seqs {
            // The first batch whose `through` counts the write.
            let first = throughs.partition_point(|through| through < seq);
            if first < throughs.len() {
                assert!(
                    taken_in[key] <= first,
                    "write {seq} missing from batch {first}"
                );
            }
        }
    }

    #[test]
    fn a_journalled_large_value_waits_as_a_pointer_to_the_journal() {
        let pending = PendingWrites::new(0, 1);
        let header = Header {
            flags: 3,
            expiry_unix: 0,
            cas: 7,
            bits: 0,
        };
        let large = Keyed::encode(b"big", &header, &[&[5; 4000]]);
        pending.lock(b"big").put(Change::Put(large.clone()));
        pending.lock(b"small").put(put(b"small", &[1; 20]));
        // Enough writes to fill several shards: each one's location must
        // be the one its record was encoded at.
        for i in 0..50 {
            let key = format!("other{i}");
            let record = Keyed::encode(key.as_bytes(), &header, &[&[i as u8; 2000]]);
            pending.lock(key.as_bytes()).put(Change::Put(record));
        }
        let batch = pending.drain();
        let held = pending.bytes();
        let mut offsets = Vec::new();
        let mut expected = std::collections::HashMap::new();
        for (i, (_, key, _)) in batch.writes().enumerate() {
            let at = Location {
                segment: 4,
                offset: 100 * i as u64,
            };
            offsets.push(at.offset);
            expected.insert(key.to_vec(), at);
        }
        let at = expected[&b"big"[..]];
        let start = Location {
            segment: 4,
            offset: 0,
        };
        pending.merge_logged(batch, start, &offsets, |len| len >= 1000);
        for i in 0..50 {
            let key = format!("other{i}");
            let shard = pending.lock(key.as_bytes());
            let Some(Pending::Put(record)) = pending_of(&shard, key.as_bytes()) else {
                panic!("{key} is pending");
            };
            let (kept, value) = Header::decode(record).unwrap();
            let pointer = record::LogPointer::of_stored(&kept, value).unwrap();
            assert_eq!(pointer.at, expected[key.as_bytes()], "{key}");
        }
        let shard = pending.lock(b"big");
        let Some(Pending::Put(record)) = pending_of(&shard, b"big") else {
            panic!("the write is pending");
        };
        let (kept, value) = Header::decode(record).unwrap();
        assert!(kept.has(record::IN_LOG));
        assert_eq!((kept.flags, kept.cas), (3, 7));
        let pointer = record::LogPointer::of_stored(&kept, value).unwrap();
        assert_eq!(pointer.at, at);
        assert_eq!(pointer.value_len, 4000);
        assert_eq!(
            pointer.frame_len as usize,
            crate::disk::log_format::put_len(b"big", large.record().len())
        );
        drop(shard);
        // The small one is kept whole; the memory of the large one is freed.
        assert_eq!(put_of(&pending.lock(b"small"), b"small"), Some(vec![1; 20]));
        assert!(
            pending.bytes() < held - 51 * 1900,
            "{} of {held}",
            pending.bytes()
        );
        assert_eq!(pending.bytes(), pending.logged_bytes());
    }

    #[test]
    fn a_cached_row_and_item_with_the_same_bytes_are_apart() {
        let pending = PendingWrites::new(MAX_SHARDS * 4096, 1);
        // Each admitted on its second miss.
        for _ in 0..2 {
            pending.lock(b"k").cache(b"k", b"item");
            pending.lock_in(Space::Row, b"k").cache(b"k", b"row");
        }
        assert_eq!(pending.lock(b"k").cached(b"k"), Some(&b"item"[..]));
        assert_eq!(
            pending.lock_in(Space::Row, b"k").cached(b"k"),
            Some(&b"row"[..])
        );
        // A write of the row drops the row's copy only.
        pending
            .lock_in(Space::Row, b"k")
            .put(Change::Remove(b"k"[..].into()));
        assert_eq!(pending.lock_in(Space::Row, b"k").cached(b"k"), None);
        assert_eq!(pending.lock(b"k").cached(b"k"), Some(&b"item"[..]));
    }

    #[test]
    fn a_write_removes_the_cached_record_and_a_flush_empties_the_caches() {
        let pending = PendingWrites::new(MAX_SHARDS * 4096, 1);
        let record = vec![7u8; 100];
        pending.lock(b"k").cache(b"k", &record);
        assert_eq!(
            pending.lock(b"k").cached(b"k"),
            None,
            "not on the first miss"
        );
        pending.lock(b"k").cache(b"k", &record);
        assert_eq!(
            pending.lock(b"k").cached(b"k"),
            Some(&record[..]),
            "on the second"
        );
        let no_cache = PendingWrites::new(0, 1);
        for _ in 0..2 {
            no_cache.lock(b"k").cache(b"k", &record);
        }
        assert_eq!(
            no_cache.lock(b"k").cached(b"k"),
            None,
            "no budget, no cache"
        );
        pending.lock(b"k").put(Change::Remove(b"k"[..].into()));
        assert_eq!(pending.lock(b"k").cached(b"k"), None);
        assert_eq!(pending.cache_usage(), (0, 0));
        pending.lock(b"j").cache(b"j", &record);
        pending.lock(b"j").cache(b"j", &record);
        assert_eq!(pending.cache_usage().1, 1);
        pending.clear_cache();
        assert_eq!(pending.cache_usage(), (0, 0));
    }
}
