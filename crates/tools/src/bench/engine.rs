//! The load generator: each thread runs one mio loop over its share of the
//! clients. A client holds one connection per server (keys are spread over
//! servers by ketama) and issues calls either as fast as its answers come
//! back (closed loop, up to `pipeline` in flight) or on a fixed schedule
//! (open loop), where latency is measured from the *intended* send time, so
//! a stalled server cannot hide behind the requests it delayed (coordinated
//! omission).
//!
//! Values are slices of one pattern at an offset derived from the key, so
//! every value read back can be checked without remembering what was
//! written: a wrong or foreign value is counted as corrupt.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slab::Slab;

use kura_proto::client::{compose, parse_response, Call, ClientProtocol, Op, ResponseKind};

use super::dist::{KeyPattern, KeyPicker, SizeDist};
use super::ketama::Continuum;
use super::tls::{Session, SessionError, TlsClient};

/// Everything a run needs to know.
#[derive(Debug, Clone)]
pub struct Workload {
    pub servers: Vec<SocketAddr>,
    pub protocol: ClientProtocol,
    pub threads: usize,
    /// Clients (each with one connection per server).
    pub clients: u64,
    /// New clients per second; 0 opens them all at once.
    pub conn_rate: f64,
    /// Calls per client; 0 is unbounded (then `duration` ends the run).
    pub calls_per_client: u64,
    /// Open loop: calls per second per client; 0 is closed loop.
    pub call_rate: f64,
    /// Requests in flight per client in closed loop.
    pub pipeline: usize,
    pub duration: Option<Duration>,
    /// Operations with their weights.
    pub mix: Vec<(Op, u32)>,
    /// Keys per get (multi-get when above 1).
    pub multiget: usize,
    pub key_count: u64,
    pub key_pattern: KeyPattern,
    pub key_prefix: String,
    pub sizes: SizeDist,
    pub max_value: usize,
    pub expiry: u32,
    pub verify: bool,
    pub timeout: Duration,
    pub linger: Option<u32>,
    pub seed: u64,
    /// Width of a timeline interval.
    pub interval: Duration,
    /// Connect with TLS (`--tls`); `None`: plaintext.
    pub tls: Option<TlsClient>,
}

/// What one thread measured; merged across threads by the caller.
pub struct Measured {
    pub started: Instant,
    pub elapsed: Duration,
    pub requests: u64,
    pub responses: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// TCP connections: a client opens one per server.
    pub connections_opened: u64,
    pub connect_times: Histogram<u64>,
    pub connection_times: Histogram<u64>,
    pub request_sizes: Histogram<u64>,
    pub response_sizes: Histogram<u64>,
    /// Latency in nanoseconds per operation.
    pub latency: BTreeMap<Op, Histogram<u64>>,
    pub kinds: BTreeMap<ResponseKind, u64>,
    /// Keys that reads (get, gets) asked for and got back, and keys they did
    /// not get: a multi-get counts each of its keys. Two servers' read times
    /// only compare when these agree (a miss is cheaper than a hit).
    pub hits: u64,
    pub misses: u64,
    pub errors: BTreeMap<&'static str, u64>,
    /// Latency of all operations per timeline interval.
    pub timeline: Vec<Histogram<u64>>,
    /// CPU the generator process used during the run: user and system seconds.
    pub cpu_user_secs: f64,
    pub cpu_system_secs: f64,
    /// TLS runs: the version and cipher suite of the first session, e.g.
    /// `TLSv1_3 TLS13_AES_256_GCM_SHA384`.
    pub tls_session: Option<String>,
    /// TLS runs: the first TLS failure in words (counted as "tls" errors),
    /// e.g. a certificate the CA does not sign.
    pub tls_failure: Option<String>,
}

