//! Crash safety: SIGKILL a real `kura serve` on the disk engine while writers
//! are mid-request, restart it on the same directory, and check that every
//! acknowledged write survived.
//!
//! Each cycle runs `WRITERS` threads over TCP, one request in flight each,
//! on disjoint keys. Every writer models the acknowledged state of its keys
//! and the one request it had sent without a full reply. After the restart
//! every key must hold its acknowledged state, or, for a key with a request
//! in flight at the kill, the state after that request. The directory and the
//! models carry over from cycle to cycle, so each restart reopens everything
//! written before.
//!
//! A SIGKILL leaves the OS page cache intact, so no sync policy may lose an
//! acknowledged write here: `always`, `batch` and `interval=1s` are all held
//! to the same standard.
//!
//! Environment: `KURA_CRASH_CYCLES` (default 20), `KURA_CRASH_SEED` (default
//! from the clock; printed, so a run's choices can be repeated), `KURA_BIN`
//! (default: the binary cargo built with this test).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant, SystemTime};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

use support::{free_port, kura_bin, serve_disk};

const WRITERS: usize = 4;
const SET_KEYS: usize = 24;
const APPEND_KEYS: usize = 12;
const COUNTER_KEYS: usize = 12;
/// Rotated across cycles: the policy of the server that gets killed.
const POLICIES: [&str; 3] = ["always", "batch", "interval=1s"];
const KILL_DELAY_MS: std::ops::RangeInclusive<u64> = 50..=400;
const MAX_SET_LEN: usize = 2000;
/// An appended value this long is replaced by a set, so that a long soak
/// stays far below the item size limit.
const APPEND_RESET_LEN: usize = 4096;

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(dir: &Path, policy: &str) -> Server {
        // A fresh port each time: the killed server's port may still be held
        // by its closing connections.
        let port = free_port();
        // A small budget: the applier takes the journal into LMDB every
        // 256 KiB, so kills also land in and between applies.
        let child = serve_disk(dir, port, &["-m", "16", "--sync", policy]);
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        Server { child, addr }
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reap the process.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let stream = TcpStream::connect(addr)?;
    // Only a guard against a hung test: the kill ends every cycle sooner.
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    Ok(stream)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    flags: u32,
    data: Vec<u8>,
}

/// A key's state as the server should hold it: `None` is absent.
type State = Option<Item>;

fn describe(state: &State) -> String {
    match state {
        None => "absent".to_string(),
        Some(item) => {
            const PREVIEW: usize = 40;
            let text = String::from_utf8_lossy(&item.data[..item.data.len().min(PREVIEW)]);
            let more = if item.data.len() > PREVIEW { "…" } else { "" };
            format!(
                "flags {} len {} {text:?}{more}",
                item.flags,
                item.data.len()
            )
        }
    }
}

enum Op {
    Set { key: String, item: Item },
    Append { key: String, chunk: Vec<u8> },
    Incr { key: String, delta: u64 },
    Delete { key: String },
}

#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Stored,
    NotStored,
    Deleted,
    NotFound,
    Number(u64),
    ServerError(String),
    Other(String),
}

impl Reply {
    fn parse(line: &str) -> Reply {
        match line {
            "STORED" => Reply::Stored,
            "NOT_STORED" => Reply::NotStored,
            "DELETED" => Reply::Deleted,
            "NOT_FOUND" => Reply::NotFound,
            _ if line.starts_with("SERVER_ERROR") => Reply::ServerError(line.to_string()),
            _ => line
                .parse()
                .map_or_else(|_| Reply::Other(line.to_string()), Reply::Number),
        }
    }
}

impl Op {
    fn key(&self) -> &str {
        match self {
            Op::Set { key, .. }
            | Op::Append { key, .. }
            | Op::Incr { key, .. }
            | Op::Delete { key } => key,
        }
    }

    /// The op without its key, short enough for a failure message.
    fn summary(&self) -> String {
        match self {
            Op::Set { item, .. } => format!("set {}", describe(&Some(item.clone()))),
            Op::Append { chunk, .. } => format!("append {:?}", String::from_utf8_lossy(chunk)),
            Op::Incr { delta, .. } => format!("incr {delta}"),
            Op::Delete { .. } => "delete".to_string(),
        }
    }

