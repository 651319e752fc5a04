//! What memcached 1.6.18's own test suite (its `t/*.t` files) checks, each
//! behaviour as raw bytes over a real socket, compared byte for byte. The
//! suite file each test comes from is named in its comment.

mod support;

use std::io::Write;
use std::thread;
use std::time::{Duration, Instant};

use kura_server::ServerConfig;
use kura_store::MemoryConfig;
use support::{binary_call, closes, expect_reply, read_at_least, TestServer};

fn with_shutdown_allowed() -> TestServer {
    TestServer::with(
        ServerConfig {
            shutdown_command: true,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    )
}

fn wait_until_stopping(server: &TestServer) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.handle().shared().stopping() {
        assert!(Instant::now() < deadline, "the server did not stop");
        thread::sleep(Duration::from_millis(10));
    }
}

/// strtol-testing.t: a number with trailing garbage is a bad command line,
/// not a number, wherever a command takes one.
#[test]
fn numbers_with_trailing_garbage_are_bad_command_lines() {
    let server = TestServer::start();
    expect_reply(
        &server,
        b"verbosity invalid\r\n\
          slabs automove invalid\r\n\
          verbosity 1x\r\n\
          set a 0 0 1x\r\n\
          set a 1x 0 1\r\n\
          cas a 0 0 1 18446744073709551616\r\n\
          incr a 1x\r\n\
          verbosity 1\r\n\
          slabs automove 1\r\n\
          slabs automove 3\r\n",
        b"CLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR invalid numeric delta argument\r\n\
          OK\r\n\
          OK\r\n\
          ERROR\r\n",
    );
}

/// memcached keeps the low 32 bits of a data length, so 4294967296 is 0.
#[test]
fn a_data_length_is_narrowed_to_32_bits() {
    let server = TestServer::start();
    expect_reply(
        &server,
        b"set a 0 0 4294967296\r\n\r\nget a\r\n",
        b"STORED\r\nVALUE a 0 0\r\n\r\nEND\r\n",
    );
}

/// getset.t: a `set` too large for the cache removes the item it would have
/// replaced, so the old value is never served after a failed write.
#[test]
fn a_too_large_set_removes_the_old_item() {
    let server = TestServer::start();
    let mut request = b"set big 0 0 3\r\nMOO\r\nset big 0 0 1049600\r\n".to_vec();
    request.extend(std::iter::repeat_n(b'B', 1_049_600));
    request.extend_from_slice(b"\r\nget big\r\n");
    expect_reply(
        &server,
        &request,
        b"STORED\r\nSERVER_ERROR object too large for cache\r\nEND\r\n",
    );
}

/// The same over the binary protocol (memcached's `process_bin_update`),
/// for a value just over `-I` and one far over it (swallowed unbuffered),
/// quiet or not; an `add` leaves the old item alone.
#[test]
fn a_too_large_binary_set_removes_the_old_item_but_add_does_not() {
    use kura_proto::binary::opcode;
    let server = TestServer::start();
    let mut stream = server.connect();
    let extras = [0u8; 8];
    let limit = ServerConfig::default().max_item_size;
    for (size, op) in [
        (limit + 1, opcode::SET),
        (2 * limit, opcode::SET),
        (2 * limit, opcode::SETQ),
    ] {
        let big = vec![b'B'; size];
        assert_eq!(
            binary_call(&mut stream, opcode::SET, b"k", &extras, b"old").0,
            0
        );
        let (status, body) = binary_call(&mut stream, op, b"k", &extras, &big);
        assert_eq!(
            (status, &body[..]),
            (0x03, &b"Too large."[..]),
            "{size} {op:#x}"
        );
        assert_eq!(
            binary_call(&mut stream, opcode::GET, b"k", &[], &[]).0,
            0x01,
            "the old value is gone after a {size}-byte {op:#x}"
        );
    }
    assert_eq!(
        binary_call(&mut stream, opcode::SET, b"k", &extras, b"old").0,
        0
    );
    let big = vec![b'B'; 2 * limit];
    assert_eq!(
        binary_call(&mut stream, opcode::ADD, b"k", &extras, &big).0,
        0x03
    );
    let (status, value) = binary_call(&mut stream, opcode::GET, b"k", &[], &[]);
    assert_eq!((status, &value[..]), (0, &b"old"[..]));
}

