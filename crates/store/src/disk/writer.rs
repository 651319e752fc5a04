//! The writer thread (journal groups), the applier thread (LMDB
//! transactions) and the syncer thread (fsync as the policy says).
//!
//! Each round the writer takes every pending write and appends them to the
//! journal in one write; then their replies may go out. Writes that arrive
//! meanwhile form the next group, so groups grow with load. The applier
//! takes everything journalled since its last round, at least every
//! [`APPLY_EVERY`] or once a sixteenth of the pending memory is waiting, and
//! applies it in one LMDB transaction together with a due flush, first-read
//! marks and a batch of expired items; it commits, fsyncs the data file and
//! deletes the journal segments LMDB now holds.

use std::io;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant, SystemTime};

use heed::RwTxn;

use super::journal::{self, GroupHead, Location, LogPosition, Record};
use super::pending::{Batch, Pending};
use super::record::{self, Counts, Header, LogPointer, FETCHED};
use super::{Inner, LogRetention, SyncPolicy};
use crate::clock::unix_micros;
use crate::AckState;

/// How long an idle writer sleeps before looking for writes of callers
/// that never ask for an append.
const IDLE_TICK: Duration = Duration::from_millis(5);
/// The longest journalled writes wait for LMDB while the engine is busy.
pub const APPLY_EVERY: Duration = Duration::from_millis(1000);
/// Journal bytes that make a round due whatever the memory budget. Each
/// round rewrites the LMDB pages its keys fall in, so fewer, larger rounds
/// cost less per write (1–10 KB sets: about 6 % of the CPU against 64 MiB
/// rounds); a segment this long still replays in about 0.1 s after a kill.
const ROUND_JOURNAL_BYTES: u64 = 256 << 20;
/// Moved values a compaction appends, fsyncs and commits at a time.
const COMPACT_CHUNK: usize = 8 << 20;
/// The pause after a failed compaction (no room for the moved values, say).
const COMPACT_RETRY: Duration = Duration::from_secs(10);
/// Threads that read a round's pages before its transaction, when the data
/// is larger than memory (the device serves several reads at once).
const PREFETCH_THREADS: usize = 16;
/// First-read marks committed per LMDB transaction at most.
const MARK_BATCH: usize = 64 * 1024;
/// Expired items removed per round, so one round never grows unbounded.
const RECLAIM_BATCH: usize = 10_000;
/// How often a busy writer checks the space left, so a fast writer refuses
/// writes before the file system is full, not after.
const SPACE_CHECK_EVERY: Duration = Duration::from_millis(10);

/// One change the applier makes to a key.
#[derive(Clone, Copy)]
pub(super) enum Write<'a> {
    /// The key's new record; `logged`: where the journal holds it, so a
    /// large value can stay there.
    Put {
        stored: &'a [u8],
        logged: Option<Location>,
    },
    /// The compactor copied the key's value to `to` (a record of
    /// `frame_len` bytes): point there if the record still points at `from`.
    Move {
        from: Location,
        to: Location,
        frame_len: usize,
    },
    Remove,
}

impl<'a> Write<'a> {
    fn of(pending: Pending<'a>, logged: Option<Location>) -> Self {
        match pending {
            Pending::Put(stored) => Write::Put { stored, logged },
            Pending::Remove => Write::Remove,
        }
    }

    /// About what applying it copies into LMDB.
    fn weight(&self) -> usize {
        match self {
            Write::Put { stored, .. } => stored.len(),
            Write::Move { .. } | Write::Remove => 0,
        }
    }
}

/// The record a key had before a write: what it counted for.
struct Old {
    header: Header,
    value_len: usize,
    pointer: Option<LogPointer>,
}

impl Old {
    fn of(stored: &[u8]) -> Option<Old> {
        let (header, value) = Header::decode(stored)?;
        Some(Old {
            header,
            value_len: record::stored_value_len(&header, value),
            pointer: LogPointer::of_stored(&header, value),
        })
    }
}

/// How often an idle applier lets go of the history past retention.
const RETENTION_CHECK_EVERY: Duration = Duration::from_secs(10);

/// What the writer has journalled and the applier has not taken. The writer
/// holds this lock from its append until the group is in `logged`, and the
/// applier holds it to start a new segment and take `logged`: so the writes
/// it takes are exactly those in the segments before the new one.
#[derive(Default)]
pub(super) struct Logged {
    /// Every write numbered up to this is journalled (or failed).
    through: u64,
    /// The newest flush journalled and not yet applied.
    flush: Option<u64>,
    /// Segments appended to since the applier's last rotation.
    dirty: bool,
}

/// What the applier carries from round to round.
struct ApplierState {
    /// A round whose commit failed, to try again.
    retry: Option<ApplyRound>,
    /// The newest segment committed to LMDB but not yet fsynced there (a
    /// failed fsync leaves it for the next round).
    unsynced: Option<u64>,
    /// No compaction before this (one failed).
    compact_after: Instant,
    /// When retention was last applied: the log ages without rounds too.
    retention_checked: Instant,
}

/// One LMDB transaction's worth of journalled writes, kept until committed.
struct ApplyRound {
    /// Oldest first; more than one only while a failed commit is retried.
    batches: Vec<Batch>,
    flush: Option<u64>,
    /// The newest journal segment these writes came from.
    segment: u64,
    /// The newest entry in it.
    last: LogPosition,
    /// A commit of it failed before.
    retried: bool,
}

/// How the threads are woken and stopped.
#[derive(Default)]
pub struct Signals {
    stopping: AtomicBool,
    /// The writer is done: the applier applies everything and ends.
    finishing: AtomicBool,
    writer: OnceLock<Thread>,
    writer_idle: AtomicBool,
    applier: OnceLock<Thread>,
    apply_requested: AtomicBool,
    /// A round is wanted as soon as something new is journalled (a round
    /// with nothing logged does not switch segments).
    round_after_next_append: AtomicBool,
    syncer: OnceLock<Thread>,
    /// Expired items are due: the next round reclaims a batch.
    reclaim: AtomicBool,
    /// `lru_crawler crawl`: the next round removes every expired item of
    /// the classes marked (index = class).
    crawl: parking_lot::Mutex<Option<Vec<bool>>>,
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

    /// Asks the applier for a round now.
    pub fn wake_applier(&self) {
        self.apply_requested.store(true, Ordering::SeqCst);
        if let Some(applier) = self.applier.get() {
            applier.unpark();
        }
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(thread) = self.writer.get() {
            thread.unpark();
        }
    }

