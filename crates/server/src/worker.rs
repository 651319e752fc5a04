//! A worker thread: one mio event loop serving its share of the connections.
//!
//! Reads go into the worker's scratch buffer, so an idle connection holds no
//! buffer of its own; only a partial request or an unsent reply is kept with
//! the connection. Each readiness event gets one read and one write per batch
//! of requests; a short read means the socket is drained (mio is
//! edge-triggered), which saves the extra read that would return EAGAIN.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use slab::Slab;

use kura_proto::Protocol;
use kura_store::{AckFence, AckSpan, AckState};

use crate::exec::backup::{BackupJob, BackupRequest};
use crate::exec::metadump::Metadump;
use crate::exec::Context;
use crate::line_wait::LineWait;
use crate::pending_output::PendingOutput;
use crate::session::{Session, Speaks, Stop};
use crate::tls::TlsStream;
use crate::watch::{CloseReason, Watcher};
use crate::{ConnInfo, ProtocolChoice, Shared};

const WAKER: Token = Token(usize::MAX);
/// Size of the per-worker read buffer, and the least a connection reads at once.
const READ_CHUNK: usize = 64 * 1024;
/// Reads per readiness event before yielding to other connections.
const READS_PER_EVENT: usize = 16;

/// A connection on its way from the acceptor to a worker.
pub struct NewConnection {
    pub id: u64,
    pub stream: Stream,
    pub peer: String,
    pub listen: String,
    pub speaks: Speaks,
}

/// How the acceptor reaches a worker.
pub struct Inbox {
    pub sender: Sender<NewConnection>,
    pub waker: Arc<Waker>,
}

/// A client socket: TCP, TLS over TCP, or Unix-domain.
pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Unix(UnixStream),
}

impl Stream {
    /// A short read proves the socket drained only when nothing sits
    /// between it and us; TLS may hold decrypted bytes of a record read.
    fn short_read_drains(&self) -> bool {
        !matches!(self, Stream::Tls(_))
    }

    /// Bytes accepted by a write that still wait below us (TLS records).
    fn holds_output(&self) -> bool {
        matches!(self, Stream::Tls(tls) if tls.wants_write())
    }

    /// Sends what waits below us; Ok(true) when nothing is left.
    fn send_held(&mut self) -> io::Result<bool> {
        match self {
            Stream::Tls(tls) => tls.send_records(),
            _ => Ok(true),
        }
    }

    /// Ends a TCP connection without a reset: closing a socket that holds
    /// unread input makes the kernel send RST and drop the replies it has
    /// not sent yet (input pipelined after a `quit`).
    /// Sends the end after the replies, then drops the input that already
    /// arrived, up to a bound; input arriving later still meets a reset, as
    /// with memcached (`docs/decisions/closing-connections.md`).
    fn end_gently(&mut self) {
        const MOST_DROPPED: usize = 256 << 10;
        let tcp = match self {
            Stream::Tcp(tcp) => tcp,
            Stream::Tls(tls) => &mut tls.tcp,
            Stream::Unix(_) => return,
        };
        if tcp.shutdown(std::net::Shutdown::Write).is_err() {
            return;
        }
        let (mut dropped, mut scratch) = (0, [0u8; 16 << 10]);
        while dropped < MOST_DROPPED {
            match tcp.read(&mut scratch) {
                Ok(0) | Err(_) => return,
                Ok(read) => dropped += read,
            }
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(registry, token, interest),
            Stream::Tls(s) => s.tcp.register(registry, token, interest),
            Stream::Unix(s) => s.register(registry, token, interest),
        }
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(registry, token, interest),
            Stream::Tls(s) => s.tcp.reregister(registry, token, interest),
            Stream::Unix(s) => s.reregister(registry, token, interest),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(registry),
            Stream::Tls(s) => s.tcp.deregister(registry),
            Stream::Unix(s) => s.deregister(registry),
        }
    }
}

