//! `stats` and its groups over real sockets, against what memcached 1.6.18
//! prints: the general figures' exact key set, `stats settings` with TLS,
//! `stats detail`, `stats kura` and `refresh_certs`.

mod support;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::path::{Path, PathBuf};

use kura_server::config::{ListenAddr, TlsSettings};
use kura_server::ServerConfig;
use kura_store::MemoryConfig;
use support::{binary_call, read_at_least, TestServer};

/// Reads text replies until one ends with `END\r\n` (or an error line).
fn read_reply(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let listing = [&b"STAT "[..], b"PREFIX ", b"VALUE "]
            .iter()
            .any(|start| out.starts_with(start));
        let done = out.ends_with(b"END\r\n") || (out.ends_with(b"\r\n") && !listing);
        if done {
            break;
        }
        let n = stream.read(&mut buf).expect("a reply");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(out).unwrap()
}

fn ask(stream: &mut TcpStream, request: &str) -> String {
    stream.write_all(request.as_bytes()).unwrap();
    read_reply(stream)
}

/// `STAT name value` lines as (name, value).
fn figures(reply: &str) -> Vec<(String, String)> {
    reply
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .map(|l| {
            let (name, value) = l.split_once(' ').unwrap_or((l, ""));
            (name.to_string(), value.to_string())
        })
        .collect()
}

fn figure(reply: &str, name: &str) -> Option<String> {
    figures(reply)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
}

/// What memcached 1.6.18 prints for `stats` with its default settings
/// (LRU crawler on), minus `lru_maintainer_juggles`: kura has no LRU
/// maintainer thread.
const MEMCACHED_STATS: &[&str] = &[
    "pid",
    "uptime",
    "time",
    "version",
    "libevent",
    "pointer_size",
    "rusage_user",
    "rusage_system",
    "max_connections",
    "curr_connections",
    "total_connections",
    "rejected_connections",
    "connection_structures",
    "response_obj_oom",
    "response_obj_count",
    "response_obj_bytes",
    "read_buf_count",
    "read_buf_bytes",
    "read_buf_bytes_free",
    "read_buf_oom",
    "reserved_fds",
    "cmd_get",
    "cmd_set",
    "cmd_flush",
    "cmd_touch",
    "cmd_meta",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "delete_misses",
    "delete_hits",
    "incr_misses",
    "incr_hits",
    "decr_misses",
    "decr_hits",
    "cas_misses",
    "cas_hits",
    "cas_badval",
    "touch_hits",
    "touch_misses",
    "store_too_large",
    "store_no_memory",
    "auth_cmds",
    "auth_errors",
    "bytes_read",
    "bytes_written",
    "limit_maxbytes",
    "accepting_conns",
    "listen_disabled_num",
    "time_in_listen_disabled_us",
    "threads",
    "conn_yields",
    "hash_power_level",
    "hash_bytes",
    "hash_is_expanding",
    "slab_reassign_rescues",
    "slab_reassign_chunk_rescues",
    "slab_reassign_evictions_nomem",
    "slab_reassign_inline_reclaim",
    "slab_reassign_busy_items",
    "slab_reassign_busy_deletes",
    "slab_reassign_running",
    "slabs_moved",
    "lru_crawler_running",
    "lru_crawler_starts",
    "malloc_fails",
    "log_worker_dropped",
    "log_worker_written",
    "log_watcher_skipped",
    "log_watcher_sent",
    "log_watchers",
    "unexpected_napi_ids",
    "round_robin_fallback",
    "bytes",
    "curr_items",
    "total_items",
    "slab_global_page_pool",
    "expired_unfetched",
    "evicted_unfetched",
    "evictions",
    "reclaimed",
    "crawler_reclaimed",
    "crawler_items_checked",
    "lrutail_reflocked",
];

#[test]
fn stats_prints_memcacheds_figures_in_its_order_and_nothing_else() {
    let server = TestServer::start();
    let mut stream = server.connect();
    let names: Vec<String> = figures(&ask(&mut stream, "stats\r\n"))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, MEMCACHED_STATS);
}

