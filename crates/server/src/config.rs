//! The server's settings, resolved from memcached-style flags by `kura serve`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// Which protocols a listener accepts (memcached's `-B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProtocolChoice {
    /// Decided per connection by its first byte.
    Auto,
    Ascii,
    Binary,
}

impl ProtocolChoice {
    /// memcached's wording in `stats settings`.
    pub fn binding_name(self) -> &'static str {
        match self {
            ProtocolChoice::Auto => "auto-negotiate",
            ProtocolChoice::Ascii => "ascii",
            ProtocolChoice::Binary => "binary",
        }
    }
}

/// One `-l` entry: `ip`, `ip:port`, `[ipv6]:port`, each optionally behind
/// `notls:` (a plain listener on a server with `-Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ListenAddr {
    pub ip: IpAddr,
    /// None: the server's `-p` port.
    pub port: Option<u16>,
    /// Plain TCP even when TLS is on.
    pub no_tls: bool,
}

impl ListenAddr {
    pub fn new(ip: IpAddr) -> Self {
        ListenAddr {
            ip,
            port: None,
            no_tls: false,
        }
    }
}

/// As it was given to `-l`.
impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.no_tls {
            f.write_str("notls:")?;
        }
        match self.port {
            Some(port) => write!(f, "{}", std::net::SocketAddr::new(self.ip, port)),
            None => write!(f, "{}", self.ip),
        }
    }
}

impl std::str::FromStr for ListenAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (no_tls, rest) = match text.strip_prefix("notls:") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let bad = || format!("'{text}' is not an address, address:port or notls:address:port");
        let (ip, port) = if let Ok(ip) = rest.parse::<IpAddr>() {
            (ip, None)
        } else {
            let addr: std::net::SocketAddr = rest.parse().map_err(|_| bad())?;
            (addr.ip(), Some(addr.port()))
        };
        Ok(ListenAddr { ip, port, no_tls })
    }
}

