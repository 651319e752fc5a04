//! `watch`, `lru_crawler` and `cache_memlimit` over real sockets.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use kura_server::ServerConfig;
use kura_store::MemoryConfig;
use support::TestServer;

fn send(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).unwrap();
}

fn line(reader: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    let read = reader
        .read_line(&mut line)
        .expect("a line before the timeout");
    assert!(read > 0, "the server closed the connection");
    line
}

fn watcher(server: &TestServer, command: &str) -> BufReader<TcpStream> {
    let mut stream = server.connect();
    send(&mut stream, command.as_bytes());
    let mut reader = BufReader::new(stream);
    assert_eq!(line(&mut reader), "OK\r\n");
    reader
}

fn reply(stream: &mut TcpStream, request: &[u8], until: &str) -> String {
    send(stream, request);
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut all = String::new();
    while !all.ends_with(until) {
        all.push_str(&line(&mut reader));
    }
    all
}

/// The part of a log line after `ts=… gid=… `.
fn body(line: &str) -> &str {
    assert!(line.starts_with("ts="), "{line}");
    assert!(line.ends_with('\n') && !line.ends_with("\r\n"), "{line:?}");
    line.splitn(3, ' ').nth(2).unwrap().trim_end()
}

#[test]
fn fetchers_and_mutations_lines_name_the_connection_and_value_size() {
    let server = TestServer::start();
    let mut watch = watcher(&server, "watch fetchers mutations\r\n");
    let mut client = server.connect();
    assert_eq!(
        reply(&mut client, b"set a/b 0 0 4\r\nvbar\r\n", "\r\n"),
        "STORED\r\n"
    );
    reply(&mut client, b"get a/b\r\n", "END\r\n");
    let get_miss = line(&mut watch);
    assert!(
        body(&get_miss).starts_with("type=item_get key=a%2Fb status=not_found clsid=0 cfd="),
        "{get_miss}"
    );
    assert!(body(&get_miss).ends_with(" size=0"));
    let cfd = body(&get_miss)
        .split("cfd=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    let stored = line(&mut watch);
    assert!(
        body(&stored).starts_with("type=item_store key=a%2Fb status=stored cmd=set ttl=0 clsid="),
        "{stored}"
    );
    assert!(
        body(&stored).ends_with(&format!(" cfd={cfd} size=4")),
        "{stored}"
    );
    let hit = line(&mut watch);
    assert!(
        body(&hit).contains("type=item_get key=a%2Fb status=found"),
        "{hit}"
    );
    assert!(body(&hit).ends_with(&format!(" cfd={cfd} size=4")), "{hit}");
}

/// Meta and binary commands are logged as text ones are (memcached logs in
/// its item functions), and watching counts no read of its own.
#[test]
fn meta_and_binary_commands_are_logged_and_watching_counts_nothing() {
    use kura_proto::binary::opcode;
    let server = TestServer::start();
    let mut watch = watcher(&server, "watch fetchers mutations\r\n");
    let mut client = server.connect();
    assert_eq!(
        reply(&mut client, b"ms m 3 C99\r\nabc\r\n", "\r\n"),
        "NF\r\n"
    );
    assert_eq!(
        reply(&mut client, b"ms m 3 T0\r\nabc\r\n", "\r\n"),
        "HD\r\n"
    );
    assert_eq!(
        reply(&mut client, b"mg m v\r\n", "abc\r\n"),
        "VA 3\r\nabc\r\n"
    );
    let mut binary = server.connect();
    let extras = [0u8; 8];
    assert_eq!(
        support::binary_call(&mut binary, opcode::SET, b"b", &extras, b"xy").0,
        0
    );
    assert_eq!(
        support::binary_call(&mut binary, opcode::GET, b"b", &[], b"").0,
        0
    );
    let expected = [
        "type=item_get key=m status=not_found clsid=0 ",
        "type=item_store key=m status=not_found cmd=cas ttl=0 ",
        "type=item_get key=m status=not_found clsid=0 ",
        "type=item_store key=m status=stored cmd=set ttl=0 ",
        "type=item_get key=m status=found ",
        "type=item_get key=b status=not_found clsid=0 ",
        "type=item_store key=b status=stored cmd=set ttl=0 ",
        "type=item_get key=b status=found ",
    ];
    for start in expected {
        let logged = line(&mut watch);
        assert!(body(&logged).starts_with(start), "{logged} is not {start}…");
    }
    let slabs = reply(&mut client, b"stats slabs\r\n", "END\r\n");
    let hits: u64 = slabs
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter(|l| l.contains(":get_hits "))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(hits, 2, "{slabs}");
}

#[test]
fn connevents_tell_a_quit_from_a_protocol_error() {
    let server = TestServer::start();
    let mut watch = watcher(&server, "watch connevents\r\n");
    let mut client = server.connect();
    reply(&mut client, b"version\r\n", "\r\n");
    send(&mut client, b"quit\r\n");
    let new = line(&mut watch);
    assert!(
        body(&new).starts_with("type=conn_new rip=127.0.0.1 rport="),
        "{new}"
    );
    assert!(body(&new).contains(" transport=tcp cfd="), "{new}");
    let close = line(&mut watch);
    assert!(
        body(&close).contains(" transport=tcp reason=normal cfd="),
        "{close}"
    );

    let mut web = server.connect();
    send(&mut web, b"GET / HTTP/1.1\r\n");
    assert!(body(&line(&mut watch)).starts_with("type=conn_new"));
    let close = line(&mut watch);
    assert!(body(&close).contains(" reason=error "), "{close}");
}

#[test]
fn evictions_are_logged_with_the_evicted_key() {
    let server = TestServer::with(
        ServerConfig::default(),
        MemoryConfig {
            limit_bytes: 64 * 1024,
            shards: 1,
            ..MemoryConfig::default()
        },
    );
    let mut watch = watcher(&server, "watch evictions\r\n");
    let mut client = server.connect();
    let value = "v".repeat(10_000);
    for i in 0..10 {
        let request = format!("set key{i} 0 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(reply(&mut client, request.as_bytes(), "\r\n"), "STORED\r\n");
    }
    let evicted = line(&mut watch);
    assert!(
        body(&evicted).starts_with("type=eviction key=key0 fetch=no ttl=-1 la="),
        "{evicted}"
    );
    assert!(body(&evicted).ends_with(" size=10000"), "{evicted}");
}

fn figure(stats: &str, name: &str) -> u64 {
    let prefix = format!("STAT {name} ");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
        .parse()
        .unwrap()
}

#[test]
fn stats_count_watchers_and_the_lines_sent_to_them() {
    let server = TestServer::start();
    let mut client = server.connect();
    let stats = reply(&mut client, b"stats\r\n", "END\r\n");
    assert_eq!(figure(&stats, "log_watchers"), 0);
    let mut first = watcher(&server, "watch fetchers\r\n");
    let second = watcher(&server, "watch fetchers\r\n");
    let stats = reply(&mut client, b"stats\r\n", "END\r\n");
    assert_eq!(figure(&stats, "log_watchers"), 2);
    reply(&mut client, b"get nothing\r\n", "END\r\n");
    assert!(body(&line(&mut first)).starts_with("type=item_get"));
    let stats = reply(&mut client, b"stats\r\n", "END\r\n");
    assert_eq!(figure(&stats, "log_watcher_sent"), 2, "one line to each");
    assert_eq!(figure(&stats, "log_worker_written"), 1, "one event");
    drop(first);
    drop(second);
    let mut watchers = u64::MAX;
    for _ in 0..100 {
        let stats = reply(&mut client, b"stats\r\n", "END\r\n");
        watchers = figure(&stats, "log_watchers");
        if watchers == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(watchers, 0, "closed watchers are forgotten");
}

#[test]
fn a_watcher_that_does_not_read_loses_lines_and_is_told_how_many() {
    let server = TestServer::with(
        ServerConfig {
            watcher_buffer_bytes: 8 * 1024,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut watch = watcher(&server, "watch\r\n");
    let mut client = server.connect();
    let spacer = "X".repeat(180);
    // Far more than the socket buffers and the 8 KiB queue hold; the
    // server answers every get at once although nobody reads the log.
    let mut batch = String::new();
    for i in 0..40_000 {
        batch.push_str(&format!("get foo{i}{spacer}\r\n"));
        if i % 1000 == 999 {
            let ends = batch.matches("\r\n").count();
            send(&mut client, batch.as_bytes());
            let mut got = 0;
            let mut buf = vec![0; 64 * 1024];
            while got < ends * 5 {
                got += client.read(&mut buf).unwrap();
            }
            batch.clear();
        }
    }
    let mut skipped = None;
    for _ in 0..100_000 {
        let next = line(&mut watch);
        if let Some(count) = next.strip_prefix("skipped=") {
            skipped = Some(count.trim_end().parse::<u64>().unwrap());
            break;
        }
        if next.contains("key=foob ") {
            break;
        }
        // The skip is reported before the next line that fits.
        reply(&mut client, b"get foob\r\n", "END\r\n");
    }
    assert!(skipped.unwrap_or(0) > 0, "a skipped= line");
    assert!(body(&line(&mut watch)).starts_with("type=item_get"));
}

#[test]
fn watch_is_refused_with_dash_w_and_after_pipelined_requests() {
    let server = TestServer::with(
        ServerConfig {
            watch_enabled: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut client = server.connect();
    assert_eq!(
        reply(&mut client, b"watch mutations\r\n", "\r\n"),
        "CLIENT_ERROR watch commands not allowed\r\n"
    );
    let server = TestServer::start();
    let mut client = server.connect();
    assert_eq!(
        reply(&mut client, b"version\r\nwatch\r\n", "watch\r\n"),
        "VERSION 1.6.18\r\nERROR cannot pipeline other commands before watch\r\n"
    );
    assert_eq!(reply(&mut client, b"watch bogus\r\n", "\r\n"), "ERROR\r\n");
}

#[test]
fn lru_crawler_switches_crawls_and_dumps() {
    let server = TestServer::with(
        ServerConfig {
            lru_crawler: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut client = server.connect();
    assert_eq!(
        reply(&mut client, b"lru_crawler metadump all\r\n", "\r\n"),
        "CLIENT_ERROR lru crawler disabled\r\n"
    );
    assert_eq!(
        reply(&mut client, b"lru_crawler enable\r\n", "\r\n"),
        "OK\r\n"
    );
    for i in 0..3 {
        let request = format!("set k{i} 0 0 2\r\nok\r\n");
        reply(&mut client, request.as_bytes(), "\r\n");
    }
    reply(
        &mut client,
        b"set gone 0 1 2\r\nok\r\ndebugtime 3\r\n",
        "OK\r\n",
    );
    assert_eq!(
        reply(&mut client, b"lru_crawler crawl 1\r\n", "\r\n"),
        "OK\r\n"
    );
    assert_eq!(
        reply(&mut client, b"lru_crawler crawl 0\r\n", "\r\n"),
        "BADCLASS invalid class id\r\n"
    );
    let dump = reply(&mut client, b"lru_crawler metadump all\r\n", "END\r\n");
    assert_eq!(dump.lines().count(), 4, "{dump}");
    assert!(dump.contains("key=k1 exp=-1 la="), "{dump}");
    assert!(dump.contains(" fetch=no cls=1 size="), "{dump}");
    assert_eq!(
        reply(&mut client, b"lru_crawler metadump hash\r\n", "END\r\n"),
        dump
    );
    assert_eq!(
        reply(
            &mut client,
            b"mg k1 v\r\nlru_crawler metadump all\r\n",
            "metadump\r\n"
        ),
        "VA 2\r\nok\r\nERROR cannot pipeline other commands before metadump\r\n"
    );
    assert_eq!(
        reply(&mut client, b"lru_crawler disable\r\n", "\r\n"),
        "OK\r\n"
    );
    assert_eq!(
        reply(&mut client, b"lru_crawler crawl all\r\n", "\r\n"),
        "CLIENT_ERROR lru crawler disabled\r\n"
    );
}

/// A dump many times larger than the bytes connections may buffer is
/// written in parts as the client reads it: the connection is not closed
/// for holding too much, its worker serves another connection while the
/// dump waits, and the request after it is answered after its `END`.
#[test]
fn a_metadump_is_written_in_parts_as_the_client_reads_it() {
    const ITEMS: usize = 100_000;
    let config = || ServerConfig {
        threads: 1,
        max_buffered_bytes: 256 << 10,
        ..ServerConfig::default()
    };
    let memory = MemoryConfig {
        limit_bytes: 256 << 20,
        ..MemoryConfig::default()
    };
    for server in [
        TestServer::with(config(), memory),
        TestServer::disk_with(config()),
    ] {
        let mut client = server.connect();
        for thousand in 0..ITEMS / 1000 {
            let mut sets = Vec::new();
            for i in thousand * 1000..(thousand + 1) * 1000 {
                write!(sets, "set key{i:06} 0 0 1 noreply\r\nv\r\n").unwrap();
            }
            send(&mut client, &sets);
            assert_eq!(reply(&mut client, b"mn\r\n", "\r\n"), "MN\r\n");
        }
        // Some 6 MB of lines, not read for a while.
        send(&mut client, b"lru_crawler metadump all\r\nmn\r\n");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let mut other = server.connect();
        assert_eq!(
            reply(&mut other, b"get key000001\r\n", "END\r\n"),
            "VALUE key000001 0 1\r\nv\r\nEND\r\n"
        );
        let dump = reply(&mut client, b"", "MN\r\n");
        assert!(
            dump.ends_with("END\r\nMN\r\n"),
            "{}",
            &dump[dump.len() - 100..]
        );
        let keys: std::collections::BTreeSet<&str> = dump
            .lines()
            .filter_map(|line| line.strip_prefix("key=")?.split(' ').next())
            .collect();
        assert_eq!(keys.len(), ITEMS);
        assert_eq!(dump.lines().count(), ITEMS + 2);
    }
}

#[test]
fn cache_memlimit_shrinks_by_evicting_and_grows() {
    let server = TestServer::start();
    let mut client = server.connect();
    let value = "v".repeat(500_000);
    for i in 0..30 {
        let request = format!("set big{i} 0 0 {}\r\n{value}\r\n", value.len());
        assert_eq!(reply(&mut client, request.as_bytes(), "\r\n"), "STORED\r\n");
    }
    assert_eq!(
        reply(&mut client, b"cache_memlimit 8\r\n", "\r\n"),
        "OK\r\n"
    );
    let stats = server.handle().shared().store.stats();
    assert_eq!(stats.limit_maxbytes, 8 << 20);
    assert!(stats.bytes <= 8 << 20, "{stats:?}");
    assert!(stats.evictions >= 13, "{stats:?}");
    assert_eq!(
        reply(&mut client, b"cache_memlimit 16\r\n", "\r\n"),
        "OK\r\n"
    );
    for i in 0..30 {
        let request = format!("set big{i} 0 0 {}\r\n{value}\r\n", value.len());
        reply(&mut client, request.as_bytes(), "\r\n");
    }
    let stats = server.handle().shared().store.stats();
    assert!(
        stats.bytes > 12 << 20 && stats.bytes <= 16 << 20,
        "{stats:?}"
    );
}

#[test]
fn a_watcher_that_keeps_sending_does_not_hold_its_worker() {
    // One worker: the watcher and the client below share it.
    let server = TestServer::with(
        ServerConfig {
            threads: 1,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut watch = watcher(&server, "watch mutations\r\n");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Watchers whose clients send faster than one read at a time takes it in
    // (what a watcher sends is read and dropped).
    let flooding: Vec<_> = (0..6)
        .map(|_| {
            let mut flood = watcher(&server, "watch mutations\r\n").into_inner();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let junk = vec![b'x'; 4 << 20];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if flood.write_all(&junk).is_err() {
                        break;
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut client = server.connect();
    for i in 0..100 {
        let stored = reply(
            &mut client,
            format!("set k{i} 0 0 1\r\nv\r\n").as_bytes(),
            "\r\n",
        );
        assert_eq!(stored, "STORED\r\n");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for i in 0..100 {
        let logged = line(&mut watch);
        assert!(body(&logged).contains(&format!("key=k{i} ")), "{logged}");
    }
    drop(watch);
    for flood in flooding {
        flood.join().unwrap();
    }
}
