//! Applying the log to LMDB: the applier takes everything appended since its
//! last round, at least every [`APPLY_EVERY`] or once a quarter of the
//! pending memory is waiting, and applies it to LMDB together with a due
//! flush and a batch of expired items (a large round commits in parts);
//! it fsyncs the data file and lets go of the segments LMDB now holds that
//! retention does not keep.

use std::io::Write as _;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use heed::RwTxn;

use super::compactor::{Compaction, COMPACT_RETRY};
use super::log_format::Location;
use super::pending::{Batch, Pending};
use super::record::{self, Counts, LogPointer, Old, Space, FETCHED};
use super::space::is_out_of_space;
use super::{Inner, WriteFailed, APPLIED_LSN, JOURNAL_APPLIED, PARTIAL_ROUND};
use crate::log_position::LogPosition;

/// The longest journalled writes wait for LMDB while the engine is busy.
/// Under sustained random writes a longer round shares LMDB's pages among
/// more writes (the multi-get's 10 % of sets, 30 s in: the applier's CPU
/// per operation 0.53-0.62 µs against 0.85-0.91 with 1 s and a sixteenth
/// of the pending memory); a kill then leaves more to replay, at most the
/// pending memory as before.
const APPLY_EVERY: Duration = Duration::from_secs(5);

/// How long a waiting applier sleeps at most before it looks again at what
/// is due besides a round: compaction, retention, and a round whose commit
/// failed (tried again at the next look, or at once when a reader asks: a
/// large round tried again faster would only burn CPU on a full disk).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Journal bytes that make a round due whatever the memory budget. Each
/// round rewrites the LMDB pages its keys fall in, so fewer, larger rounds
/// cost less per write (1–10 KB sets: about 6 % of the CPU against 64 MiB
/// rounds); a segment this long still replays in about 0.1 s after a kill.
const ROUND_JOURNAL_BYTES: u64 = 256 << 20;

/// Threads that read a round's pages before its transaction, when the data
/// is larger than memory (the device serves several reads at once).
const PREFETCH_THREADS: usize = 16;

/// How often an idle applier lets go of the history past retention.
const RETENTION_CHECK_EVERY: Duration = Duration::from_secs(10);

/// One LMDB transaction's worth of journalled writes, kept until committed.
#[derive(Default)]
pub(super) struct ApplyRound {
    /// Oldest first; more than one only while a failed commit is retried.
    pub(super) batches: Vec<Batch>,
    pub(super) flush: Option<u64>,
    /// The newest journal segment these writes came from.
    pub(super) segment: u64,
    /// The newest entry taken from it.
    pub(super) last: LogPosition,
    /// The segment is still appended to: LMDB then holds part of it
    /// (noted as a partial round), and a replay repeats it from its start.
    pub(super) segment_goes_on: bool,
}

/// The first eight bytes of `key`, zero-padded, as a number that sorts as
/// the bytes do.
fn key_prefix(key: &[u8]) -> u64 {
    let mut prefix = [0; 8];
    let len = key.len().min(8);
    prefix[..len].copy_from_slice(&key[..len]);
    u64::from_be_bytes(prefix)
}

impl Inner {
    /// Enough is journalled for a round before the interval: a quarter of
    /// the pending memory waits, or the current segment holds as much or
    /// [`ROUND_JOURNAL_BYTES`], whichever is more (a few hot keys
    /// overwritten fast, or large values, which wait as pointers, keep
    /// `logged` small but grow the segment, which must stay short to
    /// replay).
    pub(super) fn apply_due(&self) -> bool {
        // A quarter of the pending memory: under random writes to a large
        // keyspace, a round rewrites about one LMDB page per key until it
        // holds several times more keys than LMDB has pages.
        let threshold = self.config.pending_limit / 4;
        let segment_limit = (threshold as u64).max(ROUND_JOURNAL_BYTES);
        self.pending.logged_bytes() >= threshold || self.journal.current_end().1 >= segment_limit
    }