/// The same for `ms`, in any mode; an `add` or `append` that is too large
/// leaves the old item alone (memcached removes it only for `set`).
#[test]
fn a_too_large_meta_set_removes_the_old_item_but_add_does_not() {
    let server = TestServer::start();
    let big = vec![b'B'; 1_049_600];
    let mut request = b"set a 0 0 3\r\nold\r\nset b 0 0 3\r\nold\r\n".to_vec();
    for command in [&b"ms a 1049600 MA"[..], b"add b 0 0 1049600 noreply"] {
        request.extend_from_slice(command);
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(&big);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"get a b\r\n");
    expect_reply(
        &server,
        &request,
        b"STORED\r\nSTORED\r\n\
          SERVER_ERROR object too large for cache\r\n\
          VALUE b 0 3\r\nold\r\nEND\r\n",
    );
}

/// issue_3.t: `delete <key> 10 noreply` is invalid (a hold time must be 0),
/// deletes nothing, and says nothing; a valid `delete <key> noreply` deletes.
#[test]
fn an_invalid_delete_with_noreply_deletes_nothing_and_says_nothing() {
    let server = TestServer::start();
    expect_reply(
        &server,
        b"delete k\r\n\
          delete k 10\r\n\
          add k 0 0 1\r\nx\r\n\
          delete k 10 noreply\r\n\
          add k 0 0 1\r\nx\r\n\
          delete k noreply\r\n\
          add k 0 0 1\r\nx\r\n\
          delete k 0\r\n",
        b"NOT_FOUND\r\n\
          CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n\
          STORED\r\n\
          NOT_STORED\r\n\
          STORED\r\n\
          DELETED\r\n",
    );
}

/// Every command that takes `noreply` notes it before it checks its
/// arguments, so its argument errors are silent too.
#[test]
fn argument_errors_of_a_noreply_command_are_silent() {
    let server = TestServer::start();
    expect_reply(
        &server,
        b"set a 0 0 x noreply\r\n\
          incr a x noreply\r\n\
          touch a x noreply\r\n\
          flush_all x noreply\r\n\
          verbosity x noreply\r\n\
          mn\r\n",
        b"MN\r\n",
    );
}

/// expirations.t: `debugtime <seconds>` moves the clock forward, as in
/// memcached's debug build, so expiry is tested without sleeping.
#[test]
fn debugtime_moves_the_clock_forward() {
    let server = TestServer::start();
    expect_reply(
        &server,
        b"set foo 0 3 6\r\nfooval\r\n\
          add add 0 2 1\r\na\r\n\
          get foo\r\n\
          debugtime 3\r\n\
          get foo\r\n\
          add add 0 2 1\r\nb\r\n\
          debugtime -1\r\n",
        b"STORED\r\nSTORED\r\n\
          VALUE foo 0 6\r\nfooval\r\nEND\r\n\
          OK\r\n\
          END\r\n\
          STORED\r\n\
          ERROR\r\n",
    );
}

/// malicious-commands.t: an HTTP request sent to the cache port is hung up
/// on without a word.
#[test]
fn http_requests_are_hung_up_on_without_a_reply() {
    let server = TestServer::start();
    for line in [
        &b"GET / HTTP/1.0\r\n"[..],
        b"PUT /asdf/asd/fasdfasdf/sadf HTTP/1.1\r\n",
        b"DELETE HTTP/1.1\r\n",
    ] {
        let mut stream = server.connect();
        stream.write_all(line).unwrap();
        assert_eq!(read_at_least(&mut stream, 1), b"", "{line:?}");
        assert!(closes(&mut stream));
    }
    // A memcached verb stays one, whatever its last word.
    expect_reply(&server, b"get / HTTP/1.0\r\n", b"END\r\n");
}

