//! Tokyo Tyrant's binary protocol on `--tyrant-port`, over real sockets,
//! byte for byte as ttserver 1.1.41 answers a hash database.

mod support;

use std::io::{Read, Write};

use kura_proto::tyrant::{compose, pack_double, PutMode, Request};
use kura_server::ServerConfig;
use support::tyrant::{call, connect, iterate, memory_server, put, stat};
use support::TestServer;

#[test]
fn records_are_put_read_and_removed_as_ttserver_answers() {
    let server = memory_server();
    let mut s = connect(&server);
    assert_eq!(call(&mut s, &put(PutMode::Put, b"foo", b"hop"), 1), [0]);
    assert_eq!(
        call(&mut s, &Request::Get { key: b"foo" }, 8),
        b"\0\0\0\0\x03hop"
    );
    assert_eq!(
        call(&mut s, &Request::Vsiz { key: b"foo" }, 5),
        b"\0\0\0\0\x03"
    );
    // putkeep refuses an existing key; putcat appends, and creates.
    assert_eq!(call(&mut s, &put(PutMode::Keep, b"foo", b"x"), 1), [1]);
    assert_eq!(call(&mut s, &put(PutMode::Cat, b"foo", b"!"), 1), [0]);
    assert_eq!(call(&mut s, &put(PutMode::Cat, b"new", b"n"), 1), [0]);
    // putnr answers nothing: the next reply is the get's.
    let mut bytes = Vec::new();
    compose(&mut bytes, &put(PutMode::NoReply, b"quiet", b"q"));
    compose(&mut bytes, &Request::Get { key: b"quiet" });
    s.write_all(&bytes).unwrap();
    let mut reply = [0; 6];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"\0\0\0\0\x01q");
    // mget leaves the misses out, in request order.
    assert_eq!(
        call(
            &mut s,
            &Request::Mget {
                keys: vec![b"new", b"missing", b"foo"]
            },
            5 + 8 + 4 + 8 + 7
        ),
        b"\0\0\0\0\x02\0\0\0\x03\0\0\0\x01newn\0\0\0\x03\0\0\0\x04foohop!"
    );
    assert_eq!(call(&mut s, &Request::Out { key: b"foo" }, 1), [0]);
    assert_eq!(call(&mut s, &Request::Out { key: b"foo" }, 1), [1]);
    assert_eq!(call(&mut s, &Request::Get { key: b"foo" }, 1), [1]);
    assert_eq!(call(&mut s, &Request::Vsiz { key: b"foo" }, 1), [1]);
    assert_eq!(call(&mut s, &Request::Rnum, 9), b"\0\0\0\0\0\0\0\0\x02");
}

#[test]
fn putshl_keeps_the_tail_and_counters_are_native_numbers() {
    let server = memory_server();
    let mut s = connect(&server);
    let shl = |value: &'static [u8], width| Request::PutShl {
        key: b"log",
        value,
        width,
    };
    // A new record is stored as sent, whatever the width.
    assert_eq!(call(&mut s, &shl(b"abcdef", 4), 1), [0]);
    assert_eq!(call(&mut s, &shl(b"gh", 4), 1), [0]);
    assert_eq!(
        call(&mut s, &Request::Get { key: b"log" }, 9),
        b"\0\0\0\0\x04efgh"
    );
    // addint: a 4-byte native int; a missing record starts at 0.
    let add = |delta| Request::AddInt { key: b"n", delta };
    assert_eq!(call(&mut s, &add(5), 5), b"\0\0\0\0\x05");
    assert_eq!(call(&mut s, &add(-7), 5), b"\0\xff\xff\xff\xfe");
    assert_eq!(
        call(&mut s, &Request::Get { key: b"n" }, 9),
        b"\0\0\0\0\x04\xfe\xff\xff\xff"
    );
    // A sum of INT_MIN is Tokyo Cabinet's failure value: ttserver stores
    // it and answers failure.
    assert_eq!(
        call(
            &mut s,
            &put(PutMode::Put, b"min", &(i32::MIN + 1).to_le_bytes()),
            1
        ),
        [0]
    );
    let to_min = Request::AddInt {
        key: b"min",
        delta: -1,
    };
    assert_eq!(call(&mut s, &to_min, 1), [1]);
    assert_eq!(
        call(&mut s, &Request::Get { key: b"min" }, 9),
        b"\0\0\0\0\x04\0\0\0\x80"
    );
    // A record that is not 4 bytes is not a counter.
    assert_eq!(call(&mut s, &put(PutMode::Put, b"six", b"abcdef"), 1), [0]);
    assert_eq!(
        call(
            &mut s,
            &Request::AddInt {
                key: b"six",
                delta: 1
            },
            1
        ),
        [1]
    );
    let add = |delta| Request::AddDouble { key: b"d", delta };
    let mut expected = vec![0];
    let (integral, fraction) = pack_double(1.5);
    expected.extend_from_slice(&integral.to_be_bytes());
    expected.extend_from_slice(&fraction.to_be_bytes());
    assert_eq!(call(&mut s, &add(1.5), 17), expected);
    let mut expected = vec![0];
    let (integral, fraction) = pack_double(-0.75);
    expected.extend_from_slice(&integral.to_be_bytes());
    expected.extend_from_slice(&fraction.to_be_bytes());
    assert_eq!(call(&mut s, &add(-2.25), 17), expected);
    assert_eq!(
        call(
            &mut s,
            &Request::AddDouble {
                key: b"n",
                delta: 1.0
            },
            1
        ),
        [1]
    );
}