/// Everything the network server needs to know.
#[derive(Debug, Clone, Serialize)]
pub struct ServerConfig {
    /// Addresses to listen on (`-l`); empty when only a Unix socket is used.
    pub listen: Vec<ListenAddr>,
    /// TCP port (`-p`); 0 picks a free port (tests).
    pub port: u16,
    /// A Unix-domain socket instead of TCP (`-s`).
    pub unix_socket: Option<PathBuf>,
    /// Permissions of the Unix socket (`-a`, octal).
    pub unix_mask: u32,
    /// Worker threads (`-t`).
    pub threads: usize,
    /// Most simultaneous connections (`-c`); more are refused with an error line.
    pub max_connections: usize,
    /// Largest value (`-I`).
    pub max_item_size: usize,
    /// The most one request's reply may hold (`--max-reply`; its first
    /// value always goes): a multi-key get past it answers `SERVER_ERROR out
    /// of memory writing get response`, as memcached does when it cannot
    /// allocate one, instead of copying every value asked for into memory.
    pub max_reply_bytes: usize,
    /// The most bytes all connections together may hold past their first
    /// 64 KiB each, in requests not yet whole and replies not yet read
    /// (`--max-buffered`; 0: no limit): past it, the connections holding
    /// such bytes are closed (`held_buffers.rs`).
    pub max_buffered_bytes: usize,
    /// The most replicas fed at once (`--max-replicas`): each feed runs on
    /// a thread of its own (a kura replica's, two).
    pub max_replicas: usize,
    /// Report and check CAS values (`-C` turns this off).
    pub cas_enabled: bool,
    /// memcached's `-B`.
    pub protocol: ProtocolChoice,
    /// Requests served per connection before yielding to others (`-R`).
    pub requests_per_event: usize,
    /// Close connections idle this long (`-o idle_timeout`); None keeps them.
    #[serde(with = "optional_seconds")]
    pub idle_timeout: Option<Duration>,
    /// Allow the `shutdown` command (`-A`).
    pub shutdown_command: bool,
    /// Allow `flush_all` (`-F` turns it off).
    pub flush_enabled: bool,
    /// Listen backlog (`-b`).
    pub backlog: i32,
    /// `-v` count; shown by `stats settings`.
    pub verbosity: u8,
    /// Smallest chunk and growth factor (`-n`, `-f`): the size-class geometry
    /// shown by `stats slabs`.
    pub chunk_size: usize,
    pub growth_factor: f64,
    /// How often background upkeep (expiry reclaim) runs.
    #[serde(with = "humantime_ms")]
    pub maintenance_interval: Duration,
    /// Name of the storage engine, for `stats settings`.
    pub engine: String,
    /// UDP port (`-U`); None is off, Some(0) any free port.
    pub udp_port: Option<u16>,
    /// A port speaking Tokyo Tyrant's binary protocol besides memcached's
    /// (`--tyrant-port`); None is off, Some(0) any free port.
    pub tyrant_port: Option<u16>,
    /// The database that port serves (`--tyrant-db`).
    pub tyrant_db: TyrantDatabase,
    /// Follow this master (`host:port`, its memcached port) from the start
    /// (`--replica-of`); the server is then a read-only replica.
    pub replica_of: Option<String>,
    /// How `replica_of` is followed.
    pub replica_protocol: MasterProtocol,
    /// Dual master: the peers (`host:port`, their memcached ports) whose
    /// writes this server takes, as they take its (`--peer`).
    pub peers: Vec<String>,
    /// HandlerSocket's read-only port (`--hs-read-port`, 9998 by
    /// convention); None is off, Some(0) any free port.
    pub hs_read_port: Option<u16>,
    /// HandlerSocket's read-write port (`--hs-write-port`, 9999).
    pub hs_write_port: Option<u16>,
    /// The secret `A 1 <key>` must give on the read-only port
    /// (`--hs-secret`; None: no authentication).
    #[serde(skip)]
    pub hs_read_secret: Option<String>,
    /// The same for the read-write port (`--hs-write-secret`).
    #[serde(skip)]
    pub hs_write_secret: Option<String>,
    /// Over the connection limit, refuse new connections at once with an
    /// error line (`-o maxconns_fast`, memcached's default) rather than
    /// letting them wait in the backlog.
    pub maxconns_fast: bool,
    /// `stats cachedump` and `lru_crawler metadump` (`-X` turns them off).
    pub dumping_enabled: bool,
    /// The `watch` command (`-W` turns it off).
    pub watch_enabled: bool,
    /// The LRU crawler's commands (`-o no_lru_crawler` turns them off).
    pub lru_crawler: bool,
    /// The memory engine's background sweep for expired items, which does
    /// the work of memcached's LRU maintainer and automatic crawls
    /// (`-o no_lru_maintainer` and `-o no_modern` turn it off, as they turn
    /// those off in memcached).
    pub lru_maintainer: bool,
    /// memcached's legacy strict LRU, as `-o no_modern` asks: one list,
    /// evicted from its tail, a read moving its item at most once a minute.
    /// Otherwise kura's striped lists with a second chance for read items.
    pub legacy_lru: bool,
    /// `-o temporary_ttl`: items stored with at most this many seconds to
    /// live are left to expire rather than evicted (memcached's TEMP LRU).
    pub temporary_ttl: Option<u32>,
    /// `-o hashpower`: the hash table's starting size as a power of two, as
    /// memcached reports it (`hash_power_level`); 0 for memcached's default, 16.
    pub hash_power_init: u32,
    /// Per-prefix statistics from the start, split at this byte (`-D`).
    pub detail_delimiter: Option<u8>,
    /// The most prefixes `stats detail` counts per worker (0: no limit);
    /// requests for others are counted as `detail_untracked`.
    pub max_detail_prefixes: usize,
    /// What a watcher may have waiting before events are dropped
    /// (`-o watcher_logbuf_size`, in KiB there).
    pub watcher_buffer_bytes: usize,
    /// Most memory for connections' read buffers together (`-o
    /// read_buf_mem_limit`, MiB there); 0 is unlimited.
    pub read_buffer_limit: usize,
    /// TLS on the listeners (`-Z` with `-o ssl_*`).
    pub tls: Option<TlsSettings>,
    /// Text-protocol logins against this `user:password` file (`-Y`).
    pub auth_file: Option<PathBuf>,
    /// SASL on the binary protocol (`-S`), against this `user:password`
    /// file (`$MEMCACHED_SASL_PWDB`, else `-Y`'s).
    pub sasl_users_file: Option<PathBuf>,
    pub sasl: bool,
    /// Where a graceful shutdown keeps the memory engine's items for the
    /// next start (`-e`); shown by `stats settings`.
    pub memory_file: Option<PathBuf>,
}