/// shutdown.t: without `-A` every shutdown is refused; with it, an unknown
/// mode is a client error and the server keeps serving.
#[test]
fn shutdown_with_an_unknown_mode_is_refused() {
    expect_reply(
        &TestServer::start(),
        b"shutdown foo\r\nshutdown graceful\r\n",
        b"ERROR: shutdown not enabled\r\nERROR: shutdown not enabled\r\n",
    );
    let server = with_shutdown_allowed();
    expect_reply(
        &server,
        b"shutdown foo\r\nshutdown graceful now\r\nversion\r\n",
        b"CLIENT_ERROR invalid shutdown mode\r\n\
          CLIENT_ERROR invalid shutdown mode\r\n\
          VERSION 1.6.18\r\n",
    );
    assert!(!server.handle().shared().stopping());
}

/// shutdown.t: `shutdown graceful` closes the connection and stops the
/// server, without a reply.
#[test]
fn shutdown_graceful_stops_the_server() {
    let server = with_shutdown_allowed();
    let mut stream = server.connect();
    stream.write_all(b"shutdown graceful\r\n").unwrap();
    assert_eq!(read_at_least(&mut stream, 1), b"");
    wait_until_stopping(&server);
}

/// metaget.t: setting a stale item with an older CAS (`ms ... I C<old>`)
/// keeps it stale, keeps its TTL, and keeps the recache token handed out:
/// the next reader sees Z (a win was sent) and does not win again.
#[test]
fn a_stale_set_keeps_the_ttl_and_the_win_token_already_sent() {
    let server = TestServer::start();
    let mut stream = server.connect();
    let mut ask = |request: &[u8], expected_len: usize| {
        stream.write_all(request).unwrap();
        String::from_utf8(read_at_least(&mut stream, expected_len)).unwrap()
    };
    // The TTL is 30 unless the clock ticked in between.
    let ttl_30 = |reply: String| reply.replace(" t29 ", " t30 ");
    assert_eq!(ask(b"ms toinv 3\r\nmoo\r\n", 4), "HD\r\n");
    assert_eq!(ask(b"md toinv I T30\r\n", 4), "HD\r\n");
    assert_eq!(
        ttl_30(ask(b"mg toinv s t v\r\n", 22)),
        "VA 3 s3 t30 X W\r\nmoo\r\n"
    );
    assert_eq!(ask(b"ms toinv 1 T90 C1\r\nf\r\n", 4), "EX\r\n");
    assert_eq!(ask(b"ms toinv 1 I T90 C1\r\nf\r\n", 4), "HD\r\n");
    assert_eq!(
        ttl_30(ask(b"mg toinv s t v\r\n", 20)),
        "VA 1 s1 t30 Z X\r\nf\r\n"
    );
}

/// flush-all.t: with CAS off (`-C`) memcached tells items apart only by the
/// second they were stored in, so a `flush_all` also flushes what is stored
/// in the rest of that second; a second later, stores stay again.
#[test]
fn without_cas_a_flush_covers_the_rest_of_its_second() {
    let server = TestServer::with(
        ServerConfig {
            cas_enabled: false,
            ..ServerConfig::default()
        },
        MemoryConfig {
            flush_whole_second: true,
            ..MemoryConfig::default()
        },
    );
    expect_reply(
        &server,
        b"flush_all 0\r\n\
          set foo 0 0 3\r\nnew\r\n\
          get foo\r\n\
          debugtime 1\r\n\
          set foo 0 0 3\r\nnew\r\n\
          gets foo\r\n",
        b"OK\r\nSTORED\r\nEND\r\nOK\r\nSTORED\r\nVALUE foo 0 3 0\r\nnew\r\nEND\r\n",
    );
}

