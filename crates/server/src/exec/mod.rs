//! Executes parsed requests against the store and composes the replies.
//! Ordinary functions: no sockets, so they are tested with byte slices.

pub mod backup;
pub mod binary;
pub mod handlersocket;
pub mod meta;
pub mod metadump;
mod reply_limit;
pub mod stats;
pub mod text;
pub mod tyrant;
pub(crate) mod uid;
pub mod watch_lines;

use kura_proto::text::Limits;
use kura_store::{AckFence, DeleteCommand, GetOutcome, StoreMode};

use crate::stats::{Counters, PrefixCounts};
use crate::Shared;

/// The version reported by `version`: the memcached release whose protocol
/// kura implements, so clients that compare versions enable every feature.
/// kura's own version is in `stats kura` as `kura_version`.
pub const PROTOCOL_VERSION: &str = "1.6.18";

/// What the connection does after a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Continue,
    Close,
    /// `shutdown`: stop the server.
    Shutdown,
    /// `shutdown graceful` (memcached's SIGUSR1).
    GracefulShutdown,
    /// `watch`: the connection becomes a log watcher of these kinds
    /// (`crate::watch::kind`) and serves no more requests.
    Watch {
        kinds: u32,
    },
    /// `lru_crawler metadump`: the connection writes the dump of these
    /// classes in parts, then serves requests again.
    Metadump(metadump::CrawlClasses),
    /// `replicate`: the connection becomes a replica's link and is served
    /// by a thread of its own from now on.
    Replicate(kura_proto::replication::LinkRequest),
    /// `backup` or `copy`: made on a thread of its own, while the
    /// connection waits for its reply.
    Backup(backup::BackupRequest),
}

/// What executing a request may touch.
pub struct Context<'a> {
    pub shared: &'a Shared,
    /// This worker's counters.
    pub counters: &'a Counters,
    /// The connection's id (`cfd` in watcher lines; 0 for UDP).
    pub conn_id: u64,
    /// Raised by the engine to the newest write whose reply must wait for
    /// its append; the worker takes it once the batch is served.
    pub fence: AckFence,
    /// The request came in a UDP datagram: nothing is streamed back (as
    /// memcached's crawler, which writes to the connection's socket).
    pub datagram: bool,
}

impl Context<'_> {
    /// Removes the item a failed write meant to replace (memcached does, so
    /// a client whose write failed does not go on reading the old value).
    pub fn remove_stale(&self, key: &[u8]) {
        self.shared
            .store
            .delete(key, &DeleteCommand::default(), &self.fence);
    }

    /// This server is a replica: clients' writes are refused.
    pub fn read_only(&self) -> bool {
        self.shared
            .store
            .replication()
            .is_some_and(|replication| replication.read_only())
    }

    /// Counts a read: a get in `cmd_get`, and in `get_hits` or `get_misses`
    /// (one whose write the engine refused in neither); one that touches
    /// (gat, binary TOUCH and GAT, `mg … T`) as a touch alone, as memcached
    /// counts it.
    pub fn count_read(&self, outcome: GetOutcome, touched: bool) {
        if touched {
            return self.count_touch(outcome);
        }
        self.counters.cmd_get.incr();
        match outcome {
            GetOutcome::Hit => self.counters.get_hits.incr(),
            GetOutcome::Miss => self.counters.get_misses.incr(),
            GetOutcome::Failed => {}
        }
    }

    /// Counts a touch (the command, gat, `mg … T`) in `cmd_touch`, and in
    /// `touch_hits` or `touch_misses` (a refused one in neither).
    pub fn count_touch(&self, outcome: GetOutcome) {
        self.counters.cmd_touch.incr();
        match outcome {
            GetOutcome::Hit => self.counters.touch_hits.incr(),
            GetOutcome::Miss => self.counters.touch_misses.incr(),
            GetOutcome::Failed => {}
        }
    }

    /// The reply to a write the engine refused: a replica's own words, or
    /// memcached's for a failed storage write.
    pub fn write_failed_line(&self) -> &'static [u8] {
        if self.read_only() {
            b"SERVER_ERROR read-only replica: writes go to its master\r\n"
        } else {
            b"SERVER_ERROR storage write failed\r\n"
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_item_size: self.shared.config.max_item_size,
        }
    }

    /// Counts a request in `stats detail` when that is on (memcached counts
    /// text and binary get, set and delete, not meta commands).
    #[inline]
    pub fn detail(&self, key: &[u8], count: impl FnOnce(&mut PrefixCounts)) {
        let delimiter = self.shared.config.detail_delimiter;
        let detail = &self.counters.detail;
        if detail.enabled(delimiter.is_some()) {
            let max_prefixes = self.shared.config.max_detail_prefixes;
            if !detail.record(key, delimiter.unwrap_or(b':'), max_prefixes, count) {
                self.counters.detail_untracked.incr();
            }
        }
    }

    /// The CAS a reply shows: 0 when CAS is off (`-C`), as memcached does.
    pub fn visible_cas(&self, cas: u64) -> u64 {
        if self.shared.config.cas_enabled {
            cas
        } else {
            0
        }
    }

    /// What a delete or an incr/decr compares with the client's CAS token.
    /// Under `-C` memcached's items carry a CAS of 0: a token of 0 always
    /// matches and any other never does.
    pub fn compare_token(&self, token: Option<u64>) -> Option<u64> {
        match token {
            Some(token) if !self.shared.config.cas_enabled => {
                (token != 0).then_some(NO_ITEM_HAS_CAS)
            }
            token => token,
        }
    }

    /// What a storage command compares with the client's CAS token. Under
    /// `-C` memcached's stored item has no room for the token, so a set or
    /// replace with one finds it differs from any item's, and an append or
    /// an add compares nothing.
    pub fn store_compare(&self, mode: StoreMode, token: Option<u64>) -> Option<u64> {
        match (token, mode) {
            (Some(_), StoreMode::Set | StoreMode::Replace) if !self.shared.config.cas_enabled => {
                Some(NO_ITEM_HAS_CAS)
            }
            (Some(_), _) if !self.shared.config.cas_enabled => None,
            (token, _) => token,
        }
    }
}

/// A CAS no item has (the engines count from 1, and a dual master's stamps
/// reach it only in 2054): a compare with it fails.
const NO_ITEM_HAS_CAS: u64 = u64::MAX;
