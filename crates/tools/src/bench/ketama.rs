//! libmemcached-compatible ketama consistent hashing: which server a key goes to.
//!
//! Reproduces libmemcached 1.1.4 (Debian bookworm `libmemcached11` /
//! `libmemcached-dev` 1.1.4-1, "libmemcached-awesome"; `src/libmemcached/hosts.cc`
//! `update_continuum()` and `hash.cc` `dispatch_host()`), checked against
//! `ketama_vectors.txt`, which `ketama_vectors.c` produces from the installed
//! library.
//!
//! [`Continuum::new`] reproduces [`Mode::Consistent`], the common setup
//!
//! ```c
//! memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_DISTRIBUTION,
//!                        MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
//! ```
//!
//! with `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED` off, the default
//! `MEMCACHED_BEHAVIOR_HASH` (`MEMCACHED_HASH_DEFAULT`, Jenkins one-at-a-time),
//! every server added with weight 0 or 1 (`memcached_server_add`), `SORT_HOSTS`
//! off, no auto-eject and no namespace hashing. In 1.1.4
//! `memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA, 1)` does exactly the
//! same (it sets the distribution only; it does *not* switch the hash to MD5 as
//! libmemcached 0.x did), so this mode covers it too.
//!
//! Algorithm of [`Mode::Consistent`] / [`Mode::ConsistentMd5`]:
//! * Each server gets 100 points (`MEMCACHED_POINTS_PER_SERVER`), one hash per
//!   point. Point `i` (0..=99) is `hash("{host}-{i}")` when the port is 11211
//!   (`MEMCACHED_DEFAULT_PORT`) and `hash("{host}:{port}-{i}")` otherwise; `host`
//!   is the host string exactly as given (never resolved).
//! * `hash` is the key hash (`MEMCACHED_BEHAVIOR_HASH`), the same function for
//!   points and keys: one-at-a-time for `Consistent`, MD5 for `ConsistentMd5`
//!   (`MEMCACHED_BEHAVIOR_HASH = MEMCACHED_HASH_MD5`). `MEMCACHED_BEHAVIOR_KETAMA_HASH`
//!   has no effect on this mode in 1.1.4.
//! * one-at-a-time reads the key bytes as *signed* `char` (x86-64), so a byte
//!   >= 0x80 is added as `0xFFFFFF00 | byte`.
//! * MD5 as a 32-bit hash is the first 4 digest bytes, little-endian.
//!
//! Algorithm of [`Mode::KetamaWeighted`] (`MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED = 1`,
//! the libketama-compatible mode: PHP's `Memcached::OPT_LIBKETAMA_COMPATIBLE`,
//! pylibmc's `ketama_weighted`; it sets HASH = KETAMA_HASH = MD5 and
//! distribution `CONSISTENT_WEIGHTED`), with all weights equal:
//! * points per server = `floor(f32(1/n) * 160 / 4 * n + 1e-10) * 4` computed in
//!   `f32` (n = number of servers): 160 usually, but 156 for e.g. n = 25.
//! * the same `"{host}-{i}"` / `"{host}:{port}-{i}"` strings, `i` in
//!   0..points/4, each MD5-digested once and giving 4 points: digest bytes
//!   `4j..4j+4` as a little-endian `u32`, j = 0..3.
//! * keys are hashed with MD5 (first 4 bytes, little-endian).
//!
//! All modes: points are sorted by (value, server index); a key goes to the
//! first point whose value is >= the key's hash, wrapping to the first point
//! past the end. With a single server every key goes to it (libmemcached
//! skips hashing).
//!
//! Uses the `md-5` crate (RustCrypto, imported as `md5`), checked with 0.10.6.

use md5::{Digest, Md5};

/// `MEMCACHED_DEFAULT_PORT`.
const DEFAULT_PORT: u16 = 11211;
/// `MEMCACHED_POINTS_PER_SERVER`.
const POINTS_PER_SERVER: u32 = 100;
/// `MEMCACHED_POINTS_PER_SERVER_KETAMA`.
const POINTS_PER_SERVER_KETAMA: u32 = 160;

/// Which libmemcached 1.1.4 configuration to reproduce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// `DISTRIBUTION = CONSISTENT_KETAMA` (or `BEHAVIOR_KETAMA = 1`), default
    /// one-at-a-time hash, not weighted. Used by [`Continuum::new`].
    #[default]
    Consistent,
    /// As [`Mode::Consistent`] plus `MEMCACHED_BEHAVIOR_HASH = MEMCACHED_HASH_MD5`.
    ConsistentMd5,
    /// `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED = 1` (libketama-compatible), equal weights.
    KetamaWeighted,
}

