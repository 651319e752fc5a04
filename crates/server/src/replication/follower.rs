//! The replica side (and a dual master's side of a peer): one thread
//! connects to the master, says where this server's log ends (or where it
//! is in the peer's), loads a snapshot if the master sends one (a peer
//! merges it), then applies each group the master sends as this server's
//! next group and acknowledges it. Any failure (the master gone, a group
//! out of step) closes the link; the thread connects again a second later
//! (twice as long after each attempt in a row that did not stream, up to
//! five) from wherever the log now ends, until it is told to stop.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_proto::replication::{self as wire, Frame, MasterAnswer, ReplicaHello};
use kura_store::replication::{BaseLoad, LogPosition, Replication, SnapshotPart};
use kura_store::stamp::rank_of;
use kura_store::IndexKind;

use super::upstream::{connect, read_full, read_grown, FOLLOWS_ITSELF, READ_TICK, SILENCE_LIMIT};
use super::{LinkKind, LinkState, MasterLink};
use crate::{MasterProtocol, Shared};

/// How often a peer's position is kept although its groups changed
/// nothing here (echoes of this server's own writes): each keeping is an
/// append the peer receives in turn.
const PEER_POSITION_EVERY: Duration = Duration::from_secs(1);
/// Why a link to a peer ends for good: their stamps would not be unique.
pub(super) const SAME_RANK: &str =
    "the peer's server id and this one's are equal modulo 4096 (their stamps' rank): give one another --server-id";
/// Why a link to a master of unknown protocol ends: it is a ttserver.
const SPEAKS_TOKYO_TYRANT: &str = "the master speaks Tokyo Tyrant's replication";
/// Groups taken between two acknowledgements at most.
const ACK_EVERY_GROUPS: usize = 1000;
/// The wait before connecting again after a link that streamed; it
/// doubles with each attempt in a row that did not, up to the longest.
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_LONGEST: Duration = Duration::from_secs(5);
/// Connections in a row that kura's hello leaves unanswered before a master
/// of unknown protocol is taken for a ttserver.
const UNANSWERED_FOR_TOKYO_TYRANT: u32 = 3;

pub(super) fn start(
    shared: Arc<Shared>,
    link: Arc<MasterLink>,
    stop: Arc<AtomicBool>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kura-repl-follow".to_string())
        .spawn(move || run(&shared, &link, &stop))
}

fn run(shared: &Shared, link: &MasterLink, stop: &AtomicBool) {
    let stopped = || stop.load(Ordering::Acquire) || shared.stopping();
    let mut retry_after = RETRY_FIRST;
    while !stopped() {
        link.connecting();
        let followed = match link.protocol() {
            MasterProtocol::TokyoTyrant => {
                super::tyrant_follower::follow_once(shared, link, &stopped)
            }
            MasterProtocol::Kura | MasterProtocol::Either => follow_once(shared, link, &stopped),
        };
        if let Err(error) = followed {
            if error == SPEAKS_TOKYO_TYRANT {
                // A ttserver: its protocol from now on, at once.
                tracing::info!(master = %link.master, "the master speaks Tokyo Tyrant's replication");
                continue;
            }
            if error == FOLLOWS_ITSELF || error == SAME_RANK {
                tracing::error!(master = %link.master, "{error}: not following it");
                *link.last_error.lock() = error;
                // Taking writes again if it did before: no master serves it.
                // Under the lock `follow` changes the role under, so that a
                // newer master's read-only state is not undone.
                let following = shared.replication.following.lock();
                if !stopped() && link.kind == LinkKind::Master {
                    if let Some(replication) = shared.store.replication() {
                        replication.set_read_only(link.read_only_before);
                    }
                }
                drop(following);
                break;
            }
            if !stopped() {
                let mut last_error = link.last_error.lock();
                // Once per cause: a master that stays down is not news
                // every few seconds.
                if *last_error != error {
                    tracing::warn!(master = %link.master, %error, "replication link lost");
                }
                *last_error = error;
            }
        }
        if link.state() == LinkState::Streaming {
            retry_after = RETRY_FIRST;
        }
        let resume = Instant::now() + retry_after;
        retry_after = (retry_after * 2).min(RETRY_LONGEST);
        while !stopped() && Instant::now() < resume {
            std::thread::sleep(READ_TICK);
        }
    }
    link.set_state(LinkState::Stopped);
}

/// The next frame's kind and payload (in `payload`).
fn read_frame(
    reader: &mut impl Read,
    payload: &mut Vec<u8>,
    max_len: usize,
    stopped: &dyn Fn() -> bool,
) -> Result<u8, String> {
    let mut head = [0; wire::FRAME_HEAD];
    read_full(reader, &mut head, stopped)?;
    let (kind, len) = wire::frame_head(&head, max_len)?;
    read_grown(reader, payload, len, stopped)?;
    Ok(kind)
}