impl Measured {
    pub(crate) fn new(started: Instant) -> Self {
        Measured {
            started,
            elapsed: Duration::ZERO,
            requests: 0,
            responses: 0,
            bytes_sent: 0,
            bytes_received: 0,
            connections_opened: 0,
            connect_times: latency_histogram(),
            connection_times: latency_histogram(),
            request_sizes: size_histogram(),
            response_sizes: size_histogram(),
            latency: BTreeMap::new(),
            kinds: BTreeMap::new(),
            hits: 0,
            misses: 0,
            errors: BTreeMap::new(),
            timeline: Vec::new(),
            cpu_user_secs: 0.0,
            cpu_system_secs: 0.0,
            tls_session: None,
            tls_failure: None,
        }
    }

    pub fn merge(&mut self, other: Measured) {
        self.elapsed = self.elapsed.max(other.elapsed);
        self.requests += other.requests;
        self.responses += other.responses;
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.connections_opened += other.connections_opened;
        let _ = self.connect_times.add(&other.connect_times);
        let _ = self.connection_times.add(&other.connection_times);
        let _ = self.request_sizes.add(&other.request_sizes);
        let _ = self.response_sizes.add(&other.response_sizes);
        for (op, histogram) in other.latency {
            let _ = self
                .latency
                .entry(op)
                .or_insert_with(latency_histogram)
                .add(&histogram);
        }
        for (kind, n) in other.kinds {
            *self.kinds.entry(kind).or_default() += n;
        }
        self.hits += other.hits;
        self.misses += other.misses;
        for (error, n) in other.errors {
            *self.errors.entry(error).or_default() += n;
        }
        self.tls_session = self.tls_session.take().or(other.tls_session);
        self.tls_failure = self.tls_failure.take().or(other.tls_failure);
        for (i, histogram) in other.timeline.into_iter().enumerate() {
            if i >= self.timeline.len() {
                self.timeline.push(histogram);
            } else {
                let _ = self.timeline[i].add(&histogram);
            }
        }
    }

    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Latencies in nanoseconds, 1 ns to 100 s, three significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds")
}

fn size_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1 << 31, 2).expect("valid bounds")
}

/// Live counters for the progress line.
#[derive(Default)]
pub struct Progress {
    pub responses: AtomicU64,
    pub stop: AtomicBool,
}

/// Runs the workload on `threads` threads and merges what they measured.
///
/// Each thread first takes a private descriptor table (`unshare(CLONE_FILES)`):
/// the open-file limit caps descriptor numbers per table, so with N threads one
/// process holds N times the limit in connections (20,000 and more where the
/// hard limit is 20,000 and cannot be raised).
pub fn run(workload: &Workload, progress: &Arc<Progress>) -> io::Result<Measured> {
    let (user_before, system_before) = process_cpu_secs();
    let started = Instant::now();
    let threads = workload.threads.max(1);
    let handles: Vec<_> = (0..threads)
        .map(|index| {
            let workload = workload.clone();
            let progress = progress.clone();
            std::thread::Builder::new()
                .name(format!("kura-bench-{index}"))
                .spawn(move || {
                    if threads > 1 {
                        nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES)
                            .map_err(io::Error::from)?;
                    }
                    Generator::new(&workload, index, threads, started, progress)?.run()
                })
        })
        .collect::<io::Result<_>>()?;
    let mut total = Measured::new(started);
    for handle in handles {
        let measured = handle
            .join()
            .map_err(|_| io::Error::other("a generator thread panicked"))??;
        total.merge(measured);
    }
    let (user_after, system_after) = process_cpu_secs();
    total.cpu_user_secs = user_after - user_before;
    total.cpu_system_secs = system_after - system_before;
    Ok(total)
}

/// User and system CPU seconds of this process so far.
pub fn process_cpu_secs() -> (f64, f64) {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            (secs(u.user_time()), secs(u.system_time()))
        }
        Err(_) => (0.0, 0.0),
    }
}

/// A request waiting for its response.
struct Pending {
    op: Op,
    keys: u16,
    /// When the latency clock started: the intended send time in open loop,
    /// the actual one in closed loop (ns since the run started).
    started_ns: u64,
    /// The (first) key index, to verify a single-key get.
    key: u64,
}

