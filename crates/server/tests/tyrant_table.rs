//! Tokyo Tyrant's protocol serving a table (`--tyrant-db table:NAME`) over
//! real sockets: records as `name\0value\0…`, and every table function of
//! `misc`, queries included, as ttserver 1.1.41 answers them.

mod support;

use std::net::TcpStream;

use kura_proto::tyrant::{PutMode, Request};
use kura_server::{ServerConfig, TyrantDatabase};
use support::tyrant::{call, connect, misc, put, read_n, send, stat};
use support::TestServer;

fn server() -> TestServer {
    TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Table("users".into()),
        ..ServerConfig::default()
    })
}

fn strings(items: &[Vec<u8>]) -> Vec<String> {
    items
        .iter()
        .map(|item| String::from_utf8_lossy(item).into_owned())
        .collect()
}

#[test]
fn records_are_columns_and_the_binary_commands_answer_as_ttserver_does() {
    let server = server();
    let mut s = connect(&server);
    assert_eq!(
        call(
            &mut s,
            &put(PutMode::Put, b"k1", b"name\0Bob\0age\x0030"),
            1
        ),
        [0]
    );
    assert_eq!(
        call(&mut s, &Request::Get { key: b"k1" }, 5 + 15),
        b"\0\0\0\0\x0fname\0Bob\0age\x0030"
    );
    assert_eq!(
        call(&mut s, &Request::Vsiz { key: b"k1" }, 5),
        b"\0\0\0\0\x0f"
    );
    // putkeep refuses a row that is there; putcat adds missing columns.
    assert_eq!(
        call(&mut s, &put(PutMode::Keep, b"k1", b"name\0Eve"), 1),
        [1]
    );
    assert_eq!(
        call(
            &mut s,
            &put(PutMode::Cat, b"k1", b"name\0Eve\0city\0Kyoto"),
            1
        ),
        [0]
    );
    assert_eq!(
        call(&mut s, &Request::Get { key: b"k1" }, 5 + 26),
        b"\0\0\0\0\x1aname\0Bob\0age\x0030\0city\0Kyoto"
    );
    // A column named "" (the primary key's name) is refused.
    assert_eq!(call(&mut s, &put(PutMode::Put, b"k2", b"\0x"), 1), [1]);
    // An empty key takes a new unique id.
    assert_eq!(call(&mut s, &put(PutMode::Put, b"", b"name\0Al"), 1), [0]);
    assert_eq!(
        call(&mut s, &Request::Get { key: b"1" }, 5 + 7),
        b"\0\0\0\0\x07name\0Al"
    );
    assert_eq!(call(&mut s, &Request::Rnum, 9), b"\0\0\0\0\0\0\0\0\x02");
    send(
        &mut s,
        &Request::Mget {
            keys: vec![b"1", b"nope", b"k1"],
        },
    );
    assert_eq!(read_n(&mut s, 5), b"\0\0\0\0\x02");
    assert_eq!(read_n(&mut s, 8 + 1 + 7), b"\0\0\0\x01\0\0\0\x071name\0Al");
    assert_eq!(
        read_n(&mut s, 8 + 2 + 26),
        &b"\0\0\0\x02\0\0\0\x1ak1name\0Bob\0age\x0030\0city\0Kyoto"[..]
    );
    // addint keeps its sum in the column _num.
    assert_eq!(
        call(
            &mut s,
            &Request::AddInt {
                key: b"n",
                delta: 3
            },
            5
        ),
        b"\0\0\0\0\x03"
    );
    assert_eq!(
        call(
            &mut s,
            &Request::AddInt {
                key: b"n",
                delta: 4
            },
            5
        ),
        b"\0\0\0\0\x07"
    );
    assert_eq!(
        call(&mut s, &Request::Get { key: b"n" }, 5 + 6),
        b"\0\0\0\0\x06_num\x007"
    );
    // Both add as doubles, as Tokyo Cabinet's tctdbaddnumber does: an
    // addint keeps a fraction, and a sum past int's range is stored whole
    // (the reply is C's (int) of it: INT_MIN on x86).
    // `_num` set to `start`, then one added: the reply, and the row's value.
    let add_one_to = |s: &mut TcpStream, start: &[u8]| {
        let row = [&b"_num\0"[..], start].concat();
        assert_eq!(call(s, &put(PutMode::Put, b"n", &row), 1), [0]);
        let add = Request::AddInt {
            key: b"n",
            delta: 1,
        };
        let reply = call(s, &add, 5);
        let got = call(s, &Request::Get { key: b"n" }, 5);
        let len = u32::from_be_bytes(got[1..5].try_into().unwrap()) as usize;
        (reply, read_n(s, len))
    };
    let (reply, row) = add_one_to(&mut s, b"2.5");
    assert_eq!(
        (&reply[..], &row[..]),
        (&b"\0\0\0\0\x03"[..], &b"_num\x003.5"[..])
    );
    let (reply, row) = add_one_to(&mut s, b"3000000000");
    assert_eq!(
        (&reply[..], &row[..]),
        (&b"\0\x80\0\0\0"[..], &b"_num\x003000000001"[..])
    );
    assert_eq!(call(&mut s, &Request::Out { key: b"n" }, 1), [0]);
    assert_eq!(call(&mut s, &Request::Out { key: b"n" }, 1), [1]);
    // stat says what the database is.
    let text = stat(&mut s);
    assert!(text.lines().any(|line| line == "type\ttable"), "{text}");
    assert!(text.lines().any(|line| line == "rnum\t2"), "{text}");
    // The iterator and fwmkeys walk primary keys in order.
    assert_eq!(call(&mut s, &Request::IterInit, 1), [0]);
    assert_eq!(call(&mut s, &Request::IterNext, 6), b"\0\0\0\0\x011");
    assert_eq!(call(&mut s, &Request::IterNext, 7), b"\0\0\0\0\x02k1");
    assert_eq!(call(&mut s, &Request::IterNext, 1), [1]);
    assert_eq!(
        call(
            &mut s,
            &Request::Fwmkeys {
                prefix: b"k",
                max: -1
            },
            5 + 6
        ),
        b"\0\0\0\0\x01\0\0\0\x02k1"
    );
    assert_eq!(call(&mut s, &Request::Vanish, 1), [0]);
    assert_eq!(call(&mut s, &Request::Rnum, 9), [0; 9]);
}

