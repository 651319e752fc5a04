//! Point-in-time restore, end to end: writers change a real `kura serve`
//! for a while (sets of small and large values, appends, touches,
//! deletes), a full backup is taken under that load and an incremental one
//! at the end, and `kura restore` then rebuilds the data at random instants.
//! Each restored directory is served by a real server and read key by key:
//! value, flags and expiry must be the model's state at that instant.
//!
//! The writers own disjoint keys and have one request in flight each, so
//! the model knows every key's history, each change with the time it was
//! sent and the time its reply came. The server stamps a change between the
//! two: at instant T a key holds the state after its last change answered
//! by T, or, if a change was in flight at T, possibly the state after it.
//!
//! Environment: `KURA_PITR_SECONDS` (default 60), `KURA_PITR_SEED`
//! (default from the clock; printed), `KURA_BIN`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

use support::{free_port, kura_bin, serve_disk};

const WRITERS: usize = 4;
const KEYS_PER_WRITER: usize = 40;
/// Instants restored to, besides the backups' own ends.
const INSTANTS: usize = 10;
/// Slack on expiry times: the server's second may round either way.
const EXPIRY_SLACK: i64 = 2;

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let port = free_port();
        let child = serve_disk(dir, port, &["--log-retention", "24h"]);
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        Server { child, addr }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An item as a client sees it; the expiry is a window of Unix seconds
/// (`None`: never expires).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    value: Vec<u8>,
    flags: u32,
    expiry: Option<(i64, i64)>,
}

type State = Option<Item>;

/// A key's state after a change, from its reply and when it was sent and
/// answered (µs).
type StateAfter = dyn Fn(&str, (u64, u64)) -> State;

/// One change to a key, answered.
#[derive(Debug, Clone)]
struct Change {
    sent: u64,
    answered: u64,
    after: State,
}

/// The states a key may hold at instant `at`.
fn allowed_at(history: &[Change], at: u64) -> Vec<&State> {
    static ABSENT: State = None;
    let mut base = &ABSENT;
    let mut in_flight = None;
    for change in history {
        if change.answered <= at {
            base = &change.after;
        } else if change.sent <= at {
            in_flight = Some(&change.after);
        }
    }
    std::iter::once(base).chain(in_flight).collect()
}

fn read_line(reader: &mut impl BufRead) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.ends_with("\r\n"), "a whole reply line, got {line:?}");
    line.truncate(line.len() - 2);
    line
}

/// One writer: random changes to its own keys until `stop`; returns each
/// key's history.
fn write_for(
    server: &Server,
    writer: usize,
    seed: u64,
    stop: &AtomicBool,
) -> BTreeMap<String, Vec<Change>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let stream = server.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    let mut histories: BTreeMap<String, Vec<Change>> = BTreeMap::new();
    let mut current: BTreeMap<String, Item> = BTreeMap::new();
    let mut version = 0u64;
    while !stop.load(Ordering::Acquire) {
        let key = format!("w{writer}k{}", rng.random_range(0..KEYS_PER_WRITER));
        let exptime: i64 = match rng.random_range(0..4) {
            0 => 0,
            _ => rng.random_range(3600..7200),
        };
        let window = move |sent: u64, answered: u64| {
            (exptime > 0).then(|| {
                (
                    (sent / 1_000_000) as i64 + exptime,
                    (answered / 1_000_000) as i64 + exptime,
                )
            })
        };
        let roll = rng.random_range(0..100);
        let (request, after): (Vec<u8>, Box<StateAfter>) = if roll < 50 {
            version += 1;
            let len = match rng.random_range(0..10) {
                0..=6 => rng.random_range(1..200),
                _ => rng.random_range(500..3000),
            };
            let tag = format!("{key}:{version};");
            let value: Vec<u8> = tag.bytes().cycle().take(len).collect();
            let flags = rng.random_range(0..u32::MAX);
            let mut request = format!("set {key} {flags} {exptime} {len}\r\n").into_bytes();
            request.extend_from_slice(&value);
            request.extend_from_slice(b"\r\n");
            let after = move |reply: &str, (sent, answered)| {
                assert_eq!(reply, "STORED");
                Some(Item {
                    value: value.clone(),
                    flags,
                    expiry: window(sent, answered),
                })
            };
            (request, Box::new(after))
        } else if roll < 65 {
            let chunk = format!("+{}", rng.random_range(0..1000));
            let old = current.get(&key).cloned();
            let request = format!("append {key} 0 0 {}\r\n{chunk}\r\n", chunk.len()).into_bytes();
            let after = move |reply: &str, _| match &old {
                Some(item) => {
                    assert_eq!(reply, "STORED");
                    let mut item = item.clone();
                    item.value.extend_from_slice(chunk.as_bytes());
                    Some(item)
                }
                None => {
                    assert_eq!(reply, "NOT_STORED");
                    None
                }
            };
            (request, Box::new(after))
        } else if roll < 80 {
            let old = current.get(&key).cloned();
            let request = format!("touch {key} {exptime}\r\n").into_bytes();
            let after = move |reply: &str, (sent, answered)| match &old {
                Some(item) => {
                    assert_eq!(reply, "TOUCHED");
                    Some(Item {
                        expiry: window(sent, answered),
                        ..item.clone()
                    })
                }
                None => {
                    assert_eq!(reply, "NOT_FOUND");
                    None
                }
            };
            (request, Box::new(after))
        } else {
            let existed = current.contains_key(&key);
            let request = format!("delete {key}\r\n").into_bytes();
            let after = move |reply: &str, _| {
                assert_eq!(reply, if existed { "DELETED" } else { "NOT_FOUND" });
                None
            };
            (request, Box::new(after))
        };
        let sent = now_micros();
        stream.write_all(&request).unwrap();
        let reply = read_line(&mut reader);
        let answered = now_micros();
        let state = after(&reply, (sent, answered));
        match &state {
            Some(item) => current.insert(key.clone(), item.clone()),
            None => current.remove(&key),
        };
        histories.entry(key).or_default().push(Change {
            sent,
            answered,
            after: state,
        });
    }
    histories
}