fn follow_once(
    shared: &Shared,
    link: &MasterLink,
    stopped: &dyn Fn() -> bool,
) -> Result<(), String> {
    let (replication, stream) = connect(shared, link)?;
    let io_error = |error: io::Error| format!("talking to the master: {error}");
    let mut writer = stream.try_clone().map_err(io_error)?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let hello = ReplicaHello {
        replica: replication.server_id(),
        after: followed_position(replication, link).map(|position| (position.lsn, position.micros)),
        format: replication.format(),
    };
    writer
        .write_all(hello.line().as_bytes())
        .map_err(io_error)?;
    let answer = match read_answer(&mut reader, stopped) {
        Ok(answer) => answer,
        // A ttserver answers a line it does not know with nothing: it
        // closes, or keeps silent, every time.
        Err(error) if link.protocol() == MasterProtocol::Either && !stopped() => {
            let unanswered = link.unanswered.fetch_add(1, Ordering::AcqRel) + 1;
            if unanswered < UNANSWERED_FOR_TOKYO_TYRANT {
                return Err(error);
            }
            link.set_protocol(MasterProtocol::TokyoTyrant);
            return Err(SPEAKS_TOKYO_TYRANT.to_string());
        }
        Err(error) => return Err(error),
    };
    link.unanswered.store(0, Ordering::Release);
    // A group holds every write of one append: allow more than one item.
    let max_frame = shared.config.max_item_size.saturating_mul(64).max(1 << 30);
    let mut payload = Vec::new();
    if answer == "ERROR" && link.protocol() == MasterProtocol::Either {
        // memcached's answer to a command it does not know.
        link.set_protocol(MasterProtocol::TokyoTyrant);
        return Err(SPEAKS_TOKYO_TYRANT.to_string());
    }
    let answer = wire::parse_answer(&answer);
    if let MasterAnswer::Stream { master } | MasterAnswer::Snapshot { master, .. } = answer {
        link.answered();
        link.master_id.store(master, Ordering::Relaxed);
        if master == replication.server_id() {
            // Its own feed would answer; a snapshot of itself would clear it.
            return Err(FOLLOWS_ITSELF.to_string());
        }
        // A master that follows this server: each would load the other's
        // snapshot (wiping the writes it lacks), and neither takes writes.
        // Tried again later: a master just promoted drops its link to this
        // server soon.
        let follows_this = || {
            shared
                .replication
                .replicas()
                .iter()
                .any(|r| r.replica == master)
        };
        if link.kind == LinkKind::Master && follows_this() {
            return Err(format!(
                "the master (server {master}) is a replica of this server: promote it first"
            ));
        }
        if link.kind == LinkKind::Peer && rank_of(master) == rank_of(replication.server_id()) {
            return Err(SAME_RANK.to_string());
        }
    }
    if link.protocol() == MasterProtocol::Either {
        link.set_protocol(MasterProtocol::Kura);
        replication.set_read_only(true);
    }
    match answer {
        MasterAnswer::Stream { .. } => {}
        MasterAnswer::Snapshot { reason, .. } => {
            tracing::info!(master = %link.master, %reason, "taking a snapshot of the master");
            link.set_state(LinkState::Snapshot);
            let base = match link.kind {
                LinkKind::Master => replication.load_base()?,
                LinkKind::Peer => replication.merge_base(&link.master),
            };
            let at = load_snapshot(base, &mut reader, &mut payload, max_frame, stopped)?;
            link.snapshots.fetch_add(1, Ordering::Relaxed);
            shared
                .replication
                .snapshots_loaded
                .fetch_add(1, Ordering::Relaxed);
            link.taken_to(at.lsn, at.micros);
            tracing::info!(master = %link.master, lsn = at.lsn, "snapshot loaded");
        }
        MasterAnswer::Refused(line) => return Err(format!("the master refused: {line}")),
    }
    link.streaming();
    if let Some(position) = followed_position(replication, link) {
        link.taken_to(position.lsn, position.micros);
    }
    let mut unacknowledged = None;
    let mut unacknowledged_groups = 0;
    let mut position_kept = Instant::now();
    loop {
        let kind = read_frame(&mut reader, &mut payload, max_frame, stopped)?;
        match wire::frame(kind, &payload)? {
            Frame::Group(records) => {
                let at = match link.kind {
                    LinkKind::Master => replication.take_group(records)?,
                    LinkKind::Peer => {
                        let due = position_kept.elapsed() >= PEER_POSITION_EVERY;
                        let taken = replication.take_peer_group(&link.master, records, due)?;
                        if taken.kept {
                            position_kept = Instant::now();
                        }
                        taken.at
                    }
                };
                shared
                    .replication
                    .groups_taken
                    .fetch_add(1, Ordering::Relaxed);
                link.taken_to(at.lsn, at.micros);
                unacknowledged = Some(at.lsn);
                unacknowledged_groups += 1;
            }
            Frame::Heartbeat { lsn, micros } => link.heard(lsn, micros),
            // A peer's tables are its own.
            Frame::Indexes(_) if link.kind == LinkKind::Peer => {}
            Frame::Indexes(list) => {
                let mut wanted = Vec::new();
                for (table, column, kind) in wire::indexes(list)? {
                    let kind = IndexKind::from_code(kind)
                        .ok_or_else(|| format!("an index of unknown kind {kind}"))?;
                    wanted.push((table.to_vec(), column.to_vec(), kind));
                }
                replication.adopt_indexes(&wanted)?;
            }
            other => return Err(format!("an unexpected frame from the master: {other:?}")),
        }
        // Once everything received is taken (appended here): one acknowledgement for a
        // burst of groups; and every so many groups of a long one, since the buffer
        // may never be empty at a frame's end while a backlog streams in.
        if reader.buffer().is_empty() || unacknowledged_groups >= ACK_EVERY_GROUPS {
            if let Some(lsn) = unacknowledged.take() {
                writer.write_all(&wire::ack(lsn)).map_err(io_error)?;
                unacknowledged_groups = 0;
            }
        }
    }
}