struct Connection {
    stream: Stream,
    session: Session,
    /// Bytes received but not yet served: a partial request, or requests
    /// left when the connection yielded.
    input: Vec<u8>,
    /// `input` holds complete requests that wait only for their turn.
    unserved: bool,
    /// Whether `input` waits for a line end, and how much of it is known
    /// to hold none.
    line_wait: LineWait,
    /// Reply bytes the socket did not take yet, or may not take yet.
    output: PendingOutput,
    /// Replies wait for the appends of these writes (empty: none). Held
    /// replies are the tail of `output`; replies are never reordered, so a
    /// fence holds everything composed after the writes as well.
    fence: AckSpan,
    /// Close once the held replies are sent (`quit` after a write, or the
    /// client's end of file).
    closing: bool,
    /// The peer's FIN has been seen: a short read no longer proves the
    /// socket drained (edge-triggered, data and FIN come as one event), so
    /// read on until end of file.
    peer_closed: bool,
    /// Listed in the worker's `held` connections.
    held: bool,
    /// The socket may hold unread bytes: set by every readiness event,
    /// cleared by a read that drained it. A connection released after its
    /// append then reads only if the client sent more meanwhile, not to
    /// learn that it did not (one `recv` per set, not two).
    may_read: bool,
    interest: Interest,
    info: Arc<ConnInfo>,
    /// Set once the connection ran `watch`: it serves no more requests and
    /// is sent its watcher's queued log lines instead.
    watcher: Option<Arc<Watcher>>,
    /// An `lru_crawler metadump` under way: its parts are written before
    /// any request after it is served.
    dump: Option<Metadump>,
    /// A backup it asked for (`backup`, `copy`) runs: its reply is sent
    /// before any request after it is served.
    backup: Option<BackupJob>,
    /// What `input` and `output` count against `--max-buffered`.
    buffered: usize,
}

/// What a connection waits for after being served.
enum Next {
    /// More input, or room to write.
    Wait,
    /// It had more to do but used its turn.
    Yield,
    Close,
    /// It asked to become a log watcher of these kinds.
    Watch(u32),
    /// It asked to become a replica's link.
    Replicate(kura_proto::replication::LinkRequest),
    /// It asked for a backup, to be made on a thread of its own.
    Backup(BackupRequest),
}

/// Buffers shared by all connections of a worker.
struct Scratch {
    input: Vec<u8>,
    output: Vec<u8>,
    /// A connection wrote this round: ask the engine to append.
    wrote: bool,
}

pub struct Worker {
    id: usize,
    poll: Poll,
    inbox: Receiver<NewConnection>,
    connections: Slab<Connection>,
    ready: VecDeque<usize>,
    scratch: Scratch,
    shared: Arc<Shared>,
    fixed_protocol: Option<Protocol>,
    /// Connections whose replies wait for an append.
    held: Vec<usize>,
    /// The oldest ticket a held connection waits for (0: none); the engine
    /// wakes this worker when it is decided.
    wanted: Arc<AtomicU64>,
    /// Wakes this worker's loop; a watcher's queue uses it.
    waker: Arc<Waker>,
    /// Connections that are log watchers, served when the waker fires.
    watching: Vec<usize>,
    /// Connections whose backup runs; its thread fires the waker when it ends.
    backing_up: Vec<usize>,
}