    /// After the writer ended: the applier applies what is left and ends,
    /// then the syncer.
    pub fn finish(&self) {
        self.finishing.store(true, Ordering::SeqCst);
        for thread in [&self.applier, &self.syncer] {
            if let Some(thread) = thread.get() {
                thread.unpark();
            }
        }
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn finishing(&self) -> bool {
        self.finishing.load(Ordering::SeqCst)
    }
}

/// Starts the writer, the applier, and the syncer when the policy has one,
/// in that order (the order they are stopped in).
pub fn start(inner: &Arc<Inner>) -> io::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let spawn = |name: &str, run: fn(&Inner)| {
        let inner = inner.clone();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&inner))
    };
    let writer = spawn("kura-disk-writer", Inner::write_loop)?;
    let _ = inner.signals.writer.set(writer.thread().clone());
    threads.push(writer);
    let applier = spawn("kura-disk-applier", Inner::apply_loop)?;
    let _ = inner.signals.applier.set(applier.thread().clone());
    threads.push(applier);
    if inner.config.sync.background_period().is_some() {
        let syncer = spawn("kura-disk-syncer", Inner::sync_loop)?;
        let _ = inner.signals.syncer.set(syncer.thread().clone());
        threads.push(syncer);
    }
    Ok(threads)
}

/// The first eight bytes of `key`, zero-padded, as a number that sorts as
/// the bytes do.
fn key_prefix(key: &[u8]) -> u64 {
    let mut prefix = [0; 8];
    let len = key.len().min(8);
    prefix[..len].copy_from_slice(&key[..len]);
    u64::from_be_bytes(prefix)
}

/// Encodes a journal group for `segment`: its head, a flush, then the
/// batch's writes, noting where each write starts.
fn encode_group(
    group: &mut Vec<u8>,
    offsets: &mut Vec<u64>,
    head: GroupHead,
    flush: Option<u64>,
    batch: &Batch,
    segment: u64,
) {
    let seed = journal::seed_of(segment);
    group.clear();
    offsets.clear();
    journal::encode(group, Record::Group(head), seed);
    // In log order: the writes the flush covers (made before it), the
    // flush, then the rest; `offsets` stays in the batch's order.
    let covered = |change: &Pending<'_>| match (flush, change) {
        (Some(boundary), Pending::Put(record)) => {
            Header::decode(record).is_some_and(|(header, _)| header.cas <= boundary)
        }
        _ => false,
    };
    offsets.resize(batch.writes().count(), 0);
    let passes: &[bool] = if flush.is_some() {
        &[true, false]
    } else {
        &[false]
    };
    for &pass in passes {
        if !pass {
            if let Some(boundary) = flush {
                journal::encode(group, Record::Flush(boundary), seed);
            }
        }
        for (k, (key, change)) in batch.writes().enumerate() {
            if covered(&change) != pass {
                continue;
            }
            let record = match change {
                Pending::Put(record) => Record::Put { key, record },
                Pending::Remove => Record::Remove { key },
            };
            offsets[k] = group.len() as u64;
            journal::encode(group, record, seed);
        }
    }
}

/// An LMDB failure as an I/O error, for compaction's mixed work.
fn lmdb(error: heed::Error) -> io::Error {
    io::Error::other(error.to_string())
}

fn is_enospc(error: &io::Error) -> bool {
    error.raw_os_error() == Some(nix::errno::Errno::ENOSPC as i32)
}

/// Whether an LMDB failure means "no room" (writes may resume later) rather
/// than a broken disk.
fn is_out_of_space(error: &heed::Error) -> bool {
    let enospc = nix::errno::Errno::ENOSPC as i32;
    match error {
        heed::Error::Mdb(heed::MdbError::MapFull) => true,
        heed::Error::Mdb(heed::MdbError::Other(code)) => *code == enospc,
        heed::Error::Io(error) => is_enospc(error),
        _ => false,
    }
}

impl Inner {
    fn write_loop(&self) {
        loop {
            let stopping = self.signals.stopping();
            let worked = self.journal_round(&mut self.journal_leader.lock());
            if stopping && !worked {
                return;
            }
            if !worked {
                self.signals.writer_idle.store(true, Ordering::SeqCst);
                if !self.has_work() {
                    thread::park_timeout(IDLE_TICK);
                }
                self.signals.writer_idle.store(false, Ordering::SeqCst);
            }
        }
    }

    fn has_work(&self) -> bool {
        self.pending.is_dirty() || self.flush_request.lock().is_some() || self.signals.stopping()
    }

    /// Journals every pending write (and a flush) in one append, then lets
    /// their replies go. Returns false when there was nothing to do. The
    /// caller holds the journal's leader lock, whose buffer is `group`.
    pub(super) fn journal_round(&self, group: &mut Vec<u8>) -> bool {
        let (flush, batch) = {
            let mut request = self.flush_request.lock();
            (request.take(), self.pending.drain())
        };
        let through = batch.through;
        let writes = batch.len();
        if writes == 0 && flush.is_none() {
            self.logged.lock().through = through;
            self.acks.advance(through, false);
            return false;
        }
        self.check_space_if_due();
        // Encoded for the current segment, outside the lock; in the rare
        // case the applier switched segments meanwhile, again for the new one.
        let mut segment = self.journal.current_number();
        // Where each write lands, so LMDB can point to large values there.
        let mut offsets = Vec::with_capacity(writes);
        // Entries are numbered here: this thread holds the leader lock.
        let head = GroupHead {
            first_lsn: self.journal.last_lsn() + 1,
            micros: unix_micros(),
            origin: self.server_id,
        };
        let last = LogPosition {
            lsn: head.first_lsn + (writes + usize::from(flush.is_some())) as u64 - 1,
            micros: head.micros,
        };
        encode_group(group, &mut offsets, head, flush, &batch, segment);
        let mut logged = self.logged.lock();
        let current = self.journal.current_number();
        if current != segment {
            segment = current;
            encode_group(group, &mut offsets, head, flush, &batch, segment);
        }
        let result = if self.poisoned.load(Ordering::Acquire) {
            Err(None)
        } else {
            self.append(group, last).map_err(Some)
        };
        logged.through = through;
        match result {
            Ok(start) => {
                debug_assert_eq!(start.segment, segment);
                let locations: Vec<Location> = offsets
                    .iter()
                    .map(|&offset| Location {
                        segment: start.segment,
                        offset: start.offset + offset,
                    })
                    .collect();
                logged.dirty = true;
                if let Some(boundary) = flush {
                    logged.flush = logged.flush.max(Some(boundary));
                }
                let counters = &self.counters;
                counters.appends.fetch_add(1, Ordering::Relaxed);
                counters
                    .appended_writes
                    .fetch_add(writes as u64, Ordering::Relaxed);
                counters
                    .largest_append
                    .fetch_max(writes as u64, Ordering::Relaxed);
                self.acks.advance(through, false);
                self.pending
                    .merge_logged(batch, &locations, |len| self.config.keeps_in_log(len));
                drop(logged);
                // A flush is applied at once: what it killed becomes spares.
                let round_wanted = flush.is_some()
                    || self
                        .signals
                        .round_after_next_append
                        .swap(false, Ordering::SeqCst);
                if round_wanted || self.apply_due() {
                    self.signals.wake_applier();
                }
            }
            Err(error) => {
                drop(logged);
                self.counters.failed_appends.fetch_add(1, Ordering::Relaxed);
                match error {
                    Some(error) if is_enospc(&error) => {
                        tracing::error!(%error, "disk full: refusing writes until space is freed");
                        self.out_of_space.store(true, Ordering::Release);
                    }
                    Some(error) => {
                        tracing::error!(%error, "journal write failed: refusing writes from now on");
                        self.poisoned.store(true, Ordering::Release);
                    }
                    None => {}
                }
                // Never acknowledged: those connections are closed instead,
                // and reads go back to what was there before.
                self.pending.drop_failed(batch);
                self.acks.advance(through, true);
            }
        }
        true
    }

