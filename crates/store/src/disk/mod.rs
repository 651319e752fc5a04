//! The disk engine: every item in LMDB (through `heed`), so data survives
//! restarts and crashes, and reads of data larger than RAM cost about one
//! page-cache miss.
//!
//! ```text
//!  worker ─ write ─▶ pending (sharded, in memory; reads look here first)
//!    │                   │ after its poll round, the worker (or the writer thread)
//!    │                   ▼
//!    │               journal ─ one append per group ─▶ acks (the group's replies go out)
//!    │                   │
//!    │                   ▼
//!    │               applier thread ─ an LMDB transaction per round (or part) ─▶ data.mdb, fsync,
//!    │                   segments that retention does not keep deleted
//!    │               syncer thread ─ fsync of the journal as the sync policy says
//! ```
//!
//! Workers never wait for LMDB's single writer: a write lands in `pending`
//! and its reply is held (not the worker) until its group is journalled.
//! Reads of committed data are LMDB read transactions on the memory map and
//! write nothing; a read notes its access in memory (`accesses.rs`).
//!
//! Reads find a pending write at once, but a reply that shows one not
//! journalled yet waits for it like the writer's own; a group whose append
//! fails closes the connections that wrote in it, or showed its writes,
//! unacknowledged.

mod accesses;
mod ack;
mod appender;
mod applier;
mod compactor;
mod config;
mod data_file;
mod dir_lock;
mod expiry;
mod flushed;
mod flushes;
mod health;
pub mod history;
mod identity;
pub mod io;
mod journal;
mod log_format;
mod open;
mod page_window;
mod pending;
mod policy;
mod read;
mod read_cache;
mod record;
#[cfg(test)]
mod replay_fuzz;
mod replication;
mod resident;
mod retention;
mod space;
mod stats;
mod syncer;
mod tables;
#[cfg(test)]
mod test_dirs;
mod threads;
mod write;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use heed::types::Bytes;
use heed::{Database, Env, RoTxn};
use parking_lot::Mutex;

use crate::clock::{is_expired, Clock, ExpiryTime};
use crate::semantics::Current;
use crate::{
    AckFence, AckSpan, AckState, AckTicket, ArithCommand, ArithOutcome, ClassCommand, ClassStats,
    DebugView, DeleteCommand, DeleteOutcome, FlushOutcome, GetOptions, GetOutcome, ItemInfo,
    ItemView, ScanCursor, ScanFailed, Store, StoreCommand, StoreOutcome, StoreStats,
};

pub use crate::log_position::{format_micros, LogPosition};
pub use config::{DiskConfig, MultiPrimary};
pub use journal::MOST_FILES_OPEN;
pub use open::OpenError;
use open::RESTORE_UNFINISHED;
use pending::PendingWrites;
pub use policy::SyncPolicy;
use read::ValueLost;
use record::{item_size, Counts, Header, LogPointer, FETCHED, IN_LOG};
pub use retention::LogRetention;

/// Every LMDB table: byte keys to byte values.
type Db = Database<Bytes, Bytes>;

/// `meta` key: the newest journal segment whose writes LMDB holds.
const JOURNAL_APPLIED: &[u8] = b"journal";
/// `meta` key: the newest update-log entry LMDB holds ([`LogPosition`]).
const APPLIED_LSN: &[u8] = b"lsn";
/// `meta` key: while LMDB holds part of a round (a large one commits in
/// parts, its position only with the last), the round's last entry; a copy
/// of LMDB (a full backup) is consistent from there, not from `lsn`.
const PARTIAL_ROUND: &[u8] = b"partial_lsn";
/// `meta` key: present while a replica's snapshot of its master is being
/// loaded, or was cut short (`replica.rs`): LMDB holds part of it.
const BASE_INCOMPLETE: &[u8] = b"base_incomplete";

