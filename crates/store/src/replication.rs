//! What replication asks of an engine: on a master, a feed of its update
//! log from a replica's position and a snapshot when the log no longer
//! reaches back; on a replica, taking the master's groups as its own log
//! (same LSNs, times and origins) and loading a snapshot as a new base.
//!
//! Groups and snapshot parts travel as the journal's records
//! (`disk/log_format.rs`): a group as the master's segment holds it.

use std::io;
use std::time::Duration;

pub use crate::log_position::LogPosition;
use kura_table::IndexKind;

/// One group of the master's log, ready to send.
#[derive(Debug, Clone)]
pub struct FedGroup {
    /// The head record, then the entries, as the master's segment holds
    /// them (`disk::history::group_changes` reads them back).
    pub bytes: Vec<u8>,
    pub last_lsn: u64,
    /// When the master appended it (µs since the Unix epoch).
    pub micros: u64,
    /// The server that took its writes.
    pub origin: u32,
}

/// Why a master cannot feed a replica from its position: it must take a
/// snapshot instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeedRefused {
    /// The log no longer holds the entries after the position (retention).
    #[error("{0}")]
    Gone(String),
    /// The position is not a point of this log.
    #[error("{0}")]
    Diverged(String),
}

/// A master's log as a replica reads it.
pub trait LogFeed: Send {
    /// The next group, or `None` if none came within `wait`.
    fn next_group(&mut self, wait: Duration) -> io::Result<Option<FedGroup>>;
    /// The replica holds every entry up to `lsn`: the log need not keep
    /// them for it any more.
    fn acknowledged(&mut self, lsn: u64);
    /// The master's newest entry.
    fn last_position(&self) -> LogPosition;
}

/// A part of a snapshot.
#[derive(Debug, Clone, Copy)]
pub enum SnapshotPart<'a> {
    /// Journal records (puts and row puts) of the state.
    Records(&'a [u8]),
    /// An index of a table.
    Index {
        table: &'a [u8],
        column: &'a [u8],
        kind: IndexKind,
    },
}

/// A snapshot being loaded on a replica; dropped unfinished, it leaves the
/// replica without a position (the next attach takes a snapshot again).
pub trait BaseLoad {
    fn add(&mut self, part: SnapshotPart<'_>) -> Result<(), String>;
    /// The snapshot is whole and holds the master's log up to `at`.
    fn finish(self: Box<Self>, at: LogPosition) -> Result<(), String>;
}

/// One of a peer's groups, taken here.
#[derive(Debug, Clone, Copy)]
pub struct PeerTaken {
    /// The peer's position after it.
    pub at: LogPosition,
    /// Whether that position was kept (with what the group changed).
    pub kept: bool,
}

/// What a dual master took of its peers' writes since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerTally {
    /// Writes newer than the key's here: taken.
    pub taken: u64,
    /// Writes older than the key's here (a concurrent write won): discarded.
    pub conflicts_resolved: u64,
}

/// An engine that replicates (the disk engine: it has an update log).
pub trait Replication: Send + Sync {
    /// The origin id of this server's own entries.
    fn server_id(&self) -> u32;
    /// The data format this server reads and writes: a replica and its
    /// master must agree, for the log's records and the snapshot's travel as
    /// they are kept.
    fn format(&self) -> u32;
    /// The newest entry this server holds, or `None` when a snapshot load
    /// was cut short and the data is incomplete.
    fn position(&self) -> Option<LogPosition>;
    /// The log after `after`, for a replica.
    fn feed(&self, after: LogPosition) -> Result<Box<dyn LogFeed>, FeedRefused>;
    /// The log from the first group appended at or after `micros` (µs since
    /// the Unix epoch), or from the oldest it holds: a Tokyo Tyrant slave
    /// asks by time.
    fn feed_since(&self, micros: u64) -> Result<Box<dyn LogFeed>, FeedRefused>;
    /// Sends the whole state, consistent as of the returned position (a
    /// state between two groups whose later entries the feed from that
    /// position repeats: every entry is a key's whole state), and returns
    /// the feed from there.
    fn snapshot(
        &self,
        send: &mut dyn FnMut(SnapshotPart<'_>) -> io::Result<()>,
    ) -> io::Result<(LogPosition, Box<dyn LogFeed>)>;
    /// Takes one of the master's groups, with its LSNs, time and origin:
    /// appends it as this server's next group (the applier puts it in LMDB
    /// later, as any other); returns its last entry's position.
    fn take_group(&self, group: &[u8]) -> Result<LogPosition, String>;
    /// Empties this server for a snapshot.
    fn load_base(&self) -> Result<Box<dyn BaseLoad + '_>, String>;
    /// Every table's indexes: table, column, kind.
    fn indexes(&self) -> Vec<(Vec<u8>, Vec<u8>, IndexKind)>;
    /// Makes this server's indexes `wanted` (the master's): builds the
    /// missing ones and drops the others.
    fn adopt_indexes(&self, wanted: &[(Vec<u8>, Vec<u8>, IndexKind)]) -> Result<(), String>;
    /// Dual master: this server's position in the log of the peer at
    /// `peer` (its address), if it took any of it.
    fn peer_position(&self, peer: &str) -> Option<LogPosition>;
    /// Dual master: takes one of a peer's groups by last writer wins
    /// (each item only if its stamp is newer than the key's here) as this
    /// server's own next group, with the peer's position after it if the
    /// group changed anything or `position_due`.
    fn take_peer_group(
        &self,
        peer: &str,
        group: &[u8],
        position_due: bool,
    ) -> Result<PeerTaken, String>;
    /// Dual master: merges a peer's snapshot by last writer wins.
    fn merge_base(&self, peer: &str) -> Box<dyn BaseLoad + '_>;
    fn peer_tally(&self) -> PeerTally;
    /// Runs `writes` (calls of the engine's `Store` and `Tables`) and
    /// appends all they wrote as one group of the log; false if the append
    /// failed. `writes` must not read a whole table or wait for LMDB.
    fn one_append(&self, writes: &mut dyn FnMut()) -> bool;
    /// Refuses (or allows again) client writes: a replica's data changes
    /// only by its master's log.
    fn set_read_only(&self, read_only: bool);
    fn read_only(&self) -> bool;
}
