//! Compaction of the value log: the live values of a segment past retention
//! that is mostly garbage are appended again, and LMDB points to their new
//! place, so the segment can go.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::journal;
use super::log_format::{self, Location, Record};
use super::record::{LogPointer, Old};
use super::retention::SegmentAge;
use super::space::is_out_of_space;
use super::{Inner, LogRetention};

/// Moved values a compaction appends, fsyncs and commits at a time.
const COMPACT_CHUNK: usize = 8 << 20;

/// The pause after a failed compaction (no room for the moved values, say):
/// reading a segment again at once would likely fail again.
pub(super) const COMPACT_RETRY: Duration = Duration::from_secs(10);

/// What a call to compact came to.
pub(super) enum Compaction {
    /// A segment was compacted (LMDB points to the copies; fsync it).
    Done,
    NotDue,
    /// Try again no sooner than [`COMPACT_RETRY`] from now.
    Failed,
}

impl Inner {
    /// Compacts the journal segment that is most garbage, if garbage
    /// outweighs what LMDB points to (and is more than a few rounds'
    /// worth): its live values are copied to the current segment and LMDB
    /// points there, so it can be deleted. A segment whose compaction
    /// failed other than for space (a damaged record) joins `unreadable`
    /// and is not chosen again: the others are compacted meanwhile.
    pub(super) fn compact_some(&self, unreadable: &mut BTreeSet<u64>) -> Compaction {
        // Also when short of space: a mostly-garbage segment frees more
        // than its live values take again.
        if self.health.is_poisoned() {
            return Compaction::NotDue;
        }
        // History the retention keeps is kept whole: only segments past it
        // are worth compacting (their garbage is deleted with them).
        let past = self.past_retention(self.applied_segment.load(Ordering::Acquire));
        unreadable.retain(|number| past.iter().any(|segment| segment.number == *number));
        let counts = self.applied_counts.lock();
        let segments: Vec<(u64, u64, u64)> = past
            .iter()
            .map(|segment| (segment.number, segment.len, counts.log.of(segment.number)))
            .collect();
        drop(counts);
        let len: u64 = segments.iter().map(|s| s.1).sum();
        let live: u64 = segments.iter().map(|s| s.2).sum();
        let garbage = len.saturating_sub(live);
        // At least a quarter of the pending memory.
        if garbage < live.max(self.config.pending_limit as u64 / 4) {
            return Compaction::NotDue;
        }
        // The emptiest segment that is at most half live (there is one:
        // at least half of all is garbage). Dead ones are just deleted.
        let Some((victim, _, _)) = segments
            .into_iter()
            .filter(|&(number, len, live)| {
                live > 0 && live * 2 <= len && !unreadable.contains(&number)
            })
            .min_by_key(|&(_, len, live)| live as u128 * 1_000_000 / len.max(1) as u128)
        else {
            return Compaction::NotDue;
        };
        match self.compact(victim) {
            Ok(moved) => {
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .compacted_bytes
                    .fetch_add(moved, Ordering::Relaxed);
                Compaction::Done
            }
            Err(error) if is_out_of_space(&error) => {
                tracing::debug!(%error, segment = victim, "no room to compact the journal yet");
                Compaction::Failed
            }
            Err(error) => {
                tracing::warn!(%error, segment = victim, "journal compaction failed; the other segments are compacted meanwhile");
                unreadable.insert(victim);
                Compaction::Failed
            }
        }
    }

