//! Appending to the update log: each round the writer (or a worker leading
//! the append) takes every pending write and appends them to the journal in
//! one write; then their replies may go out. Writes that arrive meanwhile
//! form the next group, so groups grow with load. A caller that must append
//! its writes as one group (`one_append`) holds the journal meanwhile.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::thread;

use super::log_format::{self, GroupHead, Location, Record};
use super::pending::{Batch, Pending};
use super::record::{Header, Space};
use super::threads::IDLE_TICK;
use super::{Inner, SyncPolicy};
use crate::clock::unix_micros;
use crate::log_position::LogPosition;

/// What the writer has journalled and the applier has not taken. The writer
/// holds this lock from its append until the group is in `logged`, and the
/// applier holds it to start a new segment and take `logged`: so the writes
/// it takes are exactly those in the segments before the new one (or, when
/// the segment goes on, those up to its newest entry).
#[derive(Default)]
pub(super) struct Logged {
    /// Every write numbered up to this is journalled (or failed).
    pub(super) through: u64,
    /// The newest flush journalled and not yet applied.
    pub(super) flush: Option<u64>,
    /// Segments appended to since the applier's last rotation.
    pub(super) dirty: bool,
    /// Groups appended since the applier last took what was logged (a
    /// round may take it without a rotation).
    pub(super) unapplied: bool,
}

thread_local! {
    /// Whether this thread holds the journal's leader lock (nothing it waits
    /// for may need an append): to write ([`Inner::one_append`]) or to load a
    /// snapshot (`replica::BaseLoader`).
    pub(super) static HOLDS_THE_JOURNAL: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as holding the journal's leader lock while it lives.
pub(super) struct JournalHeld;

impl JournalHeld {
    pub(super) fn mark() -> JournalHeld {
        HOLDS_THE_JOURNAL.set(true);
        JournalHeld
    }
}

impl Drop for JournalHeld {
    fn drop(&mut self) {
        HOLDS_THE_JOURNAL.set(false);
    }
}

/// Encodes a journal group: its head, then the batch's writes with a flush
/// after those it covers; returns where each write starts, in the batch's order.
fn encode_group(
    group: &mut Vec<u8>,
    head: GroupHead,
    flush: Option<u64>,
    batch: &Batch,
) -> Vec<u64> {
    group.clear();
    log_format::encode(group, Record::Group(head));
    let is_covered = |space: Space, change: &Pending<'_>| match (flush, space, change) {
        (Some(boundary), Space::Item, Pending::Put(record)) => {
            Header::decode(record).is_some_and(|(header, _)| header.cas <= boundary)
        }
        _ => false,
    };
    let mut offsets = vec![0; batch.len()];
    // Encodes the writes the flush covers, or (`covered` false) the rest.
    let mut encode_writes = |group: &mut Vec<u8>, covered: bool| {
        for (k, (space, key, change)) in batch.writes().enumerate() {
            if is_covered(space, &change) != covered {
                continue;
            }
            let record = match (space, change) {
                (Space::Item, Pending::Put(record)) => Record::Put { key, record },
                (Space::Item, Pending::Remove) => Record::Remove { key },
                (Space::Row, Pending::Put(record)) => Record::RowPut { key, record },
                (Space::Row, Pending::Remove) => Record::RowRemove { key },
            };
            offsets[k] = group.len() as u64;
            log_format::encode(group, record);
        }
    };
    // In log order: the writes the flush covers (made before it), the
    // flush, then the rest; `offsets` stays in the batch's order.
    if let Some(boundary) = flush {
        encode_writes(group, true);
        log_format::encode(group, Record::Flush(boundary));
    }
    encode_writes(group, false);
    offsets
}

impl Inner {
    /// Runs `writes` (ordinary writes through the engine's calls) and
    /// appends everything they left pending as one group: they reach the
    /// log, and LMDB, together or not at all. A follower of a Tokyo
    /// Tyrant master writes its changes and its position so. `writes` must
    /// not wait for LMDB (a scan, `setindex`): the journal waits for it.
    pub(super) fn one_append(&self, writes: &mut dyn FnMut()) -> bool {
        self.wait_for_pending_room();
        let mut leader = self.journal_leader.lock();
        let held = JournalHeld::mark();
        writes();
        drop(held);
        self.journal_round(&mut leader, None).is_some()
    }