    /// Appends a group to the journal; under `always`, fsyncs it too.
    /// Returns where the group starts.
    fn append(&self, group: &[u8], last: LogPosition) -> io::Result<Location> {
        let start = self.journal.append(group, Some(last))?;
        if self.config.sync == SyncPolicy::Always {
            let started = Instant::now();
            self.journal.sync()?;
            self.count_fsync(started);
        }
        Ok(start)
    }

    /// Enough is journalled for a round before the interval: a sixteenth of
    /// the pending memory waits, or the current segment holds four times
    /// that or [`ROUND_JOURNAL_BYTES`], whichever is more (a few hot keys
    /// overwritten fast, or large values, which wait as pointers, keep
    /// `logged` small but grow the segment, which must stay short to
    /// replay).
    fn apply_due(&self) -> bool {
        let threshold = self.config.apply_threshold();
        let segment_limit = (4 * threshold as u64).max(ROUND_JOURNAL_BYTES);
        self.pending.logged_bytes() >= threshold || self.journal.current_bytes() >= segment_limit
    }

    fn apply_loop(&self) {
        let mut state = ApplierState {
            retry: None,
            unsynced: None,
            compact_after: Instant::now(),
            retention_checked: Instant::now(),
        };
        let mut last_round = Instant::now();
        loop {
            let finishing = self.signals.finishing();
            let requested = self.signals.apply_requested.swap(false, Ordering::SeqCst);
            let due = finishing
                || requested
                || state.retry.is_some() && last_round.elapsed() >= IDLE_TICK * 20
                || last_round.elapsed() >= APPLY_EVERY
                || self.apply_due()
                || self.marks.waiting() > self.config.mark_limit();
            if due {
                last_round = Instant::now();
                let worked = self.apply_round(&mut state.retry, finishing);
                if let Some(segment) = worked.filter(|&segment| segment != 0) {
                    state.unsynced = Some(segment);
                }
                self.sync_applied(&mut state);
                if finishing && (worked.is_none() || state.retry.is_some()) {
                    // Nothing more will come; a commit that keeps failing
                    // leaves its writes in the journal for the next start.
                    return;
                }
                if worked.is_some() {
                    continue;
                }
            }
            // Between rounds: one segment at a time, so writes wait little.
            if !finishing && state.retry.is_none() && Instant::now() >= state.compact_after {
                match self.compact_some() {
                    Some(true) => {
                        state.unsynced = Some(self.applied_segment.load(Ordering::Acquire));
                        self.sync_applied(&mut state);
                        continue;
                    }
                    // Reading a segment again at once would likely fail again.
                    Some(false) => state.compact_after = Instant::now() + COMPACT_RETRY,
                    None => {}
                }
            }
            if state.unsynced.is_none()
                && state.retention_checked.elapsed() >= RETENTION_CHECK_EVERY
            {
                state.retention_checked = Instant::now();
                self.remove_dead_segments(self.applied_segment.load(Ordering::Acquire));
            }
            let wait = APPLY_EVERY.saturating_sub(last_round.elapsed());
            thread::park_timeout(wait.max(Duration::from_millis(1)));
        }
    }

    /// fsyncs the data file and deletes the journal segments nothing in it
    /// points into any more. After every round: fsyncs once a second
    /// instead let dirty pages pile up, and under a memory cap reclaim then
    /// writes them back in the way of reads (capped random overwrites:
    /// 15,800/s against 19,600/s).
    fn sync_applied(&self, state: &mut ApplierState) {
        let Some(segment) = state.unsynced else {
            return;
        };
        if self.sync_now() {
            state.unsynced = None;
            self.remove_dead_segments(segment);
        }
    }

    /// Compacts the journal segment that is most garbage, if garbage
    /// outweighs what LMDB points to (and is more than a few rounds'
    /// worth): its live values are copied to the current segment and LMDB
    /// points there, so it can be deleted. Returns whether it committed, or
    /// `None` when nothing was due.
    fn compact_some(&self) -> Option<bool> {
        // Also when short of space: a mostly-garbage segment frees more
        // than its live values take again.
        if self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        let applied = self.applied_segment.load(Ordering::Acquire);
        // History the retention keeps is kept whole: only segments past it
        // are worth compacting (their garbage is deleted with them).
        let past: std::collections::HashSet<u64> =
            self.past_retention(applied).into_iter().collect();
        let victim = {
            let counts = self.applied_counts.lock();
            let segments: Vec<(u64, u64, u64)> = self
                .journal
                .older_segments()
                .into_iter()
                .filter(|segment| past.contains(&segment.number))
                .map(|segment| (segment.number, segment.len, counts.log.of(segment.number)))
                .collect();
            let (len, live) = segments
                .iter()
                .fold((0, 0), |(len, live), s| (len + s.1, live + s.2));
            let garbage = len.saturating_sub(live);
            let floor = 4 * self.config.apply_threshold() as u64;
            if garbage < live.max(floor) {
                return None;
            }
            // The emptiest segment that is at most half live (there is one:
            // at least half of all is garbage). Dead ones are just deleted.
            segments
                .into_iter()
                .filter(|&(_, len, live)| live > 0 && live * 2 <= len)
                .min_by_key(|&(_, len, live)| live as u128 * 1_000_000 / len.max(1) as u128)
                .map(|(segment, _, _)| segment)
        };
        let victim = victim?;
        Some(match self.compact(victim) {
            Ok(moved) => {
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .compacted_bytes
                    .fetch_add(moved, Ordering::Relaxed);
                true
            }
            Err(error) if is_enospc(&error) => {
                tracing::debug!(%error, segment = victim, "no room to compact the journal yet");
                false
            }
            Err(error) => {
                tracing::warn!(%error, segment = victim, "journal compaction failed; will try again");
                false
            }
        })
    }

