//! The memory engine: a cache with a byte budget and least-recently-used
//! eviction across all item sizes.
//!
//! ```text
//!   key ──hash──▶ shard (hash bits 32..) ──▶ Mutex<Shard>
//!                                              ├─ table: HashTable<slot index>
//!                                              ├─ slots: Vec<Slot>   (key+value in one allocation)
//!                                              └─ LRU: doubly linked through slot indices, head = newest
//! ```
//!
//! A write moves its item to the head; a read only marks it, and eviction
//! moves a marked tail to the head instead of evicting it (a second chance,
//! as memcached bumps active items lazily): a get writes to its own slot,
//! not to two random neighbours.
//!
//! Memory is one budget for the whole cache, not pages carved per size class,
//! so large values can never starve small ones of memory (memcached's "slab
//! calcification", seed 001). When the budget is exceeded, the least recently
//! used items are evicted from shard after shard; keys spread evenly over the
//! shards, so each shard's tail is about as old as any other's.
//!
//! No lock is ever taken while another is held: a store inserts under its
//! shard's lock, releases it, then evicts shard by shard.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashTable;
use parking_lot::Mutex;

use crate::classes::{ClassCommand, ClassCommands, SizeClasses, MAX_CLASSES};
use crate::clock::{is_expired, Clock, ExpiryTime};
use crate::delayed_flush::DelayedFlush;
use crate::semantics::{self, ArithPlan, Current, DeletePlan, Expiry, StorePlan, Write};
use crate::semantics::{FETCHED, STALE, WIN_SENT};
use crate::sweep::SweepPace;
use crate::{
    AckFence, ArithCommand, ArithOutcome, ClassStats, DebugView, DeleteCommand, DeleteOutcome,
    EvictionWatcher, FlushOutcome, GetOptions, GetOutcome, ItemInfo, ItemView, ScanCursor,
    ScanFailed, Store, StoreCommand, StoreMode, StoreOutcome, StoreStats,
};

/// Bytes charged per item beyond key and value: the slot, its hash-table
/// entry and the allocator's header. Counting them keeps resident memory
/// close to the limit however small the items are.
pub const ITEM_OVERHEAD: usize = std::mem::size_of::<Slot>() + 8 + 16;

/// Slot index meaning "none" in the LRU links.
const NIL: u32 = u32::MAX;

/// What a kura process holds besides its items (code, thread stacks,
/// buffers, tables), below `docs/DESIGN.md`'s 24 MiB: past `-m`, malloc's
/// slack and this, maintenance gives free heap back.
const RESIDENT_ALLOWANCE: usize = 16 << 20;
/// malloc's slack grows with the items (chunk rounding, free space between
/// live chunks that no whole page can be given back for): 1–10 KB sets
/// under `-m 1024` settle at 1,060 MiB resident. Trimming below that gave
/// back pages the next sets faulted in again, 50,000 a second, a quarter of
/// the worker's CPU on a machine where a fault costs 5 µs.
const MALLOC_SLACK_DIVISOR: usize = 16;

/// The resident size past which maintenance gives free heap back, for an
/// item limit of `limit` bytes.
fn resident_budget(limit: usize) -> u64 {
    (limit + limit / MALLOC_SLACK_DIVISOR + RESIDENT_ALLOWANCE) as u64
}

/// How many slots maintenance inspects under one lock hold.
const MAINTAIN_BATCH: usize = 1024;

/// Seconds before a read moves its item again under the legacy LRU
/// (memcached's `ITEM_UPDATE_INTERVAL`).
const ITEM_UPDATE_INTERVAL: u32 = 60;

/// How many shards holding items each eviction compares, to take the
/// oldest tail among them: an approximation of one LRU over all shards
/// that costs a few uncontended lock round trips per eviction.
const EVICTION_SAMPLE: usize = 4;

/// memcached's starting hash table size, as a power of two.
pub const DEFAULT_HASH_POWER: u32 = 16;

#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// The byte budget for items (`-m`).
    pub limit_bytes: usize,
    /// Evict when full; false answers "out of memory" instead (`-M`).
    pub evict: bool,
    /// The largest value (`-I`): an append or prepend past it is not
    /// stored.
    pub max_value_bytes: usize,
    /// Number of lock stripes; a power of two.
    pub shards: usize,
    pub classes: SizeClasses,
    /// `flush_all` also flushes what is stored later in the second it takes
    /// effect. memcached does this when CAS is off (`-C`): without CAS
    /// values it tells items apart only by the second they were stored in.
    pub flush_whole_second: bool,
    /// The hash table's starting size as memcached reports it
    /// (`hash_power_level`, `-o hashpower`).
    pub hash_power: u32,
    /// `maintain` sweeps for expired items; without it they are reclaimed
    /// only when met (a read, a store, an eviction, `lru_crawler crawl`).
    pub background_sweep: bool,
    /// Items stored with at most this many seconds to live go on a
    /// temporary list that eviction leaves alone while anything else is
    /// left (memcached's TEMP LRU, `-o temporary_ttl`); None: off.
    pub temporary_ttl: Option<u32>,
    /// memcached's legacy LRU (`-o no_modern`): one list for all items,
    /// evicted strictly from its tail, a read moving its item to the head
    /// only if the item was last moved over a minute ago. Otherwise items
    /// are spread over `shards` lists and a read earns a second chance.
    pub strict_lru: bool,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            limit_bytes: 64 << 20,
            evict: true,
            max_value_bytes: 1 << 20,
            shards: 256,
            classes: SizeClasses::default(),
            flush_whole_second: false,
            hash_power: DEFAULT_HASH_POWER,
            background_sweep: true,
            strict_lru: false,
            temporary_ttl: None,
        }
    }
}

pub struct MemoryStore {
    shards: Box<[Padded<Mutex<Shard>>]>,
    shard_shift: u32,
    hasher: foldhash::fast::RandomState,
    clock: Clock,
    classes: SizeClasses,
    evict: bool,
    /// The largest value (`-I`).
    max_value_bytes: usize,
    limit: AtomicUsize,
    /// Bytes charged for all live items (see [`ITEM_OVERHEAD`]).
    used: AtomicUsize,
    /// The last CAS value handed out; every change takes the next one.
    last_cas: AtomicU64,
    /// Items whose CAS is at or below this were flushed.
    flushed_through_cas: AtomicU64,
    /// See [`MemoryConfig::flush_whole_second`].
    flush_whole_second: bool,
    /// Server time of the last whole-second flush: items last stored or
    /// used at or before it are flushed once it has come; 0 when none.
    flushed_second: AtomicU32,
    /// A `flush_all` with a delay.
    delayed_flush: DelayedFlush,
    /// Where the next eviction starts, so shards take turns.
    evict_cursor: AtomicUsize,
    /// Where maintenance resumes.
    maintain_cursor: AtomicUsize,
    /// Shown every eviction while it wants them (`watch evictions`).
    eviction_watcher: std::sync::OnceLock<Arc<dyn EvictionWatcher>>,
    /// memcached's `hash_power_level`: the power of two its single hash
    /// table would have reached, grown once the items pass 1.5 per bucket
    /// and never shrunk. kura's per-shard tables size themselves; this is
    /// the figure memcached's users watch, and a warm restart keeps it.
    hash_power: AtomicU32,
    /// When `maintain` sweeps for expired items (see [`SweepPace`]).
    sweep_pace: SweepPace,
    background_sweep: bool,
    strict_lru: bool,
    temporary_ttl: Option<u32>,
}

