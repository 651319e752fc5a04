//! Dual master between real `kura serve` processes (`--peer`).
//!
//! `dual_masters_converge_under_concurrent_writes_and_restarts`: two
//! servers, each the other's peer, take writes of the same keys at once
//! (sets with and without expiry, appends, incr, deletes, touches, now and
//! then a `flush_all`) from
//! clients of both, while one or the other is killed (SIGKILL) and started
//! again now and then. Once the load stops both must hold the same items:
//! value, flags, CAS (the write's stamp) and expiry, key for key.
//!
//! `crafted_conflicts_converge_to_the_last_writer`: each server writes the
//! same keys while the other is down, the second one later; once both run
//! again every key holds the later write on both, whatever its kind: a set
//! over a set, a set over a delete, a delete over a set, an `incr` over an
//! `incr` (the earlier increment is lost: a counter converges to the later
//! writer's value), an append over an append. The server that held the
//! later writes counts the earlier ones as conflicts resolved.
//!
//! `peers_whose_stamps_could_tie_refuse_each_other`: server ids equal modulo
//! 4096 stop the link, and `stats` says why.
//! `bad_peer_flags_are_refused_with_a_reason`: `--peer` on the memory
//! engine, without a port, with `--replica-of`, a bad `--tombstone-lifetime`.
//!
//! Environment: `KURA_BIN` (default: the binary cargo built with this test).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

use support::client::{addr, Client};
use support::{free_port, serve_disk, Running};

const KEYS: usize = 60;
const COUNTERS: usize = 6;
const WRITERS_PER_SERVER: usize = 2;
const RESTARTS: usize = 6;

/// One of the two servers: where it keeps its data and how it is started.
struct Peer {
    dir: PathBuf,
    port: u16,
    peer_port: u16,
    server_id: u32,
}

impl Peer {
    fn start(&self) -> Running {
        let peer = format!("127.0.0.1:{}", self.peer_port);
        let id = self.server_id.to_string();
        let flags = ["-m", "64", "--peer", &peer, "--server-id", &id];
        Running(serve_disk(&self.dir, self.port, &flags))
    }
}

fn pair(dir: &Path) -> [Peer; 2] {
    let (a, b) = (free_port(), free_port());
    [
        Peer {
            dir: dir.join("a"),
            port: a,
            peer_port: b,
            server_id: 1,
        },
        Peer {
            dir: dir.join("b"),
            port: b,
            peer_port: a,
            server_id: 2,
        },
    ]
}