    /// Copies the records of `victim` that LMDB points to into the journal
    /// as moves and points LMDB at the copies, [`COMPACT_CHUNK`] at a time.
    /// Returns the bytes moved; an error if the victim is still live after
    /// (its count and its records disagree: a corrupt record, say).
    fn compact(&self, victim: u64) -> io::Result<u64> {
        // Keys and places only: the values are read again a chunk at a
        // time, so the memory a compaction takes stays bounded.
        let mut live: Vec<(Vec<u8>, LogPointer)> = Vec::new();
        {
            let txn = self.env.read_txn().map_err(lmdb)?;
            let mut failed = None;
            journal::replay(
                &self.journal.segment_path(victim),
                victim,
                |found, offset| {
                    let (Record::Put { key, .. } | Record::Move { key, .. }) = found else {
                        return;
                    };
                    let from = Location {
                        segment: victim,
                        offset,
                    };
                    match self.items.get(&txn, key) {
                        Ok(stored) => {
                            let pointer = stored
                                .and_then(Old::of)
                                .and_then(|old| old.pointer)
                                .filter(|pointer| pointer.at == from);
                            if let Some(pointer) = pointer {
                                live.push((key.to_vec(), pointer));
                            }
                        }
                        Err(error) => failed = Some(error),
                    }
                },
            )?;
            if let Some(error) = failed {
                return Err(lmdb(error));
            }
        }
        let mut group = Vec::new();
        let mut moves = Vec::new();
        let mut moved = 0;
        // Compaction runs on the applier, the one thread that switches
        // segments: the current one stays current until it is done.
        let seed = journal::seed_of(self.journal.current_number());
        for (key, pointer) in &live {
            let stored = self.journal.read_stored(
                pointer.at,
                pointer.frame_len as usize,
                key,
                pointer.record_len(),
            )?;
            moves.push((&key[..], pointer.at, group.len()));
            let record = Record::Move {
                key,
                from: pointer.at,
                record: stored.record(),
            };
            journal::encode(&mut group, record, seed);
            if group.len() >= COMPACT_CHUNK {
                moved += self.commit_moves(&group, &moves)?;
                group.clear();
                moves.clear();
            }
        }
        if !moves.is_empty() {
            moved += self.commit_moves(&group, &moves)?;
        }
        let left = self.applied_counts.lock().log.of(victim);
        if left != 0 {
            return Err(io::Error::other(format!(
                "{left} live bytes left after moving {} records",
                live.len()
            )));
        }
        Ok(moved)
    }

    /// Appends a group of move records, fsyncs it (the copies are on disk
    /// before LMDB points to them, whatever the policy), then points LMDB
    /// at each copy whose key still points where it moved from. `moves`:
    /// each record's key, origin and offset in `group`.
    fn commit_moves(&self, group: &[u8], moves: &[(&[u8], Location, usize)]) -> io::Result<u64> {
        let start = self.journal.append(group, None)?;
        self.journal.sync()?;
        let mut txn = self.env.write_txn().map_err(lmdb)?;
        let mut counts = self.applied_counts.lock().clone();
        let ends = moves.iter().skip(1).map(|m| m.2).chain([group.len()]);
        for (&(key, from, at), end) in moves.iter().zip(ends) {
            let write = Write::Move {
                from,
                to: Location {
                    segment: start.segment,
                    offset: start.offset + at as u64,
                },
                frame_len: end - at,
            };
            self.apply(&mut txn, key, write, 0, &mut counts)
                .map_err(lmdb)?;
        }
        self.put_meta(&mut txn, &mut counts, None).map_err(lmdb)?;
        self.config.io.commit(txn).map_err(lmdb)?;
        *self.applied_counts.lock() = counts;
        Ok(group.len() as u64)
    }

    /// Deletes the segments up to `applied` past retention that LMDB, as it
    /// is on disk, does not point into (the next commit forgets their
    /// counts); those retention keeps leave the page cache.
    pub(super) fn remove_dead_segments(&self, applied: u64) {
        let past = self.past_retention(applied);
        let mut counts = self.applied_counts.lock();
        for &segment in &past {
            if counts.log.of(segment) != 0 {
                continue;
            }
            match self.journal.remove(segment) {
                Ok(()) => counts.log.drop_segment(segment),
                Err(error) => {
                    tracing::warn!(%error, segment, "cannot remove a journal segment");
                    return;
                }
            }
        }
        for segment in self.journal.older_segments() {
            let kept = segment.number <= applied && !past.contains(&segment.number);
            if kept && counts.log.of(segment.number) == 0 {
                self.journal.uncache(segment.number);
            }
        }
    }

    /// The applied segments (up to `applied`) that the log's retention lets
    /// go, oldest first: none while a backup holds the history. While the
    /// disk is full, history gives way to writes: every applied segment.
    fn past_retention(&self, applied: u64) -> Vec<u64> {
        if self.journal.history_held() {
            return Vec::new();
        }
        let retention = if self.out_of_space.load(Ordering::Acquire) {
            LogRetention::NOTHING
        } else {
            self.config.log_retention
        };
        let mut segments = self.journal.older_segments();
        segments.retain(|segment| segment.number <= applied);
        retention.past(&segments, SystemTime::now())
    }

