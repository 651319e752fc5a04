//! The disk engine's settings, and the sizes derived from them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::io::{Io, OsIo};
use super::{LogRetention, SyncPolicy};
use crate::classes::SizeClasses;

/// The shortest value kept in the journal: a pointer record takes 41 bytes.
const MIN_LOGGED_VALUE: usize = 64;

#[derive(Debug, Clone)]
pub struct DiskConfig {
    pub dir: PathBuf,
    /// The largest the data file may grow (LMDB's map size).
    pub map_size: usize,
    pub sync: SyncPolicy,
    pub classes: SizeClasses,
    /// Writes are refused (`SERVER_ERROR`) while less than this much room
    /// is left in the map or on the file system; deletes still work.
    pub reserve_bytes: u64,
    /// Memory for writes waiting to be applied; a writer that finds it
    /// full waits for the round in progress.
    pub pending_limit: usize,
    /// Values at least this long stay in the journal, and LMDB holds a
    /// pointer to them (0: every value goes into LMDB).
    pub log_values_from: usize,
    /// Resident memory kura keeps to: when the process grows past it, the
    /// pages of the data file it has mapped are dropped from its resident
    /// set (they stay in the OS page cache; the next read maps them again).
    pub memory_budget: usize,
    /// `maintain` removes expired items in the background; without it they
    /// go when met or at `lru_crawler crawl` (`-o no_lru_maintainer`).
    pub background_expiry: bool,
    /// The origin id of this server's log entries (`--server-id`); `None`:
    /// the one kept in the directory, or a new random one.
    pub server_id: Option<u32>,
    /// How long and how much of the update log is kept once applied.
    pub log_retention: LogRetention,
    /// The most log kept for attached replicas beyond `log_retention`
    /// (bytes): a replica further behind resynchronizes from a snapshot.
    pub log_retention_max: u64,
    /// The largest an item's value or a table row (its columns encoded)
    /// may be (`-I`): a write or an edit that would make one larger is
    /// refused.
    pub max_value_bytes: usize,
    /// A restore's replay: the entries after this LSN are not applied.
    pub replay_until: Option<u64>,
    /// The file operations (the fault tests inject failures here).
    pub io: Arc<dyn Io>,
    /// Set when this server takes writes alongside peers (`--peer`).
    pub multi_primary: Option<MultiPrimary>,
    /// The threads that serve requests (`-t`): the pending table's shards
    /// are sized for them.
    pub workers: usize,
}

/// How a server that takes writes alongside peers (dual master) keeps its
/// items so that their writes converge (`docs/DESIGN.md`, "Dual master"):
/// every CAS is a hybrid logical clock stamp (`stamp.rs`), a delete leaves
/// a tombstone, and dead items stay a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiPrimary {
    /// How long a deleted or expired item is kept (dead, invisible) before
    /// the sweep removes it: a peer's older write of the key arriving
    /// within this time loses to it instead of bringing the key back.
    pub tombstone_lifetime: Duration,
}

impl DiskConfig {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskConfig {
            dir: dir.into(),
            map_size: 64 << 30,
            sync: SyncPolicy::Batch,
            classes: SizeClasses::default(),
            reserve_bytes: 64 << 20,
            pending_limit: 256 << 20,
            log_values_from: 1024,
            memory_budget: 1 << 30,
            background_expiry: true,
            server_id: None,
            log_retention: LogRetention::default(),
            log_retention_max: 16 << 30,
            max_value_bytes: 1 << 20,
            replay_until: None,
            io: Arc::new(OsIo),
            multi_primary: None,
            workers: std::thread::available_parallelism().map_or(1, |cores| cores.get()),
        }
    }

    /// Whether a value of `len` bytes stays in the journal (never one
    /// shorter than [`MIN_LOGGED_VALUE`], whose pointer would outweigh it).
    pub fn keeps_in_log(&self, len: usize) -> bool {
        self.log_values_from != 0 && len >= self.log_values_from.max(MIN_LOGGED_VALUE)
    }

    /// Committed records kept in memory for reads: a quarter of the budget.
    pub fn read_cache_bytes(&self) -> usize {
        self.memory_budget / 4
    }
}

#[cfg(test)]
impl DiskConfig {
    /// A small engine for unit tests: a 16 MiB map, no reserve kept free,
    /// no background expiry.
    pub(crate) fn for_tests(dir: &std::path::Path) -> DiskConfig {
        DiskConfig {
            map_size: 16 << 20,
            reserve_bytes: 0,
            background_expiry: false,
            ..DiskConfig::new(dir)
        }
    }
}
