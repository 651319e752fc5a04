//! SIGKILL during table writes with several indexes: writers put and
//! remove rows over Tokyo Tyrant's protocol (`--tyrant-db table:t`) while
//! the server is killed at random moments; after each restart every row
//! acknowledged is there as it was written (a write in flight may have
//! happened or not), and `kura table check` finds every index equal to a
//! full scan of the table. `KURA_TABLE_CRASH_CYCLES` runs more cycles
//! (default 6).

mod support;

use std::collections::BTreeMap;
use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kura_proto::tyrant::{compose, Request};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use support::client::Client;
use support::{free_port, serve_disk, Running};

const KURA: &str = env!("CARGO_BIN_EXE_kura");
const WRITERS: usize = 2;
const KEYS: usize = 40;
const POLICIES: [&str; 2] = ["batch", "always"];

struct Server {
    process: Running,
    /// memcached's port.
    port: u16,
    tyrant: SocketAddr,
}

impl Server {
    fn start(dir: &Path, policy: &str) -> Server {
        let (port, tyrant) = (free_port(), free_port());
        let tyrant_port = tyrant.to_string();
        // A small budget: rounds into LMDB come often, so kills land in them.
        let flags = ["-m", "16", "--sync", policy, "--tyrant-port", &tyrant_port];
        let child = serve_disk(
            dir,
            port,
            &[&flags[..], &["--tyrant-db", "table:t"]].concat(),
        );
        Server {
            process: Running(child),
            port,
            tyrant: SocketAddr::from(([127, 0, 0, 1], tyrant)),
        }
    }

    fn kill(&mut self) {
        self.process.kill();
    }
}

/// A `misc` call: `None` when the connection broke before the whole reply.
fn misc(
    stream: &mut BufReader<TcpStream>,
    name: &[u8],
    args: &[Vec<u8>],
) -> Option<(u8, Vec<Vec<u8>>)> {
    let mut bytes = Vec::new();
    compose(
        &mut bytes,
        &Request::Misc {
            name,
            opts: 0,
            args: args.iter().map(Vec::as_slice).collect(),
        },
    );
    stream.get_mut().write_all(&bytes).ok()?;
    let mut head = [0; 5];
    stream.read_exact(&mut head).ok()?;
    let count = u32::from_be_bytes(head[1..].try_into().unwrap());
    let mut items = Vec::new();
    for _ in 0..count {
        let mut len = [0; 4];
        stream.read_exact(&mut len).ok()?;
        let mut item = vec![0; u32::from_be_bytes(len) as usize];
        stream.read_exact(&mut item).ok()?;
        items.push(item);
    }
    Some((head[0], items))
}

fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    BufReader::new(stream)
}

/// A row's columns as `misc get` lists them; `None`: no row.
type Row = Option<Vec<Vec<u8>>>;

struct Writer {
    keys: Vec<String>,
    /// What the server acknowledged for each key.
    model: BTreeMap<String, Row>,
    /// The write sent when the server died: (key, what it would make).
    in_flight: Option<(String, Row)>,
    rng: SmallRng,
}

impl Writer {
    fn run_until_killed(&mut self, addr: SocketAddr) -> u64 {
        let mut stream = connect(addr);
        let mut acknowledged = 0;
        loop {
            let key = self.keys[self.rng.random_range(0..self.keys.len())].clone();
            let (call, args, row): (&[u8], Vec<Vec<u8>>, Row) = if self.rng.random_bool(0.2) {
                (b"out", vec![key.clone().into_bytes()], None)
            } else {
                let words = ["red", "green", "blue", "Hello", "world"];
                let columns = vec![
                    b"name".to_vec(),
                    words[self.rng.random_range(0..5)].as_bytes().to_vec(),
                    b"age".to_vec(),
                    self.rng.random_range(0..90).to_string().into_bytes(),
                    b"tags".to_vec(),
                    format!(
                        "{},{}",
                        words[self.rng.random_range(0..3)],
                        words[self.rng.random_range(0..3)]
                    )
                    .into_bytes(),
                    b"text".to_vec(),
                    format!("{} {}", words[self.rng.random_range(0..5)], acknowledged).into_bytes(),
                ];
                let mut args = vec![key.clone().into_bytes()];
                args.extend(columns.iter().cloned());
                (b"put", args, Some(columns))
            };
            self.in_flight = Some((key.clone(), row.clone()));
            match misc(&mut stream, call, &args) {
                Some((0, _)) => {
                    self.model.insert(key, row);
                }
                // `out` of a row that is not there: nothing changed.
                Some((_, _)) => {}
                None => return acknowledged,
            }
            self.in_flight = None;
            acknowledged += 1;
        }
    }

