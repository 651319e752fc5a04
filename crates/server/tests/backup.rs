//! A backup asked for over the wire (`backup` in memcached's text protocol,
//! `copy` in Tokyo Tyrant's) runs on a thread of its own: while it runs,
//! its worker serves the other connections, and the connection that asked
//! gets the backup's reply before those of the requests it sent after it.

mod support;

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_proto::tyrant::Request;
use kura_server::ServerConfig;
use kura_store::disk::io::Io;
use kura_store::SyncPolicy;
use parking_lot::{Condvar, Mutex};
use support::tyrant::{self, call};
use support::{read_exact_reply, TestServer};

/// Log fsyncs that wait while the gate is shut: a backup fsyncs the log
/// before it copies it, so it waits there until the test opens the gate.
#[derive(Debug, Default)]
struct GatedSyncs {
    shut: Mutex<bool>,
    opened: Condvar,
    /// An fsync waits at the gate.
    waiting: AtomicBool,
}

impl GatedSyncs {
    fn shut(&self) {
        *self.shut.lock() = true;
    }

    fn open(&self) {
        *self.shut.lock() = false;
        self.opened.notify_all();
    }

    fn wait_for_a_waiter(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.waiting.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "nothing fsynced the log");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Io for GatedSyncs {
    fn sync_log(&self, file: &File) -> io::Result<()> {
        let mut shut = self.shut.lock();
        while *shut {
            self.waiting.store(true, Ordering::Release);
            self.opened.wait(&mut shut);
        }
        drop(shut);
        file.sync_data()
    }
}

/// A disk engine with one worker (every connection shares the backup's)
/// holding `kept`, whose log fsyncs wait at a gate. Its writes are never
/// fsynced (`--sync none`), so the only fsync to wait there is a backup's.
struct Gated {
    gate: Arc<GatedSyncs>,
    server: TestServer,
}

impl Gated {
    /// The server, with its gate shut once `kept` is stored.
    fn start() -> Gated {
        let gate = Arc::new(GatedSyncs::default());
        let config = ServerConfig {
            threads: 1,
            tyrant_port: Some(0),
            ..ServerConfig::default()
        };
        let server = TestServer::disk_syncing_on(config, SyncPolicy::None, gate.clone());
        let mut stream = server.connect();
        stream.write_all(b"set kept 0 0 1\r\nv\r\n").unwrap();
        expect(&mut stream, b"STORED\r\n");
        gate.shut();
        Gated { gate, server }
    }
}

impl Drop for Gated {
    /// A failed assertion must not leave the server's threads waiting at
    /// the gate: the test would hang, not fail.
    fn drop(&mut self) {
        self.gate.open();
    }
}

/// Nothing has arrived on `stream` yet.
fn nothing_arrived(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let peeked = stream.peek(&mut [0; 1]);
    stream.set_nonblocking(false).unwrap();
    matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// The next bytes on `stream` are `expected`.
fn expect(stream: &mut TcpStream, expected: &[u8]) {
    let reply = read_exact_reply(stream, expected);
    assert_eq!(
        String::from_utf8_lossy(&reply),
        String::from_utf8_lossy(expected)
    );
}

fn read_line(stream: &mut TcpStream) -> String {
    let mut line = Vec::new();
    let mut byte = [0; 1];
    while !line.ends_with(b"\r\n") {
        stream.read_exact(&mut byte).unwrap();
        line.push(byte[0]);
    }
    String::from_utf8(line).unwrap()
}

#[test]
fn a_backup_holds_up_only_the_connection_that_asked_for_it() {
    let work = tempfile::tempdir().unwrap();
    let Gated { gate, server } = &Gated::start();
    let mut asking = server.connect();
    let to = work.path().join("backup");
    // The write before the backup is in it; the request after it is
    // answered after it.
    let request = format!(
        "set late 0 0 1\r\nw\r\nbackup {}\r\nget kept\r\n",
        to.display()
    );
    asking.write_all(request.as_bytes()).unwrap();
    expect(&mut asking, b"STORED\r\n");
    gate.wait_for_a_waiter();

    let mut other = server.connect();
    for _ in 0..3 {
        other.write_all(b"get kept\r\n").unwrap();
        expect(&mut other, b"VALUE kept 0 1\r\nv\r\nEND\r\n");
    }
    // One backup at a time: a second is refused at once.
    let second = format!("backup {}\r\n", work.path().join("second").display());
    other.write_all(second.as_bytes()).unwrap();
    expect(&mut other, b"SERVER_ERROR another backup is under way\r\n");
    assert!(
        nothing_arrived(&asking),
        "the backup answered before it could end"
    );

    gate.open();
    let reply = read_line(&mut asking);
    // `set kept` is entry 1, `set late` entry 2.
    assert!(reply.starts_with("OK {"), "{reply}");
    assert!(reply.contains(r#""last":{"lsn":2,"#), "{reply}");
    expect(&mut asking, b"VALUE kept 0 1\r\nv\r\nEND\r\n");
    assert!(to.join("manifest.json").exists());
    // The next backup, once the reply came, is taken (its thread may
    // still be ending).
    for next in 0..5 {
        let to = work.path().join(format!("next{next}"));
        let request = format!("backup {}\r\n", to.display());
        asking.write_all(request.as_bytes()).unwrap();
        let reply = read_line(&mut asking);
        assert!(reply.starts_with("OK {"), "{reply}");
    }
}

#[test]
fn a_tyrant_copy_holds_up_only_the_connection_that_asked_for_it() {
    let work = tempfile::tempdir().unwrap();
    let Gated { gate, server } = &Gated::start();
    let mut asking = tyrant::connect(server);
    let to = work.path().join("copy");
    let path = to.to_str().unwrap().as_bytes();
    tyrant::send(&mut asking, &Request::Copy { path });
    tyrant::send(&mut asking, &Request::Vsiz { key: b"kept" });
    gate.wait_for_a_waiter();

    let mut other = tyrant::connect(server);
    for _ in 0..3 {
        let size = call(&mut other, &Request::Vsiz { key: b"kept" }, 5);
        assert_eq!(size, [&[0][..], &1u32.to_be_bytes()].concat());
    }
    assert!(
        nothing_arrived(&asking),
        "the copy answered before it could end"
    );

    gate.open();
    // The copy's status, then the size of `kept`.
    let replies = tyrant::read_n(&mut asking, 1 + 5);
    assert_eq!(replies, [&[0, 0][..], &1u32.to_be_bytes()].concat());
    assert!(to.join("manifest.json").exists());
}

/// A server told to stop while a backup runs lets it end and sends its
/// reply before it closes the connection.
#[test]
fn a_stopping_server_finishes_the_backup_under_way_and_answers_it() {
    let work = tempfile::tempdir().unwrap();
    let Gated { gate, server } = &Gated::start();
    let mut asking = server.connect();
    let to = work.path().join("backup");
    asking
        .write_all(format!("backup {}\r\n", to.display()).as_bytes())
        .unwrap();
    gate.wait_for_a_waiter();
    server.handle().shutdown();
    // The worker stops, and waits for the backup.
    std::thread::sleep(Duration::from_millis(100));
    assert!(nothing_arrived(&asking), "answered before the backup ended");
    gate.open();
    let reply = read_line(&mut asking);
    assert!(reply.starts_with("OK {"), "{reply}");
    assert!(to.join("manifest.json").exists());
    assert!(support::closes(&mut asking));
}
