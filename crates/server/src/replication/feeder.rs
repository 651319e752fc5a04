//! The master side of a replica's link: one thread per replica sends the
//! log after the replica's position (or a snapshot first, when the log no
//! longer reaches back or the position is not a point of this log), then
//! every group as it is appended, and a heartbeat when there is none. A
//! second thread reads the replica's acknowledgements: they let the log go
//! (retention follows replicas) and measure the lag.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_proto::replication::{self as wire, Frame, LinkRequest, ReplicaHello};
use kura_store::replication::{LogFeed, LogPosition, Replication, SnapshotPart};

use super::{LinkState, LinkStream, ReplicaLink};
use crate::Shared;

/// A heartbeat goes out when no group came for this long.
const HEARTBEAT_EVERY: Duration = Duration::from_millis(200);
/// The longest a write to a replica may wait for it to read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Groups a replica may leave unacknowledged (the master remembers each,
/// for its lag): far more than the socket buffers hold of a replica that
/// takes what it reads.
const MAX_UNACKED_GROUPS: usize = 1_000_000;

/// Serves a replica on `stream` (a kura replica's `replicate` line, or a
/// Tokyo Tyrant slave's `repl`, asked for it) until it goes or the server
/// stops; runs on a thread of its own.
pub(crate) fn serve_replica(
    shared: Arc<Shared>,
    mut stream: LinkStream,
    request: LinkRequest,
    peer: String,
) {
    let feeds = &shared.replication.feeds;
    if feeds.fetch_add(1, Ordering::AcqRel) >= shared.config.max_replicas {
        feeds.fetch_sub(1, Ordering::AcqRel);
        shared
            .replication
            .replicas_refused
            .fetch_add(1, Ordering::Relaxed);
        let most = shared.config.max_replicas;
        tracing::warn!(%peer, most, "a replica refused: --max-replicas are fed already");
        // A Tokyo Tyrant slave's link closes without a word, as ttserver's.
        if matches!(request, LinkRequest::Kura(_)) {
            let _ = stream.write_all(b"SERVER_ERROR too many replicas (--max-replicas)\r\n");
        }
        return;
    }
    // Still one of the server's connections (`-c` bounds replicas too), for
    // as long as its feed runs.
    shared.connections.current.fetch_add(1, Ordering::Relaxed);
    let counted = CountedReplica(shared.clone());
    let spawned = std::thread::Builder::new()
        .name("kura-repl-feed".to_string())
        .spawn(move || {
            let _counted = counted;
            let Some(replication) = shared.store.replication() else {
                let _ = stream.write_all(b"SERVER_ERROR replication needs the disk engine\r\n");
                return;
            };
            let replica = match request {
                LinkRequest::Kura(hello) => hello.replica,
                LinkRequest::Tyrant { slave, .. } => slave,
            };
            let link = shared.replication.attach(replica, peer.clone());
            tracing::info!(replica, %peer, "replica attached");
            let result = stream
                .make_blocking(WRITE_TIMEOUT)
                .and_then(|()| match request {
                    LinkRequest::Kura(hello) => {
                        feed(&shared, replication, &mut stream, hello, &link)
                    }
                    LinkRequest::Tyrant {
                        since_micros,
                        slave,
                    } => super::tyrant_feed::feed(
                        &shared,
                        replication,
                        &mut stream,
                        (since_micros, slave),
                        &link,
                    ),
                });
            stream.shutdown();
            shared.replication.detach(&link);
            match result {
                Ok(()) => tracing::info!(replica, %peer, "replica detached"),
                Err(error) => tracing::info!(replica, %peer, %error, "replica detached"),
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start a replica's feed");
    }
}

/// A replica's place in the connection count and among the feeds, given
/// back when its feed ends.
struct CountedReplica(Arc<Shared>);

impl Drop for CountedReplica {
    fn drop(&mut self) {
        self.0.connections.current.fetch_sub(1, Ordering::Relaxed);
        self.0.replication.feeds.fetch_sub(1, Ordering::AcqRel);
    }
}

const SNAPSHOT_INCOMPLETE: &[u8] = b"SERVER_ERROR this server is loading its master's snapshot, \
    or its load was cut off: follow its master until this server's snapshot is whole\r\n";

fn feed(
    shared: &Shared,
    replication: &dyn Replication,
    stream: &mut LinkStream,
    hello: ReplicaHello,
    link: &Arc<ReplicaLink>,
) -> io::Result<()> {
    let master = replication.server_id();
    if hello.format != replication.format() {
        let line = format!(
            "SERVER_ERROR this master keeps data of format {}; the replica reads format {}\r\n",
            replication.format(),
            hello.format
        );
        return stream.write_all(line.as_bytes());
    }
    let opened = hello
        .after
        .map(|(lsn, micros)| replication.feed(LogPosition { lsn, micros }));
    let mut frame = Vec::new();
    let mut feed: Box<dyn LogFeed> = match opened {
        Some(Ok(feed)) => {
            stream.write_all(format!("STREAM {master}\r\n").as_bytes())?;
            feed
        }
        // A replica holding part of its master's snapshot must not hand
        // that part on as a whole one (promoted by force, or run without a
        // master, it takes writes and does).
        _ if replication.position().is_none() && replication.read_only() => {
            stream.write_all(SNAPSHOT_INCOMPLETE)?;
            return Ok(());
        }
        refused => {
            let reason = match refused {
                Some(Err(refused)) => refused.to_string(),
                _ => "the replica has no position".to_string(),
            };
            let line = format!(
                "SNAPSHOT {master} {}\r\n",
                reason.replace(['\r', '\n'], " ")
            );
            stream.write_all(line.as_bytes())?;
            link.set_state(LinkState::Snapshot);
            let (at, feed) = replication.snapshot(&mut |part| {
                frame.clear();
                let part = match part {
                    SnapshotPart::Records(bytes) => Frame::Snapshot(bytes),
                    SnapshotPart::Index {
                        table,
                        column,
                        kind,
                    } => Frame::Index {
                        table,
                        column,
                        kind: kind as u8,
                    },
                };
                wire::encode(part, &mut frame);
                stream.write_all(&frame)
            })?;
            frame.clear();
            wire::encode(
                Frame::SnapshotEnd {
                    lsn: at.lsn,
                    micros: at.micros,
                },
                &mut frame,
            );
            stream.write_all(&frame)?;
            shared
                .replication
                .snapshots_sent
                .fetch_add(1, Ordering::Relaxed);
            link.snapshot_sent(at.lsn);
            feed
        }
    };
    link.set_state(LinkState::Streaming);
    let mut acks = stream.try_clone()?;
    let ack_link = link.clone();
    std::thread::Builder::new()
        .name("kura-repl-acks".to_string())
        .spawn(move || read_acks(&mut acks, &ack_link))?;
    let mut acknowledged = 0;
    // Index definitions are not log entries: they go when they change.
    let mut indexes_sent = None;
    let mut indexes_checked = Instant::now() - HEARTBEAT_EVERY;
    while !shared.stopping() && !link.closed.load(Ordering::Acquire) {
        let acked = link.acked();
        if acked != acknowledged {
            feed.acknowledged(acked);
            acknowledged = acked;
        }
        frame.clear();
        if indexes_checked.elapsed() >= HEARTBEAT_EVERY {
            indexes_checked = Instant::now();
            let indexes = replication.indexes();
            if indexes_sent.as_ref() != Some(&indexes) {
                let list = wire::index_list(
                    indexes
                        .iter()
                        .map(|(table, column, kind)| (&table[..], &column[..], *kind as u8)),
                );
                wire::encode(Frame::Indexes(&list), &mut frame);
                stream.write_all(&frame)?;
                frame.clear();
                indexes_sent = Some(indexes);
            }
        }
        match feed.next_group(HEARTBEAT_EVERY)? {
            // A frame's length is 32 bits: a larger group (a pending table
            // of over 4 GiB journalled at once) cannot be sent.
            Some(group) if u32::try_from(group.bytes.len()).is_err() => {
                return Err(io::Error::other(format!(
                    "a group of {} bytes is larger than a frame can carry",
                    group.bytes.len()
                )));
            }
            Some(group) => {
                wire::encode(Frame::Group(&group.bytes), &mut frame);
                let unacked = link.sent_group(group.last_lsn, group.micros, frame.len());
                if unacked > MAX_UNACKED_GROUPS {
                    return Err(io::Error::other(format!(
                        "the replica acknowledged none of {MAX_UNACKED_GROUPS} groups"
                    )));
                }
            }
            None => {
                let last = feed.last_position();
                wire::encode(
                    Frame::Heartbeat {
                        lsn: last.lsn,
                        micros: last.micros,
                    },
                    &mut frame,
                );
            }
        }
        stream.write_all(&frame)?;
    }
    Ok(())
}

/// Reads acknowledgements until the replica goes (or sends anything else).
fn read_acks(stream: &mut LinkStream, link: &ReplicaLink) {
    let mut ack = [0; wire::ACK_LEN];
    while stream.read_exact(&mut ack).is_ok() {
        match wire::parse_ack(&ack) {
            Some(lsn) => link.acknowledge(lsn),
            None => break,
        }
    }
    link.closed.store(true, Ordering::Release);
}