    pub(super) fn write_loop(&self) {
        loop {
            let stopping = self.signals.stopping();
            let appended = self.journal_round(&mut self.journal_leader.lock(), None);
            let worked = appended.is_some_and(|entries| entries > 0);
            if stopping && !worked {
                return;
            }
            if !worked {
                self.signals.writer_idle.store(true, Ordering::SeqCst);
                // A failed append (a full disk, a poisoned engine) leaves its
                // flush requested again: a tick's pause, not a spin on it.
                let has_work = self.pending.is_dirty()
                    || self.flushes.is_requested()
                    || self.signals.stopping();
                if appended.is_none() || !has_work {
                    thread::park_timeout(IDLE_TICK);
                }
                self.signals.writer_idle.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Journals every pending write (and a flush) in one append, then lets
    /// their replies go. The caller holds the journal's leader lock, whose
    /// buffer is `group`. `replicated` numbers the group with a master's
    /// LSNs, time and origin (`replica.rs`). Returns the entries appended
    /// (`None`: the append failed).
    pub(super) fn journal_round(
        &self,
        group: &mut Vec<u8>,
        replicated: Option<GroupHead>,
    ) -> Option<usize> {
        let (flush, batch) = self.flushes.take_request(|| self.pending.drain());
        let through = batch.through;
        let writes = batch.len();
        if writes == 0 && flush.is_none() {
            self.logged.lock().through = through;
            self.acks.advance(through, false);
            return Some(0);
        }
        self.check_space_if_due();
        // Entries are numbered here: this thread holds the leader lock.
        let entries = writes + usize::from(flush.is_some());
        let head = GroupHead {
            // Counted here, a master's group too: this log holds these.
            entries: u32::try_from(entries).expect("a group's entries fit pending's memory"),
            ..replicated.unwrap_or_else(|| GroupHead {
                first_lsn: self.journal.last_lsn() + 1,
                micros: unix_micros(),
                origin: self.server_id,
                entries: 0,
            })
        };
        let last = head.last();
        // Encoded before the applier is held up by the lock.
        // Where each write lands, so LMDB can point to large values there.
        let offsets = encode_group(group, head, flush, &batch);
        let mut logged = self.logged.lock();
        let start = self.append(group, last);
        logged.through = through;
        if let Some(start) = start {
            logged.dirty = true;
            logged.unapplied = true;
            logged.flush = logged.flush.max(flush);
            let (counters, n) = (&self.counters, writes as u64);
            counters.appends.fetch_add(1, Ordering::Relaxed);
            counters.appended_writes.fetch_add(n, Ordering::Relaxed);
            counters.largest_append.fetch_max(n, Ordering::Relaxed);
            self.acks.advance(through, false);
            self.pending
                .merge_logged(batch, start, &offsets, |len| self.config.keeps_in_log(len));
        } else {
            self.counters.failed_appends.fetch_add(1, Ordering::Relaxed);
            // Once space is back, the flush reaches the log with the next
            // append rather than be lost.
            if let Some(boundary) = flush {
                self.flushes.request(|| boundary, || ());
            }
            // Never acknowledged: those connections are closed instead, and
            // reads go back to what was there before. Writes made while the
            // drain walked the shards may be in the batch: they fail too, or
            // a later empty round would acknowledge them (one not in it
            // fails with them; a later round may still journal it, as a
            // reply lost with its connection). Decided before `logged` is
            // let go, as a success is: the applier must not count them
            // applied before they fail.
            let newest = batch.newest;
            self.pending.drop_failed(batch);
            self.acks.advance(newest, true);
        }
        self.apply_flush_if_short(logged.flush.is_some());
        drop(logged);
        if start.is_some() && self.apply_due() {
            self.signals.wake_applier();
        }
        start.map(|_| entries)
    }

    /// Appends a group to the journal; under `always`, fsyncs it too.
    /// Returns where the group starts, or `None` when the engine is
    /// poisoned, or the write (the engine is then out of space or
    /// poisoned) or the fsync failed.
    fn append(&self, group: &[u8], last: LogPosition) -> Option<Location> {
        if self.health.is_poisoned() {
            return None;
        }
        let start = (self.journal.append(group, Some(last)))
            .map_err(|error| self.log_write_failed("journal write failed", error))
            .ok()?;
        // Whatever the errno: after a failed fsync the kernel may have
        // dropped the group's pages, and a group appended after them would
        // replay past a hole.
        let synced = self.config.sync != SyncPolicy::Always
            || self.fsync("journal fsync failed", || self.journal.sync());
        synced.then_some(start)
    }
}