/// Every key's item as the server at `addr` holds it (`mg` with value,
/// flags and remaining time), with the Unix second it was read at.
fn read_all(server: &Server, keys: &[String]) -> BTreeMap<String, (State, i64)> {
    let stream = server.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    let mut found = BTreeMap::new();
    for key in keys {
        stream
            .write_all(format!("mg {key} v f t\r\n").as_bytes())
            .unwrap();
        let line = read_line(&mut reader);
        let now = (now_micros() / 1_000_000) as i64;
        if line == "EN" {
            found.insert(key.clone(), (None, now));
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(words[0], "VA", "{key}: {line}");
        let len: usize = words[1].parse().unwrap();
        let mut flags = 0;
        let mut ttl = -1;
        for word in &words[2..] {
            match word.split_at(1) {
                ("f", n) => flags = n.parse().unwrap(),
                ("t", n) => ttl = n.parse().unwrap(),
                _ => {}
            }
        }
        let mut value = vec![0; len + 2];
        reader.read_exact(&mut value).unwrap();
        value.truncate(len);
        let expiry = (ttl >= 0).then_some((now + ttl, now + ttl));
        found.insert(
            key.clone(),
            (
                Some(Item {
                    value,
                    flags,
                    expiry,
                }),
                now,
            ),
        );
    }
    found
}

/// Whether what a server holds is one of the states the model allows.
fn matches(found: &State, allowed: &State) -> bool {
    match (found, allowed) {
        (None, None) => true,
        (Some(found), Some(allowed)) => {
            found.value == allowed.value
                && found.flags == allowed.flags
                && match (found.expiry, allowed.expiry) {
                    (None, None) => true,
                    (Some((at, _)), Some((earliest, latest))) => {
                        at >= earliest - EXPIRY_SLACK && at <= latest + EXPIRY_SLACK
                    }
                    _ => false,
                }
        }
        _ => false,
    }
}

fn describe(state: &State) -> String {
    match state {
        None => "absent".into(),
        Some(item) => format!(
            "len {} {:?} flags {} expiry {:?}",
            item.value.len(),
            String::from_utf8_lossy(&item.value[..item.value.len().min(30)]),
            item.flags,
            item.expiry
        ),
    }
}

fn kura(args: &[&str]) -> String {
    let output = Command::new(kura_bin()).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "kura {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The earliest instant a restore of the backup in `dir` reaches (its
/// snapshot's, or the end of a round its copy of LMDB holds part of), and
/// its last entry's.
fn manifest_last_micros(dir: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let snapshot = manifest["snapshot"]["micros"].as_u64().unwrap_or(0);
    let consistent_from = manifest["consistent_from"]["micros"].as_u64().unwrap_or(0);
    let last = manifest["last"]["micros"].as_u64().unwrap();
    (snapshot.max(consistent_from), last)
}

/// Restores `from` (up to `until`, µs) into a new directory and reads
/// every key from a server on it.
fn restore_and_read(
    from: &Path,
    until: Option<u64>,
    to: PathBuf,
    keys: &[String],
) -> BTreeMap<String, (State, i64)> {
    let mut args = vec![
        "restore".to_string(),
        "--from".into(),
        from.display().to_string(),
        "--to".into(),
        to.display().to_string(),
    ];
    if let Some(micros) = until {
        // The instant in each form `--until` takes, in turn.
        let seconds = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
        args.push("--until".into());
        args.push(match micros % 3 {
            0 => seconds,
            1 => format!("@{seconds}"),
            _ => kura_store::disk::format_micros(micros),
        });
    }
    kura(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let server = Server::start(&to);
    read_all(&server, keys)
}

/// Checks a restored state against the model at `at` (µs); returns how
/// many keys hold an item.
fn check_at(
    label: &str,
    found: &BTreeMap<String, (State, i64)>,
    histories: &BTreeMap<String, Vec<Change>>,
    at: u64,
) -> usize {
    let mut wrong = Vec::new();
    for (key, (state, _)) in found {
        let history = histories.get(key).map(Vec::as_slice).unwrap_or(&[]);
        let allowed = allowed_at(history, at);
        if !allowed.iter().any(|allowed| matches(state, allowed)) {
            wrong.push(format!(
                "{key}: restored {}, the model allows {}",
                describe(state),
                allowed
                    .iter()
                    .map(|s| describe(s))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{label}: {} of {} keys differ from the model:\n{}",
        wrong.len(),
        found.len(),
        wrong[..wrong.len().min(10)].join("\n")
    );
    let held = found.values().filter(|(state, _)| state.is_some()).count();
    println!(
        "{label}: {} keys equal the model, {held} of them holding an item",
        found.len()
    );
    held
}

#[test]
#[ignore = "a minute of load; scripts/test runs it"]
fn restores_to_random_instants_equal_the_model() {
    let seconds: u64 = std::env::var("KURA_PITR_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("KURA_PITR_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(now_micros);
    println!("KURA_PITR_SEED={seed} KURA_PITR_SECONDS={seconds}");
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let full = work.path().join("full");
    let incremental = work.path().join("incremental");
    let final_full = work.path().join("final-full");
    let server = Server::start(&data);
    let address = server.addr.to_string();
    let stop = AtomicBool::new(false);
    let histories = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (server, stop) = (&server, &stop);
                scope.spawn(move || write_for(server, writer, seed + writer as u64, stop))
            })
            .collect();
        // The full backup is taken under load.
        std::thread::sleep(Duration::from_secs(seconds / 5));
        let full_arg = full.display().to_string();
        kura(&["backup", "--server", &address, "--to", &full_arg]);
        std::thread::sleep(Duration::from_secs(seconds - seconds / 5));
        stop.store(true, Ordering::Release);
        let mut histories = BTreeMap::new();
        for writer in writers {
            histories.extend(writer.join().unwrap());
        }
        histories
    });
    let changes: usize = histories.values().map(Vec::len).sum();
    println!("{changes} changes by {WRITERS} writers in {seconds} s");
    let (full_arg, incremental_arg) = (
        full.display().to_string(),
        incremental.display().to_string(),
    );
    kura(&[
        "backup",
        "--server",
        &address,
        "--to",
        &incremental_arg,
        "--incremental",
        "--since",
        &full_arg,
    ]);
    kura(&[
        "backup",
        "--server",
        &address,
        "--to",
        &final_full.display().to_string(),
    ]);
    drop(server);
    print!("{}", kura(&["backup", "verify", &incremental_arg]));
    let keys: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..KEYS_PER_WRITER).map(move |k| format!("w{w}k{k}")))
        .collect();

    // The full backup alone: the model at its last entry.
    let (snapshot, full_last) = manifest_last_micros(&full);
    let found = restore_and_read(&full, None, work.path().join("r-full"), &keys);
    check_at(
        "full backup taken under load",
        &found,
        &histories,
        full_last,
    );

    // Random instants from the snapshot to the end of the chain, and after
    // the first write: a snapshot taken before the first round applied is
    // at LSN 0, with no time, and an instant before any write restores
    // nothing to compare.
    let (_, end) = manifest_last_micros(&incremental);
    let first_write = histories
        .values()
        .flatten()
        .map(|change| change.sent)
        .min()
        .expect("the writers wrote");
    let start = snapshot.max(first_write);
    assert!(start < end, "no history to restore into");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut instants: Vec<u64> = (0..INSTANTS)
        .map(|_| rng.random_range(start..=end))
        .collect();
    instants.sort();
    let mut held = 0;
    for (k, at) in instants.into_iter().enumerate() {
        let to = work.path().join(format!("r-{k}"));
        let found = restore_and_read(&incremental, Some(at), to, &keys);
        held += check_at(&format!("instant {k} ({at} µs)"), &found, &histories, at);
    }
    assert!(
        held > 0,
        "every restored instant was empty: nothing compared"
    );

    // Full + incremental restores what one full backup at the end does.
    let chained = restore_and_read(&incremental, None, work.path().join("r-chain"), &keys);
    let whole = restore_and_read(&final_full, None, work.path().join("r-final"), &keys);
    check_at("full + incremental", &chained, &histories, u64::MAX);
    for key in &keys {
        let (a, b) = (&chained[key].0, &whole[key].0);
        let same = match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.value == b.value
                    && a.flags == b.flags
                    && match (a.expiry, b.expiry) {
                        (None, None) => true,
                        (Some((x, _)), Some((y, _))) => (x - y).abs() <= EXPIRY_SLACK,
                        _ => false,
                    }
            }
            _ => false,
        };
        assert!(
            same,
            "{key}: full + incremental restored {}, one full backup {}",
            describe(a),
            describe(b)
        );
    }
    println!("full + incremental equals one full backup, key for key");
}

