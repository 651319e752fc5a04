//! The disk engine behind the server's replication: its feed and
//! snapshot (`feed.rs`, `snapshot.rs`), a replica's side (`replica.rs`) and
//! a dual master's (`peer.rs`), as the `Replication` trait
//! (`crate::replication`) asks for them.

pub(super) mod feed;
mod peer;
pub(super) mod replica;
mod snapshot;

use std::sync::atomic::Ordering;

use super::{DiskStore, LogPosition};
use crate::replication::{
    BaseLoad, FeedRefused, LogFeed, PeerTaken, PeerTally, Replication, SnapshotPart,
};

impl Replication for DiskStore {
    fn server_id(&self) -> u32 {
        self.inner.server_id
    }

    fn format(&self) -> u32 {
        super::open::FORMAT_VERSION
    }

    fn position(&self) -> Option<LogPosition> {
        let inner = &self.inner;
        (!inner.base_incomplete.load(Ordering::Acquire)).then(|| inner.journal.current_end().2)
    }

    fn feed(&self, after: LogPosition) -> Result<Box<dyn LogFeed>, FeedRefused> {
        feed::Feed::open(&self.inner, after).map(|feed| Box::new(feed) as _)
    }

    fn feed_since(&self, micros: u64) -> Result<Box<dyn LogFeed>, FeedRefused> {
        feed::Feed::open_since(&self.inner, micros).map(|feed| Box::new(feed) as _)
    }

    fn snapshot(
        &self,
        send: &mut dyn FnMut(SnapshotPart<'_>) -> std::io::Result<()>,
    ) -> std::io::Result<(LogPosition, Box<dyn LogFeed>)> {
        let (at, feed) = self.inner.snapshot(send)?;
        Ok((at, Box::new(feed)))
    }

    fn take_group(&self, group: &[u8]) -> Result<LogPosition, String> {
        self.inner.take_group(group)
    }

    fn load_base(&self) -> Result<Box<dyn BaseLoad + '_>, String> {
        self.inner.load_base().map(|load| Box::new(load) as _)
    }

    fn indexes(&self) -> Vec<(Vec<u8>, Vec<u8>, kura_table::IndexKind)> {
        self.inner
            .index_defs
            .all()
            .into_iter()
            .map(|(table, def)| (table, def.column, def.kind))
            .collect()
    }

    fn adopt_indexes(
        &self,
        wanted: &[(Vec<u8>, Vec<u8>, kura_table::IndexKind)],
    ) -> Result<(), String> {
        let have = Replication::indexes(self);
        for (table, column, kind) in &have {
            if !wanted.contains(&(table.clone(), column.clone(), *kind)) {
                self.inner
                    .set_index(table, column, kura_table::IndexCommand::Void)
                    .map_err(|error| error.to_string())?;
            }
        }
        for (table, column, kind) in wanted {
            if !have.contains(&(table.clone(), column.clone(), *kind)) {
                let build = kura_table::IndexCommand::Build {
                    kind: *kind,
                    keep: false,
                };
                self.inner
                    .set_index(table, column, build)
                    .map_err(|error| error.to_string())?;
            }
        }
        Ok(())
    }

    fn peer_position(&self, peer: &str) -> Option<LogPosition> {
        self.inner.peer_position(peer)
    }

    fn take_peer_group(
        &self,
        peer: &str,
        group: &[u8],
        position_due: bool,
    ) -> Result<PeerTaken, String> {
        self.inner.take_peer_group(peer, group, position_due)
    }

    fn merge_base(&self, peer: &str) -> Box<dyn BaseLoad + '_> {
        Box::new(self.inner.merge_base(peer))
    }

    fn peer_tally(&self) -> PeerTally {
        self.inner.peer_tally()
    }

    fn one_append(&self, writes: &mut dyn FnMut()) -> bool {
        self.inner.one_append(writes)
    }

    fn set_read_only(&self, read_only: bool) {
        self.inner.health.set_read_only(read_only);
        if read_only {
            // A replica's flushes are its master's: one delayed here would
            // wipe what it loads, and be journalled among the master's
            // entries.
            self.inner.flushes.delayed.cancel();
        }
    }

    fn read_only(&self) -> bool {
        self.inner.health.is_read_only()
    }
}
