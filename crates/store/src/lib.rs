//! kura's storage engines, behind one trait named after what a memcached
//! server needs. No sockets and no protocol here: the server turns requests
//! into these calls and the results into replies.

pub mod classes;
pub mod clock;
pub mod counter;
mod delayed_flush;
pub mod disk;
mod heap;
pub mod log_position;
pub mod memory;
pub mod replication;
pub mod semantics;
pub mod stamp;
mod sweep;
pub mod warm;

pub use classes::{ClassCommand, ClassCommands, SizeClasses};
pub use heap::keep_freed_memory_until_trimmed;

/// The largest value any engine takes (memcached's bound on `-I`): a log
/// record that claims more is damage, not a write.
pub const MAX_VALUE_BYTES: usize = 1 << 30;
pub use clock::{Clock, ExpiryTime};
pub use disk::{DiskConfig, DiskStore, LogRetention, MultiPrimary, SyncPolicy};
pub use kura_table::{IndexCommand, IndexKind, Lookup, Probes, Record, StoredRecord};
pub use memory::{MemoryConfig, MemoryStore};

/// What an engine offers a memcached server.
///
/// Reads hand the item to a visitor while the engine holds it, so the server
/// copies the value straight into its output buffer with no intermediate copy.
pub trait Store: Send + Sync {
    /// Looks a key up; calls `visit` once with the item on a hit (or with the
    /// stub created by `vivify` on a miss), and only then answers `Hit`.
    ///
    /// Every call that may write (a read may: touch, vivify, recache) raises
    /// `fence` to the write's ticket when its reply must wait for its append;
    /// so does a read that shows a write whose append is not done yet.
    fn get(
        &self,
        key: &[u8],
        options: &GetOptions,
        fence: &AckFence,
        visit: &mut dyn FnMut(&ItemView<'_>),
    ) -> GetOutcome;

    fn store(&self, command: &StoreCommand<'_>, fence: &AckFence) -> StoreOutcome;

    fn delete(&self, key: &[u8], command: &DeleteCommand, fence: &AckFence) -> DeleteOutcome;

    fn arith(&self, key: &[u8], command: &ArithCommand, fence: &AckFence) -> ArithOutcome;

    /// Sets a new expiry on a live item: `Hit` if it did, `Miss` if there is
    /// none.
    fn touch(&self, key: &[u8], expiry: ExpiryTime, fence: &AckFence) -> GetOutcome;

    /// Invalidates every item now (`delay` ≤ 0) or at a later time.
    fn flush_all(&self, delay: i64, fence: &AckFence) -> FlushOutcome;

    /// Item metadata for `me`, without touching the item; `fence` as for
    /// [`get`](Store::get).
    fn debug(&self, key: &[u8], fence: &AckFence) -> Option<DebugView>;

    /// Background upkeep: reclaims expired and flushed items. Returns how many
    /// items it removed.
    fn maintain(&self) -> usize;

    /// Changes the memory limit at run time (`cache_memlimit`).
    fn set_memory_limit(&self, bytes: usize);

    fn stats(&self) -> StoreStats;

    /// Visits every live item's metadata, shard by shard (`lru_crawler
    /// metadump`). Returns whether it saw every write acknowledged so far:
    /// false when a failing or full disk keeps pending writes out of what
    /// it reads.
    fn scan(&self, visit: &mut dyn FnMut(&ItemInfo<'_>)) -> bool;

    /// Visits up to `items` live items' metadata from `from` on (first
    /// [`ScanCursor::START`]), in the engine's order; returns where the next
    /// part starts, or `None` once every item was seen; `Err` when the
    /// items could not be read, or (the first part) when writes taken
    /// before could not be applied to what is read. A part also ends
    /// once it has looked at [`scan_examined`] entries, live or not (a
    /// flush leaves many dead), so it may hold fewer items, even none. An
    /// item written or removed between parts may be seen or not: as
    /// memcached's crawler's, a dump in parts is no snapshot, and holds no
    /// lock between parts.
    fn scan_part(
        &self,
        from: &ScanCursor,
        items: usize,
        visit: &mut dyn FnMut(&ItemInfo<'_>),
    ) -> Result<Option<ScanCursor>, ScanFailed>;

    /// Removes every expired or flushed item of the size classes `include`
    /// picks, now (`lru_crawler crawl`). Returns how many it removed.
    fn crawl(&self, _include: &dyn Fn(usize) -> bool) -> usize {
        0
    }

    /// Whom to show each eviction (`watch evictions`). An engine that
    /// evicts asks `wanted()` first, so nobody watching costs one load.
    fn watch_evictions(&self, _watcher: std::sync::Arc<dyn EvictionWatcher>) {}

    /// A histogram of item sizes in 32-byte buckets (`stats sizes`).
    fn size_histogram(&self) -> Vec<(usize, u64)>;

    /// The clock that decides expiry.
    fn clock(&self) -> &Clock;

    /// Figures only this engine has, for `stats` (name, value).
    fn engine_stats(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Writes a hot backup into the directory `to` (`since`: an earlier
    /// backup, to copy only the update log after it); returns its manifest
    /// as one line of JSON, or why not.
    fn backup(
        &self,
        _to: &std::path::Path,
        _since: Option<&std::path::Path>,
    ) -> Result<String, String> {
        Err("the memory engine keeps no data to back up (the disk engine does)".to_string())
    }

    // Acknowledgement. An engine that takes a write at once but makes it
    // durable later (the disk engine's group appends to its log) raises the caller's
    // fence to the write's ticket; the server holds the replies of that
    // batch of requests until the ticket is decided. The memory engine
    // never does.

    fn ack_state(&self, _span: AckSpan) -> AckState {
        AckState::Ready
    }

    /// Asks the engine to append what is pending to its log now (a worker
    /// calls this once per batch of events, so one append serves them all).
    fn request_append(&self) {}

    /// Makes every write taken so far durable on the device, whatever the
    /// sync policy (Tokyo Tyrant's `sync`); false if the storage cannot.
    /// An engine that keeps nothing has nothing to do.
    fn sync(&self) -> bool {
        true
    }

    /// Registers a callback run after each decision, with the newest
    /// decided ticket (the worker wakes its event loop with it).
    fn on_ack_progress(&self, _listener: Box<dyn Fn(AckTicket) + Send + Sync>) {}

    /// The engine's tables, if it keeps any (the disk engine does).
    fn tables(&self) -> Option<&dyn Tables> {
        None
    }

    /// Replication from and to the engine's update log (the disk engine).
    fn replication(&self) -> Option<&dyn replication::Replication> {
        None
    }
}

/// Tables: rows of columns by table name and primary key (Tokyo Cabinet's
/// table database). A write raises `fence` as an item's write does.
pub trait Tables: Send + Sync {
    fn put_row(&self, table: &[u8], row: &Record, mode: RowMode, fence: &AckFence) -> RowOutcome;

    /// Changes a row as `edit` decides from its current state (`None`:
    /// there is none), atomically: no other write of the row comes between.
    /// `Done` when it wrote, `Kept` when `edit` left the row.
    fn modify_row(
        &self,
        table: &[u8],
        primary_key: &[u8],
        edit: &mut dyn FnMut(Option<Record>) -> RowEdit,
        fence: &AckFence,
    ) -> RowOutcome;

    /// `Done`, or `Missing` when there was no such row.
    fn remove_row(&self, table: &[u8], primary_key: &[u8], fence: &AckFence) -> RowOutcome;

    /// The row, with every write made before it; `Err` when it cannot be
    /// read. A reply showing a row write not journalled yet waits for it:
    /// `fence` is raised to it.
    #[allow(clippy::result_unit_err)]
    fn get_row(
        &self,
        table: &[u8],
        primary_key: &[u8],
        fence: &AckFence,
    ) -> Result<Option<Record>, ()>;

    /// Hands `visit` every row of the table in primary-key order until it
    /// answers false, after every write made before is applied.
    #[allow(clippy::result_unit_err)]
    fn visit_rows(
        &self,
        table: &[u8],
        visit: &mut dyn FnMut(StoredRecord<'_>) -> bool,
    ) -> Result<(), ()>;

    /// `setindex`: builds, rebuilds, optimizes or drops an index of a
    /// column; `Err` says why not.
    fn set_index(&self, table: &[u8], column: &[u8], command: IndexCommand) -> Result<(), String>;

    /// The table's indexes: column and kind.
    fn indexes(&self, table: &[u8]) -> Vec<(Vec<u8>, IndexKind)>;

    /// Hands `visit`, in primary-key order, each row that every lookup's
    /// index holds under its probes (so at least every row their conditions
    /// match), with every write made before, until it answers false;
    /// `lazily`: the caller expects to stop after a few. `None` when one of
    /// the indexes does not exist, or when they hold so many rows that a
    /// scan is faster (scan then); else how many rows it read.
    #[allow(clippy::result_unit_err)]
    fn lookup_rows(
        &self,
        table: &[u8],
        lookups: &[Lookup],
        lazily: bool,
        visit: &mut dyn FnMut(StoredRecord<'_>) -> bool,
    ) -> Result<Option<u64>, ()>;

    /// Walks the rows in the order of an index of `column` of `kind`
    /// (`None`: the primary key) from `start` (a key of that order):
    /// ascending, keys at or after it (`Included`) or after it; descending,
    /// at or before it or before it. Hands `visit` each row's key in that
    /// order and the row, until it answers false, with every write made
    /// before. `Ok(false)`: there is no such index.
    #[allow(clippy::result_unit_err)]
    fn walk_rows(
        &self,
        table: &[u8],
        index: Option<(&[u8], IndexKind)>,
        start: std::ops::Bound<&[u8]>,
        descending: bool,
        visit: &mut dyn FnMut(&[u8], Record) -> bool,
    ) -> Result<bool, ()>;

    /// What disagrees between the table's indexes and a full scan of its
    /// rows (nothing, normally).
    #[allow(clippy::result_unit_err)]
    fn check_indexes(&self, table: &[u8]) -> Result<Vec<String>, ()>;
}

/// How a row is put (Tokyo Cabinet's `put`, `putkeep`, `putcat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowMode {
    /// The row becomes exactly these columns.
    Put,
    /// Only if there is no such row.
    Keep,
    /// Adds the columns the row lacks; those it has stay.
    Cat,
}

/// What a row's edit does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowEdit {
    Leave,
    Put(Record),
    Remove,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowOutcome {
    Done,
    /// `Keep` found the row there.
    Kept,
    /// A removal found no row.
    Missing,
    /// An empty or too long table name or primary key.
    Invalid,
    /// The row would be larger than the engine allows (`-I`).
    TooLarge,
    /// The engine refuses writes (disk full or failed).
    Failed,
}

/// Sees the items an engine evicts (the server's log watchers).
pub trait EvictionWatcher: Send + Sync {
    /// Whether anyone wants evictions now; cheap (one relaxed load).
    fn wanted(&self) -> bool;
    /// An item about to be evicted.
    fn evicted(&self, item: &ItemInfo<'_>);
}

/// Orders writes for acknowledgement; larger tickets are decided later.
pub type AckTicket = u64;

/// The newest ticket among the writes a caller made whose replies must wait
/// for their append. The caller owns it (a worker, for one batch of
/// requests), passes it to every engine call, and takes it when the batch is
/// served.
#[derive(Debug, Default)]
pub struct AckFence(std::cell::Cell<AckSpan>);

impl AckFence {
    /// Replies now wait for `ticket` too.
    pub fn raise(&self, ticket: AckTicket) {
        self.0.set(self.0.get().join(AckSpan::of(ticket)));
    }

    /// The tickets to wait for, if any; the fence is down again.
    pub fn take(&self) -> Option<AckSpan> {
        Some(self.0.take()).filter(|span| !span.is_empty())
    }
}

/// The writes held replies wait for: the first and the newest ticket
/// raised since the fence was last taken. Tickets between them are the
/// caller's own writes or other connections': a failure anywhere in the
/// span fails it, so a failed write is never hidden by a later one that
/// worked (at worst a reply is withheld that could have gone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckSpan {
    pub first: AckTicket,
    pub last: AckTicket,
}

impl AckSpan {
    /// One ticket; 0, no ticket, is the empty span.
    pub fn of(ticket: AckTicket) -> AckSpan {
        AckSpan {
            first: ticket,
            last: ticket,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.last == 0
    }

    /// The span that covers both.
    pub fn join(self, other: AckSpan) -> AckSpan {
        match (self.is_empty(), other.is_empty()) {
            (true, _) => other,
            (_, true) => self,
            _ => AckSpan {
                first: self.first.min(other.first),
                last: self.last.max(other.last),
            },
        }
    }
}

/// Whether the replies of writes may go out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckState {
    /// Appended to the log (and fsynced) as the sync policy promises.
    Ready,
    Waiting,
    /// The append failed: the writes were not made durable and must not be
    /// acknowledged (the server closes the connection instead).
    Failed,
}

/// How a read treats the item.
#[derive(Debug, Clone, Copy, Default)]
pub struct GetOptions {
    /// New expiry (gat, `T` flag).
    pub touch: Option<ExpiryTime>,
    /// Leave LRU position, access time and "fetched" alone (meta `u`).
    pub no_bump: bool,
    /// On a miss, create an empty item with this expiry and let the caller win
    /// the right to fill it (meta `N`).
    pub vivify: Option<ExpiryTime>,
    /// Whether the read may win the right to recache the item.
    pub recache: Recache,
}

/// Whether a read may win the right to recache an item (meta get's `W`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Recache {
    /// Classic reads (and touches): never; a stale item keeps its token
    /// for a meta get.
    #[default]
    Never,
    /// A meta get: it wins a stale item's token, or (`R`) one with fewer
    /// than `below` seconds left.
    Meta { below: Option<i64> },
}

/// An item as a read sees it.
#[derive(Debug)]
pub struct ItemView<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub cas: u64,
    /// Seconds left, -1 for never.
    pub ttl: i64,
    /// Whether the item had been read before this access.
    pub fetched_before: bool,
    /// Seconds since the previous access.
    pub idle_seconds: u32,
    /// Marked stale by a meta delete with `I`.
    pub stale: bool,
    /// This caller won the right to recache the item.
    pub won: bool,
    /// Another caller already won it.
    pub win_taken: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

#[derive(Debug, Clone, Copy)]
pub struct StoreCommand<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub expiry: ExpiryTime,
    /// Store only if the item's CAS equals this (text `cas`, meta `C`).
    pub compare_cas: Option<u64>,
    /// Meta `I` with `C`: an older CAS still stores, but marks the item stale.
    pub stale_if_older: bool,
}

impl StoreCommand<'_> {
    /// A compare-and-set, counted in `cas_hits`, `cas_badval` and
    /// `cas_misses`: a set or replace with a CAS (memcached's `NREAD_CAS`),
    /// not an add, append or prepend with one.
    pub fn is_compare_and_set(&self) -> bool {
        self.compare_cas.is_some() && matches!(self.mode, StoreMode::Set | StoreMode::Replace)
    }
}

/// Whether a `flush_all` was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushOutcome {
    Done,
    /// The storage refuses writes (a failing disk, a replica): nothing was
    /// flushed.
    Failed,
}

/// What a read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetOutcome {
    Hit,
    Miss,
    /// The read had to write (touch, vivify, a recache win) and the storage
    /// refused the write (a full disk, a failed fsync): nothing was shown,
    /// nothing changed.
    Failed,
}

impl GetOutcome {
    pub fn is_hit(self) -> bool {
        self == GetOutcome::Hit
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOutcome {
    Stored {
        cas: u64,
    },
    NotStored,
    /// The CAS did not match.
    Exists,
    /// A CAS store found no item.
    NotFound,
    /// No room, and eviction is off (`-M`) or nothing can be evicted.
    OutOfMemory,
    /// The storage refused the write (a full disk, a failed fsync): nothing
    /// was acknowledged.
    Failed,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteCommand {
    pub compare_cas: Option<u64>,
    /// Meta `I`: mark stale and bump the CAS instead of removing; optionally
    /// with a new expiry.
    pub invalidate: Option<Option<ExpiryTime>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    NotFound,
    Exists,
    /// The storage refused the write; nothing was deleted.
    Failed,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ArithCommand {
    pub decrement: bool,
    pub delta: u64,
    pub compare_cas: Option<u64>,
    /// Create the counter on a miss with this initial value and expiry.
    pub vivify: Option<(u64, ExpiryTime)>,
    /// New expiry on success.
    pub touch: Option<ExpiryTime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArithOutcome {
    /// `created` when the counter was vivified on a miss.
    Value {
        value: u64,
        cas: u64,
        ttl: i64,
        created: bool,
    },
    NotFound,
    NonNumeric,
    Exists,
    OutOfMemory,
    /// The storage refused the write; the counter is unchanged.
    Failed,
}

/// What `me` shows of an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugView {
    pub ttl: i64,
    pub idle_seconds: u32,
    pub cas: u64,
    pub fetched: bool,
    pub class: usize,
    pub size: usize,
    /// The value's length.
    pub value_len: usize,
}

/// The entries a part of a scan for `items` items looks at, at most: its
/// work is bounded however many of them are dead.
pub fn scan_examined(items: usize) -> usize {
    items.saturating_mul(16)
}

/// Where a scan in parts goes on: a place in the engine's own order (the
/// memory engine's shard and slot, the disk engine's last key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanCursor(pub(crate) Vec<u8>);

impl ScanCursor {
    pub const START: ScanCursor = ScanCursor(Vec::new());
}

/// A scan in parts could not read the items, or not all the writes taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanFailed;

/// An item's metadata, as a scan sees it.
#[derive(Debug)]
pub struct ItemInfo<'a> {
    pub key: &'a [u8],
    /// Seconds left, -1 for never.
    pub ttl: i64,
    pub idle_seconds: u32,
    pub cas: u64,
    pub fetched: bool,
    pub class: usize,
    pub size: usize,
    /// Bytes of the value alone (`stats cachedump`).
    pub value_len: usize,
}

/// Per size class figures, for `stats slabs` and `stats items`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassStats {
    pub class: usize,
    pub chunk_size: usize,
    pub items: u64,
    /// Bytes charged to the class.
    pub bytes: u64,
    pub evicted: u64,
    pub evicted_nonzero: u64,
    pub evicted_unfetched: u64,
    pub expired_unfetched: u64,
    pub reclaimed: u64,
    /// Expired items the background reclaimer or `lru_crawler crawl` removed.
    pub crawler_reclaimed: u64,
    pub outofmemory: u64,
    /// Seconds the most recently evicted item had been idle.
    pub evicted_time: u32,
    /// Seconds since the least recently used item of the class was accessed.
    pub age: u32,
    /// Items on the temporary list (`-o temporary_ttl`), among `items`.
    pub temp_items: u64,
    /// Commands that found an item of the class (`stats slabs`).
    pub commands: classes::ClassCommands,
}

/// Engine-wide figures, named as memcached names them.
#[derive(Debug, Clone, Default)]
pub struct StoreStats {
    pub curr_items: u64,
    pub total_items: u64,
    pub bytes: u64,
    pub limit_maxbytes: u64,
    pub evictions: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    pub crawler_reclaimed: u64,
    pub crawler_items_checked: u64,
    /// Reads that found their item expired, or invalidated by flush_all
    /// (counted in the server's get_misses too).
    pub get_expired: u64,
    pub get_flushed: u64,
    pub hash_bytes: u64,
    pub hash_power_level: u32,
    pub classes: Vec<ClassStats>,
}

impl StoreStats {
    /// The counts made since `baseline` was taken (`stats reset`, which
    /// memcached applies to its item statistics too); the gauges (items,
    /// bytes, ages) as they are.
    pub fn since(mut self, baseline: &StoreStats) -> StoreStats {
        let minus = |now: &mut u64, then: u64| *now = now.saturating_sub(then);
        minus(&mut self.total_items, baseline.total_items);
        minus(&mut self.evictions, baseline.evictions);
        minus(&mut self.reclaimed, baseline.reclaimed);
        minus(&mut self.expired_unfetched, baseline.expired_unfetched);
        minus(&mut self.evicted_unfetched, baseline.evicted_unfetched);
        minus(&mut self.crawler_reclaimed, baseline.crawler_reclaimed);
        minus(
            &mut self.crawler_items_checked,
            baseline.crawler_items_checked,
        );
        minus(&mut self.get_expired, baseline.get_expired);
        minus(&mut self.get_flushed, baseline.get_flushed);
        for class in &mut self.classes {
            let Some(then) = baseline
                .classes
                .iter()
                .find(|then| then.class == class.class)
            else {
                continue;
            };
            minus(&mut class.evicted, then.evicted);
            minus(&mut class.evicted_nonzero, then.evicted_nonzero);
            minus(&mut class.evicted_unfetched, then.evicted_unfetched);
            minus(&mut class.expired_unfetched, then.expired_unfetched);
            minus(&mut class.reclaimed, then.reclaimed);
            minus(&mut class.crawler_reclaimed, then.crawler_reclaimed);
            minus(&mut class.outofmemory, then.outofmemory);
            class.commands = class.commands.since(&then.commands);
        }
        self
    }
}
