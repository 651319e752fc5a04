//! kura's network server.
//!
//! ```text
//!  acceptor thread ──(new connection, round robin)──▶ worker threads (one mio loop each)
//!                                                       │ read ─▶ session::serve ─▶ proto parse
//!                                                       │        ─▶ exec ─▶ store ─▶ reply bytes
//!                                                       └ one write per batch of replies
//!  maintenance thread: store.maintain() (expired items reclaimed in the background)
//! ```
//!
//! `start` binds the listeners and returns a handle; tests start a server on
//! port 0 in-process and talk to it over real sockets.

pub mod auth;
pub mod config;
mod cyrus;
pub mod exec;
mod held_buffers;
mod line_wait;
mod listener;
mod pending_output;
pub mod replication;
mod reply_budget;
pub mod session;
pub mod stats;
pub mod tls;
pub mod udp;
pub mod watch;
mod worker;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use kura_store::Store;
use parking_lot::Mutex;

pub use config::{
    ListenAddr, MasterProtocol, ProtocolChoice, ServerConfig, TlsSettings, TyrantDatabase,
};

/// State every thread of the server shares.
pub struct Shared {
    pub config: ServerConfig,
    pub store: Arc<dyn Store>,
    /// One set of counters per worker, written only by that worker, then
    /// the UDP thread's and the Tokyo Tyrant follower's.
    pub counters: Box<[stats::Counters]>,
    /// The counts at the last `stats reset`, which `stats` subtracts: a
    /// reset that zeroed them would write counters other threads own (and
    /// race their increments).
    pub stats_reset: Mutex<stats::ResetBaseline>,
    pub connections: stats::ConnectionStats,
    /// Open connections, for `stats conns`.
    pub connections_registry: Mutex<BTreeMap<u64, Arc<ConnInfo>>>,
    /// The listening sockets as `stats conns` names them (`tcp:…`,
    /// `unix:…`, `udp:…`). They are numbered 1 to n there, as memcached
    /// shows them by file descriptor, and connections are numbered after them.
    pub listening: Vec<String>,
    /// Whether the store evicts (memcached's `-M` turns it off), for `stats settings`.
    pub evictions_enabled: bool,
    /// TLS sessions' settings, certificates and counters, when `-Z` is on.
    pub tls: Option<Arc<tls::TlsAcceptor>>,
    /// Users a text connection must log in as first (`-Y`).
    pub text_users: Option<auth::Users>,
    /// Who checks a binary connection's SASL credentials (`-S`).
    pub sasl: Option<auth::SaslBackend>,
    /// The log watchers (`watch`).
    pub watchers: Arc<watch::Hub>,
    /// Tokyo Tyrant's iterator (`iterinit`, `iternext`): one per database,
    /// shared by every connection, as ttserver's is.
    pub tyrant_iterator: Mutex<Option<exec::tyrant::KeyIterator>>,
    /// The last unique id `genuid` (or a put without a key) handed out.
    pub tyrant_uid: Mutex<exec::uid::LastIds>,
    /// Replication: the master this server follows, the replicas it feeds.
    pub replication: replication::Replication,
    /// The backup under way (`backup`, `copy`).
    pub backups: exec::backup::Backups,
    /// The LRU crawler's commands are on (`lru_crawler enable|disable`;
    /// starts as `-o lru_crawler|no_lru_crawler` says).
    pub lru_crawler: AtomicBool,
    /// What connections hold beyond their sockets, under `--max-buffered`.
    pub held_buffers: held_buffers::HeldBuffers,
    stopping: AtomicBool,
    /// The stop was asked for gracefully (SIGUSR1, `shutdown graceful`):
    /// the memory engine is kept for the next start (`-e`).
    graceful: AtomicBool,
    wakers: OnceLock<Vec<Arc<mio::Waker>>>,
    /// This state itself, for what outlives a request (a follower thread).
    me: std::sync::Weak<Shared>,
}

impl Shared {
    /// Asks every thread to stop; returns at once.
    pub fn request_shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.wake_workers();
    }

    /// Wakes every worker (and the acceptor): something needs them to
    /// look at their connections.
    pub fn wake_workers(&self) {
        for waker in self.wakers.get().into_iter().flatten() {
            let _ = waker.wake();
        }
    }

    /// This state, shared, while the server runs.
    pub fn this(&self) -> Option<Arc<Shared>> {
        self.me.upgrade()
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Asks every thread to stop, and the process to keep the cache for the
    /// next start (memcached's SIGUSR1 and `shutdown graceful`). A stop
    /// already under way stays what it was.
    pub fn request_graceful_shutdown(&self) {
        if !self.stopping() {
            // Before `stopping`: whoever sees the threads stopped sees this.
            self.graceful.store(true, Ordering::SeqCst);
        }
        self.request_shutdown();
    }

    /// Whether the stop was asked for gracefully.
    pub fn graceful(&self) -> bool {
        self.graceful.load(Ordering::SeqCst)
    }
}

