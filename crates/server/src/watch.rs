//! The log watcher (`watch`): connections that receive a line per event
//! (fetches, stores, evictions, connections opened and closed) in memcached's
//! formats (its `logger.c`).
//!
//! ```text
//!  event site ──(one relaxed load: anyone watching this kind?)──▶ Hub::log
//!       │                                                        │ format the line once
//!       ▼ no: nothing else                                       ▼ append to each matching
//!                                                  Watcher { bounded queue, skipped } ──wake──▶ its worker
//!                                                                                     drains into the socket
//! ```
//!
//! A watcher never slows the server: an event that does not fit in the
//! watcher's queue (`-o watcher_logbuf_size`) is dropped and counted, and a
//! `skipped=N` line takes its place in the stream: before the next line
//! that fits (as memcached writes it), or at the latest when the worker takes
//! the queue, so a watcher learns of the gap without waiting for another
//! event.
//! The worker that owns the watching connection takes the queue only once
//! the socket has taken everything taken before, so a watcher holds at most
//! its queue plus one queue's worth of unsent bytes.

use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// What a watcher asked for (`watch fetchers mutations …`).
pub mod kind {
    pub const FETCHERS: u32 = 1;
    pub const MUTATIONS: u32 = 2;
    pub const EVICTIONS: u32 = 4;
    pub const CONNEVENTS: u32 = 8;
    /// Accepted, never logged by kura.
    pub const OTHER: u32 = 16;
}

/// How long a queued line may wait for its worker's next turn.
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// memcached's limit on watchers at once.
pub const MAX_WATCHERS: usize = 20;

/// Parses the words after `watch`; None for an unknown word (memcached
/// answers `ERROR`). No word means fetchers.
pub fn parse_kinds<'a>(words: impl Iterator<Item = &'a [u8]>) -> Option<u32> {
    let mut kinds = 0;
    let mut any = false;
    for word in words {
        any = true;
        kinds |= match word {
            b"fetchers" => kind::FETCHERS,
            b"mutations" => kind::MUTATIONS,
            b"evictions" => kind::EVICTIONS,
            b"connevents" => kind::CONNEVENTS,
            b"rawcmds" | b"sysevents" | b"proxyreqs" | b"proxyevents" | b"proxyuser" => kind::OTHER,
            _ => return None,
        };
    }
    Some(if any { kinds } else { kind::FETCHERS })
}

/// Every watcher, and the union of what they watch.
pub struct Hub {
    /// The kinds some watcher wants: the only thing an event site reads
    /// when nobody watches.
    wanted: AtomicU32,
    /// memcached's global log id, one per event.
    gid: AtomicU64,
    watchers: Mutex<Vec<Arc<Watcher>>>,
    /// Lines queued for a watcher (`log_watcher_sent`).
    pub sent: AtomicU64,
    /// Lines dropped for a full queue (`log_watcher_skipped`).
    pub skipped: AtomicU64,
    /// Bytes a watcher may have queued before events are dropped.
    capacity: usize,
}

/// One watching connection's queue.
pub struct Watcher {
    pub conn_id: u64,
    kinds: u32,
    queue: Mutex<Queue>,
    /// Wakes the worker that owns the connection when the queue stops being
    /// empty.
    wake: Box<dyn Fn() + Send + Sync>,
}

struct Queue {
    bytes: Vec<u8>,
    /// Events dropped since the last line that fit.
    skipped: u64,
}

impl Queue {
    /// The `skipped=N` line owed, if any; it follows everything queued,
    /// since a line is dropped only when the queue is full.
    fn note_skipped(&mut self) {
        if self.skipped > 0 {
            let _ = writeln!(self.bytes, "skipped={}", self.skipped);
            self.skipped = 0;
        }
    }
}

/// Why a connection closed, as memcached names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    Error,
    Normal,
    IdleTimeout,
    Shutdown,
    /// It held bytes past `--max-buffered` (`held_buffers.rs`).
    BufferLimit,
}

