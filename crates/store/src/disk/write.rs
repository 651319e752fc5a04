//! The disk engine's writes: memcached's decisions (`semantics.rs`) made
//! against the current item under its shard lock, left in `pending` for
//! the appender; flushes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::semantics::{self, ArithPlan, DeletePlan, Expiry, StorePlan, Write};
use crate::{
    AckFence, ArithCommand, ArithOutcome, ClassCommand, DeleteCommand, DeleteOutcome, StoreCommand,
    StoreMode, StoreOutcome,
};

use super::pending::Change;
use super::read::ValueLost;
use super::record::{Header, Keyed, FETCHED, STALE, WIN_SENT};
use super::{current, Inner, WriteFailed};

impl Inner {
    /// Flushes everything written so far: reads skip it at once, the applier
    /// clears it from LMDB in its next commit.
    pub(super) fn flush(&self, fence: &AckFence) {
        let boundary = || match self.stamps {
            // A dual master's flush covers every write stamped before it,
            // on any server: a stamp of now.
            Some(_) => self.next_cas(),
            None => self.last_cas.load(Ordering::Acquire),
        };
        fence.raise(self.request_flush(boundary));
    }

    /// Flushes through the boundary `boundary` gives (asked for under the
    /// flush's lock); returns the sequence whose acknowledgement covers it.
    pub(super) fn request_flush(&self, boundary: impl FnOnce() -> u64) -> u64 {
        let seq = self.flushes.request(boundary, || self.pending.next_seq());
        // Every cached record is dead now: give their memory back.
        self.pending.clear_cache();
        seq
    }

    /// Starts a delayed flush whose time has come. Called before a shard
    /// is locked: a caller may wait here while another runs the flush.
    pub(super) fn start_due_flush(&self, fence: &AckFence) {
        self.flushes.delayed.run_if_due(self.clock.now(), || {
            // A replica's flushes are its master's: one scheduled just as it
            // became one is dropped when due.
            if self.health.is_read_only() {
                return;
            }
            if self.health.is_poisoned() {
                // Taken before the disk failed: reads honour it, as
                // promised, but it cannot be logged, and no reply waits
                // for that.
                self.flush(&AckFence::default());
            } else {
                self.flush(fence);
            }
        });
    }

    /// A write: decides against the current item under the key's shard lock
    /// (so read-modify-writes are atomic) and leaves the change pending.
    /// `decide` gets the live item and whether an expired one was there,
    /// and returns the change to make (`None`: the key stays as it is).
    pub(super) fn modify<R>(
        &self,
        key: &[u8],
        fence: &AckFence,
        lost: ValueLost,
        decide: impl FnOnce(Option<(Header, &[u8])>, bool) -> (Option<Change>, R),
    ) -> Result<R, WriteFailed> {
        self.start_due_flush(fence);
        let mut shard = self.pending.lock(key);
        let (change, result) = self.with_record(&mut shard, key, fence, lost, |found| {
            let dead = found.is_some_and(|(header, _)| !self.alive(&header));
            // An expired item written over counts here; a flushed one when
            // the round that applies the flush clears it (`flushed.rs`).
            let expired = dead && found.is_some_and(|(header, _)| !self.flushes.covers(header.cas));
            if expired && found.is_some_and(|(header, _)| !header.has(FETCHED)) {
                self.counters.reclaims.lock().unfetched += 1;
            }
            decide(found.filter(|_| !dead), expired)
        })?;
        if let Some(change) = change {
            self.accesses.stored(shard.hash(), self.clock.now());
            fence.raise(shard.put(change));
        }
        drop(shard);
        self.wait_for_pending_room();
        Ok(result)
    }

    /// Backpressure: more pending than allowed means the applier is behind;
    /// wait for it rather than grow without bound.
    pub(super) fn wait_for_pending_room(&self) {
        // This thread holds the journal (`one_append`): the room it would
        // wait for needs an append, which waits for this thread.
        if super::appender::HOLDS_THE_JOURNAL.get() {
            return;
        }
        while self.pending.bytes() > self.config.pending_limit && self.health.applies() {
            self.signals.wake_writer();
            self.signals.wake_applier();
            let seq = self.pending.last_seq();
            self.applied.wait(seq, Duration::from_millis(5));
        }
    }