/// Keeps each shard's lock on its own cache line.
#[repr(align(128))]
struct Padded<T>(T);

struct Shard {
    table: HashTable<u32>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The items eviction may take, most recently used at the head.
    lru: List,
    /// Temporary items (`-o temporary_ttl`): they expire soon, so eviction
    /// leaves them for their expiry unless nothing else is left.
    temp: List,
    /// Where maintenance resumes in `slots`.
    scan_cursor: usize,
    counters: ShardCounters,
}

/// A doubly linked list of slots, through their `prev` and `next`.
#[derive(Clone, Copy)]
struct List {
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
    };
}

/// Counters kept under the shard lock, so counting costs no atomics.
#[derive(Default)]
struct ShardCounters {
    total_items: u64,
    evictions: u64,
    reclaimed: u64,
    expired_unfetched: u64,
    evicted_unfetched: u64,
    crawler_reclaimed: u64,
    crawler_items_checked: u64,
    /// Reads that found the item expired, or flushed (memcached's
    /// get_expired and get_flushed).
    get_expired: u64,
    get_flushed: u64,
    classes: Vec<ClassCounters>,
}

#[derive(Default, Clone, Copy)]
struct ClassCounters {
    items: u64,
    bytes: u64,
    evicted: u64,
    evicted_nonzero: u64,
    evicted_unfetched: u64,
    expired_unfetched: u64,
    reclaimed: u64,
    crawler_reclaimed: u64,
    outofmemory: u64,
    evicted_time: u32,
    /// Items on the temporary list.
    temp_items: u64,
    commands: ClassCommands,
}

/// One item. A free slot has an empty `data`.
struct Slot {
    /// Key followed by value, in one allocation.
    data: Box<[u8]>,
    hash: u64,
    cas: u64,
    flags: u32,
    expiry: ExpiryTime,
    last_access: u32,
    prev: u32,
    next: u32,
    key_len: u8,
    class: u8,
    bits: u8,
}

/// Read since it was last moved to the front of the LRU. A read only sets
/// this bit; eviction moves such a tail to the front instead of evicting it
/// (a second chance, as memcached's segmented LRU bumps an active item
/// lazily). Moving on every read wrote to two random neighbours per get.
const ACCESSED: u8 = 8;
/// On the temporary list (stored with a time to live of at most
/// `-o temporary_ttl`); fixed for the slot's life.
const TEMP: u8 = 16;

impl Slot {
    fn key(&self) -> &[u8] {
        &self.data[..usize::from(self.key_len)]
    }

    fn value(&self) -> &[u8] {
        &self.data[usize::from(self.key_len)..]
    }

    fn charge(&self) -> usize {
        self.data.len() + ITEM_OVERHEAD
    }

    fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }

    /// What memcached's decisions read of the item.
    fn current(&self) -> Current<'_> {
        Current::new(self.value(), self.flags, self.cas, self.bits)
    }
}

/// Why an item left the cache, for the counters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Removal {
    Deleted,
    Replaced,
    /// Found expired or flushed by a request.
    Expired,
    Evicted,
    /// Removed expired by the background sweep, counted in `reclaimed` as
    /// memcached's LRU maintainer counts the expired items it pulls.
    Swept,
    /// Removed expired by `lru_crawler crawl` (`crawler_reclaimed`).
    Crawled,
}

impl Shard {
    fn new(classes: usize) -> Self {
        Shard {
            table: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            lru: List::EMPTY,
            temp: List::EMPTY,
            scan_cursor: 0,
            counters: ShardCounters {
                classes: vec![ClassCounters::default(); classes + 1],
                ..ShardCounters::default()
            },
        }
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<u32> {
        let slots = &self.slots;
        self.table
            .find(hash, |&i| {
                let slot = &slots[i as usize];
                slot.hash == hash && slot.key() == key
            })
            .copied()
    }

    /// The list a slot is on; its `TEMP` bit is set before it is linked
    /// and kept until it is unlinked.
    fn list_of(&mut self, i: u32) -> &mut List {
        if self.slots[i as usize].has(TEMP) {
            &mut self.temp
        } else {
            &mut self.lru
        }
    }

    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let slot = &self.slots[i as usize];
            (slot.prev, slot.next)
        };
        match prev {
            NIL => self.list_of(i).head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.list_of(i).tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        let old_head = self.list_of(i).head;
        {
            let slot = &mut self.slots[i as usize];
            slot.bits &= !ACCESSED;
            slot.prev = NIL;
            slot.next = old_head;
        }
        match old_head {
            NIL => self.list_of(i).tail = i,
            h => self.slots[h as usize].prev = i,
        }
        self.list_of(i).head = i;
    }

    fn bump(&mut self, i: u32) {
        if self.list_of(i).head != i {
            self.unlink(i);
            self.push_front(i);
        }
    }