#[test]
fn stats_leaves_out_the_lru_crawler_figures_when_it_is_off() {
    let server = TestServer::with(
        ServerConfig {
            lru_crawler: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut stream = server.connect();
    let reply = ask(&mut stream, "stats\r\n");
    assert_eq!(figure(&reply, "lru_crawler_running"), None);
    // stats.t's server (-o no_lru_crawler): memcached's 83 figures.
    assert_eq!(figures(&reply).len(), 83);
    assert_eq!(figure(&reply, "get_expired").as_deref(), Some("0"));
    assert_eq!(figure(&reply, "get_flushed").as_deref(), Some("0"));
    assert_eq!(figure(&reply, "listen_disabled_num").as_deref(), Some("0"));
    let settings = ask(&mut stream, "stats settings\r\n");
    assert_eq!(figure(&settings, "lru_crawler").as_deref(), Some("no"));
    // lru-crawler.t: switched on at run time, both follow.
    assert_eq!(ask(&mut stream, "lru_crawler enable\r\n"), "OK\r\n");
    let settings = ask(&mut stream, "stats settings\r\n");
    assert_eq!(figure(&settings, "lru_crawler").as_deref(), Some("yes"));
    let reply = ask(&mut stream, "stats\r\n");
    assert_eq!(figure(&reply, "lru_crawler_running").as_deref(), Some("0"));
}

#[test]
fn stats_kura_holds_kuras_own_figures() {
    let server = TestServer::start();
    let mut stream = server.connect();
    let general = ask(&mut stream, "stats\r\n");
    assert_eq!(figure(&general, "kura_version"), None);
    let kura = ask(&mut stream, "stats kura\r\n");
    assert_eq!(
        figure(&kura, "kura_version").as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(figure(&kura, "engine").as_deref(), Some("memory"));
}

#[test]
fn stats_shows_idle_kicks_only_with_an_idle_timeout() {
    let server = TestServer::start();
    let reply = ask(&mut server.connect(), "stats\r\n");
    assert_eq!(figure(&reply, "idle_kicks"), None);
    let server = TestServer::with(
        ServerConfig {
            idle_timeout: Some(std::time::Duration::from_secs(60)),
            maxconns_fast: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let reply = ask(&mut server.connect(), "stats\r\n");
    assert_eq!(figure(&reply, "idle_kicks").as_deref(), Some("0"));
    // memcached counts refused connections only when it refuses them at once.
    assert_eq!(figure(&reply, "rejected_connections"), None);
}

#[test]
fn stats_settings_shows_memcacheds_settings_from_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "someone:secret\n").unwrap();
    let server = TestServer::with(
        ServerConfig {
            detail_delimiter: Some(b'#'),
            auth_file: Some(users.clone()),
            maxconns_fast: false,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut stream = server.connect();
    // -Y: a text connection logs in first, with a set.
    assert_eq!(
        ask(&mut stream, "set login 0 0 14\r\nsomeone secret\r\n"),
        "STORED\r\n"
    );
    let reply = ask(&mut stream, "stats settings\r\n");
    let get = |name: &str| figure(&reply, name).unwrap_or_else(|| panic!("no {name}"));
    assert_eq!(get("stat_key_prefix"), "#");
    // -D turns per-prefix counting on from the start, as in memcached.
    assert_eq!(get("detail_enabled"), "yes");
    assert_eq!(get("auth_enabled_sasl"), "no");
    // -Y makes every connection a text one, as memcached's ascii binding.
    assert_eq!(get("binding_protocol"), "ascii");
    assert_eq!(get("auth_enabled_ascii"), users.display().to_string());
    assert_eq!(get("maxconns_fast"), "no");
    assert_eq!(get("ssl_enabled"), "no");
    assert_eq!(get("ssl_chain_cert"), "(null)");
    assert_eq!(get("ssl_ciphers"), "NULL");
    assert_eq!(get("ssl_wbuf_size"), "16384");
    assert_eq!(get("ssl_min_version"), "tlsv1.2");
    assert_eq!(get("memory_file"), "(null)");
    let names: BTreeSet<String> = figures(&reply).into_iter().map(|(n, _)| n).collect();
    assert!(!names.contains("engine"), "kura's engine is in stats kura");
    assert_eq!(names.len(), figures(&reply).len(), "a name twice");
}

fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file)
}

/// A server with TLS settings whose only listener is plain (`notls:`), so
/// the test speaks plain text to it; the certificate files are copies in
/// `dir`, which the test may replace.
fn tls_server(dir: &Path, tls: TlsSettings) -> (TestServer, PathBuf, PathBuf) {
    let chain = dir.join("server_crt.pem");
    let key = dir.join("server_key.pem");
    std::fs::copy(data("tls_one_crt.pem"), &chain).unwrap();
    std::fs::copy(data("tls_one_key.pem"), &key).unwrap();
    let config = ServerConfig {
        listen: vec![ListenAddr {
            ip: IpAddr::from([127, 0, 0, 1]),
            port: None,
            no_tls: true,
        }],
        tls: Some(TlsSettings {
            chain_cert: Some(chain.clone()),
            key: Some(key.clone()),
            ..tls
        }),
        ..ServerConfig::default()
    };
    (
        TestServer::with(config, MemoryConfig::default()),
        chain,
        key,
    )
}

/// As `kura serve` resolves `-Z` without further `-o ssl_*`.
fn default_tls() -> TlsSettings {
    TlsSettings {
        key_format: 1,
        min_version: 2,
        wbuf_kib: 16,
        ..TlsSettings::default()
    }
}

#[test]
fn stats_settings_shows_the_tls_settings() {
    let dir = tempfile::tempdir().unwrap();
    let (server, chain, key) = tls_server(dir.path(), default_tls());
    let reply = ask(&mut server.connect(), "stats settings\r\n");
    let get = |name: &str| figure(&reply, name).unwrap_or_else(|| panic!("no {name}"));
    assert_eq!(get("ssl_enabled"), "yes");
    assert_eq!(get("ssl_session_cache"), "no");
    assert_eq!(get("ssl_kernel_tls"), "no");
    assert_eq!(get("ssl_chain_cert"), chain.display().to_string());
    assert_eq!(get("ssl_key"), key.display().to_string());
    assert_eq!(get("ssl_verify_mode"), "0");
    assert_eq!(get("ssl_keyformat"), "1");
    assert_eq!(get("ssl_ciphers"), "NULL");
    assert_eq!(get("ssl_ca_cert"), "NULL");
    assert_eq!(get("ssl_wbuf_size"), "16384");
    assert_eq!(get("ssl_min_version"), "tlsv1.2");

    let dir = tempfile::tempdir().unwrap();
    let (server, _, _) = tls_server(
        dir.path(),
        TlsSettings {
            wbuf_kib: 64,
            min_version: 3,
            session_cache: true,
            ciphers: Some("HIGH".into()),
            ..default_tls()
        },
    );
    let reply = ask(&mut server.connect(), "stats settings\r\n");
    let get = |name: &str| figure(&reply, name).unwrap_or_else(|| panic!("no {name}"));
    assert_eq!(get("ssl_wbuf_size"), "65536");
    assert_eq!(get("ssl_min_version"), "tlsv1.3");
    assert_eq!(get("ssl_session_cache"), "yes");
    assert_eq!(get("ssl_ciphers"), "HIGH");
}

#[test]
fn stats_shows_the_tls_figures_when_tls_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _, _) = tls_server(dir.path(), default_tls());
    let reply = ask(&mut server.connect(), "stats\r\n");
    // stats.t under SSL_TEST: memcached's figures and these two.
    assert_eq!(figure(&reply, "ssl_handshake_errors").as_deref(), Some("0"));
    // Seconds since the certificate was loaded, at start: 1 once a second's
    // boundary passed since, more on a slow machine.
    let since: u64 = figure(&reply, "time_since_server_cert_refresh")
        .expect("the figure is there")
        .parse()
        .unwrap();
    assert!(
        since <= 5,
        "{since} s since the server loaded its certificate"
    );
    // Sessions are counted only where they are cached.
    assert_eq!(figure(&reply, "ssl_new_sessions"), None);
    assert_eq!(figures(&reply).len(), MEMCACHED_STATS.len() + 2);

    let dir = tempfile::tempdir().unwrap();
    let (server, _, _) = tls_server(
        dir.path(),
        TlsSettings {
            session_cache: true,
            ..default_tls()
        },
    );
    let reply = ask(&mut server.connect(), "stats\r\n");
    assert_eq!(figure(&reply, "ssl_new_sessions").as_deref(), Some("0"));
}

#[test]
fn refresh_certs_reloads_the_files_and_says_why_it_could_not() {
    let dir = tempfile::tempdir().unwrap();
    let (server, chain, key) = tls_server(dir.path(), default_tls());
    let mut stream = server.connect();
    std::fs::copy(data("tls_two_crt.pem"), &chain).unwrap();
    std::fs::copy(data("tls_two_key.pem"), &key).unwrap();
    assert_eq!(ask(&mut stream, "refresh_certs\r\n"), "OK\r\n");
    // noreply: nothing on success; the next reply is the version's.
    assert_eq!(
        ask(&mut stream, "refresh_certs noreply\r\nversion\r\n"),
        "VERSION 1.6.18\r\n"
    );

    std::fs::write(&chain, "not a certificate\n").unwrap();
    let reply = ask(&mut stream, "refresh_certs\r\n");
    let expected = format!(
        "Error loading the certificate chain: {} : ",
        chain.display()
    );
    assert!(reply.starts_with(&expected), "{reply}");
    assert!(reply.ends_with("\r\n") && reply.matches("\r\n").count() == 1);

    std::fs::copy(data("tls_two_crt.pem"), &chain).unwrap();
    std::fs::remove_file(&key).unwrap();
    let reply = ask(&mut stream, "refresh_certs\r\n");
    let expected = format!("Error loading the key: {} : ", key.display());
    assert!(reply.starts_with(&expected), "{reply}");
    // A failure keeps the certificate in use, and serving goes on.
    assert_eq!(ask(&mut stream, "version\r\n"), "VERSION 1.6.18\r\n");
}

#[test]
fn time_since_server_cert_refresh_restarts_at_a_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _, _) = tls_server(dir.path(), default_tls());
    let mut stream = server.connect();
    let since = |stream: &mut TcpStream| -> u64 {
        figure(&ask(stream, "stats\r\n"), "time_since_server_cert_refresh")
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(ask(&mut stream, "debugtime 100\r\n"), "OK\r\n");
    assert!(since(&mut stream) >= 100);
    assert_eq!(ask(&mut stream, "refresh_certs\r\n"), "OK\r\n");
    assert!(since(&mut stream) < 100);
}

