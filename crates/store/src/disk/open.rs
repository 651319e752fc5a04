//! Opening a data directory: the lock, LMDB's tables and their format,
//! the replay of what the log holds and LMDB does not, the engine's
//! threads; and closing it cleanly.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use heed::{EnvFlags, EnvOpenOptions, RwTxn};
use parking_lot::Mutex;

use super::data_file;
use super::history::position;
use super::log_format::{self, Record};
use super::pending::{Pending, PendingWrites};
use super::policy::SyncPolicy;
use super::record::{item_size, pointer_for_put, ClassCounts, Counts, Header, Old, Space};
use super::tables::indexes;
use super::{
    accesses, ack, appender, dir_lock, flushed, identity, journal, meta_u64, threads, Counters, Db,
    DiskConfig, DiskStore, Inner, LogPosition, JOURNAL_APPLIED,
};
use crate::classes::SizeClasses;
use crate::clock::Clock;

/// CAS values skipped when a used directory opens: more than a process
/// hands out between two commits of the last one (one comes every few
/// seconds while writes are taken; 2^32 is an hour at a million writes a
/// second), few enough for 2^32 opens.
const CAS_SKIPPED_AT_OPEN: u64 = 1 << 32;
/// Readers LMDB admits at once: one slot per thread that ever reads.
const MAX_READERS: u32 = 1024;
/// A file in a data directory while a restore writes it: the directory
/// holds more of the log than the point asked for until the restore ends,
/// so nothing else opens it meanwhile.
pub(crate) const RESTORE_UNFINISHED: &str = "restore-unfinished";
/// `meta` key: the format of the data directory (u32 LE).
const FORMAT_KEY: &[u8] = b"format";
/// The data directory's format: LMDB's tables and the journal's records as
/// `docs/DESIGN.md` describes them. Formats 1 to 5 were written only by
/// development builds (before rows, before q-gram indexes took the grams
/// `STRINC` needs, four characters long, before the journal's checksums
/// lost their per-segment seeds, and before a group's head counted its
/// entries); no kura release reads them.
pub(super) const FORMAT_VERSION: u32 = 6;

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
    Journal(#[from] std::io::Error),
    #[error(transparent)]
    Locked(#[from] dir_lock::LockError),
    #[error("{0}")]
    Format(String),
    /// LMDB's file would make LMDB fault (`data_file::check`).
    #[error("{0}")]
    Damaged(String),
    #[error("cannot read or keep the server id: {0}")]
    Identity(std::io::Error),
    #[error(
        "the file system of {} is full ({}): opening replays the update log into LMDB and \
         needs room for it; free space and start again ({error})",
        dir.display(),
        free.map_or("it tells no free space".to_string(), |free| format!("{free} bytes free"))
    )]
    NoRoom {
        dir: PathBuf,
        /// None on a file system that counts no blocks (ramfs).
        free: Option<u64>,
        error: Box<OpenError>,
    },
    #[error(
        "the LMDB map of {} is full: opening replays the update log into it; start again with \
         a larger --map-size",
        dir.display()
    )]
    MapFull { dir: PathBuf },
}

/// Free space below which a failed open is put down to a full disk: LMDB
/// reports a short write as EIO.
const NO_ROOM: u64 = 1 << 20;

impl OpenError {
    /// This error, or what it means when there is no room: a full map
    /// ([`OpenError::MapFull`]) or a full disk ([`OpenError::NoRoom`]: an
    /// ENOSPC, or LMDB's EIO for a short write with less than [`NO_ROOM`]
    /// free).
    fn on_full_disk(self, dir: &Path) -> OpenError {
        use nix::errno::Errno::{EIO, ENOSPC};
        let (dir, free) = (dir.to_path_buf(), journal::free_space(dir));
        let code = match &self {
            OpenError::Lmdb(heed::Error::Mdb(heed::MdbError::MapFull)) => {
                return OpenError::MapFull { dir };
            }
            OpenError::Lmdb(heed::Error::Io(error)) | OpenError::Journal(error) => {
                error.raw_os_error()
            }
            _ => None,
        };
        let short = free.is_some_and(|free| free < NO_ROOM);
        if code == Some(ENOSPC as i32) || (code == Some(EIO as i32) && short) {
            let error = Box::new(self);
            return OpenError::NoRoom { dir, free, error };
        }
        self
    }
}