    /// One LMDB transaction: what was journalled since the last one, with
    /// first-read marks and a batch of expired items. Returns `None` when
    /// there was nothing to do or the commit failed, else the newest
    /// journal segment LMDB now holds (0 when it holds no new one).
    fn apply_round(&self, retry: &mut Option<ApplyRound>, all_marks: bool) -> Option<u64> {
        // The next segment is made before the writers are held up.
        let next = if self.logged.lock().dirty {
            match self.journal.prepare() {
                Ok(next) => Some(next),
                Err(error) => {
                    tracing::error!(%error, "cannot start a journal segment: refusing writes from now on");
                    self.poisoned.store(true, Ordering::Release);
                    None
                }
            }
        } else {
            None
        };
        let (through, taken) = {
            let mut logged = self.logged.lock();
            let through = logged.through;
            // Only the applier clears `dirty`: a prepared segment is used.
            let taken = next.map(|next| {
                logged.dirty = false;
                let retired = self.journal.switch(next);
                (
                    self.pending.take_logged(through),
                    logged.flush.take(),
                    retired,
                )
            });
            (through, taken)
        };
        let taken = taken.map(|(batch, flush, retired)| {
            // Under every policy: LMDB is about to point into it, and its
            // pointers must never reach the disk before what they point to.
            if let Err(error) = retired.sync() {
                tracing::error!(%error, "journal fsync failed: refusing writes from now on");
                self.poisoned.store(true, Ordering::Release);
            }
            retired.release_unused();
            (batch, flush, retired.number, retired.last)
        });
        // After `through`: a caller flags a reclaim before it numbers the
        // write it waits for, so a round that covers that number sees it.
        let reclaim = self.signals.reclaim.swap(false, Ordering::AcqRel);
        let crawl = self.signals.crawl.lock().take();
        let mut round = retry.take();
        if let Some((batch, flush, segment, last)) = taken {
            let round = round.get_or_insert_with(|| ApplyRound {
                batches: Vec::new(),
                flush: None,
                segment,
                last,
                retried: false,
            });
            round.batches.push(batch);
            round.flush = round.flush.max(flush);
            round.segment = segment;
            round.last = last;
        }
        let marks = self
            .marks
            .take(if all_marks { usize::MAX } else { MARK_BATCH });
        if round.is_none() && marks.is_empty() && !reclaim && crawl.is_none() {
            self.applied.advance(through, false);
            return None;
        }
        if round.is_some() && self.poisoned.load(Ordering::Acquire) {
            // A journal fsync or write failed: LMDB must not point into
            // journal bytes that may never reach the disk. The writes stay
            // pending (readable; their values are in the page cache) and no
            // new ones are accepted.
            self.marks.forget(&marks);
            *retry = round;
            return None;
        }
        let mut result = Ok(());
        if let Some(round) = round.as_ref().filter(|round| round.retried) {
            // Deletes journalled since may free the room the writes need,
            // but LMDB reuses a freed page only in a later transaction.
            result = self.commit_removes(round);
        }
        let mut segment = 0;
        let result = result
            .and_then(|()| self.commit(round.as_ref(), reclaim, crawl.as_deref()))
            .and_then(|()| self.commit_marks(&marks, round.as_ref()));
        let mut early = Vec::new();
        if let Ok(still_pending) = &result {
            // The read cache may hold a copy made before the bit was set.
            for (key, cas) in &marks {
                self.pending.set_cached_bits(key, *cas, FETCHED);
            }
            early.clone_from(still_pending);
        }
        match result {
            Ok(_) => {
                if let Some(round) = round {
                    self.counters.applies.fetch_add(1, Ordering::Relaxed);
                    segment = round.segment;
                    if round.flush.is_some() {
                        // The segments the flush killed become spares after
                        // this round; the next append's round switches to
                        // one of them instead of filling a new file for up
                        // to a second.
                        self.signals
                            .round_after_next_append
                            .store(true, Ordering::SeqCst);
                    }
                    // Records read while pending go to the read cache (with
                    // the bit their mark just set in LMDB): they were wanted.
                    let marks = &self.marks;
                    let flushed_through = self.flushed_through.load(Ordering::Acquire);
                    self.pending.retire_applied(round.batches, |hash, cas| {
                        cas > flushed_through && marks.noted(hash, cas)
                    });
                }
                // Only now: until here reads took the fetched bit from the
                // notes. Those of items still pending stay, for a later round.
                if early.is_empty() {
                    self.marks.forget(&marks);
                } else {
                    let kept: std::collections::HashSet<(&[u8], u64)> =
                        early.iter().map(|(key, cas)| (&key[..], *cas)).collect();
                    let done: Vec<_> = marks
                        .iter()
                        .filter(|(key, cas)| !kept.contains(&(&key[..], *cas)))
                        .cloned()
                        .collect();
                    self.marks.forget(&done);
                    self.marks.put_back(early);
                }
                self.applied.advance(through, false);
            }
            Err(error) => {
                self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
                let first = round.as_ref().is_none_or(|round| !round.retried);
                // LMDB reports a short write (a full file system) as EIO.
                let short = is_out_of_space(&error)
                    || self
                        .space_left()
                        .is_some_and(|left| left < self.config.reserve_bytes);
                if short {
                    if first {
                        tracing::error!(%error, "disk full: refusing writes until space is freed");
                    }
                    self.out_of_space.store(true, Ordering::Release);
                } else {
                    if first {
                        tracing::error!(%error, "disk commit failed: refusing writes from now on");
                    }
                    self.poisoned.store(true, Ordering::Release);
                }
                if let Some(round) = &mut round {
                    round.retried = true;
                }
                self.marks.forget(&marks);
                // The writes are acknowledged and in the journal: they stay
                // pending (readable) and the next round tries again, with
                // whatever was journalled since (deletes may free space).
                *retry = round;
                // Tried again after a pause, not at once.
                return None;
            }
        }
        Some(segment)
    }