#[test]
fn refresh_certs_without_tls_says_so() {
    let server = TestServer::start();
    let mut stream = server.connect();
    assert_eq!(
        ask(&mut stream, "refresh_certs\r\n"),
        "Error TLS not enabled\r\n"
    );
}

#[test]
fn stats_detail_counts_gets_hits_sets_and_deletes_per_prefix() {
    let server = TestServer::start();
    let mut stream = server.connect();
    assert_eq!(ask(&mut stream, "stats detail dump\r\n"), "END\r\n");
    // Off: nothing is counted.
    ask(&mut stream, "get off:1\r\n");
    assert_eq!(ask(&mut stream, "stats detail dump\r\n"), "END\r\n");
    assert_eq!(ask(&mut stream, "stats detail on\r\n"), "OK\r\n");
    let settings = ask(&mut stream, "stats settings\r\n");
    assert_eq!(figure(&settings, "detail_enabled").as_deref(), Some("yes"));
    stream
        .write_all(b"set foo:123 0 0 6\r\nfooval\r\n")
        .unwrap();
    assert_eq!(read_at_least(&mut stream, 8), b"STORED\r\n");
    assert_eq!(
        ask(&mut stream, "stats detail dump\r\n"),
        "PREFIX foo get 0 hit 0 set 1 del 0\r\nEND\r\n"
    );
    ask(&mut stream, "get foo:123 foo:124 nodelimiter\r\n");
    stream.write_all(b"delete foo:125\r\n").unwrap();
    assert_eq!(read_at_least(&mut stream, 11), b"NOT_FOUND\r\n");
    ask(&mut stream, "get bar:1\r\n");
    // Meta commands are not counted, as in memcached.
    stream.write_all(b"mg foo:123 v\r\n").unwrap();
    assert_eq!(read_at_least(&mut stream, 14), b"VA 6\r\nfooval\r\n");
    assert_eq!(
        ask(&mut stream, "stats detail dump\r\n"),
        "PREFIX bar get 1 hit 0 set 0 del 0\r\nPREFIX foo get 2 hit 1 set 1 del 1\r\nEND\r\n"
    );
    // Counted on every worker: a second connection's gets add up.
    let mut other = server.connect();
    ask(&mut other, "get foo:123\r\n");
    assert!(ask(&mut stream, "stats detail dump\r\n").contains("PREFIX foo get 3 hit 2 "));
    assert_eq!(ask(&mut stream, "stats reset\r\n"), "RESET\r\n");
    assert_eq!(ask(&mut stream, "stats detail dump\r\n"), "END\r\n");
    assert_eq!(ask(&mut stream, "stats detail off\r\n"), "OK\r\n");
    ask(&mut stream, "get foo:123\r\n");
    assert_eq!(ask(&mut stream, "stats detail dump\r\n"), "END\r\n");
    assert_eq!(
        ask(&mut stream, "stats detail\r\n"),
        "CLIENT_ERROR usage: stats detail on|off|dump\r\n"
    );
}