/// The ring of points built from a server list.
#[derive(Clone, Debug)]
pub struct Continuum {
    /// `(hash value, server index)`, sorted.
    points: Vec<(u32, u32)>,
    servers: usize,
    mode: Mode,
}

impl Continuum {
    /// Builds the [`Mode::Consistent`] continuum for `servers` ("host:port",
    /// "host" for port 11211, or "[v6addr]:port").
    ///
    /// # Panics
    /// If `servers` is empty or a port is not a number.
    pub fn new(servers: &[String]) -> Continuum {
        Continuum::with_mode(servers, Mode::Consistent)
    }

    /// Builds the continuum for `servers` in the given libmemcached mode.
    ///
    /// # Panics
    /// If `servers` is empty or a port is not a number.
    pub fn with_mode(servers: &[String], mode: Mode) -> Continuum {
        assert!(!servers.is_empty(), "ketama: the server list is empty");
        let n = servers.len();
        let mut points = Vec::new();
        for (index, server) in servers.iter().enumerate() {
            let (host, port) = split_host_port(server);
            let index = index as u32;
            let point_name = |i: u32| -> String {
                if port == DEFAULT_PORT {
                    format!("{host}-{i}")
                } else {
                    format!("{host}:{port}-{i}")
                }
            };
            match mode {
                Mode::Consistent | Mode::ConsistentMd5 => {
                    for i in 0..POINTS_PER_SERVER {
                        let value = key_hash(mode, point_name(i).as_bytes());
                        points.push((value, index));
                    }
                }
                Mode::KetamaWeighted => {
                    for i in 0..weighted_points_per_server(n) / 4 {
                        let digest = Md5::digest(point_name(i).as_bytes());
                        for j in 0..4 {
                            let b = &digest[4 * j..4 * j + 4];
                            points.push((u32::from_le_bytes([b[0], b[1], b[2], b[3]]), index));
                        }
                    }
                }
            }
        }
        points.sort_unstable();
        Continuum {
            points,
            servers: n,
            mode,
        }
    }

    /// Index into the server list given to the constructor that `key` maps to.
    pub fn server_for(&self, key: &[u8]) -> usize {
        if self.servers == 1 {
            return 0;
        }
        let hash = key_hash(self.mode, key);
        let i = self.points.partition_point(|&(value, _)| value < hash);
        let (_, server) = self.points.get(i).unwrap_or(&self.points[0]);
        *server as usize
    }