/// The replication protocol a master is followed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MasterProtocol {
    /// kura's own (`replicate`): the replica's log is the master's.
    Kura,
    /// Tokyo Tyrant's (`repl`): a ttserver master's update-log messages,
    /// redone here as requests.
    TokyoTyrant,
    /// kura's if the master speaks it, else Tokyo Tyrant's (`setmst`,
    /// `--mhost`: the master may be a ttserver).
    Either,
}

/// memcached's `-o ssl_*` settings.
/// The one database `--tyrant-port` serves, as a ttserver serves one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum TyrantDatabase {
    /// A hash database: memcached's items (`--tyrant-db hash`).
    Hash,
    /// A B+ tree database: keys in order, kept as the rows of the table
    /// NAME with one column, `value` (`--tyrant-db btree:NAME`).
    Btree(String),
    /// A table database: the named table (`--tyrant-db table:NAME`).
    Table(String),
}

impl std::str::FromStr for TyrantDatabase {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.split_once(':') {
            None if text == "hash" => Ok(TyrantDatabase::Hash),
            Some(("table", name)) if !name.is_empty() && name.len() <= 255 => {
                Ok(TyrantDatabase::Table(name.to_string()))
            }
            Some(("btree", name)) if !name.is_empty() && name.len() <= 255 => {
                Ok(TyrantDatabase::Btree(name.to_string()))
            }
            Some(("table" | "btree", _)) => Err("a name is 1 to 255 bytes".to_string()),
            _ => Err(format!(
                "--tyrant-db {text}: expected hash (memcached's items), btree:NAME or table:NAME"
            )),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct TlsSettings {
    /// Certificate chain, PEM (`ssl_chain_cert`).
    pub chain_cert: Option<PathBuf>,
    /// Private key (`ssl_key`); PEM unless `key_format` says DER.
    pub key: Option<PathBuf>,
    /// OpenSSL's numbers, as memcached takes them: 1 PEM, 2 DER (`ssl_keyformat`).
    pub key_format: u8,
    /// 0 none, 1 request, 2 require, 3 once (`ssl_verify_mode`).
    pub verify_mode: u8,
    /// CAs that client certificates must chain to (`ssl_ca_cert`).
    pub ca_cert: Option<PathBuf>,
    /// OpenSSL cipher string (`ssl_ciphers`), kept for `stats settings`.
    pub ciphers: Option<String>,
    /// Resume sessions from a server-side cache (`ssl_session_cache`).
    pub session_cache: bool,
    /// Lowest protocol: 0 TLSv1.0 .. 3 TLSv1.3 (`ssl_min_version`).
    pub min_version: u8,
    /// Per-connection TLS output buffer, KiB (`ssl_wbuf_size`).
    pub wbuf_kib: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![ListenAddr::new(IpAddr::from([127, 0, 0, 1]))],
            port: 11211,
            unix_socket: None,
            unix_mask: 0o700,
            threads: std::thread::available_parallelism().map_or(4, |n| n.get()),
            max_connections: 16384,
            max_item_size: 1024 * 1024,
            max_reply_bytes: 64 << 20,
            max_buffered_bytes: 256 << 20,
            max_replicas: 64,
            cas_enabled: true,
            protocol: ProtocolChoice::Auto,
            requests_per_event: 20,
            idle_timeout: None,
            shutdown_command: false,
            flush_enabled: true,
            backlog: 1024,
            verbosity: 0,
            chunk_size: 48,
            growth_factor: 1.25,
            maintenance_interval: Duration::from_millis(100),
            engine: "memory".to_string(),
            udp_port: None,
            tyrant_port: None,
            tyrant_db: TyrantDatabase::Hash,
            replica_of: None,
            replica_protocol: MasterProtocol::Kura,
            peers: Vec::new(),
            hs_read_port: None,
            hs_write_port: None,
            hs_read_secret: None,
            hs_write_secret: None,
            maxconns_fast: true,
            dumping_enabled: true,
            watch_enabled: true,
            lru_crawler: true,
            lru_maintainer: true,
            legacy_lru: false,
            temporary_ttl: None,
            hash_power_init: 0,
            detail_delimiter: None,
            max_detail_prefixes: 10_000,
            watcher_buffer_bytes: 256 * 1024,
            read_buffer_limit: 0,
            tls: None,
            auth_file: None,
            sasl_users_file: None,
            sasl: false,
            memory_file: None,
        }
    }
}

mod optional_seconds {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(value.map_or(0, |d| d.as_secs()))
    }
}

mod humantime_ms {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}ms", value.as_millis()))
    }
}
