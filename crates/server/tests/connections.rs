//! Connection lifecycle over real sockets: half-closed clients.

mod support;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use support::TestServer;

fn curr_connections(server: &TestServer) -> u64 {
    stat(server, "curr_connections")
}

/// A client that sends a request and its FIN together (`printf ... | nc`)
/// gets its reply and sees the server close; nothing stays in CLOSE-WAIT.
/// With edge-triggered readiness, data and FIN arrive as one event: a short
/// read must not be taken as "drained" once the peer has closed.
#[test]
fn half_closed_connections_get_their_reply_and_are_closed() {
    let server = TestServer::start();
    // What a lone stats connection sees (memcached counts its listeners too).
    let idle = curr_connections(&server);
    // Busy connections on the same workers, as under `kura bench`.
    let mut busy: Vec<_> = (0..8).map(|_| server.connect()).collect();
    for round in 0..200 {
        for stream in &mut busy {
            stream.write_all(b"set k 0 0 1\r\nx\r\nget k\r\n").unwrap();
        }
        let mut stream = server.connect();
        stream.write_all(b"version\r\n").unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        let mut reply = Vec::new();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let result = stream.read_to_end(&mut reply);
        assert!(
            result.is_ok(),
            "round {round}: no EOF from the server: {result:?}"
        );
        assert!(
            reply.starts_with(b"VERSION "),
            "round {round}: {:?}",
            String::from_utf8_lossy(&reply)
        );
        for stream in &mut busy {
            support::read_at_least(stream, b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n".len());
        }
    }
    drop(busy);
    // Only the stats connection itself remains. The figure checked is the
    // one last read: each read is a connection of its own, which the server
    // may not have closed yet when the next one counts.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut open = curr_connections(&server);
    while open != idle && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        open = curr_connections(&server);
    }
    assert_eq!(open, idle);
}

fn stat(server: &TestServer, name: &str) -> u64 {
    let mut stream = server.connect();
    stream.write_all(b"stats\r\n").unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut buf).expect("stats reply");
        assert!(n > 0, "stats ended early");
        reply.extend_from_slice(&buf[..n]);
    }
    let prefix = format!("STAT {name} ");
    String::from_utf8_lossy(&reply)
        .lines()
        .find_map(|l| {
            l.strip_prefix(prefix.as_str())
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {name}"))
}

/// `-o read_buf_mem_limit`: 64 KiB over 2 workers leaves each 32 responses
/// of 1 KiB (memcached's response objects), as memcached's conn-limits.t
/// sets up with 1 MiB over 32. A multiget asking for more is
/// refused with memcached's error; a pipeline needing more closes the
/// connection; requests within it are served.
#[test]
fn reply_memory_beyond_read_buf_mem_limit_is_refused_as_memcached_refuses_it() {
    let server = TestServer::with(
        kura_server::ServerConfig {
            read_buffer_limit: 64 << 10,
            threads: 2,
            // The suite's -R 500: one batch may hold the whole pipeline.
            requests_per_event: 500,
            ..kura_server::ServerConfig::default()
        },
        kura_store::MemoryConfig::default(),
    );
    let mut stream = server.connect();
    let keys: Vec<String> = (0..500).map(|i| format!("k{i}")).collect();
    stream
        .write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())
        .unwrap();
    let mut reply = [0u8; 64];
    let n = stream.read(&mut reply).unwrap();
    assert_eq!(
        &reply[..n],
        b"SERVER_ERROR out of memory writing get response\r\n"
    );
    // The connection stays, and a multiget within the share is served.
    stream
        .write_all(format!("get {}\r\n", keys[..30].join(" ")).as_bytes())
        .unwrap();
    let n = stream.read(&mut reply).unwrap();
    assert_eq!(&reply[..n], b"END\r\n");
    assert_eq!(stat(&server, "response_obj_oom"), 1);

    let mut pipelined = server.connect();
    pipelined
        .write_all("mg foo v\r\n".repeat(500).as_bytes())
        .unwrap();
    let mut rest = Vec::new();
    pipelined.read_to_end(&mut rest).expect("the server closes");
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    assert_eq!(stat(&server, "response_obj_oom"), 2);
}

/// Log fsyncs that take a millisecond at least, as a disk's do: on a tmpfs
/// (/tmp on many machines) an fsync costs nothing.
#[derive(Debug)]
struct SlowSyncs;

impl kura_store::disk::io::Io for SlowSyncs {
    fn sync_log(&self, file: &std::fs::File) -> std::io::Result<()> {
        std::thread::sleep(Duration::from_millis(1));
        file.sync_data()
    }
}

/// On the disk engine a write's reply waits for its append. A request the
/// client sends meanwhile (in its own segment, after the write's) is read
/// once the reply is released: the worker reads a socket only when a
/// readiness event said it may hold bytes, and the event that came while
/// the reply was held must not be forgotten. Under `always` a reply waits
/// for an fsync too (a slow one here), so the next request mostly lands
/// while it is held.
#[test]
fn requests_sent_while_a_write_waits_for_its_append_are_served() {
    let server = TestServer::disk_syncing_on(
        kura_server::ServerConfig::default(),
        kura_store::SyncPolicy::Always,
        std::sync::Arc::new(SlowSyncs),
    );
    let mut stream = server.connect();
    for round in 0..300 {
        let value = format!("v{round}");
        let set = format!("set k 0 0 {}\r\n{value}\r\n", value.len());
        stream.write_all(set.as_bytes()).unwrap();
        // The get comes in its own segment, mostly while STORED is held.
        std::thread::sleep(Duration::from_micros(if round % 2 == 0 { 50 } else { 300 }));
        stream.write_all(b"get k\r\n").unwrap();
        let expected = format!("STORED\r\nVALUE k 0 {}\r\n{value}\r\nEND\r\n", value.len());
        let reply = support::read_at_least(&mut stream, expected.len());
        assert_eq!(String::from_utf8_lossy(&reply), expected, "round {round}");
    }
}
