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
//!    │               applier thread ─ one LMDB transaction per round ─▶ data.mdb, fsync,
//!    │                   journal segments deleted
//!    │               syncer thread ─ fsync of the journal as the sync policy says
//! ```
//!
//! Workers never wait for LMDB's single writer: a write lands in `pending`
//! and its reply is held (not the worker) until its group is journalled.
//! Reads of committed data are LMDB read transactions on the memory map and
//! write nothing; a first read only notes the fetched bit.
//!
//! Reads see a pending write before it is journalled (read-uncommitted, as
//! Redis reads see writes before the append-only file is synced); a group
//! whose append fails closes the connections that wrote in it,
//! unacknowledged.

mod ack;
mod appender;
mod applier;
pub mod backup;
mod change;
mod compactor;
mod dir_lock;
mod expiry;
pub mod history;
mod identity;
pub mod io;
mod journal;
mod marks;
mod page_window;
mod pending;
mod policy;
mod record;
#[cfg(test)]
mod replay_fuzz;
mod resident;
pub mod restore;
mod retention;
mod space;
mod stats;
mod syncer;
mod threads;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};
use parking_lot::Mutex;

use crate::classes::SizeClasses;
use crate::clock::{Clock, ExpiryTime};
use crate::semantics::{self, ArithPlan, Current, DeletePlan, Expiry, StorePlan, Write};
use crate::{
    AckFence, AckState, AckTicket, ArithCommand, ArithOutcome, ClassStats, DebugView,
    DeleteCommand, DeleteOutcome, GetOptions, ItemInfo, ItemView, Store, StoreCommand, StoreMode,
    StoreOutcome, StoreStats,
};
use io::{Io, OsIo};

pub use journal::LogPosition;
use pending::{Change, Pending, PendingWrites, Shard, MAX_CACHED_RECORD};
pub use policy::SyncPolicy;
use record::{
    item_size, ClassCounts, Counts, Header, Keyed, LogPointer, FETCHED, IN_LOG, STALE, WIN_SENT,
};
pub use retention::LogRetention;

/// Readers LMDB admits at once: one slot per thread that ever reads.
const MAX_READERS: u32 = 1024;
/// The longest `stats` or a scan waits for the applier to catch up.
const CATCH_UP_WAIT: Duration = Duration::from_millis(200);
/// The shortest value kept in the journal: a pointer record takes 41 bytes.
pub const MIN_LOGGED_VALUE: usize = 64;
/// `meta` key: the newest journal segment whose writes LMDB holds.
const JOURNAL_APPLIED: &[u8] = b"journal";
/// `meta` key: the newest update-log entry LMDB holds ([`LogPosition`]).
const APPLIED_LSN: &[u8] = b"lsn";
/// `meta` key: the format of the data directory (u32 LE).
const FORMAT_KEY: &[u8] = b"format";
/// The data directory's format: LMDB's tables and the journal's records as
/// `docs/DESIGN.md` describes them.
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone)]
pub struct DiskConfig {
    pub dir: PathBuf,
    /// The largest the data file may grow (LMDB's map size).
    pub map_size: usize,
    pub sync: SyncPolicy,
    pub classes: SizeClasses,
    /// Writes are refused (`SERVER_ERROR`) while less than this much room
    /// is left in the map or on the file system; deletes still work.
    pub reserve_bytes: u64,
    /// Memory for writes waiting to be applied; a writer that finds it
    /// full waits for the round in progress.
    pub pending_limit: usize,
    /// Values at least this long stay in the journal, and LMDB holds a
    /// pointer to them (0: every value goes into LMDB).
    pub log_values_from: usize,
    /// Resident memory kura keeps to: when the process grows past it, the
    /// pages of the data file it has mapped are dropped from its resident
    /// set (they stay in the OS page cache; the next read maps them again).
    pub memory_budget: usize,
    /// `maintain` removes expired items in the background; without it they
    /// go when met or at `lru_crawler crawl` (`-o no_lru_maintainer`).
    pub background_expiry: bool,
    /// The origin id of this server's log entries (`--server-id`); `None`:
    /// the one kept in the directory, or a new random one.
    pub server_id: Option<u32>,
    /// How long and how much of the update log is kept once applied.
    pub log_retention: LogRetention,
    /// A restore's replay: the entries after this LSN are not applied.
    pub replay_until: Option<u64>,
    /// The file operations (the fault tests inject failures here).
    pub io: Arc<dyn Io>,
}

impl DiskConfig {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskConfig {
            dir: dir.into(),
            map_size: 64 << 30,
            sync: SyncPolicy::Batch,
            classes: SizeClasses::default(),
            reserve_bytes: 64 << 20,
            pending_limit: 256 << 20,
            log_values_from: 1024,
            memory_budget: 1 << 30,
            background_expiry: true,
            server_id: None,
            log_retention: LogRetention::default(),
            replay_until: None,
            io: Arc::new(OsIo),
        }
    }

    /// Whether a value of `len` bytes stays in the journal (never one
    /// shorter than [`MIN_LOGGED_VALUE`], whose pointer would outweigh it).
    pub fn keeps_in_log(&self, len: usize) -> bool {
        self.log_values_from != 0 && len >= self.log_values_from.max(MIN_LOGGED_VALUE)
    }

    /// Committed records kept in memory for reads: a quarter of the budget.
    pub fn read_cache_bytes(&self) -> usize {
        self.memory_budget / 4
    }

    /// Bytes of the update log kept in the OS page cache once on disk: a
    /// quarter of the budget (the page cache is not kura's resident set,
    /// but it is memory the log takes from the machine).
    pub fn log_cache_bytes(&self) -> u64 {
        self.memory_budget as u64 / 4
    }

    /// Journalled writes that make the applier start a round before its
    /// interval: a sixteenth of the pending memory (big enough to share
    /// pages, small enough to apply while more writes come).
    pub fn apply_threshold(&self) -> usize {
        self.pending_limit / 16
    }

    /// First reads noted in memory before the writer commits them although
    /// it is busy: about a sixth of the pending memory (a note costs about
    /// 100 bytes with its key).
    pub fn mark_limit(&self) -> usize {
        self.pending_limit / 600
    }
}

