//! Tokyo Tyrant's HTTP interface on the tyrant port, over real sockets:
//! GET, HEAD, PUT (with X-TT-PDMODE), DELETE, OPTIONS, keep-alive and close, on the
//! same port as the binary and memcached protocols.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;

use kura_server::{ServerConfig, TyrantDatabase};
use kura_store::MemoryConfig;
use support::tyrant::{connect, memory_server};
use support::TestServer;

/// Reads one HTTP reply's head, up to its blank line.
fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// Reads one HTTP reply: its status, and its body (by Content-Length).
fn read_reply(stream: &mut TcpStream, head_only: bool) -> (u16, Vec<u8>) {
    let head = read_head(stream);
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Length: "))
        .unwrap()
        .parse()
        .unwrap();
    let mut body = vec![0; if head_only { 0 } else { length }];
    stream.read_exact(&mut body).unwrap();
    (status, body)
}

fn http(stream: &mut TcpStream, request: &str) -> (u16, Vec<u8>) {
    stream.write_all(request.as_bytes()).unwrap();
    read_reply(stream, request.starts_with("HEAD"))
}

#[test]
fn records_are_read_written_and_removed_over_http() {
    let server = memory_server();
    let mut s = connect(&server);
    assert_eq!(http(&mut s, "GET /nope HTTP/1.1\r\n\r\n"), (404, vec![]));
    assert_eq!(
        http(
            &mut s,
            "PUT /a%20key HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
        ),
        (201, vec![])
    );
    assert_eq!(
        http(&mut s, "GET /a%20key HTTP/1.1\r\n\r\n"),
        (200, b"hello".to_vec())
    );
    assert_eq!(http(&mut s, "HEAD /a%20key HTTP/1.1\r\n\r\n").0, 200);
    assert_eq!(
        http(
            &mut s,
            "PUT /a%20key HTTP/1.1\r\nX-TT-PDMODE: 1\r\nContent-Length: 1\r\n\r\nx"
        ),
        (409, vec![])
    );
    assert_eq!(
        http(
            &mut s,
            "PUT /a%20key HTTP/1.1\r\nX-TT-PDMODE: 2\r\nContent-Length: 3\r\n\r\n!!!"
        ),
        (201, vec![])
    );
    // The same record through memcached's text protocol, on the same connection.
    s.write_all(b"get a\r\n").unwrap();
    let mut text = [0; 5];
    s.read_exact(&mut text).unwrap();
    assert_eq!(&text, b"END\r\n");
    assert_eq!(
        http(&mut s, "GET /a+key HTTP/1.1\r\n\r\n"),
        (200, b"hello!!!".to_vec())
    );
    assert_eq!(
        http(&mut s, "DELETE /a%20key HTTP/1.1\r\n\r\n"),
        (200, vec![])
    );
    assert_eq!(
        http(&mut s, "DELETE /a%20key HTTP/1.1\r\n\r\n"),
        (404, vec![])
    );
    assert_eq!(http(&mut s, "POST /a HTTP/1.1\r\n\r\n"), (501, vec![]));
    // OPTIONS names the methods served; an absolute URI names its path.
    s.write_all(b"OPTIONS / HTTP/1.1\r\n\r\n").unwrap();
    let head = read_head(&mut s);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("\r\nAllow: OPTIONS, GET, HEAD, PUT, DELETE\r\n"),
        "{head}"
    );
    assert_eq!(
        http(
            &mut s,
            "PUT http://localhost:1978/abs HTTP/1.1\r\nContent-Length: 1\r\n\r\nA"
        ),
        (201, vec![])
    );
    assert_eq!(
        http(&mut s, "GET /abs HTTP/1.1\r\n\r\n"),
        (200, b"A".to_vec())
    );
    // Pipelined requests are answered in order.
    s.write_all(b"PUT /p HTTP/1.1\r\nContent-Length: 1\r\n\r\n1GET /p HTTP/1.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_reply(&mut s, false), (201, vec![]));
    assert_eq!(read_reply(&mut s, false), (200, b"1".to_vec()));
    // HTTP/1.0 closes after its reply.
    assert_eq!(
        http(&mut s, "GET /p HTTP/1.0\r\n\r\n"),
        (200, b"1".to_vec())
    );
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
    // A malformed request is answered 400 and closed.
    let mut s = connect(&server);
    assert_eq!(
        http(&mut s, "GET /k HTTP/1.1\r\nContent-Length: x\r\n\r\n").0,
        400
    );
}

