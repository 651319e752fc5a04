//! Replication between real `kura serve` processes.
//!
//! `replicas_survive_kills_and_a_resync_and_equal_the_master`: a master
//! under a mixed write load (sets with and without expiry, appends, incr
//! counters, deletes, touches) with two replicas. Replica A is killed
//! (SIGKILL) and restarted several times; replica B is killed while a
//! burst of large values pushes the master's log past B's position (the
//! master keeps 4 MiB of log), so B must take a snapshot when it comes
//! back. After the load stops every replica must equal the master key for
//! key (value, flags, expiry, CAS), and every counter must hold exactly the
//! number of increments the master acknowledged.
//!
//! `tokyo_tyrant_setmst_and_stat_show_the_master`: a Tokyo Tyrant client
//! makes a server a replica with `setmst` and reads `mhost`, `mport`,
//! `rts` and `delay` from `stat`, then promotes it with `setmst` to no
//! master.
//!
//! `bad_replication_requests_get_memcached_answers` and
//! `a_replica_drops_a_master_that_sends_garbage_and_connects_again`: bad
//! lines get memcached's errors, a link that sends anything but acks is let
//! go, a master that sends a frame of unknown kind, damaged records or an
//! absurd length is dropped and connected to again, nothing applied.
//!
//! Environment: `KURA_BIN` (default: the binary cargo built with this test).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod support;

use support::client::{addr, Client};
use support::{free_port, serve_disk, Running};

const WRITERS: usize = 4;
const KEYS_PER_WRITER: usize = 60;
const COUNTERS_PER_WRITER: usize = 4;
const KILLS_OF_A: usize = 4;

/// A replication test's server: `-m 64` and `extra`.
fn serve(dir: &Path, port: u16, extra: &[String]) -> Running {
    let mut flags = vec!["-m", "64"];
    flags.extend(extra.iter().map(String::as_str));
    Running(serve_disk(dir, port, &flags))
}

/// What the master acknowledged of one writer's counters.
type Increments = Vec<u64>;

/// Mixed writes on keys of its own until `stop`; returns the increments
/// the master acknowledged per counter.
fn write_load(port: u16, writer: usize, seed: u64, stop: &AtomicBool) -> Increments {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut client = Client::connect(port);
    let mut increments = vec![0; COUNTERS_PER_WRITER];
    for counter in 0..COUNTERS_PER_WRITER {
        let key = format!("ctr:{writer}:{counter}");
        assert_eq!(
            client.call(format!("set {key} 0 0 1\r\n0\r\n").as_bytes()),
            "STORED"
        );
    }
    while !stop.load(Ordering::Relaxed) {
        let key = format!("w{writer}:{}", rng.random_range(0..KEYS_PER_WRITER));
        match rng.random_range(0..100) {
            0..40 => {
                let len = rng.random_range(1..1500);
                let value: Vec<u8> = (0..len).map(|_| rng.random_range(b'a'..=b'z')).collect();
                let flags: u32 = rng.random();
                let ttl = if rng.random_bool(0.3) { 3600 } else { 0 };
                let mut request = format!("set {key} {flags} {ttl} {len}\r\n").into_bytes();
                request.extend_from_slice(&value);
                request.extend_from_slice(b"\r\n");
                assert_eq!(client.call(&request), "STORED");
            }
            40..55 => {
                let reply = client.call(format!("append {key} 0 0 3\r\n+++\r\n").as_bytes());
                assert!(reply == "STORED" || reply == "NOT_STORED", "{reply}");
            }
            55..80 => {
                let counter = rng.random_range(0..COUNTERS_PER_WRITER);
                let reply = client.call(format!("incr ctr:{writer}:{counter} 1\r\n").as_bytes());
                increments[counter] += 1;
                assert_eq!(reply, increments[counter].to_string());
            }
            80..90 => {
                let reply = client.call(format!("delete {key}\r\n").as_bytes());
                assert!(reply == "DELETED" || reply == "NOT_FOUND", "{reply}");
            }
            _ => {
                let reply = client.call(format!("touch {key} 7200\r\n").as_bytes());
                assert!(reply == "TOUCHED" || reply == "NOT_FOUND", "{reply}");
            }
        }
    }
    increments
}

/// Waits until the replica on `port` holds the master's last entry.
/// Asks `client`'s server to apply what its log holds (a plain `stats`
/// does), then gives its applier the time to let retention go over it.
fn apply_now(client: &mut Client) {
    client.lines("stats\r\n");
    std::thread::sleep(Duration::from_millis(500));
}

/// The first entry the log in `dir` holds, as `kura log stats` reads a
/// live server's directory (0 if a segment went while it read).
fn first_lsn_kept(dir: &Path) -> u64 {
    let output = std::process::Command::new(support::kura_bin())
        .args(["log", "stats", "--json", "--dir"])
        .arg(dir)
        .output()
        .expect("kura log stats runs");
    serde_json::from_slice::<serde_json::Value>(&output.stdout)
        .ok()
        .and_then(|stats| stats["first_lsn"].as_u64())
        .unwrap_or(0)
}