/// What `stats conns` shows of a connection.
#[derive(Debug)]
pub struct ConnInfo {
    pub id: u64,
    pub peer: String,
    pub listen: String,
    /// Server time of the last request.
    pub last_active: AtomicU32,
    /// Waiting for the rest of a value, not for a command (memcached's
    /// `conn_nread` in `stats conns`).
    pub reading_value: AtomicBool,
}

/// A running server.
pub struct ServerHandle {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    local_addrs: Vec<SocketAddr>,
    tyrant_addrs: Vec<SocketAddr>,
    handlersocket_addrs: Vec<(bool, SocketAddr)>,
    udp_addrs: Vec<SocketAddr>,
}

impl ServerHandle {
    /// The first TCP address the server listens on (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addrs.first().copied()
    }

    /// Every TCP address the server listens on.
    pub fn tcp_addrs(&self) -> &[SocketAddr] {
        &self.local_addrs
    }

    /// The first address speaking Tokyo Tyrant's protocol (`--tyrant-port`).
    pub fn tyrant_addr(&self) -> Option<SocketAddr> {
        self.tyrant_addrs.first().copied()
    }

    /// The first address speaking HandlerSocket's protocol on the read-only
    /// port (`write` false) or the read-write one.
    pub fn handlersocket_addr(&self, write: bool) -> Option<SocketAddr> {
        self.handlersocket_addrs
            .iter()
            .find(|(is_write, _)| *is_write == write)
            .map(|(_, addr)| *addr)
    }

    /// Every UDP address the server serves.
    pub fn udp_addrs(&self) -> &[SocketAddr] {
        &self.udp_addrs
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Asks the server to stop (as SIGTERM does).
    pub fn shutdown(&self) {
        self.shared.request_shutdown();
    }

    /// Waits until every thread has finished, and the backup under way.
    pub fn wait(self) {
        for thread in self.threads {
            let _ = thread.join();
        }
        self.shared.backups.wait();
    }
}