    /// The mode this continuum was built for.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

/// Points per server of the weighted mode with `n` equally weighted servers,
/// computed in `f32` exactly as `update_continuum()` does.
fn weighted_points_per_server(n: usize) -> u32 {
    let live = n as f32;
    let pct = 1.0f32 / live;
    let x = pct * POINTS_PER_SERVER_KETAMA as f32 / 4.0 * live + 0.000_000_000_1f32;
    (x.floor() as u32) * 4
}

fn key_hash(mode: Mode, key: &[u8]) -> u32 {
    match mode {
        Mode::Consistent => one_at_a_time(key),
        Mode::ConsistentMd5 | Mode::KetamaWeighted => {
            let d = Md5::digest(key);
            u32::from_le_bytes([d[0], d[1], d[2], d[3]])
        }
    }
}

/// libhashkit's `hashkit_one_at_a_time` (bytes read as signed `char`).
fn one_at_a_time(key: &[u8]) -> u32 {
    let mut value: u32 = 0;
    for &b in key {
        value = value.wrapping_add(b as i8 as i32 as u32);
        value = value.wrapping_add(value << 10);
        value ^= value >> 6;
    }
    value = value.wrapping_add(value << 3);
    value ^= value >> 11;
    value.wrapping_add(value << 15)
}

/// Splits "host:port", "[v6]:port", "host" or a bare IPv6 address. A missing or
/// zero port is 11211 and an empty host is "localhost", as in
/// `memcached_server_add()`.
fn split_host_port(server: &str) -> (&str, u16) {
    let (host, port) = if let Some(rest) = server.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => (server, None),
        }
    } else {
        match server.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            _ => (server, None),
        }
    };
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(0) => DEFAULT_PORT,
            Ok(p) => p,
            Err(_) => panic!("ketama: bad port in server address {server:?}"),
        },
    };
    let host = if host.is_empty() { "localhost" } else { host };
    (host, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTORS: &str = include_str!("ketama_vectors.txt");

    fn mode_of(name: &str) -> Mode {
        match name {
            "consistent" | "behavior_ketama" => Mode::Consistent,
            "consistent_md5" => Mode::ConsistentMd5,
            "ketama_weighted" => Mode::KetamaWeighted,
            other => panic!("unknown mode {other:?}"),
        }
    }

    fn unhex(s: &str) -> Vec<u8> {
        s.as_bytes()
            .chunks(2)
            .map(|pair| {
                let pair = std::str::from_utf8(pair).expect("ascii hex");
                assert_eq!(pair.len(), 2, "odd hex length: {s:?}");
                u8::from_str_radix(pair, 16).expect("hex")
            })
            .collect()
    }

    #[test]
    fn matches_libmemcached_vectors() {
        let mut cache: Vec<(Mode, String, Continuum)> = Vec::new();
        let (mut checked, mut failed) = (0usize, Vec::new());
        for (lineno, line) in VECTORS.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (mut mode, mut servers, mut key, mut expected) = (None, None, None, None);
            for field in line.split(' ') {
                let (name, value) = field.split_once('=').expect("name=value field");
                match name {
                    "mode" => mode = Some(mode_of(value)),
                    "servers" => servers = Some(value.to_string()),
                    "key" => key = Some(value.as_bytes().to_vec()),
                    "keyhex" => key = Some(unhex(value)),
                    "server" => expected = Some(value.parse::<usize>().expect("server index")),
                    other => panic!("line {}: unknown field {other:?}", lineno + 1),
                }
            }
            let (mode, servers, key, expected) = (
                mode.expect("mode"),
                servers.expect("servers"),
                key.expect("key"),
                expected.expect("server"),
            );
            let pos = match cache
                .iter()
                .position(|(m, s, _)| *m == mode && *s == servers)
            {
                Some(pos) => pos,
                None => {
                    let list: Vec<String> = servers.split(',').map(str::to_string).collect();
                    cache.push((mode, servers.clone(), Continuum::with_mode(&list, mode)));
                    cache.len() - 1
                }
            };
            let got = cache[pos].2.server_for(&key);
            checked += 1;
            if got != expected {
                failed.push(format!("line {}: got {got}: {line}", lineno + 1));
            }
        }
        assert!(checked > 5000, "only {checked} vector lines");
        assert!(
            failed.is_empty(),
            "{} of {checked} vector lines differ:\n{}",
            failed.len(),
            failed
                .iter()
                .take(20)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    #[test]
    fn new_is_consistent_mode() {
        let servers: Vec<String> = (1..=3).map(|p| format!("127.0.0.1:1121{p}")).collect();
        let a = Continuum::new(&servers);
        let b = Continuum::with_mode(&servers, Mode::Consistent);
        assert_eq!(a.mode(), Mode::Consistent);
        for i in 0..200 {
            let key = format!("key:{i}");
            assert_eq!(a.server_for(key.as_bytes()), b.server_for(key.as_bytes()));
        }
    }

    #[test]
    fn weighted_points_follow_f32_arithmetic() {
        assert_eq!(weighted_points_per_server(1), 160);
        assert_eq!(weighted_points_per_server(3), 160);
        assert_eq!(weighted_points_per_server(25), 156);
    }

    #[test]
    fn host_port_parsing() {
        assert_eq!(split_host_port("10.0.1.1:11211"), ("10.0.1.1", 11211));
        assert_eq!(split_host_port("cache-a:11300"), ("cache-a", 11300));
        assert_eq!(split_host_port("cache-a"), ("cache-a", 11211));
        assert_eq!(split_host_port("cache-a:0"), ("cache-a", 11211));
        assert_eq!(split_host_port("[::1]:11212"), ("::1", 11212));
        assert_eq!(split_host_port("::1"), ("::1", 11211));
        assert_eq!(split_host_port(":11212"), ("localhost", 11212));
    }

    #[test]
    fn one_at_a_time_signed_bytes() {
        // Known values: empty key hashes to 0; a byte >= 0x80 differs from its
        // zero-extended reading.
        assert_eq!(one_at_a_time(b""), 0);
        let signed = one_at_a_time(&[0xff]);
        let mut v: u32 = 0xff;
        v = v.wrapping_add(v << 10);
        v ^= v >> 6;
        v = v.wrapping_add(v << 3);
        v ^= v >> 11;
        v = v.wrapping_add(v << 15);
        assert_ne!(signed, v);
    }
}