/// With CAS off (`-C`) memcached's items carry a CAS of 0 and a stored item
/// has no room for a token: a `cas` or a meta set with `C` finds the item
/// differs, an append compares nothing, and a delete or incr/decr matches a
/// token of 0 only. Recorded from memcached 1.6.18 run with `-C`.
#[test]
fn without_cas_tokens_compare_as_memcached_items_without_one() {
    let server = TestServer::with(
        ServerConfig {
            cas_enabled: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    expect_reply(
        &server,
        b"set foo 0 0 3\r\nabc\r\ngets foo\r\n\
          cas foo 0 0 3 0\r\nnew\r\ncas foo 0 0 3 1\r\nxyz\r\ncas bar 0 0 1 0\r\nb\r\n\
          md foo C1\r\nmd foo C0\r\nms foo 1 C1\r\nx\r\n\
          set n 0 0 1\r\n5\r\nma n C2\r\nma n C0 v\r\nms n 1 C9 MA\r\n1\r\nmg n v c\r\n\
          md n q C3\r\nmn\r\nset foo 0 0 1\r\na\r\nms foo 1 C9 MR\r\nz\r\n\
          ms baz 1 C9 ME\r\nz\r\nmg baz v\r\n",
        b"STORED\r\nVALUE foo 0 3 0\r\nabc\r\nEND\r\n\
          EXISTS\r\nEXISTS\r\nNOT_FOUND\r\n\
          EX\r\nHD\r\nNF\r\n\
          STORED\r\nEX\r\nVA 1\r\n6\r\nHD\r\nVA 2 c0\r\n61\r\n\
          EX\r\nMN\r\nSTORED\r\nEX\r\n\
          HD\r\nVA 1\r\nz\r\n",
    );
    // The binary protocol: a store with a CAS is a plain store, a delete
    // with one finds it differs.
    use kura_proto::binary::opcode;
    let mut stream = server.connect();
    let call = |stream: &mut std::net::TcpStream, op, key: &[u8], extras: &[u8], cas| {
        let value: &[u8] = if op == opcode::DELETE { b"" } else { b"v" };
        let mut request = Vec::new();
        kura_proto::binary::compose_request(&mut request, op, 7, cas, extras, key, value);
        stream.write_all(&request).unwrap();
        let reply = read_at_least(stream, 24);
        u16::from_be_bytes([reply[6], reply[7]])
    };
    let set_extras = [0u8; 8];
    assert_eq!(call(&mut stream, opcode::SET, b"b1", &set_extras, 12345), 0);
    assert_eq!(call(&mut stream, opcode::REPLACE, b"b2", &set_extras, 7), 1);
    assert_eq!(call(&mut stream, opcode::APPEND, b"b1", &[], 5), 0);
    assert_eq!(call(&mut stream, opcode::DELETE, b"b1", &[], 1), 2);
    assert_eq!(call(&mut stream, opcode::DELETE, b"b1", &[], 0), 0);
}

/// With CAS on, a flush is exact: what is stored after it stays.
#[test]
fn with_cas_a_flush_spares_what_is_stored_after_it() {
    expect_reply(
        &TestServer::start(),
        b"set foo 0 0 3\r\nold\r\nflush_all\r\nget foo\r\nset foo 0 0 3\r\nnew\r\nget foo\r\n",
        b"STORED\r\nOK\r\nEND\r\nSTORED\r\nVALUE foo 0 3\r\nnew\r\nEND\r\n",
    );
}

/// stats.t: `stats cachedump <class> <limit>` lists a size class's items as
/// memcached does, and ends with END (the suite waits for it).
#[test]
fn stats_cachedump_lists_the_items_of_a_class() {
    let server = TestServer::start();
    expect_reply(
        &server,
        b"set foo 0 0 6\r\nfooval\r\n\
          stats cachedump 1 100\r\n\
          stats cachedump 2 100\r\n\
          stats cachedump 1\r\n\
          stats cachedump x 1\r\n\
          stats cachedump 64 1\r\n",
        b"STORED\r\n\
          ITEM foo [6 b; 0 s]\r\nEND\r\n\
          END\r\n\
          CLIENT_ERROR bad command line\r\n\
          CLIENT_ERROR bad command line format\r\n\
          CLIENT_ERROR Illegal slab id\r\n",
    );
}