impl CloseReason {
    fn name(self) -> &'static str {
        match self {
            CloseReason::Error => "error",
            CloseReason::Normal => "normal",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
            CloseReason::BufferLimit => "buffer_limit",
        }
    }
}

impl Hub {
    pub fn new(capacity: usize) -> Self {
        Hub {
            wanted: AtomicU32::new(0),
            gid: AtomicU64::new(0),
            watchers: Mutex::new(Vec::new()),
            sent: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            capacity: capacity.max(256),
        }
    }

    /// Whether any watcher wants events of this kind: one relaxed load.
    #[inline]
    pub fn wants(&self, kind: u32) -> bool {
        self.wanted.load(Ordering::Relaxed) & kind != 0
    }

    /// Adds a watcher whose queue starts with `OK`; None when there are
    /// too many.
    pub fn add(
        &self,
        conn_id: u64,
        kinds: u32,
        wake: Box<dyn Fn() + Send + Sync>,
    ) -> Option<Arc<Watcher>> {
        let mut watchers = self.watchers.lock();
        if watchers.len() >= MAX_WATCHERS {
            return None;
        }
        let watcher = Arc::new(Watcher {
            conn_id,
            kinds,
            queue: Mutex::new(Queue {
                bytes: b"OK\r\n".to_vec(),
                skipped: 0,
            }),
            wake,
        });
        watchers.push(watcher.clone());
        self.wanted.fetch_or(kinds, Ordering::Relaxed);
        Some(watcher)
    }

    pub fn remove(&self, conn_id: u64) {
        let mut watchers = self.watchers.lock();
        watchers.retain(|w| w.conn_id != conn_id);
        let wanted = watchers.iter().fold(0, |all, w| all | w.kinds);
        self.wanted.store(wanted, Ordering::Relaxed);
    }

    /// Events logged since the start (`log_worker_written`).
    pub fn logged(&self) -> u64 {
        self.gid.load(Ordering::Relaxed)
    }

    /// Watchers now (`log_watchers` in `stats`).
    pub fn count(&self) -> usize {
        self.watchers.lock().len()
    }