fn wait_for_catch_up(master: u16, replica: u16) {
    let last = Client::connect(master).stats("replication")["repl_lsn"].clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = Client::connect(replica).stats("replication");
        if stats.get("repl_lsn") == Some(&last) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica on {replica} stuck at {:?}, master at {last}: {stats:?}",
            stats.get("repl_lsn")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first difference between the master's items and the replica's,
/// if any.
fn difference(master: u16, replica: u16) -> Option<String> {
    let (mut on_master, mut on_replica) = (Client::connect(master), Client::connect(replica));
    let (items, replica_items) = (on_master.items(), on_replica.items());
    assert!(
        items.len() > WRITERS * COUNTERS_PER_WRITER,
        "the load wrote"
    );
    let missing: Vec<_> = items
        .keys()
        .filter(|k| !replica_items.contains_key(*k))
        .collect();
    let extra: Vec<_> = replica_items
        .keys()
        .filter(|k| !items.contains_key(*k))
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Some(format!("keys missing {missing:?}, extra {extra:?}"));
    }
    for (key, meta) in &items {
        if &replica_items[key] != meta {
            return Some(format!(
                "{key}: {meta} on the master, {}",
                replica_items[key]
            ));
        }
        let (here, there) = (on_master.gets(key), on_replica.gets(key));
        if here != there {
            return Some(format!("{key}: {here:?} on the master, {there:?}"));
        }
    }
    None
}

/// The replica holds what the master holds, key for key. (`metadump`
/// reads what the applier has applied, which may be up to a round late:
/// a difference must last to count.)
fn assert_same_data(master: u16, replica: u16, name: &str) {
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        last = difference(master, replica);
        if last.is_none() {
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "{name} differs from the master: {}",
        last.unwrap_or_default()
    );
}

#[test]
fn replicas_survive_kills_and_a_resync_and_equal_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let (master_port, a_port, b_port) = (free_port(), free_port(), free_port());
    let _master = serve(
        &dir.path().join("master"),
        master_port,
        &["--log-retention".to_string(), "4MiB".to_string()],
    );
    let follow = vec![
        "--replica-of".to_string(),
        format!("127.0.0.1:{master_port}"),
    ];
    let mut replica_a = serve(&dir.path().join("a"), a_port, &follow);
    let mut replica_b = serve(&dir.path().join("b"), b_port, &follow);

    let stop = Arc::new(AtomicBool::new(false));
    let seed = rand::random::<u64>();
    eprintln!("replication load seed {seed}");
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                write_load(master_port, writer, seed.wrapping_add(writer as u64), &stop)
            })
        })
        .collect();

    let mut rng = SmallRng::seed_from_u64(seed);
    for kill in 0..KILLS_OF_A {
        std::thread::sleep(Duration::from_millis(rng.random_range(200..700)));
        replica_a.kill();
        if kill == 1 {
            // B goes too, and the master's log moves on past it: 16 MiB of
            // large values against 4 MiB of retention.
            replica_b.kill();
            let mut client = Client::connect(master_port);
            let b_at_most: u64 = client.stats("kura")["log_last_lsn"].parse().unwrap();
            // A round now: B's position ends its segment, and the values
            // below start the next.
            apply_now(&mut client);
            let big = vec![b'B'; 64 * 1024];
            for n in 0..256 {
                let mut request = format!("set big:{n} 1 0 {}\r\n", big.len()).into_bytes();
                request.extend_from_slice(&big);
                request.extend_from_slice(b"\r\n");
                assert_eq!(client.call(&request), "STORED");
            }
            // Retention lets B's segment go once the large values' segment
            // (live: they stay in the log) is applied after it: the log's
            // first entry is then past any position B can have.
            let deadline = Instant::now() + Duration::from_secs(60);
            while first_lsn_kept(&dir.path().join("master")) <= b_at_most + 1 {
                assert!(
                    Instant::now() < deadline,
                    "the master's log still reaches B"
                );
                apply_now(&mut client);
            }
            replica_b = serve(&dir.path().join("b"), b_port, &follow);
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(50..300)));
        replica_a = serve(&dir.path().join("a"), a_port, &follow);
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let increments: Vec<Increments> = writers
        .into_iter()
        .map(|writer| writer.join().expect("a writer"))
        .collect();

    for (port, name) in [(a_port, "replica A"), (b_port, "replica B")] {
        wait_for_catch_up(master_port, port);
        assert_same_data(master_port, port, name);
        let mut client = Client::connect(port);
        for (writer, counts) in increments.iter().enumerate() {
            for (counter, count) in counts.iter().enumerate() {
                let (_, value, _) = client.gets(&format!("ctr:{writer}:{counter}")).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&value).trim_end(),
                    count.to_string(),
                    "{name}: counter {writer}:{counter} (applied twice or skipped?)"
                );
            }
        }
        let reply = client.call(b"set nope 0 0 1\r\nx\r\n");
        assert!(
            reply.starts_with("SERVER_ERROR read-only replica"),
            "{reply}"
        );
    }
    let b_stats = Client::connect(b_port).stats("replication");
    assert_eq!(
        b_stats["repl_snapshots_loaded"], "1",
        "B came back past the master's log: {b_stats:?}"
    );
    let master_stats = Client::connect(master_port).stats("replication");
    assert_eq!(master_stats["repl_replicas"], "2", "{master_stats:?}");
    assert!(master_stats["repl_snapshots_sent"].parse::<u64>().unwrap() >= 1);
}

/// A Tokyo Tyrant request: magic, command, then its fields.
fn tyrant_call(stream: &mut TcpStream, command: u8, fields: &[u8]) -> u8 {
    let mut request = vec![0xC8, command];
    request.extend_from_slice(fields);
    stream.write_all(&request).unwrap();
    let mut status = [0];
    stream.read_exact(&mut status).unwrap();
    status[0]
}