    /// What a scan or a watcher sees of a slot.
    fn info(slot: &Slot, now: u32) -> ItemInfo<'_> {
        ItemInfo {
            key: slot.key(),
            ttl: crate::clock::ttl_at(slot.expiry, now),
            idle_seconds: now.saturating_sub(slot.last_access),
            cas: slot.cas,
            fetched: slot.has(FETCHED),
            class: usize::from(slot.class),
            size: slot.charge(),
            value_len: slot.value().len(),
        }
    }

    /// A read: the LRU order is corrected when the item reaches the tail.
    fn note_read(&mut self, i: u32, now: u32) {
        let slot = &mut self.slots[i as usize];
        slot.last_access = now;
        slot.bits |= FETCHED | ACCESSED;
    }

    /// A read under memcached's legacy LRU: the item moves to the head if
    /// it was last moved over `ITEM_UPDATE_INTERVAL` ago, as memcached's
    /// `do_item_bump` does; no second chance at the tail.
    fn note_read_strictly(&mut self, i: u32, now: u32) {
        let slot = &mut self.slots[i as usize];
        slot.bits |= FETCHED;
        if now.saturating_sub(slot.last_access) >= ITEM_UPDATE_INTERVAL {
            slot.last_access = now;
            self.bump(i);
        }
    }

    fn insert(&mut self, slot: Slot) -> u32 {
        let hash = slot.hash;
        let class = usize::from(slot.class);
        let charge = slot.charge() as u64;
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        let slots = &self.slots;
        self.table
            .insert_unique(hash, i, |&j| slots[j as usize].hash);
        self.push_front(i);
        self.counters.total_items += 1;
        let temp = self.slots[i as usize].has(TEMP);
        let class = &mut self.counters.classes[class];
        class.items += 1;
        class.bytes += charge;
        class.temp_items += u64::from(temp);
        i
    }

    /// Removes slot `i`; returns the bytes it was charged.
    fn remove(&mut self, i: u32, why: Removal) -> usize {
        let hash = self.slots[i as usize].hash;
        if let Ok(entry) = self.table.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        self.unlink(i);
        self.free.push(i);
        let slot = &mut self.slots[i as usize];
        let charge = slot.charge();
        let unfetched = !slot.has(FETCHED);
        let had_expiry = slot.expiry != 0;
        let temp = slot.has(TEMP);
        let class_index = usize::from(slot.class);
        slot.data = Box::default();
        let counters = &mut self.counters;
        let class = &mut counters.classes[class_index];
        class.items -= 1;
        class.bytes -= charge as u64;
        class.temp_items -= u64::from(temp);
        match why {
            Removal::Evicted => {
                counters.evictions += 1;
                class.evicted += 1;
                if had_expiry {
                    class.evicted_nonzero += 1;
                }
                if unfetched {
                    counters.evicted_unfetched += 1;
                    class.evicted_unfetched += 1;
                }
            }
            Removal::Expired | Removal::Swept | Removal::Crawled => {
                if unfetched {
                    counters.expired_unfetched += 1;
                    class.expired_unfetched += 1;
                }
                if why == Removal::Swept {
                    counters.reclaimed += 1;
                    class.reclaimed += 1;
                }
                if why == Removal::Crawled {
                    counters.crawler_reclaimed += 1;
                    class.crawler_reclaimed += 1;
                }
            }
            Removal::Deleted | Removal::Replaced => {}
        }
        charge
    }

    /// After mass removals (a flush, a wave of expiries) the table is mostly
    /// tombstones, and every miss probes through them. Rehash it smaller.
    fn compact_table(&mut self) {
        let live = self.table.len();
        if self.table.capacity() > 64 && live * 4 < self.table.capacity() {
            let slots = &self.slots;
            self.table.shrink_to(live * 2, |&i| slots[i as usize].hash);
        }
    }

    fn is_dead(&self, i: u32, now: u32, flushed: Flushed) -> bool {
        self.death(i, now, flushed).is_some()
    }

    /// Why an item is no longer served, if it is not.
    fn death(&self, i: u32, now: u32, flushed: Flushed) -> Option<Death> {
        let slot = &self.slots[i as usize];
        if slot.cas <= flushed.through_cas
            || (flushed.second != 0 && flushed.second <= now && slot.last_access <= flushed.second)
        {
            Some(Death::Flushed)
        } else if is_expired(slot.expiry, now) {
            Some(Death::Expired)
        } else {
            None
        }
    }
}

/// Which items `flush_all` has removed, as of one moment.
#[derive(Clone, Copy)]
struct Flushed {
    /// Items with a CAS at or below this.
    through_cas: u64,
    /// Items last stored or used at or before this second, once it has
    /// come (a whole-second flush); 0 when none.
    second: u32,
}

/// Why a stored item is no longer served.
#[derive(Clone, Copy)]
enum Death {
    Expired,
    /// Invalidated by `flush_all`.
    Flushed,
}

/// What a lookup found.
enum Lookup {
    Live(u32),
    /// An expired or flushed item, removed on the way.
    Dead(Death),
    Missing,
}

impl Lookup {
    fn live(self) -> Option<u32> {
        match self {
            Lookup::Live(i) => Some(i),
            _ => None,
        }
    }
}

impl MemoryStore {
    pub fn new(config: MemoryConfig) -> Self {
        let shards = if config.strict_lru {
            1
        } else {
            config.shards.max(1).next_power_of_two()
        };
        let classes = config.classes.len().min(MAX_CLASSES);
        MemoryStore {
            shards: (0..shards)
                .map(|_| Padded(Mutex::new(Shard::new(classes))))
                .collect(),
            shard_shift: 64 - shards.trailing_zeros(),
            hasher: foldhash::fast::RandomState::default(),
            clock: Clock::new(),
            classes: config.classes,
            evict: config.evict,
            max_value_bytes: config.max_value_bytes,
            limit: AtomicUsize::new(config.limit_bytes),
            used: AtomicUsize::new(0),
            last_cas: AtomicU64::new(0),
            flushed_through_cas: AtomicU64::new(0),
            flush_whole_second: config.flush_whole_second,
            flushed_second: AtomicU32::new(0),
            delayed_flush: DelayedFlush::default(),
            evict_cursor: AtomicUsize::new(0),
            maintain_cursor: AtomicUsize::new(0),
            eviction_watcher: std::sync::OnceLock::new(),
            hash_power: AtomicU32::new(config.hash_power),
            sweep_pace: SweepPace::default(),
            background_sweep: config.background_sweep,
            strict_lru: config.strict_lru,
            temporary_ttl: config.temporary_ttl,
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(key)
    }

    /// The shard for a hash. hashbrown uses the low bits (bucket) and the top
    /// seven (tag), so the stripe is taken from the bits just below the tag.
    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        let index = if self.shards.len() == 1 {
            0
        } else {
            ((hash << 7) >> self.shard_shift) as usize
        };
        &self.shards[index].0
    }

