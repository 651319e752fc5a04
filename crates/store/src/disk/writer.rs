//! The writer thread (group commits) and the syncer thread (fsync as the
//! policy says).
//!
//! Each round the writer takes every pending write, applies them in one LMDB
//! transaction together with a due flush and a batch of expired items, and
//! commits. Writes that arrive while a commit runs form the next group, so
//! groups grow with load and a single LMDB writer keeps up with many
//! workers.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use heed::RwTxn;

use super::pending::{Batch, Pending};
use super::record::{self, ClassCounts, Header, FETCHED};
use super::{Inner, SyncPolicy};
use crate::AckState;

/// How long an idle writer sleeps before looking for work nobody announced
/// (first-read fetched bits, writes of callers that never ask for a commit).
const IDLE_TICK: Duration = Duration::from_millis(5);
/// First-read marks committed per round when the writer takes them.
const MARK_BATCH: usize = 4096;
/// Expired items removed per round, so one round never grows unbounded.
const RECLAIM_BATCH: usize = 10_000;
/// How often a busy writer checks the space left, so a fast writer refuses
/// writes before the file system is full, not after.
const SPACE_CHECK_EVERY: Duration = Duration::from_millis(10);

/// One change the writer applies to a key.
#[derive(Clone, Copy)]
enum Write<'a> {
    Put(&'a [u8]),
    Remove,
    /// Sets the fetched bit of the committed record if it is still the item
    /// of that CAS value (first reads wait in `marks.rs`).
    MarkFetched(u64),
}

impl<'a> From<Pending<'a>> for Write<'a> {
    fn from(pending: Pending<'a>) -> Self {
        match pending {
            Pending::Put(record) => Write::Put(record),
            Pending::Remove => Write::Remove,
        }
    }
}

/// How the threads are woken and stopped.
#[derive(Default)]
pub struct Signals {
    stopping: AtomicBool,
    writer: OnceLock<Thread>,
    writer_idle: AtomicBool,
    syncer: OnceLock<Thread>,
    /// Expired items are due: the next round reclaims a batch.
    reclaim: AtomicBool,
    /// When the writer last checked the space left.
    space_checked: parking_lot::Mutex<Option<Instant>>,
}

impl Signals {
    pub fn wake_writer(&self) {
        if self.writer_idle.load(Ordering::SeqCst) {
            if let Some(writer) = self.writer.get() {
                writer.unpark();
            }
        }
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for thread in [&self.writer, &self.syncer] {
            if let Some(thread) = thread.get() {
                thread.unpark();
            }
        }
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

/// Starts the writer, and the syncer when the policy has one.
pub fn start(inner: &Arc<Inner>) -> io::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let writer = {
        let inner = inner.clone();
        thread::Builder::new()
            .name("kura-disk-writer".into())
            .spawn(move || inner.write_loop())?
    };
    let _ = inner.signals.writer.set(writer.thread().clone());
    threads.push(writer);
    if let Some(period) = inner.config.sync.background_period() {
        let syncer = {
            let inner = inner.clone();
            thread::Builder::new()
                .name("kura-disk-syncer".into())
                .spawn(move || inner.sync_loop(period))?
        };
        let _ = inner.signals.syncer.set(syncer.thread().clone());
        threads.push(syncer);
    }
    Ok(threads)
}

/// Whether an LMDB failure means "no room" (writes may resume later) rather
/// than a broken disk.
fn is_out_of_space(error: &heed::Error) -> bool {
    let enospc = nix::errno::Errno::ENOSPC as i32;
    match error {
        heed::Error::Mdb(heed::MdbError::MapFull) => true,
        heed::Error::Mdb(heed::MdbError::Other(code)) => *code == enospc,
        heed::Error::Io(error) => error.raw_os_error() == Some(enospc),
        _ => false,
    }
}

impl Inner {
    fn write_loop(&self) {
        // No write came for a whole idle tick: a good time for the marks.
        let mut quiet = false;
        loop {
            let stopping = self.signals.stopping();
            let marks = if stopping {
                usize::MAX
            } else if quiet || self.marks.waiting() > self.config.mark_limit() {
                MARK_BATCH
            } else {
                0
            };
            let worked = self.commit_round(marks);
            if stopping && !worked {
                return;
            }
            quiet = false;
            if !worked {
                self.signals.writer_idle.store(true, Ordering::SeqCst);
                if !self.has_work() {
                    // A park may end early (an old wake-up): quiet means a
                    // whole tick without a write.
                    let parked = Instant::now();
                    thread::park_timeout(IDLE_TICK);
                    quiet = parked.elapsed() >= IDLE_TICK && !self.pending.is_dirty();
                }
                self.signals.writer_idle.store(false, Ordering::SeqCst);
            }
        }
    }