impl Worker {
    pub fn new(id: usize, shared: Arc<Shared>) -> io::Result<(Worker, Inbox)> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (sender, inbox) = channel();
        let wanted = Arc::new(AtomicU64::new(0));
        {
            let wanted = wanted.clone();
            let waker = waker.clone();
            shared.store.on_ack_progress(Box::new(move |decided| {
                let ticket = wanted.load(Ordering::SeqCst);
                if ticket != 0 && ticket <= decided {
                    let _ = waker.wake();
                }
            }));
        }
        let fixed_protocol = fixed_protocol(&shared);
        let worker = Worker {
            id,
            poll,
            inbox,
            connections: Slab::new(),
            ready: VecDeque::new(),
            scratch: Scratch {
                input: vec![0; READ_CHUNK],
                output: Vec::with_capacity(READ_CHUNK),
                wrote: false,
            },
            shared,
            fixed_protocol,
            held: Vec::new(),
            backing_up: Vec::new(),
            wanted,
            waker: waker.clone(),
            watching: Vec::new(),
        };
        Ok((worker, Inbox { sender, waker }))
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let idle_timeout = self.shared.config.idle_timeout;
        let mut next_idle_check = Instant::now();
        loop {
            let timeout = if !self.ready.is_empty() {
                Some(Duration::ZERO)
            } else if !self.watching.is_empty() {
                Some(crate::watch::FLUSH_INTERVAL)
            } else {
                idle_timeout.map(|_| Duration::from_secs(1))
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                panic!("worker {} cannot poll: {e}", self.id);
            }
            for event in events.iter() {
                match event.token() {
                    WAKER => {
                        self.adopt_new_connections();
                        self.release_held();
                        self.answer_backups();
                    }
                    Token(key) => {
                        if let Some(connection) = self.connections.get_mut(key) {
                            connection.may_read = true;
                            if event.is_read_closed() {
                                connection.peer_closed = true;
                            }
                        }
                        self.serve(key)
                    }
                }
            }
            for _ in 0..self.ready.len() {
                if let Some(key) = self.ready.pop_front() {
                    self.serve(key);
                }
            }
            self.serve_watchers();
            if std::mem::take(&mut self.scratch.wrote) {
                // One append for every write of this round (and for the
                // writes its reads showed).
                self.shared.store.request_append();
            }
            self.arm_held();
            if self.shared.held_buffers.over_limit() {
                self.close_buffer_holders();
            }
            if self.shared.stopping() {
                self.close_all();
                return;
            }
            if let Some(limit) = idle_timeout {
                if Instant::now() >= next_idle_check {
                    self.close_idle(limit);
                    next_idle_check = Instant::now() + Duration::from_secs(1);
                }
            }
        }
    }

    fn adopt_new_connections(&mut self) {
        while let Ok(new) = self.inbox.try_recv() {
            let info = Arc::new(ConnInfo {
                id: new.id,
                peer: new.peer,
                listen: new.listen,
                last_active: self.shared.store.clock().now().into(),
                reading_value: false.into(),
            });
            let entry = self.connections.vacant_entry();
            let key = entry.key();
            let mut connection = Connection {
                stream: new.stream,
                session: match new.speaks {
                    Speaks::Memcached => Session::new(self.fixed_protocol),
                    Speaks::Tyrant => Session::tyrant(),
                    Speaks::HandlerSocket { write } => Session::handlersocket(write),
                },
                input: Vec::new(),
                unserved: false,
                line_wait: LineWait::default(),
                output: PendingOutput::default(),
                fence: AckSpan::default(),
                closing: false,
                peer_closed: false,
                held: false,
                may_read: true,
                buffered: 0,
                interest: Interest::READABLE,
                info: info.clone(),
                watcher: None,
                dump: None,
                backup: None,
            };
            if connection
                .stream
                .register(self.poll.registry(), Token(key), Interest::READABLE)
                .is_err()
            {
                self.shared
                    .connections
                    .current
                    .fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            entry.insert(connection);
            self.shared.watchers.conn_new(&info.peer, info.id);
            self.shared
                .connections_registry
                .lock()
                .insert(info.id, info);
            // The client may have written before we registered: serve now.
            self.serve(key);
        }
    }

    fn serve(&mut self, key: usize) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let ctx = Context {
            shared: &self.shared,
            counters: &self.shared.counters[self.id],
            conn_id: connection.info.id,
            fence: AckFence::default(),
            datagram: false,
        };
        let next = if connection.watcher.is_some() {
            serve_watcher(connection, &mut self.scratch, &ctx)
        } else if connection.dump.is_some() {
            serve_dump(connection, &ctx)
        } else if connection.backup.is_some() {
            serve_backup(connection, &ctx)
        } else {
            serve_connection(connection, &mut self.scratch, &ctx)
        };
        // The bytes waiting; the buffers' spare room is given back as they
        // drain (the input's below, `PendingOutput`'s as it is sent).
        let holds = connection.input.len() + connection.output.unsent().len();
        let held_buffers = &self.shared.held_buffers;
        if held_buffers.update(&mut connection.buffered, holds) && !matches!(next, Next::Close) {
            // Past --max-buffered: this one goes, and the other workers
            // close theirs that hold bytes past their free share.
            self.shared.counters[self.id].buffer_kicks.incr();
            self.close(key, CloseReason::BufferLimit);
            self.shared.wake_workers();
            return;
        }
        match next {
            Next::Wait if !connection.fence.is_empty() && !connection.output.is_empty() => {
                // Nothing to do until the append: no reads, no writes.
                if !connection.held {
                    connection.held = true;
                    self.held.push(key);
                }
                if connection.interest != Interest::READABLE {
                    connection.interest = Interest::READABLE;
                    if connection
                        .stream
                        .reregister(self.poll.registry(), Token(key), Interest::READABLE)
                        .is_err()
                    {
                        self.close(key, CloseReason::Error);
                    }
                }
            }
            Next::Wait => {
                let wanted = if connection.output.is_empty() && !connection.stream.holds_output() {
                    Interest::READABLE
                } else {
                    Interest::READABLE | Interest::WRITABLE
                };
                if wanted != connection.interest {
                    connection.interest = wanted;
                    if connection
                        .stream
                        .reregister(self.poll.registry(), Token(key), wanted)
                        .is_err()
                    {
                        self.close(key, CloseReason::Error);
                    }
                }
            }
            Next::Yield => {
                ctx.counters.conn_yields.incr();
                self.ready.push_back(key);
            }
            Next::Close => {
                let reason = if connection.session.closed_on_error() {
                    CloseReason::Error
                } else {
                    CloseReason::Normal
                };
                self.close(key, reason)
            }
            Next::Watch(kinds) => self.start_watching(key, kinds),
            Next::Replicate(request) => self.hand_to_replication(key, request),
            Next::Backup(request) => {
                let (shared, waker) = (self.shared.clone(), self.waker.clone());
                let job = self.shared.backups.start(request, shared, waker);
                connection.backup = Some(job);
                self.backing_up.push(key);
                // Sends the replies before it while the backup runs.
                self.ready.push_back(key);
            }
        }
    }

    /// Serves the connections whose backup has ended: its reply, then the
    /// requests after it.
    fn answer_backups(&mut self) {
        let connections = &self.connections;
        let ended = |key: &usize| {
            connections
                .get(*key)
                .and_then(|connection| connection.backup.as_ref())
                .is_none_or(|job| job.reply().is_some())
        };
        let (done, running): (Vec<usize>, Vec<usize>) =
            self.backing_up.iter().copied().partition(ended);
        self.backing_up = running;
        for key in done {
            self.serve(key);
        }
    }

    /// Turns a connection into a log watcher (`watch`). Its queue starts
    /// with `OK`; the hub wakes this worker when lines arrive.
    fn start_watching(&mut self, key: usize, kinds: u32) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let waker = self.waker.clone();
        let wake = Box::new(move || {
            let _ = waker.wake();
        });
        match self.shared.watchers.add(connection.info.id, kinds, wake) {
            Some(watcher) => {
                // Whatever the client sent after `watch` is ignored, as in memcached.
                connection.input = Vec::new();
                connection.unserved = false;
                connection.watcher = Some(watcher);
                self.watching.push(key);
            }
            None => connection
                .output
                .extend_from_slice(b"WATCHER_TOO_MANY log watcher limit reached\r\n"),
        }
        self.serve(key);
    }

    /// Gives a connection that sent `replicate` to a replication thread:
    /// it leaves this loop for good (its feed keeps its place in the
    /// connection count).
    fn hand_to_replication(&mut self, key: usize, request: kura_proto::replication::LinkRequest) {
        let Some(connection) = self.take_out(key) else {
            return;
        };
        let stream = match connection.stream {
            Stream::Tcp(stream) => crate::replication::LinkStream::Tcp(stream.into()),
            Stream::Unix(stream) => crate::replication::LinkStream::Unix(stream.into()),
            // Replication does not run over TLS: the connection closes.
            Stream::Tls(_) => return,
        };
        let peer = connection.info.peer.clone();
        crate::replication::serve_replica(self.shared.clone(), stream, request, peer);
    }

    /// Sends the log lines queued for this worker's watchers.
    fn serve_watchers(&mut self) {
        for index in 0..self.watching.len() {
            let Some(&key) = self.watching.get(index) else {
                continue;
            };
            let queued = self.connections.get(key).is_some_and(|c| {
                c.output.is_empty() && c.watcher.as_ref().is_some_and(|w| w.has_queued())
            });
            if queued {
                self.serve(key);
            }
        }
    }

    /// Serves the held connections whose append is decided.
    fn release_held(&mut self) {
        let store = &self.shared.store;
        let mut released = Vec::new();
        self.held.retain(|&key| {
            let Some(connection) = self.connections.get_mut(key) else {
                return false;
            };
            if !connection.fence.is_empty()
                && store.ack_state(connection.fence) == AckState::Waiting
            {
                return true;
            }
            connection.held = false;
            released.push(key);
            false
        });
        for key in released {
            self.serve(key);
        }
    }

    /// Tells the engine which ticket to wake this worker for. A decision
    /// that landed before the ticket was published is caught here.
    fn arm_held(&mut self) {
        let oldest = self
            .held
            .iter()
            .filter_map(|&key| self.connections.get(key))
            .map(|connection| connection.fence.last)
            .filter(|&last| last != 0)
            .min()
            .unwrap_or(0);
        self.wanted.store(oldest, Ordering::SeqCst);
        if oldest != 0 && self.shared.store.ack_state(AckSpan::of(oldest)) != AckState::Waiting {
            self.release_held();
        }
    }

    fn close(&mut self, key: usize, reason: CloseReason) {
        if let Some(mut connection) = self.take_out(key) {
            // Only a close the client asked for ends gently: memcached's
            // clients take the reset after a refusal as the sign to reconnect
            // (docs/decisions/closing-connections.md), and a reset frees what
            // a client held past --max-buffered at once.
            if reason == CloseReason::Normal {
                connection.stream.end_gently();
            }
            let id = connection.info.id;
            if connection.watcher.is_some() {
                self.watching.retain(|&k| k != key);
                self.shared.watchers.remove(id);
            }
            self.shared
                .watchers
                .conn_close(&connection.info.peer, id, reason);
        }
    }

    /// Takes a connection out of this loop and the server's count of them
    /// (to close it, or to hand it to a thread of its own).
    fn take_out(&mut self, key: usize) -> Option<Connection> {
        let mut connection = self.connections.try_remove(key)?;
        let _ = connection.stream.deregister(self.poll.registry());
        (self.shared.held_buffers).release(&mut connection.buffered);
        self.shared
            .connections_registry
            .lock()
            .remove(&connection.info.id);
        self.shared
            .connections
            .current
            .fetch_sub(1, Ordering::Relaxed);
        Some(connection)
    }

    fn close_all(&mut self) {
        let keys: Vec<usize> = self.connections.iter().map(|(key, _)| key).collect();
        // A backup under way ends first, and its reply goes out.
        for &key in &keys {
            if let Some(job) = self.connections.get(key).and_then(|c| c.backup.as_ref()) {
                job.wait();
                self.serve(key);
            }
        }
        for key in keys {
            self.close(key, CloseReason::Shutdown);
        }
    }

    /// Past `--max-buffered`: closes this worker's connections that hold
    /// bytes past their free share (`held_buffers.rs`).
    fn close_buffer_holders(&mut self) {
        let holders: Vec<usize> = (self.connections.iter())
            .filter(|(_, c)| c.buffered > 0)
            .map(|(key, _)| key)
            .collect();
        for key in holders {
            self.shared.counters[self.id].buffer_kicks.incr();
            self.close(key, CloseReason::BufferLimit);
        }
    }

    fn close_idle(&mut self, limit: Duration) {
        let now = self.shared.store.clock().now();
        let limit = limit.as_secs().min(u64::from(u32::MAX)) as u32;
        let idle: Vec<usize> = self
            .connections
            .iter()
            .filter(|(_, c)| {
                // As memcached: not while replies are being sent, nor while
                // a memcached value is read (its states `conn_mwrite`,
                // `conn_nread`), nor while its backup runs.
                c.watcher.is_none()
                    && c.backup.is_none()
                    && c.output.is_empty()
                    && !c.info.reading_value.load(Ordering::Relaxed)
                    && now.saturating_sub(c.info.last_active.load(Ordering::Relaxed)) >= limit
            })
            .map(|(key, _)| key)
            .collect();
        for key in idle {
            self.shared.counters[self.id].idle_kicks.incr();
            self.close(key, CloseReason::IdleTimeout);
        }
    }
}