/// Why the disk engine could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("cannot open the LMDB environment: {0}")]
    Lmdb(#[from] heed::Error),
    #[error("cannot start the writer thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot open or replay the journal: {0}")]
    Journal(std::io::Error),
    #[error(transparent)]
    Locked(#[from] dir_lock::LockError),
    #[error("{0}")]
    Format(String),
    #[error("cannot read or keep the server id: {0}")]
    Identity(std::io::Error),
}

pub struct DiskStore {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

/// What the workers, the writer and the syncer share.
struct Inner {
    env: Env,
    items: Database<Bytes, Bytes>,
    expiry: Database<Bytes, Bytes>,
    meta: Database<Bytes, Bytes>,
    config: DiskConfig,
    /// The origin id of this server's log entries.
    server_id: u32,
    clock: Clock,
    last_cas: AtomicU64,
    pending: PendingWrites,
    marks: marks::FetchMarks,
    journal: journal::Journal,
    /// Held by whoever journals the next group (a worker after its poll
    /// round, or the writer thread), with the buffer the group is encoded in.
    journal_leader: Mutex<Vec<u8>>,
    /// Journalled and not yet applied (the writer's and applier's meeting point).
    logged: Mutex<appender::Logged>,
    /// Writes decided: journalled (their replies may go), or failed.
    acks: ack::Acks,
    /// Writes in LMDB (or failed): what stats, scans and backpressure wait for.
    applied: ack::Acks,
    /// A flush waiting for the writer. The writer drains pending writes
    /// under this lock, so a flush falls wholly before or after a drain.
    flush_request: Mutex<Option<u64>>,
    /// Items with a CAS up to this were flushed (the writer clears them
    /// from LMDB in its next commit; until then reads skip them).
    flushed_through: AtomicU64,
    /// Server time of a pending delayed `flush_all`; 0 when none.
    flush_deadline: AtomicU32,
    /// An fsync or commit failed for a reason other than space: writes are
    /// refused from then on.
    poisoned: AtomicBool,
    /// Too little room left: writes are refused until space is freed.
    out_of_space: AtomicBool,
    /// The live data is larger than the memory budget, so a write's leaf
    /// page is likely on the device: the applier reads a round's pages with
    /// several threads at once before its transaction, rather than one by
    /// one inside it.
    fetch_before_write: AtomicBool,
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

/// A count in total and per size class.
#[derive(Default)]
struct ClassTally {
    total: AtomicU64,
    /// Index = class.
    per_class: Mutex<Vec<u64>>,
}

impl ClassTally {
    fn add(&self, class: usize, count: u64) {
        self.total.fetch_add(count, Ordering::Relaxed);
        let mut classes = self.per_class.lock();
        if classes.len() <= class {
            classes.resize(class + 1, 0);
        }
        classes[class] += count;
    }

    fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    fn of(&self, class: usize) -> u64 {
        self.per_class.lock().get(class).copied().unwrap_or(0)
    }

    fn classes(&self) -> usize {
        self.per_class.lock().len().saturating_sub(1)
    }
}

#[derive(Default)]
struct Counters {
    total_items: AtomicU64,
    /// Expired or flushed items whose space went back: a store over one,
    /// the background expiry, a flush (memcached's `reclaimed`).
    reclaimed: ClassTally,
    /// Items the background expiry removed, for `maintain`'s answer.
    swept: AtomicU64,
    expired_unfetched: AtomicU64,
    /// Expired items `lru_crawler crawl` removed.
    crawler_reclaimed: ClassTally,
    /// Reads that found their item expired, or flushed.
    get_expired: AtomicU64,
    get_flushed: AtomicU64,
    /// Journal groups appended, and the writes in them.
    appends: AtomicU64,
    appended_writes: AtomicU64,
    /// LMDB transactions of journalled writes, and the writes in them.
    applies: AtomicU64,
    applied_writes: AtomicU64,
    largest_append: AtomicU64,
    /// Appends to the journal that failed, and LMDB commits that failed.
    failed_appends: AtomicU64,
    failed_commits: AtomicU64,
    fsyncs: AtomicU64,
    fsync_micros: AtomicU64,
    writes_refused: AtomicU64,
    /// Journal segments compacted, and the bytes of values moved.
    compactions: AtomicU64,
    compacted_bytes: AtomicU64,
    resident_trims: AtomicU64,
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

/// What a write does to its key, decided against the current item.
enum Decision {
    Keep,
    /// Store this record (header and value, encoded, with the key).
    Put(Keyed),
    Remove,
}

/// What a read found, when it may not have to write.
enum Lookup {
    Miss,
    Hit,
    /// Hit an item never read before: note the fetched bit.
    FirstHit(u64),
    /// The read changes the item (touch, recache win): redo it as a write.
    NeedsWrite,
}

impl DiskStore {
    pub fn open(config: DiskConfig) -> Result<Self, OpenError> {
        std::fs::create_dir_all(&config.dir).map_err(|e| OpenError::Dir(config.dir.clone(), e))?;
        let dir_lock = dir_lock::DirLock::acquire(&config.dir)?;
        let server_id =
            identity::server_id(&config.dir, config.server_id).map_err(OpenError::Identity)?;
        let mut options = EnvOpenOptions::new();
        options
            .map_size(config.map_size)
            .max_dbs(4)
            .max_readers(MAX_READERS);
        // Random reads of data larger than RAM want one page, not a readahead
        // window. The journal makes writes durable; the applier fsyncs the
        // data file itself before it deletes journal segments.
        let flags = EnvFlags::NO_READ_AHEAD | EnvFlags::NO_SYNC;
        // SAFETY: the environment is opened once per process and directory; kura
        // never opens the same data file twice, and does not modify it outside LMDB.
        #[allow(unsafe_code)]
        let env = unsafe { options.flags(flags).open(&config.dir)? };
        let mut txn = env.write_txn()?;
        let items: Database<Bytes, Bytes> = env.create_database(&mut txn, Some("items"))?;
        let expiry = env.create_database(&mut txn, Some("expiry"))?;
        let meta: Database<Bytes, Bytes> = env.create_database(&mut txn, Some("meta"))?;
        let segments = journal::segments(&config.dir).map_err(OpenError::Journal)?;
        check_format(&config.dir, &mut txn, &meta, &items, !segments.is_empty())?;
        let last_cas = meta
            .get(&txn, b"cas")?
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0);
        let mut counts = Counts {
            // Every commit records them: none yet is none at all.
            classes: meta
                .get(&txn, b"classes")?
                .and_then(ClassCounts::decode)
                .unwrap_or_default(),
            ..Counts::default()
        };
        for entry in meta.prefix_iter(&txn, b"log")? {
            let (key, bytes) = entry?;
            let bytes = bytes.try_into().ok().map(u64::from_le_bytes);
            if let (Some(segment), Some(bytes)) = (record::log_live_segment(key), bytes) {
                counts.log.set(segment, bytes);
            }
        }
        let applied_segment = meta
            .get(&txn, JOURNAL_APPLIED)?
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0);
        let applied_lsn = meta
            .get(&txn, APPLIED_LSN)?
            .and_then(LogPosition::decode)
            .unwrap_or_default();
        txn.commit()?;
        let newest = segments.last().map_or(0, |(number, _)| *number);
        let journal = journal::Journal::create(
            &config.dir,
            newest.max(applied_segment) + 1,
            config.io.clone(),
            config.log_cache_bytes(),
        )
        .map_err(OpenError::Journal)?;
        // `segments` is sorted by number.
        counts.log.forget_missing(|segment| {
            segments
                .binary_search_by_key(&segment, |(found, _)| *found)
                .is_ok()
        });
        let inner = Arc::new(Inner {
            env,
            items,
            expiry,
            meta,
            clock: Clock::new(),
            last_cas: AtomicU64::new(last_cas),
            pending: PendingWrites::new(config.read_cache_bytes()),
            marks: marks::FetchMarks::new(),
            journal,
            journal_leader: Mutex::new(Vec::new()),
            logged: Mutex::new(appender::Logged::default()),
            acks: ack::Acks::default(),
            applied: ack::Acks::default(),
            flush_request: Mutex::new(None),
            flushed_through: AtomicU64::new(0),
            flush_deadline: AtomicU32::new(0),
            poisoned: AtomicBool::new(false),
            out_of_space: AtomicBool::new(false),
            fetch_before_write: AtomicBool::new(false),
            applied_segment: AtomicU64::new(applied_segment),
            lmdb_usage: Mutex::new(None),
            applied_counts: Mutex::new(counts),
            counters: Counters::default(),
            signals: threads::Signals::default(),
            config,
            server_id,
            _dir_lock: dir_lock,
        });
        inner.journal.resume_after(applied_lsn);
        inner.replay(&segments, applied_segment)?;
        inner.measure_lmdb_usage();
        inner.check_space();
        let threads = threads::start(&inner).map_err(OpenError::Thread)?;
        Ok(DiskStore { inner, threads })
    }

    pub fn path(&self) -> &Path {
        self.inner.env.path()
    }

    /// Blocks until every write made so far is in LMDB (for callers that
    /// use the engine directly, such as benchmarks and tests).
    pub fn wait_until_all_applied(&self) -> AckState {
        self.inner.wait_until_applied(self.inner.pending.last_seq())
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        self.inner.signals.stop();
        let mut threads = self.threads.drain(..);
        // The writer journals what is pending before it ends; the applier
        // then puts everything into LMDB, fsyncs it and empties the journal,
        // so a clean shutdown leaves nothing to replay.
        if let Some(writer) = threads.next() {
            let _ = writer.join();
        }
        self.inner.signals.finish();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// Refuses a data directory of another format; marks a new one with
/// [`FORMAT_VERSION`].
fn check_format(
    dir: &Path,
    txn: &mut heed::RwTxn<'_>,
    meta: &Database<Bytes, Bytes>,
    items: &Database<Bytes, Bytes>,
    has_journal: bool,
) -> Result<(), OpenError> {
    let found = meta
        .get(txn, FORMAT_KEY)?
        .and_then(|bytes| bytes.try_into().ok())
        .map(u32::from_le_bytes);
    match found {
        Some(FORMAT_VERSION) => Ok(()),
        Some(other) => Err(OpenError::Format(format!(
            "{} holds data of format {other}; this kura reads format {FORMAT_VERSION}",
            dir.display()
        ))),
        None if has_journal || !items.is_empty(txn)? || meta.get(txn, b"cas")?.is_some() => {
            Err(OpenError::Format(format!(
                "{} was written by a development build of kura before format {FORMAT_VERSION}; start with an empty directory",
                dir.display()
            )))
        }
        None => {
            meta.put(txn, FORMAT_KEY, &FORMAT_VERSION.to_le_bytes())?;
            Ok(())
        }
    }
}

impl Inner {
    fn now_unix(&self) -> u32 {
        self.clock.unix_now().min(u64::from(u32::MAX)) as u32
    }

    /// Server time → Unix time, for storing (0 stays "never").
    fn to_unix(&self, expiry: ExpiryTime) -> u32 {
        if expiry == 0 {
            0
        } else {
            let offset = i64::from(expiry) - i64::from(self.clock.now());
            (i64::from(self.now_unix()) + offset).clamp(1, i64::from(u32::MAX)) as u32
        }
    }

    fn ttl(&self, expiry_unix: u32) -> i64 {
        if expiry_unix == 0 {
            -1
        } else {
            i64::from(expiry_unix)
                .saturating_sub(i64::from(self.now_unix()))
                .max(0)
        }
    }

    fn expired(&self, header: &Header) -> bool {
        header.expiry_unix != 0 && header.expiry_unix <= self.now_unix()
    }

    /// Whether a stored item still counts: not expired, not flushed.
    fn alive(&self, header: &Header) -> bool {
        !self.expired(header) && header.cas > self.flushed_through.load(Ordering::Acquire)
    }

    /// `count` expired or flushed items of `class` gave their space back.
    fn note_reclaimed(&self, class: usize, count: u64) {
        self.counters.reclaimed.add(class, count);
    }

    fn next_cas(&self) -> u64 {
        self.last_cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn class_of(&self, key: &[u8], value_len: usize) -> usize {
        self.config.classes.class_of(item_size(key, value_len))
    }

    /// Wakes the writer and the applier until write `seq` is in LMDB or
    /// failed (or the engine stops).
    fn wait_until_applied(&self, seq: u64) -> AckState {
        self.wait_applied(seq, None)
    }

    /// Brings LMDB up to every write made so far, for the figures and scans
    /// that read it directly: exact when the writes pause, at most
    /// [`CATCH_UP_WAIT`] late under load (a monitor polling `stats` must not
    /// stall a worker for a whole round).
    fn apply_everything(&self) {
        let deadline = std::time::Instant::now() + CATCH_UP_WAIT;
        self.wait_applied(self.pending.last_seq(), Some(deadline));
    }

    /// [`wait_until_applied`](Self::wait_until_applied), giving up at
    /// `deadline` if there is one.
    fn wait_applied(&self, seq: u64, deadline: Option<std::time::Instant>) -> AckState {
        while self.applied.decided() < seq {
            self.signals.wake_writer();
            if self.acks.decided() >= seq {
                self.signals.wake_applier();
            }
            let in_time = deadline.is_none_or(|at| std::time::Instant::now() < at);
            let waiting = self.applied.wait(seq, Duration::from_millis(10)) == AckState::Waiting;
            // A poisoned engine applies nothing more.
            let poisoned = self.poisoned.load(Ordering::Acquire);
            if !waiting || !in_time || poisoned || self.signals.stopping() {
                break;
            }
        }
        self.acks.state(seq)
    }

    fn writable(&self) -> bool {
        let ok =
            !self.poisoned.load(Ordering::Acquire) && !self.out_of_space.load(Ordering::Acquire);
        if !ok {
            self.counters.writes_refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Puts the writes of journal segments LMDB does not hold yet into it,
    /// oldest first (they were acknowledged before a crash), fsyncs the data
    /// file and deletes the segments nothing points into.
    fn replay(&self, segments: &[(u64, PathBuf)], applied: u64) -> Result<(), OpenError> {
        let mut replayed = None;
        let mut counts = self.applied_counts.lock().clone();
        for (number, path) in segments {
            if *number <= applied {
                continue;
            }
            let mut txn = self.env.write_txn()?;
            let mut failed = None;
            let mut numbering = journal::Numbering::default();
            let mut last = self.journal.current_end().2;
            let records = journal::replay(path, *number, |record, offset| {
                if failed.is_some() {
                    return;
                }
                if let Some((lsn, head)) = numbering.number(&record) {
                    if self.config.replay_until.is_some_and(|until| lsn > until) {
                        return;
                    }
                    last = LogPosition {
                        lsn,
                        micros: head.micros,
                    };
                }
                let flushed_through = self.flushed_through.load(Ordering::Acquire);
                let here = journal::Location {
                    segment: *number,
                    offset,
                };
                let result = match record {
                    journal::Record::Put { key, record } => {
                        if let Some((header, _)) = Header::decode(record) {
                            self.last_cas.fetch_max(header.cas, Ordering::AcqRel);
                        }
                        let write = change::Write::Put {
                            stored: record,
                            logged: Some(here),
                        };
                        self.apply(&mut txn, key, write, flushed_through, &mut counts)
                    }
                    journal::Record::Move { key, from, record } => {
                        let write = change::Write::Move {
                            from,
                            to: here,
                            frame_len: journal::move_len(key, record.len()),
                        };
                        self.apply(&mut txn, key, write, flushed_through, &mut counts)
                    }
                    journal::Record::Remove { key } => {
                        let write = change::Write::Remove;
                        self.apply(&mut txn, key, write, flushed_through, &mut counts)
                    }
                    journal::Record::Flush(boundary) => {
                        self.flushed_through.fetch_max(boundary, Ordering::AcqRel);
                        counts.clear();
                        self.items
                            .clear(&mut txn)
                            .and_then(|()| self.expiry.clear(&mut txn))
                    }
                    journal::Record::Group(_) => Ok(()),
                };
                failed = result.err();
            })
            .map_err(OpenError::Journal)?;
            if let Some(error) = failed {
                return Err(error.into());
            }
            // LMDB will point into it: on disk first (a crash of kura leaves
            // the segment in the page cache only).
            File::open(path)
                .and_then(|file| self.config.io.sync_log(&file))
                .map_err(OpenError::Journal)?;
            self.put_meta(&mut txn, &mut counts, Some((*number, last)))?;
            self.config.io.commit(txn)?;
            self.journal.resume_after(last);
            self.applied_segment.fetch_max(*number, Ordering::AcqRel);
            tracing::info!(segment = number, records, "replayed journal segment");
            replayed = Some(*number);
        }
        *self.applied_counts.lock() = counts;
        self.config.io.sync_data(&self.env)?;
        let last = replayed.unwrap_or(applied).max(applied);
        self.remove_dead_segments(last);
        Ok(())
    }

    /// Flushes everything written so far: reads skip it at once, the writer
    /// clears it from LMDB in its next commit.
    fn flush(&self, fence: &AckFence) {
        let mut request = self.flush_request.lock();
        let boundary = self.last_cas.load(Ordering::Acquire);
        self.flushed_through.fetch_max(boundary, Ordering::AcqRel);
        *request = Some(boundary);
        let seq = self.pending.next_seq();
        drop(request);
        fence.raise(seq);
        // Every cached record is dead now: give their memory back.
        self.pending.clear_cache();
    }

    /// Applies a delayed flush whose time has come.
    fn apply_due_flush(&self, fence: &AckFence) {
        let deadline = self.flush_deadline.load(Ordering::Relaxed);
        if deadline != 0
            && self.clock.now() >= deadline
            && self
                .flush_deadline
                .compare_exchange(deadline, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            self.flush(fence);
        }
    }

    /// Runs `f` on the key's current stored record: its pending write if it
    /// has one, else its cached record, else what LMDB holds (then cached).
    /// The caller holds the key's shard lock, so no write of the key comes
    /// between the look in the pending table and the read of LMDB: a write
    /// the writer has just retired is seen committed, and what is cached is
    /// LMDB's newest.
    fn with_record<R>(
        &self,
        shard: &mut Shard<'_>,
        key: &[u8],
        f: impl FnOnce(Option<(Header, &[u8])>) -> R,
    ) -> Result<R, WriteFailed> {
        let hash = shard.hash();
        match shard.get(key) {
            Some(Pending::Put(record)) => {
                let found = Header::decode(record);
                let Some((header, pointer)) = found.and_then(in_log) else {
                    return Ok(f(self.with_noted_fetch(hash, found)));
                };
                // Journalled, and its value dropped from memory: read it
                // there (its segment stays until LMDB has it).
                let from_log = self.read_logged(key, &pointer).map_err(|error| {
                    log_read_failed(&error, &pointer);
                    WriteFailed
                })?;
                return Ok(f(self.with_noted_fetch(
                    hash,
                    Some((header, record::value_of(from_log.record()))),
                )));
            }
            Some(Pending::Remove) => return Ok(f(None)),
            None => {}
        }
        if let Some(record) = shard.cached(key) {
            return Ok(f(self.with_noted_fetch(hash, Header::decode(record))));
        }
        let mut attempts = 0;
        loop {
            let txn = self.env.read_txn()?;
            let stored = self.items.get(&txn, key)?;
            let Some((header, pointer)) = stored.and_then(Header::decode).and_then(in_log) else {
                let result = f(self.with_noted_fetch(hash, stored.and_then(Header::decode)));
                if let Some(record) = stored {
                    if record.len() <= MAX_CACHED_RECORD && shard.admit() {
                        shard.cache(key, record);
                    }
                }
                return Ok(result);
            };
            drop(txn);
            let from_log = match self.read_logged(key, &pointer) {
                Ok(from_log) => from_log,
                // Compacted since the pointer was read: its segment is gone.
                // LMDB has the new place.
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidData
                    ) && attempts < 3 =>
                {
                    attempts += 1;
                    continue;
                }
                Err(error) => {
                    log_read_failed(&error, &pointer);
                    return Err(WriteFailed);
                }
            };
            // LMDB's header (its bits are the newest), the journal's value.
            let value = record::value_of(from_log.record());
            let result = f(self.with_noted_fetch(hash, Some((header, value))));
            if record::HEADER_LEN + value.len() <= MAX_CACHED_RECORD && shard.admit() {
                shard.cache(key, Keyed::encode(key, &header, &[value]).record());
            }
            return Ok(result);
        }
    }

    fn read_logged(&self, key: &[u8], pointer: &LogPointer) -> std::io::Result<journal::Stored> {
        self.journal.read_stored(
            pointer.at,
            pointer.frame_len as usize,
            key,
            pointer.record_len(),
        )
    }

    /// Sets the fetched bit of a committed record whose first read is noted
    /// but not yet committed.
    fn with_noted_fetch<'v>(
        &self,
        hash: u64,
        mut found: Option<(Header, &'v [u8])>,
    ) -> Option<(Header, &'v [u8])> {
        if let Some((header, _)) = &mut found {
            if !header.has(FETCHED) && self.marks.noted(hash, header.cas) {
                header.bits |= FETCHED;
            }
        }
        found
    }

    /// A write: decides against the current item under the key's shard lock
    /// (so read-modify-writes are atomic) and leaves the change pending.
    fn modify<R>(
        &self,
        key: &[u8],
        fence: &AckFence,
        decide: impl FnOnce(Option<(Header, &[u8])>, bool) -> (Decision, R),
    ) -> Result<R, WriteFailed> {
        self.apply_due_flush(fence);
        let mut shard = self.pending.lock(key);
        let (decision, result) = self.with_record(&mut shard, key, |found| {
            let dead = found.is_some_and(|(header, _)| !self.alive(&header));
            if dead && found.is_some_and(|(header, _)| !header.has(FETCHED)) {
                self.counters
                    .expired_unfetched
                    .fetch_add(1, Ordering::Relaxed);
            }
            decide(
                found.filter(|(header, _)| !dead && self.alive(header)),
                dead,
            )
        })?;
        let change = match decision {
            Decision::Keep => None,
            Decision::Put(keyed) => Some(Change::Put(keyed)),
            Decision::Remove => Some(Change::Remove),
        };
        if let Some(change) = change {
            fence.raise(shard.put(key, change));
        }
        drop(shard);
        self.wait_for_pending_room();
        Ok(result)
    }

    /// Backpressure: more pending than allowed means the writer is behind;
    /// wait for it rather than grow without bound.
    fn wait_for_pending_room(&self) {
        while self.pending.bytes() > self.config.pending_limit
            && !self.poisoned.load(Ordering::Acquire)
            && !self.out_of_space.load(Ordering::Acquire)
        {
            self.signals.wake_writer();
            self.signals.wake_applier();
            let seq = self.pending.last_seq();
            self.applied.wait(seq, Duration::from_millis(5));
        }
    }

    /// Notes the fetched bit of an item read for the first time, in memory
    /// (`marks.rs`), whether the item is committed or still pending: the
    /// applier sets the bit in LMDB once the item is there.
    fn mark_fetched(&self, key: &[u8], cas: u64) {
        self.marks.note(self.marks.hash(key), key, cas);
    }

    fn view<'a>(&self, key: &'a [u8], header: &Header, value: &'a [u8], won: bool) -> ItemView<'a> {
        ItemView {
            key,
            value,
            flags: header.flags,
            cas: header.cas,
            ttl: self.ttl(header.expiry_unix),
            fetched_before: header.has(FETCHED),
            idle_seconds: 0,
            stale: header.has(STALE),
            won,
            win_taken: header.has(WIN_SENT) && !won,
        }
    }

    fn get(
        &self,
        key: &[u8],
        options: &GetOptions,
        fence: &AckFence,
        visit: &mut dyn FnMut(&ItemView<'_>),
    ) -> Result<bool, WriteFailed> {
        self.apply_due_flush(fence);
        // The common case reads without writing.
        let mut shard = self.pending.lock(key);
        let lookup = self.with_record(&mut shard, key, |found| {
            let Some((header, value)) = found else {
                return Lookup::Miss;
            };
            if !self.alive(&header) {
                let counter = if header.cas <= self.flushed_through.load(Ordering::Acquire) {
                    &self.counters.get_flushed
                } else {
                    &self.counters.get_expired
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return Lookup::Miss;
            }
            let recache_due = options.recache_below.is_some_and(|below| {
                let ttl = self.ttl(header.expiry_unix);
                ttl != -1 && ttl < below
            });
            if options.touch.is_some()
                || (!header.has(WIN_SENT) && (header.has(STALE) || recache_due))
            {
                return Lookup::NeedsWrite;
            }
            visit(&self.view(key, &header, value, false));
            if options.no_bump || header.has(FETCHED) {
                Lookup::Hit
            } else {
                Lookup::FirstHit(header.cas)
            }
        })?;
        drop(shard);
        match lookup {
            Lookup::Hit => return Ok(true),
            Lookup::FirstHit(cas) => {
                self.mark_fetched(key, cas);
                return Ok(true);
            }
            Lookup::Miss if options.vivify.is_none() => return Ok(false),
            Lookup::Miss | Lookup::NeedsWrite => {}
        }
        if !self.writable() {
            return Err(WriteFailed);
        }
        self.modify(key, fence, |found, _| {
            let Some((old, value)) = found else {
                let Some(expiry) = options.vivify else {
                    return (Decision::Keep, false);
                };
                let write = semantics::vivified(expiry);
                let header = self.header_for(&write, None);
                self.counters.total_items.fetch_add(1, Ordering::Relaxed);
                visit(&self.view(key, &header, &[], true));
                return (Decision::Put(Keyed::encode(key, &header, &[])), true);
            };
            let mut header = old;
            if let Some(expiry) = options.touch {
                header.expiry_unix = self.to_unix(expiry);
            }
            let ttl = self.ttl(header.expiry_unix);
            let won = semantics::wins_recache(&current(&old, value), ttl, options.recache_below);
            if won {
                header.bits |= WIN_SENT;
            }
            // The reader sees the old state with the new expiry.
            let seen = Header {
                expiry_unix: header.expiry_unix,
                ..old
            };
            visit(&self.view(key, &seen, value, won));
            if !options.no_bump {
                header.bits |= FETCHED;
            }
            (Decision::Put(Keyed::encode(key, &header, &[value])), true)
        })
    }

    fn store(
        &self,
        command: &StoreCommand<'_>,
        fence: &AckFence,
    ) -> Result<StoreOutcome, WriteFailed> {
        if command.mode == StoreMode::Set && command.compare_cas.is_none() {
            return Ok(self.set_blind(command, fence));
        }
        self.modify(command.key, fence, |existing, reused| {
            let current = existing.map(|(old, value)| current(&old, value));
            let write = match semantics::plan_store(command, current) {
                StorePlan::Refuse(outcome) => return (Decision::Keep, outcome),
                StorePlan::Write(write) => write,
            };
            // An item stored already expired (a negative or past exptime)
            // is kept as memcached keeps it: reads find it expired
            // (get_expired) and the sweep removes it.
            let header = self.header_for(&write, existing.map(|(old, _)| old));
            self.counters.total_items.fetch_add(1, Ordering::Relaxed);
            if reused {
                self.note_reclaimed(self.class_of(command.key, write.value_len()), 1);
            }
            let decision = Decision::Put(Keyed::encode(command.key, &header, &write.parts));
            (decision, StoreOutcome::Stored { cas: header.cas })
        })
    }

    /// A plan's expiry as a record's (Unix seconds), `old_unix` the current
    /// item's.
    fn expiry_of(&self, expiry: Expiry, old_unix: u32) -> u32 {
        match expiry {
            Expiry::Keep => old_unix,
            Expiry::At(expiry) => self.to_unix(expiry),
        }
    }

    /// The header of the item a plan writes in place of `old`, with a new
    /// CAS.
    fn header_for(&self, write: &Write<'_>, old: Option<Header>) -> Header {
        let expiry_unix = self.expiry_of(write.expiry, old.map_or(0, |old| old.expiry_unix));
        let mut bits = 0;
        if write.stale {
            bits |= STALE;
        }
        if write.win_sent {
            bits |= WIN_SENT;
        }
        Header {
            flags: write.flags,
            expiry_unix,
            cas: self.next_cas(),
            bits,
        }
    }

    /// A plain `set` replaces whatever is there, so it skips reading the
    /// current item (the writer fixes the expiry index and counts).
    fn set_blind(&self, command: &StoreCommand<'_>, fence: &AckFence) -> StoreOutcome {
        self.apply_due_flush(fence);
        let mut shard = self.pending.lock(command.key);
        let cas = self.next_cas();
        let header = Header {
            flags: command.flags,
            expiry_unix: self.to_unix(command.expiry),
            cas,
            bits: 0,
        };
        let keyed = Keyed::encode(command.key, &header, &[command.value]);
        fence.raise(shard.put(command.key, Change::Put(keyed)));
        drop(shard);
        self.counters.total_items.fetch_add(1, Ordering::Relaxed);
        self.wait_for_pending_room();
        StoreOutcome::Stored { cas }
    }

    fn delete(
        &self,
        key: &[u8],
        command: &DeleteCommand,
        fence: &AckFence,
    ) -> Result<DeleteOutcome, WriteFailed> {
        self.modify(key, fence, |existing, _| {
            let current = existing.map(|(old, value)| current(&old, value));
            let decision = match (semantics::plan_delete(command, current), existing) {
                (DeletePlan::Refuse(outcome), _) => return (Decision::Keep, outcome),
                (DeletePlan::Remove, _) => Decision::Remove,
                (DeletePlan::Invalidate(expiry), Some((old, value))) => {
                    let header = Header {
                        cas: self.next_cas(),
                        bits: (old.bits | STALE) & !WIN_SENT,
                        expiry_unix: self.expiry_of(expiry, old.expiry_unix),
                        ..old
                    };
                    Decision::Put(Keyed::encode(key, &header, &[value]))
                }
                (DeletePlan::Invalidate(_), None) => {
                    unreachable!("a plan for a missing item refuses")
                }
            };
            (decision, DeleteOutcome::Deleted)
        })
    }

    fn arith(
        &self,
        key: &[u8],
        command: &ArithCommand,
        fence: &AckFence,
    ) -> Result<ArithOutcome, WriteFailed> {
        self.modify(key, fence, |existing, _| {
            let current = existing.map(|(old, value)| current(&old, value));
            let (header, digits, value, created) = match semantics::plan_arith(command, current) {
                ArithPlan::Refuse(outcome) => return (Decision::Keep, outcome),
                ArithPlan::Create {
                    value,
                    digits,
                    expiry,
                } => {
                    let header = Header {
                        flags: 0,
                        expiry_unix: self.to_unix(expiry),
                        cas: self.next_cas(),
                        bits: 0,
                    };
                    self.counters.total_items.fetch_add(1, Ordering::Relaxed);
                    (header, digits, value, true)
                }
                ArithPlan::Update {
                    value,
                    digits,
                    expiry,
                } => {
                    let old = existing.expect("an update has an item").0;
                    let header = Header {
                        cas: self.next_cas(),
                        bits: old.bits | FETCHED,
                        expiry_unix: self.expiry_of(expiry, old.expiry_unix),
                        ..old
                    };
                    (header, digits, value, false)
                }
            };
            let outcome = ArithOutcome::Value {
                value,
                cas: header.cas,
                ttl: self.ttl(header.expiry_unix),
                created,
            };
            (
                Decision::Put(Keyed::encode(key, &header, &[&digits])),
                outcome,
            )
        })
    }
}

/// What memcached's decisions read of a record.
fn current<'v>(header: &Header, value: &'v [u8]) -> Current<'v> {
    Current {
        value,
        flags: header.flags,
        cas: header.cas,
        stale: header.has(STALE),
        win_sent: header.has(WIN_SENT),
    }
}

/// The header (as if the value were in place) and the pointer of a record
/// whose value is in the journal.
fn in_log((header, value): (Header, &[u8])) -> Option<(Header, LogPointer)> {
    let pointer = LogPointer::of_stored(&header, value)?;
    let header = Header {
        bits: header.bits & !IN_LOG,
        ..header
    };
    Some((header, pointer))
}

fn log_read_failed(error: &std::io::Error, pointer: &LogPointer) {
    tracing::error!(%error, segment = pointer.at.segment, offset = pointer.at.offset, "cannot read a value from the journal");
}

impl Store for DiskStore {
    fn get(
        &self,
        key: &[u8],
        options: &GetOptions,
        fence: &AckFence,
        visit: &mut dyn FnMut(&ItemView<'_>),
    ) -> bool {
        self.inner.get(key, options, fence, visit).unwrap_or(false)
    }

    fn store(&self, command: &StoreCommand<'_>, fence: &AckFence) -> StoreOutcome {
        if !self.inner.writable() {
            return StoreOutcome::Failed;
        }
        self.inner
            .store(command, fence)
            .unwrap_or(StoreOutcome::Failed)
    }

    fn delete(&self, key: &[u8], command: &DeleteCommand, fence: &AckFence) -> DeleteOutcome {
        // Deletes free space, so they go on while the disk is full.
        if self.inner.poisoned.load(Ordering::Acquire) {
            return DeleteOutcome::Failed;
        }
        self.inner
            .delete(key, command, fence)
            .unwrap_or(DeleteOutcome::Failed)
    }

    fn arith(&self, key: &[u8], command: &ArithCommand, fence: &AckFence) -> ArithOutcome {
        if !self.inner.writable() {
            return ArithOutcome::Failed;
        }
        self.inner
            .arith(key, command, fence)
            .unwrap_or(ArithOutcome::Failed)
    }

    fn touch(&self, key: &[u8], expiry: ExpiryTime, fence: &AckFence) -> bool {
        let options = GetOptions {
            touch: Some(expiry),
            no_bump: true,
            ..GetOptions::default()
        };
        self.get(key, &options, fence, &mut |_| {})
    }

    fn flush_all(&self, delay: i64, fence: &AckFence) {
        if delay <= 0 {
            self.inner.flush_deadline.store(0, Ordering::Relaxed);
            self.inner.flush(fence);
        } else {
            self.inner
                .flush_deadline
                .store(self.inner.clock.expiry(delay).max(1), Ordering::Relaxed);
        }
    }

    fn debug(&self, key: &[u8]) -> Option<DebugView> {
        let inner = &self.inner;
        let mut shard = inner.pending.lock(key);
        inner
            .with_record(&mut shard, key, |found| {
                let (header, value) = found.filter(|(header, _)| inner.alive(header))?;
                Some(DebugView {
                    ttl: inner.ttl(header.expiry_unix),
                    idle_seconds: 0,
                    cas: header.cas,
                    fetched: header.has(FETCHED),
                    class: inner.class_of(key, value.len()),
                    size: item_size(key, value.len()),
                })
            })
            .ok()
            .flatten()
    }

    fn maintain(&self) -> usize {
        let inner = &self.inner;
        // Nobody's reply waits for a delayed flush applied in the background.
        inner.apply_due_flush(&AckFence::default());
        inner.check_space();
        // Live items, not the file: after a flush the file keeps its size.
        let live_bytes = inner.applied_counts.lock().classes.bytes();
        inner.fetch_before_write.store(
            live_bytes > inner.config.memory_budget as u64,
            Ordering::Relaxed,
        );
        resident::trim(
            &inner.env.path().join("data.mdb"),
            inner.config.memory_budget as u64,
            &inner.counters.resident_trims,
        );
        if inner.config.background_expiry {
            inner.reclaim_expired_now()
        } else {
            0
        }
    }

    fn crawl(&self, include: &dyn Fn(usize) -> bool) -> usize {
        let classes = (0..=crate::classes::MAX_CLASSES).map(include).collect();
        self.inner.crawl_expired_now(classes)
    }

    fn set_memory_limit(&self, _bytes: usize) {
        // The disk engine keeps everything; its memory is the OS page cache.
    }

    fn stats(&self) -> StoreStats {
        self.inner.apply_everything();
        let inner = &self.inner;
        let counters = &inner.counters;
        // The class counts only: the per-segment map can be long.
        let counts = inner.applied_counts.lock().classes.clone();
        StoreStats {
            curr_items: counts.items(),
            total_items: counters.total_items.load(Ordering::Relaxed),
            bytes: counts.bytes(),
            limit_maxbytes: inner.config.memory_budget as u64,
            reclaimed: counters.reclaimed.total(),
            expired_unfetched: counters.expired_unfetched.load(Ordering::Relaxed),
            crawler_reclaimed: counters.crawler_reclaimed.total(),
            get_expired: counters.get_expired.load(Ordering::Relaxed),
            get_flushed: counters.get_flushed.load(Ordering::Relaxed),
            classes: {
                let classes = counts
                    .0
                    .len()
                    .max(counters.reclaimed.classes())
                    .max(counters.crawler_reclaimed.classes());
                (1..=classes)
                    .map(|class| {
                        let (items, bytes) = counts.0.get(class - 1).copied().unwrap_or_default();
                        ClassStats {
                            class,
                            chunk_size: inner.config.classes.chunk_size(class),
                            items,
                            bytes,
                            reclaimed: counters.reclaimed.of(class),
                            crawler_reclaimed: counters.crawler_reclaimed.of(class),
                            ..ClassStats::default()
                        }
                    })
                    .filter(|class| {
                        class.items > 0 || class.reclaimed > 0 || class.crawler_reclaimed > 0
                    })
                    .collect()
            },
            ..StoreStats::default()
        }
    }

    fn scan(&self, visit: &mut dyn FnMut(&ItemInfo<'_>)) {
        self.inner.apply_everything();
        let inner = &self.inner;
        let Ok(txn) = inner.env.read_txn() else {
            return;
        };
        let Ok(iter) = inner.items.iter(&txn) else {
            return;
        };
        for (key, bytes) in iter.filter_map(Result::ok) {
            let Some((header, value)) = Header::decode(bytes) else {
                continue;
            };
            if !inner.alive(&header) {
                continue;
            }
            let value_len = record::stored_value_len(&header, value);
            visit(&ItemInfo {
                key,
                ttl: inner.ttl(header.expiry_unix),
                idle_seconds: 0,
                cas: header.cas,
                fetched: header.has(FETCHED),
                class: inner.class_of(key, value_len),
                size: item_size(key, value_len),
                value_len,
            });
        }
    }

    fn size_histogram(&self) -> Vec<(usize, u64)> {
        self.inner.apply_everything();
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

    fn ack_state(&self, ticket: AckTicket) -> AckState {
        self.inner.acks.state(ticket)
    }

    fn request_append(&self) {
        let inner = &self.inner;
        // A worker journals its own round's writes when no other thread is
        // at it: an append costs less than waking the writer thread and
        // being woken back. Under `always` the append waits for an fsync,
        // which workers leave to the writer thread.
        if inner.config.sync != SyncPolicy::Always {
            if let Some(mut group) = inner.journal_leader.try_lock() {
                inner.journal_round(&mut group);
                return;
            }
        }
        inner.signals.wake_writer();
    }

    fn on_ack_progress(&self, listener: Box<dyn Fn(AckTicket) + Send + Sync>) {
        self.inner.acks.listen(listener);
    }
}
