//! The peers' parsers against arbitrary and near-valid bytes (proptest):
//! Tokyo Tyrant's binary and HTTP protocols, HandlerSocket, the update-log
//! bodies a Tyrant follower redoes, and kura's replication frames. None
//! panics or claims more bytes than it was given; a whole request is read
//! the same however its bytes are split across reads; what kura's tools
//! compose reads back as it was.

use kura_proto::tyrant::{self, PutMode, Request};
use kura_proto::{handlersocket, replication, tyrant_http, tyrant_repl};
use proptest::prelude::*;

const MAX_ARG: usize = 4096;

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

/// The owned parts of a Tokyo Tyrant request, built into a borrowed
/// [`Request`] by [`OwnedRequest::request`].
#[derive(Debug, Clone)]
struct OwnedRequest {
    kind: u8,
    key: Vec<u8>,
    value: Vec<u8>,
    list: Vec<Vec<u8>>,
    number: u32,
    wide: u64,
}

impl OwnedRequest {
    fn request(&self) -> Request<'_> {
        let (key, value) = (&self.key[..], &self.value[..]);
        let mode = [PutMode::Put, PutMode::Keep, PutMode::Cat, PutMode::NoReply];
        match self.kind % 20 {
            0..=3 => Request::Put {
                mode: mode[self.kind as usize % 4],
                key,
                value,
            },
            4 => Request::PutShl {
                key,
                value,
                width: self.number & 0x7fff_ffff,
            },
            5 => Request::Out { key },
            6 => Request::Get { key },
            7 => Request::Vsiz { key },
            8 => Request::Mget {
                keys: self.list.iter().map(Vec::as_slice).collect(),
            },
            9 => Request::Fwmkeys {
                prefix: key,
                max: self.number as i32,
            },
            10 => Request::AddInt {
                key,
                delta: self.number as i32,
            },
            11 => Request::Ext {
                name: &key[..key.len().min(tyrant::MAX_NAME)],
                opts: self.number,
                key: value,
                value: key,
            },
            12 => Request::Misc {
                name: &key[..key.len().min(tyrant::MAX_NAME)],
                opts: self.number,
                args: self.list.iter().map(Vec::as_slice).collect(),
            },
            13 => Request::Copy { path: key },
            14 => Request::Optimize { params: key },
            15 => Request::Restore {
                path: key,
                micros: self.wide.max(1),
                opts: self.number,
            },
            // ttserver's ranges: a time from 1, a server id from 1 to 2^31 - 1.
            16 => Request::Repl {
                micros: self.wide.max(1),
                server_id: (self.number & 0x7fff_ffff).max(1),
            },
            17 => Request::Vanish,
            18 => Request::IterNext,
            _ => Request::Rnum,
        }
    }
}

fn tyrant_request() -> impl Strategy<Value = OwnedRequest> {
    (
        any::<u8>(),
        bytes(64),
        bytes(256),
        prop::collection::vec(bytes(32), 0..6),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(kind, key, value, list, number, wide)| OwnedRequest {
            kind,
            key,
            value,
            list,
            number,
            wide,
        })
}

/// A composed request, sometimes with one byte changed: the length fields
/// then often claim more or less than follows.
fn near_tyrant() -> impl Strategy<Value = Vec<u8>> {
    (tyrant_request(), any::<Option<(prop::sample::Index, u8)>>()).prop_map(|(owned, flip)| {
        let mut out = Vec::new();
        tyrant::compose(&mut out, &owned.request());
        if let Some((at, byte)) = flip {
            let at = at.index(out.len());
            out[at] = byte;
        }
        out
    })
}

fn tyrant_claims(buf: &[u8]) -> Option<usize> {
    match tyrant::parse(buf, MAX_ARG) {
        tyrant::Parse::Done { consumed, .. } => {
            assert!(consumed > 0, "an empty request");
            Some(consumed)
        }
        // The connection closes: everything is taken.
        tyrant::Parse::Close(_) => Some(buf.len()),
        tyrant::Parse::Incomplete { needed } => {
            assert!(needed > buf.len(), "needs {needed} of {}", buf.len());
            None
        }
    }
}

/// Requests in the shape of Tokyo Tyrant's HTTP: a method, a key path,
/// headers among those the parser reads, and a body.
fn near_http() -> impl Strategy<Value = Vec<u8>> {
    let method = prop::sample::select(vec!["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS"]);
    let header = prop::sample::select(vec![
        "Content-Length",
        "X-TT-PDMODE",
        "Connection",
        "Host",
        "Transfer-Encoding",
    ]);
    (
        method,
        "[a-z%0-9/]{0,12}",
        prop::collection::vec((header, "[0-9a-z -]{0,8}"), 0..4),
        bytes(64),
        any::<bool>(),
    )
        .prop_map(|(method, path, headers, body, honest_length)| {
            let mut out = format!("{method} /{path} HTTP/1.1\r\n").into_bytes();
            for (name, value) in headers {
                out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
            if honest_length {
                out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(&body);
            out
        })
}

fn http_claims(buf: &[u8]) -> Option<usize> {
    match tyrant_http::parse(buf, MAX_ARG) {
        tyrant_http::Parse::Done { consumed, .. } => Some(consumed),
        tyrant_http::Parse::Bad(status) => {
            assert!((400..600).contains(&status), "status {status}");
            Some(buf.len())
        }
        tyrant_http::Parse::Incomplete { needed } => {
            // What it awaits is more than it has.
            assert!(
                needed == 0 || needed > buf.len(),
                "{needed} of {}",
                buf.len()
            );
            None
        }
    }
}

/// Lines in the shape of HandlerSocket's: an operation and TAB-separated
/// tokens, some escaped.
fn near_handlersocket() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        "P",
        "A",
        "auth",
        "1",
        "0",
        "=",
        ">=",
        "<",
        "+",
        "U",
        "D",
        "U?",
        "+?",
        "F",
        "W",
        "\x01",
        "\x10",
        "",
        "-1",
        "99999999999",
    ]);
    (prop::collection::vec(token, 0..12), any::<bool>()).prop_map(|(tokens, crlf)| {
        let mut line = tokens.join("\t").into_bytes();
        line.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        line
    })
}

