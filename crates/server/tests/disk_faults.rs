//! What clients are told over the wire when the disk engine's log fails
//! (`docs/DESIGN.md`, durability): the write in the failed append is never
//! acknowledged (its connection closes), every later write is answered
//! `SERVER_ERROR storage write failed` (binary status 0x84), and reads go on.
//! The engine's side of each failure is `kura-store`'s `tests/faults.rs`.

mod support;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::time::Duration;

use kura_proto::binary::opcode;
use kura_proto::tyrant::Request as TyrantRequest;
use kura_server::ServerConfig;
use kura_store::disk::io::Io;
use support::tyrant::{self as tyrant, misc};
use support::{binary_call, closes, expect_reply, read_at_least, TestServer};

/// Log writes that fail (EIO, or ENOSPC if `full`) while `failing` is set.
#[derive(Debug, Default)]
struct FailingLog {
    failing: AtomicBool,
    full: bool,
}

impl Io for FailingLog {
    fn write_log(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        if self.failing.load(Ordering::Acquire) {
            let errno = if self.full { libc::ENOSPC } else { libc::EIO };
            return Err(io::Error::from_raw_os_error(errno));
        }
        file.write_all_at(bytes, offset)
    }
}

const FAILED: &[u8] = b"SERVER_ERROR storage write failed\r\n";

/// One binary request on a fresh connection: (status, value).
fn binary_exchange(
    server: &TestServer,
    code: u8,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) -> (u16, Vec<u8>) {
    binary_call(&mut server.connect(), code, key, extras, value)
}

#[test]
fn a_poisoned_engine_answers_every_write_with_server_error_and_keeps_serving_reads() {
    let log = Arc::new(FailingLog::default());
    let server = TestServer::disk_on(ServerConfig::default(), log.clone());
    expect_reply(&server, b"set kept 5 0 2\r\nok\r\n", b"STORED\r\n");
    expect_reply(&server, b"set n 0 0 1\r\n1\r\n", b"STORED\r\n");

    log.failing.store(true, Ordering::Release);
    // The write whose append fails is not acknowledged: its connection
    // closes without a reply.
    let mut stream = server.connect();
    stream.write_all(b"set lost 0 0 1\r\nx\r\n").unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    assert!(reply.is_empty(), "{}", String::from_utf8_lossy(&reply));
    assert!(closes(&mut stream));

    // Every write after it is refused in memcached's words.
    expect_reply(&server, b"set later 0 0 1\r\nx\r\n", FAILED);
    expect_reply(&server, b"delete kept\r\n", FAILED);
    expect_reply(&server, b"incr n 1\r\n", FAILED);
    expect_reply(&server, b"append kept 0 0 1\r\n!\r\n", FAILED);
    expect_reply(&server, b"touch kept 100\r\n", FAILED);
    expect_reply(&server, b"touch missing 100\r\n", b"NOT_FOUND\r\n");
    // A get-and-touch cannot write its touch: the error replaces the reply.
    expect_reply(&server, b"gat 100 n kept\r\n", FAILED);
    expect_reply(&server, b"ms later 1\r\nx\r\n", FAILED);
    expect_reply(&server, b"mg kept v T30\r\n", FAILED);
    expect_reply(&server, b"mg missing v N30\r\n", FAILED);
    expect_reply(&server, b"mg missing v\r\n", b"EN\r\n");
    let extras = [0u8; 8];
    assert_eq!(
        binary_exchange(&server, opcode::SET, &extras, b"later", b"x").0,
        0x84,
        "binary: internal error"
    );
    assert_eq!(
        binary_exchange(&server, opcode::DELETE, &[], b"kept", b"").0,
        0x84
    );
    let touch_extras = 100u32.to_be_bytes();
    assert_eq!(
        binary_exchange(&server, opcode::TOUCH, &touch_extras, b"kept", b"").0,
        0x84
    );
    assert_eq!(
        binary_exchange(&server, opcode::GAT, &touch_extras, b"kept", b"").0,
        0x84
    );

    // Reads go on, and find what was acknowledged.
    expect_reply(
        &server,
        b"get kept lost later\r\n",
        b"VALUE kept 5 2\r\nok\r\nEND\r\n",
    );
    assert_eq!(
        binary_exchange(&server, opcode::GET, &[], b"kept", b""),
        (0, b"ok".to_vec())
    );
    let stats = server.exchange(b"stats kura\r\n", 1);
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.contains("STAT disk_poisoned 1\r\n"), "{stats}");
}

