//! Starts a kura server in-process on a free port, for tests that speak the wire.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_server::{ServerConfig, ServerHandle};
use kura_store::disk::io::{Io, OsIo};
use kura_store::{DiskConfig, DiskStore, MemoryConfig, MemoryStore, Store, SyncPolicy};

pub struct TestServer {
    pub addr: SocketAddr,
    handle: Option<ServerHandle>,
    store: Arc<dyn Store>,
    /// The disk engine's data directory, removed when the server is dropped.
    _dir: Option<tempfile::TempDir>,
}

impl TestServer {
    pub fn start() -> Self {
        Self::with(ServerConfig::default(), MemoryConfig::default())
    }

    pub fn with(config: ServerConfig, memory: MemoryConfig) -> Self {
        let evict = memory.evict;
        Self::serve(config, Arc::new(MemoryStore::new(memory)), evict, None)
    }

    /// A server on the disk engine, in a fresh temporary directory.
    pub fn disk() -> Self {
        Self::disk_server(ServerConfig::default(), SyncPolicy::Batch)
    }

    /// The same, under sync policy `sync`.
    pub fn disk_syncing(sync: SyncPolicy) -> Self {
        Self::disk_server(ServerConfig::default(), sync)
    }

    /// The same, with the server's settings `config`.
    pub fn disk_with(config: ServerConfig) -> Self {
        Self::disk_server(config, SyncPolicy::Batch)
    }

    fn disk_server(config: ServerConfig, sync: SyncPolicy) -> Self {
        Self::disk_server_on(config, sync, Arc::new(OsIo))
    }

    /// A server on the disk engine whose files are reached through `io`
    /// (a test's, to make them fail).
    pub fn disk_on(config: ServerConfig, io: Arc<dyn Io>) -> Self {
        Self::disk_server_on(config, SyncPolicy::Batch, io)
    }

    /// The same, under sync policy `sync`.
    pub fn disk_syncing_on(config: ServerConfig, sync: SyncPolicy, io: Arc<dyn Io>) -> Self {
        Self::disk_server_on(config, sync, io)
    }

    fn disk_server_on(config: ServerConfig, sync: SyncPolicy, io: Arc<dyn Io>) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = DiskStore::open(DiskConfig {
            map_size: 1 << 30,
            sync,
            reserve_bytes: 0,
            io,
            ..DiskConfig::new(dir.path())
        })
        .expect("the disk engine opens");
        let config = ServerConfig {
            engine: "disk".into(),
            ..config
        };
        Self::serve(config, Arc::new(store), false, Some(dir))
    }

    fn serve(
        config: ServerConfig,
        store: Arc<dyn Store>,
        evict: bool,
        dir: Option<tempfile::TempDir>,
    ) -> Self {
        let config = ServerConfig {
            port: 0,
            threads: config.threads.min(2),
            ..config
        };
        let handle = kura_server::start(config, store.clone(), evict).expect("server starts");
        let addr = handle.local_addr().expect("a TCP address");
        TestServer {
            addr,
            handle: Some(handle),
            store,
            _dir: dir,
        }
    }

    /// The engine the server serves, for a test to look behind the protocol.
    #[allow(dead_code)]
    pub fn store(&self) -> &dyn Store {
        &*self.store
    }

    pub fn handle(&self) -> &ServerHandle {
        self.handle.as_ref().expect("running")
    }

    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    /// Sends `request` on a fresh connection and reads until `expected`
    /// bytes have arrived (or the server closes or 5 s pass).
    pub fn exchange(&self, request: &[u8], expected_len: usize) -> Vec<u8> {
        let mut stream = self.connect();
        stream.write_all(request).unwrap();
        read_at_least(&mut stream, expected_len)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown();
            handle.wait();
        }
    }
}

/// Reads until `len` bytes arrived, the peer closed, or a 5 s deadline.
pub fn read_at_least(stream: &mut TcpStream, len: usize) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while out.len() < len && Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                break
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("read failed: {e}"),
        }
    }
    out
}

/// Reads until the stream has produced `expected` exactly, then returns it.
pub fn read_exact_reply(stream: &mut TcpStream, expected: &[u8]) -> Vec<u8> {
    read_at_least(stream, expected.len())
}

/// Whether the peer closes the connection within 5 s.
pub fn closes(stream: &mut TcpStream) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
    false
}

pub mod tyrant;

/// Sends `request` on a fresh connection and checks that the reply is
/// `expected`, byte for byte.
pub fn expect_reply(server: &TestServer, request: &[u8], expected: &[u8]) {
    let reply = server.exchange(request, expected.len());
    assert_eq!(
        String::from_utf8_lossy(&reply),
        String::from_utf8_lossy(expected),
        "reply to {:?}",
        String::from_utf8_lossy(request)
    );
}

/// Sends one binary request on `stream`; returns (status, value).
pub fn binary_call(
    stream: &mut TcpStream,
    op: u8,
    key: &[u8],
    extras: &[u8],
    value: &[u8],
) -> (u16, Vec<u8>) {
    let mut request = Vec::new();
    kura_proto::binary::compose_request(&mut request, op, 7, 0, extras, key, value);
    stream.write_all(&request).unwrap();
    let mut header = [0u8; 24];
    stream.read_exact(&mut header).unwrap();
    assert_eq!(header[0], 0x81, "response magic");
    let body_len = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let mut body = vec![0u8; body_len];
    stream.read_exact(&mut body).unwrap();
    let extras_len = usize::from(header[4]);
    let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    (
        u16::from_be_bytes([header[6], header[7]]),
        body[extras_len + key_len..].to_vec(),
    )
}
