//! Tokyo Tyrant's protocol serving a B+ tree database (`--tyrant-db
//! btree:NAME`) over real sockets: keys in byte order, ranges and prefixes,
//! as ttserver answers for a `.tcb` file.

mod support;

use kura_proto::tyrant::{PutMode, Request};
use kura_server::{ServerConfig, TyrantDatabase};
use support::tyrant::{call, connect, iterate, misc, put, stat};
use support::TestServer;

fn server() -> TestServer {
    TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Btree("ordered".into()),
        ..ServerConfig::default()
    })
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
    let seen = iterate(&mut s);
    assert_eq!(seen, ["a1", "a10", "a2", "b", "c"]);
    // The iterator walks the keys from where it is, as ttserver's walks its
    // file: a key written ahead of it is seen, one behind it is not.
    assert_eq!(call(&mut s, &Request::IterInit, 1), [0]);
    assert_eq!(call(&mut s, &Request::IterNext, 7), b"\0\0\0\0\x02a1");
    for key in [&b"a0"[..], b"a11"] {
        let put = Request::Put {
            mode: PutMode::Put,
            key,
            value: b"v",
        };
        assert_eq!(call(&mut s, &put, 1), [0]);
    }
    assert_eq!(iterate(&mut s), ["a10", "a11", "a2", "b", "c"]);
    for key in [&b"a0"[..], b"a11"] {
        assert_eq!(call(&mut s, &Request::Out { key }, 1), [0]);
    }
    // range, as tcadbmisc reads it: from the first key on, at most the
    // second, before the third.
    let (code, items) = misc(&mut s, b"range", &[b"a10", b"0", b"c"]);
    assert_eq!(code, 0);
    assert_eq!(items, [&b"a10"[..], b"a10", b"a2", b"a2", b"b", b"b"]);
    let (_, items) = misc(&mut s, b"range", &[b"a", b"2", b"z"]);
    assert_eq!(items, [&b"a1"[..], b"a1", b"a10", b"a10"]);
    let (_, items) = misc(&mut s, b"range", &[b"b", b"2"]);
    assert_eq!(items, [&b"b"[..], b"b", b"c", b"c"]);
    // The max as tcatoi reads it: its leading digits, or 0; below 1 is none.
    let (_, items) = misc(&mut s, b"range", &[b"a", b" 1x", b"z"]);
    assert_eq!(items, [&b"a1"[..], b"a1"]);
    assert_eq!(misc(&mut s, b"range", &[b"a", b"x", b"z"]).1.len(), 10);
    assert_eq!(misc(&mut s, b"range", &[b"a", b"-1", b"z"]).1.len(), 10);
    let (_, items) = misc(&mut s, b"range", &[]);
    assert_eq!(items.len(), 10);
    let text = stat(&mut s);
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
    let (code, items) = misc(&mut s, b"getlist", &[b"k", b"none"]);
    assert_eq!((code, items), (0, vec![b"k".to_vec(), b"cdef".to_vec()]));
    assert_eq!(call(&mut s, &Request::Rnum, 9), b"\0\0\0\0\0\0\0\0\x02");
    assert_eq!(call(&mut s, &Request::Vanish, 1), [0]);
    assert_eq!(call(&mut s, &Request::Rnum, 9), [0; 9]);
}

/// A range holds at most --max-reply bytes, as getlist: past it, it fails
/// (its first record always goes). fwmkeys stops at its max.
#[test]
fn a_range_past_the_reply_limit_fails_as_getlist_does() {
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Btree("ordered".into()),
        max_item_size: 64 << 10,
        max_reply_bytes: 64 << 10,
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    let value = vec![b'v'; 30_000];
    for key in [&b"k1"[..], b"k2", b"k3"] {
        assert_eq!(call(&mut s, &put(PutMode::Put, key, &value), 1), [0]);
    }
    let keys: Vec<&[u8]> = vec![b"k1", b"k2", b"k3"];
    assert_eq!(misc(&mut s, b"getlist", &keys).0, 1, "90 KB past 64 KiB");
    assert_eq!(misc(&mut s, b"range", &[]).0, 1, "as getlist");
    let (code, items) = misc(&mut s, b"range", &[b"k1", b"0", b"k3"]);
    assert_eq!((code, items.len()), (0, 4), "60 KB fit");
    let (code, items) = misc(&mut s, b"range", &[b"", b"1", b""]);
    assert_eq!(
        (code, items.len()),
        (0, 0),
        "an empty end ends before the start"
    );
    assert_eq!(
        call(
            &mut s,
            &Request::Fwmkeys {
                prefix: b"k",
                max: 2
            },
            5 + 2 * 6
        ),
        b"\0\0\0\0\x02\0\0\0\x02k1\0\0\0\x02k2"
    );
}

#[test]
fn a_hash_database_has_no_ranges() {
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    assert_eq!(misc(&mut s, b"range", &[]), (1, vec![]));
}