/// `kura log dump` and `kura log stats` read a running server's log.
#[test]
fn log_dump_and_stats_show_each_entry() {
    let work = tempfile::tempdir().unwrap();
    // The backups below go beside it: a server refuses one into its own.
    let data = work.path().join("data");
    let server = Server::start(&data);
    let stream = server.connect();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    for request in [
        &b"set k 5 0 3\r\nabc\r\n"[..],
        b"set bin 0 0 3\r\n\x01\t\xff\r\n",
        b"delete k\r\n",
        b"flush_all\r\n",
    ] {
        stream.write_all(request).unwrap();
        read_line(&mut reader);
    }
    let dir = data.display().to_string();
    // A directory that is neither a data directory nor a backup is named.
    let elsewhere = tempfile::tempdir().unwrap();
    for command in ["stats", "dump"] {
        let output = Command::new(kura_bin())
            .args(["log", command, "--dir"])
            .arg(elsewhere.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{command}: {stderr}");
        assert!(
            stderr.contains("neither a kura data directory nor a backup"),
            "{stderr}"
        );
    }
    let dump = kura(&["log", "dump", "--dir", &dir, "--json"]);
    let lines: Vec<serde_json::Value> = dump
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let ops: Vec<(&str, u64)> = lines
        .iter()
        .map(|l| (l["op"].as_str().unwrap(), l["lsn"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        ops,
        [("set", 1), ("set", 2), ("delete", 3), ("flush_all", 4)],
        "{dump}"
    );
    assert_eq!(lines[0]["key"], "k");
    assert_eq!(lines[0]["value"], "abc");
    assert_eq!(lines[0]["flags"], 5);
    assert_eq!(lines[1]["value_base64"], "AQn/");
    let text = kura(&["log", "dump", "--dir", &dir, "--from", "2", "--until", "3"]);
    let fields: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(fields.len(), 2, "{text}");
    assert_eq!(
        fields[0][3..],
        ["set", "bin", "0", "0", fields[0][7], "\\x01\\t\\xff"]
    );
    assert_eq!(fields[1][3..], ["delete", "k"]);
    let stats: serde_json::Value =
        serde_json::from_str(&kura(&["log", "stats", "--dir", &dir, "--json"])).unwrap();
    assert_eq!(
        (stats["first_lsn"].as_u64(), stats["last_lsn"].as_u64()),
        (Some(1), Some(4))
    );
    assert_eq!(stats["entries"], 4);

    // A backup's log shows the entries it adds: those before are in its
    // snapshot or in the backup it continues, though its segments hold them.
    let address = server.addr.to_string();
    let full = work.path().join("full").display().to_string();
    let incremental = work.path().join("incremental").display().to_string();
    kura(&["backup", "--server", &address, "--to", &full]);
    for request in [&b"set a 0 0 1\r\n1\r\n"[..], b"set b 0 0 1\r\n2\r\n"] {
        stream.write_all(request).unwrap();
        read_line(&mut reader);
    }
    kura(&[
        "backup",
        "--server",
        &address,
        "--to",
        &incremental,
        "--incremental",
        "--since",
        &full,
    ]);
    let lsns = |dump: String| -> Vec<u64> {
        (dump.lines())
            .map(|line| line.split('\t').next().unwrap().parse().unwrap())
            .collect()
    };
    let manifest = std::fs::read(work.path().join("full/manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let snapshot = manifest["snapshot"]["lsn"].as_u64().unwrap();
    assert_eq!(
        lsns(kura(&["log", "dump", "--dir", &full])),
        (snapshot + 1..=4).collect::<Vec<_>>()
    );
    assert_eq!(lsns(kura(&["log", "dump", "--dir", &incremental])), [5, 6]);
    assert_eq!(
        lsns(kura(&["log", "dump", "--dir", &incremental, "--from", "2"])),
        [5, 6]
    );
    let stats: serde_json::Value =
        serde_json::from_str(&kura(&["log", "stats", "--dir", &incremental, "--json"])).unwrap();
    assert_eq!(
        (&stats["first_lsn"], &stats["last_lsn"], &stats["entries"]),
        (&5.into(), &6.into(), &2.into())
    );
    assert_eq!(stats["gaps"], serde_json::json!([]));
}