/// A request's reply line, or `None` when the server is gone (it may be
/// killed at any time).
fn try_call(
    link: &mut Option<(BufReader<TcpStream>, TcpStream)>,
    port: u16,
    request: &[u8],
) -> Option<String> {
    if link.is_none() {
        let stream = TcpStream::connect(addr(port)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        *link = Some((BufReader::new(stream.try_clone().ok()?), stream));
    }
    let (reader, writer) = link.as_mut()?;
    let mut line = String::new();
    let answered = writer.write_all(request).is_ok()
        && reader.read_line(&mut line).is_ok()
        && line.ends_with("\r\n");
    if !answered {
        *link = None;
        return None;
    }
    Some(line.trim_end().to_string())
}

/// Writes of the shared keys on the server at `port` until `stop`,
/// riding out its restarts; now and then a `flush_all` while `flushes`.
fn write_load(port: u16, seed: u64, stop: &AtomicBool, flushes: &AtomicBool) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut link = None;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("k{}", rng.random_range(0..KEYS));
        let request = match rng.random_range(0..100) {
            _ if flushes.load(Ordering::Relaxed) && rng.random_ratio(1, 2000) => {
                "flush_all\r\n".to_string()
            }
            0..40 => {
                let len = rng.random_range(1..300);
                let value: String = (0..len)
                    .map(|_| rng.random_range(b'a'..=b'z') as char)
                    .collect();
                let flags: u16 = rng.random();
                let ttl = if rng.random_bool(0.3) { 3600 } else { 0 };
                format!("set {key} {flags} {ttl} {len}\r\n{value}\r\n")
            }
            40..55 => format!("append {key} 0 0 3\r\n+{seed}+\r\n"),
            55..75 => {
                let counter = rng.random_range(0..COUNTERS);
                format!("incr c{counter} {}\r\n", rng.random_range(1..10))
            }
            75..90 => format!("delete {key}\r\n"),
            _ => format!("touch {key} {}\r\n", rng.random_range(100..7200)),
        };
        let reply = try_call(&mut link, port, request.as_bytes());
        if let Some(reply) = reply {
            assert!(
                !reply.starts_with("SERVER_ERROR") && !reply.starts_with("CLIENT_ERROR"),
                "{request:?} → {reply}"
            );
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What a server holds of the shared keys: key → flags, CAS, value, and
/// the expiry `metadump` shows.
fn holdings(port: u16) -> BTreeMap<String, String> {
    let mut client = Client::connect(port);
    let expiries: BTreeMap<String, String> = client
        .items()
        .into_iter()
        .filter(|(key, _)| !key.starts_with('\0'))
        .collect();
    let mut held = BTreeMap::new();
    let keys = (0..KEYS)
        .map(|n| format!("k{n}"))
        .chain((0..COUNTERS).map(|n| format!("c{n}")));
    for key in keys {
        if let Some((flags, value, cas)) = client.gets(&key) {
            let value = String::from_utf8_lossy(&value).into_owned();
            let listed = expiries.get(&key).cloned().unwrap_or_default();
            held.insert(key, format!("{flags} {cas} {listed} {value}"));
        }
    }
    held
}

/// Waits until both servers hold the same; fails with the first
/// difference after a minute.
fn assert_converge(a: u16, b: u16) -> BTreeMap<String, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (on_a, on_b) = (holdings(a), holdings(b));
        if on_a == on_b {
            return on_a;
        }
        if Instant::now() > deadline {
            let differing: Vec<String> = on_a
                .keys()
                .chain(on_b.keys())
                .filter(|key| on_a.get(*key) != on_b.get(*key))
                .take(5)
                .map(|key| format!("{key}: {:?} / {:?}", on_a.get(key), on_b.get(key)))
                .collect();
            panic!("the peers differ: {differing:#?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn stat(port: u16, name: &str) -> u64 {
    Client::connect(port).stats("replication")[name]
        .parse()
        .unwrap()
}

#[test]
fn dual_masters_converge_under_concurrent_writes_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let peers = pair(dir.path());
    let mut running: Vec<Running> = peers.iter().map(Peer::start).collect();
    for counter in 0..COUNTERS {
        let mut client = Client::connect(peers[0].port);
        assert_eq!(
            client.call(format!("set c{counter} 0 0 1\r\n0\r\n").as_bytes()),
            "STORED"
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flushes = Arc::new(AtomicBool::new(true));
    let mut writers = Vec::new();
    for (n, peer) in peers.iter().enumerate() {
        for w in 0..WRITERS_PER_SERVER {
            let (port, stop, flushes) = (peer.port, stop.clone(), flushes.clone());
            let seed = (n * WRITERS_PER_SERVER + w) as u64;
            writers.push(std::thread::spawn(move || {
                write_load(port, seed, &stop, &flushes)
            }));
        }
    }
    let mut rng = SmallRng::seed_from_u64(99);
    for _ in 0..RESTARTS {
        std::thread::sleep(Duration::from_millis(rng.random_range(300..900)));
        let victim = rng.random_range(0..2);
        running[victim].kill();
        std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
        running[victim] = peers[victim].start();
    }
    // The last half second without flushes: the data compared is not
    // only what the last flush left.
    flushes.store(false, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("a writer saw no error");
    }
    let held = assert_converge(peers[0].port, peers[1].port);
    assert!(held.len() > KEYS / 4, "the load wrote: {held:?}");
    for peer in &peers {
        assert!(
            stat(peer.port, "repl_peer_writes_taken") > 0,
            "{} took its peer's writes",
            peer.port
        );
        eprintln!(
            "server {}: {} conflicts resolved, {} writes taken since its last start",
            peer.server_id,
            stat(peer.port, "repl_conflicts_resolved"),
            stat(peer.port, "repl_peer_writes_taken")
        );
    }
}

#[test]
fn crafted_conflicts_converge_to_the_last_writer() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b] = pair(dir.path());
    let (mut on_a, mut on_b) = (a.start(), b.start());
    let mut client = Client::connect(a.port);
    for (key, value) in [
        ("s", "base"),
        ("d1", "x"),
        ("d2", "x"),
        ("n", "10"),
        ("ap", "ab"),
    ] {
        let request = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(client.call(request.as_bytes()), "STORED");
    }
    let base = assert_converge_on(a.port, b.port, &["s", "d1", "d2", "n", "ap"]);
    assert_eq!(base["n"], "10");

    // A writes while B is down; then B, later, while A is down.
    on_b.kill();
    let mut client = Client::connect(a.port);
    assert_eq!(client.call(b"set s 1 0 6\r\nfrom-a\r\n"), "STORED");
    assert_eq!(client.call(b"delete d1\r\n"), "DELETED");
    assert_eq!(client.call(b"set d2 1 0 7\r\na-wrote\r\n"), "STORED");
    assert_eq!(client.call(b"incr n 5\r\n"), "15");
    assert_eq!(client.call(b"append ap 0 0 1\r\nA\r\n"), "STORED");
    on_a.kill();
    std::thread::sleep(Duration::from_millis(20));
    on_b = b.start();
    let mut client = Client::connect(b.port);
    assert_eq!(client.call(b"set s 2 0 6\r\nfrom-b\r\n"), "STORED");
    assert_eq!(client.call(b"set d1 2 0 7\r\nb-wrote\r\n"), "STORED");
    assert_eq!(client.call(b"delete d2\r\n"), "DELETED");
    assert_eq!(client.call(b"incr n 1\r\n"), "11");
    assert_eq!(client.call(b"append ap 0 0 1\r\nB\r\n"), "STORED");
    on_a = a.start();

    let wanted = BTreeMap::from([
        ("s".to_string(), "from-b".to_string()),
        ("d1".to_string(), "b-wrote".to_string()),
        ("n".to_string(), "11".to_string()),
        ("ap".to_string(), "abB".to_string()),
    ]);
    let after = assert_converge_on(a.port, b.port, &["s", "d1", "d2", "n", "ap"]);
    assert_eq!(after, wanted, "d2 deleted last, the rest B's");
    // A's writes reach B after B's reached A, maybe.
    let deadline = Instant::now() + Duration::from_secs(30);
    while stat(b.port, "repl_conflicts_resolved") < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        stat(b.port, "repl_conflicts_resolved"),
        5,
        "B discarded A's five earlier writes"
    );
    assert_eq!(
        assert_converge_on(a.port, b.port, &["s", "d1", "d2", "n", "ap"]),
        wanted
    );
    assert!(
        stat(a.port, "repl_peer_writes_taken") >= 5,
        "A took B's writes"
    );
    drop((on_a, on_b));
}

/// Waits until both servers hold the same values of `keys`; returns them.
fn assert_converge_on(a: u16, b: u16, keys: &[&str]) -> BTreeMap<String, String> {
    let values = |port: u16| -> BTreeMap<String, (String, u64)> {
        let mut client = Client::connect(port);
        keys.iter()
            .filter_map(|key| {
                let (_, value, cas) = client.gets(key)?;
                Some((key.to_string(), (String::from_utf8(value).unwrap(), cas)))
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (on_a, on_b) = (values(a), values(b));
        if on_a == on_b {
            return on_a
                .into_iter()
                .map(|(key, (value, _))| (key, value))
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "the peers differ: {on_a:?} / {on_b:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn peers_whose_stamps_could_tie_refuse_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let [mut a, mut b] = pair(dir.path());
    // 4097 and 1 are equal modulo 4096: their stamps' rank.
    (a.server_id, b.server_id) = (1, 4097);
    let (_on_a, _on_b) = (a.start(), b.start());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let link = Client::connect(a.port).stats("replication")["repl_peer_0"].clone();
        if link.contains("state=stopped") {
            break;
        }
        assert!(Instant::now() < deadline, "the link goes on: {link}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = Client::connect(a.port).stats("replication");
    assert!(
        stats["repl_peer_0_error"].contains("--server-id"),
        "the reason is shown: {stats:?}"
    );
    let mut client = Client::connect(a.port);
    assert_eq!(
        client.call(b"set k 0 0 1\r\nv\r\n"),
        "STORED",
        "A still takes writes"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(Client::connect(b.port).gets("k"), None, "nothing went to B");
}

#[test]
fn bad_peer_flags_are_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let refused = |args: &[&str], reason: &str| {
        let output = std::process::Command::new(support::kura_bin())
            .arg("serve")
            .args(args)
            .arg("--print-config")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} was taken");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    };
    refused(
        &["--engine", "memory", "--peer", "127.0.0.1:11311"],
        "--peer needs the disk engine",
    );
    refused(&["--dir", data, "--peer", "nowhere"], "--peer: HOST:PORT");
    refused(
        &[
            "--dir",
            data,
            "--peer",
            "127.0.0.1:1",
            "--tombstone-lifetime",
            "soon",
        ],
        "--tombstone-lifetime",
    );
    refused(
        &[
            "--dir",
            data,
            "--peer",
            "127.0.0.1:1",
            "--replica-of",
            "127.0.0.1:2",
        ],
        "--replica-of",
    );
    let output = std::process::Command::new(support::kura_bin())
        .args([
            "serve",
            "--dir",
            data,
            "--peer",
            "127.0.0.1:1",
            "--peer",
            "127.0.0.1:2",
        ])
        .args(["--tombstone-lifetime", "90m", "--print-config"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let config = String::from_utf8_lossy(&output.stdout);
    assert!(config.contains("127.0.0.1:2"), "{config}");
    assert!(config.contains("5400"), "90 minutes: {config}");
}
