//! Replication between kura servers, over the update log (`docs/DESIGN.md`,
//! "Replication"). The master side feeds each attached replica its log
//! (`feeder.rs`); the replica side follows one master (`follower.rs`).
//! This module keeps what both sides show and what changes the role:
//! `--replica-of`, `replicaof`, Tokyo Tyrant's `setmst`.

mod feeder;
mod follower;
mod link_stream;
mod tyrant_feed;
mod tyrant_follower;
mod upstream;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

pub(crate) use feeder::serve_replica;
pub(crate) use link_stream::LinkStream;

use crate::{MasterProtocol, Shared};

/// Why a server whose snapshot from its master was cut off is not
/// promoted (`replicaof no one`, `setmst` without a master).
const PARTIAL_SNAPSHOT: &str = "this server holds only part of its master's snapshot (the link broke during it): follow the master until the snapshot ends, or promote it with what it holds: replicaof no one force";

/// The address of a master given as a host (a name, an IPv4 address, or
/// an IPv6 one with or without brackets) and a port; `None` for a host of
/// more than 255 bytes or of anything but printable ASCII, which is no
/// host name (and a client's newline would become a line of the log).
pub fn master_address(host: &[u8], port: u16) -> Option<String> {
    if host.len() > 255 || !host.iter().all(u8::is_ascii_graphic) {
        return None;
    }
    let host = String::from_utf8_lossy(host);
    let bare = host
        .strip_prefix('[')
        .and_then(|host| host.strip_suffix(']'))
        .unwrap_or(&host);
    Some(match bare.contains(':') {
        true => format!("[{bare}]:{port}"),
        false => format!("{bare}:{port}"),
    })
}

/// A link's state, as `stats` and `kura admin replicas` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkState {
    Connecting = 0,
    Snapshot = 1,
    Streaming = 2,
    Stopped = 3,
}

impl LinkState {
    fn of(value: u8) -> LinkState {
        match value {
            0 => LinkState::Connecting,
            1 => LinkState::Snapshot,
            2 => LinkState::Streaming,
            _ => LinkState::Stopped,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LinkState::Connecting => "connecting",
            LinkState::Snapshot => "snapshot",
            LinkState::Streaming => "streaming",
            LinkState::Stopped => "stopped",
        }
    }
}

/// How far a replica is behind its master.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lag {
    pub entries: u64,
    pub millis: u64,
    pub bytes: u64,
}

/// A replica attached to this server (the master side).
pub struct ReplicaLink {
    pub replica: u32,
    pub peer: String,
    state: AtomicU8,
    /// The newest entry sent, and the newest the replica took.
    sent: AtomicU64,
    acked: AtomicU64,
    /// Groups sent and not acknowledged: last LSN, time (µs), frame bytes.
    unacked: Mutex<VecDeque<(u64, u64, u64)>>,
    closed: AtomicBool,
}

impl ReplicaLink {
    fn set_state(&self, state: LinkState) {
        self.state.store(state as u8, Ordering::Release);
    }

    pub fn state(&self) -> LinkState {
        LinkState::of(self.state.load(Ordering::Acquire))
    }

    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// Returns the groups now sent and not acknowledged.
    fn sent_group(&self, last_lsn: u64, micros: u64, bytes: usize) -> usize {
        self.sent.store(last_lsn, Ordering::Release);
        let mut unacked = self.unacked.lock();
        unacked.push_back((last_lsn, micros, bytes as u64));
        unacked.len()
    }

    /// A snapshot up to `lsn` went out whole: the replica holds it.
    fn snapshot_sent(&self, lsn: u64) {
        self.sent.store(lsn, Ordering::Release);
        self.acknowledge(lsn);
    }

    /// The replica holds every entry up to `lsn` (no further than what it
    /// was sent: an acknowledgement past it would hide its lag).
    fn acknowledge(&self, lsn: u64) {
        let lsn = lsn.min(self.sent.load(Ordering::Acquire));
        self.acked.fetch_max(lsn, Ordering::AcqRel);
        let mut unacked = self.unacked.lock();
        while unacked.front().is_some_and(|(last, _, _)| *last <= lsn) {
            unacked.pop_front();
        }
    }