struct Conn {
    stream: TcpStream,
    /// The TLS session over `stream` in a `--tls` run. Plaintext connections
    /// hold `None` and go to the socket directly: one branch per read or
    /// write, nothing more.
    tls: Option<Box<Session>>,
    client: usize,
    /// Ready for requests: the TCP connection is up and, with TLS, the
    /// handshake is done.
    connected: bool,
    /// Registered for writable events: while connecting, or while output waits.
    wants_write: bool,
    out: Vec<u8>,
    input: Vec<u8>,
    pending: VecDeque<Pending>,
}

struct Client {
    conns: Vec<usize>,
    issued: u64,
    completed: u64,
    in_flight: usize,
    opened_ns: u64,
    /// Open loop: the next intended send time.
    next_due_ns: u64,
    done: bool,
}

struct Generator<'w> {
    workload: &'w Workload,
    poll: Poll,
    conns: Slab<Conn>,
    clients: Slab<Client>,
    /// Clients of this thread not yet opened, and when each is due.
    to_open: VecDeque<u64>,
    /// Open-loop schedule: (due ns, client).
    schedule: BinaryHeap<Reverse<(u64, usize)>>,
    continuum: Option<Continuum>,
    keys: KeyPicker,
    rng: SmallRng,
    pattern: Vec<u8>,
    /// Reused buffers for composing a request.
    key_buf: Vec<Vec<u8>>,
    /// Reused buffer for reading responses.
    read_buf: Vec<u8>,
    /// Connections with requests composed but not yet written: the requests
    /// that one read's responses release leave in one `send` per connection
    /// rather than one each.
    unsent: Vec<usize>,
    total_weight: u32,
    started: Instant,
    measured: Measured,
    progress: Arc<Progress>,
}

const PATTERN_SPREAD: usize = 251;