    /// A new CAS for a write made at `now`. A delayed flush whose time has
    /// come is applied first: otherwise the first write after its time, to
    /// a key not there before, would be numbered under it and flushed.
    fn next_cas(&self, now: u32) -> u64 {
        self.start_due_flush(now);
        self.last_cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Starts a delayed flush whose time has come at `now`.
    fn start_due_flush(&self, now: u32) {
        self.delayed_flush.run_if_due(now, || {
            self.flushed_through_cas
                .fetch_max(self.last_cas.load(Ordering::Acquire), Ordering::AcqRel);
            self.sweep_pace.hurry();
        });
    }

    /// The flush boundary in force at `now`, applying a delayed flush whose
    /// time has come.
    fn flushed_through(&self, now: u32) -> Flushed {
        self.start_due_flush(now);
        Flushed {
            through_cas: self.flushed_through_cas.load(Ordering::Acquire),
            second: self.flushed_second.load(Ordering::Relaxed),
        }
    }

    /// Finds a live item, removing it first if it has expired or was flushed.
    fn find_live(&self, shard: &mut Shard, hash: u64, key: &[u8], now: u32) -> Option<u32> {
        self.lookup(shard, hash, key, now).live()
    }

    fn lookup(&self, shard: &mut Shard, hash: u64, key: &[u8], now: u32) -> Lookup {
        let Some(i) = shard.find(hash, key) else {
            return Lookup::Missing;
        };
        if let Some(death) = shard.death(i, now, self.flushed_through(now)) {
            let charge = shard.remove(i, Removal::Expired);
            self.used.fetch_sub(charge, Ordering::Relaxed);
            return Lookup::Dead(death);
        }
        Lookup::Live(i)
    }

    /// memcached counts a storage command by the class of the item it
    /// carries (for append, the appended part), if it fits `-I`.
    fn count_store(&self, shard: &mut Shard, command: &StoreCommand<'_>) {
        if command.value.len() <= self.max_value_bytes {
            let size = command.key.len() + command.value.len() + ITEM_OVERHEAD;
            let class = self.classes.class_of(size);
            shard.counters.classes[class]
                .commands
                .count(ClassCommand::Set);
        }
    }

    fn new_slot(
        &self,
        hash: u64,
        key: &[u8],
        parts: &[&[u8]],
        flags: u32,
        expiry: ExpiryTime,
        now: u32,
    ) -> Slot {
        let len = key.len() + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut data = Vec::with_capacity(len);
        data.extend_from_slice(key);
        for part in parts {
            data.extend_from_slice(part);
        }
        let class = self.classes.class_of(len + ITEM_OVERHEAD) as u8;
        self.sweep_pace.note(expiry);
        Slot {
            data: data.into_boxed_slice(),
            hash,
            cas: self.next_cas(now),
            flags,
            expiry,
            last_access: now,
            prev: NIL,
            next: NIL,
            key_len: key.len() as u8,
            class,
            bits: if self.is_temporary(expiry, now) {
                TEMP
            } else {
                0
            },
        }
    }

    /// Whether an item stored now with `expiry` goes on the temporary list:
    /// `-o temporary_ttl` is set and the item expires within it.
    fn is_temporary(&self, expiry: ExpiryTime, now: u32) -> bool {
        self.temporary_ttl
            .is_some_and(|ttl| expiry != 0 && expiry.saturating_sub(now) <= ttl)
    }

    /// Whether `extra` more bytes may be charged without evicting.
    fn fits_without_eviction(&self, extra: usize) -> bool {
        self.used.load(Ordering::Relaxed) + extra <= self.limit.load(Ordering::Relaxed)
    }

    /// Puts `slot` in place of `existing` (if any) and charges it.
    fn put(&self, shard: &mut Shard, existing: Option<u32>, slot: Slot) -> u64 {
        let cas = slot.cas;
        let charge = slot.charge();
        if let Some(i) = existing {
            let old = shard.remove(i, Removal::Replaced);
            self.used.fetch_sub(old, Ordering::Relaxed);
        }
        shard.insert(slot);
        self.used.fetch_add(charge, Ordering::Relaxed);
        cas
    }

    /// Checks the budget before a write that adds `extra` bytes. Under `-M`
    /// (no eviction) a write that does not fit first removes dead items, as
    /// memcached reclaims expired items when it allocates, so that a cache
    /// full of expired or flushed items takes writes again: a batch of its
    /// own shard's slots (`keep`: the slot the write replaces), then a few
    /// of each other shard not locked at the moment (never waiting for one
    /// while holding this one).
    fn admit(&self, shard: &mut Shard, class_size: usize, extra: usize, keep: Option<u32>) -> bool {
        if !self.evict && !self.fits_without_eviction(extra) {
            self.sweep_step(shard, keep, MAINTAIN_BATCH);
            let each = (MAINTAIN_BATCH / self.shards.len()).max(16);
            for other in self.shards.iter() {
                if self.fits_without_eviction(extra) {
                    break;
                }
                if let Some(mut other) = other.0.try_lock() {
                    self.sweep_step(&mut other, None, each);
                }
            }
        }
        if extra > self.limit.load(Ordering::Relaxed)
            || (!self.evict && !self.fits_without_eviction(extra))
        {
            let class = self.classes.class_of(class_size);
            shard.counters.classes[class].outofmemory += 1;
            return false;
        }
        true
    }

    /// Inspects the next `batch` slots of `shard` and removes the dead
    /// (expired or flushed) items among them, except `keep`; returns the
    /// items inspected and removed.
    fn sweep_step(&self, shard: &mut Shard, keep: Option<u32>, batch: usize) -> (usize, usize) {
        let now = self.clock.now();
        let flushed = self.flushed_through(now);
        let len = shard.slots.len();
        if len == 0 {
            return (0, 0);
        }
        let (mut checked, mut removed) = (0, 0);
        let start = shard.scan_cursor % len;
        let end = (start + batch).min(len);
        for i in start..end {
            if shard.slots[i].data.is_empty() || keep == Some(i as u32) {
                continue;
            }
            shard.counters.crawler_items_checked += 1;
            checked += 1;
            if shard.is_dead(i as u32, now, flushed) {
                let charge = shard.remove(i as u32, Removal::Swept);
                self.used.fetch_sub(charge, Ordering::Relaxed);
                removed += 1;
            } else {
                self.sweep_pace.note(shard.slots[i].expiry);
            }
        }
        shard.scan_cursor = if end >= len { 0 } else { end };
        (checked, removed)
    }

    /// Evicts least recently used items until the budget holds, each from
    /// the oldest of a few shards' tails (see [`EVICTION_SAMPLE`]). `keep`
    /// is the CAS of the item the calling write stored: a write never
    /// evicts what it stored, as memcached never evicts the item it is
    /// allocating.
    fn enforce_limit(&self, keep: Option<u64>) {
        // Shards chosen that had nothing to give (the kept item alone, or
        // emptied meanwhile): after as many as there are shards, stop.
        let mut misses = 0;
        while self.used.load(Ordering::Relaxed) > self.limit.load(Ordering::Relaxed)
            && misses < self.shards.len()
        {
            let Some(index) = self.eviction_shard() else {
                return;
            };
            let mut shard = self.shards[index].0.lock();
            let now = self.clock.now();
            let Some((tail, dead)) = self.lru_victim(&mut shard, now, keep) else {
                misses += 1;
                continue;
            };
            // Under -M a live item is never evicted, as in memcached: a
            // lowered limit, or writes admitted together past it, leave the
            // cache over it until items expire or are deleted (writes
            // meanwhile answer out of memory).
            if !dead && !self.evict {
                return;
            }
            let why = if dead {
                Removal::Expired
            } else {
                let victim = &shard.slots[tail as usize];
                let (class, idle) = (
                    usize::from(victim.class),
                    now.saturating_sub(victim.last_access),
                );
                if let Some(watcher) = self.eviction_watcher.get().filter(|w| w.wanted()) {
                    watcher.evicted(&Shard::info(victim, now));
                }
                shard.counters.classes[class].evicted_time = idle;
                Removal::Evicted
            };
            let charge = shard.remove(tail, why);
            self.used.fetch_sub(charge, Ordering::Relaxed);
        }
    }

    /// The shard to evict from next: of the next [`EVICTION_SAMPLE`]
    /// shards holding items, the one whose least recently used item is the
    /// best victim (not read since it was last moved, last used longest
    /// ago, then stored first). Taking shards
    /// merely in turn evicted young items when the items are few per shard
    /// (large values): a shard holding only the item just stored came up as
    /// often as any other. None when every shard is empty.
    fn eviction_shard(&self) -> Option<usize> {
        let shards = self.shards.len();
        let start = self.evict_cursor.fetch_add(1, Ordering::Relaxed);
        let mut oldest: Option<((u8, bool, u32, u64), usize)> = None;
        let mut sampled = 0;
        for step in 0..shards {
            let index = (start + step) % shards;
            let shard = self.shards[index].0.lock();
            // Temporary items count only where nothing else is left.
            let (tail, only_temporary) = match (shard.lru.tail, shard.temp.tail) {
                (NIL, NIL) => continue,
                (NIL, temp) => (temp, 1),
                (tail, _) => (tail, 0),
            };
            let slot = &shard.slots[tail as usize];
            // A tail read since it was moved gets a second chance first.
            let key = (
                only_temporary,
                slot.has(ACCESSED),
                slot.last_access,
                slot.cas,
            );
            if oldest.is_none_or(|(best, _)| key < best) {
                oldest = Some((key, index));
            }
            sampled += 1;
            if sampled == EVICTION_SAMPLE {
                break;
            }
        }
        oldest.map(|(_, index)| index)
    }

    /// The shard's next item to evict, and whether it is dead already: the
    /// tail, after every tail read since it was last moved has been given a
    /// second chance at the front. Each item gets one per trip down the list,
    /// so this ends.
    /// Temporary items are taken only once the shard has nothing else.
    /// The item whose CAS is `keep` is passed over; None if it is all the
    /// shard holds.
    fn lru_victim(&self, shard: &mut Shard, now: u32, keep: Option<u64>) -> Option<(u32, bool)> {
        let mut kept_once = false;
        loop {
            let tail = match shard.lru.tail {
                NIL => shard.temp.tail,
                tail => tail,
            };
            if tail == NIL {
                return None;
            }
            if keep == Some(shard.slots[tail as usize].cas) {
                // Twice at the tail: nothing else is left to take.
                if kept_once || shard.list_of(tail).head == tail {
                    return None;
                }
                kept_once = true;
                shard.bump(tail);
                continue;
            }
            let dead = shard.is_dead(tail, now, self.flushed_through(now));
            let bits = &mut shard.slots[tail as usize].bits;
            if dead || *bits & ACCESSED == 0 {
                return Some((tail, dead));
            }
            *bits &= !ACCESSED;
            shard.bump(tail);
        }
    }

    /// What a read sees of `slot`; `won`: this read took its recache token.
    fn view<'a>(&self, slot: &'a Slot, now: u32, won: bool) -> ItemView<'a> {
        ItemView {
            key: slot.key(),
            value: slot.value(),
            flags: slot.flags,
            cas: slot.cas,
            ttl: crate::clock::ttl_at(slot.expiry, now),
            fetched_before: slot.has(FETCHED),
            idle_seconds: now.saturating_sub(slot.last_access),
            stale: slot.has(STALE),
            won,
            win_taken: slot.has(WIN_SENT) && !won,
        }
    }

    /// The slot a plan writes, in place of `old` (whose expiry `Keep` keeps).
    fn slot_for(
        &self,
        hash: u64,
        key: &[u8],
        write: &Write<'_>,
        old: Option<&Slot>,
        now: u32,
    ) -> Slot {
        let expiry = match write.expiry {
            Expiry::At(expiry) => expiry,
            Expiry::Keep => old.map_or(0, |old| old.expiry),
        };
        let mut slot = self.new_slot(hash, key, &write.parts, write.flags, expiry, now);
        slot.bits |= write.bits();
        slot
    }
}