/// Where this server is in the followed server's log: a replica's own
/// last entry (its log is its master's), a peer's kept position.
fn followed_position(replication: &dyn Replication, link: &MasterLink) -> Option<LogPosition> {
    match link.kind {
        LinkKind::Master => replication.position(),
        LinkKind::Peer => replication.peer_position(&link.master),
    }
}

/// The master's answer line, without its CRLF.
fn read_answer(
    reader: &mut BufReader<TcpStream>,
    stopped: &dyn Fn() -> bool,
) -> Result<String, String> {
    let started = Instant::now();
    let mut line = Vec::new();
    loop {
        if stopped() {
            return Err("stopped".to_string());
        }
        match reader.by_ref().take(4096).read_until(b'\n', &mut line) {
            Ok(0) => return Err("the master closed the link".to_string()),
            Ok(_) if line.ends_with(b"\n") => break,
            Ok(_) if line.len() >= 4096 => {
                return Err("the master's answer is too long".to_string())
            }
            Ok(_) => {}
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if started.elapsed() > SILENCE_LIMIT {
                    return Err("the master did not answer".to_string());
                }
            }
            Err(error) => return Err(format!("reading from the master: {error}")),
        }
    }
    let text = String::from_utf8_lossy(&line);
    Ok(text.trim_end_matches(['\r', '\n']).to_string())
}

/// Loads the master's snapshot into `base` (a replica's new data, or a
/// peer's merge); returns the position it holds.
fn load_snapshot(
    mut base: Box<dyn BaseLoad + '_>,
    reader: &mut impl Read,
    payload: &mut Vec<u8>,
    max_frame: usize,
    stopped: &dyn Fn() -> bool,
) -> Result<LogPosition, String> {
    loop {
        let kind = read_frame(reader, payload, max_frame, stopped)?;
        match wire::frame(kind, payload)? {
            Frame::Snapshot(records) => base.add(SnapshotPart::Records(records))?,
            Frame::Index {
                table,
                column,
                kind,
            } => {
                let kind = IndexKind::from_code(kind)
                    .ok_or_else(|| format!("an index of unknown kind {kind}"))?;
                base.add(SnapshotPart::Index {
                    table,
                    column,
                    kind,
                })?;
            }
            // The next group would number past 2^64 - 1.
            Frame::SnapshotEnd { lsn: u64::MAX, .. } => {
                return Err("a snapshot ending at the last LSN there is".to_string())
            }
            Frame::SnapshotEnd { lsn, micros } => {
                let at = LogPosition { lsn, micros };
                base.finish(at)?;
                return Ok(at);
            }
            other => return Err(format!("an unexpected frame in a snapshot: {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_length_does_not_size_the_payload_before_its_bytes_come() {
        // A group frame claiming 256 MiB (under the follower's 1 GiB
        // limit), of which only 300 bytes come before the master closes.
        let mut stream = vec![b'G'];
        stream.extend_from_slice(&(256u32 << 20).to_be_bytes());
        stream.extend_from_slice(&[0; 300]);
        let mut payload = Vec::new();
        let mut master = io::Cursor::new(stream);
        let error = read_frame(&mut master, &mut payload, 1 << 30, &|| false).unwrap_err();
        assert_eq!(error, "the master closed the link");
        // The payload grew by what came (a step at a time), not to the claim.
        assert!(
            payload.capacity() <= 2 << 20,
            "a payload of {} bytes for 300 received",
            payload.capacity()
        );
    }
}