pub struct DiskStore {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

/// What the workers, the writer, the applier and the syncer share.
struct Inner {
    env: Env,
    items: Db,
    /// Table rows by `rows::row_key`, their columns as `Record::encode_columns`.
    rows: Db,
    /// Index entries (`indexes.rs`): [index id u32 BE | key] ─▶ primary keys.
    indexes: Db,
    index_defs: tables::indexes::IndexDefs,
    expiry: Db,
    meta: Db,
    config: DiskConfig,
    /// The origin id of this server's log entries.
    server_id: u32,
    clock: Clock,
    last_cas: AtomicU64,
    /// A dual master's CAS values are stamps of this clock (`stamp.rs`);
    /// `None`: a counter.
    stamps: Option<crate::stamp::StampClock>,
    pending: PendingWrites,
    /// When each key was last stored or read, and whether its item was
    /// read since it was stored, nearly (`mg … l h`).
    accesses: accesses::Accesses,
    journal: journal::Journal,
    /// Held by whoever journals the next group (a worker after its poll
    /// round, or the writer thread), with the buffer the group is encoded in.
    journal_leader: Mutex<Vec<u8>>,
    /// Journalled and not yet applied (the writer's and applier's meeting point).
    logged: Mutex<appender::Logged>,
    /// Writes decided: journalled (their replies may go), or failed.
    acks: ack::Acks,
    /// Writes in LMDB, or whose append failed: what stats, scans and backpressure wait for.
    applied: ack::Acks,
    /// Flushes asked for and not yet in LMDB.
    flushes: flushes::Flushes,
    /// Whether writes are taken: poisoned, out of space, a replica.
    health: health::Health,
    /// A snapshot load was cut short: the data is incomplete, and the
    /// next attach to a master takes a snapshot again.
    base_incomplete: AtomicBool,
    /// The log segments attached replicas still need (`feed.rs`).
    replica_holds: replication::feed::ReplicaHolds,
    /// The newest journal segment whose writes LMDB holds.
    applied_segment: AtomicU64,
    /// Pages LMDB uses and its file's size, in bytes, as of the last commit.
    lmdb_usage: Mutex<Option<(u64, u64)>>,
    /// Items and bytes per class, and the journal bytes LMDB points to,
    /// as of the last commit.
    applied_counts: Mutex<Counts>,
    counters: Counters,
    signals: threads::Signals,
    /// This process's claim on the directory; released when the last
    /// thread using the engine is gone.
    _dir_lock: dir_lock::DirLock,
}

#[derive(Default)]
struct Counters {
    total_items: AtomicU64,
    /// Expired or flushed items whose space went back, by class: a store
    /// over one, the background expiry, a flush (memcached's `reclaimed`);
    /// expired ones `lru_crawler crawl` removed; expired ones never read.
    reclaims: Mutex<record::Reclaims>,
    /// Items the background expiry removed, for `maintain`'s answer.
    swept: AtomicU64,
    /// Commands by the class of the item they found (`stats slabs`).
    class_commands: crate::classes::ClassCommandCounts,
    /// Reads that found their item expired, or flushed.
    get_expired: AtomicU64,
    get_flushed: AtomicU64,
    /// Journal groups appended, and the writes in them.
    appends: AtomicU64,
    appended_writes: AtomicU64,
    /// Apply rounds (one LMDB transaction each, or several for a round
    /// committed in parts), and the journalled writes in them.
    applies: AtomicU64,
    applied_writes: AtomicU64,
    largest_append: AtomicU64,
    /// Appends to the journal that failed, and LMDB commits that failed.
    failed_appends: AtomicU64,
    failed_commits: AtomicU64,
    fsyncs: AtomicU64,
    fsync_micros: AtomicU64,
    /// Journal segments compacted, and the bytes of values moved.
    compactions: AtomicU64,
    compacted_bytes: AtomicU64,
    resident_trims: AtomicU64,
    /// Apply rounds that read their keys' pages first (LMDB outgrew `-m`).
    prefetched_rounds: AtomicU64,
    /// Bytes of the log the replay at open dropped: torn or damaged records.
    replay_dropped_bytes: AtomicU64,
    /// Peers' writes taken (newer here), and discarded (older than the
    /// key's write here: conflicts resolved).
    peer_taken: AtomicU64,
    peer_discarded: AtomicU64,
}

/// Any failure on the write path: the write is not acknowledged.
#[derive(Debug)]
struct WriteFailed;

impl From<heed::Error> for WriteFailed {
    fn from(error: heed::Error) -> Self {
        tracing::error!(%error, "disk engine read failed");
        WriteFailed
    }
}

impl DiskStore {
    /// Blocks until every write made so far is in LMDB, and the segment
    /// being appended to has ended, as a round on the timer ends it (for
    /// callers that use the engine directly, such as benchmarks and tests).
    pub fn wait_until_all_applied(&self) -> AckState {
        let inner = &self.inner;
        let state = inner.wait_applied(inner.pending.last_seq(), None, false);
        let _ = inner.end_segment();
        state
    }
}

impl Inner {
    fn now_unix(&self) -> u32 {
        self.clock.unix_now().min(u64::from(u32::MAX)) as u32
    }