    /// `id=… peer=… state=… lsn=… lag_entries=… lag_ms=… bytes_behind=…`,
    /// the fields apart by `between`.
    fn describe(&self, master_last: u64, now_micros: u64, between: char) -> String {
        let lag = self.lag(master_last, now_micros);
        [
            format!("id={}", self.replica),
            format!("peer={}", self.peer),
            format!("state={}", self.state().name()),
            format!("lsn={}", self.acked()),
            format!("lag_entries={}", lag.entries),
            format!("lag_ms={}", lag.millis),
            format!("bytes_behind={}", lag.bytes),
        ]
        .join(&between.to_string())
    }

    /// Behind the master's newest entry `master_last`: in entries, in time
    /// since the oldest group it has not acknowledged was appended, and in
    /// bytes sent and not acknowledged.
    pub fn lag(&self, master_last: u64, now_micros: u64) -> Lag {
        let unacked = self.unacked.lock();
        Lag {
            entries: master_last.saturating_sub(self.acked()),
            millis: unacked.front().map_or(0, |(_, micros, _)| {
                now_micros.saturating_sub(*micros) / 1000
            }),
            bytes: unacked.iter().map(|(_, _, bytes)| bytes).sum(),
        }
    }
}

/// What a followed server is to this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// Its master: this server's log becomes a copy of its log.
    Master,
    /// A dual master's peer: its writes are merged here by last writer
    /// wins (`kura_store::stamp`), as it merges this server's.
    Peer,
}

/// This server's link to a server whose log it follows: its master (the
/// replica side), or a peer.
pub struct MasterLink {
    /// `host:port`.
    pub master: String,
    pub kind: LinkKind,
    /// How it is followed; `Either` until the master has answered.
    protocol: Mutex<MasterProtocol>,
    /// Under `Either`: connections in a row that got no answer to kura's
    /// hello (a ttserver's way) — one alone may be the network's.
    unanswered: AtomicU32,
    state: AtomicU8,
    master_id: AtomicU32,
    /// The newest entry taken here (appended), and its time.
    taken: AtomicU64,
    taken_micros: AtomicU64,
    /// The master's newest entry as last heard, and its time.
    master_last: AtomicU64,
    master_micros: AtomicU64,
    /// Snapshots taken since this link was made.
    snapshots: AtomicU64,
    /// Why the link last failed; empty once it streams again.
    last_error: Mutex<String>,
    /// Whether the server refused writes before it followed this master:
    /// what it goes back to if the master turns out to be itself.
    read_only_before: bool,
}

impl MasterLink {
    fn new(master: String, kind: LinkKind, protocol: MasterProtocol) -> MasterLink {
        MasterLink {
            master,
            kind,
            protocol: Mutex::new(protocol),
            unanswered: AtomicU32::new(0),
            state: AtomicU8::new(LinkState::Connecting as u8),
            master_id: AtomicU32::new(0),
            taken: AtomicU64::new(0),
            taken_micros: AtomicU64::new(0),
            master_last: AtomicU64::new(0),
            master_micros: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            last_error: Mutex::new(String::new()),
            read_only_before: false,
        }
    }

    fn connecting(&self) {
        self.set_state(LinkState::Connecting);
    }

    /// The master answered a new connection: what was heard from the one
    /// before (perhaps another server at the same address) no longer
    /// counts. Until then the lag stays what it was.
    fn answered(&self) {
        self.master_last.store(0, Ordering::Release);
        self.master_micros.store(0, Ordering::Release);
    }

    fn streaming(&self) {
        self.set_state(LinkState::Streaming);
        self.last_error.lock().clear();
    }

    pub fn last_error(&self) -> String {
        self.last_error.lock().clone()
    }

    fn set_state(&self, state: LinkState) {
        self.state.store(state as u8, Ordering::Release);
    }

    pub fn state(&self) -> LinkState {
        LinkState::of(self.state.load(Ordering::Acquire))
    }

    pub fn protocol(&self) -> MasterProtocol {
        *self.protocol.lock()
    }

    fn set_protocol(&self, protocol: MasterProtocol) {
        *self.protocol.lock() = protocol;
    }

    /// The master's address to connect to.
    fn address(&self) -> &str {
        &self.master
    }