    fn request(&self) -> Vec<u8> {
        match self {
            Op::Set { key, item } => {
                let (flags, len) = (item.flags, item.data.len());
                [
                    format!("set {key} {flags} 0 {len}\r\n").as_bytes(),
                    &item.data,
                    b"\r\n",
                ]
                .concat()
            }
            Op::Append { key, chunk } => [
                format!("append {key} 0 0 {}\r\n", chunk.len()).as_bytes(),
                chunk,
                b"\r\n",
            ]
            .concat(),
            Op::Incr { key, delta } => format!("incr {key} {delta}\r\n").into_bytes(),
            Op::Delete { key } => format!("delete {key}\r\n").into_bytes(),
        }
    }

    /// The key's state once the server has applied this op to `before`,
    /// and the reply that says so, with memcached's semantics.
    fn apply(&self, before: &State) -> (State, Reply) {
        match (self, before) {
            (Op::Set { item, .. }, _) => (Some(item.clone()), Reply::Stored),
            (Op::Append { .. } | Op::Incr { .. }, None) => {
                let miss = if matches!(self, Op::Append { .. }) {
                    Reply::NotStored
                } else {
                    Reply::NotFound
                };
                (None, miss)
            }
            (Op::Append { chunk, .. }, Some(item)) => {
                let data = [&item.data[..], chunk].concat();
                (Some(Item { data, ..*item }), Reply::Stored)
            }
            (Op::Incr { delta, .. }, Some(item)) => {
                let current: u64 = std::str::from_utf8(&item.data)
                    .ok()
                    .and_then(|text| text.trim_end().parse().ok())
                    .expect("counters hold numbers");
                let number = current.wrapping_add(*delta);
                let mut data = number.to_string().into_bytes();
                // memcached pads a shorter number with spaces, keeping the length.
                data.resize(data.len().max(item.data.len()), b' ');
                (Some(Item { data, ..*item }), Reply::Number(number))
            }
            (Op::Delete { .. }, None) => (None, Reply::NotFound),
            (Op::Delete { .. }, Some(_)) => (None, Reply::Deleted),
        }
    }
}

/// One writer thread's keys, what the server acknowledged for each, and the
/// request it had sent without a full reply when the server died.
struct Writer {
    id: usize,
    rng: SmallRng,
    /// Numbers every op of this writer, across cycles, so values are unique.
    serial: u64,
    acked: BTreeMap<String, State>,
    in_flight: Option<Op>,
}

#[derive(Default)]
struct WriterCycle {
    acknowledged: u64,
    server_errors: u64,
    /// Replies that contradict the model while the server was up.
    wrong_replies: Vec<String>,
}

impl Writer {
    fn new(id: usize, seed: u64) -> Writer {
        let keys = (0..SET_KEYS)
            .map(|n| format!("w{id}-s{n}"))
            .chain((0..APPEND_KEYS).map(|n| format!("w{id}-a{n}")))
            .chain((0..COUNTER_KEYS).map(|n| format!("w{id}-c{n}")));
        Writer {
            id,
            rng: SmallRng::seed_from_u64(seed),
            serial: 0,
            // The directory starts empty: every key starts absent.
            acked: keys.map(|key| (key, None)).collect(),
            in_flight: None,
        }
    }

    fn pick_key(&mut self, kind: char, count: usize) -> String {
        format!("w{}-{kind}{}", self.id, self.rng.random_range(0..count))
    }

    fn next_op(&mut self) -> Op {
        self.serial += 1;
        let tag = format!("w{}#{}|", self.id, self.serial);
        let flags = self.rng.random();
        match self.rng.random_range(0..10) {
            0..=3 => {
                let len = self.rng.random_range(1..=MAX_SET_LEN);
                let data = tag.bytes().cycle().take(len).collect();
                let key = self.pick_key('s', SET_KEYS);
                Op::Set {
                    key,
                    item: Item { flags, data },
                }
            }
            4..=5 => {
                let key = self.pick_key('a', APPEND_KEYS);
                match &self.acked[&key] {
                    Some(item) if item.data.len() < APPEND_RESET_LEN => Op::Append {
                        key,
                        chunk: format!("{};", self.serial).into_bytes(),
                    },
                    _ => Op::Set {
                        key,
                        item: Item {
                            flags,
                            data: tag.into_bytes(),
                        },
                    },
                }
            }
            6..=7 => {
                let key = self.pick_key('c', COUNTER_KEYS);
                if self.acked[&key].is_some() {
                    let delta = self.rng.random_range(1..=1000);
                    Op::Incr { key, delta }
                } else {
                    let start: u32 = self.rng.random_range(0..100_000);
                    let data = start.to_string().into_bytes();
                    Op::Set {
                        key,
                        item: Item { flags, data },
                    }
                }
            }
            _ => {
                let index = self.rng.random_range(0..self.acked.len());
                let key = self.acked.keys().nth(index).unwrap().clone();
                Op::Delete { key }
            }
        }
    }