/// The protocol every connection speaks, if `-B` (or text logins) fix one.
pub(crate) fn fixed_protocol(shared: &Shared) -> Option<Protocol> {
    match shared.config.protocol {
        // As memcached: text logins make every connection a text one,
        // or binary requests would go around them.
        ProtocolChoice::Auto if shared.text_users.is_some() && shared.sasl.is_none() => {
            Some(Protocol::Text)
        }
        ProtocolChoice::Auto => None,
        ProtocolChoice::Ascii => Some(Protocol::Text),
        ProtocolChoice::Binary => Some(Protocol::Binary),
    }
}

/// Serves one connection until it would block, used its turn, or must close.
fn serve_connection(connection: &mut Connection, scratch: &mut Scratch, ctx: &Context<'_>) -> Next {
    let mut budget = ctx.shared.config.requests_per_event.max(1);
    // A connection may buffer one whole request: the largest item plus its command line.
    let max_input = ctx.shared.config.max_item_size + READ_CHUNK;
    if connection.closing {
        return match send_pending(connection, ctx) {
            Ok(true) | Err(_) => Next::Close,
            Ok(false) => Next::Wait,
        };
    }
    for _ in 0..READS_PER_EVENT {
        // Send what is pending first: a client that does not read is served no more.
        match send_pending(connection, ctx) {
            Ok(true) => {}
            Ok(false) => return Next::Wait,
            Err(_) => return Next::Close,
        }
        scratch.output.clear();
        let (stop, drained) = if connection.unserved {
            let (used, stop) =
                connection
                    .session
                    .serve(&connection.input, &mut scratch.output, ctx, &mut budget);
            served_some(connection, used, ctx);
            connection.input.drain(..used);
            connection.line_wait.forget();
            (stop, false)
        } else if !connection.may_read {
            return Next::Wait;
        } else if connection.input.is_empty() {
            let read = match read_into(&mut connection.stream, &mut scratch.input) {
                Ok(0) => return end_of_input(connection),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    connection.may_read = false;
                    return Next::Wait;
                }
                Err(_) => return Next::Close,
            };
            ctx.counters.bytes_read.add(read as u64);
            let (used, stop) = connection.session.serve(
                &scratch.input[..read],
                &mut scratch.output,
                ctx,
                &mut budget,
            );
            served_some(connection, used, ctx);
            connection
                .input
                .extend_from_slice(&scratch.input[used..read]);
            connection.line_wait.forget();
            let short = read < scratch.input.len() && connection.stream.short_read_drains();
            (stop, short && !connection.peer_closed)
        } else {
            if connection.input.len() >= max_input {
                // One request larger than anything we may store: give up on it.
                return Next::Close;
            }
            let start = connection.input.len();
            let room = start.max(READ_CHUNK).min(max_input - start);
            connection.input.resize(start + room, 0);
            let read = match connection.stream.read(&mut connection.input[start..]) {
                Ok(0) => {
                    connection.input.truncate(start);
                    return end_of_input(connection);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    connection.input.truncate(start);
                    connection.may_read = false;
                    return Next::Wait;
                }
                Err(_) => return Next::Close,
            };
            connection.input.truncate(start + read);
            ctx.counters.bytes_read.add(read as u64);
            let short = read < room && connection.stream.short_read_drains();
            let short_of_awaited = connection.input.len() < connection.session.awaited_bytes();
            if short_of_awaited || connection.line_wait.still_waiting(&connection.input, start) {
                (Stop::NeedInput, short && !connection.peer_closed)
            } else {
                let (used, stop) = connection.session.serve(
                    &connection.input,
                    &mut scratch.output,
                    ctx,
                    &mut budget,
                );
                served_some(connection, used, ctx);
                connection.input.drain(..used);
                let input = &connection.input;
                let awaits_line = used == 0
                    && matches!(stop, Stop::NeedInput)
                    && connection.session.awaits_line(input);
                connection.line_wait.served(input, awaits_line);
                (stop, short && !connection.peer_closed)
            }
        };
        if drained {
            connection.may_read = false;
        }
        if let Some(span) = ctx.fence.take() {
            // A fence whose writes all went through holds nothing back
            // (writes with no reply, `noreply` or quiet, leave it up):
            // a failure after it must not close this connection.
            let fence = connection.fence;
            if !fence.is_empty() && ctx.shared.store.ack_state(fence) == AckState::Ready {
                connection.fence = AckSpan::default();
            }
            connection.fence = connection.fence.join(span);
            scratch.wrote = true;
        }
        connection.unserved = matches!(
            stop,
            Stop::Budget | Stop::OutputFull | Stop::Metadump(_) | Stop::Backup(_)
        );
        let reading_value = !connection.line_wait.holds_no_line(&connection.input)
            && connection.session.reads_memcached_value(&connection.input);
        if connection.info.reading_value.load(Ordering::Relaxed) != reading_value {
            connection
                .info
                .reading_value
                .store(reading_value, Ordering::Relaxed);
        }
        let (held, capacity) = (connection.input.len(), connection.input.capacity());
        if held == 0 && capacity > READ_CHUNK {
            // Give back the memory of a large request once it is served.
            connection.input = Vec::new();
        } else if capacity > 2 * (held + held.max(READ_CHUNK)) {
            // Or what the next read would not use, when a little of the
            // next request is left (not less: it would grow back at once).
            connection.input.shrink_to(held + held.max(READ_CHUNK));
        }
        let written = write_replies(connection, &scratch.output, ctx);
        if scratch.output.capacity() > 4 * crate::session::OUTPUT_HIGH_WATER {
            // One reply far past the mark (a multi-get of large values):
            // its memory is not kept for the worker's next replies.
            scratch.output = Vec::new();
        }
        if written.is_err() {
            return Next::Close;
        }
        match stop {
            // What the client is owed goes out first (memcached closes
            // after the write too): replies composed before a `quit`, or a
            // `Connection: close`, and a write's held reply.
            Stop::Close if !connection.output.is_empty() || connection.stream.holds_output() => {
                connection.closing = true;
                return Next::Wait;
            }
            Stop::Close => return Next::Close,
            Stop::Shutdown => {
                ctx.shared.request_shutdown();
                return Next::Close;
            }
            Stop::Watch(kinds) => return Next::Watch(kinds),
            Stop::Replicate(request) => return Next::Replicate(request),
            Stop::Metadump(classes) => {
                connection.dump = Some(Metadump::new(classes));
                return Next::Yield;
            }
            Stop::Backup(request) => return Next::Backup(request),
            Stop::Budget if budget == 0 => return Next::Yield,
            Stop::NeedInput if drained => {
                return if connection.output.is_empty() {
                    Next::Wait
                } else {
                    // Let the loop try the pending write once more.
                    match send_pending(connection, ctx) {
                        Ok(_) => Next::Wait,
                        Err(_) => Next::Close,
                    }
                };
            }
            _ => {}
        }
    }
    Next::Yield
}