impl Store for MemoryStore {
    fn get(
        &self,
        key: &[u8],
        options: &GetOptions,
        _fence: &AckFence,
        visit: &mut dyn FnMut(&ItemView<'_>),
    ) -> GetOutcome {
        let hash = self.hash(key);
        let now = self.clock.now();
        let mut shard = self.shard(hash).lock();
        let found = match self.lookup(&mut shard, hash, key, now) {
            Lookup::Live(i) => Some(i),
            Lookup::Dead(Death::Expired) => {
                shard.counters.get_expired += 1;
                None
            }
            Lookup::Dead(Death::Flushed) => {
                shard.counters.get_flushed += 1;
                None
            }
            Lookup::Missing => None,
        };
        let Some(i) = found else {
            let Some(expiry) = options.vivify else {
                return GetOutcome::Miss;
            };
            let slot = self.slot_for(hash, key, &semantics::vivified(expiry), None, now);
            if !self.admit(&mut shard, slot.charge(), slot.charge(), None) {
                return GetOutcome::Miss;
            }
            visit(&self.view(&slot, now, true));
            let cas = self.put(&mut shard, None, slot);
            drop(shard);
            self.enforce_limit(Some(cas));
            return GetOutcome::Hit;
        };
        let slot = &mut shard.slots[i as usize];
        if let Some(expiry) = options.touch {
            slot.expiry = expiry;
            self.sweep_pace.note(expiry);
        }
        let ttl = crate::clock::ttl_at(slot.expiry, now);
        let won = semantics::wins_recache(&slot.current(), ttl, options.recache);
        if won {
            slot.bits |= WIN_SENT;
        }
        visit(&self.view(slot, now, won));
        let class = usize::from(slot.class);
        let command = match options.touch {
            Some(_) => ClassCommand::TouchHit,
            None => ClassCommand::GetHit,
        };
        shard.counters.classes[class].commands.count(command);
        match (options.no_bump, self.strict_lru) {
            (true, _) => {}
            (false, true) => shard.note_read_strictly(i, now),
            (false, false) => shard.note_read(i, now),
        }
        GetOutcome::Hit
    }

    fn store(&self, command: &StoreCommand<'_>, _fence: &AckFence) -> StoreOutcome {
        let hash = self.hash(command.key);
        let now = self.clock.now();
        let mut shard = self.shard(hash).lock();
        let found = self.lookup(&mut shard, hash, command.key, now);
        let reuses_expired = matches!(found, Lookup::Dead(_));
        let existing = found.live();
        self.count_store(&mut shard, command);
        let old_class = existing.map(|i| usize::from(shard.slots[i as usize].class));
        let current = existing.map(|i| shard.slots[i as usize].current());
        let slot = match semantics::plan_store(command, current, self.max_value_bytes) {
            StorePlan::Refuse(outcome) => {
                if let (StoreMode::Add, Some(i)) = (command.mode, existing) {
                    // memcached bumps the item a failed add found.
                    shard.bump(i);
                }
                if let (StoreOutcome::Exists, Some(class), true) =
                    (outcome, old_class, command.is_compare_and_set())
                {
                    let commands = &mut shard.counters.classes[class].commands;
                    commands.count(ClassCommand::CasBadval);
                }
                return outcome;
            }
            StorePlan::Write(write) => {
                let old = existing.map(|i| &shard.slots[i as usize]);
                self.slot_for(hash, command.key, &write, old, now)
            }
        };
        let freed = existing.map_or(0, |i| shard.slots[i as usize].charge());
        if !self.admit(
            &mut shard,
            slot.charge(),
            slot.charge().saturating_sub(freed),
            existing,
        ) {
            return StoreOutcome::OutOfMemory;
        }
        let class = usize::from(slot.class);
        let cas = self.put(&mut shard, existing, slot);
        if let (true, Some(old_class)) = (command.is_compare_and_set(), old_class) {
            let commands = &mut shard.counters.classes[old_class].commands;
            commands.count(ClassCommand::CasHit);
        }
        if reuses_expired {
            shard.counters.reclaimed += 1;
            shard.counters.classes[class].reclaimed += 1;
        }
        drop(shard);
        self.enforce_limit(Some(cas));
        StoreOutcome::Stored { cas }
    }

    fn delete(&self, key: &[u8], command: &DeleteCommand, _fence: &AckFence) -> DeleteOutcome {
        let hash = self.hash(key);
        let now = self.clock.now();
        let mut shard = self.shard(hash).lock();
        let found = self.find_live(&mut shard, hash, key, now);
        let current = found.map(|i| shard.slots[i as usize].current());
        let plan = semantics::plan_delete(command, current);
        // An invalidation is no delete hit (memcached counts the removal).
        if let (DeletePlan::Remove, Some(i)) = (&plan, found) {
            let class = usize::from(shard.slots[i as usize].class);
            shard.counters.classes[class]
                .commands
                .count(ClassCommand::DeleteHit);
        }
        match (plan, found) {
            (DeletePlan::Refuse(outcome), _) => return outcome,
            (DeletePlan::Invalidate(expiry), Some(i)) => {
                let cas = self.next_cas(now);
                let slot = &mut shard.slots[i as usize];
                slot.cas = cas;
                slot.bits = (slot.bits | STALE) & !WIN_SENT;
                if let Expiry::At(expiry) = expiry {
                    slot.expiry = expiry;
                    self.sweep_pace.note(expiry);
                }
            }
            (DeletePlan::Remove, Some(i)) => {
                let charge = shard.remove(i, Removal::Deleted);
                self.used.fetch_sub(charge, Ordering::Relaxed);
            }
            (_, None) => unreachable!("a plan for a missing item refuses"),
        }
        DeleteOutcome::Deleted
    }

    fn arith(&self, key: &[u8], command: &ArithCommand, _fence: &AckFence) -> ArithOutcome {
        let hash = self.hash(key);
        let now = self.clock.now();
        let mut shard = self.shard(hash).lock();
        let found = self.find_live(&mut shard, hash, key, now);
        let current = found.map(|i| shard.slots[i as usize].current());
        let (value, digits, expiry) = match semantics::plan_arith(command, current) {
            ArithPlan::Refuse(outcome) => return outcome,
            ArithPlan::Create {
                value,
                digits,
                expiry,
            } => {
                let slot = self.new_slot(hash, key, &[&digits], 0, expiry, now);
                if !self.admit(&mut shard, slot.charge(), slot.charge(), None) {
                    return ArithOutcome::OutOfMemory;
                }
                let cas = self.put(&mut shard, None, slot);
                drop(shard);
                self.enforce_limit(Some(cas));
                return ArithOutcome::Value {
                    value,
                    cas,
                    ttl: crate::clock::ttl_at(expiry, now),
                    created: true,
                };
            }
            ArithPlan::Update {
                value,
                digits,
                expiry,
            } => (value, digits, expiry),
        };
        let i = found.expect("an update has an item");
        let hit = match command.decrement {
            true => ClassCommand::DecrHit,
            false => ClassCommand::IncrHit,
        };
        let class = usize::from(shard.slots[i as usize].class);
        shard.counters.classes[class].commands.count(hit);
        let old = &shard.slots[i as usize];
        let expiry = match expiry {
            Expiry::Keep => old.expiry,
            Expiry::At(expiry) => expiry,
        };
        let cas = self.next_cas(now);
        if digits.len() == old.value().len() {
            // memcached rewrites a counter of the same length in place.
            let slot = &mut shard.slots[i as usize];
            let key_len = usize::from(slot.key_len);
            slot.data[key_len..].copy_from_slice(&digits);
            slot.cas = cas;
            slot.expiry = expiry;
            self.sweep_pace.note(expiry);
            slot.last_access = now;
            shard.bump(i);
        } else {
            // A new item, as memcached makes one: not read yet, not stale,
            // no recache token taken.
            let mut slot = self.new_slot(hash, key, &[&digits], old.flags, expiry, now);
            slot.cas = cas;
            let grown = slot.charge() - shard.slots[i as usize].charge();
            if !self.admit(&mut shard, slot.charge(), grown, Some(i)) {
                return ArithOutcome::OutOfMemory;
            }
            let cas = self.put(&mut shard, Some(i), slot);
            drop(shard);
            self.enforce_limit(Some(cas));
        }
        ArithOutcome::Value {
            value,
            cas,
            ttl: crate::clock::ttl_at(expiry, now),
            created: false,
        }
    }

    fn touch(&self, key: &[u8], expiry: ExpiryTime, _fence: &AckFence) -> GetOutcome {
        let hash = self.hash(key);
        let now = self.clock.now();
        let mut shard = self.shard(hash).lock();
        let Some(i) = self.find_live(&mut shard, hash, key, now) else {
            return GetOutcome::Miss;
        };
        let class = usize::from(shard.slots[i as usize].class);
        shard.counters.classes[class]
            .commands
            .count(ClassCommand::TouchHit);
        let slot = &mut shard.slots[i as usize];
        slot.expiry = expiry;
        self.sweep_pace.note(expiry);
        slot.last_access = now;
        // memcached's touch reads the item (`do_item_get` with an update).
        slot.bits |= ACCESSED | FETCHED;
        GetOutcome::Hit
    }

    fn flush_all(&self, delay: i64, _fence: &AckFence) -> FlushOutcome {
        if self.flush_whole_second {
            let second = if delay <= 0 {
                self.clock.now()
            } else {
                self.clock.expiry(delay)
            };
            self.flushed_second.store(second, Ordering::Relaxed);
        }
        // Without CAS memcached flushes at the second asked for itself.
        let due = match self.flush_whole_second {
            false => self.clock.flush_due(delay),
            true => (delay > 0).then(|| self.clock.expiry(delay)),
        };
        match due {
            None => {
                self.delayed_flush.cancel();
                self.flushed_through_cas
                    .fetch_max(self.last_cas.load(Ordering::Acquire), Ordering::AcqRel);
                self.sweep_pace.hurry();
            }
            Some(at) => self.delayed_flush.schedule(at),
        }
        FlushOutcome::Done
    }

    fn debug(&self, key: &[u8], _fence: &AckFence) -> Option<DebugView> {
        let hash = self.hash(key);
        let now = self.clock.now();
        let mut shard = self.shard(hash).lock();
        let i = self.find_live(&mut shard, hash, key, now)?;
        let slot = &shard.slots[i as usize];
        Some(DebugView {
            ttl: crate::clock::ttl_at(slot.expiry, now),
            idle_seconds: now.saturating_sub(slot.last_access),
            cas: slot.cas,
            fetched: slot.has(FETCHED),
            class: usize::from(slot.class),
            size: slot.charge(),
            value_len: slot.value().len(),
        })
    }

    fn maintain(&self) -> usize {
        // Items freed by another worker than the one that stored them stay
        // in that worker's arena (`heap.rs`): give them back past -m and
        // what any kura process holds besides its items.
        crate::heap::trim_if_over(resident_budget(self.limit.load(Ordering::Relaxed)));
        let items = self.item_count();
        self.grow_hash_power(items);
        let now = self.clock.now();
        if !self.background_sweep || !self.sweep_pace.due(now, items as u64) {
            return 0;
        }
        let mut removed = 0;
        let mut checked = 0;
        for _ in 0..self.shards.len() {
            let index = self.maintain_cursor.fetch_add(1, Ordering::Relaxed) % self.shards.len();
            let mut shard = self.shards[index].0.lock();
            let (seen, gone) = self.sweep_step(&mut shard, None, MAINTAIN_BATCH);
            checked += seen;
            removed += gone;
            shard.compact_table();
        }
        self.sweep_pace.record(checked as u64);
        removed
    }

    fn set_memory_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
        self.enforce_limit(None);
    }