    /// Sends one request at a time until the connection breaks.
    fn run_until_killed(&mut self, addr: SocketAddr) -> WriterCycle {
        let mut cycle = WriterCycle::default();
        let Ok(mut stream) = connect(addr) else {
            return cycle;
        };
        let mut replies = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        loop {
            let op = self.next_op();
            let request = op.request();
            self.in_flight = Some(op);
            if stream.write_all(&request).is_err() {
                return cycle;
            }
            line.clear();
            // A reply counts only when its whole line arrived.
            match replies.read_line(&mut line) {
                Ok(_) if line.ends_with("\r\n") => {}
                _ => return cycle,
            }
            let op = self.in_flight.take().unwrap();
            let before = &self.acked[op.key()];
            let (after, expected) = op.apply(before);
            match Reply::parse(line.trim_end()) {
                // The server refused the write: the state is unchanged.
                Reply::ServerError(_) => cycle.server_errors += 1,
                reply if reply == expected => {
                    cycle.acknowledged += 1;
                    self.acked.insert(op.key().to_string(), after);
                }
                reply => {
                    cycle.wrong_replies.push(format!(
                        "{}: {} on {} answered {reply:?}, expected {expected:?}",
                        op.key(),
                        op.summary(),
                        describe(before),
                    ));
                    // The model is no longer the server's state: stop here.
                    return cycle;
                }
            }
        }
    }
}

/// Sends `stats` and reads its reply, again and again, until the
/// connection breaks.
fn poll_stats_until_killed(addr: SocketAddr) {
    let Ok(mut stream) = connect(addr) else {
        return;
    };
    let mut replies = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    while stream.write_all(b"stats\r\n").is_ok() {
        loop {
            line.clear();
            match replies.read_line(&mut line) {
                Ok(_) if line.ends_with("\r\n") => {}
                _ => return,
            }
            if line == "END\r\n" {
                break;
            }
        }
    }
}

fn get(stream: &mut BufReader<TcpStream>, key: &str) -> State {
    stream
        .get_mut()
        .write_all(format!("get {key}\r\n").as_bytes())
        .unwrap();
    let mut line = String::new();
    stream.read_line(&mut line).unwrap();
    if line == "END\r\n" {
        return None;
    }
    let header: Vec<&str> = line.split_whitespace().collect();
    let [value_word, got_key, flags, len] = header[..] else {
        panic!("get {key}: unexpected reply {line:?}");
    };
    assert_eq!((value_word, got_key), ("VALUE", key), "get {key}: {line:?}");
    let flags = flags.parse().unwrap();
    let mut data = vec![0u8; len.parse::<usize>().unwrap() + 2];
    stream.read_exact(&mut data).unwrap();
    assert!(
        data.ends_with(b"\r\n"),
        "get {key}: value not ended by CRLF"
    );
    data.truncate(data.len() - 2);
    line.clear();
    stream.read_line(&mut line).unwrap();
    assert_eq!(line, "END\r\n", "get {key}");
    Some(Item { flags, data })
}

#[derive(Default)]
struct Verified {
    keys: usize,
    in_flight_applied: usize,
    mismatches: Vec<String>,
}

/// Reads every key of every writer from the restarted server and checks it
/// against the model; the state found settles each in-flight op.
fn verify(addr: SocketAddr, writers: &mut [Writer]) -> Verified {
    let mut stream = BufReader::new(connect(addr).unwrap());
    let mut verified = Verified::default();
    for writer in writers {
        let in_flight = writer.in_flight.take();
        for (key, acked) in writer.acked.iter_mut() {
            verified.keys += 1;
            let found = get(&mut stream, key);
            if found == *acked {
                continue;
            }
            let after_in_flight = in_flight
                .as_ref()
                .filter(|op| op.key() == key)
                .map(|op| op.apply(acked).0);
            if after_in_flight.as_ref() == Some(&found) {
                verified.in_flight_applied += 1;
                *acked = found;
                continue;
            }
            let or_in_flight = match (&in_flight, &after_in_flight) {
                (Some(op), Some(after)) => {
                    format!(" (or {} after in-flight {})", describe(after), op.summary())
                }
                _ => String::new(),
            };
            verified.mismatches.push(format!(
                "{key}: expected {}{or_in_flight}, found {}",
                describe(acked),
                describe(&found)
            ));
        }
    }
    verified
}