#[test]
fn misc_carries_every_table_function() {
    let server = server();
    let mut s = connect(&server);
    assert_eq!(
        misc(&mut s, b"put", &[b"a", b"name", b"Ann", b"age", b"31"]),
        (0, vec![])
    );
    assert_eq!(misc(&mut s, b"putkeep", &[b"a", b"name", b"X"]).0, 1);
    assert_eq!(misc(&mut s, b"putkeep", &[b"b", b"name", b"Ben"]).0, 0);
    assert_eq!(
        misc(&mut s, b"putcat", &[b"b", b"name", b"X", b"age", b"5"]).0,
        0
    );
    assert_eq!(
        strings(&misc(&mut s, b"get", &[b"b"]).1),
        ["name", "Ben", "age", "5"]
    );
    assert_eq!(misc(&mut s, b"get", &[b"zz"]), (1, vec![]));
    assert_eq!(
        misc(&mut s, b"putlist", &[b"c", b"name\0Cy", b"d", b"name\0Di"]),
        (0, vec![])
    );
    assert_eq!(
        strings(&misc(&mut s, b"getlist", &[b"c", b"zz", b"d"]).1),
        ["c", "name\0Cy", "d", "name\0Di"]
    );
    assert_eq!(misc(&mut s, b"outlist", &[b"c", b"zz"]), (0, vec![]));
    assert_eq!(misc(&mut s, b"out", &[b"d"]), (0, vec![]));
    assert_eq!(misc(&mut s, b"out", &[b"d"]).0, 1);
    // genuid: beyond the numeric keys there were, then one more each time,
    // stepping past every numeric key once an id is found taken.
    assert_eq!(misc(&mut s, b"put", &[b"41", b"name", b"N"]).0, 0);
    assert_eq!(strings(&misc(&mut s, b"genuid", &[]).1), ["42"]);
    assert_eq!(strings(&misc(&mut s, b"genuid", &[]).1), ["43"]);
    assert_eq!(misc(&mut s, b"put", &[b"45", b"name", b"N"]).0, 0);
    assert_eq!(strings(&misc(&mut s, b"genuid", &[]).1), ["44"]);
    assert_eq!(strings(&misc(&mut s, b"genuid", &[]).1), ["46"]);
    // A key past every id fails genuid, and a put without a key, only once
    // it must be stepped past.
    let largest: &[u8] = b"18446744073709551615";
    assert_eq!(misc(&mut s, b"put", &[largest, b"name", b"Max"]).0, 0);
    assert_eq!(strings(&misc(&mut s, b"genuid", &[]).1), ["47"]);
    assert_eq!(misc(&mut s, b"put", &[b"48", b"name", b"N"]).0, 0);
    assert_eq!(misc(&mut s, b"genuid", &[]), (1, vec![]));
    assert_eq!(call(&mut s, &put(PutMode::Put, b"", b"name\0x"), 1), [1]);
    for key in [largest, b"41", b"45", b"48"] {
        assert_eq!(misc(&mut s, b"out", &[key]).0, 0);
    }
    // setindex checks its types.
    assert_eq!(misc(&mut s, b"setindex", &[b"age", b"DECIMAL"]).0, 0);
    assert_eq!(misc(&mut s, b"setindex", &[b"age", b"BOGUS"]).0, 1);
    assert_eq!(misc(&mut s, b"iterinit", &[b"a"]).0, 0);
    assert_eq!(
        strings(&misc(&mut s, b"iternext", &[]).1),
        ["a", "name\0Ann\0age\x0031"]
    );
    assert_eq!(misc(&mut s, b"nosuch", &[]), (1, vec![]));
    assert_eq!(misc(&mut s, b"vanish", &[]), (0, vec![]));
    assert_eq!(call(&mut s, &Request::Rnum, 9), [0; 9]);
}

