//! Dual master's receiving side: a peer's log taken here by last writer
//! wins. Every item a dual master writes carries a stamp as its CAS
//! (`stamp.rs`); a peer's write of a key is taken only if its stamp is
//! newer than the one this server holds for the key — live, expired or a
//! tombstone — and is then journalled as this server's own entry (so this
//! server's replicas get it), with the same stamp. Each server thus ends
//! with the newest stamp of every key whatever the order writes arrive in,
//! and an entry that comes back to the server that made it (or a second
//! time) finds its own stamp and is not written again: nothing echoes.
//!
//! What was taken of a peer's log and the peer's position after it are
//! appended as one group (`one_append`): a crash keeps both or neither.
//! The position lives in a hidden table, a row per peer address.

use std::sync::atomic::Ordering;

use kura_table::Record as Row;

use super::replica::{group_of, key_fits, records};
use crate::disk::log_format::Record;
use crate::disk::pending::Change;
use crate::disk::read::ValueLost;
use crate::disk::record::{self, Header, Keyed, Space};
use crate::disk::{Inner, WriteFailed};
use crate::log_position::LogPosition;
use crate::replication::{BaseLoad, PeerTaken, PeerTally, SnapshotPart};
use crate::stamp;
use crate::{AckFence, RowEdit, RowOutcome};

/// The hidden table of peers' positions: primary key the peer's address.
const POSITIONS: &[u8] = b"\0kura-peers";
const LSN: &[u8] = b"lsn";
const MICROS: &[u8] = b"micros";

/// What became of a peer's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Taken,
    /// This server holds a newer write of the key: a conflict, resolved.
    Older,
    /// This server holds this very write (it made it, or took it before).
    Held,
}

impl Inner {
    /// This server's position in `peer`'s log: the newest entry of it
    /// taken here.
    pub(super) fn peer_position(&self, peer: &str) -> Option<LogPosition> {
        let row = self
            .get_row(POSITIONS, peer.as_bytes(), &crate::AckFence::default())
            .ok()??;
        let number = |name: &[u8]| -> Option<u64> {
            let (_, value) = row.columns.iter().find(|(column, _)| column == name)?;
            std::str::from_utf8(value).ok()?.parse().ok()
        };
        Some(LogPosition {
            lsn: number(LSN)?,
            micros: number(MICROS)?,
        })
    }

    fn keep_peer_position(&self, peer: &str, at: LogPosition) -> bool {
        let mut row = Row::new(peer.as_bytes());
        row.put(LSN, at.lsn.to_string().as_bytes());
        row.put(MICROS, at.micros.to_string().as_bytes());
        let outcome = self.modify_row(
            POSITIONS,
            peer.as_bytes(),
            &mut |_| RowEdit::Put(row.clone()),
            &AckFence::default(),
        );
        matches!(outcome, Ok(RowOutcome::Done))
    }

    /// Takes one of `peer`'s groups by last writer wins, with the peer's
    /// position after it if anything was taken or `position_due`.
    pub(super) fn take_peer_group(
        &self,
        peer: &str,
        bytes: &[u8],
        position_due: bool,
    ) -> Result<PeerTaken, String> {
        let (head, entries) = group_of(bytes)?;
        let at = head.last();
        let kept = self.merge_from_peer(peer, &entries, Some(at), position_due)?;
        Ok(PeerTaken { at, kept })
    }

