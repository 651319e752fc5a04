//! The acceptor: binds TCP and Unix-domain listeners, accepts connections and
//! hands them round-robin to the workers. Past the connection limit it
//! answers memcached's error line and closes (`maxconns_fast`, the default;
//! on Tokyo Tyrant's and HandlerSocket's ports, whose clients cannot read
//! that line, it only closes), or leaves new connections in the backlog
//! until one closes.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::session::Speaks;
use crate::tls::TlsAcceptor;
use crate::worker::{Inbox, NewConnection, Stream};
use crate::{ServerConfig, Shared};

const WAKER: Token = Token(usize::MAX);

/// What memcached sends when it is over its connection limit.
const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";

pub enum Listener {
    /// With an acceptor, every connection speaks TLS.
    Tcp(TcpListener, SocketAddr, Option<Arc<TlsAcceptor>>, Speaks),
    Unix(UnixListener, String),
}

impl Listener {
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(_, addr, ..) => Some(*addr),
            Listener::Unix(..) => None,
        }
    }

    pub fn speaks(&self) -> Speaks {
        match self {
            Listener::Tcp(.., speaks) => *speaks,
            Listener::Unix(..) => Speaks::Memcached,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Listener::Tcp(_, addr, ..) => format!("tcp:{addr}"),
            Listener::Unix(_, path) => format!("unix:{path}"),
        }
    }

    fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Tcp(listener, _, tls, _) => {
                let (stream, peer) = listener.accept()?;
                // Replies are written once per batch; Nagle would only add delay.
                stream.set_nodelay(true)?;
                let stream = match tls {
                    Some(acceptor) => Stream::Tls(Box::new(acceptor.accept(stream)?)),
                    None => Stream::Tcp(stream),
                };
                Ok((stream, format!("tcp:{peer}")))
            }
            Listener::Unix(listener, path) => {
                let (stream, _) = listener.accept()?;
                Ok((Stream::Unix(stream), format!("unix:{path}")))
            }
        }
    }
}

/// Binds every configured listener: a Unix socket (`-s`) replaces TCP, as in memcached.
/// With `tls`, TCP listeners speak TLS unless their `-l` entry says `notls:`.
pub fn bind(config: &ServerConfig, tls: Option<&Arc<TlsAcceptor>>) -> io::Result<Vec<Listener>> {
    if let Some(path) = &config.unix_socket {
        // A stale socket file from an earlier run would make bind fail.
        if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir()) {
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path).map_err(|e| naming(e, &path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(config.unix_mask))?;
        return Ok(vec![Listener::Unix(listener, path.display().to_string())]);
    }
    let mut listeners = Vec::new();
    // The other protocols' ports, on the `-l` addresses, never TLS.
    let mut ips: Vec<_> = config.listen.iter().map(|l| l.ip).collect();
    ips.sort();
    ips.dedup();
    let others = [
        (config.tyrant_port, Speaks::Tyrant),
        (config.hs_read_port, Speaks::HandlerSocket { write: false }),
        (config.hs_write_port, Speaks::HandlerSocket { write: true }),
    ];
    let tyrant: Vec<_> = others
        .into_iter()
        .filter_map(|(port, speaks)| Some((port?, speaks)))
        .flat_map(|(port, speaks)| {
            ips.iter()
                .map(move |ip| (SocketAddr::new(*ip, port), speaks, false))
        })
        .collect();
    let memcached = config.listen.iter().map(|listen| {
        let addr = SocketAddr::new(listen.ip, listen.port.unwrap_or(config.port));
        (addr, Speaks::Memcached, !listen.no_tls)
    });
    for (addr, speaks, may_use_tls) in memcached.collect::<Vec<_>>().into_iter().chain(tyrant) {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_address(true)?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into()).map_err(|e| naming(e, &addr))?;
        socket
            .listen(config.backlog)
            .map_err(|e| naming(e, &addr))?;
        let std_listener: std::net::TcpListener = socket.into();
        let local = std_listener.local_addr()?;
        let tls = tls.filter(|_| may_use_tls).cloned();
        listeners.push(Listener::Tcp(
            TcpListener::from_std(std_listener),
            local,
            tls,
            speaks,
        ));
    }
    Ok(listeners)
}

/// An error that says which address it is about ("address in use" alone
/// does not tell an operator which of several listeners clashed).
fn naming(error: io::Error, address: &dyn std::fmt::Display) -> io::Error {
    io::Error::new(error.kind(), format!("cannot listen on {address}: {error}"))
}