#[test]
fn search_finds_orders_limits_counts_projects_explains_and_removes() {
    let server = server();
    let mut s = connect(&server);
    for (key, name, age) in [
        ("k1", "Bob Smith", "30"),
        ("k2", "ann", "25"),
        ("k3", "Bob", "41"),
        ("k4", "zed", "25"),
    ] {
        let args: [&[u8]; 5] = [
            key.as_bytes(),
            b"name",
            name.as_bytes(),
            b"age",
            age.as_bytes(),
        ];
        assert_eq!(misc(&mut s, b"put", &args).0, 0);
    }
    let search = |s: &mut TcpStream, args: &[&[u8]]| strings(&misc(s, b"search", args).1);
    assert_eq!(
        search(&mut s, &[b"addcond\0name\0STRBW\0Bob"]),
        ["k1", "k3"]
    );
    assert_eq!(
        search(
            &mut s,
            &[
                b"addcond\0age\0NUMGE\x0025",
                b"setorder\0age\0NUMDESC",
                b"setlimit\x002\x001"
            ]
        ),
        ["k1", "k2"]
    );
    assert_eq!(
        search(&mut s, &[b"addcond\0name\0!STRINC\0o", b"get\0\0age"]),
        ["\0k2\0age\x0025", "\0k4\0age\x0025"]
    );
    assert_eq!(
        search(&mut s, &[b"addcond\0age\0NUMEQ\x0025", b"get"]),
        ["\0k2\0name\0ann\0age\x0025", "\0k4\0name\0zed\0age\x0025"]
    );
    assert_eq!(
        search(&mut s, &[b"addcond\0age\0NUMLT\x0031", b"count"]),
        ["3"]
    );
    // Meta-search: union, intersection, difference.
    let meta = |s: &mut TcpStream, kind: &'static [u8]| {
        let args: [&[u8]; 4] = [
            b"addcond\0name\0STRBW\0Bob",
            b"next",
            b"addcond\0age\0NUMEQ\x0030",
            kind,
        ];
        search(s, &args)
    };
    assert_eq!(meta(&mut s, b"mstype\0UNION"), ["k1", "k3"]);
    assert_eq!(meta(&mut s, b"mstype\0ISECT"), ["k1"]);
    assert_eq!(meta(&mut s, b"mstype\0DIFF"), ["k3"]);
    // The hint comes last, in Tokyo Cabinet's words.
    let found = search(&mut s, &[b"addcond\0age\0NUMEQ\x0025", b"hint"]);
    assert_eq!(
        found,
        [
            "k2",
            "k4",
            "\0\0[[HINT]]\nscanning the whole table\nresult set size: 2\nleaving the natural order\n"
        ]
    );
    // With an index, the query reads only what the index finds.
    assert_eq!(misc(&mut s, b"setindex", &[b"age", b"DECIMAL"]).0, 0);
    let found = search(&mut s, &[b"addcond\0age\0NUMEQ\x0025", b"hint"]);
    assert_eq!(
        found,
        [
            "k2",
            "k4",
            "\0\0[[HINT]]\nusing an index: \"age\" asc (NUMEQ)\nresult set size: 2\nleaving the natural order\n"
        ]
    );
    // out removes what it finds (and, with get, returns it).
    assert_eq!(
        search(
            &mut s,
            &[b"addcond\0age\0NUMEQ\x0025", b"out", b"get\0name"]
        ),
        ["name\0ann", "name\0zed"]
    );
    assert_eq!(search(&mut s, &[]), ["k1", "k3"]);
}