#[test]
fn a_table_record_over_http_is_its_columns() {
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Table("t".into()),
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    assert_eq!(
        http(
            &mut s,
            "PUT /k1 HTTP/1.1\r\nContent-Length: 12\r\n\r\nname\0Bob\0a\x001"
        ),
        (201, vec![])
    );
    assert_eq!(
        http(&mut s, "GET /k1 HTTP/1.1\r\n\r\n"),
        (200, b"name\0Bob\0a\x001".to_vec())
    );
    assert_eq!(
        http(
            &mut s,
            "PUT /k1 HTTP/1.1\r\nX-TT-PDMODE: 1\r\nContent-Length: 3\r\n\r\na\x002"
        ),
        (409, vec![])
    );
    assert_eq!(http(&mut s, "DELETE /k1 HTTP/1.1\r\n\r\n"), (200, vec![]));
    assert_eq!(http(&mut s, "GET /k1 HTTP/1.1\r\n\r\n"), (404, vec![]));
    // Without a key, a new one, as ttserver's put on a table gives.
    assert_eq!(
        http(&mut s, "PUT / HTTP/1.1\r\nContent-Length: 6\r\n\r\nname\0x"),
        (201, vec![])
    );
    assert_eq!(
        http(&mut s, "GET /1 HTTP/1.1\r\n\r\n"),
        (200, b"name\0x".to_vec())
    );
}

/// A request head sent a few bytes at a time is read whole; one longer
/// than the cap on a head is answered 431 and the connection closed.
#[test]
fn a_trickled_head_is_read_whole_and_an_endless_one_refused() {
    let server = memory_server();
    let mut s = connect(&server);
    // The longest key, and a head of 5 KB.
    let key = "k".repeat(250);
    let padding = "v".repeat(5000);
    let request =
        format!("PUT /{key} HTTP/1.1\r\nX-Padding: {padding}\r\nContent-Length: 2\r\n\r\nok");
    for chunk in request.as_bytes().chunks(7) {
        s.write_all(chunk).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    assert_eq!(read_reply(&mut s, false), (201, vec![]));
    assert_eq!(
        http(&mut s, &format!("GET /{key} HTTP/1.1\r\n\r\n")),
        (200, b"ok".to_vec())
    );
    let mut endless = connect(&server);
    let mut head = b"GET /".to_vec();
    head.resize(kura_proto::tyrant_http::MAX_HEAD + 1, b'k');
    // The server may answer and close before it has read it all.
    let _ = endless.write_all(&head);
    assert_eq!(read_reply(&mut endless, false).0, 431);
}

/// A concatenation that would grow the value past the item size limit is
/// 413, as a put of that size is, not a server error.
#[test]
fn a_concatenation_past_the_item_size_limit_is_413() {
    let server = TestServer::with(
        ServerConfig {
            tyrant_port: Some(0),
            max_item_size: 1024,
            ..ServerConfig::default()
        },
        MemoryConfig {
            max_value_bytes: 1024,
            ..MemoryConfig::default()
        },
    );
    let mut s = connect(&server);
    let put = |s: &mut TcpStream, mode: &str, body: &str| {
        http(
            s,
            &format!(
                "PUT /k HTTP/1.1\r\n{mode}Content-Length: {}\r\n\r\n{body}",
                body.len()
            ),
        )
        .0
    };
    assert_eq!(put(&mut s, "", &"a".repeat(1000)), 201);
    assert_eq!(put(&mut s, "X-TT-PDMODE: 2\r\n", &"b".repeat(24)), 201);
    assert_eq!(put(&mut s, "X-TT-PDMODE: 2\r\n", "c"), 413);
    assert_eq!(http(&mut s, "GET /k HTTP/1.1\r\n\r\n").1.len(), 1024);
}