    /// Copies the records of `victim` that LMDB points to into the journal
    /// as moves and points LMDB at the copies, [`COMPACT_CHUNK`] at a time.
    /// Returns the bytes moved; an error if the victim is still live after
    /// (its count and its records disagree: a corrupt record, say).
    fn compact(&self, victim: u64) -> heed::Result<u64> {
        // Keys and places only: the values are read again a chunk at a
        // time, so the memory a compaction takes stays bounded.
        let mut live: Vec<(Vec<u8>, LogPointer)> = Vec::new();
        let txn = self.env.read_txn()?;
        let path = journal::segment_path(&self.config.dir, victim);
        journal::replay(&*self.config.io, &path, victim, |found, from, _| {
            if let Record::Put { key, .. } | Record::Move { key, .. } = found {
                let stored = self.items.get(&txn, key)?;
                let pointer = stored.and_then(Old::of).and_then(|old| old.pointer);
                if let Some(pointer) = pointer.filter(|pointer| pointer.at == from) {
                    live.push((key.to_vec(), pointer));
                }
            }
            Ok::<_, heed::Error>(())
        })?;
        drop(txn);
        let mut group = Vec::new();
        let mut moves = Vec::new();
        let mut moved = 0;
        for (n, (key, pointer)) in live.iter().enumerate() {
            let stored = self.journal.read_stored(key, pointer)?;
            moves.push((&key[..], pointer.at, group.len()));
            let record = Record::Move {
                key,
                from: pointer.at,
                record: stored.record(),
            };
            log_format::encode(&mut group, record);
            if group.len() >= COMPACT_CHUNK || n + 1 == live.len() {
                moved += self.commit_moves(&group, &moves)?;
                group.clear();
                moves.clear();
            }
        }
        let left = self.applied_counts.lock().log.of(victim);
        if left != 0 {
            let records = live.len();
            let error = format!("{left} live bytes left after moving {records} records");
            return Err(io::Error::other(error).into());
        }
        Ok(moved)
    }

    /// Appends a group of move records, fsyncs it (the copies are on disk
    /// before LMDB points to them, whatever the policy), then points LMDB
    /// at each copy whose key still points where it moved from. `moves`:
    /// each record's key, origin and offset in `group`.
    fn commit_moves(&self, group: &[u8], moves: &[(&[u8], Location, usize)]) -> heed::Result<u64> {
        let start = self.journal.append(group, None)?;
        // As every fsync of the log: a failed one may have dropped the pages
        // of acknowledged writes in the same segment, so it poisons.
        if !self.fsync("journal fsync failed", || self.journal.sync()) {
            return Err(io::Error::other("journal fsync failed").into());
        }
        let mut txn = self.env.write_txn()?;
        let mut counts = self.applied_counts.lock().clone();
        let ends = moves.iter().skip(1).map(|m| m.2).chain([group.len()]);
        for (&(key, from, at), end) in moves.iter().zip(ends) {
            let to = Location::new(start.segment, start.offset + at as u64);
            self.apply_move(&mut txn, key, (from, to, end - at), &mut counts)?;
        }
        self.commit_counted(txn, &mut counts, None)?;
        Ok(group.len() as u64)
    }

    /// Deletes the segments up to `applied` past retention that LMDB, as it
    /// is on disk, does not point into (the next commit forgets their
    /// counts).
    pub(super) fn remove_dead_segments(&self, applied: u64) {
        let past = self.past_retention(applied);
        let mut counts = self.applied_counts.lock();
        for segment in past.iter().map(|segment| segment.number) {
            if counts.log.of(segment) != 0 {
                continue;
            }
            match self.journal.remove(segment) {
                Ok(true) => counts.log.drop_segment(segment),
                // A backup began since the segments were chosen.
                Ok(false) => return,
                Err(error) => {
                    tracing::warn!(%error, segment, "cannot remove a journal segment");
                    return;
                }
            }
        }
    }

    /// The applied segments (up to `applied`) that the log's retention lets
    /// go, oldest first: none while a backup holds the history. While the
    /// disk is full, history gives way to writes: every applied segment.
    fn past_retention(&self, applied: u64) -> Vec<SegmentAge> {
        if self.journal.history_held() {
            return Vec::new();
        }
        let retention = if self.health.is_out_of_space() {
            LogRetention::NOTHING
        } else {
            self.config.log_retention
        };
        let mut segments = self.journal.older_segments();
        segments.retain(|segment| segment.number <= applied);
        let past = retention.past(&segments, SystemTime::now());
        // What attached replicas have not acknowledged stays too, up to
        // `--log-retention-max`.
        self.replica_holds
            .keep(&mut segments, self.config.log_retention_max);
        // Both are the oldest of `segments`.
        segments.truncate(past);
        segments
    }
}