/// STRINC through a q-gram index finds what a scan finds, exact bytes and
/// case, a value that is not UTF-8 included, and the hint says so.
#[test]
fn strinc_uses_a_qgram_index_and_finds_what_a_scan_finds() {
    let server = server();
    let mut s = connect(&server);
    for (key, text) in [
        (&b"k1"[..], &b"an abc"[..]),
        (b"k2", b"x\xc3abc"),
        (b"k3", b"ABC"),
        (b"k4", b"ab c"),
    ] {
        let args: [&[u8]; 3] = [key, b"text", text];
        assert_eq!(misc(&mut s, b"put", &args).0, 0);
    }
    let search = |s: &mut TcpStream, args: &[&[u8]]| strings(&misc(s, b"search", args).1);
    let scanned = search(&mut s, &[b"addcond\0text\0STRINC\0abc"]);
    assert_eq!(scanned, ["k1", "k2"]);
    assert_eq!(misc(&mut s, b"setindex", &[b"text", b"QGRAM"]).0, 0);
    let found = search(&mut s, &[b"addcond\0text\0STRINC\0abc", b"hint"]);
    assert_eq!(
        found,
        [
            "k1",
            "k2",
            "\0\0[[HINT]]\nusing an index: \"text\" inverted (STRINC)\nresult set size: 2\nleaving the natural order\n"
        ]
    );
}

#[test]
fn a_table_database_needs_the_disk_engine() {
    let config = ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Table("t".into()),
        ..ServerConfig::default()
    };
    let store = std::sync::Arc::new(kura_store::MemoryStore::new(Default::default()));
    let error = kura_server::start(config, store, true).err().unwrap();
    assert!(error.to_string().contains("--tyrant-db"), "{error}");
}

/// A search's answer and `fwmkeys`' keys hold at most --max-reply bytes,
/// as `getlist`'s do: past it they fail (the first always goes), and a
/// count or a limited search of what fits answers.
#[test]
fn a_search_or_fwmkeys_past_the_reply_limit_fails_as_getlist_does() {
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Table("users".into()),
        max_item_size: 64 << 10,
        max_reply_bytes: 64 << 10,
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    let note = vec![b'n'; 30_000];
    for key in [&b"k1"[..], b"k2", b"k3"] {
        assert_eq!(misc(&mut s, b"put", &[key, b"note", &note]).0, 0);
    }
    assert_eq!(misc(&mut s, b"search", &[b"get"]).0, 1, "90 KB past 64 KiB");
    let (code, items) = misc(&mut s, b"search", &[b"get", b"setlimit\x002\x000"]);
    assert_eq!((code, items.len()), (0, 2), "60 KB fit");
    assert_eq!(strings(&misc(&mut s, b"search", &[]).1), ["k1", "k2", "k3"]);
    assert_eq!(
        strings(&misc(&mut s, b"search", &[b"get", b"count"]).1),
        ["3"]
    );

    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Table("users".into()),
        max_reply_bytes: 100,
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    let keys: Vec<Vec<u8>> = (1..=3).map(|n| format!("{n:040}").into_bytes()).collect();
    for key in &keys {
        assert_eq!(misc(&mut s, b"put", &[key, b"name", b"x"]).0, 0);
    }
    let fwmkeys = |max| Request::Fwmkeys { prefix: b"0", max };
    assert_eq!(
        call(&mut s, &fwmkeys(-1), 1),
        [1],
        "120 bytes of keys past 100"
    );
    let mut two = vec![0, 0, 0, 0, 2];
    for key in &keys[..2] {
        two.extend_from_slice(&(key.len() as u32).to_be_bytes());
        two.extend_from_slice(key);
    }
    assert_eq!(call(&mut s, &fwmkeys(2), two.len()), two, "80 fit");
}

/// `genuid` from many connections at once hands out each id once, and the
/// kept last id is the largest handed out, whichever write came last.
#[test]
fn genuid_from_many_connections_hands_out_each_id_once() {
    let server = server();
    let ids: Vec<u64> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut s = connect(&server);
                    (0..50)
                        .map(|_| {
                            let (code, items) = misc(&mut s, b"genuid", &[]);
                            assert_eq!(code, 0);
                            String::from_utf8(items[0].clone())
                                .unwrap()
                                .parse()
                                .unwrap()
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let distinct: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 200, "no id twice");
    assert_eq!(distinct.last(), Some(&200));
    let mut s = connect(&server);
    assert_eq!(strings(&misc(&mut s, b"genuid", &[]).1), ["201"]);
}
