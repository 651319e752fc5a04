//! Tokyo Tyrant's protocol serving a B+ tree database (`--tyrant-db
//! btree:NAME`) over real sockets: keys in byte order, ranges and prefixes,
//! as ttserver answers for a `.tcb` file.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use kura_proto::tyrant::{compose, PutMode, Request};
use kura_server::{ServerConfig, TyrantDatabase};
use support::TestServer;

fn server() -> TestServer {
    TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Btree("ordered".into()),
        ..ServerConfig::default()
    })
}

fn connect(server: &TestServer) -> TcpStream {
    let stream = TcpStream::connect(server.handle().tyrant_addr().expect("a tyrant port")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

fn call(stream: &mut TcpStream, request: &Request<'_>, reply_len: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    compose(&mut bytes, request);
    stream.write_all(&bytes).unwrap();
    let mut reply = vec![0; reply_len];
    stream.read_exact(&mut reply).unwrap();
    reply
}

/// A `misc` call's status and list.
fn misc(stream: &mut TcpStream, name: &'static [u8], args: Vec<&[u8]>) -> (u8, Vec<Vec<u8>>) {
    let mut bytes = Vec::new();
    compose(
        &mut bytes,
        &Request::Misc {
            name,
            opts: 0,
            args,
        },
    );
    stream.write_all(&bytes).unwrap();
    let mut head = [0; 5];
    stream.read_exact(&mut head).unwrap();
    let count = u32::from_be_bytes(head[1..].try_into().unwrap());
    let items = (0..count)
        .map(|_| {
            let mut len = [0; 4];
            stream.read_exact(&mut len).unwrap();
            let mut item = vec![0; u32::from_be_bytes(len) as usize];
            stream.read_exact(&mut item).unwrap();
            item
        })
        .collect();
    (head[0], items)
}

fn put<'a>(mode: PutMode, key: &'a [u8], value: &'a [u8]) -> Request<'a> {
    Request::Put { mode, key, value }
}

#[test]
fn keys_come_in_byte_order_with_prefixes_and_ranges() {
    let server = server();
    let mut s = connect(&server);
    for key in [&b"b"[..], b"a2", b"c", b"a1", b"a10"] {
        assert_eq!(call(&mut s, &put(PutMode::Put, key, key), 1), [0]);
    }
    assert_eq!(
        call(&mut s, &Request::Get { key: b"a10" }, 8),
        b"\0\0\0\0\x03a10"
    );
    assert_eq!(
        call(
            &mut s,
            &Request::Fwmkeys {
                prefix: b"a",
                max: 2
            },
            5 + 2 * 4 + 5
        ),
        b"\0\0\0\0\x02\0\0\0\x02a1\0\0\0\x03a10"
    );
    assert_eq!(call(&mut s, &Request::IterInit, 1), [0]);
    let mut seen = Vec::new();
    loop {
        let mut bytes = Vec::new();
        compose(&mut bytes, &Request::IterNext);
        s.write_all(&bytes).unwrap();
        let mut code = [0];
        s.read_exact(&mut code).unwrap();
        if code[0] == 1 {
            break;
        }
        let mut len = [0; 4];
        s.read_exact(&mut len).unwrap();
        let mut key = vec![0; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut key).unwrap();
        seen.push(String::from_utf8(key).unwrap());
    }
    assert_eq!(seen, ["a1", "a10", "a2", "b", "c"]);
    // range: from the first key on, before the second, at most the third.
    let (code, items) = misc(&mut s, b"range", vec![b"a10", b"c"]);
    assert_eq!(code, 0);
    assert_eq!(items, [&b"a10"[..], b"a10", b"a2", b"a2", b"b", b"b"]);
    let (_, items) = misc(&mut s, b"range", vec![b"a", b"z", b"2"]);
    assert_eq!(items, [&b"a1"[..], b"a1", b"a10", b"a10"]);
    let (_, items) = misc(&mut s, b"range", vec![]);
    assert_eq!(items.len(), 10);
    let mut stat = Vec::new();
    compose(&mut stat, &Request::Stat);
    s.write_all(&stat).unwrap();
    let mut head = [0; 5];
    s.read_exact(&mut head).unwrap();
    let mut text = vec![0; u32::from_be_bytes(head[1..].try_into().unwrap()) as usize];
    s.read_exact(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.lines().any(|line| line == "type\tB+ tree"), "{text}");
    assert!(text.lines().any(|line| line == "rnum\t5"), "{text}");
}

#[test]
fn values_are_bytes_that_append_shift_and_count() {
    let server = server();
    let mut s = connect(&server);
    assert_eq!(call(&mut s, &put(PutMode::Keep, b"k", b"ab"), 1), [0]);
    assert_eq!(call(&mut s, &put(PutMode::Keep, b"k", b"zz"), 1), [1]);
    assert_eq!(call(&mut s, &put(PutMode::Cat, b"k", b"cd"), 1), [0]);
    assert_eq!(call(&mut s, &put(PutMode::Cat, b"new", b"x"), 1), [0]);
    let shl = Request::PutShl {
        key: b"k",
        value: b"ef",
        width: 4,
    };
    assert_eq!(call(&mut s, &shl, 1), [0]);
    assert_eq!(
        call(&mut s, &Request::Get { key: b"k" }, 9),
        b"\0\0\0\0\x04cdef"
    );
    assert_eq!(
        call(&mut s, &Request::Vsiz { key: b"new" }, 5),
        b"\0\0\0\0\x01"
    );
    assert_eq!(
        call(
            &mut s,
            &Request::AddInt {
                key: b"n",
                delta: 7
            },
            5
        ),
        b"\0\0\0\0\x07"
    );
    assert_eq!(
        call(
            &mut s,
            &Request::AddInt {
                key: b"n",
                delta: -8
            },
            5
        ),
        b"\0\xff\xff\xff\xff"
    );
    // A value that is not 4 bytes is not a counter.
    assert_eq!(
        call(
            &mut s,
            &Request::AddInt {
                key: b"new",
                delta: 1
            },
            1
        ),
        [1]
    );
    assert_eq!(call(&mut s, &Request::Out { key: b"new" }, 1), [0]);
    assert_eq!(call(&mut s, &Request::Out { key: b"new" }, 1), [1]);
    let (code, items) = misc(&mut s, b"getlist", vec![b"k", b"none"]);
    assert_eq!((code, items), (0, vec![b"k".to_vec(), b"cdef".to_vec()]));
    assert_eq!(call(&mut s, &Request::Rnum, 9), b"\0\0\0\0\0\0\0\0\x02");
    assert_eq!(call(&mut s, &Request::Vanish, 1), [0]);
    assert_eq!(call(&mut s, &Request::Rnum, 9), [0; 9]);
}

#[test]
fn a_hash_database_has_no_ranges() {
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    assert_eq!(misc(&mut s, b"range", vec![]), (1, vec![]));
}