#[test]
#[ignore = "run by scripts/test, which shows its summary"]
fn acknowledged_writes_survive_sigkill_during_concurrent_writes() {
    let cycles: usize = std::env::var("KURA_CRASH_CYCLES").map_or(20, |text| {
        text.parse().expect("KURA_CRASH_CYCLES is a number")
    });
    let seed: u64 = std::env::var("KURA_CRASH_SEED").map_or_else(
        |_| {
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
            now.unwrap().as_nanos() as u64
        },
        |text| text.parse().expect("KURA_CRASH_SEED is a number"),
    );
    eprintln!(
        "crash test: {} on the disk engine, {cycles} cycles, seed {seed} (KURA_CRASH_SEED={seed} repeats its choices)",
        kura_bin()
    );
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut writers: Vec<Writer> = (0..WRITERS)
        .map(|id| Writer::new(id, rng.random()))
        .collect();
    let mut server = Server::start(dir.path(), POLICIES[0]);
    let mut cycles_per_policy = [0usize; POLICIES.len()];
    let (mut acknowledged, mut in_flight, mut in_flight_applied, mut server_errors) = (0, 0, 0, 0);
    let mut failure: Option<(String, Vec<String>)> = None;
    for cycle in 0..cycles {
        let policy = cycle % POLICIES.len();
        cycles_per_policy[policy] += 1;
        let delay = Duration::from_millis(rng.random_range(KILL_DELAY_MS));
        let addr = server.addr;
        let results: Vec<WriterCycle> = std::thread::scope(|scope| {
            let threads: Vec<_> = writers
                .iter_mut()
                .map(|writer| scope.spawn(move || writer.run_until_killed(addr)))
                .collect();
            // A monitor's `stats` asks for rounds that leave LMDB holding
            // part of the segment being appended to when the kill comes.
            scope.spawn(move || poll_stats_until_killed(addr));
            std::thread::sleep(delay);
            server.kill();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let cycle_acknowledged: u64 = results.iter().map(|r| r.acknowledged).sum();
        let cycle_server_errors: u64 = results.iter().map(|r| r.server_errors).sum();
        let cycle_in_flight = writers.iter().filter(|w| w.in_flight.is_some()).count();

        let restart = Instant::now();
        server = Server::start(dir.path(), POLICIES[(cycle + 1) % POLICIES.len()]);
        let restart = restart.elapsed();
        let verified = verify(server.addr, &mut writers);
        let mut wrong: Vec<String> = results.into_iter().flat_map(|r| r.wrong_replies).collect();
        wrong.extend(verified.mismatches);
        eprintln!(
            "cycle {}/{cycles} sync={}: killed after {} ms; {cycle_acknowledged} writes acknowledged, \
             {cycle_in_flight} in flight ({} applied), {cycle_server_errors} SERVER_ERROR; \
             restarted in {} ms; {} keys checked, {} lost or wrong",
            cycle + 1,
            POLICIES[policy],
            delay.as_millis(),
            verified.in_flight_applied,
            restart.as_millis(),
            verified.keys,
            wrong.len(),
        );
        acknowledged += cycle_acknowledged;
        server_errors += cycle_server_errors;
        in_flight += cycle_in_flight;
        in_flight_applied += verified.in_flight_applied;
        if !wrong.is_empty() {
            // The models no longer match the server: later cycles would only add noise.
            failure = Some((
                format!("cycle {} sync={}", cycle + 1, POLICIES[policy]),
                wrong,
            ));
            break;
        }
    }
    let per_policy: Vec<String> = POLICIES
        .iter()
        .zip(cycles_per_policy)
        .map(|(policy, count)| format!("{policy} {count}"))
        .collect();
    eprintln!(
        "crash test: {} cycles ({}), {acknowledged} writes acknowledged, {in_flight} in flight at kill \
         ({in_flight_applied} applied), {server_errors} SERVER_ERROR, {} lost or wrong, seed {seed}",
        cycles_per_policy.iter().sum::<usize>(),
        per_policy.join(", "),
        failure.as_ref().map_or(0, |(_, wrong)| wrong.len()),
    );
    if let Some((cycle, wrong)) = failure {
        panic!(
            "{cycle}: acknowledged writes lost or wrong after SIGKILL (seed {seed}):\n{}",
            wrong.join("\n")
        );
    }
}