    /// Server time → Unix time, for storing (0 stays "never").
    fn to_unix(&self, expiry: ExpiryTime) -> u32 {
        let unix = self.clock.to_unix(expiry).clamp(1, u64::from(u32::MAX)) as u32;
        match expiry {
            0 => 0,
            // A dual master keeps what dies from now on for the tombstone
            // lifetime, however far in the past it was set to expire.
            _ if self.stamps.is_some() => unix.max(self.now_unix()),
            _ => unix,
        }
    }

    fn ttl(&self, expiry_unix: u32) -> i64 {
        crate::clock::ttl_at(expiry_unix, self.now_unix())
    }

    /// Whether a stored item still counts: not expired, not flushed.
    fn alive(&self, header: &Header) -> bool {
        !is_expired(header.expiry_unix, self.now_unix()) && !self.flushes.covers(header.cas)
    }

    fn next_cas(&self) -> u64 {
        match &self.stamps {
            Some(stamps) => stamps.next(&self.last_cas),
            None => self.last_cas.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    /// The newest expiry time the sweep may remove: now, less a dual
    /// master's tombstone lifetime (`MultiPrimary`), for which it keeps
    /// what died.
    fn sweep_cutoff(&self) -> u32 {
        let kept = self.config.multi_primary.map_or(0, |multi| {
            multi.tombstone_lifetime.as_secs().min(u64::from(u32::MAX)) as u32
        });
        self.now_unix().saturating_sub(kept)
    }

    fn class_of(&self, key: &[u8], value_len: usize) -> usize {
        self.config.classes.class_of(item_size(key, value_len))
    }

    /// Counts `command` by the class of the item (`key`, a value of
    /// `value_len` bytes) it found or stores.
    fn count_command(&self, key: &[u8], value_len: usize, command: ClassCommand) {
        let class = self.class_of(key, value_len);
        self.counters.class_commands.count(class, command);
    }

    /// Wakes the writer and the applier until write `seq` is in LMDB or
    /// failed (or the engine stops, or cannot apply: poisoned, or its disk
    /// full), giving up at `deadline` if there is one. `apply_only`: the
    /// round need not start a segment (for a read, or expired items).
    fn wait_applied(&self, seq: u64, deadline: Option<Instant>, apply_only: bool) -> AckState {
        let mut asked = false;
        while self.applied.decided() < seq {
            self.signals.wake_writer();
            if !asked && self.acks.decided() >= seq {
                // Once: the round that starts after the request covers the
                // write, and asking again while it runs made another round
                // right after it, which applied a flush made meanwhile
                // before its time.
                if apply_only {
                    self.signals.wake_applier_to_apply_only();
                } else {
                    self.signals.wake_applier();
                }
                asked = true;
            }
            let in_time = deadline.is_none_or(|at| Instant::now() < at);
            self.applied.wait(seq, Duration::from_millis(10));
            // A poisoned engine applies nothing more, a full disk nothing
            // until there is room (the round asked for above may still go).
            if !in_time || !self.health.applies() || self.signals.stopping() {
                break;
            }
        }
        // Appended is not applied: a write the engine was poisoned before
        // applying failed to reach LMDB, however its append went.
        match (self.acks.state(seq), self.applied.state(seq)) {
            (AckState::Failed, _) => AckState::Failed,
            (_, AckState::Waiting) if self.health.is_poisoned() => AckState::Failed,
            (_, applied) => applied,
        }
    }

    /// Waits until every write taken so far is appended to the log; false
    /// if an append failed or the engine is poisoned or stopping.
    fn append_taken(&self) -> bool {
        let seq = self.pending.last_seq();
        loop {
            if self.health.is_poisoned() || self.signals.stopping() {
                return false;
            }
            self.signals.wake_writer();
            match self.acks.wait(seq, Duration::from_millis(10)) {
                AckState::Ready => return true,
                AckState::Failed => return false,
                AckState::Waiting => {}
            }
        }
    }
}

/// The newest entry LMDB holds (`meta`'s applied position).
fn applied_position(meta: &Db, txn: &RoTxn<'_>) -> heed::Result<LogPosition> {
    let bytes = meta.get(txn, APPLIED_LSN)?;
    Ok(bytes.and_then(LogPosition::decode).unwrap_or_default())
}

/// A `meta` value of eight bytes (u64 LE); 0 when it is missing.
fn meta_u64(meta: &Db, txn: &RoTxn<'_>, key: &[u8]) -> heed::Result<u64> {
    let bytes = meta.get(txn, key)?;
    Ok(bytes.map_or(0, |b| b.try_into().map_or(0, u64::from_le_bytes)))
}

/// The journal bytes LMDB points to, per segment, as `meta` keeps them.
fn log_live(meta: &Db, txn: &RoTxn<'_>) -> heed::Result<Vec<(u64, u64)>> {
    let mut live = Vec::new();
    for entry in meta.prefix_iter(txn, b"log")? {
        let (key, bytes) = entry?;
        if let Some(segment) = record::log_live_segment(key) {
            live.push((segment, bytes.try_into().map_or(0, u64::from_le_bytes)));
        }
    }
    Ok(live)
}

/// What memcached's decisions read of a record.
fn current<'v>(header: &Header, value: &'v [u8]) -> Current<'v> {
    Current::new(value, header.flags, header.cas, header.bits)
}

/// The header (as if the value were in place) and the pointer of a record
/// whose value is in the journal.
fn in_log((mut header, value): (Header, &[u8])) -> Option<(Header, LogPointer)> {
    let pointer = LogPointer::of_stored(&header, value)?;
    header.bits &= !IN_LOG;
    Some((header, pointer))
}

/// Logs a failed read of a value in the journal; the read fails.
fn log_read_failed(error: &std::io::Error, pointer: &LogPointer) -> WriteFailed {
    tracing::error!(%error, segment = pointer.at.segment, offset = pointer.at.offset, "cannot read a value from the journal");
    WriteFailed
}

impl Store for DiskStore {
    fn get(
        &self,
        key: &[u8],
        options: &GetOptions,
        fence: &AckFence,
        visit: &mut dyn FnMut(&ItemView<'_>),
    ) -> GetOutcome {
        self.inner.get(key, options, fence, visit)
    }

    fn store(&self, command: &StoreCommand<'_>, fence: &AckFence) -> StoreOutcome {
        self.inner.store(command, fence)
    }

    fn delete(&self, key: &[u8], command: &DeleteCommand, fence: &AckFence) -> DeleteOutcome {
        self.inner.delete(key, command, fence)
    }

    fn arith(&self, key: &[u8], command: &ArithCommand, fence: &AckFence) -> ArithOutcome {
        self.inner.arith(key, command, fence)
    }

    fn touch(&self, key: &[u8], expiry: ExpiryTime, fence: &AckFence) -> GetOutcome {
        // memcached's touch reads the item: it is fetched from then on.
        let options = GetOptions {
            touch: Some(expiry),
            ..GetOptions::default()
        };
        self.get(key, &options, fence, &mut |_| {})
    }

    fn flush_all(&self, delay: i64, fence: &AckFence) -> FlushOutcome {
        // A flush frees space, so it goes on while the disk is full, as
        // deletes do; a poisoned engine could not log it.
        if !self.inner.health.takes_delete() {
            return FlushOutcome::Failed;
        }
        match self.inner.clock.flush_due(delay) {
            Some(at) => self.inner.flushes.delayed.schedule(at),
            None => {
                self.inner.flushes.delayed.cancel();
                self.inner.flush(fence);
            }
        }
        FlushOutcome::Done
    }

    fn debug(&self, key: &[u8], fence: &AckFence) -> Option<DebugView> {
        let inner = &self.inner;
        let mut shard = inner.pending.lock(key);
        let key_hash = shard.hash();
        let view = inner.with_record(&mut shard, key, fence, ValueLost::Fails, |found| {
            let (header, value) = found.filter(|(header, _)| inner.alive(header))?;
            Some(DebugView {
                ttl: inner.ttl(header.expiry_unix),
                idle_seconds: inner.accesses.idle_seconds(key_hash, inner.clock.now()),
                cas: header.cas,
                fetched: header.has(FETCHED),
                class: inner.class_of(key, value.len()),
                size: item_size(key, value.len()),
                value_len: value.len(),
            })
        });
        view.ok().flatten()
    }

    fn maintain(&self) -> usize {
        let inner = &self.inner;
        // Nobody's reply waits for a delayed flush applied in the background.
        inner.start_due_flush(&AckFence::default());
        inner.check_space();
        resident::trim(
            &inner.env.path().join("data.mdb"),
            inner.config.memory_budget as u64,
            &inner.counters.resident_trims,
        );
        inner.reclaim_expired_now()
    }

    fn crawl(&self, include: &dyn Fn(usize) -> bool) -> usize {
        let classes = (0..=crate::classes::MAX_CLASSES).map(include).collect();
        self.inner.crawl_expired_now(classes)
    }

    fn set_memory_limit(&self, _bytes: usize) {
        // The disk engine keeps everything; its memory is the OS page cache.
    }

    fn stats(&self) -> StoreStats {
        let inner = &self.inner;
        // LMDB up to every write made before `stats`, as a scan waits: a
        // count that lags an acknowledged write is wrong, not late. Under
        // load this costs the worker about one apply round (measured in
        // docs/BENCHMARKS.md); an engine that cannot apply (poisoned, its
        // disk full) or is stopping ends the wait.
        inner.wait_applied(inner.pending.last_seq(), None, true);
        let counters = &inner.counters;
        // The class counts only: the per-segment map can be long.
        let counts = inner.applied_counts.lock().classes.clone();
        let reclaims = counters.reclaims.lock().clone();
        StoreStats {
            curr_items: counts.items(),
            total_items: counters.total_items.load(Ordering::Relaxed),
            bytes: counts.bytes(),
            limit_maxbytes: inner.config.memory_budget as u64,
            reclaimed: reclaims.reclaimed.values().sum(),
            expired_unfetched: reclaims.unfetched,
            crawler_reclaimed: reclaims.crawled.values().sum(),
            get_expired: counters.get_expired.load(Ordering::Relaxed),
            get_flushed: counters.get_flushed.load(Ordering::Relaxed),
            classes: (1..=inner.config.classes.len())
                .map(|class| {
                    let (items, bytes) = counts.0.get(class - 1).copied().unwrap_or_default();
                    ClassStats {
                        class,
                        chunk_size: inner.config.classes.chunk_size(class),
                        items,
                        bytes,
                        reclaimed: reclaims.reclaimed.get(&class).copied().unwrap_or(0),
                        crawler_reclaimed: reclaims.crawled.get(&class).copied().unwrap_or(0),
                        commands: counters.class_commands.of(class),
                        ..ClassStats::default()
                    }
                })
                .filter(|class| {
                    class.items > 0
                        || class.reclaimed > 0
                        || class.crawler_reclaimed > 0
                        || class.commands != Default::default()
                })
                .collect(),
            ..StoreStats::default()
        }
    }

    fn scan(&self, visit: &mut dyn FnMut(&ItemInfo<'_>)) -> bool {
        // As a table's scan: every write taken so far in LMDB first, unless
        // the engine cannot apply (a full or failing disk).
        let complete = self.inner.catch_up().is_ok();
        // What LMDB holds is listed either way.
        let listed = self.inner.scan_items(None, usize::MAX, visit).is_ok();
        complete && listed
    }

    fn scan_part(
        &self,
        from: &ScanCursor,
        items: usize,
        visit: &mut dyn FnMut(&ItemInfo<'_>),
    ) -> Result<Option<ScanCursor>, ScanFailed> {
        if *from == ScanCursor::START {
            self.inner.catch_up().map_err(|_| ScanFailed)?;
        }
        // The cursor: a byte, then the last key seen (START is empty).
        let after = from.0.split_first().map(|(_, key)| key);
        (self.inner.scan_items(after, items, visit)).map_err(|_| ScanFailed)
    }

    fn size_histogram(&self) -> Vec<(usize, u64)> {
        let mut buckets = std::collections::BTreeMap::new();
        self.scan(&mut |item| *buckets.entry(item.size.div_ceil(32) * 32).or_insert(0u64) += 1);
        buckets.into_iter().collect()
    }

    fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    fn engine_stats(&self) -> Vec<(&'static str, String)> {
        self.inner.engine_stats()
    }

    fn backup(&self, to: &Path, since: Option<&Path>) -> Result<String, String> {
        let manifest = self.inner.backup(to, since).map_err(|e| e.to_string())?;
        Ok(serde_json::to_string(&manifest).expect("a manifest serializes"))
    }

    fn ack_state(&self, span: AckSpan) -> AckState {
        self.inner.acks.state_of(span)
    }

    fn sync(&self) -> bool {
        let inner = &self.inner;
        inner.append_taken()
            && inner.fsync("journal fsync failed", || inner.journal.sync_everything())
    }

    fn request_append(&self) {
        let inner = &self.inner;
        // A worker journals its own round's writes when no other thread is
        // at it: an append costs less than waking the writer thread and
        // being woken back. Under `always` the append waits for an fsync,
        // which workers leave to the writer thread.
        if inner.config.sync != SyncPolicy::Always {
            if let Some(mut group) = inner.journal_leader.try_lock() {
                inner.journal_round(&mut group, None);
                return;
            }
        }
        inner.signals.wake_writer();
    }

    fn on_ack_progress(&self, listener: Box<dyn Fn(AckTicket) + Send + Sync>) {
        self.inner.acks.listen(listener);
    }

    fn tables(&self) -> Option<&dyn crate::Tables> {
        Some(self)
    }

    fn replication(&self) -> Option<&dyn crate::replication::Replication> {
        Some(self)
    }
}