#[test]
fn prefixes_list_keys_in_byte_order_and_the_iterator_each_key_once() {
    let server = memory_server();
    let mut s = connect(&server);
    for key in [&b"user:2"[..], b"user:10", b"item:1", b"user:1"] {
        assert_eq!(call(&mut s, &put(PutMode::Put, key, b"v"), 1), [0]);
    }
    let fwm = |max| Request::Fwmkeys {
        prefix: b"user:",
        max,
    };
    assert_eq!(
        call(&mut s, &fwm(-1), 5 + 3 * 4 + 6 + 7 + 6),
        b"\0\0\0\0\x03\0\0\0\x06user:1\0\0\0\x07user:10\0\0\0\x06user:2"
    );
    assert_eq!(
        call(&mut s, &fwm(1), 5 + 4 + 6),
        b"\0\0\0\0\x01\0\0\0\x06user:1"
    );
    assert_eq!(call(&mut s, &Request::IterInit, 1), [0]);
    let mut seen = iterate(&mut s);
    seen.sort();
    assert_eq!(seen, ["item:1", "user:1", "user:10", "user:2"]);
    // Read a part at a time: more keys than a part holds, each once; and
    // vanish walks them the same way.
    let mut keys: Vec<String> = (0..1000).map(|i| format!("many:{i:04}")).collect();
    for key in &keys {
        assert_eq!(
            call(&mut s, &put(PutMode::Put, key.as_bytes(), b"v"), 1),
            [0]
        );
    }
    assert_eq!(call(&mut s, &Request::IterInit, 1), [0]);
    let mut seen: Vec<String> = iterate(&mut s);
    seen.sort();
    keys.extend(["item:1", "user:1", "user:10", "user:2"].map(String::from));
    keys.sort();
    assert_eq!(seen, keys);
    assert_eq!(call(&mut s, &Request::Vanish, 1), [0]);
    assert_eq!(call(&mut s, &Request::Rnum, 9), [0; 9]);
}

/// A master's host is a host name: one with a newline would write lines
/// of the client's into the server's log; one of 5,000 bytes would be
/// logged at every retry.
#[test]
fn setmst_refuses_a_host_that_is_no_host_name() {
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    let long = vec![b'h'; 256];
    for host in [
        &b"h\n2026-01-01T00:00:00Z ERROR forged line"[..],
        b"a b",
        &long,
    ] {
        let set_master = Request::SetMaster {
            host,
            port: 1978,
            micros: 0,
            opts: 0,
        };
        assert_eq!(call(&mut s, &set_master, 1), [1], "{host:?}");
    }
    let no_master = Request::SetMaster {
        host: b"",
        port: 0,
        micros: 0,
        opts: 0,
    };
    assert_eq!(call(&mut s, &no_master, 1), [0]);
}