    pub(super) fn store(&self, command: &StoreCommand<'_>, fence: &AckFence) -> StoreOutcome {
        if !self.health.takes_write() {
            return StoreOutcome::Failed;
        }
        // memcached counts a storage command by the class of the item it
        // carries (for append, the appended part), if it fits `-I`.
        if command.value.len() <= self.config.max_value_bytes {
            self.count_command(command.key, command.value.len(), ClassCommand::Set);
        }
        if command.mode == StoreMode::Set && command.compare_cas.is_none() {
            return self.set_blind(command, fence);
        }
        // Only append and prepend need the value written to.
        let lost = match command.mode {
            StoreMode::Append | StoreMode::Prepend => ValueLost::Fails,
            _ => ValueLost::HeaderWillDo,
        };
        self.modify(command.key, fence, lost, |existing, expired| {
            let current = existing.map(|(old, value)| current(&old, value));
            let old_len = existing.map(|(_, value)| value.len());
            let write = match semantics::plan_store(command, current, self.config.max_value_bytes) {
                StorePlan::Refuse(outcome) => {
                    if let (StoreOutcome::Exists, Some(len), true) =
                        (outcome, old_len, command.is_compare_and_set())
                    {
                        self.count_command(command.key, len, ClassCommand::CasBadval);
                    }
                    return (None, outcome);
                }
                StorePlan::Write(write) => write,
            };
            if let (true, Some(len)) = (command.is_compare_and_set(), old_len) {
                self.count_command(command.key, len, ClassCommand::CasHit);
            }
            // An item stored already expired (a negative or past exptime)
            // is kept as memcached keeps it: reads find it expired
            // (get_expired) and the sweep removes it.
            let header = self.header_for(&write, existing.map(|(old, _)| old));
            self.counters.total_items.fetch_add(1, Ordering::Relaxed);
            if expired {
                let class = self.class_of(command.key, write.value_len());
                let mut reclaims = self.counters.reclaims.lock();
                *reclaims.reclaimed.entry(class).or_default() += 1;
            }
            let change = Change::Put(Keyed::encode(command.key, &header, &write.parts));
            (Some(change), StoreOutcome::Stored { cas: header.cas })
        })
        .unwrap_or(StoreOutcome::Failed)
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
    pub(super) fn header_for(&self, write: &Write<'_>, old: Option<Header>) -> Header {
        let expiry_unix = self.expiry_of(write.expiry, old.map_or(0, |old| old.expiry_unix));
        self.new_header(write.flags, expiry_unix, write.bits())
    }

    /// The header of a new item, with a new CAS.
    fn new_header(&self, flags: u32, expiry_unix: u32, bits: u8) -> Header {
        Header {
            flags,
            expiry_unix,
            cas: self.next_cas(),
            bits,
        }
    }

    /// A plain `set` replaces whatever is there, so it skips reading the
    /// current item (the applier fixes the expiry index and counts).
    fn set_blind(&self, command: &StoreCommand<'_>, fence: &AckFence) -> StoreOutcome {
        self.start_due_flush(fence);
        let mut shard = self.pending.lock(command.key);
        let header = self.new_header(command.flags, self.to_unix(command.expiry), 0);
        let keyed = Keyed::encode(command.key, &header, &[command.value]);
        self.accesses.stored(shard.hash(), self.clock.now());
        fence.raise(shard.put(Change::Put(keyed)));
        drop(shard);
        self.counters.total_items.fetch_add(1, Ordering::Relaxed);
        self.wait_for_pending_room();
        StoreOutcome::Stored { cas: header.cas }
    }

    pub(super) fn delete(
        &self,
        key: &[u8],
        command: &DeleteCommand,
        fence: &AckFence,
    ) -> DeleteOutcome {
        if !self.health.takes_delete() {
            return DeleteOutcome::Failed;
        }
        // Only an invalidation keeps the value.
        let lost = match command.invalidate {
            Some(_) => ValueLost::Fails,
            None => ValueLost::HeaderWillDo,
        };
        self.modify(key, fence, lost, |existing, _| {
            let current = existing.map(|(old, value)| current(&old, value));
            let change = match semantics::plan_delete(command, current) {
                DeletePlan::Refuse(outcome) => return (None, outcome),
                // A dual master's delete leaves the key, expired now, with a
                // new stamp, so a peer's older write of it loses
                // (`MultiPrimary`).
                DeletePlan::Remove if self.stamps.is_some() => {
                    let header = self.new_header(0, self.now_unix().max(1), 0);
                    Change::Put(Keyed::encode(key, &header, &[]))
                }
                DeletePlan::Remove => Change::Remove(key.into()),
                DeletePlan::Invalidate(expiry) => {
                    let (old, value) = existing.expect("a plan for a missing item refuses");
                    let bits = (old.bits | STALE) & !WIN_SENT;
                    let expiry_unix = self.expiry_of(expiry, old.expiry_unix);
                    let header = self.new_header(old.flags, expiry_unix, bits);
                    Change::Put(Keyed::encode(key, &header, &[value]))
                }
            };
            // An invalidation is no delete hit (memcached counts the removal).
            if let (Some((_, value)), None) = (existing, command.invalidate) {
                self.count_command(key, value.len(), ClassCommand::DeleteHit);
            }
            (Some(change), DeleteOutcome::Deleted)
        })
        .unwrap_or(DeleteOutcome::Failed)
    }

    pub(super) fn arith(
        &self,
        key: &[u8],
        command: &ArithCommand,
        fence: &AckFence,
    ) -> ArithOutcome {
        if !self.health.takes_write() {
            return ArithOutcome::Failed;
        }
        self.modify(key, fence, ValueLost::Fails, |existing, _| {
            let current = existing.map(|(old, value)| current(&old, value));
            let (header, digits, value, created) = match semantics::plan_arith(command, current) {
                ArithPlan::Refuse(outcome) => return (None, outcome),
                ArithPlan::Create {
                    value,
                    digits,
                    expiry,
                } => {
                    let header = self.new_header(0, self.to_unix(expiry), 0);
                    self.counters.total_items.fetch_add(1, Ordering::Relaxed);
                    (header, digits, value, true)
                }
                ArithPlan::Update {
                    value,
                    digits,
                    expiry,
                } => {
                    let (old, old_value) = existing.expect("an update has an item");
                    let hit = match command.decrement {
                        true => ClassCommand::DecrHit,
                        false => ClassCommand::IncrHit,
                    };
                    self.count_command(key, old_value.len(), hit);
                    // In place (the same length) it keeps its bits; a longer
                    // number is a new item, unread, not stale, its recache
                    // token not taken (as memcached's).
                    let bits = match digits.len() == old_value.len() {
                        true => old.bits,
                        false => 0,
                    };
                    let expiry_unix = self.expiry_of(expiry, old.expiry_unix);
                    let header = self.new_header(old.flags, expiry_unix, bits);
                    (header, digits, value, false)
                }
            };
            let outcome = ArithOutcome::Value {
                value,
                cas: header.cas,
                ttl: self.ttl(header.expiry_unix),
                created,
            };
            let change = Change::Put(Keyed::encode(key, &header, &[&digits]));
            (Some(change), outcome)
        })
        .unwrap_or(ArithOutcome::Failed)
    }
}