    fn has_work(&self) -> bool {
        self.pending.is_dirty()
            || self.flush_request.lock().is_some()
            || self.signals.reclaim.load(Ordering::Acquire)
            || self.signals.stopping()
    }

    /// One group commit, with up to `marks` first-read marks. Returns false
    /// when there was nothing to do.
    fn commit_round(&self, marks: usize) -> bool {
        let (flush, batch, marks) = {
            let mut request = self.flush_request.lock();
            let batch = self.pending.drain();
            (request.take(), batch, self.marks.take(marks))
        };
        let reclaim = self.signals.reclaim.swap(false, Ordering::AcqRel);
        let through = batch.through;
        let writes = batch.len() + marks.len();
        if writes == 0 && flush.is_none() && !reclaim {
            self.acks.advance(through, false);
            return false;
        }
        self.check_space_if_due();
        let result = if self.poisoned.load(Ordering::Acquire) {
            Err(None)
        } else {
            self.commit(flush.is_some(), &batch, &marks, reclaim)
                .map_err(Some)
        };
        // Committed or failed, the batch leaves the pending table: reads
        // now go to LMDB, which holds it or what came before it.
        self.pending.retire(batch);
        if result.is_ok() {
            // The read cache may hold a copy made before the bit was set.
            for (key, cas) in &marks {
                self.pending.set_cached_bits(key, *cas, FETCHED);
            }
        }
        // Only now: until here reads took the fetched bit from the notes.
        self.marks.forget(&marks);
        match result {
            Ok(()) => {
                let counters = &self.counters;
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters
                    .committed_writes
                    .fetch_add(writes as u64, Ordering::Relaxed);
                counters
                    .largest_commit
                    .fetch_max(writes as u64, Ordering::Relaxed);
                self.acks.advance(through, false);
            }
            Err(error) => {
                self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
                match error {
                    Some(error) if is_out_of_space(&error) => {
                        tracing::error!(%error, "disk full: refusing writes until space is freed");
                        self.out_of_space.store(true, Ordering::Release);
                    }
                    Some(error) => {
                        tracing::error!(%error, "disk commit failed: refusing writes from now on");
                        self.poisoned.store(true, Ordering::Release);
                    }
                    None => {}
                }
                // Not acknowledged: those connections are closed instead.
                self.acks.advance(through, true);
            }
        }
        true
    }

    fn commit(
        &self,
        flush: bool,
        batch: &Batch,
        marks: &[(Arc<[u8]>, u64)],
        reclaim: bool,
    ) -> heed::Result<()> {
        let mut txn = self.env.write_txn()?;
        let mut counts = self.committed_classes.lock().clone();
        if flush {
            self.items.clear(&mut txn)?;
            self.expiry.clear(&mut txn)?;
            counts = ClassCounts::default();
        }
        let flushed_through = self.flushed_through.load(Ordering::Acquire);
        // In key order: neighbouring keys share pages, so the group dirties
        // and writes fewer of them.
        let mut writes: Vec<(&[u8], Write<'_>)> = batch
            .writes()
            .map(|(key, change)| (key, Write::from(change)))
            .chain(
                marks
                    .iter()
                    .map(|(key, cas)| (&key[..], Write::MarkFetched(*cas))),
            )
            .collect();
        writes.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (key, write) in writes {
            self.apply(&mut txn, key, write, flushed_through, &mut counts)?;
        }
        let reclaimed = if reclaim {
            self.reclaim_expired(&mut txn, &mut counts)?
        } else {
            0
        };
        self.meta.put(
            &mut txn,
            b"cas",
            &self.last_cas.load(Ordering::Acquire).to_le_bytes(),
        )?;
        self.meta.put(&mut txn, b"classes", &counts.encode())?;
        let started = Instant::now();
        txn.commit()?;
        if self.config.sync == SyncPolicy::Always {
            // LMDB synced data and meta page inside the commit.
            self.count_fsync(started);
        }
        *self.committed_classes.lock() = counts;
        self.counters
            .crawler_reclaimed
            .fetch_add(reclaimed, Ordering::Relaxed);
        Ok(())
    }

    /// Applies one pending write, keeping the expiry index and the class
    /// counts right.
    fn apply(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
        write: Write<'_>,
        flushed_through: u64,
        counts: &mut ClassCounts,
    ) -> heed::Result<()> {
        if let Write::Put(stored) = write {
            // Most puts are of new keys: insert and learn whether one was
            // there in a single descent of the tree.
            let fresh = Header::decode(stored)
                .is_some_and(|(header, _)| header.cas > flushed_through)
                && self.items.get_or_put(txn, key, stored)?.is_none();
            if fresh {
                return self.index_new(txn, key, stored, counts);
            }
        }
        if let Write::MarkFetched(cas) = write {
            // One read of the record: its header decides, its bytes are rewritten.
            let Some(stored) = self.items.get(txn, key)? else {
                return Ok(());
            };
            if Header::decode(stored).is_some_and(|(h, _)| !h.has(FETCHED) && h.cas == cas) {
                let mut stored = stored.to_vec();
                record::set_bits(&mut stored, FETCHED);
                self.items.put(txn, key, &stored)?;
            }
            return Ok(());
        }
        let old = self.stored_header(txn, key)?;
        let forget_old = |txn: &mut RwTxn<'_>, counts: &mut ClassCounts, keep_expiry: u32| {
            if let Some((old, len)) = old {
                self.uncount(counts, key, len);
                if old.expiry_unix != 0 && old.expiry_unix != keep_expiry {
                    self.expiry
                        .delete(txn, &record::expiry_key(old.expiry_unix, key))?;
                }
            }
            heed::Result::Ok(())
        };
        match write {
            Write::Put(stored) => {
                let Some((header, _)) = Header::decode(stored) else {
                    return Ok(());
                };
                if header.cas <= flushed_through {
                    // Written before a flush that covers it: already gone.
                    return Ok(());
                }
                forget_old(txn, counts, header.expiry_unix)?;
                self.items.put(txn, key, stored)?;
                self.index_new(txn, key, stored, counts)?;
            }
            Write::Remove => {
                if old.is_some() {
                    forget_old(txn, counts, 0)?;
                    self.items.delete(txn, key)?;
                }
            }
            // Applied above, before the header lookup it does not need.
            Write::MarkFetched(_) => {}
        }
        Ok(())
    }

