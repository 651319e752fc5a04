//! Replays the wire transcripts in `tests/transcripts/*.t` against kura.
//!
//! The expected replies were recorded from Debian's memcached 1.6.18 by
//! `tests/transcripts/record.py`; `{n}` stands for any number (CAS values).
//! Each file runs against a fresh server, each case on a fresh connection.
//! Set KURA_TRANSCRIPT_ADDR=host:port to replay them against another server.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use regex::bytes::Regex;

struct Case {
    line: usize,
    send: Vec<u8>,
    recv: Vec<u8>,
    closed: bool,
}

fn unescape(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'\\' => out.push(b'\\'),
                b'\'' => out.push(b'\''),
                b'x' => {
                    let hex = std::str::from_utf8(&bytes[i + 2..i + 4]).expect("hex escape");
                    out.push(u8::from_str_radix(hex, 16).expect("hex escape"));
                    i += 2;
                }
                other => panic!("unknown escape \\{}", other as char),
            }
            i += 2;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn parse(path: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(path).expect("read transcript");
    let mut cases: Vec<Case> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("send: ") {
            cases.push(Case {
                line: number + 1,
                send: unescape(rest),
                recv: Vec::new(),
                closed: false,
            });
        } else if let Some(rest) = line.strip_prefix("recv: ") {
            cases.last_mut().expect("recv after send").recv = unescape(rest);
        } else if line == "closed: yes" {
            cases.last_mut().expect("closed after send").closed = true;
        }
    }
    cases
}

/// The expected reply as a pattern: literal bytes, with `{n}` for any number.
fn pattern(expected: &[u8]) -> Regex {
    let mut source = String::from("(?s-u)^");
    let text = expected;
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(b"{n}") {
            source.push_str(r"-?\d+");
            i += 3;
        } else {
            source.push_str(&format!(r"\x{:02x}", text[i]));
            i += 1;
        }
    }
    source.push('$');
    Regex::new(&source).expect("pattern")
}

fn run_case(addr: std::net::SocketAddr, case: &Case) -> (Vec<u8>, bool) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).unwrap();
    stream.write_all(&case.send).unwrap();
    let expected = pattern(&case.recv);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut closed = false;
    // Read until the reply matches; then, if a close is expected, wait for it;
    // otherwise linger briefly to catch any unexpected extra bytes.
    loop {
        let matched = expected.is_match(&got);
        if matched && !case.closed {
            stream
                .set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
        } else {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            stream.set_read_timeout(Some(left)).unwrap();
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                closed = true;
                break;
            }
            Err(_) => break,
        }
    }
    (got, closed)
}

fn transcripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/transcripts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("transcripts folder")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "t"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no transcripts in {}", dir.display());
    files
}

#[test]
fn transcripts_match_memcached_on_the_memory_engine() {
    replay_all(support::TestServer::start);
}

#[test]
fn transcripts_match_memcached_on_the_disk_engine() {
    replay_all(support::TestServer::disk);
}

fn replay_all(start: fn() -> support::TestServer) {
    let external = std::env::var("KURA_TRANSCRIPT_ADDR").ok();
    let mut failures = Vec::new();
    let mut count = 0;
    for file in transcripts() {
        let server = external.is_none().then(start);
        let addr = match &external {
            Some(addr) => addr.parse().expect("KURA_TRANSCRIPT_ADDR is host:port"),
            None => server.as_ref().unwrap().addr,
        };
        for case in parse(&file) {
            count += 1;
            let (got, closed) = run_case(addr, &case);
            if !pattern(&case.recv).is_match(&got) || closed != case.closed {
                failures.push(format!(
                    "{}:{}\n  sent     {:?}\n  expected {:?}{}\n  got      {:?}{}",
                    file.file_name().unwrap().to_string_lossy(),
                    case.line,
                    String::from_utf8_lossy(&case.send),
                    String::from_utf8_lossy(&case.recv),
                    if case.closed { " (then close)" } else { "" },
                    String::from_utf8_lossy(&got),
                    if closed { " (closed)" } else { "" },
                ));
            }
        }
    }
    assert!(count >= 80, "only {count} cases ran");
    assert!(
        failures.is_empty(),
        "{} of {count} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