pub struct Acceptor {
    poll: Poll,
    waker: Arc<Waker>,
    listeners: Vec<Listener>,
    workers: Vec<Inbox>,
    next_worker: usize,
    next_id: u64,
    /// Since when new connections wait in the backlog (at the connection
    /// limit without `maxconns_fast`).
    paused_since: Option<Instant>,
    shared: Arc<Shared>,
}

impl Acceptor {
    pub fn new(
        mut listeners: Vec<Listener>,
        workers: Vec<Inbox>,
        shared: Arc<Shared>,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        for (i, listener) in listeners.iter_mut().enumerate() {
            match listener {
                Listener::Tcp(l, _, _, _) => {
                    poll.registry().register(l, Token(i), Interest::READABLE)?
                }
                Listener::Unix(l, _) => {
                    poll.registry().register(l, Token(i), Interest::READABLE)?
                }
            }
        }
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        Ok(Acceptor {
            poll,
            waker,
            listeners,
            workers,
            next_worker: 0,
            next_id: shared.listening.len() as u64 + 1,
            paused_since: None,
            shared,
        })
    }

    pub fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(64);
        // Set when accept failed for lack of file descriptors: retry soon,
        // since an edge-triggered listener will not report the backlog again.
        let mut retry = false;
        // Warn once per episode of descriptor exhaustion, not every retry.
        let mut warned = false;
        while !self.shared.stopping() {
            // Edge-triggered listeners do not report a backlog left waiting:
            // look again soon.
            let timeout = if retry {
                Some(Duration::from_millis(50))
            } else {
                self.paused_since.map(|_| Duration::from_millis(10))
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!(error = %e, "acceptor poll failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            retry = false;
            for i in 0..self.listeners.len() {
                retry |= self.accept_all(i);
            }
            if retry && !warned {
                tracing::warn!("out of file descriptors; accepting again as connections close");
            }
            warned = retry;
        }
        for worker in &self.workers {
            let _ = worker.waker.wake();
        }
    }

    /// Accepts until the backlog is empty; returns true if it must retry later.
    fn accept_all(&mut self, index: usize) -> bool {
        loop {
            if self.at_limit() {
                return false;
            }
            let (stream, peer) = match self.listeners[index].accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if e.raw_os_error() == Some(libc::EMFILE)
                        || e.raw_os_error() == Some(libc::ENFILE) =>
                {
                    tracing::warn!("out of file descriptors; not accepting for a moment");
                    return true;
                }
                Err(e) => {
                    // A connection reset before accept, and the like: not fatal.
                    tracing::debug!(error = %e, "accept failed");
                    continue;
                }
            };
            self.hand_off(stream, peer, index);
        }
    }

    /// Without `maxconns_fast`, at the connection limit new connections wait
    /// in the backlog, as memcached leaves them once it is out of descriptors
    /// (`accepting_conns 0`, `listen_disabled_num`).
    fn at_limit(&mut self) -> bool {
        let connections = &self.shared.connections;
        let config = &self.shared.config;
        let full = !config.maxconns_fast
            && connections.current.load(Ordering::Relaxed) >= config.max_connections;
        match (full, self.paused_since) {
            (true, None) => {
                self.paused_since = Some(Instant::now());
                connections.not_accepting.store(true, Ordering::Relaxed);
                connections.listen_disabled.fetch_add(1, Ordering::Relaxed);
            }
            (false, Some(since)) => {
                self.paused_since = None;
                connections.not_accepting.store(false, Ordering::Relaxed);
                let waited = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
                connections
                    .listen_disabled_us
                    .fetch_add(waited, Ordering::Relaxed);
            }
            _ => {}
        }
        full
    }

    fn hand_off(&mut self, mut stream: Stream, peer: String, listener: usize) {
        let connections = &self.shared.connections;
        if connections.current.load(Ordering::Relaxed) >= self.shared.config.max_connections {
            connections.rejected.fetch_add(1, Ordering::Relaxed);
            if self.listeners[listener].speaks() == Speaks::Memcached {
                let _ = stream.write_all(TOO_MANY_CONNECTIONS);
            }
            return;
        }
        connections.current.fetch_add(1, Ordering::Relaxed);
        connections.total.fetch_add(1, Ordering::Relaxed);
        let id = self.next_id;
        self.next_id += 1;
        let connection = NewConnection {
            id,
            stream,
            peer,
            listen: self.listeners[listener].name(),
            speaks: self.listeners[listener].speaks(),
        };
        let worker = &self.workers[self.next_worker];
        self.next_worker = (self.next_worker + 1) % self.workers.len();
        if send(&worker.sender, connection).is_ok() {
            let _ = worker.waker.wake();
        } else {
            connections.current.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn send(sender: &Sender<NewConnection>, connection: NewConnection) -> Result<(), ()> {
    sender.send(connection).map_err(|_| ())
}