    fn taken_to(&self, lsn: u64, micros: u64) {
        self.taken.store(lsn, Ordering::Release);
        self.taken_micros.store(micros, Ordering::Release);
        self.master_last.fetch_max(lsn, Ordering::AcqRel);
        self.master_micros.fetch_max(micros, Ordering::AcqRel);
    }

    fn heard(&self, lsn: u64, micros: u64) {
        self.master_last.fetch_max(lsn, Ordering::AcqRel);
        self.master_micros.fetch_max(micros, Ordering::AcqRel);
    }

    pub fn taken(&self) -> (u64, u64) {
        (
            self.taken.load(Ordering::Acquire),
            self.taken_micros.load(Ordering::Acquire),
        )
    }

    /// Behind the master as last heard: entries, and the time between the
    /// master's newest entry and the newest taken here.
    pub fn lag(&self) -> Lag {
        let (taken, taken_micros) = self.taken();
        let entries = self
            .master_last
            .load(Ordering::Acquire)
            .saturating_sub(taken);
        let millis = if entries == 0 {
            0
        } else {
            self.master_micros
                .load(Ordering::Acquire)
                .saturating_sub(taken_micros)
                / 1000
        };
        Lag {
            entries,
            millis,
            bytes: 0,
        }
    }

    /// `peer=… id=… state=… lsn=… lag_entries=… lag_ms=…`, the fields
    /// apart by `between`.
    fn describe(&self, between: char) -> String {
        let (taken, _) = self.taken();
        let lag = self.lag();
        [
            format!("peer={}", self.master),
            format!("id={}", self.master_id.load(Ordering::Relaxed)),
            format!("state={}", self.state().name()),
            format!("lsn={taken}"),
            format!("lag_entries={}", lag.entries),
            format!("lag_ms={}", lag.millis),
        ]
        .join(&between.to_string())
    }

    /// The master as host and port.
    pub fn host_and_port(&self) -> (&str, u16) {
        match self.master.rsplit_once(':') {
            Some((host, port)) => (
                host.trim_start_matches('[').trim_end_matches(']'),
                port.parse().unwrap_or(0),
            ),
            None => (&self.master, 0),
        }
    }
}

/// The follower thread of the current master link.
struct Following {
    link: Arc<MasterLink>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Following {
    fn start(shared: &Arc<Shared>, link: Arc<MasterLink>) -> Result<Following, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = follower::start(shared.clone(), link.clone(), stop.clone())
            .map_err(|error| format!("cannot start the follower of {}: {error}", link.master))?;
        Ok(Following { link, stop, thread })
    }

    /// Stops the follower and waits for its thread to end (unless this is
    /// that thread: a Tokyo Tyrant master's message redone there).
    fn stop(self) -> Arc<MasterLink> {
        self.stop.store(true, Ordering::Release);
        if self.thread.thread().id() != std::thread::current().id() {
            let _ = self.thread.join();
        }
        self.link
    }
}

/// The replication state of a server.
#[derive(Default)]
pub struct Replication {
    /// `follow` one at a time.
    changing_role: Mutex<()>,
    following: Mutex<Option<Following>>,
    /// Dual master: the links to the peers.
    peers: Mutex<Vec<Following>>,
    replicas: Mutex<Vec<Arc<ReplicaLink>>>,
    /// Groups taken from a master since start, and snapshots loaded.
    pub groups_taken: AtomicU64,
    pub snapshots_loaded: AtomicU64,
    /// Snapshots sent to replicas since start.
    pub snapshots_sent: AtomicU64,
    /// Replicas being fed now, and those refused past `--max-replicas`.
    pub feeds: AtomicUsize,
    pub replicas_refused: AtomicU64,
}

