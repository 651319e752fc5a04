//! A master's whole state for a replica whose position the log no longer
//! reaches: one LMDB read transaction's items (values the log keeps read
//! from there) and rows, after the tables' index definitions and the newest
//! flush, as journal records; then a feed from the snapshot's position on.
//!
//! The applier may have committed part of a later round when the
//! transaction began (large rounds commit in parts, with the position of
//! the round before): the feed repeats those entries, and since every entry
//! is a key's whole state, the replica ends where the master is.

use std::io;
use std::sync::Arc;

use super::feed::Feed;
use crate::disk::log_format::{self, Record};
use crate::disk::record::Header;
use crate::disk::tables::indexes;
use crate::disk::{applied_position, in_log, log_read_failed, Inner, BASE_INCOMPLETE};
use crate::log_position::LogPosition;
use crate::replication::SnapshotPart;

/// Bytes of records sent in one part.
const PART_BYTES: usize = 1 << 20;

impl Inner {
    pub(super) fn snapshot(
        self: &Arc<Self>,
        send: &mut dyn FnMut(SnapshotPart<'_>) -> io::Result<()>,
    ) -> io::Result<(LogPosition, Feed)> {
        // Before the transaction: the segments holding what follows the
        // snapshot (and the values it points to) stay until it is sent.
        let _hold = self.journal.hold_history();
        let (segment, len, _) = self.journal.current_end();
        // Every part waits for the replica: one that reads too slowly must
        // not keep the whole log on disk.
        let send = &mut |part: SnapshotPart<'_>| {
            self.snapshot_may_go_on((segment, len))?;
            send(part)
        };
        let txn = self.env.read_txn().map_err(io::Error::other)?;
        // A replica that began loading its own master's snapshot since it
        // was asked: what this transaction sees is part of that, not the
        // state at `at` (promoted by force, it serves what it holds).
        let loading = self
            .meta
            .get(&txn, BASE_INCOMPLETE)
            .map_err(io::Error::other)?;
        if loading.is_some() && self.health.is_read_only() {
            return Err(io::Error::other(
                "this server is loading its master's snapshot",
            ));
        }
        let at = applied_position(&self.meta, &txn).map_err(io::Error::other)?;
        let defs = indexes::IndexDefs::load(&self.meta, &txn).map_err(io::Error::other)?;
        for (table, def) in defs.all() {
            send(SnapshotPart::Index {
                table: &table,
                column: &def.column,
                kind: def.kind,
            })?;
        }
        let flushed_through = self.flushes.through();
        let mut parts = Parts {
            part: Vec::with_capacity(PART_BYTES),
            send,
        };
        // The flush first: a dual master merging the snapshot drops what it
        // holds from before it, as this server did.
        if flushed_through > 0 {
            parts.push(Record::Flush(flushed_through))?;
        }
        for entry in self.items.iter(&txn).map_err(io::Error::other)? {
            let (key, stored) = entry.map_err(io::Error::other)?;
            let Some(found) = Header::decode(stored) else {
                continue;
            };
            if found.0.cas <= flushed_through {
                continue;
            }
            // A value in the log is read there. The history hold keeps every
            // segment the transaction points into, so a failed read is an
            // I/O error, and fails the snapshot (the replica asks again).
            let logged;
            let record = match in_log(found) {
                None => stored,
                Some((header, pointer)) => {
                    logged =
                        self.with_logged_value(key, &header, &pointer)
                            .inspect_err(|error| {
                                log_read_failed(error, &pointer);
                            })?;
                    logged.record()
                }
            };
            parts.push(Record::Put { key, record })?;
        }
        for entry in self.rows.iter(&txn).map_err(io::Error::other)? {
            let (key, record) = entry.map_err(io::Error::other)?;
            parts.push(Record::RowPut { key, record })?;
        }
        parts.flush()?;
        drop(txn);
        let feed = Feed::open_at_group_after(self, at)?;
        Ok((at, feed))
    }

    /// Whether a snapshot that began where the log ended at `(segment,
    /// len)` may hold the log on: not once what was appended since passes
    /// `--log-retention-max` (as for a lagging replica's hold), nor while
    /// the disk is short of room.
    fn snapshot_may_go_on(&self, (segment, len): (u64, u64)) -> io::Result<()> {
        if self.health.is_out_of_space() {
            return Err(io::Error::other(
                "the disk is short of room: the snapshot lets the log go",
            ));
        }
        let (current, current_len, _) = self.journal.current_end();
        let older: u64 = (self.journal.older_segments().iter())
            .filter(|older| (segment..current).contains(&older.number))
            .map(|older| older.len)
            .sum();
        let held = (older + current_len).saturating_sub(len);
        if held > self.config.log_retention_max {
            return Err(io::Error::other(format!(
                "the log appended while the snapshot was sent ({held} bytes) passed --log-retention-max: the replica reads too slowly"
            )));
        }
        Ok(())
    }
}

/// Records gathered into parts of about [`PART_BYTES`], each sent whole.
struct Parts<'s> {
    part: Vec<u8>,
    send: &'s mut dyn FnMut(SnapshotPart<'_>) -> io::Result<()>,
}

impl Parts<'_> {
    fn push(&mut self, record: Record<'_>) -> io::Result<()> {
        log_format::encode(&mut self.part, record);
        if self.part.len() >= PART_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.part.is_empty() {
            (self.send)(SnapshotPart::Records(&self.part))?;
            self.part.clear();
        }
        Ok(())
    }
}