#[test]
fn stats_detail_splits_at_the_configured_delimiter() {
    let server = TestServer::with(
        ServerConfig {
            detail_delimiter: Some(b'/'),
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut stream = server.connect();
    ask(&mut stream, "get a/b:c x:y\r\n");
    assert_eq!(
        ask(&mut stream, "stats detail dump\r\n"),
        "PREFIX a get 1 hit 0 set 0 del 0\r\nEND\r\n"
    );
}

/// A client that makes up prefixes cannot grow the server's memory
/// without bound: past --max-detail-prefixes a worker counts no new one,
/// and counts the requests it did not track; the ones it tracks go on.
#[test]
fn stats_detail_counts_at_most_the_configured_number_of_prefixes() {
    let server = TestServer::with(
        ServerConfig {
            threads: 1,
            detail_delimiter: Some(b':'),
            max_detail_prefixes: 2,
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let mut stream = server.connect();
    ask(&mut stream, "get a:1 b:1 c:1 d:1 a:2\r\n");
    assert_eq!(
        ask(&mut stream, "stats detail dump\r\n"),
        "PREFIX a get 2 hit 0 set 0 del 0\r\nPREFIX b get 1 hit 0 set 0 del 0\r\nEND\r\n"
    );
    let kura = ask(&mut stream, "stats kura\r\n");
    assert_eq!(figure(&kura, "detail_untracked").as_deref(), Some("2"));
}

/// `lru` settings kura's one list cannot take are refused with the
/// reason, not acknowledged; what `stats settings` shows stays true.
#[test]
fn lru_settings_kura_cannot_take_are_refused_with_the_reason() {
    let server = TestServer::start();
    let mut stream = server.connect();
    assert_eq!(
        ask(&mut stream, "lru mode segmented\r\n"),
        "ERROR kura's LRU has no segments\r\n"
    );
    assert_eq!(
        ask(&mut stream, "lru temp_ttl 100\r\n"),
        "ERROR temp_ttl is set at start (-o temporary_ttl)\r\n"
    );
    assert_eq!(ask(&mut stream, "lru mode flat\r\n"), "OK\r\n");
    let settings = ask(&mut stream, "stats settings\r\n");
    assert_eq!(figure(&settings, "lru_segmented").as_deref(), Some("no"));
    assert_eq!(figure(&settings, "temp_lru").as_deref(), Some("no"));
}

/// A binary request: magic, opcode, key length, no extras, the key as body.
fn binary_stat(key: &[u8]) -> Vec<u8> {
    let mut packet = vec![0x80, 0x10];
    packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
    packet.extend_from_slice(&[0, 0, 0, 0]);
    packet.extend_from_slice(&(key.len() as u32).to_be_bytes());
    packet.extend_from_slice(&[0; 12]);
    packet.extend_from_slice(key);
    packet
}

/// Reads binary responses until the empty one that ends a `stat`; returns
/// each one's (status, key, value).
fn read_binary_stats(stream: &mut TcpStream) -> Vec<(u16, Vec<u8>, Vec<u8>)> {
    let mut responses = Vec::new();
    loop {
        let mut header = [0u8; 24];
        stream.read_exact(&mut header).unwrap();
        assert_eq!(header[0], 0x81);
        let status = u16::from_be_bytes([header[6], header[7]]);
        let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let extras = usize::from(header[4]);
        let body = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
        let mut data = vec![0u8; body];
        stream.read_exact(&mut data).unwrap();
        let key = data[extras..extras + key_len].to_vec();
        let value = data[extras + key_len..].to_vec();
        let last = (key.is_empty() && value.is_empty()) || status != 0;
        responses.push((status, key, value));
        if last {
            return responses;
        }
    }
}

/// binary.t turns detail on with a binary `stat "detail on"` first thing;
/// memcached answers it with the empty response that ends a stat.
#[test]
fn binary_stat_detail_switches_and_dumps() {
    let server = TestServer::start();
    let mut stream = server.connect();
    stream.write_all(&binary_stat(b"detail on")).unwrap();
    assert_eq!(read_binary_stats(&mut stream), vec![(0, vec![], vec![])]);
    // A connection keeps the protocol of its first byte: the set goes on
    // a text one.
    assert_eq!(server.exchange(b"set k:1 0 0 1\r\nx\r\n", 8), b"STORED\r\n");
    stream.write_all(&binary_stat(b"detail dump")).unwrap();
    assert_eq!(
        read_binary_stats(&mut stream),
        vec![
            (
                0,
                b"detailed".to_vec(),
                b"PREFIX k get 0 hit 0 set 1 del 0\r\nEND\r\n".to_vec()
            ),
            (0, vec![], vec![]),
        ]
    );
    stream.write_all(&binary_stat(b"detail off")).unwrap();
    assert_eq!(read_binary_stats(&mut stream), vec![(0, vec![], vec![])]);
    stream.write_all(&binary_stat(b"detail sideways")).unwrap();
    assert_eq!(read_binary_stats(&mut stream)[0].0, 1, "key not found");
}

/// A binary request with extras, key and value.
fn binary_request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut packet = vec![0x80, opcode];
    packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
    packet.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    let body = extras.len() + key.len() + value.len();
    packet.extend_from_slice(&(body as u32).to_be_bytes());
    packet.extend_from_slice(&[0; 12]);
    packet.extend_from_slice(extras);
    packet.extend_from_slice(key);
    packet.extend_from_slice(value);
    packet
}

/// Reads one binary response: (opcode, status, value).
fn read_binary(stream: &mut TcpStream) -> (u8, u16, Vec<u8>) {
    let mut header = [0u8; 24];
    stream.read_exact(&mut header).unwrap();
    let body = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let skip = usize::from(header[4]) + usize::from(u16::from_be_bytes([header[2], header[3]]));
    let mut data = vec![0u8; body];
    stream.read_exact(&mut data).unwrap();
    let status = u16::from_be_bytes([header[6], header[7]]);
    (header[1], status, data[skip..].to_vec())
}

/// binary.t's "Too big": a value one byte over `-I` is refused with
/// "Too large." (status 3), and the value it meant to replace is gone.
#[test]
fn binary_set_over_the_item_size_limit_is_too_large_and_drops_the_old_value() {
    const SET: u8 = 0x01;
    const GET: u8 = 0x00;
    let server = TestServer::start();
    let mut stream = server.connect();
    let extras = [0u8, 0, 0, 10, 0, 0, 0, 10];
    stream
        .write_all(&binary_request(SET, &extras, b"toobig", b"not too big"))
        .unwrap();
    assert_eq!(read_binary(&mut stream), (SET, 0, vec![]));
    let big = vec![b'x'; 1024 * 1024 + 1];
    stream
        .write_all(&binary_request(SET, &extras, b"toobig", &big))
        .unwrap();
    assert_eq!(read_binary(&mut stream), (SET, 3, b"Too large.".to_vec()));
    stream
        .write_all(&binary_request(GET, &[], b"toobig", &[]))
        .unwrap();
    assert_eq!(read_binary(&mut stream), (GET, 1, b"Not found".to_vec()));
    // A value of exactly the limit is stored.
    let largest = vec![b'x'; 1024 * 1024];
    stream
        .write_all(&binary_request(SET, &extras, b"largest", &largest))
        .unwrap();
    assert_eq!(read_binary(&mut stream).1, 0);
}

/// The acceptor's figures as `stats` shows them (the acceptor sets them
/// when it leaves connections in the backlog, without `maxconns_fast`).
#[test]
fn stats_shows_when_the_acceptor_stopped_accepting() {
    use std::sync::atomic::Ordering;
    let server = TestServer::start();
    let mut stream = server.connect();
    let reply = ask(&mut stream, "stats\r\n");
    assert_eq!(figure(&reply, "accepting_conns").as_deref(), Some("1"));
    let connections = &server.handle().shared().connections;
    connections.not_accepting.store(true, Ordering::Relaxed);
    connections.listen_disabled.store(2, Ordering::Relaxed);
    connections
        .listen_disabled_us
        .store(1500, Ordering::Relaxed);
    let reply = ask(&mut stream, "stats\r\n");
    assert_eq!(figure(&reply, "accepting_conns").as_deref(), Some("0"));
    assert_eq!(figure(&reply, "listen_disabled_num").as_deref(), Some("2"));
    assert_eq!(
        figure(&reply, "time_in_listen_disabled_us").as_deref(),
        Some("1500")
    );
    // stats reset zeroes the counts, not the state.
    assert_eq!(ask(&mut stream, "stats reset\r\n"), "RESET\r\n");
    let reply = ask(&mut stream, "stats\r\n");
    assert_eq!(figure(&reply, "listen_disabled_num").as_deref(), Some("0"));
    assert_eq!(figure(&reply, "accepting_conns").as_deref(), Some("0"));
}

/// `stats conns`, as memcached shows its listening socket, an idle
/// connection, one sending a value and the one asking.
#[test]
fn stats_conns_shows_the_listener_and_each_connection_where_it_is() {
    let server = TestServer::start();
    let mut idle = server.connect();
    assert_eq!(ask(&mut idle, "version\r\n"), "VERSION 1.6.18\r\n");
    let mut sending = server.connect();
    sending.write_all(b"set foo 0 0 6\r\nfoo").unwrap();
    let mut asking = server.connect();
    let mut reply = String::new();
    for _ in 0..100 {
        reply = ask(&mut asking, "stats conns\r\n");
        if reply.contains("conn_nread") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let id_of = |stream: &TcpStream| {
        let addr = format!("tcp:{}", stream.local_addr().unwrap());
        figures(&reply)
            .into_iter()
            .find(|(name, value)| name.ends_with(":addr") && *value == addr)
            .map(|(name, _)| name.trim_end_matches(":addr").to_string())
            .unwrap_or_else(|| panic!("no {addr} in {reply}"))
    };
    let state = |id: String| figure(&reply, &format!("{id}:state")).unwrap();
    assert_eq!(state(id_of(&asking)), "conn_parse_cmd");
    assert_eq!(state(id_of(&idle)), "conn_read");
    assert_eq!(state(id_of(&sending)), "conn_nread");
    let listen = format!("tcp:{}", server.addr);
    assert_eq!(figure(&reply, "1:addr"), Some(listen.clone()));
    assert_eq!(figure(&reply, "1:state").as_deref(), Some("conn_listening"));
    assert_eq!(
        figure(&reply, &format!("{}:listen_addr", id_of(&idle))),
        Some(listen)
    );
}

/// The disk engine's figures are in `stats kura`; `stats` has memcached's
/// alone, as on the memory engine.
#[test]
fn the_disk_engines_figures_are_in_stats_kura() {
    let server = TestServer::disk();
    let mut stream = server.connect();
    let kura = ask(&mut stream, "stats kura\r\n");
    assert_eq!(figure(&kura, "engine").as_deref(), Some("disk"));
    let engine: Vec<String> = figures(&kura)
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("disk_"))
        .collect();
    assert!(engine.iter().any(|name| name == "disk_appends"), "{kura}");
    let names: Vec<String> = figures(&ask(&mut stream, "stats\r\n"))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, MEMCACHED_STATS);
    assert!(!engine.is_empty());
}

/// memcached's binary `stat` takes `reset` and `settings` by prefix, and a
/// group it does not know (bytes that are no text among them) is "not
/// found".
#[test]
fn binary_stat_groups_are_read_as_memcached_reads_them() {
    let server = TestServer::start();
    let mut stream = server.connect();
    stream.write_all(&binary_stat(b"resetX")).unwrap();
    assert_eq!(read_binary_stats(&mut stream), vec![(0, vec![], vec![])]);
    stream.write_all(&binary_stat(b"settingsX")).unwrap();
    let settings = read_binary_stats(&mut stream);
    assert!(
        (settings.iter()).any(|(status, key, _)| *status == 0 && key == b"maxbytes"),
        "{settings:?}"
    );
    // memcached without external storage: the text protocol's group is
    // empty (the transcripts check it), the binary one is not found.
    for unknown in [&b"nonsense"[..], b"\xff", b"extstore"] {
        stream.write_all(&binary_stat(unknown)).unwrap();
        assert_eq!(read_binary_stats(&mut stream)[0].0, 1, "{unknown:?}");
    }
}

/// memcached counts a prefix's set before it tries the item, so a binary
/// store refused as too large counts too (as it does over text).
#[test]
fn binary_stores_too_large_count_as_sets_of_their_prefix() {
    use kura_proto::binary::opcode;
    let server = TestServer::start();
    let mut stream = server.connect();
    stream.write_all(&binary_stat(b"detail on")).unwrap();
    read_binary_stats(&mut stream);
    let big = vec![b'B'; 2 * ServerConfig::default().max_item_size];
    for (op, extras) in [(opcode::SET, &[0u8; 8][..]), (opcode::APPEND, &[])] {
        assert_eq!(binary_call(&mut stream, op, b"zz:a", extras, &big).0, 0x03);
    }
    assert_eq!(
        binary_call(&mut stream, opcode::SET, b"zz:a", &[0; 8], b"v").0,
        0
    );
    stream.write_all(&binary_stat(b"detail dump")).unwrap();
    assert_eq!(
        read_binary_stats(&mut stream)[0].2,
        b"PREFIX zz get 0 hit 0 set 3 del 0\r\nEND\r\n"
    );
}

/// `stats slabs`: each class's command counts as memcached 1.6.18 names
/// them, counted by the class of the item a command found (a storage
/// command by the item it carries), and no `mem_requested` (memcached names
/// it in `stats items` only; Prometheus's exporter refuses it twice).
fn counts_commands_by_the_class_of_their_item(server: &TestServer) {
    let mut s = server.connect();
    let small = "x".repeat(100);
    let large = "y".repeat(5000);
    for request in [
        format!("set a 0 0 100\r\n{small}\r\n"),
        format!("set b 0 0 5000\r\n{large}\r\n"),
        "set c 0 0 1\r\n5\r\n".to_string(),
    ] {
        assert_eq!(ask(&mut s, &request), "STORED\r\n");
    }
    for _ in 0..3 {
        ask(&mut s, "get a\r\n");
    }
    ask(&mut s, "get b missing\r\n");
    ask(&mut s, "gat 100 a\r\n");
    assert_eq!(ask(&mut s, "touch b 100\r\n"), "TOUCHED\r\n");
    assert_eq!(ask(&mut s, "incr c 2\r\n"), "7\r\n");
    assert_eq!(ask(&mut s, "decr c 1\r\n"), "6\r\n");
    assert_eq!(ask(&mut s, "incr missing 1\r\n"), "NOT_FOUND\r\n");
    let gets = ask(&mut s, "gets a\r\n");
    let unique = gets.split_whitespace().nth(4).unwrap().to_string();
    let cas = |unique: &str| format!("cas a 0 0 100 {unique}\r\n{small}\r\n");
    assert_eq!(ask(&mut s, &cas("999999999")), "EXISTS\r\n");
    assert_eq!(ask(&mut s, &cas(&unique)), "STORED\r\n");
    assert_eq!(ask(&mut s, "delete b\r\n"), "DELETED\r\n");
    assert_eq!(ask(&mut s, "delete b\r\n"), "NOT_FOUND\r\n");

    let reply = ask(&mut s, "stats slabs\r\n");
    let mut totals = std::collections::BTreeMap::new();
    // The classes where each count is not 0.
    let mut classes_of = std::collections::BTreeMap::<String, BTreeSet<String>>::new();
    for (name, value) in figures(&reply) {
        let Some((class, field)) = name.split_once(':') else {
            continue;
        };
        assert_ne!(field, "mem_requested", "{reply}");
        let value: u64 = value.parse().unwrap();
        if value > 0 {
            classes_of
                .entry(field.to_string())
                .or_default()
                .insert(class.to_string());
        }
        *totals.entry(field.to_string()).or_insert(0) += value;
    }
    for (field, expected) in [
        ("get_hits", 5), // a's three gets and its gets, b's get (a gat is a touch)
        ("cmd_set", 5),  // the three sets and the two cas
        ("delete_hits", 1),
        ("incr_hits", 1),
        ("decr_hits", 1),
        ("cas_hits", 1),
        ("cas_badval", 1),
        ("touch_hits", 2), // the gat of a and the touch of b
    ] {
        assert_eq!(totals.get(field), Some(&expected), "{field} in {reply}");
    }
    // The general figures are the classes' sums, as memcached's: a gat is
    // counted as a touch there too, not as a get.
    let general = ask(&mut s, "stats\r\n");
    for field in ["get_hits", "touch_hits"] {
        let general_figure = figure(&general, field).map(|value| value.parse::<u64>().unwrap());
        assert_eq!(
            general_figure.as_ref(),
            totals.get(field),
            "{field} in {general}"
        );
    }
    // a's reads and its cas fall in one class, b's in another, c's in a
    // third: the counts follow the item's size.
    let one = |field: &str| classes_of[field].clone();
    assert_eq!(one("cas_hits"), one("cas_badval"));
    assert_eq!(one("incr_hits"), one("decr_hits"));
    assert_eq!(one("delete_hits").len(), 1);
    assert!(one("cas_hits").is_subset(&one("get_hits")));
    assert!(one("delete_hits").is_subset(&one("get_hits")));
    assert_eq!(one("get_hits").len(), 2, "{reply}");
    assert!(one("incr_hits").is_disjoint(&one("get_hits")));
}

/// As memcached counts them: a counter an incr creates is neither a hit
/// nor a miss, an append with a CAS is no compare-and-set, and a touching
/// read is a touch, not a get.
#[test]
fn created_counters_appends_with_a_cas_and_touches_are_counted_as_memcached_counts_them() {
    use kura_proto::binary::opcode;
    let server = TestServer::start();
    let mut s = server.connect();
    assert_eq!(ask(&mut s, "ma made N0 J5\r\n"), "HD\r\n");
    let mut extras = Vec::new();
    extras.extend_from_slice(&1u64.to_be_bytes()); // delta
    extras.extend_from_slice(&7u64.to_be_bytes()); // initial
    extras.extend_from_slice(&0u32.to_be_bytes()); // exptime: create
                                                   // A connection speaks the protocol of its first byte.
    let mut binary = server.connect();
    assert_eq!(
        binary_call(&mut binary, opcode::INCREMENT, b"also", &extras, b"").0,
        0
    );
    assert_eq!(ask(&mut s, "ma made\r\n"), "HD\r\n");
    assert_eq!(ask(&mut s, "ms made 1 MA C1\r\n1\r\n"), "EX\r\n");
    assert_eq!(ask(&mut s, "ms gone 1 C1\r\n1\r\n"), "NF\r\n");
    assert_eq!(ask(&mut s, "mg made T30 v\r\n"), "VA 1\r\n6\r\n");
    assert_eq!(ask(&mut s, "gat 30 gone\r\n"), "END\r\n");
    let stats = ask(&mut s, "stats\r\n");
    for (field, expected) in [
        ("incr_hits", "1"), // the second ma only
        ("incr_misses", "0"),
        ("cas_badval", "0"),
        ("cas_misses", "1"),
        ("cmd_get", "0"),
        ("get_hits", "0"),
        ("get_misses", "0"),
        ("cmd_touch", "2"),
        ("touch_hits", "1"),
        ("touch_misses", "1"),
    ] {
        assert_eq!(figure(&stats, field).as_deref(), Some(expected), "{field}");
    }
}

/// Meta commands count as memcached 1.6.18 counts them (the sequence, run
/// against it, gives these figures): `mg … T` that misses is a get miss,
/// `md` whose token differs a delete miss, `md … I` no delete hit, and
/// `cmd_meta` counts `me` alone.
#[test]
fn meta_commands_are_counted_as_memcached_counts_them() {
    let server = TestServer::start();
    let mut s = server.connect();
    assert_eq!(ask(&mut s, "ms x 1\r\n5\r\n"), "HD\r\n");
    assert_eq!(ask(&mut s, "mg y T30\r\n"), "EN\r\n");
    assert_eq!(ask(&mut s, "md x C99\r\n"), "EX\r\n");
    assert_eq!(ask(&mut s, "md x I\r\n"), "HD\r\n");
    assert!(ask(&mut s, "me x\r\n").starts_with("ME x "));
    let stats = ask(&mut s, "stats\r\n");
    for (field, expected) in [
        ("cmd_get", "1"),
        ("get_misses", "1"),
        ("cmd_touch", "0"),
        ("touch_misses", "0"),
        ("delete_misses", "1"),
        ("delete_hits", "0"),
        ("cmd_meta", "1"),
    ] {
        assert_eq!(figure(&stats, field).as_deref(), Some(expected), "{field}");
    }
    let slabs = ask(&mut s, "stats slabs\r\n");
    assert_eq!(figure(&slabs, "1:delete_hits").as_deref(), Some("0"));
}

/// `stats reset` zeroes what memcached zeroes: the command counts, the
/// engine's item counts (total_items, get_expired, …) and the classes'
/// counts in `stats slabs` and `stats items`; not the gauges.
fn a_reset_zeroes_the_counts_and_keeps_the_gauges(server: &TestServer) {
    let mut s = server.connect();
    assert_eq!(ask(&mut s, "set a 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(ask(&mut s, "set gone 0 -1 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(ask(&mut s, "get a\r\n"), "VALUE a 0 1\r\nx\r\nEND\r\n");
    assert_eq!(ask(&mut s, "get gone\r\n"), "END\r\n");
    let before = ask(&mut s, "stats\r\n");
    for (field, expected) in [
        ("total_items", "2"),
        ("get_expired", "1"),
        ("get_hits", "1"),
    ] {
        assert_eq!(figure(&before, field).as_deref(), Some(expected), "{field}");
    }
    assert_eq!(ask(&mut s, "stats reset\r\n"), "RESET\r\n");
    let after = ask(&mut s, "stats\r\n");
    for (field, expected) in [
        ("total_items", "0"),
        ("get_expired", "0"),
        ("get_hits", "0"),
        ("cmd_get", "0"),
    ] {
        assert_eq!(figure(&after, field).as_deref(), Some(expected), "{field}");
    }
    assert_eq!(figure(&after, "curr_items"), figure(&before, "curr_items"));
    let slabs = ask(&mut s, "stats slabs\r\n");
    for (name, value) in figures(&slabs) {
        if name.ends_with(":get_hits") || name.ends_with(":cmd_set") {
            assert_eq!(value, "0", "{name} in {slabs}");
        }
    }
    // Counting goes on from there.
    assert_eq!(ask(&mut s, "set b 0 0 1\r\ny\r\n"), "STORED\r\n");
    let again = ask(&mut s, "stats\r\n");
    assert_eq!(figure(&again, "total_items").as_deref(), Some("1"));
}

#[test]
fn a_reset_zeroes_the_counts_and_keeps_the_gauges_on_the_memory_engine() {
    a_reset_zeroes_the_counts_and_keeps_the_gauges(&TestServer::start());
}

#[test]
fn a_reset_zeroes_the_counts_and_keeps_the_gauges_on_the_disk_engine() {
    a_reset_zeroes_the_counts_and_keeps_the_gauges(&TestServer::disk());
}

/// `stats items` lists the classes that hold items, as memcached's
/// `item_stats` does: one emptied is left out.
fn stats_items_leaves_out_a_class_that_holds_nothing(server: &TestServer) {
    let mut s = server.connect();
    let large = "y".repeat(5000);
    assert_eq!(ask(&mut s, "set a 0 0 1\r\nx\r\n"), "STORED\r\n");
    assert_eq!(
        ask(&mut s, &format!("set b 0 0 5000\r\n{large}\r\n")),
        "STORED\r\n"
    );
    let numbered = |reply: &str| -> Vec<String> {
        (figures(reply).into_iter())
            .filter(|(name, _)| name.ends_with(":number"))
            .map(|(name, value)| format!("{name} {value}"))
            .collect()
    };
    let both = numbered(&ask(&mut s, "stats items\r\n"));
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(ask(&mut s, "delete b\r\n"), "DELETED\r\n");
    let one = numbered(&ask(&mut s, "stats items\r\n"));
    assert_eq!(one, vec![both[0].clone()]);
    assert_eq!(ask(&mut s, "delete a\r\n"), "DELETED\r\n");
    assert_eq!(ask(&mut s, "stats items\r\n"), "END\r\n");
}

#[test]
fn stats_items_leaves_out_empty_classes_on_the_memory_engine() {
    stats_items_leaves_out_a_class_that_holds_nothing(&TestServer::start());
}

#[test]
fn stats_items_leaves_out_empty_classes_on_the_disk_engine() {
    stats_items_leaves_out_a_class_that_holds_nothing(&TestServer::disk());
}

#[test]
fn stats_slabs_counts_commands_by_class_on_the_memory_engine() {
    counts_commands_by_the_class_of_their_item(&TestServer::start());
}

#[test]
fn stats_slabs_counts_commands_by_class_on_the_disk_engine() {
    counts_commands_by_the_class_of_their_item(&TestServer::disk());
}