impl Replication {
    /// Follows `master` (`host:port`, with the protocol to follow it by)
    /// from now on, or stops following (`None`: this server takes writes
    /// again, a promotion).
    pub fn follow(
        &self,
        shared: &Arc<Shared>,
        master: Option<(String, MasterProtocol)>,
        force: bool,
    ) -> Result<(), String> {
        let Some(replication) = shared.store.replication() else {
            return Err("replication needs the disk engine (--engine disk)".to_string());
        };
        // A snapshot cut off holds part of the master's items: as a master
        // this server would serve them as if whole.
        if master.is_none() && !force && replication.position().is_none() {
            return Err(PARTIAL_SNAPSHOT.to_string());
        }
        if master.is_some() && !self.peers.lock().is_empty() {
            return Err("a dual master takes its peers' writes, not a master's log".to_string());
        }
        let _changing = self.changing_role.lock();
        // The old follower ends before the role changes: on its way out it
        // may still clear this server for a snapshot, or make it read-only.
        // Not under `following`, which it may take meanwhile.
        let old = self.following.lock().take().map(Following::stop);
        if master.is_none() && !force && replication.position().is_none() {
            // It began a snapshot since: it goes on with it.
            if let Some(link) = old {
                *self.following.lock() = Some(Following::start(shared, link)?);
            }
            return Err(PARTIAL_SNAPSHOT.to_string());
        }
        let mut following = self.following.lock();
        let read_only_before = replication.read_only();
        match master {
            None => {
                replication.set_read_only(false);
                Ok(())
            }
            Some((master, protocol)) => {
                // A kura replica is read-only; a Tokyo Tyrant slave is not
                // (ttserver's are not, and its messages are redone as
                // requests). `Either` decides once the master answers.
                replication.set_read_only(protocol == MasterProtocol::Kura);
                let mut link = MasterLink::new(master, LinkKind::Master, protocol);
                link.read_only_before = read_only_before;
                *following = Some(Following::start(shared, Arc::new(link))?);
                Ok(())
            }
        }
    }

    /// Follows each of `peers` (`host:port`) as a dual master's peer.
    pub fn add_peers(&self, shared: &Arc<Shared>, peers: &[String]) -> Result<(), String> {
        if shared.store.replication().is_none() {
            return Err("dual master needs the disk engine (--engine disk)".to_string());
        }
        let mut following = self.peers.lock();
        for peer in peers {
            let link = Arc::new(MasterLink::new(
                peer.clone(),
                LinkKind::Peer,
                MasterProtocol::Kura,
            ));
            following.push(Following::start(shared, link)?);
        }
        Ok(())
    }

    /// The links to this server's peers (dual master).
    pub fn peers(&self) -> Vec<Arc<MasterLink>> {
        self.peers
            .lock()
            .iter()
            .map(|following| following.link.clone())
            .collect()
    }

    /// The link to the master this server follows, if any.
    pub fn master(&self) -> Option<Arc<MasterLink>> {
        self.following
            .lock()
            .as_ref()
            .map(|following| following.link.clone())
    }

    fn attach(&self, replica: u32, peer: String) -> Arc<ReplicaLink> {
        let link = Arc::new(ReplicaLink {
            replica,
            peer,
            state: AtomicU8::new(LinkState::Connecting as u8),
            sent: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            unacked: Mutex::new(VecDeque::new()),
            closed: AtomicBool::new(false),
        });
        self.replicas.lock().push(link.clone());
        link
    }

    fn detach(&self, link: &Arc<ReplicaLink>) {
        link.set_state(LinkState::Stopped);
        self.replicas
            .lock()
            .retain(|other| !Arc::ptr_eq(other, link));
    }

    /// The replicas attached now.
    pub fn replicas(&self) -> Vec<Arc<ReplicaLink>> {
        self.replicas.lock().clone()
    }