    /// Compares every key with the restarted server; a write in flight may
    /// have happened or not, and the server says which.
    fn verify(&mut self, stream: &mut BufReader<TcpStream>) -> Vec<String> {
        let mut wrong = Vec::new();
        for key in &self.keys {
            let (code, items) = misc(stream, b"get", &[key.clone().into_bytes()]).expect("a reply");
            let found: Row = (code == 0).then_some(items);
            let expected = self.model.get(key).cloned().unwrap_or(None);
            match &self.in_flight {
                Some((flying, row)) if flying == key && found == *row => {
                    self.model.insert(key.clone(), row.clone());
                }
                _ if found == expected => {}
                _ => wrong.push(format!("{key}: found {found:?}, acknowledged {expected:?}")),
            }
        }
        self.in_flight = None;
        wrong
    }
}

#[test]
fn acknowledged_rows_and_their_indexes_survive_sigkill() {
    let cycles: usize = std::env::var("KURA_TABLE_CRASH_CYCLES").map_or(6, |n| n.parse().unwrap());
    let seed: u64 = std::env::var("KURA_TABLE_CRASH_SEED")
        .map_or_else(|_| std::process::id() as u64, |n| n.parse().unwrap());
    eprintln!("table crash test: {cycles} cycles, KURA_TABLE_CRASH_SEED={seed}");
    let mut rng = SmallRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), POLICIES[0]);
    {
        let mut stream = connect(server.tyrant);
        let indexes: Vec<Vec<u8>> = [
            "name", "LEXICAL", "age", "DECIMAL", "tags", "TOKEN", "text", "QGRAM",
        ]
        .iter()
        .map(|word| word.as_bytes().to_vec())
        .collect();
        assert_eq!(
            misc(&mut stream, b"setindex", &indexes).map(|r| r.0),
            Some(0)
        );
    }
    let mut writers: Vec<Writer> = (0..WRITERS)
        .map(|id| Writer {
            keys: (0..KEYS).map(|k| format!("w{id}-{k:03}")).collect(),
            model: BTreeMap::new(),
            in_flight: None,
            rng: SmallRng::seed_from_u64(rng.random()),
        })
        .collect();
    let mut total = 0;
    for cycle in 0..cycles {
        let delay = Duration::from_millis(rng.random_range(50..=400));
        let addr = server.tyrant;
        let acknowledged: u64 = std::thread::scope(|scope| {
            let threads: Vec<_> = writers
                .iter_mut()
                .map(|writer| scope.spawn(move || writer.run_until_killed(addr)))
                .collect();
            std::thread::sleep(delay);
            server.kill();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        total += acknowledged;
        server = Server::start(dir.path(), POLICIES[(cycle + 1) % POLICIES.len()]);
        let mut stream = connect(server.tyrant);
        let wrong: Vec<String> = writers
            .iter_mut()
            .flat_map(|w| w.verify(&mut stream))
            .collect();
        assert!(
            wrong.is_empty(),
            "cycle {cycle}: acknowledged rows lost or wrong:\n{}",
            wrong.join("\n")
        );
        let check = Command::new(KURA)
            .args(["table", "check", "--server", &server.tyrant.to_string()])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "cycle {cycle}: kura table check: {}",
            String::from_utf8_lossy(&check.stdout)
        );
        eprintln!("cycle {}/{cycles}: killed after {} ms, {acknowledged} writes acknowledged; rows and indexes agree", cycle + 1, delay.as_millis());
    }
    assert!(total > 0, "the writers wrote");
    // And offline, from the data directory of the stopped server.
    server.kill();
    let check = Command::new(KURA)
        .args(["table", "check", "--table", "t", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&check.stdout),
        "every index agrees with the table\n"
    );
}