    /// Sends one event to every watcher of its kind. `body` writes the line
    /// after `ts=… gid=… ` and without its newline.
    pub fn log(&self, kind: u32, body: impl FnOnce(&mut Vec<u8>)) {
        if !self.wants(kind) {
            return;
        }
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let gid = self.gid.fetch_add(1, Ordering::Relaxed) + 1;
        let mut line = Vec::with_capacity(160);
        let _ = write!(
            line,
            "ts={}.{} gid={gid} ",
            since_epoch.as_secs(),
            since_epoch.subsec_micros()
        );
        body(&mut line);
        line.push(b'\n');
        let watchers = self.watchers.lock();
        for watcher in watchers.iter().filter(|w| w.kinds & kind != 0) {
            let counter = if watcher.offer(&line, self.capacity) {
                &self.sent
            } else {
                &self.skipped
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `type=item_get`: a lookup, found or not. `size` is the value's length.
    pub fn item_get(&self, key: &[u8], found: bool, class: usize, conn_id: u64, size: usize) {
        self.log(kind::FETCHERS, |line| {
            line.extend_from_slice(b"type=item_get key=");
            uri_encode(key, line);
            let status = if found { "found" } else { "not_found" };
            let _ = write!(
                line,
                " status={status} clsid={class} cfd={conn_id} size={size}"
            );
        });
    }

    /// `type=item_store`: a storage command's outcome. `ttl` is the
    /// seconds left (0 for never).
    #[allow(clippy::too_many_arguments)]
    pub fn item_store(
        &self,
        key: &[u8],
        status: &str,
        command: &str,
        ttl: i64,
        class: usize,
        conn_id: u64,
        size: usize,
    ) {
        self.log(kind::MUTATIONS, |line| {
            line.extend_from_slice(b"type=item_store key=");
            uri_encode(key, line);
            let _ = write!(
                line,
                " status={status} cmd={command} ttl={} clsid={class} cfd={conn_id} size={size}",
                ttl.max(0)
            );
        });
    }

    /// `type=eviction`.
    pub fn eviction(&self, item: &kura_store::ItemInfo<'_>) {
        self.log(kind::EVICTIONS, |line| {
            line.extend_from_slice(b"type=eviction key=");
            uri_encode(item.key, line);
            let _ = write!(
                line,
                " fetch={} ttl={} la={} clsid={} size={}",
                if item.fetched { "yes" } else { "no" },
                item.ttl,
                item.idle_seconds,
                item.class,
                item.value_len
            );
        });
    }

    /// `type=conn_new` for a connection from `peer` (`tcp:ip:port` or
    /// `unix:path`, as the listener names it).
    pub fn conn_new(&self, peer: &str, conn_id: u64) {
        self.log(kind::CONNEVENTS, |line| {
            let (ip, port, transport) = endpoint(peer);
            let _ = write!(
                line,
                "type=conn_new rip={ip} rport={port} transport={transport} cfd={conn_id}"
            );
        });
    }

    /// `type=conn_close`.
    pub fn conn_close(&self, peer: &str, conn_id: u64, reason: CloseReason) {
        self.log(kind::CONNEVENTS, |line| {
            let (ip, port, transport) = endpoint(peer);
            let _ = write!(
                line,
                "type=conn_close rip={ip} rport={port} transport={transport} reason={} cfd={conn_id}",
                reason.name()
            );
        });
    }
}

impl kura_store::EvictionWatcher for Hub {
    fn wanted(&self) -> bool {
        self.wants(kind::EVICTIONS)
    }

    fn evicted(&self, item: &kura_store::ItemInfo<'_>) {
        self.eviction(item);
    }
}

impl Watcher {
    /// Queues a line if it fits (after a `skipped=N` line owed); otherwise
    /// drops it and counts it. Returns whether it was queued.
    fn offer(&self, line: &[u8], capacity: usize) -> bool {
        let mut queue = self.queue.lock();
        // Wake the worker once the queue is half full; below that it sends
        // on its next turn (at most FLUSH_INTERVAL later), so lines go out in
        // large writes: a Unix socket counts every write's overhead against
        // its buffer, and one write per line would fill it with little data.
        let threshold = capacity / 2;
        let was_below = queue.bytes.len() < threshold;
        // Room for the line and a `skipped=` line of up to 20 digits.
        let skip_line_room = if queue.skipped > 0 { 29 } else { 0 };
        if queue.bytes.len() + line.len() + skip_line_room > capacity {
            queue.skipped += 1;
            return false;
        }
        queue.note_skipped();
        queue.bytes.extend_from_slice(line);
        let now_above = queue.bytes.len() >= threshold;
        drop(queue);
        if was_below && now_above {
            (self.wake)();
        }
        true
    }

    /// Whether lines (or a `skipped=` line) wait to be sent.
    pub fn has_queued(&self) -> bool {
        let queue = self.queue.lock();
        !queue.bytes.is_empty() || queue.skipped > 0
    }

    /// Moves everything queued to `out`, then the `skipped=N` line owed;
    /// false when there was nothing.
    pub fn take(&self, out: &mut Vec<u8>) -> bool {
        let mut queue = self.queue.lock();
        queue.note_skipped();
        if queue.bytes.is_empty() {
            return false;
        }
        out.append(&mut queue.bytes);
        true
    }
}

/// memcached's URI encoding of keys in log lines: everything but letters,
/// digits and `-._~` becomes `%XX`.
pub fn uri_encode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// (ip, port, transport) of a listener's peer name.
fn endpoint(peer: &str) -> (&str, &str, &'static str) {
    if let Some(address) = peer.strip_prefix("tcp:") {
        if let Some((ip, port)) = address.rsplit_once(':') {
            let ip = ip.trim_start_matches('[').trim_end_matches(']');
            return (ip, port, "tcp");
        }
    }
    ("unix", "0", "local")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn lines(watcher: &Watcher) -> String {
        let mut out = Vec::new();
        watcher.take(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn nobody_watching_costs_nothing_and_queues_nothing() {
        let hub = Hub::new(1024);
        assert!(!hub.wants(kind::FETCHERS));
        hub.item_get(b"k", true, 1, 7, 3);
        assert_eq!(hub.gid.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_watcher_gets_ok_then_only_its_kinds() {
        let hub = Hub::new(4096);
        let w = hub.add(5, kind::MUTATIONS, Box::new(|| {})).unwrap();
        hub.item_get(b"k", true, 1, 7, 3);
        hub.item_store(b"a b", "stored", "set", 0, 1, 7, 4);
        let text = lines(&w);
        assert!(text.starts_with("OK\r\nts="), "{text}");
        assert!(
            text.ends_with(
                " type=item_store key=a%20b status=stored cmd=set ttl=0 clsid=1 cfd=7 size=4\n"
            ),
            "{text}"
        );
        assert!(!text.contains("item_get"));
        hub.remove(5);
        assert!(!hub.wants(kind::MUTATIONS));
        assert_eq!(hub.count(), 0);
    }

    #[test]
    fn a_full_queue_drops_and_then_says_how_many() {
        let hub = Hub::new(256);
        let wakes = Arc::new(AtomicUsize::new(0));
        let counter = wakes.clone();
        let w = hub
            .add(
                1,
                kind::FETCHERS,
                Box::new(move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                }),
            )
            .unwrap();
        for _ in 0..100 {
            hub.item_get(&[b'x'; 60], false, 0, 2, 0);
        }
        let first = lines(&w);
        assert!(first.len() <= 256);
        // The queue passed half full once.
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
        // The gap is reported when the queue is taken, after the lines
        // that fit and before any later one.
        let dropped = 100 - first.matches("type=item_get").count();
        assert!(
            first.ends_with(&format!("\nskipped={dropped}\n")),
            "{first}"
        );
        hub.item_get(b"after", true, 1, 2, 5);
        let second = lines(&w);
        assert!(second.starts_with("ts="), "{second}");
        assert!(!second.contains("skipped="), "{second}");
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_line_dropped_while_the_queue_has_room_is_reported_before_the_next() {
        let hub = Hub::new(128);
        let w = hub.add(1, kind::FETCHERS, Box::new(|| {})).unwrap();
        lines(&w);
        // Longer than the whole queue: dropped though the queue is empty.
        hub.item_get(&[b'x'; 200], false, 0, 2, 0);
        assert!(w.has_queued());
        hub.item_get(b"short", true, 1, 2, 5);
        let text = lines(&w);
        assert!(text.starts_with("skipped=1\nts="), "{text}");
        assert_eq!(text.matches("skipped=").count(), 1, "{text}");
    }

    #[test]
    fn kinds_and_endpoints() {
        let none: [&[u8]; 0] = [];
        assert_eq!(parse_kinds(none.into_iter()), Some(kind::FETCHERS));
        assert_eq!(
            parse_kinds([&b"mutations"[..], b"evictions"].into_iter()),
            Some(kind::MUTATIONS | kind::EVICTIONS)
        );
        assert_eq!(parse_kinds([&b"nonsense"[..]].into_iter()), None);
        assert_eq!(endpoint("tcp:127.0.0.1:5000"), ("127.0.0.1", "5000", "tcp"));
        assert_eq!(endpoint("tcp:[::1]:5000"), ("::1", "5000", "tcp"));
        assert_eq!(endpoint("unix:/tmp/s"), ("unix", "0", "local"));
    }
}