/// A log watcher: what the client sends is read only to notice it leave;
/// queued lines are taken only once the socket took the previous ones, so
/// a slow reader holds at most one queue's worth of unsent bytes here.
fn serve_watcher(connection: &mut Connection, scratch: &mut Scratch, ctx: &Context<'_>) -> Next {
    // A client that keeps sending gets its turn, as any other, and no more.
    let mut then = Next::Yield;
    for _ in 0..READS_PER_EVENT {
        match read_into(&mut connection.stream, &mut scratch.input) {
            Ok(0) => return Next::Close,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                then = Next::Wait;
                break;
            }
            Err(_) => return Next::Close,
        }
    }
    let Some(watcher) = connection.watcher.clone() else {
        return then;
    };
    loop {
        match send_pending(connection, ctx) {
            Ok(true) => {}
            Ok(false) => return then,
            Err(_) => return Next::Close,
        }
        if !watcher.take(connection.output.buffer()) {
            return then;
        }
    }
}

/// A connection writing a metadump: a part is composed once the socket
/// took the one before, so it holds one part's bytes, and a few parts a
/// turn, so its worker's other connections wait little.
fn serve_dump(connection: &mut Connection, ctx: &Context<'_>) -> Next {
    for _ in 0..READS_PER_EVENT {
        match send_pending(connection, ctx) {
            Ok(true) => {}
            Ok(false) => return Next::Wait,
            Err(_) => return Next::Close,
        }
        let Some(dump) = &mut connection.dump else {
            break;
        };
        if !dump.write_part(ctx, connection.output.buffer()) {
            // Its `END` is sent: the requests after it are served next.
            connection.dump = None;
            break;
        }
        // Not idle (`-o idle_timeout`) while it dumps.
        served_some(connection, 1, ctx);
    }
    Next::Yield
}