    fn commit(
        &self,
        round: Option<&ApplyRound>,
        reclaim: bool,
        crawl: Option<&[bool]>,
    ) -> heed::Result<()> {
        if let Some(round) = round.filter(|_| self.fetch_before_write.load(Ordering::Relaxed)) {
            self.prefetch(&round.batches);
        }
        let mut txn = self.env.write_txn()?;
        let mut counts = self.applied_counts.lock().clone();
        if round.is_some_and(|round| round.flush.is_some()) {
            self.items.clear(&mut txn)?;
            self.expiry.clear(&mut txn)?;
            // The flushed items' space goes back at once.
            for (index, &(items, _)) in counts.classes.0.iter().enumerate() {
                if items > 0 {
                    self.note_reclaimed(index + 1, items);
                }
            }
            counts.clear();
        }
        let flushed_through = self.flushed_through.load(Ordering::Acquire);
        // LMDB holds every page a transaction dirties in memory until the
        // commit (a random overwrite dirties a whole leaf), so a large round
        // commits in parts of at most a quarter of the pending memory: under
        // `-m 128`, rounds of 30,000 random overwrites held 120 MB.
        let dirty_limit = self.config.pending_limit / 4;
        let mut dirty = 0;
        // Each batch in key order (neighbouring keys share pages, so the
        // transaction dirties fewer of them); batches oldest first, so the
        // newest write of a key is the one that stays.
        let batches = round.map_or(&[][..], |round| &round.batches[..]);
        let mut applied = 0;
        for batch in batches {
            let mut writes: Vec<(u64, &[u8], Write<'_>)> = batch
                .logged_writes()
                .map(|(key, change, logged)| (key_prefix(key), key, Write::of(change, logged)))
                .collect();
            // Most keys differ in their first eight bytes: one integer
            // comparison instead of a memcmp call.
            writes.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
            applied += writes.len();
            for (_, key, write) in writes {
                self.apply(&mut txn, key, write, flushed_through, &mut counts)?;
                dirty += 4096 + key.len() + write.weight();
                if dirty >= dirty_limit {
                    // Part of the round: a replay of the journal repeats
                    // it harmlessly (every record is a key's whole state).
                    self.put_meta(&mut txn, &mut counts, None)?;
                    self.config.io.commit(txn)?;
                    *self.applied_counts.lock() = counts.clone();
                    txn = self.env.write_txn()?;
                    dirty = 0;
                }
            }
        }
        let reclaimed = if reclaim {
            self.reclaim_expired(&mut txn, &mut counts)?
        } else {
            0
        };
        if let Some(classes) = crawl {
            self.crawl_expired(&mut txn, &mut counts, classes)?;
        }
        self.put_meta(
            &mut txn,
            &mut counts,
            round.map(|round| (round.segment, round.last)),
        )?;
        self.config.io.commit(txn)?;
        if let Some(round) = round {
            self.applied_segment
                .fetch_max(round.segment, Ordering::AcqRel);
        }
        self.measure_lmdb_usage();
        *self.applied_counts.lock() = counts;
        self.counters
            .applied_writes
            .fetch_add(applied as u64, Ordering::Relaxed);
        self.counters.swept.fetch_add(reclaimed, Ordering::Relaxed);
        Ok(())
    }

    /// Reads the pages the batches' keys live on, with [`PREFETCH_THREADS`]
    /// threads at once: when the data is larger than memory they are on the
    /// device, and the transaction would read them one at a time.
    fn prefetch(&self, batches: &[Batch]) {
        let keys: Vec<&[u8]> = batches
            .iter()
            .flat_map(|batch| batch.writes().map(|(key, _)| key))
            .collect();
        let share = keys.len().div_ceil(PREFETCH_THREADS).max(1);
        thread::scope(|scope| {
            for part in keys.chunks(share) {
                scope.spawn(move || {
                    if let Ok(txn) = self.env.read_txn() {
                        for key in part {
                            let _ = self.items.get(&txn, key);
                        }
                    }
                });
            }
        });
    }

    /// Sets the fetched bits of first reads, in transactions that rewrite
    /// at most the apply threshold's worth of records each: a mark rewrites
    /// its whole record, and one transaction's dirty pages are all in memory.
    /// Returns the marks of items still pending (LMDB has an older item or
    /// none under the key), for a later round.
    fn commit_marks(
        &self,
        marks: &[(Arc<[u8]>, u64)],
        round: Option<&ApplyRound>,
    ) -> heed::Result<Vec<(Arc<[u8]>, u64)>> {
        // Items this round stored were stored with their bit (see `apply`).
        let stored_now = |key: &[u8], cas: u64| {
            let hash = self.marks.hash(key);
            round.is_some_and(|round| {
                round
                    .batches
                    .iter()
                    .any(|batch| match batch.get(hash, key) {
                        Some(Pending::Put(record)) => {
                            Header::decode(record).is_some_and(|(header, _)| header.cas == cas)
                        }
                        _ => false,
                    })
            })
        };
        let mut noted: Vec<&(Arc<[u8]>, u64)> = marks
            .iter()
            .filter(|(key, cas)| !stored_now(key, *cas))
            .collect();
        noted.sort_unstable();
        let mut early = Vec::new();
        let mut rest = &noted[..];
        while !rest.is_empty() {
            let mut txn = self.env.write_txn()?;
            let mut rewritten = 0;
            while let Some((&mark, more)) = rest.split_first() {
                if rewritten >= self.config.apply_threshold() {
                    break;
                }
                rest = more;
                let (key, cas) = (&mark.0[..], mark.1);
                let stored = self.items.get(&txn, key)?;
                let found = stored.and_then(|stored| Some((Header::decode(stored)?.0, stored)));
                match found {
                    Some((h, stored)) if h.cas == cas && !h.has(FETCHED) => {
                        let mut stored = stored.to_vec();
                        record::set_bits(&mut stored, FETCHED);
                        self.items.put(&mut txn, key, &stored)?;
                        rewritten += key.len() + stored.len();
                    }
                    Some((h, _)) if h.cas >= cas => {}
                    // Read while pending, and not in LMDB yet.
                    _ if self.pending_item_is(key, cas) => early.push(mark.clone()),
                    _ => {}
                }
            }
            self.config.io.commit(txn)?;
        }
        Ok(early)
    }

    /// Whether the newest pending write of `key` stores the item `cas`.
    fn pending_item_is(&self, key: &[u8], cas: u64) -> bool {
        match self.pending.lock(key).get(key) {
            Some(Pending::Put(record)) => Header::decode(record).is_some_and(|(h, _)| h.cas == cas),
            _ => false,
        }
    }

    /// Commits only the keys whose newest write in `round` is a removal.
    fn commit_removes(&self, round: &ApplyRound) -> heed::Result<()> {
        let mut newest = std::collections::HashMap::new();
        for batch in &round.batches {
            newest.extend(batch.writes());
        }
        let mut removed: Vec<&[u8]> = newest
            .into_iter()
            .filter(|(_, change)| *change == Pending::Remove)
            .map(|(key, _)| key)
            .collect();
        removed.sort_unstable();
        let mut txn = self.env.write_txn()?;
        let mut counts = self.applied_counts.lock().clone();
        let flushed_through = self.flushed_through.load(Ordering::Acquire);
        for key in removed {
            self.apply(&mut txn, key, Write::Remove, flushed_through, &mut counts)?;
        }
        self.put_meta(&mut txn, &mut counts, None)?;
        self.config.io.commit(txn)?;
        self.measure_lmdb_usage();
        *self.applied_counts.lock() = counts;
        Ok(())
    }

    /// Records, with a transaction's writes, the last CAS handed out, the
    /// class counts, the journal bytes each segment holds for LMDB, and the
    /// newest journal segment LMDB now holds.
    pub(super) fn put_meta(
        &self,
        txn: &mut RwTxn<'_>,
        counts: &mut Counts,
        applied: Option<(u64, LogPosition)>,
    ) -> heed::Result<()> {
        let cas = self.last_cas.load(Ordering::Acquire);
        self.meta.put(txn, b"cas", &cas.to_le_bytes())?;
        self.meta.put(txn, b"classes", &counts.classes.encode())?;
        for (segment, live) in counts.log.take_touched() {
            let key = record::log_live_key(segment);
            match live {
                Some(live) => self.meta.put(txn, &key, &live.to_le_bytes())?,
                None => {
                    self.meta.delete(txn, &key)?;
                }
            }
        }
        if let Some((segment, last)) = applied {
            self.meta
                .put(txn, super::JOURNAL_APPLIED, &segment.to_le_bytes())?;
            self.meta.put(txn, super::APPLIED_LSN, &last.encode())?;
        }
        Ok(())
    }

    /// Applies one pending write, keeping the expiry index and the counts
    /// right.
    pub(super) fn apply(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
        write: Write<'_>,
        flushed_through: u64,
        counts: &mut Counts,
    ) -> heed::Result<()> {
        let old = match write {
            Write::Put { stored, logged } => {
                let Some((header, value)) = Header::decode(stored) else {
                    return Ok(());
                };
                if header.cas <= flushed_through {
                    // Written before a flush that covers it: already gone.
                    return Ok(());
                }
                // Read while pending: stored with its fetched bit, so the
                // mark need not rewrite it.
                let fetched =
                    !header.has(FETCHED) && self.marks.noted(self.marks.hash(key), header.cas);
                // A large value stays in the journal: LMDB gets a pointer
                // (which a pending write may already be).
                let already = LogPointer::of_stored(&header, value);
                let pointer = already.or_else(|| {
                    logged
                        .filter(|_| self.config.keeps_in_log(value.len()))
                        .map(|at| LogPointer::to_put(at, key, stored, value.len()))
                });
                let value_len = record::stored_value_len(&header, value);
                let pointed;
                let stored = match &pointer {
                    Some(pointer) if already.is_none() => {
                        pointed = record::pointer_record(&header, pointer);
                        &pointed[..]
                    }
                    _ => stored,
                };
                let write = |reserved: &mut heed::ReservedSpace<'_>| {
                    reserved.write_all(stored)?;
                    if fetched {
                        record::set_bits(reserved.written_mut(), FETCHED);
                    }
                    Ok(())
                };
                // Insert, or learn what was there, in one descent.
                let len = stored.len();
                let new = (header, value_len, pointer);
                let Some(old) = self.items.get_or_put_reserved(txn, key, len, write)? else {
                    return self.index_new(txn, key, new, counts);
                };
                let old = Old::of(old);
                self.forget_old(txn, key, old, counts, header.expiry_unix)?;
                self.items.put_reserved(txn, key, len, write)?;
                return self.index_new(txn, key, new, counts);
            }
            Write::Move {
                from,
                to,
                frame_len,
            } => {
                let Some(old) = self.stored_old(txn, key)? else {
                    return Ok(());
                };
                let Some(moved) = old.pointer.filter(|pointer| pointer.at == from) else {
                    // Written or removed since: the copy is garbage.
                    return Ok(());
                };
                let pointer = LogPointer {
                    at: to,
                    frame_len: frame_len as u32,
                    ..moved
                };
                counts.log.remove(&moved);
                counts.log.add(&pointer);
                // The header as it is now: its bits may have changed.
                let record = record::pointer_record(&old.header, &pointer);
                return self.items.put(txn, key, &record);
            }
            Write::Remove => self.stored_old(txn, key)?,
        };
        if old.is_some() {
            self.forget_old(txn, key, old, counts, 0)?;
            self.items.delete(txn, key)?;
        }
        Ok(())
    }