    fn stats(&self) -> StoreStats {
        let now = self.clock.now();
        let mut stats = StoreStats {
            limit_maxbytes: self.limit.load(Ordering::Relaxed) as u64,
            ..StoreStats::default()
        };
        let mut classes = vec![ClassCounters::default(); self.classes.len() + 1];
        let mut oldest_access = now;
        let mut buckets = 0usize;
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            let c = &shard.counters;
            stats.total_items += c.total_items;
            stats.evictions += c.evictions;
            stats.reclaimed += c.reclaimed;
            stats.expired_unfetched += c.expired_unfetched;
            stats.evicted_unfetched += c.evicted_unfetched;
            stats.crawler_reclaimed += c.crawler_reclaimed;
            stats.crawler_items_checked += c.crawler_items_checked;
            stats.get_expired += c.get_expired;
            stats.get_flushed += c.get_flushed;
            stats.curr_items += shard.table.len() as u64;
            buckets += shard.table.capacity();
            for (sum, class) in classes.iter_mut().zip(&c.classes) {
                sum.items += class.items;
                sum.bytes += class.bytes;
                sum.evicted += class.evicted;
                sum.evicted_nonzero += class.evicted_nonzero;
                sum.evicted_unfetched += class.evicted_unfetched;
                sum.expired_unfetched += class.expired_unfetched;
                sum.reclaimed += class.reclaimed;
                sum.crawler_reclaimed += class.crawler_reclaimed;
                sum.outofmemory += class.outofmemory;
                sum.temp_items += class.temp_items;
                sum.evicted_time = sum.evicted_time.max(class.evicted_time);
                sum.commands.add(&class.commands);
            }
            if shard.lru.tail != NIL {
                oldest_access = oldest_access.min(shard.slots[shard.lru.tail as usize].last_access);
            }
        }
        stats.bytes = self.used.load(Ordering::Relaxed) as u64;
        stats.hash_bytes = (buckets * (std::mem::size_of::<u32>() + 1)) as u64;
        self.grow_hash_power(stats.curr_items as usize);
        stats.hash_power_level = self.hash_power();
        let age = now - oldest_access;
        stats.classes = classes
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, c)| {
                c.items > 0
                    || c.evicted > 0
                    || c.outofmemory > 0
                    || c.crawler_reclaimed > 0
                    || c.commands != ClassCommands::default()
            })
            .map(|(class, c)| ClassStats {
                class,
                chunk_size: self.classes.chunk_size(class),
                items: c.items,
                bytes: c.bytes,
                evicted: c.evicted,
                evicted_nonzero: c.evicted_nonzero,
                evicted_unfetched: c.evicted_unfetched,
                expired_unfetched: c.expired_unfetched,
                reclaimed: c.reclaimed,
                crawler_reclaimed: c.crawler_reclaimed,
                outofmemory: c.outofmemory,
                evicted_time: c.evicted_time,
                temp_items: c.temp_items,
                commands: c.commands,
                age,
            })
            .collect();
        stats
    }

    fn scan(&self, visit: &mut dyn FnMut(&ItemInfo<'_>)) -> bool {
        self.scan_part(&ScanCursor::START, usize::MAX, visit)
            .is_ok()
    }

    fn scan_part(
        &self,
        from: &ScanCursor,
        items: usize,
        visit: &mut dyn FnMut(&ItemInfo<'_>),
    ) -> Result<Option<ScanCursor>, ScanFailed> {
        // The cursor: shard and slot, u64 LE each.
        let place = |at: usize| {
            let bytes = from.0.get(at..at + 8).and_then(|b| b.try_into().ok());
            bytes.map_or(0, |b| u64::from_le_bytes(b) as usize)
        };
        let (mut shard_at, mut slot_at) = (place(0), place(8));
        let (mut left, mut examined) = (items, crate::scan_examined(items));
        while let Some(shard) = self.shards.get(shard_at) {
            let shard = shard.0.lock();
            let now = self.clock.now();
            let flushed = self.flushed_through(now);
            while let Some(slot) = shard.slots.get(slot_at) {
                if left == 0 || examined == 0 {
                    let cursor = [
                        (shard_at as u64).to_le_bytes(),
                        (slot_at as u64).to_le_bytes(),
                    ];
                    return Ok(Some(ScanCursor(cursor.concat())));
                }
                if !slot.data.is_empty() && !shard.is_dead(slot_at as u32, now, flushed) {
                    visit(&Shard::info(slot, now));
                    left -= 1;
                }
                (slot_at, examined) = (slot_at + 1, examined - 1);
            }
            (shard_at, slot_at) = (shard_at + 1, 0);
        }
        Ok(None)
    }

    fn crawl(&self, include: &dyn Fn(usize) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            let now = self.clock.now();
            let flushed = self.flushed_through(now);
            for i in 0..shard.slots.len() {
                let slot = &shard.slots[i];
                if slot.data.is_empty() || !include(usize::from(slot.class)) {
                    continue;
                }
                shard.counters.crawler_items_checked += 1;
                if shard.is_dead(i as u32, now, flushed) {
                    let charge = shard.remove(i as u32, Removal::Crawled);
                    self.used.fetch_sub(charge, Ordering::Relaxed);
                    removed += 1;
                }
            }
            shard.compact_table();
        }
        removed
    }

    fn watch_evictions(&self, watcher: Arc<dyn EvictionWatcher>) {
        let _ = self.eviction_watcher.set(watcher);
    }

    fn size_histogram(&self) -> Vec<(usize, u64)> {
        let mut buckets = std::collections::BTreeMap::new();
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            for slot in shard.slots.iter().filter(|s| !s.data.is_empty()) {
                *buckets
                    .entry(slot.charge().div_ceil(32) * 32)
                    .or_insert(0u64) += 1;
            }
        }
        buckets.into_iter().collect()
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }
}