/// One HandlerSocket request line (tokens joined by TAB) and its reply.
fn hs_call(stream: &mut BufReader<TcpStream>, tokens: &[&[u8]]) -> String {
    let mut line = tokens.join(&b'\t');
    line.push(b'\n');
    stream.get_mut().write_all(&line).unwrap();
    let mut reply = String::new();
    stream.read_line(&mut reply).unwrap();
    reply
}

#[test]
fn a_poisoned_engine_refuses_flushes_and_tyrant_and_handlersocket_writes() {
    let log = Arc::new(FailingLog::default());
    let config = ServerConfig {
        tyrant_port: Some(0),
        hs_read_port: Some(0),
        hs_write_port: Some(0),
        ..ServerConfig::default()
    };
    let server = TestServer::disk_on(config, log.clone());
    let hs = TcpStream::connect(server.handle().handlersocket_addr(true).unwrap()).unwrap();
    hs.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut hs = BufReader::new(hs);
    let open = [&b"P"[..], b"0", b"db", b"users", b"PRIMARY", b"_key,name"];
    assert_eq!(hs_call(&mut hs, &open), "0\t1\n");
    assert_eq!(
        hs_call(&mut hs, &[b"0", b"+", b"2", b"k1", b"Bob"]),
        "0\t1\t0\n"
    );
    // A read waits until the row is in LMDB, so the find below needs no
    // write.
    assert_eq!(
        hs_call(&mut hs, &[b"0", b"=", b"1", b"k1"]),
        "0\t2\tk1\tBob\n"
    );
    let mut tt = tyrant::connect(&server);
    for key in [&b"a"[..], b"b"] {
        let put = tyrant::put(kura_proto::tyrant::PutMode::Put, key, b"v");
        assert_eq!(tyrant::call(&mut tt, &put, 1), [0]);
    }
    assert_eq!(tyrant::call(&mut tt, &TyrantRequest::Sync, 1), [0]);

    log.failing.store(true, Ordering::Release);
    let mut stream = server.connect();
    stream.write_all(b"set lost 0 0 1\r\nx\r\n").unwrap();
    assert!(closes(&mut stream), "the write in the failed append");

    // flush_all, now or later, could not be logged: refused, not "OK".
    expect_reply(&server, b"flush_all\r\n", FAILED);
    expect_reply(&server, b"flush_all 10\r\n", FAILED);
    assert_eq!(
        binary_exchange(&server, opcode::FLUSH, &[], b"", b"").0,
        0x84
    );
    expect_reply(&server, b"get kept\r\n", b"END\r\n");

    // Tokyo Tyrant: every removal refused is status 1, never success.
    let out = TyrantRequest::Out { key: b"a" };
    assert_eq!(tyrant::call(&mut tt, &out, 1), [1]);
    assert_eq!(misc(&mut tt, b"outlist", &[b"a", b"b"]).0, 1);
    assert_eq!(tyrant::call(&mut tt, &TyrantRequest::Vanish, 1), [1]);
    assert_eq!(misc(&mut tt, b"vanish", &[]).0, 1);
    assert_eq!(tyrant::call(&mut tt, &TyrantRequest::Sync, 1), [1]);
    assert_eq!(misc(&mut tt, b"sync", &[]).0, 1);
    let get = TyrantRequest::Get { key: b"a" };
    assert_eq!(tyrant::call(&mut tt, &get, 6), b"\0\0\0\0\x01v");

    // HandlerSocket: a refused update or delete is an error, not "0 rows".
    let update = [
        &b"0"[..],
        b"=",
        b"1",
        b"k1",
        b"1",
        b"0",
        b"U",
        b"k1",
        b"Ann",
    ];
    assert_eq!(hs_call(&mut hs, &update), "1\t1\tlock_tables\n");
    let delete = [&b"0"[..], b"=", b"1", b"k1", b"1", b"0", b"D"];
    assert_eq!(hs_call(&mut hs, &delete), "1\t1\tlock_tables\n");
    assert_eq!(
        hs_call(&mut hs, &[b"0", b"=", b"1", b"k1"]),
        "0\t2\tk1\tBob\n"
    );
}