#[test]
fn misc_lists_stat_and_vanish() {
    let server = memory_server();
    let mut s = connect(&server);
    let misc = |name: &'static [u8], args: Vec<&'static [u8]>| Request::Misc {
        name,
        opts: 0,
        args,
    };
    assert_eq!(
        call(&mut s, &misc(b"putlist", vec![b"a", b"1", b"b", b"22"]), 5),
        b"\0\0\0\0\0"
    );
    assert_eq!(
        call(
            &mut s,
            &misc(b"getlist", vec![b"b", b"zz", b"a"]),
            5 + 4 * 4 + 5
        ),
        b"\0\0\0\0\x04\0\0\0\x01b\0\0\0\x0222\0\0\0\x01a\0\0\0\x011"
    );
    assert_eq!(
        call(&mut s, &misc(b"outlist", vec![b"a"]), 5),
        b"\0\0\0\0\0"
    );
    assert_eq!(call(&mut s, &misc(b"get", vec![b"a"]), 5), b"\x01\0\0\0\0");
    // An unknown function: status 1 and an empty list.
    assert_eq!(call(&mut s, &misc(b"nosuch", vec![]), 5), b"\x01\0\0\0\0");
    let text = stat(&mut s);
    assert!(text.lines().any(|line| line == "type\thash"), "{text}");
    assert!(text.lines().any(|line| line == "rnum\t1"), "{text}");
    assert_eq!(call(&mut s, &Request::Vanish, 1), [0]);
    assert_eq!(call(&mut s, &Request::Rnum, 9), [0; 9]);
}

#[test]
fn the_tyrant_port_speaks_memcached_text_too_over_the_same_records() {
    let server = memory_server();
    let mut s = connect(&server);
    assert_eq!(
        call(&mut s, &put(PutMode::Put, b"shared", b"value"), 1),
        [0]
    );
    s.write_all(b"get shared\r\n").unwrap();
    let reply = support::read_at_least(&mut s, 30);
    assert_eq!(reply, b"VALUE shared 0 5\r\nvalue\r\nEND\r\n");
    // And the memcached port sees them as well.
    let reply = server.exchange(b"get shared\r\n", 30);
    assert_eq!(reply, b"VALUE shared 0 5\r\nvalue\r\nEND\r\n");
}

#[test]
fn a_malformed_request_closes_the_connection_without_a_reply() {
    let server = memory_server();
    for bytes in [
        &b"\xc8\x99"[..],                                  // no such command
        b"\xc8\x30\x7f\xff\xff\xff",                       // a key larger than an item
        b"\xc8\x13\0\0\0\x01\0\0\0\x01\xff\xff\xff\xffkv", // a negative width
    ] {
        let mut s = connect(&server);
        s.write_all(bytes).unwrap();
        assert!(support::closes(&mut s), "{bytes:?}");
    }
    // Unsupported commands fail (status 1) and the connection stays.
    let mut s = connect(&server);
    let ext = Request::Ext {
        name: b"fn",
        opts: 0,
        key: b"k",
        value: b"v",
    };
    assert_eq!(call(&mut s, &ext, 1), [1]);
    assert_eq!(call(&mut s, &Request::Rnum, 9), [0; 9]);
}

/// An mget of many keys sent a few bytes at a time (the server waits for
/// the four length bytes every key left needs before it parses again) is
/// answered as the same mget sent at once.
#[test]
fn an_mget_sent_a_few_bytes_at_a_time_is_answered_as_one_sent_at_once() {
    let server = memory_server();
    let mut s = connect(&server);
    s.set_nodelay(true).unwrap();
    let keys: Vec<Vec<u8>> = (0..300).map(|n| format!("k{n}").into_bytes()).collect();
    for key in keys.iter().step_by(2) {
        assert_eq!(call(&mut s, &put(PutMode::Put, key, b"v"), 1), [0]);
    }
    let mget = Request::Mget {
        keys: keys.iter().map(Vec::as_slice).collect(),
    };
    let mut bytes = Vec::new();
    compose(&mut bytes, &mget);
    // 5 + 150 × (8 + key + 1) bytes: the hits, in request order.
    let reply_len = 5 + keys.iter().step_by(2).map(|k| 9 + k.len()).sum::<usize>();
    let whole = call(&mut s, &mget, reply_len);
    assert_eq!(&whole[..5], b"\0\0\0\0\x96", "150 hits");
    for (n, piece) in bytes.chunks(5).enumerate() {
        s.write_all(piece).unwrap();
        if n % 50 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    assert_eq!(support::tyrant::read_n(&mut s, reply_len), whole);
    assert_eq!(call(&mut s, &Request::Rnum, 9), b"\0\0\0\0\0\0\0\0\x96");
}

#[test]
fn writes_on_the_disk_engine_are_answered_once_appended() {
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    for i in 0..200u32 {
        let key = format!("k{i}");
        assert_eq!(
            call(
                &mut s,
                &put(PutMode::Put, key.as_bytes(), &i.to_be_bytes()),
                1
            ),
            [0]
        );
        assert_eq!(
            call(
                &mut s,
                &Request::AddInt {
                    key: b"count",
                    delta: 1
                },
                5
            ),
            [&[0][..], &(i as i32 + 1).to_be_bytes()].concat()
        );
    }
    assert_eq!(
        call(&mut s, &Request::Rnum, 9),
        [&[0][..], &201u64.to_be_bytes()].concat()
    );
}

#[test]
fn copy_writes_a_backup_only_to_an_absolute_path_and_not_with_dumping_off() {
    let work = tempfile::tempdir().unwrap();
    let server = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        ..ServerConfig::default()
    });
    let mut s = connect(&server);
    assert_eq!(call(&mut s, &put(PutMode::Put, b"k", b"v"), 1), [0]);
    let to = work.path().join("copy");
    let path = to.to_str().unwrap().as_bytes();
    assert_eq!(call(&mut s, &Request::Copy { path: b"relative" }, 1), [1]);
    assert!(!std::path::Path::new("relative").exists());
    assert_eq!(call(&mut s, &Request::Copy { path }, 1), [0]);
    assert!(to.join("manifest.json").exists());

    let refused = TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        dumping_enabled: false,
        ..ServerConfig::default()
    });
    let mut s = connect(&refused);
    let elsewhere = work.path().join("refused");
    let path = elsewhere.to_str().unwrap().as_bytes();
    assert_eq!(call(&mut s, &Request::Copy { path }, 1), [1]);
    assert!(!elsewhere.exists());
}