fn handlersocket_claims(buf: &[u8]) -> Option<usize> {
    handlersocket::parse(buf).map(|(_, consumed)| consumed)
}

/// A request read whole is read the same when its bytes came in two parts:
/// every shorter prefix asks for more rather than deciding otherwise.
fn split_reads_agree(buf: &[u8], claims: fn(&[u8]) -> Option<usize>) {
    let Some(whole) = claims(buf) else {
        return;
    };
    assert!(whole <= buf.len(), "claimed {whole} of {}", buf.len());
    for cut in 1..whole.min(buf.len()) {
        match claims(&buf[..cut]) {
            None => {}
            // A prefix may already show the request is bad (a wrong magic
            // or command byte, an oversized field): closing early is right.
            Some(claimed) if claimed == cut && claims(buf) == Some(buf.len()) => {}
            Some(claimed) => panic!("the first {cut} of {whole} bytes were decided on ({claimed})"),
        }
    }
}

proptest! {
    #[test]
    fn tyrant_parsing_arbitrary_bytes_claims_at_most_what_it_got(buf in bytes(512)) {
        if let Some(claimed) = tyrant_claims(&buf) {
            prop_assert!(claimed <= buf.len());
        }
    }

    #[test]
    fn tyrant_requests_read_the_same_however_they_are_split(buf in near_tyrant()) {
        split_reads_agree(&buf, tyrant_claims);
    }

    #[test]
    fn tyrant_requests_read_back_as_composed(owned in tyrant_request()) {
        let request = owned.request();
        let mut out = Vec::new();
        tyrant::compose(&mut out, &request);
        match tyrant::parse(&out, MAX_ARG) {
            tyrant::Parse::Done { request: read, consumed } => {
                prop_assert_eq!(consumed, out.len());
                prop_assert_eq!(read, request);
            }
            other => prop_assert!(false, "{:?} read as {:?}", request, other),
        }
    }

    #[test]
    fn tyrant_http_parsing_arbitrary_bytes_claims_at_most_what_it_got(buf in bytes(512)) {
        if let Some(claimed) = http_claims(&buf) {
            prop_assert!(claimed <= buf.len());
        }
    }

    #[test]
    fn tyrant_http_requests_read_the_same_however_they_are_split(buf in near_http()) {
        split_reads_agree(&buf, http_claims);
    }

    #[test]
    fn handlersocket_parsing_arbitrary_bytes_claims_at_most_what_it_got(buf in bytes(512)) {
        if let Some(claimed) = handlersocket_claims(&buf) {
            prop_assert!(claimed <= buf.len());
            prop_assert_eq!(buf[claimed - 1], b'\n');
        }
    }

    #[test]
    fn handlersocket_requests_read_the_same_however_they_are_split(buf in near_handlersocket()) {
        split_reads_agree(&buf, handlersocket_claims);
    }

    #[test]
    fn tyrant_log_bodies_of_arbitrary_bytes_are_refused_or_read_within_them(body in bytes(256)) {
        // Every part borrows from `body`: reading one cannot reach past it.
        if let Some(change) = tyrant_repl::parse(&body) {
            let within = |part: &[u8]| {
                let range = body.as_ptr_range();
                part.is_empty() || (range.contains(&part.as_ptr()) && part.len() <= body.len())
            };
            match change {
                tyrant_repl::Change::Put { key, value } => prop_assert!(within(key) && within(value)),
                tyrant_repl::Change::Out { key } => prop_assert!(within(key)),
                tyrant_repl::Change::Misc { name, args } => {
                    prop_assert!(within(name) && args.iter().all(|arg| within(arg)));
                }
                tyrant_repl::Change::Vanish => {}
            }
        }
    }

    #[test]
    fn tyrant_log_bodies_read_back_as_written(key in bytes(64), value in bytes(256), result in any::<u8>()) {
        let mut body = tyrant_repl::put(&key, &value);
        body.push(result);
        prop_assert_eq!(
            tyrant_repl::parse(&body),
            Some(tyrant_repl::Change::Put { key: &key, value: &value })
        );
    }

    #[test]
    fn replication_frames_of_arbitrary_bytes_are_refused_or_read(head in any::<[u8; replication::FRAME_HEAD]>(), payload in bytes(256)) {
        if let Ok((kind, len)) = replication::frame_head(&head, 1 << 20) {
            prop_assert!(len <= 1 << 20);
            let _ = replication::frame(kind, &payload);
        }
        let _ = replication::indexes(&payload);
        if let Ok(ack) = <[u8; replication::ACK_LEN]>::try_from(&payload[..payload.len().min(replication::ACK_LEN)]) {
            if let Some(lsn) = replication::parse_ack(&ack) {
                prop_assert_eq!(replication::ack(lsn), ack);
            }
        }
    }
}