/// `meta` key: the chunk sizes of the size classes `classes` counts in
/// (u32 LE each).
const CLASS_SIZES: &[u8] = b"class_sizes";

/// Items and bytes per size class, as the last commit kept them; counted
/// again from the items if the classes (`-n`, `-f`, `-I`) changed since,
/// or the tallies cannot be read.
fn class_tallies(
    meta: &Db,
    items: &Db,
    txn: &mut RwTxn<'_>,
    classes: &SizeClasses,
) -> heed::Result<ClassCounts> {
    let kept = meta.get(txn, b"classes")?.and_then(ClassCounts::decode);
    let sizes: Vec<u8> = (1..=classes.len())
        .flat_map(|class| (classes.chunk_size(class) as u32).to_le_bytes())
        .collect();
    let same_classes = meta.get(txn, CLASS_SIZES)? == Some(&sizes[..]);
    if let Some(kept) = kept.filter(|_| same_classes) {
        return Ok(kept);
    }
    let mut counted = ClassCounts::default();
    for entry in items.iter(txn)? {
        let (key, stored) = entry?;
        if let Some(old) = Old::of(stored) {
            let size = item_size(key, old.value_len);
            counted.add(classes.class_of(size), size as u64);
        }
    }
    meta.put(txn, b"classes", &counted.encode())?;
    meta.put(txn, CLASS_SIZES, &sizes)?;
    Ok(counted)
}

impl DiskStore {
    pub fn open(config: DiskConfig) -> Result<Self, OpenError> {
        let dir = config.dir.clone();
        Self::open_in(config).map_err(|error| error.on_full_disk(&dir))
    }