impl<'w> Generator<'w> {
    fn new(
        workload: &'w Workload,
        index: usize,
        threads: usize,
        started: Instant,
        progress: Arc<Progress>,
    ) -> io::Result<Self> {
        let clients = (index as u64..workload.clients).step_by(threads);
        let to_open = clients
            .map(|i| {
                if workload.conn_rate > 0.0 {
                    (i as f64 / workload.conn_rate * 1e9) as u64
                } else {
                    0
                }
            })
            .collect();
        let continuum = (workload.servers.len() > 1).then(|| {
            Continuum::new(
                &workload
                    .servers
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>(),
            )
        });
        let rng = SmallRng::seed_from_u64(workload.seed.wrapping_add(index as u64 * 0x9e37_79b9));
        let keys = KeyPicker::new(
            workload.key_pattern.clone(),
            workload.key_count,
            workload.key_count / threads as u64 * index as u64,
        );
        Ok(Generator {
            workload,
            poll: Poll::new()?,
            conns: Slab::new(),
            clients: Slab::new(),
            to_open,
            schedule: BinaryHeap::new(),
            continuum,
            keys,
            rng,
            pattern: shared_pattern(workload),
            key_buf: Vec::new(),
            read_buf: vec![0; 64 * 1024],
            unsent: Vec::new(),
            total_weight: workload.mix.iter().map(|(_, w)| w).sum::<u32>().max(1),
            started,
            measured: Measured::new(started),
            progress,
        })
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn deadline_ns(&self) -> Option<u64> {
        self.workload.duration.map(|d| d.as_nanos() as u64)
    }

    fn run(mut self) -> io::Result<Measured> {
        let mut events = Events::with_capacity(1024);
        let mut last_timeout_check = 0u64;
        loop {
            let now = self.now_ns();
            let over = self.deadline_ns().is_some_and(|d| now >= d)
                || self.progress.stop.load(Ordering::Relaxed)
                || super::ctrl_c::pressed();
            if over {
                break;
            }
            self.open_due_clients(now);
            self.issue_scheduled(now);
            self.flush_unsent();
            if self.to_open.is_empty() && self.clients.is_empty() {
                break;
            }
            let timeout = self.next_wakeup(now);
            match self.poll.poll(&mut events, Some(timeout)) {
                // A signal (Ctrl-C) woke it: the loop looks at the flag.
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                result => result?,
            }
            for event in events.iter() {
                let key = event.token().0;
                if event.is_writable() {
                    self.on_writable(key);
                }
                if event.is_readable() || event.is_read_closed() || event.is_error() {
                    self.on_readable(key);
                }
                // At once, not after the whole batch of events: the server
                // works on these requests while the next responses are read.
                self.flush_unsent();
            }
            let now = self.now_ns();
            if now - last_timeout_check > 100_000_000 {
                last_timeout_check = now;
                self.expire_timeouts(now);
            }
        }
        self.measured.elapsed = self
            .started
            .elapsed()
            .min(self.workload.duration.unwrap_or(Duration::MAX));
        // Whatever is still in flight when the run ends is neither answered nor failed.
        Ok(self.measured)
    }

    fn next_wakeup(&self, now: u64) -> Duration {
        let mut next = now + 10_000_000;
        if let Some(&due) = self.to_open.front() {
            next = next.min(due);
        }
        if let Some(Reverse((due, _))) = self.schedule.peek() {
            next = next.min(*due);
        }
        if let Some(deadline) = self.deadline_ns() {
            next = next.min(deadline);
        }
        Duration::from_nanos(next.saturating_sub(now))
    }

    fn open_due_clients(&mut self, now: u64) {
        while self.to_open.front().is_some_and(|&due| due <= now) {
            self.to_open.pop_front();
            if let Err(kind) = self.open_client(now) {
                *self.measured.errors.entry(kind).or_default() += 1;
            }
        }
    }

    fn open_client(&mut self, now: u64) -> Result<(), &'static str> {
        let client_key = self.clients.insert(Client {
            conns: Vec::new(),
            issued: 0,
            completed: 0,
            in_flight: 0,
            opened_ns: now,
            next_due_ns: now,
            done: false,
        });
        let workload = self.workload;
        for (index, server) in workload.servers.iter().enumerate() {
            let tls = match &workload.tls {
                Some(tls) => Some(Box::new(tls.session(index).map_err(|error| {
                    self.note_tls_failure(*server, &error);
                    "tls"
                })?)),
                None => None,
            };
            let stream = TcpStream::connect(*server).map_err(|e| error_kind(&e))?;
            let _ = stream.set_nodelay(true);
            if let Some(seconds) = self.workload.linger {
                let socket = socket2::SockRef::from(&stream);
                let _ = socket.set_linger(Some(Duration::from_secs(u64::from(seconds))));
            }
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            let mut conn = Conn {
                stream,
                tls,
                client: client_key,
                connected: false,
                wants_write: true,
                out: Vec::new(),
                input: Vec::new(),
                pending: VecDeque::new(),
            };
            self.poll
                .registry()
                .register(
                    &mut conn.stream,
                    Token(key),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .map_err(|e| error_kind(&e))?;
            entry.insert(conn);
            self.clients[client_key].conns.push(key);
            self.measured.connections_opened += 1;
        }
        Ok(())
    }

    fn on_writable(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if !conn.connected {
            match conn.stream.take_error() {
                Ok(None) if conn.stream.peer_addr().is_ok() => {
                    if conn.tls.is_some() {
                        // The ClientHello goes out now; the connection is
                        // ready once the handshake is done.
                        self.handshake(key);
                        return;
                    }
                    self.mark_connected(key);
                }
                // Not connected yet.
                Ok(None) => return,
                // The connect failed (refused, unreachable).
                Ok(Some(e)) | Err(e) => {
                    let client = conn.client;
                    self.fail_client(client, error_kind(&e));
                    return;
                }
            }
        }
        self.flush(key);
    }

    /// The connection is ready for requests; its client starts calling once
    /// all its connections are.
    fn mark_connected(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.connected = true;
        let client = conn.client;
        let opened = self.clients[client].opened_ns;
        let now = self.now_ns();
        let _ = self.measured.connect_times.record((now - opened).max(1));
        if self.clients[client]
            .conns
            .iter()
            .all(|&c| self.conns[c].connected)
        {
            self.start_client(client, now);
        }
    }

    /// A TLS connection still shaking hands: sends what rustls has for the
    /// server and, once the handshake is done, marks the connection ready.
    fn handshake(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        let Some(tls) = conn.tls.as_mut() else {
            return;
        };
        if let Err(e) = tls.send(&mut conn.stream) {
            let client = conn.client;
            self.fail_client(client, error_kind(&e));
            return;
        }
        let (handshaking, wants_write) = (tls.is_handshaking(), tls.wants_write());
        if self.measured.tls_session.is_none() && !handshaking {
            self.measured.tls_session = tls.describe();
        }
        self.set_interest(key, wants_write);
        if !handshaking {
            self.mark_connected(key);
        }
    }

    fn note_tls_failure(&mut self, server: SocketAddr, error: &rustls::Error) {
        if self.measured.tls_failure.is_none() {
            self.measured.tls_failure = Some(format!("TLS with {server}: {error}"));
        }
    }

    /// A client whose connections are all up starts calling.
    fn start_client(&mut self, client: usize, now: u64) {
        if self.workload.call_rate > 0.0 {
            self.clients[client].next_due_ns = now;
            self.schedule.push(Reverse((now, client)));
        } else {
            for _ in 0..self.workload.pipeline.max(1) {
                if !self.issue(client, now) {
                    break;
                }
            }
        }
    }

    fn issue_scheduled(&mut self, now: u64) {
        let interval = (1e9 / self.workload.call_rate.max(1e-9)) as u64;
        while let Some(&Reverse((due, client))) = self.schedule.peek() {
            if due > now {
                break;
            }
            self.schedule.pop();
            if !self.clients.contains(client) || self.clients[client].done {
                continue;
            }
            // Latency counts from the intended time `due`, even if we are late.
            if self.issue(client, due) {
                let next = due + interval.max(1);
                self.clients[client].next_due_ns = next;
                self.schedule.push(Reverse((next, client)));
            }
        }
    }

    fn pick_op(&mut self) -> Op {
        if self.workload.mix.len() == 1 {
            return self.workload.mix[0].0;
        }
        let mut roll = self.rng.random_range(0..self.total_weight);
        for &(op, weight) in &self.workload.mix {
            if roll < weight {
                return op;
            }
            roll -= weight;
        }
        self.workload.mix[0].0
    }

    fn key_text(&self, index: u64, buf: &mut Vec<u8>) {
        buf.clear();
        buf.extend_from_slice(self.workload.key_prefix.as_bytes());
        kura_proto::reply::push_u64(buf, index);
    }

    /// Issues one call on `client`; false when the client has no calls left.
    fn issue(&mut self, client: usize, started_ns: u64) -> bool {
        let workload = self.workload;
        {
            let c = &mut self.clients[client];
            if c.done || (workload.calls_per_client > 0 && c.issued >= workload.calls_per_client) {
                return false;
            }
            c.issued += 1;
            c.in_flight += 1;
        }
        let op = self.pick_op();
        let key_count = if op.is_retrieval() {
            workload.multiget.max(1)
        } else {
            1
        };
        let mut key_buf = std::mem::take(&mut self.key_buf);
        key_buf.resize_with(key_count, Vec::new);
        let mut first_key = 0;
        for (i, buf) in key_buf.iter_mut().enumerate() {
            let index = self.keys.pick(&mut self.rng);
            if i == 0 {
                first_key = index;
            }
            self.key_text(index, buf);
        }
        let size = if op.has_value() {
            workload.sizes.sample(&mut self.rng, workload.max_value)
        } else {
            0
        };
        let offset = pattern_offset(first_key);
        let value = &self.pattern[offset..offset + size];
        let server = match &self.continuum {
            Some(continuum) => continuum.server_for(&key_buf[0]),
            None => 0,
        };
        let conn_key = self.clients[client].conns[server];
        let keys: Vec<&[u8]> = key_buf.iter().map(|k| k.as_slice()).collect();
        let call = Call {
            op,
            keys: &keys,
            value,
            flags: 0,
            exptime: workload.expiry,
            number: 1,
        };
        let conn = &mut self.conns[conn_key];
        let before = conn.out.len();
        if !compose(workload.protocol, &call, &mut conn.out) {
            *self.measured.errors.entry("unsupported").or_default() += 1;
            self.key_buf = key_buf;
            self.clients[client].done = true;
            return false;
        }
        let request_len = (conn.out.len() - before) as u64;
        conn.pending.push_back(Pending {
            op,
            keys: key_count as u16,
            started_ns: if workload.call_rate > 0.0 {
                started_ns
            } else {
                self.started.elapsed().as_nanos() as u64
            },
            key: first_key,
        });
        if before == 0 {
            self.unsent.push(conn_key);
        }
        self.key_buf = key_buf;
        self.measured.requests += 1;
        self.measured.bytes_sent += request_len;
        let _ = self.measured.request_sizes.record(request_len.max(1));
        true
    }

    fn flush_unsent(&mut self) {
        let mut unsent = std::mem::take(&mut self.unsent);
        for key in unsent.drain(..) {
            self.flush(key);
        }
        self.unsent = unsent;
    }

    fn flush(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if !conn.connected {
            return;
        }
        let written = match conn.tls.as_mut() {
            None if conn.out.is_empty() => Ok(0),
            None => conn.stream.write(&conn.out),
            Some(tls) if conn.out.is_empty() => tls.send(&mut conn.stream).map(|_| 0),
            Some(tls) => tls.write(&mut conn.stream, &conn.out),
        };
        match written {
            Ok(n) => {
                conn.out.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                let client = conn.client;
                self.fail_client(client, error_kind(&e));
                return;
            }
        }
        // Writable events only while something waits to be sent: otherwise
        // every acknowledged request would wake the loop once more.
        let wants_write = conn_wants_write(conn);
        set_interest(&self.poll, key, conn, wants_write);
    }

    fn set_interest(&mut self, key: usize, wants_write: bool) {
        set_interest(&self.poll, key, &mut self.conns[key], wants_write);
    }

    fn on_readable(&mut self, key: usize) {
        let mut buf = std::mem::take(&mut self.read_buf);
        self.read_from(key, &mut buf);
        self.read_buf = buf;
    }

    /// `read_from` for a TLS connection: everything the socket has, then
    /// the responses in it (or the handshake's next step).
    fn read_tls_from(&mut self, key: usize, buf: &mut [u8]) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        let Some(tls) = conn.tls.as_mut() else {
            return;
        };
        let before = conn.input.len();
        let outcome = tls.read(&mut conn.stream, buf, &mut conn.input);
        let received = conn.input.len() - before;
        let client = conn.client;
        let eof = match outcome {
            Ok(eof) => eof,
            Err(SessionError::Io(e)) => {
                self.fail_client(client, error_kind(&e));
                return;
            }
            Err(SessionError::Tls(error)) => {
                let server = conn.stream.peer_addr();
                if let Ok(server) = server {
                    self.note_tls_failure(server, &error);
                }
                self.fail_client(client, "tls");
                return;
            }
        };
        self.measured.bytes_received += received as u64;
        if !self.conns[key].connected {
            self.handshake(key);
        } else if conn_wants_write(&self.conns[key]) {
            // Records the read produced (a key update) that the socket did not take.
            self.set_interest(key, true);
        }
        if received > 0 && self.conns.contains(key) {
            self.take_responses(key);
        }
        if eof {
            if let Some(conn) = self.conns.get(key) {
                // Closed in the middle of a handshake or of a call: a failure.
                let quiet = conn.connected && conn.pending.is_empty();
                let client = conn.client;
                self.fail_client(client, if quiet { "closed" } else { "connreset" });
            }
        }
    }