/// Sends `request` (a get) on fresh connections until the reply is
/// `reply`: a write sent on another connection has arrived, and is
/// appended (a read of a pending write waits for its append).
fn wait_for_reply(server: &TestServer, request: &[u8], reply: &[u8]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut stream = server.connect();
        stream.write_all(request).unwrap();
        // Up to the reply's end, a hit's or a miss's.
        let mut answer = Vec::new();
        let mut buf = [0; 256];
        while !answer.ends_with(b"END\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
        if answer == reply {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never answered {}, last {}",
            String::from_utf8_lossy(reply),
            String::from_utf8_lossy(&answer)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A connection whose writes have no reply (`noreply`) keeps no old tickets
/// waiting: another connection's failed write, numbered after them, does
/// not close it.
#[test]
fn a_connection_without_replies_is_not_closed_for_another_ones_failed_write() {
    let log = Arc::new(FailingLog {
        full: true,
        ..FailingLog::default()
    });
    let server = TestServer::disk_on(ServerConfig::default(), log.clone());
    expect_reply(&server, b"set d 0 0 1\r\nd\r\n", b"STORED\r\n");
    let mut quiet = server.connect();
    quiet.write_all(b"set a 0 0 1 noreply\r\na\r\n").unwrap();
    // Once a read shows it, it is appended.
    wait_for_reply(&server, b"get a\r\n", b"VALUE a 0 1\r\na\r\nEND\r\n");
    log.failing.store(true, Ordering::Release);
    let mut other = server.connect();
    other.write_all(b"set b 0 0 1\r\nb\r\n").unwrap();
    assert!(closes(&mut other), "the write in the failed append");
    log.failing.store(false, Ordering::Release);
    // Deletes go on while the disk is full.
    quiet.write_all(b"delete d noreply\r\n").unwrap();
    wait_for_reply(&server, b"get d\r\n", b"END\r\n");
    quiet.write_all(b"get a\r\n").unwrap();
    let reply = read_at_least(&mut quiet, 20);
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "VALUE a 0 1\r\na\r\nEND\r\n"
    );
}

/// `genuid` writes the table's last id before answering: when the engine
/// cannot write, it answers failure and hands out no id.
#[test]
fn a_poisoned_engine_refuses_genuid() {
    let log = Arc::new(FailingLog::default());
    let config = ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: kura_server::TyrantDatabase::Table("users".into()),
        ..ServerConfig::default()
    };
    let server = TestServer::disk_on(config, log.clone());
    let mut tt = tyrant::connect(&server);
    assert_eq!(misc(&mut tt, b"genuid", &[]), (0, vec![b"1".to_vec()]));

    log.failing.store(true, Ordering::Release);
    let mut stream = server.connect();
    stream.write_all(b"set lost 0 0 1\r\nx\r\n").unwrap();
    assert!(closes(&mut stream), "the write in the failed append");
    assert_eq!(misc(&mut tt, b"genuid", &[]), (1, vec![]));
    assert_eq!(misc(&mut tt, b"genuid", &[]), (1, vec![]));
}