    /// Takes the record being replaced or removed out of the counts and the
    /// expiry index (unless the new one expires at the same time).
    fn forget_old(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
        old: Option<Old>,
        counts: &mut Counts,
        keep_expiry: u32,
    ) -> heed::Result<()> {
        if let Some(old) = old {
            self.uncount(counts, key, &old);
            if old.header.expiry_unix != 0 && old.header.expiry_unix != keep_expiry {
                self.expiry
                    .delete(txn, &record::expiry_key(old.header.expiry_unix, key))?;
            }
        }
        Ok(())
    }

    /// Counts and indexes a record just stored under its key: its header,
    /// value length and where the value is, if in the journal.
    fn index_new(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
        (header, value_len, pointer): (Header, usize, Option<LogPointer>),
        counts: &mut Counts,
    ) -> heed::Result<()> {
        if header.expiry_unix != 0 {
            self.expiry
                .put(txn, &record::expiry_key(header.expiry_unix, key), &[])?;
        }
        counts.classes.add(
            self.class_of(key, value_len),
            record::item_size(key, value_len) as u64,
        );
        if let Some(pointer) = &pointer {
            counts.log.add(pointer);
        }
        Ok(())
    }

    /// What the record committed under `key` counts for.
    fn stored_old(&self, txn: &RwTxn<'_>, key: &[u8]) -> heed::Result<Option<Old>> {
        Ok(self.items.get(txn, key)?.and_then(Old::of))
    }

    /// Takes a record out of the counts.
    fn uncount(&self, counts: &mut Counts, key: &[u8], old: &Old) {
        counts.classes.remove(
            self.class_of(key, old.value_len),
            record::item_size(key, old.value_len) as u64,
        );
        if let Some(pointer) = &old.pointer {
            counts.log.remove(pointer);
        }
    }

    /// Removes a batch of expired items, oldest first, by the expiry index.
    fn reclaim_expired(&self, txn: &mut RwTxn<'_>, counts: &mut Counts) -> heed::Result<u64> {
        let due = self.due_expiry_keys(txn, RECLAIM_BATCH)?;
        let mut removed = 0;
        for index_key in &due {
            let key = &index_key[4..];
            self.expiry.delete(txn, index_key)?;
            let found = self.stored_old(txn, key)?;
            let Some(old) = found.filter(|old| self.expired(&old.header)) else {
                continue;
            };
            let class = self.remove_expired(txn, counts, key, &old)?;
            self.note_reclaimed(class, 1);
            removed += 1;
        }
        Ok(removed)
    }

    /// Removes every expired item of the classes marked in `classes`
    /// (`lru_crawler crawl`), counted in `crawler_reclaimed`.
    fn crawl_expired(
        &self,
        txn: &mut RwTxn<'_>,
        counts: &mut Counts,
        classes: &[bool],
    ) -> heed::Result<()> {
        for index_key in &self.due_expiry_keys(txn, usize::MAX)? {
            let key = &index_key[4..];
            let Some(old) = self.stored_old(txn, key)? else {
                self.expiry.delete(txn, index_key)?;
                continue;
            };
            if !classes
                .get(self.class_of(key, old.value_len))
                .copied()
                .unwrap_or(false)
            {
                continue;
            }
            self.expiry.delete(txn, index_key)?;
            if self.expired(&old.header) {
                let class = self.remove_expired(txn, counts, key, &old)?;
                self.counters.crawler_reclaimed.add(class, 1);
            }
        }
        Ok(())
    }