/// `genuid` as Tokyo Cabinet's counter: an id handed out (used or not, its
/// row removed or not) does not come back after a SIGKILL and a restart.
fn genuid(stream: &mut BufReader<TcpStream>) -> u64 {
    let (status, items) = misc(stream, b"genuid", &[]).expect("a reply");
    assert_eq!(status, 0, "genuid succeeds");
    String::from_utf8(items[0].clone())
        .unwrap()
        .parse()
        .unwrap()
}

/// `genuid` across a change of role: a server that handed out ids, then
/// followed a master that handed out more, hands out ids past the
/// master's once promoted, not past its own older ones.
#[test]
fn genuid_after_following_a_master_steps_past_the_masters_ids() {
    let work = tempfile::tempdir().unwrap();
    let a = Server::start(&work.path().join("a"), "batch");
    let b = Server::start(&work.path().join("b"), "batch");
    let mut on_a = connect(a.tyrant);
    for id in 1..=5 {
        assert_eq!(genuid(&mut on_a), id);
    }
    let mut on_b = connect(b.tyrant);
    for id in 1..=100 {
        assert_eq!(genuid(&mut on_b), id);
    }
    let mut admin = Client::connect(a.port);
    assert_eq!(
        admin.call(format!("replicaof 127.0.0.1 {}\r\n", b.port).as_bytes()),
        "OK"
    );
    let master_lsn = Client::connect(b.port).stats("replication")["repl_lsn"].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while admin.stats("replication").get("repl_lsn") != Some(&master_lsn) {
        assert!(
            std::time::Instant::now() < deadline,
            "a never caught up with b"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admin.call(b"replicaof no one\r\n"), "OK");
    assert_eq!(genuid(&mut connect(a.tyrant)), 101, "b handed out 1 to 100");
}

#[test]
fn genuid_hands_out_no_id_twice_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), "batch");
    let mut stream = connect(server.tyrant);
    let put = |stream: &mut BufReader<TcpStream>, key: &[u8]| {
        let args = [key.to_vec(), b"name".to_vec(), b"N".to_vec()];
        assert_eq!(misc(stream, b"put", &args).map(|r| r.0), Some(0));
    };
    put(&mut stream, b"10");
    assert_eq!(genuid(&mut stream), 11);
    put(&mut stream, b"11");
    assert_eq!(genuid(&mut stream), 12);
    // 12 is never used, and 11's row goes: a scan of the keys would give 11.
    let out = [b"11".to_vec()];
    assert_eq!(misc(&mut stream, b"out", &out).map(|r| r.0), Some(0));
    drop(stream);
    server.kill();

    server = Server::start(dir.path(), "batch");
    let mut stream = connect(server.tyrant);
    assert_eq!(genuid(&mut stream), 13, "ids 11 and 12 were handed out");
    // A put without a key takes the next id too.
    let request = kura_proto::tyrant::Request::Put {
        mode: kura_proto::tyrant::PutMode::Put,
        key: b"",
        value: b"name\0x",
    };
    let mut bytes = Vec::new();
    compose(&mut bytes, &request);
    stream.get_mut().write_all(&bytes).unwrap();
    let mut status = [0];
    stream.read_exact(&mut status).unwrap();
    assert_eq!(status, [0]);
    server.kill();

    server = Server::start(dir.path(), "batch");
    let mut stream = connect(server.tyrant);
    assert_eq!(genuid(&mut stream), 15, "the put without a key took 14");
}