fn tyrant_stat(port: u16) -> BTreeMap<String, String> {
    let mut stream = TcpStream::connect(addr(port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    assert_eq!(tyrant_call(&mut stream, 0x88, &[]), 0);
    let mut size = [0; 4];
    stream.read_exact(&mut size).unwrap();
    let mut text = vec![0; u32::from_be_bytes(size) as usize];
    stream.read_exact(&mut text).unwrap();
    String::from_utf8(text)
        .unwrap()
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn setmst(port: u16, host: &str, master_port: u32) -> u8 {
    let mut stream = TcpStream::connect(addr(port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut fields = Vec::new();
    fields.extend_from_slice(&(host.len() as u32).to_be_bytes());
    fields.extend_from_slice(&master_port.to_be_bytes());
    fields.extend_from_slice(&0u64.to_be_bytes());
    fields.extend_from_slice(&0u32.to_be_bytes());
    fields.extend_from_slice(host.as_bytes());
    tyrant_call(&mut stream, 0x78, &fields)
}

#[test]
fn tokyo_tyrant_setmst_and_stat_show_the_master() {
    let dir = tempfile::tempdir().unwrap();
    let (master_port, master_tyrant) = (free_port(), free_port());
    let (replica_port, replica_tyrant) = (free_port(), free_port());
    let tyrant = |port: u16| vec!["--tyrant-port".to_string(), port.to_string()];
    let _master = serve(
        &dir.path().join("master"),
        master_port,
        &tyrant(master_tyrant),
    );
    let _replica = serve(
        &dir.path().join("replica"),
        replica_port,
        &tyrant(replica_tyrant),
    );
    let mut client = Client::connect(master_port);
    assert_eq!(client.call(b"set k 0 0 2\r\nv1\r\n"), "STORED");

    let before = tyrant_stat(replica_tyrant);
    assert!(
        !before.contains_key("mhost"),
        "not a replica yet: {before:?}"
    );
    // The master's tyrant port: it answers kura's replication there too.
    assert_eq!(
        setmst(replica_tyrant, "127.0.0.1", u32::from(master_tyrant)),
        0
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while Client::connect(replica_port).gets("k").is_none() {
        assert!(Instant::now() < deadline, "the replica never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stat = tyrant_stat(replica_tyrant);
    assert_eq!(stat["mhost"], "127.0.0.1");
    assert_eq!(stat["mport"], master_tyrant.to_string());
    let rts: u64 = stat["rts"].parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    assert!(
        rts > 0 && rts <= now,
        "rts is the applied entry's time: {stat:?}"
    );
    assert!(now - rts < 60_000_000, "{stat:?}");
    let delay: f64 = stat["delay"].parse().unwrap();
    assert!((0.0..60.0).contains(&delay), "{stat:?}");
    assert!(stat["sid"].parse::<u32>().is_ok(), "{stat:?}");
    let reply = Client::connect(replica_port).call(b"set k 0 0 2\r\nv2\r\n");
    assert!(
        reply.starts_with("SERVER_ERROR read-only replica"),
        "{reply}"
    );

    // No master: a promotion.
    assert_eq!(setmst(replica_tyrant, "", 0), 0);
    assert!(!tyrant_stat(replica_tyrant).contains_key("mhost"));
    assert_eq!(
        Client::connect(replica_port).call(b"set k 0 0 2\r\nv3\r\n"),
        "STORED"
    );
}

#[test]
fn bad_replication_requests_get_memcached_answers() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = serve(&dir.path().join("disk"), port, &[]);
    let mut client = Client::connect(port);
    for bad in [
        &b"replicate\r\n"[..],
        b"replicate x none\r\n",
        b"replicate 7 12\r\n",
        b"replicate 7 none\r\n",
        b"replicaof somewhere\r\n",
        b"replicaof somewhere 0\r\n",
    ] {
        let reply = client.call(bad);
        assert!(reply.starts_with("CLIENT_ERROR"), "{bad:?}: {reply}");
    }
    // A host that is no host name would be written into the log as given.
    let long = format!("replicaof {} 11211\r\n", "h".repeat(256));
    for bad in [&b"replicaof h\x1b[2J 11211\r\n"[..], long.as_bytes()] {
        assert_eq!(client.call(bad), "CLIENT_ERROR bad host name", "{bad:?}");
    }
    // A replica of another data format is refused by name.
    let reply = Client::connect(port).call(b"replicate 99 none 5\r\n");
    assert_eq!(
        reply,
        "SERVER_ERROR this master keeps data of format 6; the replica reads format 5"
    );
    // Still serving on the same connection.
    assert_eq!(client.call(b"set k 0 0 1\r\nv\r\n"), "STORED");
    // A replica that sends anything but acknowledgements is let go.
    let mut link = Client::connect(port);
    assert_eq!(
        link.call(b"replicate 99 none 6\r\n").split(' ').next(),
        Some("SNAPSHOT")
    );
    link.writer.write_all(b"not an ack").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Client::connect(port).stats("replication")["repl_replicas"] != "0" {
        assert!(Instant::now() < deadline, "the link stayed attached");
        std::thread::sleep(Duration::from_millis(20));
    }

    // The memory engine has no log to replicate.
    let memory_port = free_port();
    let mut child = std::process::Command::new(support::kura_bin())
        .args(["serve", "-l", "127.0.0.1", "-p", &memory_port.to_string()])
        .args(["--engine", "memory"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    support::wait_until_ready(&mut child, addr(memory_port));
    let _memory = Running(child);
    let mut client = Client::connect(memory_port);
    let reply = client.call(b"replicate 1 none 6\r\n");
    assert!(
        reply.starts_with("SERVER_ERROR replication needs the disk engine"),
        "{reply}"
    );
    let reply = client.call(b"replicaof 127.0.0.1 1\r\n");
    assert!(
        reply.starts_with("SERVER_ERROR replication needs the disk engine"),
        "{reply}"
    );
}

/// A fake master: answers `STREAM`, then sends what `send` gives; returns
/// how many times the replica connected.
fn fake_master(send: &[u8]) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    let send = send.to_vec();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            counted.fetch_add(1, Ordering::SeqCst);
            let mut hello = String::new();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            if reader.read_line(&mut hello).is_err() || !hello.starts_with("replicate ") {
                continue;
            }
            let _ = stream.write_all(b"STREAM 4242\r\n");
            let _ = stream.write_all(&send);
        }
    });
    (port, connections)
}

/// A `G` frame: LSN 1's group, whose one put's record is a pointer (the
/// "in log" bit, then segment, offset, frame and value lengths) — records
/// framed and checksummed as `docs/DESIGN.md` gives the journal's.
fn group_with_a_pointer_put() -> Vec<u8> {
    let record = |kind: u8, key: &[u8], rest: &[u8]| {
        let mut body = vec![kind];
        body.extend_from_slice(&(key.len() as u16).to_le_bytes());
        body.extend_from_slice(key);
        body.extend_from_slice(rest);
        let mut framed = (body.len() as u32).to_le_bytes().to_vec();
        framed.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        framed.extend_from_slice(&body);
        framed
    };
    let head = [
        &1u64.to_le_bytes()[..],
        &1u64.to_le_bytes(),
        &7u32.to_le_bytes(),
    ]
    .concat();
    let pointer_record = [
        &0u32.to_le_bytes()[..], // flags
        &0u32.to_le_bytes(),     // expiry
        &1u64.to_le_bytes(),     // cas
        &[8],                    // bits: the value is in the log
        &1u64.to_le_bytes(),     // segment
        &0u64.to_le_bytes(),     // offset
        &120u32.to_le_bytes(),   // frame length
        &100u32.to_le_bytes(),   // value length
    ]
    .concat();
    let payload = [record(5, b"", &head), record(1, b"k", &pointer_record)].concat();
    [&b"G"[..], &(payload.len() as u32).to_be_bytes(), &payload].concat()
}

#[test]
fn a_replica_drops_a_master_that_sends_garbage_and_connects_again() {
    for garbage in [
        // An unknown frame kind.
        &b"Z\x00\x00\x00\x01x"[..],
        // A group whose records do not check.
        b"G\x00\x00\x00\x0c\x00\x00\x00\x01garbage!",
        // A frame longer than anything a master sends.
        b"G\xff\xff\xff\xff",
        // A well-formed group whose put holds a pointer into the log
        // instead of its value: it would lead into the replica's own log.
        &group_with_a_pointer_put(),
    ] {
        let (master, connections) = fake_master(garbage);
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let _replica = serve(
            &dir.path().join("replica"),
            port,
            &["--replica-of".to_string(), format!("127.0.0.1:{master}")],
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while connections.load(Ordering::SeqCst) < 2 {
            assert!(
                Instant::now() < deadline,
                "the replica never connected again"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut client = Client::connect(port);
        assert_eq!(
            client.stats("replication")["repl_lsn"],
            "0",
            "nothing applied"
        );
        assert_eq!(
            client.call(b"version\r\n").split(' ').next(),
            Some("VERSION")
        );
    }
}

/// A master that refuses every replica with a line kura does not know: the
/// replica waits longer after each attempt in a row (1, 2, 4 s), not a
/// second every time.
#[test]
fn a_replica_waits_longer_after_each_failed_attempt() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let master = listener.local_addr().unwrap().port();
    let connected = Arc::new(std::sync::Mutex::new(Vec::new()));
    let times = connected.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            times.lock().unwrap().push(Instant::now());
            let mut hello = String::new();
            let _ = BufReader::new(stream.try_clone().unwrap()).read_line(&mut hello);
            let _ = stream.write_all(b"NOT-A-MASTER\r\n");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _replica = serve(
        dir.path(),
        port,
        &["--replica-of".to_string(), format!("127.0.0.1:{master}")],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while connected.lock().unwrap().len() < 4 {
        assert!(Instant::now() < deadline, "the replica stopped trying");
        std::thread::sleep(Duration::from_millis(50));
    }
    let times = connected.lock().unwrap().clone();
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    assert!(gaps[0] >= 0.9, "{gaps:?}");
    assert!(gaps[1] >= 1.8 && gaps[2] >= 3.6, "{gaps:?}");
    let mut client = Client::connect(port);
    let error = &client.stats("replication")["repl_master_error"];
    assert!(error.contains("NOT-A-MASTER"), "{error}");
}

/// A Tokyo Tyrant slave's link: `repl` from `micros` as server `slave`;
/// returns the master's id.
fn tyrant_repl(port: u16, micros: u64, slave: u32) -> (TcpStream, Option<u32>) {
    let mut stream = TcpStream::connect(addr(port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = vec![0xC8, 0xA0];
    request.extend_from_slice(&micros.to_be_bytes());
    request.extend_from_slice(&slave.to_be_bytes());
    stream.write_all(&request).unwrap();
    let mut id = [0; 4];
    let master = stream
        .read_exact(&mut id)
        .ok()
        .map(|()| u32::from_be_bytes(id));
    (stream, master)
}

/// The next update-log message's time, origin and body (no-operations
/// skipped), as `tcreplread` reads them.
fn tyrant_message(stream: &mut TcpStream) -> (u64, u32, Vec<u8>) {
    loop {
        let mut kind = [0];
        stream.read_exact(&mut kind).unwrap();
        if kind[0] == kura_proto::tyrant_repl::NOP {
            continue;
        }
        assert_eq!(kind[0], kura_proto::tyrant_repl::MESSAGE);
        let mut head = [0; 16];
        stream.read_exact(&mut head).unwrap();
        let micros = u64::from_be_bytes(head[..8].try_into().unwrap());
        let origin = u32::from_be_bytes(head[8..12].try_into().unwrap());
        let mut body = vec![0; u32::from_be_bytes(head[12..].try_into().unwrap()) as usize];
        stream.read_exact(&mut body).unwrap();
        return (micros, origin, body);
    }
}

#[test]
fn a_tokyo_tyrant_slave_gets_the_update_log_as_ttserver_sends_it() {
    use kura_proto::tyrant_repl::{parse, Change};
    let dir = tempfile::tempdir().unwrap();
    let (port, tyrant) = (free_port(), free_port());
    let _master = serve(
        &dir.path().join("master"),
        port,
        &["--tyrant-port".to_string(), tyrant.to_string()],
    );
    let mut client = Client::connect(port);
    assert_eq!(client.call(b"set k1 0 0 2\r\nv1\r\n"), "STORED");
    assert_eq!(client.call(b"set k2 0 0 2\r\nv2\r\n"), "STORED");
    assert_eq!(client.call(b"delete k1\r\n"), "DELETED");
    let sid: u32 = tyrant_stat(tyrant)["sid"].parse().unwrap();

    // Its own id as the slave's: circular, closed without a word.
    let (_, answer) = tyrant_repl(tyrant, 1, sid);
    assert_eq!(answer, None);

    let (mut link, master) = tyrant_repl(tyrant, 1, 99);
    assert_eq!(master, Some(sid));
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (micros, origin, body) = tyrant_message(&mut link);
        assert_eq!(origin, sid);
        assert!(micros > 0);
        seen.push(match parse(&body).expect("a body ttserver would redo") {
            Change::Put { key, value } => format!("put {} {}", esc(key), esc(value)),
            Change::Out { key } => format!("out {}", esc(key)),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(seen, ["put k1 v1", "put k2 v2", "out k1"]);
    // Changes made while the link is up follow.
    assert_eq!(client.call(b"set k3 0 0 2\r\nv3\r\n"), "STORED");
    // Expired as it is stored (ttserver's records never expire): gone.
    assert_eq!(client.call(b"set k4 0 -1 2\r\nv4\r\n"), "STORED");
    assert_eq!(client.call(b"flush_all\r\n"), "OK");
    let (_, _, body) = tyrant_message(&mut link);
    assert_eq!(
        parse(&body),
        Some(Change::Put {
            key: b"k3",
            value: b"v3"
        })
    );
    let (_, _, body) = tyrant_message(&mut link);
    assert_eq!(parse(&body), Some(Change::Out { key: b"k4" }));
    let (_, _, body) = tyrant_message(&mut link);
    assert_eq!(parse(&body), Some(Change::Vanish));
}

fn esc(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn kura_follows_a_tokyo_tyrant_master() {
    let dir = tempfile::tempdir().unwrap();
    let (master_port, master_tyrant) = (free_port(), free_port());
    let (replica_port, replica_tyrant) = (free_port(), free_port());
    let _master = serve(
        &dir.path().join("master"),
        master_port,
        &["--tyrant-port".to_string(), master_tyrant.to_string()],
    );
    let mut client = Client::connect(master_port);
    assert_eq!(client.call(b"set k1 0 0 2\r\nv1\r\n"), "STORED");
    assert_eq!(client.call(b"set k2 0 0 2\r\nv2\r\n"), "STORED");
    assert_eq!(client.call(b"delete k1\r\n"), "DELETED");
    // Tokyo Tyrant's protocol, as a ttserver slave follows a master.
    let _replica = serve(
        &dir.path().join("replica"),
        replica_port,
        &[
            "--tyrant-port".to_string(),
            replica_tyrant.to_string(),
            "--replica-of".to_string(),
            format!("tyrant:127.0.0.1:{master_tyrant}"),
            // Past ttserver's 16-bit server ids (and a signed 32-bit one).
            "--server-id".to_string(),
            "4000000000".to_string(),
        ],
    );
    assert_eq!(client.call(b"set k3 0 0 2\r\nv3\r\n"), "STORED");
    let mut replica = Client::connect(replica_port);
    let deadline = Instant::now() + Duration::from_secs(20);
    while replica.gets("k3").is_none() {
        assert!(Instant::now() < deadline, "the replica never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        replica.gets("k2").map(|(_, value, _)| value),
        Some(b"v2".to_vec())
    );
    assert_eq!(replica.gets("k1"), None);
    let stat = tyrant_stat(replica_tyrant);
    assert_eq!(stat["mport"], master_tyrant.to_string(), "{stat:?}");
    // A Tokyo Tyrant slave takes writes, as ttserver's do.
    assert_eq!(replica.call(b"set local 0 0 1\r\nx\r\n"), "STORED");
}

/// A Tokyo Tyrant master that sends `count` messages `addint counter 1`
/// (times 1000, 1001, …), one every `every`, from the time each `repl`
/// asks for, then no-operations.
fn fake_tyrant_master(count: u64, every: Duration) -> u16 {
    fake_tyrant_master_in_runs(count, every, 1)
}

/// The same, `per_time` messages under each time (a kura master sends a
/// group's changes under one).
fn fake_tyrant_master_in_runs(count: u64, every: Duration, per_time: u64) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut request = [0; 14];
                if stream.read_exact(&mut request).is_err() || request[..2] != [0xC8, 0xA0] {
                    return;
                }
                let since = u64::from_be_bytes(request[2..10].try_into().unwrap());
                let _ = stream.write_all(&7u32.to_be_bytes());
                let times = (0..count).map(|n| 1000 + n / per_time);
                for micros in times.filter(|&micros| micros >= since) {
                    let mut body = vec![0xC8, 0x60];
                    body.extend_from_slice(&7u32.to_be_bytes());
                    body.extend_from_slice(&1u32.to_be_bytes());
                    body.extend_from_slice(b"counter");
                    body.push(0);
                    let mut message = Vec::new();
                    kura_proto::tyrant_repl::message(micros, 7, &body, &mut message);
                    if stream.write_all(&message).is_err() {
                        return;
                    }
                    std::thread::sleep(every);
                }
                while stream.write_all(&[kura_proto::tyrant_repl::NOP]).is_ok() {
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    });
    port
}

#[test]
fn a_tokyo_tyrant_followers_position_is_kept_with_what_it_applied() {
    // ttserver's slave keeps its position in a file written after it
    // applies, so a crash may count an addint twice. Here it may not.
    follower_killed_three_times_counts_every_addint_once(1);
}

#[test]
fn a_tokyo_tyrant_follower_killed_within_a_run_of_one_time_takes_the_rest_of_it() {
    // Messages read apart: kills fall within runs of four of one time.
    follower_killed_three_times_counts_every_addint_once(4);
}

fn follower_killed_three_times_counts_every_addint_once(per_time: u64) {
    const MESSAGES: u64 = 300;
    let master = fake_tyrant_master_in_runs(MESSAGES, Duration::from_millis(2), per_time);
    let dir = tempfile::tempdir().unwrap();
    let (port, tyrant) = (free_port(), free_port());
    let flags = [
        "--tyrant-port".to_string(),
        tyrant.to_string(),
        "--replica-of".to_string(),
        format!("tyrant:127.0.0.1:{master}"),
    ];
    let counter = |port: u16| {
        Client::connect(port)
            .gets("counter")
            .map_or(0, |(_, value, _)| {
                u32::from_le_bytes(value.try_into().unwrap())
            })
    };
    let mut replica = serve(&dir.path().join("replica"), port, &flags);
    let mut killed_at = Vec::new();
    for _ in 0..3 {
        // Killed once it has taken a message since it started: mid-stream
        // however slowly it came up.
        let from = counter(port);
        let deadline = Instant::now() + Duration::from_secs(30);
        while counter(port) == from && from < MESSAGES as u32 {
            assert!(Instant::now() < deadline, "no message taken since {from}");
            std::thread::sleep(Duration::from_millis(5));
        }
        killed_at.push(counter(port));
        replica.kill();
        replica = serve(&dir.path().join("replica"), port, &flags);
    }
    eprintln!("replica killed at counter values {killed_at:?}");
    assert!(
        killed_at.iter().any(|&at| at > 0 && at < MESSAGES as u32),
        "a kill came mid-stream: {killed_at:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter(port) < MESSAGES as u32 {
        assert!(Instant::now() < deadline, "stuck at {}", counter(port));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counter(port), MESSAGES as u32, "every addint once");
    drop(replica);
}

#[test]
fn ttservers_flags_find_out_that_the_master_is_a_ttserver() {
    // A ttserver answers kura's `replicate` line with nothing (it closes):
    // the replica then speaks Tokyo Tyrant's protocol.
    let master = fake_tyrant_master(10, Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _replica = serve(
        &dir.path().join("replica"),
        port,
        &[
            "--mhost".to_string(),
            "127.0.0.1".to_string(),
            "--mport".to_string(),
            master.to_string(),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = Client::connect(port).gets("counter");
        if let Some((_, value, _)) = found {
            if u32::from_le_bytes(value.try_into().unwrap()) == 10 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the replica never followed the ttserver"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = Client::connect(port).stats("replication");
    assert_eq!(stats["repl_master_state"], "streaming", "{stats:?}");
}

/// A pipe from a port of its own to the master's that closes both ends
/// once `budget` bytes have come from the master, then refuses every
/// connection; the receiver hears when it cut.
fn cutting_proxy(master: u16, budget: usize) -> (u16, std::sync::mpsc::Receiver<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (cut, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut replica, _) = listener.accept().unwrap();
        drop(listener);
        let mut to_master = TcpStream::connect(addr(master)).unwrap();
        let mut from_replica = replica.try_clone().unwrap();
        let mut master_out = to_master.try_clone().unwrap();
        std::thread::spawn(move || std::io::copy(&mut from_replica, &mut master_out));
        let mut passed = 0;
        let mut buf = vec![0; 64 * 1024];
        while passed < budget {
            let n = match to_master.read(&mut buf[..(budget - passed).min(64 * 1024)]) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if replica.write_all(&buf[..n]).is_err() {
                break;
            }
            passed += n;
        }
        let _ = replica.shutdown(std::net::Shutdown::Both);
        let _ = to_master.shutdown(std::net::Shutdown::Both);
        let _ = cut.send(());
    });
    (port, heard)
}

/// A replica whose snapshot was cut off holds part of the master's items:
/// `replicaof no one` refuses to make it a master, `replicaof no one
/// force` does, and its own replicas then get snapshots of what it holds,
/// not its log (which lacks the snapshot's items).
#[test]
fn a_replica_cut_off_in_its_snapshot_is_promoted_only_by_force() {
    let dir = tempfile::tempdir().unwrap();
    let (master_port, replica_port, second_port) = (free_port(), free_port(), free_port());
    // A log that keeps nothing applied: a new replica needs a snapshot.
    let retention = ["--log-retention".to_string(), "0".to_string()];
    let _master = serve(&dir.path().join("master"), master_port, &retention);
    let mut load = Client::connect(master_port);
    let value = "v".repeat(1000);
    let mut sets = String::new();
    for n in 0..20_000 {
        sets.push_str(&format!("set item:{n:05} 0 0 1000 noreply\r\n{value}\r\n"));
    }
    sets.push_str("version\r\n");
    assert!(load.call(sets.as_bytes()).starts_with("VERSION"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        apply_now(&mut load);
        let mut probe = Client::connect(master_port);
        if probe
            .call(b"replicate 99 0 0 6\r\n")
            .starts_with("SNAPSHOT")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the master's log kept LSN 1");
    }

    let (proxy, cut) = cutting_proxy(master_port, 5 << 20);
    let _replica = serve(
        &dir.path().join("replica"),
        replica_port,
        &["--replica-of".to_string(), format!("127.0.0.1:{proxy}")],
    );
    cut.recv_timeout(Duration::from_secs(30))
        .expect("the snapshot passed the proxy");
    let mut replica = Client::connect(replica_port);
    let deadline = Instant::now() + Duration::from_secs(10);
    while replica.stats("replication")["repl_master_state"] == "snapshot" {
        assert!(Instant::now() < deadline, "the cut link stayed up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = replica.stats("replication");
    assert!(!stats.contains_key("repl_lsn"), "{stats:?}");
    assert_eq!(stats["repl_snapshots_loaded"], "0", "{stats:?}");
    // A backup of it would hold part of the master's data.
    let backup = dir.path().join("backup");
    let refused = std::process::Command::new(support::kura_bin())
        .args([
            "backup",
            "--server",
            &format!("127.0.0.1:{replica_port}"),
            "--to",
        ])
        .arg(&backup)
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    assert!(
        message.contains("holds only part of its master's snapshot"),
        "{message}"
    );
    assert!(!backup.exists(), "a refused backup leaves nothing");
    // Nor is that part handed on to a replica of it as a whole snapshot.
    let hello = b"replicate 98 none 6\r\n";
    let answer = Client::connect(replica_port).call(hello);
    assert!(
        answer.starts_with("SERVER_ERROR this server is loading its master's snapshot"),
        "{answer}"
    );

    // Through `kura admin`, as an operator would.
    let admin = |force: &[&str]| {
        std::process::Command::new(support::kura_bin())
            .args([
                "admin",
                "promote",
                "--server",
                &format!("127.0.0.1:{replica_port}"),
            ])
            .args(force)
            .output()
            .unwrap()
    };
    let refused = admin(&[]);
    let message = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    assert!(
        message.contains("holds only part of its master's snapshot"),
        "{message}"
    );
    assert!(replica
        .call(b"set after 0 0 2\r\nok\r\n")
        .starts_with("SERVER_ERROR read-only replica"));
    let promoted = admin(&["--force"]);
    assert!(
        promoted.status.success(),
        "{}",
        String::from_utf8_lossy(&promoted.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&promoted.stdout), "OK\n");
    assert_eq!(replica.call(b"set after 0 0 2\r\nok\r\n"), "STORED");
    // Promoted, it serves what it holds.
    let answer = Client::connect(replica_port).call(hello);
    assert!(answer.starts_with("SNAPSHOT"), "{answer}");
    let held = replica.items().len();
    assert!(
        held > 1 && held < 20_000,
        "{held} items after a cut snapshot"
    );

    // Its replica holds what it holds, by a snapshot.
    let _second = serve(
        &dir.path().join("second"),
        second_port,
        &[
            "--replica-of".to_string(),
            format!("127.0.0.1:{replica_port}"),
        ],
    );
    assert_same_data(replica_port, second_port, "the promoted replica's replica");
    let stats = Client::connect(second_port).stats("replication");
    assert_eq!(stats["repl_snapshots_loaded"], "1", "{stats:?}");
}

/// A server told to follow itself says why in `replicas` and `stats`, and
/// takes writes again as it did before.
#[test]
fn a_server_told_to_follow_itself_goes_on_taking_writes() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _server = serve(&dir.path().join("disk"), port, &[]);
    let mut client = Client::connect(port);
    assert_eq!(
        client.call(format!("replicaof 127.0.0.1 {port}\r\n").as_bytes()),
        "OK"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lines = client.lines("replicas\r\n");
        let master = lines.iter().find(|line| line.starts_with("MASTER"));
        if master.is_some_and(|line| line.contains("state=stopped")) {
            assert!(
                master.unwrap().contains("error=the_master_is_this_server"),
                "{lines:?}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "{lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(client.call(b"set k 0 0 1\r\nv\r\n"), "STORED");
    let stats = client.stats("replication");
    assert_eq!(stats["repl_role"], "master", "{stats:?}");
    assert!(
        stats["repl_master_error"].starts_with("the master is this server"),
        "{stats:?}"
    );
}

/// A master told to follow its own replica refuses (each would load the
/// other's snapshot, one wiping the writes the other lacks): it keeps what
/// it holds and says why.
#[test]
fn a_master_told_to_follow_its_own_replica_keeps_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let (master_port, replica_port) = (free_port(), free_port());
    let _master = serve(&dir.path().join("master"), master_port, &[]);
    let mut master = Client::connect(master_port);
    assert_eq!(master.call(b"set k 0 0 1\r\nv\r\n"), "STORED");
    let follow = [
        "--replica-of".to_string(),
        format!("127.0.0.1:{master_port}"),
    ];
    let _replica = serve(&dir.path().join("replica"), replica_port, &follow);
    wait_for_catch_up(master_port, replica_port);
    let command = format!("replicaof 127.0.0.1 {replica_port}\r\n");
    assert_eq!(master.call(command.as_bytes()), "OK");
    wait_for_master_error(&mut master, "is a replica of this server");
    assert_eq!(master.call(b"get k\r\n"), "VALUE k 0 1");
}

/// An acknowledgement of more than the replica was sent does not count:
/// its lag stays what it is.
#[test]
fn a_replica_cannot_acknowledge_past_what_it_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _master = serve(&dir.path().join("master"), port, &[]);
    let mut client = Client::connect(port);
    for n in 0..5 {
        assert_eq!(
            client.call(format!("set k{n} 0 0 1\r\nv\r\n").as_bytes()),
            "STORED"
        );
    }
    let mut link = Client::connect(port);
    assert!(link
        .call(b"replicate 99 none 6\r\n")
        .starts_with("SNAPSHOT"));
    link.writer
        .write_all(&kura_proto::replication::ack(u64::MAX))
        .unwrap();
    let last: u64 = client.stats("replication")["repl_lsn"].parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = client.lines("replicas\r\n");
        let replica = lines.iter().find(|line| line.starts_with("REPLICA id=99"));
        if let Some(line) = replica {
            let acked: u64 = line
                .split(' ')
                .find_map(|field| field.strip_prefix("lsn="))
                .unwrap()
                .parse()
                .unwrap();
            assert!(acked <= last, "{line}: past the master's {last}");
            if line.contains("state=streaming") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "{lines:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A Tokyo Tyrant master that sends, from any time, two `putcat`
/// messages at once (a run redone in one append): `a` small, `b` of
/// `large` bytes; then no-operations.
fn fake_tyrant_master_of_a_run(large: usize) -> u16 {
    let bodies = [(b"a", vec![b'x']), (b"b", vec![b'y'; large])].map(|(key, value)| {
        let mut body = vec![0xC8, 0x12];
        body.extend_from_slice(&1u32.to_be_bytes());
        body.extend_from_slice(&(value.len() as u32).to_be_bytes());
        body.extend_from_slice(key);
        body.extend_from_slice(&value);
        body.push(0);
        body
    });
    fake_tyrant_master_sending(bodies.to_vec())
}

/// A Tokyo Tyrant master whose log holds `bodies` (times 1000, 1001, …),
/// sent at once to each `repl`, then no-operations.
fn fake_tyrant_master_sending(bodies: Vec<Vec<u8>>) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let bodies = bodies.clone();
            std::thread::spawn(move || {
                let mut request = [0; 14];
                if stream.read_exact(&mut request).is_err() || request[..2] != [0xC8, 0xA0] {
                    return;
                }
                let _ = stream.write_all(&7u32.to_be_bytes());
                let mut messages = Vec::new();
                for (micros, body) in (1000..).zip(&bodies) {
                    kura_proto::tyrant_repl::message(micros, 7, body, &mut messages);
                }
                let _ = stream.write_all(&messages);
                while stream.write_all(&[kura_proto::tyrant_repl::NOP]).is_ok() {
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    });
    port
}

/// Waits until the replica's link to its master failed with `wanted`.
fn wait_for_master_error(replica: &mut Client, wanted: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = replica.stats("replication");
        let error = stats.get("repl_master_error");
        if error.is_some_and(|error| error.contains(wanted)) {
            return;
        }
        assert!(Instant::now() < deadline, "{stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A run of messages is redone whole or not at all: one this server
/// cannot redo (a value past its `-I`) stops the link before any of the
/// run is taken, and the position stays before it.
#[test]
fn a_tokyo_tyrant_run_with_a_message_that_cannot_be_redone_is_not_taken_in_part() {
    let master = fake_tyrant_master_of_a_run(2 << 20);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _replica = serve(
        &dir.path().join("replica"),
        port,
        &[
            "-I".to_string(),
            "1m".to_string(),
            "--replica-of".to_string(),
            format!("tyrant:127.0.0.1:{master}"),
        ],
    );
    let mut replica = Client::connect(port);
    wait_for_master_error(&mut replica, "cannot be redone here");
    assert_eq!(replica.gets("a"), None, "part of the run was taken");
}

/// A master's log holds changes: a message that is another request
/// (`copy`, which writes a file on this server's machine; `setmst`) is not
/// redone, and the link stops before it.
#[test]
fn a_tokyo_tyrant_master_message_that_is_not_a_change_is_not_redone() {
    let dir = tempfile::tempdir().unwrap();
    let copied = dir.path().join("copied-by-the-master");
    let mut copy = vec![0xC8, 0x73];
    let path = copied.to_str().unwrap().as_bytes();
    copy.extend_from_slice(&(path.len() as u32).to_be_bytes());
    copy.extend_from_slice(path);
    copy.push(0);
    let mut put = vec![0xC8, 0x10];
    put.extend_from_slice(&1u32.to_be_bytes());
    put.extend_from_slice(&1u32.to_be_bytes());
    put.extend_from_slice(b"ax");
    put.push(0);
    let master = fake_tyrant_master_sending(vec![copy, put]);
    let port = free_port();
    let _replica = serve(
        &dir.path().join("replica"),
        port,
        &[
            "--replica-of".to_string(),
            format!("tyrant:127.0.0.1:{master}"),
        ],
    );
    let mut replica = Client::connect(port);
    wait_for_master_error(&mut replica, "cannot be redone here");
    assert!(!copied.exists(), "the master's copy ran here");
    assert_eq!(replica.gets("a"), None, "taken past a message not redone");
}
