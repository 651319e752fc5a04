//! A Tokyo Tyrant client for the socket tests: one request, its reply.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use kura_proto::tyrant::{compose, PutMode, Request};
use kura_server::ServerConfig;
use kura_store::MemoryConfig;

use super::TestServer;

/// A memory engine that serves Tokyo Tyrant's protocols on a port of its
/// own.
#[allow(dead_code)]
pub fn memory_server() -> TestServer {
    TestServer::with(
        ServerConfig {
            tyrant_port: Some(0),
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    )
}

/// A connection to the server's tyrant port.
pub fn connect(server: &TestServer) -> TcpStream {
    let stream = TcpStream::connect(server.handle().tyrant_addr().expect("a tyrant port")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

pub fn send(stream: &mut TcpStream, request: &Request<'_>) {
    let mut bytes = Vec::new();
    compose(&mut bytes, request);
    stream.write_all(&bytes).unwrap();
}

pub fn read_n(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut bytes = vec![0; n];
    stream.read_exact(&mut bytes).unwrap();
    bytes
}

pub fn read_u32(stream: &mut TcpStream) -> usize {
    u32::from_be_bytes(read_n(stream, 4).try_into().unwrap()) as usize
}

/// Sends `request` and reads exactly `reply_len` bytes back.
pub fn call(stream: &mut TcpStream, request: &Request<'_>, reply_len: usize) -> Vec<u8> {
    send(stream, request);
    read_n(stream, reply_len)
}

/// A `misc` call: its status and its list.
pub fn misc(stream: &mut TcpStream, name: &[u8], args: &[&[u8]]) -> (u8, Vec<Vec<u8>>) {
    send(
        stream,
        &Request::Misc {
            name,
            opts: 0,
            args: args.to_vec(),
        },
    );
    let code = read_n(stream, 1)[0];
    let count = read_u32(stream);
    let items = (0..count)
        .map(|_| {
            let len = read_u32(stream);
            read_n(stream, len)
        })
        .collect();
    (code, items)
}

pub fn put<'a>(mode: PutMode, key: &'a [u8], value: &'a [u8]) -> Request<'a> {
    Request::Put { mode, key, value }
}

/// `iternext` until it fails: the keys the iterator walks, in order.
pub fn iterate(stream: &mut TcpStream) -> Vec<String> {
    let mut keys = Vec::new();
    loop {
        send(stream, &Request::IterNext);
        if read_n(stream, 1)[0] == 1 {
            return keys;
        }
        let len = read_u32(stream);
        keys.push(String::from_utf8(read_n(stream, len)).unwrap());
    }
}

/// `stat`'s text; the status must be success.
pub fn stat(stream: &mut TcpStream) -> String {
    send(stream, &Request::Stat);
    assert_eq!(read_n(stream, 1), [0], "stat failed");
    let len = read_u32(stream);
    String::from_utf8(read_n(stream, len)).unwrap()
}