    fn read_from(&mut self, key: usize, buf: &mut [u8]) {
        loop {
            let Some(conn) = self.conns.get_mut(key) else {
                return;
            };
            if conn.tls.is_some() {
                self.read_tls_from(key, buf);
                return;
            }
            match conn.stream.read(buf) {
                Ok(0) => {
                    let client = conn.client;
                    let kind = if conn.pending.is_empty() {
                        "closed"
                    } else {
                        "connreset"
                    };
                    self.fail_client(client, kind);
                    return;
                }
                Ok(n) => {
                    conn.input.extend_from_slice(&buf[..n]);
                    self.measured.bytes_received += n as u64;
                    self.take_responses(key);
                    if n < buf.len() {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let client = conn.client;
                    self.fail_client(client, error_kind(&e));
                    return;
                }
            }
        }
    }

    fn take_responses(&mut self, key: usize) {
        let now = self.now_ns();
        let mut used = 0;
        let mut answered = 0u64;
        let mut out_of_step = false;
        let client;
        {
            let conn = &mut self.conns[key];
            client = conn.client;
            while let Some(pending) = conn.pending.front() {
                let response = match parse_response(
                    self.workload.protocol,
                    pending.op,
                    usize::from(pending.keys),
                    &conn.input[used..],
                ) {
                    Ok(Some(response)) => response,
                    Ok(None) => break,
                    Err(_) => {
                        out_of_step = true;
                        break;
                    }
                };
                let pending = conn.pending.pop_front().expect("front exists");
                let latency = now.saturating_sub(pending.started_ns).max(1);
                let _ = self
                    .measured
                    .latency
                    .entry(pending.op)
                    .or_insert_with(latency_histogram)
                    .record(latency);
                // A response counts in the interval in which it arrived.
                let interval = (now / self.workload.interval.as_nanos().max(1) as u64) as usize;
                while self.measured.timeline.len() <= interval {
                    self.measured.timeline.push(
                        Histogram::new_with_bounds(1, 100_000_000_000, 2).expect("valid bounds"),
                    );
                }
                let _ = self.measured.timeline[interval].record(latency);
                *self.measured.kinds.entry(response.kind).or_default() += 1;
                if pending.op.is_retrieval() {
                    let (hits, misses) = read_outcome(&response, pending.keys);
                    self.measured.hits += hits;
                    self.measured.misses += misses;
                }
                let _ = self
                    .measured
                    .response_sizes
                    .record((response.consumed as u64).max(1));
                if self.workload.verify && response.kind == ResponseKind::Value {
                    let region = &conn.input[used..used + response.consumed];
                    for (key_range, value_range) in &response.values {
                        let key_index = if key_range.is_empty() {
                            (pending.keys == 1).then_some(pending.key)
                        } else {
                            parse_key_index(&region[key_range.clone()], &self.workload.key_prefix)
                        };
                        if let Some(index) = key_index {
                            let value = &region[value_range.clone()];
                            let offset = pattern_offset(index);
                            let expected = self.pattern.get(offset..offset + value.len());
                            if expected != Some(value) {
                                *self.measured.errors.entry("corrupt").or_default() += 1;
                            }
                        }
                    }
                }
                used += response.consumed;
                answered += 1;
            }
            conn.input.drain(..used);
        }
        if answered > 0 {
            self.measured.responses += answered;
            self.progress
                .responses
                .fetch_add(answered, Ordering::Relaxed);
        }
        // A reply that cannot be read leaves the stream out of step, and
        // the requests it owes unanswered: the client goes (a closed loop
        // would otherwise wait on them for good).
        if out_of_step {
            self.fail_client(client, "protocol");
            return;
        }
        if answered == 0 {
            return;
        }
        let closed_loop = self.workload.call_rate <= 0.0;
        let c = &mut self.clients[client];
        c.completed += answered;
        c.in_flight -= answered as usize;
        let finished =
            self.workload.calls_per_client > 0 && c.completed >= self.workload.calls_per_client;
        if finished {
            self.close_client(client, now);
            return;
        }
        if closed_loop {
            for _ in 0..answered {
                if !self.issue(client, now) {
                    break;
                }
            }
        }
    }

    fn expire_timeouts(&mut self, now: u64) {
        let limit = self.workload.timeout.as_nanos() as u64;
        let clients = &self.clients;
        // A handshake has no call pending to time out, but a server that
        // takes the connection and never answers the ClientHello (a
        // plaintext one waiting for a line) must not hold the client forever.
        let stuck_handshake = |c: &Conn| {
            c.tls.is_some()
                && !c.connected
                && now.saturating_sub(clients[c.client].opened_ns) > limit
        };
        let stale: Vec<(usize, Option<SocketAddr>)> = self
            .conns
            .iter()
            .filter_map(|(_, c)| {
                if stuck_handshake(c) {
                    Some((c.client, Some(c.stream.peer_addr().ok()?)))
                } else if c
                    .pending
                    .front()
                    .is_some_and(|p| now.saturating_sub(p.started_ns) > limit)
                {
                    Some((c.client, None))
                } else {
                    None
                }
            })
            .collect();
        for (client, handshake_with) in stale {
            if let Some(server) = handshake_with {
                if self.measured.tls_failure.is_none() {
                    self.measured.tls_failure = Some(format!(
                        "TLS with {server}: no handshake within {:?} (--timeout)",
                        self.workload.timeout
                    ));
                }
            }
            self.fail_client(client, "timeout");
        }
    }

    fn fail_client(&mut self, client: usize, kind: &'static str) {
        if !self.clients.contains(client) {
            return;
        }
        if kind != "closed" {
            *self.measured.errors.entry(kind).or_default() += 1;
        }
        let now = self.now_ns();
        self.close_client(client, now);
    }

    fn close_client(&mut self, client: usize, now: u64) {
        let Some(c) = self.clients.try_remove(client) else {
            return;
        };
        let _ = self
            .measured
            .connection_times
            .record(now.saturating_sub(c.opened_ns).max(1));
        for key in c.conns {
            if let Some(mut conn) = self.conns.try_remove(key) {
                let _ = self.poll.registry().deregister(&mut conn.stream);
            }
        }
    }
}

fn set_interest(poll: &Poll, key: usize, conn: &mut Conn, wants_write: bool) {
    if wants_write != conn.wants_write {
        conn.wants_write = wants_write;
        let interest = if wants_write {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        let _ = poll
            .registry()
            .reregister(&mut conn.stream, Token(key), interest);
    }
}

fn conn_wants_write(conn: &Conn) -> bool {
    !conn.out.is_empty() || conn.tls.as_ref().is_some_and(|tls| tls.wants_write())
}

/// The values of every thread come from one pattern, so a value written by
/// one thread verifies when read by another.
fn shared_pattern(workload: &Workload) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(workload.seed ^ 0x6b75_7261);
    (0..workload.max_value + PATTERN_SPREAD)
        .map(|_| rng.random_range(b'a'..=b'z'))
        .collect()
}

/// Where in the pattern the value of key `index` starts.
fn pattern_offset(index: u64) -> usize {
    (index.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % PATTERN_SPREAD
}

fn parse_key_index(key: &[u8], prefix: &str) -> Option<u64> {
    let digits = key.strip_prefix(prefix.as_bytes())?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// (hits, misses) among the `keys` keys of one read's response. A meta `HD`
/// to an `mg` hits without carrying a value; an error reply is neither.
fn read_outcome(response: &kura_proto::client::Response, keys: u16) -> (u64, u64) {
    let keys = u64::from(keys.max(1));
    match response.kind {
        ResponseKind::Value => {
            let hits = (response.values.len() as u64).clamp(1, keys);
            (hits, keys - hits)
        }
        ResponseKind::End => (0, keys),
        _ => (0, 0),
    }
}

fn error_kind(error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => "connrefused",
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => "connreset",
        io::ErrorKind::AddrNotAvailable => "addrunavail",
        io::ErrorKind::TimedOut => "timeout",
        _ if error.raw_os_error() == Some(libc::EMFILE)
            || error.raw_os_error() == Some(libc::ENFILE) =>
        {
            "fd-unavail"
        }
        _ => "other",
    }
}