    pub(super) fn apply_loop(&self) {
        // A round whose commit failed, to try again.
        let mut retry = None;
        // Whether LMDB holds a commit not yet fsynced that may let segments
        // go (a failed fsync leaves it for the next round).
        let mut unsynced = false;
        // No compaction before this (one failed).
        let mut compact_after = Instant::now();
        // Segments whose compaction failed other than for space.
        let mut unreadable = std::collections::BTreeSet::new();
        // When retention was last applied: the log ages without rounds too.
        let mut retention_checked = Instant::now();
        let mut last_round = Instant::now();
        // When the segment being appended to was started.
        let mut segment_started = Instant::now();
        loop {
            let finishing = self.signals.finishing();
            let requested = self.signals.apply_requested.swap(false, Ordering::SeqCst);
            let apply_only = self.signals.apply_only_asked.swap(false, Ordering::SeqCst);
            let timed = last_round.elapsed() >= APPLY_EVERY;
            let size_due = self.apply_due();
            // Asked for more than LMDB's catching up (all a read or expired
            // items ask for).
            let asked = finishing || requested || timed || size_due;
            if asked || apply_only || retry.is_some() && last_round.elapsed() >= LOOK_EVERY {
                // Only LMDB's catching up was asked for, and the segment is
                // young: it goes on, or each such round would leave a file
                // for retention to keep.
                let keep_segment = !asked && segment_started.elapsed() < APPLY_EVERY;
                last_round = Instant::now();
                let pointed_before = self.applied_counts.lock().log.total();
                let segment_before = self.journal.current_end().0;
                let worked = self.apply_round(&mut retry, keep_segment);
                if self.journal.current_end().0 != segment_before {
                    segment_started = Instant::now();
                }
                // A round that removed expired items holds no new segment,
                // but its commit may free one: it is fsynced before anything
                // is deleted, as a round of writes is.
                let freed = self.applied_counts.lock().log.total() < pointed_before;
                unsynced |= worked.is_some_and(|segment| segment != 0 || freed);
                self.sync_applied(&mut unsynced);
                // (A round left to retry returned `None` too.)
                match worked {
                    Some(_) => continue,
                    // Nothing more will come; a commit that keeps failing
                    // leaves its writes in the journal for the next start.
                    None if finishing => return,
                    None => {}
                }
            }
            // Between rounds: one segment at a time, so writes wait little.
            if !finishing && retry.is_none() && Instant::now() >= compact_after {
                match self.compact_some(&mut unreadable) {
                    Compaction::Done => {
                        unsynced = true;
                        self.sync_applied(&mut unsynced);
                        continue;
                    }
                    Compaction::Failed => compact_after = Instant::now() + COMPACT_RETRY,
                    Compaction::NotDue => {}
                }
            }
            // Not while a round is left to retry: its commits may have
            // lowered counts that no fsync made durable.
            if !unsynced && retry.is_none() && retention_checked.elapsed() >= RETENTION_CHECK_EVERY
            {
                retention_checked = Instant::now();
                self.remove_dead_segments(self.applied_segment.load(Ordering::Acquire));
            }
            let wait = APPLY_EVERY.saturating_sub(last_round.elapsed());
            thread::park_timeout(wait.clamp(Duration::from_millis(1), LOOK_EVERY));
        }
    }

    /// fsyncs the data file and deletes the journal segments nothing in it
    /// points into any more. After every round: fsyncs once a second
    /// instead let dirty pages pile up, and under a memory cap reclaim then
    /// writes them back in the way of reads (capped random overwrites:
    /// 15,800/s against 19,600/s).
    fn sync_applied(&self, unsynced: &mut bool) {
        if *unsynced && self.fsync("fsync failed", || self.config.io.sync_data(&self.env)) {
            *unsynced = false;
            // Every segment applied so far: a round raises the number before
            // this fsync, a replica's snapshot only after its own.
            self.remove_dead_segments(self.applied_segment.load(Ordering::Acquire));
        }
    }