    fn open_in(config: DiskConfig) -> Result<Self, OpenError> {
        // Serving a backup would write into it (its lock file first), and its checksums fail.
        let manifest = super::history::backup::MANIFEST;
        if config.replay_until.is_none() && config.dir.join(manifest).exists() {
            return Err(OpenError::Format(format!(
                "{} is a backup ({manifest}): restore it with `kura restore --from {0} --to DIR`",
                config.dir.display()
            )));
        }
        std::fs::create_dir_all(&config.dir).map_err(|e| OpenError::Dir(config.dir.clone(), e))?;
        let dir_lock = dir_lock::acquire(&config.dir)?;
        // The restore's own replay stops at its point (`replay_until`).
        if config.replay_until.is_none() && config.dir.join(RESTORE_UNFINISHED).exists() {
            return Err(OpenError::Format(format!(
                "{} holds a restore that did not finish (`kura restore` was stopped); \
                 restore again into an empty directory",
                config.dir.display()
            )));
        }
        let server_id =
            identity::server_id(&config.dir, config.server_id).map_err(OpenError::Identity)?;
        let mut options = EnvOpenOptions::new();
        options
            .map_size(config.map_size)
            .max_dbs(8)
            .max_readers(MAX_READERS);
        // Random reads of data larger than RAM want one page, not a readahead
        // window. The journal makes writes durable; the applier fsyncs the
        // data file itself before it deletes journal segments.
        let flags = EnvFlags::NO_READ_AHEAD | EnvFlags::NO_SYNC;
        data_file::check(&config.dir.join("data.mdb")).map_err(OpenError::Damaged)?;
        // SAFETY: the environment is opened once per process and directory; kura
        // never opens the same data file twice, and does not modify it outside LMDB.
        #[allow(unsafe_code)]
        let env = unsafe { options.flags(flags).open(&config.dir)? };
        let mut txn = env.write_txn()?;
        let items: Db = env.create_database(&mut txn, Some("items"))?;
        let expiry = env.create_database(&mut txn, Some("expiry"))?;
        let rows: Db = env.create_database(&mut txn, Some("rows"))?;
        let indexes = indexes::create_database(&env, &mut txn)?;
        let meta: Db = env.create_database(&mut txn, Some("meta"))?;
        let segments = journal::segments(&config.dir)?;
        check_format(&config.dir, &mut txn, &meta, &items, !segments.is_empty())?;
        if identity::history(&meta, &txn)?.is_none() {
            identity::start_history(&meta, &mut txn)?;
        }
        let last_cas = meta_u64(&meta, &txn, b"cas")?;
        // Items stamped before the newest flush applied stay dead.
        let flushed = meta_u64(&meta, &txn, flushed::FLUSHED)?;
        let mut counts = Counts {
            classes: class_tallies(&meta, &items, &mut txn, &config.classes)?,
            ..Counts::default()
        };
        for (segment, bytes) in super::log_live(&meta, &txn)? {
            counts.log.set(segment, bytes);
            // One deleted before a crash let the next commit forget it is
            // forgotten now.
            if !segments.iter().any(|(found, _)| *found == segment) {
                counts.log.drop_segment(segment);
            }
        }
        let applied_segment = meta_u64(&meta, &txn, JOURNAL_APPLIED)?;
        indexes::drop_unfinished(&meta, &indexes, &mut txn)?;
        let index_defs = indexes::IndexDefs::load(&meta, &txn)?;
        let base_incomplete = meta.get(&txn, super::BASE_INCOMPLETE)?.is_some();
        let applied_lsn = super::applied_position(&meta, &txn)?;
        config.io.commit(txn)?;
        // The format (and a new history) durable before a first segment
        // makes the directory one kura has written to: without them it is
        // refused as a development build's.
        config.io.sync_data(&env)?;
        let newest = segments.last().map_or(0, |(number, _)| *number);
        let journal = journal::Journal::create(
            &config.dir,
            newest.max(applied_segment) + 1,
            config.io.clone(),
            // Bytes of the log kept in the OS page cache once on disk: a
            // quarter of the budget (not kura's resident set, but memory the
            // log takes from the machine).
            config.memory_budget as u64 / 4,
        )?;
        let clock = Clock::new();
        let started = clock.now();
        let inner = Arc::new(Inner {
            env,
            items,
            rows,
            indexes,
            index_defs,
            expiry,
            meta,
            clock,
            last_cas: AtomicU64::new(last_cas),
            stamps: config
                .multi_primary
                .map(|_| crate::stamp::StampClock::new(server_id)),
            pending: PendingWrites::new(config.read_cache_bytes(), config.workers),
            accesses: accesses::Accesses::new(config.memory_budget, started),
            journal,
            journal_leader: Mutex::new(Vec::new()),
            logged: Mutex::new(appender::Logged::default()),
            acks: ack::Acks::default(),
            applied: ack::Acks::default(),
            flushes: Default::default(),
            health: Default::default(),
            base_incomplete: AtomicBool::new(base_incomplete),
            replica_holds: Default::default(),
            applied_segment: AtomicU64::new(applied_segment),
            lmdb_usage: Mutex::new(None),
            applied_counts: Mutex::new(counts),
            counters: Counters::default(),
            signals: threads::Signals::default(),
            config,
            server_id,
            _dir_lock: dir_lock,
        });
        // Reads skip what the newest flush LMDB reflects covers.
        inner.flushes.raise(flushed);
        inner.journal.resume_after(applied_lsn);
        inner.replay(&segments, applied_segment)?;
        inner.measure_lmdb_usage();
        inner.check_space();
        let threads = threads::start(&inner).map_err(OpenError::Thread)?;
        Ok(DiskStore { inner, threads })
    }
}