    /// `stats` lines: the role, the master link, the attached replicas.
    pub fn stats(&self, shared: &Shared) -> Vec<(String, String)> {
        let mut lines = Vec::new();
        let Some(replication) = shared.store.replication() else {
            return lines;
        };
        let master = self.master();
        let peers = self.peers();
        let role = match (&master, replication.read_only()) {
            // A link that stopped for good (its master was this server)
            // left the server as it was.
            (Some(link), false) if link.state() == LinkState::Stopped => "master",
            (Some(_), _) | (None, true) => "replica",
            (None, false) if !peers.is_empty() => "dual-master",
            (None, false) => "master",
        };
        lines.push(("repl_role".to_string(), role.to_string()));
        if let Some(position) = replication.position() {
            lines.push(("repl_lsn".to_string(), position.lsn.to_string()));
        }
        if let Some(link) = master {
            let (host, port) = link.host_and_port();
            lines.push(("repl_master_host".to_string(), host.to_string()));
            lines.push(("repl_master_port".to_string(), port.to_string()));
            lines.push((
                "repl_master_id".to_string(),
                link.master_id.load(Ordering::Relaxed).to_string(),
            ));
            lines.push(("repl_master_state".to_string(), link.state().name().into()));
            let lag = link.lag();
            lines.push(("repl_lag_entries".to_string(), lag.entries.to_string()));
            lines.push(("repl_lag_ms".to_string(), lag.millis.to_string()));
            lines.push((
                "repl_snapshots_loaded".to_string(),
                link.snapshots.load(Ordering::Relaxed).to_string(),
            ));
            let error = link.last_error();
            if !error.is_empty() {
                lines.push(("repl_master_error".to_string(), error));
            }
        }
        if !peers.is_empty() {
            let tally = replication.peer_tally();
            lines.push(("repl_peers".to_string(), peers.len().to_string()));
            for (n, peer) in peers.iter().enumerate() {
                lines.push((format!("repl_peer_{n}"), peer.describe(',')));
                let error = peer.last_error.lock().clone();
                if !error.is_empty() {
                    lines.push((format!("repl_peer_{n}_error"), error));
                }
            }
            lines.push((
                "repl_peer_writes_taken".to_string(),
                tally.taken.to_string(),
            ));
            lines.push((
                "repl_conflicts_resolved".to_string(),
                tally.conflicts_resolved.to_string(),
            ));
        }
        lines.push((
            "repl_groups_taken".to_string(),
            self.groups_taken.load(Ordering::Relaxed).to_string(),
        ));
        lines.push((
            "repl_snapshots_sent".to_string(),
            self.snapshots_sent.load(Ordering::Relaxed).to_string(),
        ));
        lines.push((
            "repl_replicas_refused".to_string(),
            self.replicas_refused.load(Ordering::Relaxed).to_string(),
        ));
        let replicas = self.replicas();
        lines.push(("repl_replicas".to_string(), replicas.len().to_string()));
        let last = replication.position().map_or(0, |position| position.lsn);
        let now = unix_micros();
        for (n, replica) in replicas.iter().enumerate() {
            lines.push((
                format!("repl_replica_{n}"),
                replica.describe(last, now, ','),
            ));
        }
        lines
    }

    /// `replicas`: one line per attached replica, then `END`.
    pub fn report(&self, shared: &Shared, out: &mut Vec<u8>) {
        let last = shared
            .store
            .replication()
            .and_then(|replication| replication.position())
            .map_or(0, |position| position.lsn);
        let now = unix_micros();
        let mut lines = Vec::new();
        if let Some(link) = self.master() {
            let (taken, _) = link.taken();
            let lag = link.lag();
            let mut line = format!(
                "MASTER {} state={} lsn={taken} lag_entries={} lag_ms={}",
                link.master,
                link.state().name(),
                lag.entries,
                lag.millis
            );
            let error = link.last_error();
            if !error.is_empty() {
                line.push_str(&format!(
                    " error={}",
                    error.replace(char::is_whitespace, "_")
                ));
            }
            lines.push(line);
        }
        for peer in self.peers() {
            lines.push(format!("PEER {}", peer.describe(' ')));
        }
        for replica in self.replicas() {
            lines.push(format!("REPLICA {}", replica.describe(last, now, ' ')));
        }
        for line in lines {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"END\r\n");
    }
}

/// µs since the Unix epoch.
pub(crate) fn unix_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

#[cfg(test)]
mod tests {
    use super::master_address;

    #[test]
    fn a_master_address_brackets_ipv6_once_and_refuses_what_is_no_host_name() {
        let address = |host: &[u8], port| master_address(host, port);
        assert_eq!(address(b"::1", 11211).unwrap(), "[::1]:11211");
        assert_eq!(address(b"[::1]", 11211).unwrap(), "[::1]:11211");
        assert_eq!(address(b"10.0.0.2", 80).unwrap(), "10.0.0.2:80");
        assert_eq!(address(b"db.local", 80).unwrap(), "db.local:80");
        assert_eq!(address(b"h\nforged line", 80), None);
        assert_eq!(address(b"h\x1b[2J", 80), None);
        assert_eq!(address(&[b'h'; 256], 80), None);
    }
}