    /// One LMDB transaction: what was journalled since the last one, with
    /// a batch of expired items. Returns `None` when there was nothing to
    /// do or the commit failed, else the newest journal segment LMDB now
    /// holds (0 when it holds no new one). A round whose commit failed is
    /// left in `retry`, and taken from there by the next.
    fn apply_round(&self, retry: &mut Option<ApplyRound>, keep_segment: bool) -> Option<u64> {
        // A round left to retry ends its segment: its writes may be in one
        // already retired.
        let keep_segment = keep_segment && retry.is_none();
        // The next segment is made before the writers are held up.
        let was_dirty = self.logged.lock().dirty;
        let next = (was_dirty && !keep_segment).then(|| self.journal.prepare());
        let next = next.and_then(|next| {
            next.map_err(|error| self.log_write_failed("cannot start a journal segment", error))
                .ok()
        });
        let mut logged = self.logged.lock();
        let takes = next.is_some() || keep_segment && logged.unapplied;
        if !was_dirty && logged.dirty && !takes {
            // A group came in between: its round starts at once (a waiter
            // asked for one round, and this one takes nothing).
            self.signals.wake_applier();
        }
        // What this round leaves applied: every write up to `through` if it
        // takes them, or if none was journalled since the last take; a
        // group journalled since `dirty` was read is not.
        let through = (takes || !logged.unapplied).then_some(logged.through);
        // Only the applier clears `dirty`: a prepared segment is used.
        let taken = takes.then(|| {
            let retired = next.map(|next| {
                logged.dirty = false;
                self.journal.switch(next)
            });
            logged.unapplied = false;
            let (current, _, current_last) = self.journal.current_end();
            let batch = self.pending.take_logged(logged.through);
            (batch, logged.flush.take(), retired, (current, current_last))
        });
        drop(logged);
        // A round left to retry failed to commit (or waits on a poisoned
        // engine, and never commits again).
        let retried = retry.is_some();
        let mut round = retry.take();
        if let Some((batch, flush, retired, current)) = taken {
            // Under every policy: LMDB is about to point into it, and its
            // pointers must never reach the disk before what they point to.
            let (segment, last) = match &retired {
                Some(retired) => {
                    self.fsync("journal fsync failed", || {
                        self.journal.sync_retired(retired)
                    });
                    retired.release_unused();
                    (retired.number, retired.last)
                }
                None => {
                    self.fsync("journal fsync failed", || self.journal.sync());
                    current
                }
            };
            let round = round.get_or_insert_with(ApplyRound::default);
            round.batches.push(batch);
            round.flush = round.flush.max(flush);
            round.segment = segment;
            round.last = last;
            round.segment_goes_on = retired.is_none();
        }
        // After `through`: a caller flags a reclaim before it numbers the
        // write it waits for, so a round that covers that number sees it.
        let reclaim = self.signals.reclaim.swap(false, Ordering::AcqRel);
        let crawl = self.signals.crawl.lock().take();
        if round.is_none() && !reclaim && crawl.is_none() {
            // (0 advances nothing.)
            self.applied.advance(through.unwrap_or(0), false);
            return None;
        }
        if round.is_some() && self.health.is_poisoned() {
            // A journal fsync or write failed: LMDB must not point into
            // journal bytes that may never reach the disk. The writes stay
            // pending (readable; their values are in the page cache) and no
            // new ones are accepted.
            *retry = round;
            return None;
        }
        // A retried round first commits its flush and its removals alone:
        // they may free the room the writes need (deletes journalled since,
        // too), but LMDB reuses a freed page only two transactions later.
        let result = (round.as_ref().filter(|_| retried))
            .map_or(Ok(()), |round| self.commit_removes(round))
            .and_then(|()| self.commit(round.as_ref(), reclaim, crawl.as_deref()));
        let segment = round.as_ref().map_or(0, |round| round.segment);
        if let Err(error) = result {
            self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
            // LMDB reports a short write (a full file system) as EIO.
            let short = is_out_of_space(&error)
                || self.space_left().is_some_and(|left| self.is_short(left));
            if short {
                if !retried {
                    tracing::error!(%error, "disk full: refusing writes until space is freed");
                }
                self.health.set_out_of_space(true);
                // A flush appended since this round took the log's groups.
                self.apply_flush_if_short(self.logged.lock().flush.is_some());
            } else {
                self.poison("disk commit failed", &error);
            }
            // The writes are acknowledged and in the journal: they stay
            // pending (readable) and the next round tries again, with
            // whatever was journalled since (deletes may free space).
            *retry = round;
            // Tried again after a pause, not at once.
            return None;
        }
        if let Some(round) = round {
            self.counters.applies.fetch_add(1, Ordering::Relaxed);
            // Live records read while pending (or carrying the fetched bit:
            // a touch, an incr, a master's) go to the read cache, with the
            // fetched bit they have now: they were wanted. A read after
            // `apply` wrote the record is in the cache and the access table,
            // not in LMDB. Only live ones: the cache holds no dead record.
            self.pending.retire_applied(round.batches, |hash, header| {
                self.alive(header) && self.fetched(hash, header)
            });
        }
        self.applied.advance(through.unwrap_or(0), false);
        Some(segment)
    }