impl Drop for DiskStore {
    fn drop(&mut self) {
        self.inner.signals.stop();
        let mut threads = self.threads.drain(..);
        // The writer journals what is pending before it ends; the applier
        // then puts everything into LMDB and fsyncs it, so a clean shutdown
        // leaves nothing to replay (retention keeps the applied segments).
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
    meta: &Db,
    items: &Db,
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
        None => Ok(meta.put(txn, FORMAT_KEY, &FORMAT_VERSION.to_le_bytes())?),
    }
}

impl Inner {
    /// The segments from one whose first entry comes after `due`, the LSN
    /// the replay reached: entries before theirs were lost, and replayed
    /// they would leave a hole in the log's history (a replica or a restore
    /// would find LSNs missing). Under a policy that may lose the last
    /// writes (writeback reached a newer segment before an older one's
    /// fsync, and the power went) they are set aside as
    /// `journal-<n>.log.dropped-<µs>`, their bytes counted as dropped.
    /// Under `always` that is damage to what was fsynced, and so is a
    /// segment LMDB already points into (the compactor's moves): the open
    /// refuses. Empty ones (made ready for a round) stay.
    fn set_aside(
        &self,
        later: &[(u64, PathBuf)],
        counts: &Counts,
        due: u64,
    ) -> Result<(), OpenError> {
        let mut written = Vec::new();
        for (number, path) in later {
            let len = std::fs::metadata(path)?.len();
            written.extend((len > 0).then_some((*number, path, len)));
        }
        let Some(&(_, first, _)) = written.first() else {
            return Ok(());
        };
        if written.iter().any(|(n, ..)| counts.log.of(*n) > 0) {
            return Err(OpenError::Format(format!(
                "the update log lacks entries from LSN {due} on, before {}, and LMDB holds values \
                 in it or after it: restore from a backup",
                first.display()
            )));
        }
        if self.config.sync == SyncPolicy::Always {
            return Err(OpenError::Format(format!(
                "the update log lacks entries from LSN {due} on, before {}: move it and the \
                 segments after it out of {} to start without them",
                first.display(),
                self.config.dir.display()
            )));
        }
        let stamp = crate::clock::unix_micros();
        for (number, path, len) in written {
            let aside = path.with_extension(format!("log.dropped-{stamp}"));
            std::fs::rename(path, &aside)?;
            self.journal.forget(number);
            (self.counters.replay_dropped_bytes).fetch_add(len, Ordering::Relaxed);
            tracing::warn!(segment = number, dropped_bytes = len, lacking_from = due, "an update log segment written after lost entries is set aside: the power went before an older segment was on disk");
        }
        File::open(&self.config.dir)?.sync_all()?;
        Ok(())
    }