/// `fwmkeys` holds at most --max-reply bytes of keys, as `getlist` does its
/// values: past it, it fails (its first key always goes), on the hash
/// database (whose engines keep no order: the smallest `max` are kept
/// while every key is read) and on a B+ tree.
#[test]
fn fwmkeys_past_the_reply_limit_fails_on_a_hash_and_a_btree() {
    let config = ServerConfig {
        tyrant_port: Some(0),
        max_reply_bytes: 100,
        ..ServerConfig::default()
    };
    let hash = TestServer::with(config.clone(), kura_store::MemoryConfig::default());
    let btree = TestServer::disk_with(ServerConfig {
        tyrant_db: kura_server::TyrantDatabase::Btree("ordered".into()),
        ..config
    });
    for server in [hash, btree] {
        let mut s = connect(&server);
        let keys: Vec<Vec<u8>> = (1..=3).map(|n| format!("{n:040}").into_bytes()).collect();
        for key in keys.iter().rev() {
            assert_eq!(call(&mut s, &put(PutMode::Put, key, b"v"), 1), [0]);
        }
        let fwmkeys = |max| Request::Fwmkeys { prefix: b"0", max };
        assert_eq!(call(&mut s, &fwmkeys(-1), 1), [1], "120 bytes past 100");
        let mut two = vec![0, 0, 0, 0, 2];
        for key in &keys[..2] {
            two.extend_from_slice(&(key.len() as u32).to_be_bytes());
            two.extend_from_slice(key);
        }
        assert_eq!(
            call(&mut s, &fwmkeys(2), two.len()),
            two,
            "the two smallest fit"
        );
    }
}

/// The hash iterator goes on past parts that held only dead items: a
/// flush leaves every slot of one shard dead, ahead of the item written
/// after it.
#[test]
fn the_iterator_goes_on_past_parts_of_dead_items() {
    let server = TestServer::with(
        ServerConfig {
            tyrant_port: Some(0),
            ..ServerConfig::default()
        },
        kura_store::MemoryConfig {
            shards: 1,
            ..kura_store::MemoryConfig::default()
        },
    );
    let mut s = connect(&server);
    // Three parts' worth of dead slots (a part looks at 16 slots a key).
    for i in 0..12_300 {
        let key = format!("dead:{i:05}");
        assert_eq!(
            call(&mut s, &put(PutMode::Put, key.as_bytes(), b"v"), 1),
            [0]
        );
    }
    let mut text = server.connect();
    text.write_all(b"flush_all\r\n").unwrap();
    let mut ok = [0; 4];
    text.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"OK\r\n");
    assert_eq!(call(&mut s, &put(PutMode::Put, b"late", b"v"), 1), [0]);
    assert_eq!(call(&mut s, &Request::IterInit, 1), [0]);
    assert_eq!(iterate(&mut s), ["late"]);
}