/// A connection whose backup runs: the replies before it go out; once it
/// ended, its reply follows them, and the requests after it are served.
fn serve_backup(connection: &mut Connection, ctx: &Context<'_>) -> Next {
    if send_pending(connection, ctx).is_err() {
        return Next::Close;
    }
    let Some(reply) = connection.backup.as_ref().and_then(BackupJob::reply) else {
        return Next::Wait;
    };
    let reply = reply.to_vec();
    connection.backup = None;
    // Not idle (`-o idle_timeout`) for the time the backup took.
    served_some(connection, 1, ctx);
    match write_replies(connection, &reply, ctx) {
        Ok(()) => Next::Yield,
        Err(_) => Next::Close,
    }
}

/// Requests were taken from the input (`used` bytes): the connection is
/// not idle (`-o idle_timeout`). Bytes that complete no request do not
/// count, as memcached counts from a connection's last command.
fn served_some(connection: &Connection, used: usize, ctx: &Context<'_>) {
    if used > 0 {
        let now = ctx.shared.store.clock().now();
        connection.info.last_active.store(now, Ordering::Relaxed);
    }
}

/// The client sent its end of file: close once what it is owed is sent.
fn end_of_input(connection: &mut Connection) -> Next {
    if connection.output.is_empty() && !connection.stream.holds_output() {
        return Next::Close;
    }
    connection.closing = true;
    Next::Wait
}