    /// Takes the items of `entries` that are newer here, and the peer's
    /// flushes, as one group of this server's log, with `at` as the peer's
    /// position if given and something was taken or `position_due`;
    /// returns whether it kept the position. Table rows are a master's to
    /// replicate, not a peer's: they are left out.
    ///
    /// A group that took nothing (the echo of this server's own writes)
    /// appends nothing unless its position is due: each append goes to the
    /// peer, whose own echo must not come back in turn.
    fn merge_from_peer(
        &self,
        peer: &str,
        entries: &[Record<'_>],
        at: Option<LogPosition>,
        position_due: bool,
    ) -> Result<bool, String> {
        if self.health.is_poisoned() {
            return Err("the engine refuses writes (a failed disk)".to_string());
        }
        // Most of a peer's log is often this server's own writes coming
        // back: looked at first, without holding the journal.
        let news: Vec<&Record<'_>> = entries
            .iter()
            .filter(|record| self.may_change(record))
            .collect();
        if news.is_empty() && !position_due {
            return Ok(false);
        }
        let mut failed = false;
        let mut kept = false;
        let appended = self.one_append(&mut || {
            let mut changed = false;
            for &&record in &news {
                match record {
                    Record::Put { key, record } => match self.put_if_newer(key, record) {
                        Ok(Verdict::Taken) => {
                            changed = true;
                            self.counters.peer_taken.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Verdict::Older) => {
                            self.counters.peer_discarded.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(Verdict::Held) => {}
                        Err(WriteFailed) => failed = true,
                    },
                    // Applied once: its echo finds the boundary passed.
                    Record::Flush(boundary) if self.takes_flush(boundary) => {
                        changed = true;
                        self.take_flush(boundary);
                    }
                    _ => {}
                }
            }
            // Not past a write that failed: it comes again from there.
            if let Some(at) = at.filter(|_| (changed || position_due) && !failed) {
                kept = self.keep_peer_position(peer, at);
                failed |= !kept;
            }
        });
        if failed {
            return Err("cannot read or write an item of the peer's".to_string());
        }
        if !appended {
            return Err("cannot append to the update log".to_string());
        }
        Ok(kept)
    }

    /// Whether a peer's entry may change anything here: not a table's
    /// (those are left out), not a flush already in effect, not an item this
    /// server wrote and still holds (or has written again since).
    fn may_change(&self, record: &Record<'_>) -> bool {
        match *record {
            Record::Put { key, record } => {
                let Some((incoming, _)) = Header::decode(record) else {
                    return true;
                };
                if self.flushes.covers(incoming.cas) {
                    return false;
                }
                if !self.made_here(incoming.cas) {
                    return true;
                }
                let mut shard = self.pending.lock(key);
                let lost = ValueLost::HeaderWillDo;
                self.with_record(&mut shard, key, &AckFence::default(), lost, |found| {
                    found.is_none_or(|(held, _)| held.cas < incoming.cas)
                })
                .unwrap_or(true)
            }
            Record::Flush(boundary) => self.takes_flush(boundary),
            _ => false,
        }
    }

    /// Whether `cas` is a stamp of this server's own.
    fn made_here(&self, cas: u64) -> bool {
        self.stamps
            .is_some_and(|stamps| stamp::made_by(cas, stamps.rank()))
    }

    /// Whether a peer's flush through `boundary` is news: past the newest
    /// flush here. (A counter's boundary, a flush from before the peer had
    /// peers, covers only counters' items: `flushed.rs` removes no stamp's.)
    fn takes_flush(&self, boundary: u64) -> bool {
        boundary > self.flushes.through()
    }

    /// Leaves a peer's record pending if its stamp is newer than the key's
    /// here (under the key's shard lock: no local write comes between).
    fn put_if_newer(&self, key: &[u8], record: &[u8]) -> Result<Verdict, WriteFailed> {
        let Some((incoming, _)) = record::value_in_place(record) else {
            return Err(WriteFailed);
        };
        if !key_fits(Space::Item, key) {
            tracing::warn!(
                key_len = key.len(),
                "a peer's write of a key no protocol takes: discarded"
            );
            return Ok(Verdict::Older);
        }
        if self.flushes.covers(incoming.cas) {
            // From before a flush here: dead already.
            return Ok(Verdict::Held);
        }
        // Every later stamp made here is after this write.
        self.last_cas.fetch_max(incoming.cas, Ordering::AcqRel);
        // This server's own write come back (it may have written the key
        // again since): not a conflict.
        let echo = self.made_here(incoming.cas);
        let mut shard = self.pending.lock(key);
        // The stamps decide: a damaged value here loses to a newer write.
        let lost = ValueLost::HeaderWillDo;
        let verdict =
            self.with_record(
                &mut shard,
                key,
                &AckFence::default(),
                lost,
                |found| match found {
                    Some((held, _)) if held.cas == incoming.cas => Verdict::Held,
                    Some((held, _)) if held.cas > incoming.cas && echo => Verdict::Held,
                    Some((held, _)) if held.cas > incoming.cas => Verdict::Older,
                    _ => Verdict::Taken,
                },
            )?;
        if verdict == Verdict::Taken {
            shard.put(Change::Put(Keyed::new(key, record)));
        }
        Ok(verdict)
    }

    /// Takes a peer's snapshot into this server's data by last writer wins
    /// (a peer's data is never replaced: it has writes of its own).
    pub(super) fn merge_base<'s>(&'s self, peer: &str) -> PeerMerge<'s> {
        PeerMerge {
            inner: self,
            peer: peer.to_string(),
        }
    }

    pub(super) fn peer_tally(&self) -> PeerTally {
        PeerTally {
            taken: self.counters.peer_taken.load(Ordering::Relaxed),
            conflicts_resolved: self.counters.peer_discarded.load(Ordering::Relaxed),
        }
    }
}

/// A peer's snapshot being merged: each part as its own group; the peer's
/// position only at the end, so a merge cut short is merged again.
pub(super) struct PeerMerge<'s> {
    inner: &'s Inner,
    peer: String,
}

impl BaseLoad for PeerMerge<'_> {
    fn add(&mut self, part: SnapshotPart<'_>) -> Result<(), String> {
        match part {
            SnapshotPart::Records(bytes) => {
                let records = records(bytes)?;
                self.inner
                    .merge_from_peer(&self.peer, &records, None, false)
                    .map(drop)
            }
            // A peer's tables are its own.
            SnapshotPart::Index { .. } => Ok(()),
        }
    }

    fn finish(self: Box<Self>, at: LogPosition) -> Result<(), String> {
        self.inner
            .merge_from_peer(&self.peer, &[], Some(at), true)
            .map(drop)
    }
}