    /// Puts the writes of journal segments LMDB does not hold yet into it,
    /// oldest first (they were acknowledged before a crash), fsyncs the data
    /// file and deletes the segments nothing points into.
    fn replay(&self, segments: &[(u64, PathBuf)], applied: u64) -> Result<(), OpenError> {
        let mut counts = self.applied_counts.lock().clone();
        // (Sorted by number, as `journal::segments` gives them.)
        let to_replay = &segments[segments.partition_point(|(number, _)| *number <= applied)..];
        for (at, (number, path)) in to_replay.iter().enumerate() {
            // A restore's replay stops at its point on purpose: its chain
            // was checked whole before.
            // (Past LSN 2^64 − 1 nothing can follow.)
            let due = self.journal.last_lsn().checked_add(1);
            if let (None, Some(due)) = (self.config.replay_until, due) {
                let first = position::first_lsn(&*self.config.io, path, *number)?;
                if first.is_some_and(|first| first > due) {
                    self.set_aside(&to_replay[at..], &counts, due)?;
                    break;
                }
            }
            let mut txn = self.env.write_txn()?;
            let mut numbering = log_format::Numbering::default();
            let mut last = self.journal.current_end().2;
            let io = &*self.config.io;
            let mut records = 0usize;
            let end = journal::replay(io, path, *number, |record, here, framed| {
                records += 1;
                if let Some((lsn, head)) = numbering.number(&record) {
                    if self.config.replay_until.is_some_and(|until| lsn > until) {
                        return Ok(());
                    }
                    last = LogPosition::new(lsn, head.micros);
                }
                let pointed;
                let write = match record {
                    Record::Put { key, record } => {
                        if let Some((header, _)) = Header::decode(record) {
                            self.last_cas.fetch_max(header.cas, Ordering::AcqRel);
                        }
                        let keeps_in_log = |len| self.config.keeps_in_log(len);
                        pointed = pointer_for_put(key, record, here, keeps_in_log);
                        let stored = pointed.as_ref().map_or(record, |p| &p[..]);
                        (Space::Item, key, Pending::Put(stored))
                    }
                    Record::Move { key, from, .. } => {
                        let moved = (from, here, framed);
                        return Ok(self.apply_move(&mut txn, key, moved, &mut counts)?);
                    }
                    Record::Remove { key } => (Space::Item, key, Pending::Remove),
                    Record::RowPut { key, record } => (Space::Row, key, Pending::Put(record)),
                    Record::RowRemove { key } => (Space::Row, key, Pending::Remove),
                    Record::Flush(boundary) => {
                        self.flushes.raise(boundary);
                        // Stamps made after the restart come after it.
                        self.last_cas.fetch_max(boundary, Ordering::AcqRel);
                        self.clear_flushed(&mut txn, &mut counts, Some(boundary))?;
                        return Ok(());
                    }
                    Record::Group(_) => return Ok(()),
                };
                // `apply` hands row writes on to `apply_row`.
                self.apply(&mut txn, write, self.flushes.through(), &mut counts)?;
                Ok::<_, OpenError>(())
            })?;
            // LMDB will point into it: on disk first (a crash of kura leaves
            // the segment in the page cache only).
            let unread = end.size - end.whole_to;
            File::open(path).and_then(|file| self.config.io.sync_log(&file))?;
            self.commit_counted(txn, &mut counts, Some((*number, last)))?;
            self.journal.resume_after(last);
            self.applied_segment.fetch_max(*number, Ordering::AcqRel);
            tracing::info!(segment = number, records, "replayed journal segment");
            // What it left unread: bytes after its last whole record, a torn
            // append (written, and not all on disk when the power went: the
            // last writes, which `--sync batch` and `none` may lose) or
            // damage. Their entries are not replayed; `stats kura` counts them.
            if unread > 0 {
                (self.counters.replay_dropped_bytes).fetch_add(unread, Ordering::Relaxed);
                tracing::warn!(segment = number, dropped_bytes = unread, after = %last, "the update log's segment ends in a torn or damaged record: the bytes from there are dropped");
            }
        }
        // A directory some process used before (it left a segment).
        if !segments.is_empty() {
            self.skip_unlogged_cas()?;
        }
        self.config.io.sync_data(&self.env)?;
        // `applied` (where LMDB stood), or the last segment replayed.
        self.remove_dead_segments(self.applied_segment.load(Ordering::Acquire));
        Ok(())
    }

    /// Counts CAS values on from well past the last one LMDB and the log
    /// know of, and keeps that in `meta` (made durable with the replay):
    /// values handed out since the last commit that no record kept (a write
    /// replaced in memory before its group was appended, or appended and
    /// lost with a power cut under `batch`) were shown to clients, and must
    /// not come again. A dual master's stamps follow the clock instead.
    fn skip_unlogged_cas(&self) -> heed::Result<()> {
        if self.stamps.is_some() {
            return Ok(());
        }
        let cas = (self.last_cas.load(Ordering::Acquire)).saturating_add(CAS_SKIPPED_AT_OPEN);
        self.last_cas.store(cas, Ordering::Release);
        let mut txn = self.env.write_txn()?;
        self.meta.put(&mut txn, b"cas", &cas.to_le_bytes())?;
        self.config.io.commit(txn)
    }
}
