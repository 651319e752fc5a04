//! Framing, limits and bad input, over real sockets: what a hostile or
//! clumsy client can do, and what it must not be able to do to others.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use kura_proto::binary::{self, opcode};
use kura_server::ServerConfig;
use kura_store::MemoryConfig;
use support::{closes, read_at_least, TestServer};

/// A set/get round trip on a fresh connection proves the server still serves.
fn still_serves(server: &TestServer) {
    let reply = server.exchange(b"set alive 0 0 2\r\nok\r\nget alive\r\n", 33);
    assert_eq!(reply, b"STORED\r\nVALUE alive 0 2\r\nok\r\nEND\r\n");
}

#[test]
fn a_long_line_without_newline_closes_that_connection_only() {
    let server = TestServer::start();
    let mut junk = server.connect();
    junk.write_all(&[b'x'; 3000]).unwrap();
    assert!(closes(&mut junk));
    still_serves(&server);
}

#[test]
fn a_multiget_line_may_be_long() {
    let server = TestServer::start();
    let mut request = Vec::new();
    for i in 0..500 {
        request.extend_from_slice(format!("set key:{i:04} {i} 0 4\r\n{i:04}\r\n").as_bytes());
    }
    request.extend_from_slice(b"get");
    for i in 0..500 {
        request.extend_from_slice(format!(" key:{i:04}").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    let mut expected = b"STORED\r\n".repeat(500);
    for i in 0..500 {
        expected.extend_from_slice(format!("VALUE key:{i:04} {i} 4\r\n{i:04}\r\n").as_bytes());
    }
    expected.extend_from_slice(b"END\r\n");
    assert_eq!(server.exchange(&request, expected.len()), expected);
}

#[test]
fn values_split_across_many_reads() {
    let server = TestServer::start();
    let mut stream = server.connect();
    let value = vec![b'v'; 100_000];
    let mut request = b"set split 1 0 100000\r\n".to_vec();
    request.extend_from_slice(&value);
    request.extend_from_slice(b"\r\nget split\r\n");
    // Byte by byte for the command line, then in small uneven pieces.
    for chunk in request[..30].chunks(1).chain(request[30..].chunks(997)) {
        stream.write_all(chunk).unwrap();
    }
    let mut expected = b"STORED\r\nVALUE split 1 100000\r\n".to_vec();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(read_at_least(&mut stream, expected.len()), expected);
}

#[test]
fn thousands_of_pipelined_commands_in_one_write() {
    let server = TestServer::start();
    let mut request = Vec::new();
    for i in 0..5000 {
        request.extend_from_slice(format!("set p{i} 0 0 1 noreply\r\n{}\r\n", i % 10).as_bytes());
    }
    for i in 0..5000 {
        request.extend_from_slice(format!("get p{i}\r\n").as_bytes());
    }
    let mut expected = Vec::new();
    for i in 0..5000 {
        expected.extend_from_slice(format!("VALUE p{i} 0 1\r\n{}\r\nEND\r\n", i % 10).as_bytes());
    }
    assert_eq!(server.exchange(&request, expected.len()), expected);
}

#[test]
fn a_too_large_value_is_swallowed_and_the_stream_stays_in_sync() {
    let server = TestServer::start();
    let mut request = b"set big 0 0 2000000\r\n".to_vec();
    request.extend(std::iter::repeat_n(b'x', 2_000_000));
    request.extend_from_slice(b"\r\nget big\r\nmn\r\n");
    let expected = b"SERVER_ERROR object too large for cache\r\nEND\r\nMN\r\n";
    assert_eq!(server.exchange(&request, expected.len()), expected);
}

#[test]
fn a_half_sent_command_then_disconnect_harms_nobody() {
    let server = TestServer::start();
    for partial in [&b"set half 0 0 10\r\nabc"[..], b"get hal", b"\x80\x01\x00"] {
        let mut stream = server.connect();
        stream.write_all(partial).unwrap();
        drop(stream);
    }
    still_serves(&server);
    let reply = server.exchange(b"get half\r\n", 5);
    assert_eq!(reply, b"END\r\n");
}

#[test]
fn one_hundred_megabytes_of_junk() {
    let server = TestServer::start();
    let mut stream = server.connect();
    let mut reader = stream.try_clone().unwrap();
    // Junk lines: each is an unknown command, answered with ERROR.
    let line = b"\x01\x7fjunk junk junk \xff\xfe garbage garbage garbage garbage garbage garbage garbage garbage\r\n";
    let chunk: Vec<u8> = line
        .iter()
        .copied()
        .cycle()
        .take(line.len() * 10_000)
        .collect();
    let rounds = 100_000_000 / chunk.len();
    let counter = thread::spawn(move || {
        let mut received = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        reader
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            assert!(
                buf[..n].iter().all(|b| b"ERROR\r\n".contains(b)),
                "only ERROR lines"
            );
            received += n;
            if received == rounds * 10_000 * 7 {
                break;
            }
        }
        received
    });
    for _ in 0..rounds {
        stream.write_all(&chunk).unwrap();
    }
    let received = counter.join().unwrap();
    assert_eq!(received, rounds * 10_000 * b"ERROR\r\n".len());
    still_serves(&server);
}

#[test]
fn a_client_that_never_reads_does_not_block_others() {
    let server = TestServer::start();
    let value = vec![b'v'; 100_000];
    let mut set = b"set fat 0 0 100000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(server.exchange(&set, 8), b"STORED\r\n");
    let mut greedy = server.connect();
    greedy
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    // Ask for 200 MB of replies and never read them; writes stall once the
    // server stops reading this connection.
    let requests = b"get fat\r\n".repeat(2000);
    let _ = greedy.write_all(&requests);
    // A blocked worker would leave this exchange to its read timeout.
    still_serves(&server);
}

#[test]
fn over_the_connection_limit_clients_get_memcached_error() {
    let server = TestServer::with(
        ServerConfig {
            max_connections: 3,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut open: Vec<_> = (0..3).map(|_| server.connect()).collect();
    for stream in &mut open {
        stream.write_all(b"version\r\n").unwrap();
        assert!(read_at_least(stream, 16).starts_with(b"VERSION "));
    }
    let mut refused = server.connect();
    assert_eq!(
        read_at_least(&mut refused, 33),
        b"ERROR Too many open connections\r\n"
    );
    assert!(closes(&mut refused));
    drop(open.pop());
    // The slot frees once the server notices the close.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut stream = server.connect();
        stream.write_all(b"version\r\n").unwrap();
        if read_at_least(&mut stream, 9).starts_with(b"VERSION") {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        thread::sleep(Duration::from_millis(20));
    }
    let stats = String::from_utf8(
        open[0]
            .try_clone()
            .map(|mut s| {
                s.write_all(b"stats\r\n").unwrap();
                read_until_end(&mut s)
            })
            .unwrap(),
    )
    .unwrap();
    assert!(stats.contains("STAT rejected_connections "), "{stats}");
    assert!(
        !stats.contains("STAT rejected_connections 0\r\n"),
        "{stats}"
    );
}

/// `-o no_maxconns_fast`: past the limit a new connection is not refused
/// but waits in the backlog, and is served once another closes.
#[test]
fn without_maxconns_fast_a_connection_past_the_limit_waits_for_a_free_slot() {
    let server = TestServer::with(
        ServerConfig {
            max_connections: 2,
            maxconns_fast: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut open: Vec<_> = (0..2).map(|_| server.connect()).collect();
    for stream in &mut open {
        stream.write_all(b"version\r\n").unwrap();
        assert!(read_at_least(stream, 16).starts_with(b"VERSION "));
    }
    let mut waiting = server.connect();
    waiting
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    waiting.write_all(b"version\r\n").unwrap();
    assert_eq!(read_at_least(&mut waiting, 9), b"", "served past the limit");
    assert_eq!(stat(&mut open[0], "accepting_conns"), 0);
    assert_eq!(stat(&mut open[0], "listen_disabled_num"), 1);
    drop(open.pop());
    waiting
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(read_at_least(&mut waiting, 16).starts_with(b"VERSION "));
    // `waiting` holds the freed slot: the acceptor pauses again, once more.
    assert_eq!(stat(&mut open[0], "accepting_conns"), 0);
    drop(waiting);
    let deadline = Instant::now() + Duration::from_secs(5);
    while stat(&mut open[0], "accepting_conns") == 0 {
        assert!(Instant::now() < deadline, "never accepting again");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(stat(&mut open[0], "listen_disabled_num"), 2);
    assert!(stat(&mut open[0], "time_in_listen_disabled_us") > 0);
}

fn read_until_end(stream: &mut std::net::TcpStream) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(b"END\r\n") && Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    out
}

fn stat(stream: &mut std::net::TcpStream, name: &str) -> u64 {
    stream.write_all(b"stats\r\n").unwrap();
    let text = String::from_utf8(read_until_end(stream)).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .parse()
        .unwrap()
}

/// Tokyo Tyrant's and HandlerSocket's clients would read memcached's line
/// as a status byte or a reply: their ports only close.
#[test]
fn over_the_connection_limit_other_ports_close_without_a_word() {
    let server = TestServer::disk_with(ServerConfig {
        max_connections: 1,
        tyrant_port: Some(0),
        hs_read_port: Some(0),
        ..ServerConfig::default()
    });
    let mut open = server.connect();
    open.write_all(b"version\r\n").unwrap();
    assert!(read_at_least(&mut open, 16).starts_with(b"VERSION "));
    let handle = server.handle();
    for addr in [handle.tyrant_addr(), handle.handlersocket_addr(false)] {
        let mut refused = TcpStream::connect(addr.expect("the port")).unwrap();
        refused
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut got = Vec::new();
        let _ = refused.read_to_end(&mut got);
        assert_eq!(got, b"", "{}", String::from_utf8_lossy(&got));
    }
    let mut refused = server.connect();
    assert_eq!(
        read_at_least(&mut refused, 33),
        b"ERROR Too many open connections\r\n"
    );
}

#[test]
fn replicas_count_against_the_connection_limit() {
    let server = TestServer::disk_with(ServerConfig {
        max_connections: 3,
        ..ServerConfig::default()
    });
    let mut replicas: Vec<_> = (0..3).map(|_| server.connect()).collect();
    for (n, replica) in replicas.iter_mut().enumerate() {
        replica
            .write_all(format!("replicate {} none 6\r\n", n + 10).as_bytes())
            .unwrap();
        // Its feed has begun: it is out of the workers' loops.
        assert!(!read_at_least(replica, 1).is_empty());
    }
    // Fed on a thread of its own, each still holds its place: a fourth
    // connection is one too many.
    let mut refused = server.connect();
    assert_eq!(
        read_at_least(&mut refused, 33),
        b"ERROR Too many open connections\r\n"
    );
    drop(replicas);
}

/// Each feed holds a thread or two: past --max-replicas a replica is
/// refused, and its place is free again once a feed ends.
#[test]
fn replicas_past_the_limit_are_refused_until_a_feed_ends() {
    let server = TestServer::disk_with(ServerConfig {
        max_replicas: 2,
        ..ServerConfig::default()
    });
    // The first line of its feed: how it begins, or the refusal.
    let attach = |n: usize| {
        let mut replica = server.connect();
        (replica.write_all(format!("replicate {n} none 6\r\n").as_bytes())).unwrap();
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\n") && replica.read(&mut byte).unwrap() == 1 {
            line.push(byte[0]);
        }
        (replica, String::from_utf8_lossy(&line).into_owned())
    };
    let fed_line = |line: &str| line.starts_with("SNAPSHOT ") || line.starts_with("STREAM ");
    let (fed, first) = attach(10);
    assert!(fed_line(&first), "{first}");
    let (_also_fed, first) = attach(11);
    assert!(fed_line(&first), "{first}");
    let (_refused, first) = attach(12);
    assert_eq!(first, "SERVER_ERROR too many replicas (--max-replicas)\r\n");
    let mut admin = server.connect();
    admin.write_all(b"stats replication\r\n").unwrap();
    let stats = String::from_utf8(read_until_end(&mut admin)).unwrap();
    assert!(
        stats.contains("STAT repl_replicas_refused 1\r\n"),
        "{stats}"
    );
    drop(fed);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_replica, first) = attach(13);
        if fed_line(&first) {
            break;
        }
        assert!(first.starts_with("SERVER_ERROR too many"), "{first}");
        // The first feed notices its replica left at its next heartbeat.
        assert!(Instant::now() < deadline, "no place came free");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let server = TestServer::with(
        ServerConfig {
            idle_timeout: Some(Duration::from_secs(1)),
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut idle = server.connect();
    // Returns at the close; the timeout only bounds a failure.
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 16];
    let read = idle.read(&mut buf);
    assert!(
        matches!(read, Ok(0))
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the idle connection was not closed: {read:?}"
    );
    let mut fresh = server.connect();
    assert_eq!(stat(&mut fresh, "idle_kicks"), 1);
}

/// The idle timeout spares a memcached request whose value is being read
/// (as memcached's `conn_nread`), and nothing else: not a Tokyo Tyrant
/// request cut short, in its header or its value, nor an HTTP head, as
/// ttserver's `-tout` spares none.
#[test]
fn the_idle_timeout_spares_only_a_memcached_value_being_read() {
    let server = TestServer::with(
        ServerConfig {
            idle_timeout: Some(Duration::from_secs(1)),
            tyrant_port: Some(0),
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let tyrant = server.handle().tyrant_addr().expect("a tyrant port");
    let cut_short: [&[u8]; 4] = [
        b"\xc8\x10\x00",
        b"\xc8\x10\x00\x00\x00\x01\x00\x00\x00\x10kabc",
        b"GET /k HTTP/1.1\r\nX-Partial: ",
        b"PUT /k HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
    ];
    let mut closed: Vec<TcpStream> = (cut_short.iter())
        .map(|request| {
            let mut stream = TcpStream::connect(tyrant).unwrap();
            stream.write_all(request).unwrap();
            stream
        })
        .collect();
    let mut spared = server.connect();
    spared.write_all(b"set k 0 0 10\r\nabc").unwrap();
    for (stream, request) in closed.iter_mut().zip(cut_short) {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let request = String::from_utf8_lossy(request);
        assert!(closes(stream), "{request:?} was not closed");
    }
    spared.write_all(b"defghij\r\n").unwrap();
    assert_eq!(read_at_least(&mut spared, 8), b"STORED\r\n");
}

/// A client that trickles a command line a byte at a time, never ending
/// it, is idle all the same (memcached counts from the last command).
#[test]
fn a_line_trickled_in_does_not_keep_a_connection_from_its_idle_timeout() {
    let server = TestServer::with(
        ServerConfig {
            idle_timeout: Some(Duration::from_secs(1)),
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut trickling = server.connect();
    trickling
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut buf = [0u8; 16];
    loop {
        assert!(std::time::Instant::now() < deadline, "never closed");
        // A write to a closed connection may fail: closed either way.
        if trickling.write_all(b"g").is_err() {
            break;
        }
        match trickling.read(&mut buf) {
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Ok(n) => panic!("answered {:?}", &buf[..n]),
            Err(_) => {} // the read timed out: still open
        }
    }
    let mut fresh = server.connect();
    assert_eq!(stat(&mut fresh, "idle_kicks"), 1);
}

#[test]
fn stats_count_what_happened() {
    let server = TestServer::start();
    let mut stream = server.connect();
    stream
        .write_all(b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\ndelete a\r\nincr n 1\r\n")
        .unwrap();
    read_at_least(&mut stream, 8 + 23 + 5 + 9 + 11);
    assert_eq!(stat(&mut stream, "cmd_set"), 1);
    assert_eq!(stat(&mut stream, "get_hits"), 1);
    assert_eq!(stat(&mut stream, "get_misses"), 1);
    assert_eq!(stat(&mut stream, "delete_hits"), 1);
    assert_eq!(stat(&mut stream, "incr_misses"), 1);
    assert_eq!(stat(&mut stream, "curr_items"), 0);
    assert_eq!(stat(&mut stream, "total_items"), 1);
    assert_eq!(stat(&mut stream, "curr_connections"), 1);
    stream.write_all(b"stats reset\r\n").unwrap();
    assert_eq!(read_at_least(&mut stream, 7), b"RESET\r\n");
    assert_eq!(stat(&mut stream, "cmd_set"), 0);
    for group in ["settings", "items", "slabs", "sizes", "conns"] {
        stream
            .write_all(format!("stats {group}\r\n").as_bytes())
            .unwrap();
        let text = String::from_utf8(read_until_end(&mut stream)).unwrap();
        assert!(text.ends_with("END\r\n"), "stats {group}: {text}");
    }
    stream.write_all(b"stats settings\r\n").unwrap();
    let settings = String::from_utf8(read_until_end(&mut stream)).unwrap();
    assert!(settings.contains("STAT item_size_max 1048576\r\n"));
    assert!(settings.contains("STAT binding_protocol auto-negotiate\r\n"));
}

#[test]
fn shutdown_command_stops_the_server_when_enabled() {
    let server = TestServer::with(
        ServerConfig {
            shutdown_command: true,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut stream = server.connect();
    stream.write_all(b"shutdown\r\n").unwrap();
    assert!(closes(&mut stream));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.handle().shared().stopping() {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(10));
    }
}

fn binary_request(
    code: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    binary::compose_request(&mut out, code, opaque, cas, extras, key, value);
    out
}

/// (opcode, status, opaque, cas, extras, key, value) of each response in `bytes`.
type BinaryResponse = (u8, u16, u32, u64, Vec<u8>, Vec<u8>, Vec<u8>);

fn binary_responses(mut bytes: &[u8]) -> Vec<BinaryResponse> {
    let mut responses = Vec::new();
    while bytes.len() >= binary::HEADER_LEN {
        assert_eq!(bytes[0], binary::RESPONSE_MAGIC);
        let key_len = u16::from_be_bytes([bytes[2], bytes[3]]) as usize;
        let extras_len = bytes[4] as usize;
        let status = u16::from_be_bytes([bytes[6], bytes[7]]);
        let body = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let opaque = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
        let cas = u64::from_be_bytes(bytes[16..24].try_into().unwrap());
        let body_bytes = &bytes[24..24 + body];
        responses.push((
            bytes[1],
            status,
            opaque,
            cas,
            body_bytes[..extras_len].to_vec(),
            body_bytes[extras_len..extras_len + key_len].to_vec(),
            body_bytes[extras_len + key_len..].to_vec(),
        ));
        bytes = &bytes[24 + body..];
    }
    responses
}

#[test]
fn binary_quiet_commands_answer_only_misses_and_errors() {
    let server = TestServer::start();
    let flags_and_expiry = [0, 0, 0, 42, 0, 0, 0, 0];
    let mut request = binary_request(opcode::SETQ, 1, 0, &flags_and_expiry, b"k", b"v");
    request.extend(binary_request(opcode::GETQ, 2, 0, &[], b"k", b""));
    request.extend(binary_request(opcode::GETQ, 3, 0, &[], b"missing", b""));
    request.extend(binary_request(opcode::GETKQ, 4, 0, &[], b"k", b""));
    request.extend(binary_request(
        opcode::ADDQ,
        5,
        0,
        &flags_and_expiry,
        b"k",
        b"v",
    ));
    request.extend(binary_request(opcode::NOOP, 6, 0, &[], b"", b""));
    let reply = server.exchange(&request, 4 * 24 + 5 + 6 + 20);
    let responses = binary_responses(&reply);
    let summary: Vec<(u8, u16, u32)> = responses.iter().map(|r| (r.0, r.1, r.2)).collect();
    assert_eq!(
        summary,
        [
            (opcode::GETQ, 0, 2),
            (opcode::GETKQ, 0, 4),
            (opcode::ADDQ, binary::Status::KeyExists as u16, 5),
            (opcode::NOOP, 0, 6),
        ]
    );
    assert_eq!(responses[0].4, [0, 0, 0, 42], "flags come back as extras");
    assert_eq!(responses[0].6, b"v");
    assert_eq!(responses[1].5, b"k", "getk returns the key");
    assert_eq!(responses[2].6, b"Data exists for key.");
}

#[test]
fn a_multi_get_past_the_reply_limit_is_refused_whole() {
    let server = TestServer::with(
        ServerConfig {
            max_reply_bytes: 10_000,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut stream = server.connect();
    let value = "v".repeat(4000);
    for key in ["a", "b", "c"] {
        let set = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        stream.write_all(set.as_bytes()).unwrap();
        assert_eq!(
            support::read_exact_reply(&mut stream, b"STORED\r\n"),
            b"STORED\r\n"
        );
    }
    // Three values pass 10,000 bytes: as memcached when it cannot allocate
    // a reply, nothing of it goes (a get of many large values copied them
    // all into memory first).
    let refused = b"SERVER_ERROR out of memory writing get response\r\n";
    stream.write_all(b"get a b c\r\n").unwrap();
    assert_eq!(support::read_exact_reply(&mut stream, refused), refused);
    stream.write_all(b"get a b\r\n").unwrap();
    let two = format!("VALUE a 0 4000\r\n{value}\r\nVALUE b 0 4000\r\n{value}\r\nEND\r\n");
    assert_eq!(
        support::read_exact_reply(&mut stream, two.as_bytes()),
        two.as_bytes()
    );
    // One value goes whatever its size: the limit is on what a reply adds
    // to it.
    let large = "w".repeat(12_000);
    let set = format!("set large 0 0 {}\r\n{large}\r\n", large.len());
    stream.write_all(set.as_bytes()).unwrap();
    assert_eq!(
        support::read_exact_reply(&mut stream, b"STORED\r\n"),
        b"STORED\r\n"
    );
    stream.write_all(b"get large\r\n").unwrap();
    let one = format!("VALUE large 0 12000\r\n{large}\r\nEND\r\n");
    assert_eq!(
        support::read_exact_reply(&mut stream, one.as_bytes()),
        one.as_bytes()
    );
}

#[test]
fn an_append_past_the_item_size_limit_is_not_stored() {
    let server = TestServer::with(
        ServerConfig {
            max_item_size: 10_000,
            ..ServerConfig::default()
        },
        MemoryConfig {
            max_value_bytes: 10_000,
            ..MemoryConfig::default()
        },
    );
    let mut stream = server.connect();
    let part = "p".repeat(6000);
    let set = format!("set k 0 0 {}\r\n{part}\r\n", part.len());
    stream.write_all(set.as_bytes()).unwrap();
    assert_eq!(
        support::read_exact_reply(&mut stream, b"STORED\r\n"),
        b"STORED\r\n"
    );
    // Each request is under -I; together they would pass it, as memcached
    // finds no item that large to allocate.
    for verb in ["append", "prepend"] {
        let grow = format!("{verb} k 0 0 {}\r\n{part}\r\n", part.len());
        stream.write_all(grow.as_bytes()).unwrap();
        let refused = b"NOT_STORED\r\n";
        assert_eq!(support::read_exact_reply(&mut stream, refused), refused);
    }
    stream.write_all(b"append k 0 0 1\r\nq\r\n").unwrap();
    assert_eq!(
        support::read_exact_reply(&mut stream, b"STORED\r\n"),
        b"STORED\r\n"
    );
}

/// A connection that reads slowly (a small receive buffer, fixed before
/// it opens, so an unread reply cannot all fit in the kernel's buffers),
/// and the length of the value `k` it stored.
fn slow_reader_of_a_large_value(server: &TestServer) -> (TcpStream, usize) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(8 << 10).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let mut stream: std::net::TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let value = vec![b'v'; 900 << 10];
    let mut set = format!("set k 0 0 {}\r\n", value.len()).into_bytes();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    stream.write_all(&set).unwrap();
    assert_eq!(
        support::read_exact_reply(&mut stream, b"STORED\r\n"),
        b"STORED\r\n"
    );
    (stream, value.len())
}

/// Reads until the end or an error, slowly; whether the end was a close.
fn read_slowly_to_the_end(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 8 << 10];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (reply, true),
            Err(_) => return (reply, false),
            Ok(n) => reply.extend_from_slice(&chunk[..n]),
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[test]
fn quit_after_a_large_reply_closes_only_once_the_reply_is_sent() {
    let server = TestServer::start();
    let (mut stream, len) = slow_reader_of_a_large_value(&server);
    // Three gets, then quit, read slowly: a pass serves gets until its
    // replies pass a mebibyte, so the third get and the quit share one,
    // which starts once the second reply fits in the socket, leaving no
    // room for the third: the rest of it waits in the server when the quit
    // is served (it was dropped with the connection: the client got part of
    // a value, then the end).
    stream
        .write_all(b"get k\r\nget k\r\nget k\r\nquit\r\n")
        .unwrap();
    let (reply, _) = read_slowly_to_the_end(&mut stream);
    let head = format!("VALUE k 0 {len}\r\n");
    assert_eq!(reply.len(), 3 * (head.len() + len + 2 + 5));
    assert!(reply.ends_with(b"\r\nEND\r\n"));
}

/// Input the server never read (sent after `quit`) made its close a TCP
/// reset, and a reset drops the replies the kernel has not sent yet: the
/// client got part of them, then "connection reset".
#[test]
fn input_after_quit_does_not_cut_the_replies_before_it() {
    let server = TestServer::start();
    let (mut stream, len) = slow_reader_of_a_large_value(&server);
    // The server reads 64 KiB at a time and none after the quit: the rest
    // waits in the socket when the server closes it.
    let mut request = b"get k\r\nget k\r\nget k\r\nquit\r\n".to_vec();
    request.extend_from_slice(&[b'x'; 100 << 10]);
    stream.write_all(&request).unwrap();
    let (reply, closed) = read_slowly_to_the_end(&mut stream);
    let head = format!("VALUE k 0 {len}\r\n");
    assert_eq!(reply.len(), 3 * (head.len() + len + 2 + 5));
    assert!(closed, "the connection ended in an error, not a close");
}

#[test]
fn a_binary_exptime_past_2038_is_an_absolute_time_not_a_negative_one() {
    let server = TestServer::start();
    // memcached reads the binary exptime unsigned: 0xFFFFFFFF is a Unix
    // time in 2106, so the item lives (read as an i32, it was -1: expired).
    let far = [0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF];
    let mut request = binary_request(opcode::SET, 1, 0, &far, b"k", b"v");
    request.extend(binary_request(opcode::GET, 2, 0, &[], b"k", b""));
    request.extend(binary_request(opcode::TOUCH, 3, 0, &far[4..], b"k", b""));
    request.extend(binary_request(opcode::GET, 4, 0, &[], b"k", b""));
    let reply = server.exchange(&request, 4 * 24 + 5 + 5);
    let responses = binary_responses(&reply);
    let statuses: Vec<u16> = responses.iter().map(|r| r.1).collect();
    assert_eq!(statuses, [0, 0, 0, 0], "{responses:?}");
    assert_eq!(responses[3].6, b"v");
}

#[test]
fn binary_incr_creates_with_initial_value_and_rejects_non_numbers() {
    let server = TestServer::start();
    let mut extras = Vec::new();
    extras.extend_from_slice(&5u64.to_be_bytes()); // delta
    extras.extend_from_slice(&100u64.to_be_bytes()); // initial
    extras.extend_from_slice(&0u32.to_be_bytes()); // expiry
    let mut request = binary_request(opcode::INCREMENT, 1, 0, &extras, b"n", b"");
    request.extend(binary_request(opcode::INCREMENT, 2, 0, &extras, b"n", b""));
    let mut no_create = extras.clone();
    no_create[16..].copy_from_slice(&u32::MAX.to_be_bytes());
    request.extend(binary_request(
        opcode::DECREMENT,
        3,
        0,
        &no_create,
        b"absent",
        b"",
    ));
    request.extend(binary_request(opcode::SET, 4, 0, &[0; 8], b"s", b"text"));
    request.extend(binary_request(opcode::INCREMENT, 5, 0, &extras, b"s", b""));
    let reply = server.exchange(&request, 5 * 24 + 8 + 8 + 9 + 46);
    let responses = binary_responses(&reply);
    assert_eq!(responses[0].6, 100u64.to_be_bytes());
    assert_eq!(responses[1].6, 105u64.to_be_bytes());
    assert_eq!(responses[2].1, binary::Status::KeyNotFound as u16);
    assert_eq!(responses[4].1, binary::Status::NonNumeric as u16);
}

#[test]
fn binary_stats_end_with_an_empty_response_and_bad_frames_close() {
    let server = TestServer::start();
    let mut stream = server.connect();
    stream
        .write_all(&binary_request(opcode::STAT, 9, 0, &[], b"", b""))
        .unwrap();
    let mut reply = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    // The terminator is a response with an empty key and value.
    while Instant::now() < deadline {
        reply.extend(read_at_least(&mut stream, 1));
        let responses = binary_responses(&reply);
        if responses.last().is_some_and(|r| r.5.is_empty()) {
            break;
        }
    }
    let responses = binary_responses(&reply);
    assert!(responses.iter().any(|r| r.5 == b"curr_items"));
    assert!(responses.last().unwrap().5.is_empty());
    // Key length larger than the body: the frame cannot be trusted.
    let mut bad = binary_request(opcode::GET, 1, 0, &[], b"key", b"");
    bad[11] = 1;
    let mut stream = server.connect();
    stream.write_all(&bad).unwrap();
    read_at_least(&mut stream, 24);
    assert!(closes(&mut stream));
    still_serves(&server);
}

#[test]
fn binary_lengths_that_do_not_suit_the_opcode_are_invalid_and_close() {
    let server = TestServer::start();
    // A set without its flags and expiry, a get with extras, a noop with a
    // key, a get of a 251-byte key: memcached answers "invalid arguments"
    // and closes, so what follows on the connection is not served.
    for bad in [
        binary_request(opcode::SET, 1, 0, &[], b"k", b"v"),
        binary_request(opcode::GET, 1, 0, &[0; 4], b"k", b""),
        binary_request(opcode::NOOP, 1, 0, &[], b"k", b""),
        binary_request(opcode::GET, 1, 0, &[], &[b'k'; 251], b""),
    ] {
        let mut stream = server.connect();
        let mut request = bad.clone();
        request.extend(binary_request(opcode::NOOP, 2, 0, &[], b"", b""));
        stream.write_all(&request).unwrap();
        let reply = read_at_least(&mut stream, 24);
        let responses = binary_responses(&reply);
        assert_eq!(
            responses.iter().map(|r| (r.1, r.2)).collect::<Vec<_>>(),
            [(binary::Status::InvalidArguments as u16, 1)],
            "opcode {:#x}",
            bad[1]
        );
        assert!(closes(&mut stream));
    }
    // VERBOSITY, which memcached 1.6.18 no longer knows, is not framed by
    // it: one without its extra is refused and the connection goes on.
    let mut request = binary_request(opcode::VERBOSITY, 1, 0, &[], b"", b"");
    request.extend(binary_request(opcode::NOOP, 2, 0, &[], b"", b""));
    let reply = server.exchange(&request, 2 * 24 + 17);
    assert_eq!(
        binary_responses(&reply)
            .iter()
            .map(|r| (r.1, r.2))
            .collect::<Vec<_>>(),
        [(binary::Status::InvalidArguments as u16, 1), (0, 2)]
    );
    still_serves(&server);
}

#[test]
fn a_binary_flush_refused_by_dash_f_is_an_auth_error() {
    let server = TestServer::with(
        ServerConfig {
            flush_enabled: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    // memcached's process_bin_flush answers "Auth failure." under -F.
    let reply = server.exchange(&binary_request(opcode::FLUSH, 1, 0, &[], b"", b""), 24 + 12);
    let responses = binary_responses(&reply);
    assert_eq!(responses[0].1, binary::Status::AuthError as u16);
    assert_eq!(responses[0].6, b"Auth failure.");
}

#[test]
fn a_binary_add_with_a_cas_is_a_compare_and_set() {
    let server = TestServer::start();
    // As memcached: any store with a CAS compares it, add included.
    let missing = binary_request(opcode::ADD, 1, 5, &[0; 8], b"k", b"v");
    let reply = server.exchange(&missing, 24 + 9);
    assert_eq!(
        binary_responses(&reply)[0].1,
        binary::Status::KeyNotFound as u16
    );
    let reply = server.exchange(&binary_request(opcode::SET, 2, 0, &[0; 8], b"k", b"v"), 24);
    let cas = binary_responses(&reply)[0].3;
    let reply = server.exchange(
        &binary_request(opcode::ADD, 3, cas, &[0; 8], b"k", b"w"),
        24,
    );
    assert_eq!(binary_responses(&reply)[0].1, 0, "stored over its CAS");
    let reply = server.exchange(&binary_request(opcode::GET, 4, 0, &[], b"k", b""), 24 + 5);
    assert_eq!(binary_responses(&reply)[0].6, b"w");
}

/// As memcached 1.6.18 answers them (checked side by side): flags a meta
/// command has no use for are ignored, `ma` treats `C0` as no comparison,
/// numbers take a leading `+`, and `ms` in replace mode with a CAS of a
/// missing key is `NF`.
#[test]
fn meta_commands_ignore_flags_they_do_not_use() {
    let server = TestServer::start();
    let mut stream = server.connect();
    let mut ask = |request: &[u8], expected: &str| {
        stream.write_all(request).unwrap();
        let reply = read_at_least(&mut stream, expected.len());
        assert_eq!(String::from_utf8(reply).unwrap(), expected);
    };
    ask(b"ms n 1 t f h l s u v D1 J1 N1 R1\r\n5\r\n", "HD\r\n");
    ask(b"ma n f h l s u I F1 R1\r\n", "HD\r\n");
    ask(b"ma n C0 v\r\n", "VA 1\r\n7\r\n");
    ask(b"mg n I C1 D1 F1 J1 M1 v\r\n", "VA 1\r\n7\r\n");
    // Numbers take a leading plus, as memcached's strtoull does.
    ask(b"ma n D+2 v\r\n", "VA 1\r\n9\r\n");
    ask(b"incr n +1\r\n", "10\r\n");
    ask(
        b"md missing c f h l s t u v D1 F1 J1 M1 N1 R1\r\n",
        "NF\r\n",
    );
    ask(b"ms missing 1 MR C5\r\nx\r\n", "NF\r\n");
}

#[test]
fn a_unix_socket_serves_like_tcp() {
    let dir = std::env::temp_dir().join(format!("kura-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kura.sock");
    let store = std::sync::Arc::new(kura_store::MemoryStore::new(MemoryConfig::default()));
    let handle = kura_server::start(
        ServerConfig {
            unix_socket: Some(path.clone()),
            threads: 1,
            ..ServerConfig::default()
        },
        store,
        true,
    )
    .unwrap();
    let mut stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(b"set u 0 0 1\r\nx\r\nget u\r\n").unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 256];
    while reply.len() < 29 {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0);
        reply.extend_from_slice(&buf[..n]);
    }
    assert_eq!(reply, b"STORED\r\nVALUE u 0 1\r\nx\r\nEND\r\n");
    handle.shutdown();
    handle.wait();
    let _ = std::fs::remove_dir_all(dir);
}

/// Lines sent a few bytes at a time (the server waits for their line end
/// without searching them again from the start) are read exactly as if
/// they had come whole, whatever follows them in the same read.
#[test]
fn lines_trickled_a_few_bytes_at_a_time_are_read_whole() {
    let server = TestServer::start();
    let mut stream = server.connect();
    let mut request = b"set trickled 3 0 5\r\nhello\r\nget trickled\r\nget".to_vec();
    // A multi-get line of 3,000 bytes, past memcached's line limit.
    for i in 0..300 {
        request.extend_from_slice(format!(" miss:{i:04}").as_bytes());
    }
    request.extend_from_slice(b" trickled\r\nversion\r\n");
    for chunk in request.chunks(7) {
        stream.write_all(chunk).unwrap();
        thread::sleep(Duration::from_micros(200));
    }
    let value = b"VALUE trickled 3 5\r\nhello\r\nEND\r\n";
    let mut expected = b"STORED\r\n".to_vec();
    expected.extend_from_slice(value);
    expected.extend_from_slice(value);
    expected.extend_from_slice(b"VERSION ");
    let reply = read_at_least(&mut stream, expected.len() + 3);
    assert!(
        reply.starts_with(&expected),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    // A line that is not a multi-get, past the limit, still closes.
    let mut junk = server.connect();
    for _ in 0..40 {
        // The server may close before the last pieces (a broken pipe).
        if junk.write_all(&[b'x'; 100]).is_err() {
            break;
        }
        thread::sleep(Duration::from_micros(200));
    }
    assert!(closes(&mut junk));
    still_serves(&server);
}