    /// Counts and indexes a record just stored under its key.
    fn index_new(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
        stored: &[u8],
        counts: &mut ClassCounts,
    ) -> heed::Result<()> {
        if let Some((header, value)) = Header::decode(stored) {
            if header.expiry_unix != 0 {
                self.expiry
                    .put(txn, &record::expiry_key(header.expiry_unix, key), &[])?;
            }
            counts.add(
                self.class_of(key, value.len()),
                record::item_size(key, value.len()) as u64,
            );
        }
        Ok(())
    }

    /// The header and value length of the record committed under `key`.
    fn stored_header(&self, txn: &RwTxn<'_>, key: &[u8]) -> heed::Result<Option<(Header, usize)>> {
        Ok(self
            .items
            .get(txn, key)?
            .and_then(Header::decode)
            .map(|(header, value)| (header, value.len())))
    }

    /// Takes an item of `value_len` out of the class counts.
    fn uncount(&self, counts: &mut ClassCounts, key: &[u8], value_len: usize) {
        counts.remove(
            self.class_of(key, value_len),
            record::item_size(key, value_len) as u64,
        );
    }

    /// Removes a batch of expired items, oldest first, by the expiry index.
    fn reclaim_expired(&self, txn: &mut RwTxn<'_>, counts: &mut ClassCounts) -> heed::Result<u64> {
        let now = self.now_unix();
        let due: Vec<Vec<u8>> = self
            .expiry
            .iter(txn)?
            .filter_map(Result::ok)
            .take_while(|(index_key, _)| {
                record::expiry_of_index_key(index_key).is_some_and(|at| at <= now)
            })
            .take(RECLAIM_BATCH)
            .map(|(index_key, _)| index_key.to_vec())
            .collect();
        let mut removed = 0;
        for index_key in &due {
            let key = &index_key[4..];
            self.expiry.delete(txn, index_key)?;
            let found = self.stored_header(txn, key)?;
            let Some((header, len)) = found.filter(|(header, _)| self.expired(header)) else {
                continue;
            };
            if !header.has(FETCHED) {
                self.counters
                    .expired_unfetched
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.items.delete(txn, key)?;
            self.uncount(counts, key, len);
            removed += 1;
        }
        Ok(removed)
    }

    /// Has the writer reclaim expired items now, if any are due; returns how
    /// many it removed.
    pub(super) fn reclaim_expired_now(&self) -> usize {
        let due = self.env.read_txn().ok().is_some_and(|txn| {
            self.expiry
                .first(&txn)
                .ok()
                .flatten()
                .and_then(|(index_key, _)| record::expiry_of_index_key(index_key))
                .is_some_and(|at| at <= self.now_unix())
        });
        if !due {
            return 0;
        }
        let before = self.counters.crawler_reclaimed.load(Ordering::Acquire);
        // Flag first, then number: the round that decides the number saw the flag.
        self.signals.reclaim.store(true, Ordering::Release);
        let seq = self.pending.next_seq();
        if self.wait_until_decided(seq) == AckState::Waiting {
            return 0;
        }
        (self.counters.crawler_reclaimed.load(Ordering::Acquire) - before) as usize
    }

    fn sync_loop(&self, period: Duration) {
        let mut synced_commits = 0;
        loop {
            let stopping = self.signals.stopping();
            let commits = self.counters.commits.load(Ordering::Acquire);
            if commits > synced_commits {
                self.sync_now();
                synced_commits = commits;
            }
            if stopping {
                return;
            }
            thread::park_timeout(period);
        }
    }

    /// fsyncs the data file; a failure poisons the engine.
    pub(super) fn sync_now(&self) {
        let started = Instant::now();
        match self.env.force_sync() {
            Ok(()) => self.count_fsync(started),
            Err(error) => {
                tracing::error!(%error, "fsync failed: refusing writes from now on");
                self.poisoned.store(true, Ordering::Release);
            }
        }
    }

    fn count_fsync(&self, started: Instant) {
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .fsync_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Room left for data: in the map, and on the file system (pages freed
    /// inside the file are reused before it grows).
    fn space_left(&self) -> Option<u64> {
        let used = self.env.non_free_pages_size().ok()?;
        let file = self.env.real_disk_size().ok()?;
        let fs = nix::sys::statvfs::statvfs(self.env.path()).ok()?;
        let fs_free = fs.blocks_available() as u64 * fs.fragment_size() as u64;
        let map_left = (self.config.map_size as u64).saturating_sub(used);
        Some(map_left.min(fs_free + file.saturating_sub(used)))
    }

    fn check_space_if_due(&self) {
        let mut checked = self.signals.space_checked.lock();
        if checked.is_none_or(|at| at.elapsed() >= SPACE_CHECK_EVERY) {
            *checked = Some(Instant::now());
            drop(checked);
            self.check_space();
        }
    }

    /// Refuses writes while less than the reserve is left; resumes when
    /// space was freed.
    pub(super) fn check_space(&self) {
        let Some(left) = self.space_left() else {
            return;
        };
        let short = left < self.config.reserve_bytes;
        if self.out_of_space.swap(short, Ordering::AcqRel) != short {
            if short {
                tracing::warn!(left, "disk nearly full: refusing writes");
            } else {
                tracing::info!(left, "disk space freed: accepting writes again");
            }
        }
    }

    pub(super) fn engine_stats(&self) -> Vec<(&'static str, String)> {
        let counters = &self.counters;
        let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        let commits = load(&counters.commits);
        let fsyncs = load(&counters.fsyncs);
        let (cache_bytes, cache_records) = self.pending.cache_usage();
        let info = self.env.info();
        vec![
            ("disk_path", self.env.path().display().to_string()),
            (
                "disk_file_bytes",
                self.env.real_disk_size().unwrap_or(0).to_string(),
            ),
            ("disk_map_bytes", info.map_size.to_string()),
            (
                "disk_used_bytes",
                self.env.non_free_pages_size().unwrap_or(0).to_string(),
            ),
            ("disk_used_pages", (info.last_page_number + 1).to_string()),
            ("disk_sync_policy", self.config.sync.name()),
            ("disk_commits", commits.to_string()),
            (
                "disk_committed_writes",
                load(&counters.committed_writes).to_string(),
            ),
            (
                "disk_avg_commit_writes",
                (load(&counters.committed_writes) / commits.max(1)).to_string(),
            ),
            (
                "disk_largest_commit",
                load(&counters.largest_commit).to_string(),
            ),
            (
                "disk_failed_commits",
                load(&counters.failed_commits).to_string(),
            ),
            ("disk_fsyncs", fsyncs.to_string()),
            (
                "disk_fsync_avg_us",
                (load(&counters.fsync_micros) / fsyncs.max(1)).to_string(),
            ),
            ("disk_pending_bytes", self.pending.bytes().to_string()),
            ("disk_pending_limit", self.config.pending_limit.to_string()),
            ("disk_fetch_marks_waiting", self.marks.waiting().to_string()),
            ("disk_read_cache_bytes", cache_bytes.to_string()),
            ("disk_read_cache_items", cache_records.to_string()),
            (
                "disk_read_cache_limit",
                self.config.read_cache_bytes().to_string(),
            ),
            ("disk_reserve_bytes", self.config.reserve_bytes.to_string()),
            (
                "disk_out_of_space",
                u8::from(self.out_of_space.load(Ordering::Relaxed)).to_string(),
            ),
            (
                "disk_write_refused",
                u8::from(self.poisoned.load(Ordering::Relaxed)).to_string(),
            ),
            (
                "disk_writes_refused",
                load(&counters.writes_refused).to_string(),
            ),
            (
                "disk_expired_reclaimed",
                load(&counters.crawler_reclaimed).to_string(),
            ),
            ("disk_memory_budget", self.config.memory_budget.to_string()),
            (
                "disk_resident_bytes",
                super::resident::process_resident_bytes()
                    .unwrap_or(0)
                    .to_string(),
            ),
            (
                "disk_resident_trims",
                load(&counters.resident_trims).to_string(),
            ),
        ]
    }
}