/// An item as a warm-restart snapshot holds it (`warm.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedItem<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    /// Server time; 0 never expires.
    pub expiry: ExpiryTime,
    /// Read since it was written (`mg`'s `h` flag).
    pub fetched: bool,
    /// Invalidated by a meta delete: served as stale until rewritten.
    pub stale: bool,
    /// The stale item's recache token has been handed out.
    pub win_sent: bool,
}

/// Warm restart (`warm.rs`): every live item out, and back in as it was.
impl MemoryStore {
    /// Calls `visit` with every live item, shard by shard, each shard from
    /// its least to its most recently used item, so that restoring them in
    /// this order rebuilds each shard's LRU order. Holds a shard's lock
    /// while visiting it: meant for a server whose workers have stopped.
    /// Stops at the first error `visit` returns.
    pub fn for_each_live<E>(
        &self,
        mut visit: impl FnMut(&SavedItem<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            let now = self.clock.now();
            let flushed = self.flushed_through(now);
            // Each list from its least recently used item to its most.
            for tail in [shard.lru.tail, shard.temp.tail] {
                let mut i = tail;
                while i != NIL {
                    let slot = &shard.slots[i as usize];
                    if !shard.is_dead(i, now, flushed) {
                        visit(&SavedItem {
                            key: slot.key(),
                            value: slot.value(),
                            flags: slot.flags,
                            cas: slot.cas,
                            expiry: slot.expiry,
                            fetched: slot.has(FETCHED),
                            stale: slot.has(STALE),
                            win_sent: slot.has(WIN_SENT),
                        })?;
                    }
                    i = slot.prev;
                }
            }
        }
        Ok(())
    }