/// Binds the listeners and starts the acceptor, the workers and the
/// maintenance thread.
pub fn start(
    config: ServerConfig,
    store: Arc<dyn Store>,
    evictions_enabled: bool,
) -> io::Result<ServerHandle> {
    let threads = config.threads.max(1);
    let tls = match &config.tls {
        Some(settings) => Some(Arc::new(
            tls::TlsAcceptor::new(settings).map_err(io::Error::other)?,
        )),
        None => None,
    };
    let text_users = match &config.auth_file {
        Some(path) => Some(auth::Users::load(path).map_err(io::Error::other)?),
        None => None,
    };
    let sasl = match (&config.sasl, &config.sasl_users_file) {
        (false, _) => None,
        (true, Some(path)) => Some(auth::SaslBackend::Builtin(
            auth::Users::load(path).map_err(io::Error::other)?,
        )),
        (true, None) => Some(auth::SaslBackend::Cyrus(
            cyrus::Library::load().map_err(io::Error::other)?,
        )),
    };
    if config.tyrant_port.is_some() && (text_users.is_some() || sasl.is_some()) {
        // Tokyo Tyrant's protocol has no authentication: its port would be
        // a way around the one asked for.
        return Err(io::Error::other(
            "--tyrant-port cannot be combined with authentication (-S, --auth-file): Tokyo Tyrant's protocol has none",
        ));
    }
    if text_users.is_some() && sasl.is_none() && config.protocol == ProtocolChoice::Binary {
        // As memcached: the text logins would not guard binary requests.
        return Err(io::Error::other(
            "--auth-file's logins are for the text protocol: it cannot be combined with -B binary (use -S for SASL)",
        ));
    }
    if config.udp_port.is_some() && (text_users.is_some() || sasl.is_some()) {
        return Err(io::Error::other(
            "-U cannot be combined with authentication (-S, --auth-file): UDP requests have no login",
        ));
    }
    if config.tyrant_db != TyrantDatabase::Hash && store.tables().is_none() {
        return Err(io::Error::other(
            "--tyrant-db btree:NAME and table:NAME need an engine that keeps tables (--engine disk)",
        ));
    }
    let listeners = listener::bind(&config, tls.as_ref())?;
    let local_addrs: Vec<SocketAddr> = listeners.iter().filter_map(|l| l.tcp_addr()).collect();
    let handlersocket_addrs: Vec<(bool, SocketAddr)> = listeners
        .iter()
        .filter_map(|l| match l.speaks() {
            session::Speaks::HandlerSocket { write } => Some((write, l.tcp_addr()?)),
            _ => None,
        })
        .collect();
    if !handlersocket_addrs.is_empty() && store.tables().is_none() {
        return Err(io::Error::other(
            "--hs-read-port and --hs-write-port need an engine that keeps tables (--engine disk)",
        ));
    }
    let tyrant_addrs: Vec<SocketAddr> = listeners
        .iter()
        .filter(|l| l.speaks() == session::Speaks::Tyrant)
        .filter_map(|l| l.tcp_addr())
        .collect();
    // memcached's -s turns the network off, UDP included.
    let udp_sockets = if let (Some(udp_port), None) = (config.udp_port, &config.unix_socket) {
        // One UDP socket per address, however many TCP ports it has.
        let mut ips: Vec<_> = config.listen.iter().map(|l| l.ip).collect();
        ips.sort();
        ips.dedup();
        udp::bind(&ips, udp_port)?
    } else {
        Vec::new()
    };
    let mut listening: Vec<String> = listeners.iter().map(|l| l.name()).collect();
    listening.extend(
        udp_sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .map(|addr| format!("udp:{addr}")),
    );
    let watchers = Arc::new(watch::Hub::new(config.watcher_buffer_bytes));
    store.watch_evictions(watchers.clone());
    let lru_crawler = AtomicBool::new(config.lru_crawler);
    let held_buffers = held_buffers::HeldBuffers::new(config.max_buffered_bytes);
    let shared = Arc::new_cyclic(|me| Shared {
        me: me.clone(),
        config,
        store,
        // One set per worker, the UDP thread's, the Tokyo Tyrant follower's.
        counters: (0..threads + 2)
            .map(|_| stats::Counters::default())
            .collect(),
        stats_reset: Mutex::new(stats::ResetBaseline::default()),
        connections: stats::ConnectionStats::default(),
        connections_registry: Mutex::new(BTreeMap::new()),
        listening,
        evictions_enabled,
        tls,
        text_users,
        sasl,
        watchers,
        backups: exec::backup::Backups::default(),
        lru_crawler,
        held_buffers,
        replication: replication::Replication::default(),
        tyrant_iterator: Mutex::new(None),
        tyrant_uid: Mutex::new(Default::default()),
        stopping: AtomicBool::new(false),
        graceful: AtomicBool::new(false),
        wakers: OnceLock::new(),
    });

    // Before the first connection: a kura replica is read-only from then
    // on (a replica of it must not take a snapshot cut off before this
    // start for a whole one).
    if let Some(master) = &shared.config.replica_of {
        shared
            .replication
            .follow(
                &shared,
                Some((master.clone(), shared.config.replica_protocol)),
                false,
            )
            .map_err(io::Error::other)?;
    }

    let mut wakers = Vec::new();
    let mut inboxes = Vec::new();
    let mut handles = Vec::new();
    for id in 0..threads {
        let (worker, inbox) = worker::Worker::new(id, shared.clone())?;
        wakers.push(inbox.waker.clone());
        inboxes.push(inbox);
        handles.push(spawn_loudly(format!("kura-worker-{id}"), move || {
            worker.run()
        })?);
    }
    let acceptor = listener::Acceptor::new(listeners, inboxes, shared.clone())?;
    wakers.push(acceptor.waker());
    let _ = shared.wakers.set(wakers);
    handles.push(spawn_loudly("kura-acceptor".into(), move || {
        acceptor.run()
    })?);

    let udp_addrs = udp_sockets
        .iter()
        .filter_map(|s| s.local_addr().ok())
        .collect();
    if !udp_sockets.is_empty() {
        let udp = shared.clone();
        handles.push(spawn_loudly("kura-udp".into(), move || {
            udp::run(udp_sockets, &udp, &udp.counters[threads])
        })?);
    }

    if !shared.config.peers.is_empty() {
        shared
            .replication
            .add_peers(&shared, &shared.config.peers)
            .map_err(io::Error::other)?;
    }

    let maintenance = shared.clone();
    handles.push(spawn_loudly("kura-maintenance".into(), move || {
        maintain(&maintenance)
    })?);
    Ok(ServerHandle {
        shared,
        threads: handles,
        local_addrs,
        tyrant_addrs,
        handlersocket_addrs,
        udp_addrs,
    })
}

/// Reclaims expired and flushed items in the background.
fn maintain(shared: &Shared) {
    let interval = shared
        .config
        .maintenance_interval
        .max(Duration::from_millis(10));
    while !shared.stopping() {
        std::thread::park_timeout(interval);
        shared.store.maintain();
    }
}

/// Spawns a thread whose panic ends the whole process with a clear message:
/// a server with a dead worker must not go on half-serving.
fn spawn_loudly(name: String, body: impl FnOnce() + Send + 'static) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_err() {
                tracing::error!(thread = %name, "a server thread panicked; stopping the process");
                eprintln!("kura: thread {name} panicked; stopping the process");
                std::process::abort();
            }
        })
}