    /// The expiry index's entries that are due, oldest first, at most `limit`.
    fn due_expiry_keys(&self, txn: &RwTxn<'_>, limit: usize) -> heed::Result<Vec<Vec<u8>>> {
        let now = self.now_unix();
        Ok(self
            .expiry
            .iter(txn)?
            .filter_map(Result::ok)
            .take_while(|(index_key, _)| {
                record::expiry_of_index_key(index_key).is_some_and(|at| at <= now)
            })
            .take(limit)
            .map(|(index_key, _)| index_key.to_vec())
            .collect())
    }

    /// Removes an expired item (its index entry is gone already); returns
    /// its size class.
    fn remove_expired(
        &self,
        txn: &mut RwTxn<'_>,
        counts: &mut Counts,
        key: &[u8],
        old: &Old,
    ) -> heed::Result<usize> {
        if !old.header.has(FETCHED) {
            self.counters
                .expired_unfetched
                .fetch_add(1, Ordering::Relaxed);
        }
        self.items.delete(txn, key)?;
        self.uncount(counts, key, old);
        Ok(self.class_of(key, old.value_len))
    }

    /// Has the writer crawl the classes marked now; returns how many
    /// expired items it removed.
    pub(super) fn crawl_expired_now(&self, classes: Vec<bool>) -> usize {
        let before = self.counters.crawler_reclaimed.total();
        *self.signals.crawl.lock() = Some(classes);
        let seq = self.pending.next_seq();
        if self.wait_until_applied(seq) == AckState::Waiting {
            return 0;
        }
        (self.counters.crawler_reclaimed.total() - before) as usize
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
        let before = self.counters.swept.load(Ordering::Acquire);
        // Flag first, then number: the round that decides the number saw the flag.
        self.signals.reclaim.store(true, Ordering::Release);
        let seq = self.pending.next_seq();
        if self.wait_until_applied(seq) == AckState::Waiting {
            return 0;
        }
        (self.counters.swept.load(Ordering::Acquire) - before) as usize
    }

    /// fsyncs the journal as the policy says (the applier fsyncs the data
    /// file itself before it deletes journal segments).
    fn sync_loop(&self) {
        let period = self.config.sync.background_period().unwrap_or(IDLE_TICK);
        let mut synced_groups = 0;
        loop {
            let finishing = self.signals.finishing();
            let groups = self.counters.appends.load(Ordering::Acquire);
            if groups > synced_groups {
                let started = Instant::now();
                match self.journal.sync() {
                    Ok(()) => self.count_fsync(started),
                    Err(error) => {
                        tracing::error!(%error, "journal fsync failed: refusing writes from now on");
                        self.poisoned.store(true, Ordering::Release);
                    }
                }
                synced_groups = groups;
            }
            if finishing {
                return;
            }
            thread::park_timeout(period);
        }
    }

    /// fsyncs the data file; a failure poisons the engine. Returns whether
    /// it succeeded.
    pub(super) fn sync_now(&self) -> bool {
        let started = Instant::now();
        match self.config.io.sync_data(&self.env) {
            Ok(()) => {
                self.count_fsync(started);
                true
            }
            Err(error) => {
                tracing::error!(%error, "fsync failed: refusing writes from now on");
                self.poisoned.store(true, Ordering::Release);
                false
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
    /// inside the file are reused before it grows), less what the current
    /// journal segment holds for LMDB (at most that much room when applied).
    fn space_left(&self) -> Option<u64> {
        let (used, file) = (*self.lmdb_usage.lock())?;
        let fs = nix::sys::statvfs::statvfs(self.env.path()).ok()?;
        let fs_free = fs.blocks_available() as u64 * fs.fragment_size() as u64;
        let map_left = (self.config.map_size as u64).saturating_sub(used);
        let room = map_left.min(fs_free + file.saturating_sub(used));
        Some(room.saturating_sub(self.journal.current_bytes()))
    }

    /// Measures the pages LMDB uses and its file's size: the file changes
    /// only in a commit, and counting the used pages walks the free list,
    /// too slow for every space check.
    pub(super) fn measure_lmdb_usage(&self) {
        let usage = self
            .env
            .non_free_pages_size()
            .ok()
            .zip(self.env.real_disk_size().ok());
        *self.lmdb_usage.lock() = usage;
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
        if short {
            // Spare segment files hold space a write may need.
            self.journal.drop_spares();
        }
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
        let appends = load(&counters.appends);
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
            ("disk_appends", appends.to_string()),
            (
                "disk_appended_writes",
                load(&counters.appended_writes).to_string(),
            ),
            (
                "disk_avg_append_writes",
                (load(&counters.appended_writes) / appends.max(1)).to_string(),
            ),
            (
                "disk_largest_append",
                load(&counters.largest_append).to_string(),
            ),
            (
                "disk_failed_appends",
                load(&counters.failed_appends).to_string(),
            ),
            (
                "disk_failed_commits",
                load(&counters.failed_commits).to_string(),
            ),
            ("disk_applies", load(&counters.applies).to_string()),
            (
                "disk_applied_writes",
                load(&counters.applied_writes).to_string(),
            ),
            ("log_server_id", self.server_id.to_string()),
            ("log_last_lsn", self.journal.last_lsn().to_string()),
            ("disk_journal_bytes", self.journal.bytes().to_string()),
            (
                "disk_journal_live_bytes",
                self.applied_counts.lock().log.total().to_string(),
            ),
            (
                "disk_journal_segments",
                (self.journal.older_segments().len() + 1).to_string(),
            ),
            ("disk_compactions", load(&counters.compactions).to_string()),
            (
                "disk_compacted_bytes",
                load(&counters.compacted_bytes).to_string(),
            ),
            (
                "disk_journal_waiting_bytes",
                self.pending.logged_bytes().to_string(),
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
                "disk_poisoned",
                u8::from(self.poisoned.load(Ordering::Relaxed)).to_string(),
            ),
            (
                "disk_writes_refused",
                load(&counters.writes_refused).to_string(),
            ),
            ("disk_expired_reclaimed", load(&counters.swept).to_string()),
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

#[cfg(test)]
mod tests {
    use super::key_prefix;

    #[test]
    fn a_smaller_key_prefix_means_a_smaller_key() {
        let keys: [&[u8]; 8] = [
            b"",
            b"a",
            b"a\0",
            b"ab",
            b"abcdefghA",
            b"abcdefghZ",
            b"b",
            &[0xff, 0xfe, 0xfd],
        ];
        for a in keys {
            for b in keys {
                if key_prefix(a) < key_prefix(b) {
                    assert!(a < b, "{a:?} {b:?}");
                }
            }
        }
        assert_eq!(
            key_prefix(b"a"),
            key_prefix(b"a\0"),
            "ties fall back to the keys"
        );
    }
}