    /// The last CAS value handed out.
    pub fn last_cas(&self) -> u64 {
        self.last_cas.load(Ordering::Acquire)
    }

    /// Puts a saved item back with its CAS value, flags, expiry and state,
    /// as its shard's most recently used item, replacing any item under its
    /// key. The CAS counter is raised to at least the item's value, so later
    /// writes stay above it. Older items are evicted if the budget is
    /// exceeded. False when the item does not fit at all (larger than the
    /// budget, or a full cache under `-M`).
    pub fn restore(&self, item: &SavedItem<'_>) -> bool {
        let hash = self.hash(item.key);
        let now = self.clock.now();
        let mut shard = self.shard(hash).lock();
        let existing = shard.find(hash, item.key);
        // Saved by a server with a larger -I: not served past this one's.
        if item.value.len() > self.max_value_bytes {
            return false;
        }
        let mut slot = self.new_slot(hash, item.key, &[item.value], item.flags, item.expiry, now);
        slot.cas = item.cas;
        for (set, bit) in [
            (item.fetched, FETCHED),
            (item.stale, STALE),
            (item.win_sent, WIN_SENT),
        ] {
            if set {
                slot.bits |= bit;
            }
        }
        let freed = existing.map_or(0, |i| shard.slots[i as usize].charge());
        if !self.admit(
            &mut shard,
            slot.charge(),
            slot.charge().saturating_sub(freed),
            existing,
        ) {
            return false;
        }
        let cas = self.put(&mut shard, existing, slot);
        drop(shard);
        self.raise_cas(item.cas);
        self.enforce_limit(Some(cas));
        true
    }

    /// Raises the CAS counter to at least `cas` (a restored cache's counter).
    pub fn raise_cas(&self, cas: u64) {
        self.last_cas.fetch_max(cas, Ordering::AcqRel);
    }

    /// Items held, expired ones not yet reclaimed included.
    fn item_count(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.0.lock().table.len())
            .sum()
    }

    /// memcached's `hash_power_level` (see the field).
    pub fn hash_power(&self) -> u32 {
        self.hash_power.load(Ordering::Relaxed)
    }

    /// Raises `hash_power_level` to at least `power` (a warm restart).
    pub fn raise_hash_power(&self, power: u32) {
        self.hash_power.fetch_max(power.min(63), Ordering::Relaxed);
    }

    /// Grows `hash_power_level` as memcached grows its table: while the
    /// items exceed 1.5 per bucket.
    fn grow_hash_power(&self, items: usize) {
        let mut power = self.hash_power();
        while power < 63 && items as u64 > (3u64 << power) / 2 {
            power += 1;
        }
        self.raise_hash_power(power);
    }
}