fn read_into(stream: &mut Stream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Writes fresh replies; what the socket does not take is kept for later.
fn write_replies(connection: &mut Connection, replies: &[u8], ctx: &Context<'_>) -> io::Result<()> {
    if replies.is_empty() {
        return Ok(());
    }
    if !connection.output.is_empty() || !fence_lifted(connection, ctx)? {
        connection.output.extend_from_slice(replies);
        return Ok(());
    }
    let written = write_some(&mut connection.stream, replies)?;
    ctx.counters.bytes_written.add(written as u64);
    connection.output.extend_from_slice(&replies[written..]);
    Ok(())
}

/// Sends pending output; true when nothing is left.
fn send_pending(connection: &mut Connection, ctx: &Context<'_>) -> io::Result<bool> {
    if connection.output.is_empty() {
        return connection.stream.send_held();
    }
    if !fence_lifted(connection, ctx)? {
        return Ok(false);
    }
    let written = write_some(&mut connection.stream, connection.output.unsent())?;
    ctx.counters.bytes_written.add(written as u64);
    connection.output.sent(written);
    Ok(connection.output.is_empty())
}

/// Whether replies may go out: the writes before them are appended. A
/// failed append is an error: the connection closes without acknowledging.
fn fence_lifted(connection: &mut Connection, ctx: &Context<'_>) -> io::Result<bool> {
    if connection.fence.is_empty() {
        return Ok(true);
    }
    match ctx.shared.store.ack_state(connection.fence) {
        AckState::Ready => {
            connection.fence = AckSpan::default();
            Ok(true)
        }
        AckState::Waiting => Ok(false),
        AckState::Failed => Err(io::Error::other("the append of a write failed")),
    }
}

/// Writes as much as the socket takes without blocking.
fn write_some(stream: &mut Stream, mut bytes: &[u8]) -> io::Result<usize> {
    let total = bytes.len();
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(total - bytes.len())
}