    /// Has the applier end the segment being appended to, if anything was
    /// appended since the last one ended, and waits until it has (or the
    /// engine cannot apply). A round only to catch LMDB up leaves it going.
    pub(super) fn end_segment(&self) -> Result<(), WriteFailed> {
        let segment = self.journal.current_end().0;
        while self.logged.lock().dirty && self.journal.current_end().0 == segment {
            self.signals.wake_applier();
            if !self.health.applies() || self.signals.stopping() {
                return Err(WriteFailed);
            }
            thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    pub(super) fn commit(
        &self,
        round: Option<&ApplyRound>,
        reclaim: bool,
        crawl: Option<&[bool]>,
    ) -> heed::Result<()> {
        // The live data is larger than the memory budget, so a write's leaf
        // page is likely on the device: its pages are read with several
        // threads at once before the transaction, rather than one by one
        // inside it. LMDB's pages in use, not its file (after a flush it
        // keeps its size) nor the items' bytes (values in the log are not
        // in it).
        let budget = self.config.memory_budget as u64;
        let outgrown = self
            .lmdb_usage
            .lock()
            .is_some_and(|(used, _)| used > budget);
        if let Some(round) = round.filter(|_| outgrown) {
            self.prefetch(&round.batches);
            self.counters
                .prefetched_rounds
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut txn = self.env.write_txn()?;
        let mut counts = self.applied_counts.lock().clone();
        // The writes a flush covers are skipped once the flush is in LMDB
        // (this round's, or an earlier one's): not by `Flushes::through`,
        // which a flush raises before it reaches the log. A crash before it
        // does must not have dropped the writes it would have covered.
        let flushed_through =
            self.clear_flushed(&mut txn, &mut counts, round.and_then(|round| round.flush))?;
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
        for batch in batches {
            let mut writes: Vec<_> = batch
                .writes()
                .map(|write @ (_, key, _)| (key_prefix(key), write))
                .collect();
            // Most keys differ in their first eight bytes: one integer
            // comparison instead of a memcmp call.
            writes.sort_unstable_by(|(a, (_, a_key, _)), (b, (_, b_key, _))| {
                a.cmp(b).then_with(|| a_key.cmp(b_key))
            });
            for (_, write) in writes {
                // About what applying it copies into LMDB.
                let weight = match write {
                    (_, key, Pending::Put(stored)) => key.len() + stored.len(),
                    (_, key, Pending::Remove) => key.len(),
                };
                let index_entries = self.apply(&mut txn, write, flushed_through, &mut counts)?;
                // Each index entry a row's write changes may dirty a page.
                dirty += 4096 * (1 + index_entries) + weight;
                if dirty >= dirty_limit {
                    // Part of the round: a replay of the journal repeats
                    // it harmlessly (every record is a key's whole state).
                    self.mark_partial(&mut txn, round)?;
                    self.commit_counted(txn, &mut counts, None)?;
                    txn = self.env.write_txn()?;
                    dirty = 0;
                }
            }
        }
        // Keys whose expired items this commit removes.
        let mut swept = Vec::new();
        if reclaim {
            self.remove_due(&mut txn, &mut counts, None, &mut swept)?;
        }
        let reclaimed = swept.len() as u64;
        if let Some(classes) = crawl {
            self.remove_due(&mut txn, &mut counts, Some(classes), &mut swept)?;
        }
        // A segment that goes on is applied in part until a round ends it.
        let ends_segment = round.filter(|round| !round.segment_goes_on);
        match round {
            Some(round) if round.segment_goes_on => self.mark_partial(&mut txn, Some(round))?,
            Some(_) => self.meta.delete(&mut txn, PARTIAL_ROUND).map(drop)?,
            None => {}
        }
        let newest = ends_segment.map(|round| (round.segment, round.last));
        self.commit_counted(txn, &mut counts, newest)?;
        // Not before the commit: a read meanwhile would cache them again.
        // (A dual master's last-writer-wins must not meet a swept tombstone.)
        for key in &swept {
            self.pending.forget_cached(key);
        }
        if let Some((segment, _)) = newest {
            self.applied_segment.fetch_max(segment, Ordering::AcqRel);
        }
        self.measure_lmdb_usage();
        let applied: usize = batches.iter().map(Batch::len).sum();
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
            .flat_map(|batch| batch.writes())
            .filter_map(|(space, key, _)| (space == Space::Item).then_some(key))
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

    /// Commits only the round's flush, and the keys whose newest write in
    /// `round` is a removal.
    fn commit_removes(&self, round: &ApplyRound) -> heed::Result<()> {
        // In key order; the newest write of a key wins.
        let newest: std::collections::BTreeMap<_, _> = round
            .batches
            .iter()
            .flat_map(|batch| batch.writes())
            .map(|(space, key, change)| ((key, space), change))
            .collect();
        let mut txn = self.env.write_txn()?;
        let mut counts = self.applied_counts.lock().clone();
        let flushed_through = self.clear_flushed(&mut txn, &mut counts, round.flush)?;
        for ((key, space), change) in newest {
            if change == Pending::Remove {
                self.apply(&mut txn, (space, key, change), flushed_through, &mut counts)?;
            }
        }
        self.mark_partial(&mut txn, Some(round))?;
        self.commit_counted(txn, &mut counts, None)?;
        // LMDB reuses the pages transaction N frees from transaction N + 2
        // on (`mdb_find_oldest`): one more commit that writes, so that the
        // round's writes, next, may take them.
        let mut txn = self.env.write_txn()?;
        self.mark_partial(&mut txn, Some(round))?;
        self.config.io.commit(txn)?;
        self.measure_lmdb_usage();
        Ok(())
    }

    /// Records, with `txn`'s writes, the last CAS handed out, the class
    /// counts, the journal bytes each segment holds for LMDB and
    /// (`applied`) the newest journal segment and entry LMDB now holds;
    /// commits `txn` and makes `counts` the applied ones, holding them
    /// across the commit: a snapshot load, on another thread, that starts
    /// its transaction once this one ends copies them only once they are
    /// stored, so neither overwrites the other's.
    pub(super) fn commit_counted(
        &self,
        mut txn: RwTxn<'_>,
        counts: &mut Counts,
        applied: Option<(u64, LogPosition)>,
    ) -> heed::Result<()> {
        let cas = self.last_cas.load(Ordering::Acquire);
        self.meta.put(&mut txn, b"cas", &cas.to_le_bytes())?;
        self.meta
            .put(&mut txn, b"classes", &counts.classes.encode())?;
        for (segment, live) in counts.log.take_touched() {
            let key = record::log_live_key(segment);
            match live {
                Some(live) => self.meta.put(&mut txn, &key, &live.to_le_bytes())?,
                None => self.meta.delete(&mut txn, &key).map(drop)?,
            }
        }
        if let Some((segment, last)) = applied {
            self.meta
                .put(&mut txn, JOURNAL_APPLIED, &segment.to_le_bytes())?;
            self.meta.put(&mut txn, APPLIED_LSN, &last.encode())?;
        }
        let mut applied_counts = self.applied_counts.lock();
        self.config.io.commit(txn)?;
        let reclaims = std::mem::take(&mut counts.reclaims);
        self.counters.reclaims.lock().add(reclaims);
        *applied_counts = counts.clone();
        Ok(())
    }

    /// Notes in `meta` that LMDB holds part of `round` (the commit that
    /// finishes it removes the note).
    fn mark_partial(&self, txn: &mut RwTxn<'_>, round: Option<&ApplyRound>) -> heed::Result<()> {
        round.map_or(Ok(()), |round| {
            self.meta.put(txn, PARTIAL_ROUND, &round.last.encode())
        })
    }

    /// Applies one pending write, keeping the expiry index and the counts
    /// right. Returns the index entries a row's write changed (0 for an
    /// item's).
    pub(super) fn apply(
        &self,
        txn: &mut RwTxn<'_>,
        (space, key, change): (Space, &[u8], Pending<'_>),
        flushed_through: u64,
        counts: &mut Counts,
    ) -> heed::Result<usize> {
        match (space, change) {
            (Space::Item, Pending::Put(stored)) => {
                // A write older than a flush that covers it is already gone.
                let Some(new) = Old::of(stored).filter(|new| new.header.cas > flushed_through)
                else {
                    return Ok(0);
                };
                // Read while pending: stored with its fetched bit, which
                // then outlives the access table (`accesses.rs`).
                let fetched = self.fetched(self.pending.item_hash(key), &new.header);
                let write = |reserved: &mut heed::ReservedSpace<'_>| {
                    reserved.write_all(stored)?;
                    if fetched {
                        record::set_bits(reserved.written_mut(), FETCHED);
                    }
                    Ok(())
                };
                // Insert, or learn what was there, in one descent.
                let len = stored.len();
                if let Some(old) = self.items.get_or_put_reserved(txn, key, len, write)? {
                    self.forget_old(txn, key, Old::of(old), counts, new.header.expiry_unix)?;
                    self.items.put_reserved(txn, key, len, write)?;
                }
                // Counted and indexed: its expiry, size and where its value is.
                if new.header.expiry_unix != 0 {
                    self.expiry
                        .put(txn, &record::expiry_key(new.header.expiry_unix, key), &[])?;
                }
                let size = record::item_size(key, new.value_len) as u64;
                counts.classes.add(self.class_of(key, new.value_len), size);
                if let Some(pointer) = &new.pointer {
                    counts.log.add(pointer);
                }
            }
            (Space::Item, Pending::Remove) => {
                if let Some(old) = self.stored_old(txn, key)? {
                    self.forget_old(txn, key, Some(old), counts, 0)?;
                    self.items.delete(txn, key)?;
                }
            }
            (Space::Row, change) => return self.apply_row(txn, key, change),
        }
        Ok(0)
    }

    /// The compactor copied `key`'s value from `from` to `to` (a record of
    /// `frame_len` bytes): LMDB points there if it still points at `from`.
    pub(super) fn apply_move(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
        (from, to, frame_len): (Location, Location, usize),
        counts: &mut Counts,
    ) -> heed::Result<()> {
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
        self.items.put(txn, key, &record)
    }

    /// Takes the record being replaced or removed out of the counts and the
    /// expiry index (unless the new one expires at the same time).
    pub(super) fn forget_old(
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

    /// What the record committed under `key` counts for.
    pub(super) fn stored_old(&self, txn: &RwTxn<'_>, key: &[u8]) -> heed::Result<Option<Old>> {
        Ok(self.items.get(txn, key)?.and_then(Old::of))
    }

    /// Takes a record out of the counts.
    pub(super) fn uncount(&self, counts: &mut Counts, key: &[u8], old: &Old) {
        let size = record::item_size(key, old.value_len) as u64;
        counts
            .classes
            .remove(self.class_of(key, old.value_len), size);
        if let Some(pointer) = &old.pointer {
            counts.log.remove(pointer);
        }
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
