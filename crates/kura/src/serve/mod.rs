//! `kura serve`: memcached's command-line flags, validated into the server's
//! and the engine's configuration, then the server itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use clap::{ArgAction, Args, ValueEnum};
use serde::Serialize;

use kura_server::{ListenAddr, MasterProtocol, ProtocolChoice, ServerConfig};
use kura_store::memory::DEFAULT_HASH_POWER;
use kura_store::warm::{self, Loaded};
use kura_store::{
    DiskConfig, DiskStore, LogRetention, MemoryConfig, MemoryStore, MultiPrimary, SizeClasses,
    Store, SyncPolicy,
};

use crate::output::outln;
use crate::Failure;

mod extended;

const MIB: usize = 1024 * 1024;
/// memcached's bounds on `-I`.
const MIN_ITEM_SIZE: usize = 1024;
const MAX_ITEM_SIZE: usize = kura_store::MAX_VALUE_BYTES;

/// The flags as typed; `resolve` checks them and fills in defaults.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// TCP port to listen on (0: no TCP; -1: any free port) [default: 11211,
    /// or -U's port when only -U is given, as memcached does].
    #[arg(short = 'p', long = "port", allow_negative_numbers = true)]
    port: Option<i32>,
    /// Interfaces to listen on, comma-separated (default 127.0.0.1: safer than memcached's all-interfaces).
    #[arg(short = 'l', long = "listen", default_value = "127.0.0.1")]
    listen: String,
    /// Memory limit in megabytes (or with a k/m/g suffix): the memory engine's
    /// items (default 64); the disk engine's resident memory, its writes
    /// waiting to be applied and the mapped pages it holds (default 1024).
    #[arg(short = 'm', long = "memory-limit")]
    memory_limit: Option<String>,
    /// Most simultaneous connections.
    #[arg(short = 'c', long = "conn-limit", default_value_t = 16384)]
    conn_limit: usize,
    /// Worker threads (default: number of cores).
    #[arg(short = 't', long = "threads")]
    threads: Option<usize>,
    /// Largest item (k/m/g suffix allowed; 1k to 1g).
    #[arg(short = 'I', long = "max-item-size", default_value = "1m")]
    max_item_size: String,
    /// The most one request's reply may hold, a multi-key get's values
    /// together; its first value always goes (k/m/g suffix allowed; at
    /// least -I; default 64m, or twice -I if more).
    #[arg(long = "max-reply")]
    max_reply: Option<String>,
    /// The most bytes all connections together may hold past their first
    /// 64 KiB each, in requests not yet whole and replies not yet read;
    /// past it, those connections are closed (k/m/g suffix allowed; 0: no
    /// limit; default 256m, or four times --max-reply if more).
    #[arg(long = "max-buffered")]
    max_buffered: Option<String>,
    /// The most key prefixes `stats detail` counts per worker (0: no
    /// limit); requests for others are counted in `stats kura`'s
    /// detail_untracked.
    #[arg(long = "max-detail-prefixes", default_value_t = 10_000)]
    max_detail_prefixes: usize,
    /// Answer "out of memory" instead of evicting.
    #[arg(short = 'M', long = "disable-evictions")]
    disable_evictions: bool,
    /// Do not use CAS values.
    #[arg(short = 'C', long = "disable-cas")]
    disable_cas: bool,
    /// Verbose logging (-v, -vv, -vvv).
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    verbose: u8,
    /// Protocol: auto (by first byte), ascii or binary.
    #[arg(short = 'B', long = "protocol", value_enum, default_value_t = ProtocolArg::Auto)]
    protocol: ProtocolArg,
    /// UDP port, memcached's UDP frames (0: off; -1: any free port).
    #[arg(
        short = 'U',
        long = "udp-port",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    udp_port: i32,
    /// A port speaking Tokyo Tyrant's binary protocol besides memcached's
    /// text protocol, on the same addresses (1978 by convention; 0: off;
    /// -1: any free port).
    #[arg(
        long = "tyrant-port",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    tyrant_port: i32,
    /// The database --tyrant-port serves: hash (memcached's items),
    /// btree:NAME (ordered keys) or table:NAME (a table); the last two on
    /// the disk engine, created on first write.
    #[arg(long = "tyrant-db", default_value = "hash")]
    tyrant_db: kura_server::TyrantDatabase,
    /// HandlerSocket's read-only port over the disk engine's tables (9998
    /// by convention; 0: off; -1: any free port).
    #[arg(
        long = "hs-read-port",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    hs_read_port: i32,
    /// HandlerSocket's read-write port (9999 by convention; 0: off).
    #[arg(
        long = "hs-write-port",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    hs_write_port: i32,
    /// The secret HandlerSocket's `A 1 <secret>` must give on the read-only port.
    #[arg(long = "hs-secret")]
    hs_secret: Option<String>,
    /// The secret on the read-write port (not inherited from --hs-secret).
    #[arg(long = "hs-write-secret")]
    hs_write_secret: Option<String>,
    /// Listen on a Unix-domain socket instead of TCP.
    #[arg(short = 's', long = "unix-socket")]
    unix_socket: Option<PathBuf>,
    /// Permissions of the Unix socket, octal.
    #[arg(short = 'a', long = "unix-mask", default_value = "700")]
    unix_mask: String,
    /// User to run as when started as root.
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// Run in the background.
    #[arg(short = 'd', long = "daemon")]
    daemon: bool,
    /// Write the process id to this file.
    #[arg(short = 'P', long = "pidfile")]
    pidfile: Option<PathBuf>,
    /// Size-class growth factor (for `stats slabs`).
    #[arg(short = 'f', long = "slab-growth-factor", default_value_t = 1.25)]
    growth_factor: f64,
    /// Smallest chunk in bytes (for `stats slabs`).
    #[arg(short = 'n', long = "slab-min-size", default_value_t = 48)]
    chunk_size: usize,
    /// Requests served per connection before yielding to others.
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20)]
    requests_per_event: usize,
    /// Listen backlog.
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    backlog: i32,
    /// Allow the `shutdown` command.
    #[arg(short = 'A', long = "enable-shutdown")]
    enable_shutdown: bool,
    /// Refuse `flush_all`.
    #[arg(short = 'F', long = "disable-flush-all")]
    disable_flush_all: bool,
    /// Raise the core file limit to the maximum.
    #[arg(short = 'r', long = "enable-coredumps")]
    enable_coredumps: bool,
    /// Lock all memory into RAM (mlockall); a warning if not permitted.
    #[arg(short = 'k', long = "lock-memory")]
    lock_memory: bool,
    /// Large memory pages: accepted; kura leaves pages to the kernel.
    #[arg(short = 'L', long = "enable-largepages")]
    enable_largepages: bool,
    /// Per-prefix statistics (`stats detail`) from the start, with this key delimiter.
    #[arg(short = 'D')]
    prefix_delimiter: Option<String>,
    /// Require SASL authentication on the binary protocol (PLAIN, users from -Y or $MEMCACHED_SASL_PWDB).
    #[arg(short = 'S', long = "enable-sasl")]
    enable_sasl: bool,
    /// Refuse `stats cachedump` and `lru_crawler metadump`.
    #[arg(short = 'X', long = "disable-dumping")]
    disable_dumping: bool,
    /// Refuse the `watch` command.
    #[arg(short = 'W', long = "disable-watch")]
    disable_watch: bool,
    /// Text-protocol authentication: a file of user:password lines.
    #[arg(short = 'Y', long = "auth-file")]
    auth_file: Option<PathBuf>,
    /// Memory engine: keep the cache in this file across a graceful restart (SIGUSR1 or `shutdown graceful`).
    #[arg(short = 'e', long = "memory-file")]
    memory_file: Option<PathBuf>,
    /// Enable TLS/SSL on the listeners (with -o ssl_chain_cert=...,ssl_key=...).
    #[arg(short = 'Z', long = "enable-ssl")]
    enable_tls: bool,
    /// Number of NAPI ids: accepted; kura does not group connections by NAPI id.
    #[arg(short = 'N', long = "napi_ids")]
    napi_ids: Option<u32>,
    /// Print the licence and exit.
    #[arg(short = 'i', long = "license")]
    license: bool,
    /// Print the version and exit.
    #[arg(short = 'V', long = "version")]
    version: bool,
    /// Extended options, comma-separated key=value (e.g. idle_timeout=600);
    /// every key of memcached 1.6.18 is accepted (see `memcached -h`).
    #[arg(short = 'o', long = "extended")]
    extended: Vec<String>,
    /// Storage engine: disk keeps every acknowledged write (LMDB); memory is a pure cache.
    #[arg(long = "engine", value_enum, default_value_t = EngineArg::Disk)]
    engine: EngineArg,
    /// Data directory of the disk engine.
    #[arg(long = "dir", default_value = "kura-data")]
    dir: PathBuf,
    /// When writes reach the disk: always, batch, interval=<duration> (e.g. interval=1s), none.
    #[arg(long = "sync", default_value = "batch")]
    sync: String,
    /// Largest size of the disk engine's data file (k/m/g/t suffix).
    #[arg(long = "map-size", default_value = "64g")]
    map_size: String,
    /// Disk engine: refuse writes (SERVER_ERROR) while less than this is left
    /// on the file system or in the map; deletes still work (k/m/g suffix).
    #[arg(long = "disk-reserve", default_value = "64m")]
    disk_reserve: String,
    /// Disk engine: values at least this long (and at least 64 bytes) are
    /// written once, to the journal, and the data file points to them; 0
    /// keeps every value in the data file (k/m suffix; plain numbers are
    /// bytes).
    #[arg(long = "log-values-from", default_value = "1024")]
    log_values_from: String,
    /// Disk engine: the origin id written into this server's update-log
    /// entries (1 to 4294967295) [default: the one kept in the data
    /// directory, chosen at random the first time].
    #[arg(long = "server-id", alias = "sid")]
    server_id: Option<u32>,
    /// Disk engine: how much update log to keep once applied, for `kura log`,
    /// incremental backups and point-in-time restores: a duration (24h, 90m),
    /// a size (4GiB, 512MiB) or both (24h,4GiB); 0 keeps none.
    #[arg(long = "log-retention", default_value = "24h,4GiB")]
    log_retention: String,
    /// Disk engine: attached replicas keep the log they have not read past
    /// --log-retention while the log from the oldest such segment on is at
    /// most this (a size, as 16GiB); a replica further behind
    /// resynchronizes from a snapshot.
    #[arg(long = "log-retention-max", default_value = "16GiB")]
    log_retention_max: String,
    /// Follow this master (HOST:PORT, its memcached port) as a read-only
    /// replica (disk engine). At run time: `replicaof HOST PORT`, and
    /// `replicaof no one` (`kura admin promote`) to take writes.
    /// `tyrant:HOST:PORT` follows a Tokyo Tyrant master (a ttserver's port)
    /// by its own protocol, as its slaves do.
    #[arg(long = "replica-of", value_name = "HOST:PORT")]
    replica_of: Option<String>,
    /// The most replicas fed at once (Tokyo Tyrant slaves and a dual
    /// master's peers too): each feed holds a thread or two; one more is
    /// refused.
    #[arg(long = "max-replicas", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_replicas: u64,
    /// Dual master: take writes here and exchange them with the kura
    /// server at HOST:PORT (its memcached port), which names this one as
    /// its peer too; repeat for more peers (disk engine). Concurrent writes
    /// of a key converge to the last writer's (`docs/DESIGN.md`).
    #[arg(long = "peer", value_name = "HOST:PORT", conflicts_with_all = ["replica_of", "mhost"])]
    peers: Vec<String>,
    /// Dual master: how long a deleted or expired item is kept (invisible)
    /// so that a peer's older write of the key, arriving late, cannot bring
    /// it back: a duration (1h, 90m, 3600s).
    #[arg(
        long = "tombstone-lifetime",
        default_value = "1h",
        value_name = "DURATION"
    )]
    tombstone_lifetime: String,
    /// ttserver's `-mhost`: the master's host (with --mport; the same as
    /// --replica-of HOST:PORT). ttserver's `-rts` has no counterpart: a
    /// replica's position is its own log's last entry.
    #[arg(long = "mhost", requires = "mport", conflicts_with = "replica_of")]
    mhost: Option<String>,
    /// ttserver's `-mport`: the master's port (with --mhost).
    #[arg(long = "mport", requires = "mhost")]
    mport: Option<u16>,
    /// Print the resolved configuration as JSON and exit.
    #[arg(long = "print-config")]
    print_config: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProtocolArg {
    Auto,
    Ascii,
    Binary,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
enum EngineArg {
    Memory,
    Disk,
}

/// Everything `kura serve` will run with.
#[derive(Debug, Serialize)]
struct Resolved {
    server: ServerConfig,
    /// Set for the disk engine.
    disk: Option<DiskSettings>,
    memory: MemorySettings,
    process: ProcessSettings,
}

#[derive(Debug, Serialize)]
struct DiskSettings {
    dir: PathBuf,
    map_size_bytes: usize,
    sync: String,
    /// Writes are refused while less than this is left.
    reserve_bytes: u64,
    /// Resident memory kura keeps to: pending writes and mapped pages (the
    /// OS page cache beyond it is the kernel's, reclaimed under pressure).
    memory_budget_bytes: usize,
    /// The part of the budget for writes waiting to be applied.
    pending_limit_bytes: usize,
    /// Values this long or longer stay in the journal (0: none do).
    log_values_from_bytes: usize,
    /// `None`: the one kept in the data directory.
    server_id: Option<u32>,
    /// How long and how much applied log is kept (`None`: no limit).
    log_retention_seconds: Option<u64>,
    log_retention_bytes: Option<u64>,
    /// The most log kept beyond retention for lagging replicas.
    log_retention_max_bytes: u64,
    /// Dual master (`--peer`): how long dead items are kept.
    tombstone_lifetime_seconds: Option<u64>,
}

#[derive(Debug, Serialize)]
struct MemorySettings {
    limit_bytes: usize,
    evictions: bool,
    /// Bytes counted per item beyond key and value.
    item_overhead_bytes: usize,
}

#[derive(Debug, Serialize)]
struct ProcessSettings {
    user: Option<String>,
    daemon: bool,
    pidfile: Option<PathBuf>,
    verbosity: u8,
    /// The open-file limit before and after raising it towards the hard limit.
    open_files_limit: (u64, u64),
}

/// Parses `64`, `512k`, `1m`, `2g`: a plain number is in `unit` bytes.
fn parse_size(text: &str, unit: usize, flag: &str) -> Result<usize, Failure> {
    let text = text.trim();
    let (digits, multiplier) = match text.char_indices().last() {
        Some((i, 'k' | 'K')) => (&text[..i], 1024),
        Some((i, 'm' | 'M')) => (&text[..i], MIB),
        Some((i, 'g' | 'G')) => (&text[..i], 1024 * MIB),
        Some((i, 't' | 'T')) => (&text[..i], 1024 * 1024 * MIB),
        _ => (text, unit),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| Failure::Usage(format!("{flag}: cannot read '{text}' as a size")))
}

fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(message.into())
}

fn resolve(args: &ServeArgs) -> Result<Resolved, Failure> {
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get()));
    if threads == 0 || threads > 1024 {
        return Err(usage("-t: threads must be between 1 and 1024"));
    }
    let default_limit = match args.engine {
        EngineArg::Memory => "64",
        EngineArg::Disk => "1024",
    };
    let memory_limit = parse_size(
        args.memory_limit.as_deref().unwrap_or(default_limit),
        MIB,
        "-m",
    )?;
    if memory_limit == 0 {
        return Err(usage("-m: the memory limit must be above 0"));
    }
    let max_item_size = parse_size(&args.max_item_size, 1, "-I")?;
    if !(MIN_ITEM_SIZE..=MAX_ITEM_SIZE).contains(&max_item_size) {
        return Err(usage("-I: the item size limit must be between 1k and 1g"));
    }
    let max_reply_bytes = match &args.max_reply {
        Some(text) => parse_size(text, 1, "--max-reply")?,
        None => (64 * MIB).max(2 * max_item_size),
    };
    if max_reply_bytes < max_item_size {
        return Err(usage(
            "--max-reply: a reply must hold the largest item (-I) at least",
        ));
    }
    let max_buffered_bytes = match &args.max_buffered {
        Some(text) => parse_size(text, 1, "--max-buffered")?,
        None => (256 * MIB).max(max_reply_bytes.saturating_mul(4)),
    };
    if max_buffered_bytes != 0 && max_buffered_bytes < max_reply_bytes {
        return Err(usage(
            "--max-buffered: the connections must be able to hold one reply (--max-reply) at least",
        ));
    }
    // memcached's rule: one item may take at most half the cache.
    if args.engine == EngineArg::Memory && max_item_size > memory_limit / 2 {
        return Err(usage(
            "-I: the item size limit cannot exceed half the memory limit (-m)",
        ));
    }
    if args.memory_file.is_some() && args.engine == EngineArg::Disk {
        return Err(usage(
            "-e: a memory file is for --engine memory; the disk engine keeps every item anyway",
        ));
    }
    if args.conn_limit == 0 {
        return Err(usage("-c: the connection limit must be above 0"));
    }
    if args.growth_factor <= 1.0 {
        return Err(usage("-f: the growth factor must be above 1.0"));
    }
    if args.chunk_size == 0 {
        return Err(usage("-n: the smallest chunk must be above 0"));
    }
    if args.requests_per_event == 0 {
        return Err(usage("-R: requests per event must be above 0"));
    }
    let unix_mask = u32::from_str_radix(&args.unix_mask, 8)
        .map_err(|_| usage("-a: the mask must be octal, e.g. 700"))?;
    let port_flag = |value: i32, flag: &str| match value {
        -1 => Ok(Some(0)),
        0 => Ok(None),
        1..=65535 => Ok(Some(value as u16)),
        _ => Err(usage(format!(
            "{flag}: the port must be between -1 and 65535"
        ))),
    };
    // memcached: a UDP port given alone is the TCP port too.
    let tcp_port = match (args.port, args.udp_port) {
        (Some(port), _) => port_flag(port, "-p")?,
        (None, 0) => Some(11211),
        (None, udp) => port_flag(udp, "-U")?,
    };
    let udp_port = port_flag(args.udp_port, "-U")?;
    let tyrant_port = port_flag(args.tyrant_port, "--tyrant-port")?;
    let hs_read_port = port_flag(args.hs_read_port, "--hs-read-port")?;
    let hs_write_port = port_flag(args.hs_write_port, "--hs-write-port")?;
    // The other protocols' ports listen on the `-l` addresses beside -p's;
    // -p 0 (or -1) and -s turn TCP off: they would open nowhere.
    let others = [tyrant_port, hs_read_port, hs_write_port];
    if (tcp_port.is_none() || args.unix_socket.is_some()) && others.iter().any(Option::is_some) {
        return Err(usage(
            "--tyrant-port and --hs-*-port listen beside -p's TCP port, which -p 0 and -s turn off",
        ));
    }
    let listen = if args.unix_socket.is_some() || tcp_port.is_none() {
        Vec::new()
    } else {
        args.listen
            .split(',')
            .map(|a| a.trim().parse::<ListenAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| usage(format!("-l: {e}")))?
    };
    let mut server = ServerConfig {
        listen,
        port: tcp_port.unwrap_or(0),
        unix_socket: args.unix_socket.clone(),
        unix_mask,
        threads,
        max_connections: args.conn_limit,
        max_item_size,
        max_reply_bytes,
        max_buffered_bytes,
        max_replicas: args.max_replicas as usize,
        cas_enabled: !args.disable_cas,
        protocol: match args.protocol {
            ProtocolArg::Auto => ProtocolChoice::Auto,
            ProtocolArg::Ascii => ProtocolChoice::Ascii,
            ProtocolArg::Binary => ProtocolChoice::Binary,
        },
        requests_per_event: args.requests_per_event,
        shutdown_command: args.enable_shutdown,
        flush_enabled: !args.disable_flush_all,
        backlog: args.backlog,
        verbosity: args.verbose,
        chunk_size: args.chunk_size,
        growth_factor: args.growth_factor,
        engine: match args.engine {
            EngineArg::Memory => "memory".into(),
            EngineArg::Disk => "disk".into(),
        },
        ..ServerConfig::default()
    };
    let disk = match args.engine {
        EngineArg::Memory => None,
        EngineArg::Disk => {
            // Checked here so a bad policy is a usage error, before anything opens.
            args.sync
                .parse::<SyncPolicy>()
                .map_err(|e| usage(format!("--sync: {e}")))?;
            let map_size = parse_size(&args.map_size, MIB, "--map-size")?;
            if map_size < 16 * MIB {
                return Err(usage("--map-size must be at least 16m"));
            }
            let reserve = parse_size(&args.disk_reserve, MIB, "--disk-reserve")?;
            // The reserve is kept in LMDB's map too: one as large as the
            // map would refuse every write.
            if reserve >= map_size {
                return Err(usage(format!(
                    "--disk-reserve ({}) must be smaller than --map-size ({})",
                    args.disk_reserve, args.map_size
                )));
            }
            let log_values_from = parse_size(&args.log_values_from, 1, "--log-values-from")?;
            if memory_limit < 16 * MIB {
                return Err(usage("-m: the disk engine needs at least 16m"));
            }
            if args.server_id == Some(0) {
                return Err(usage("--server-id: 0 is not an id; use 1 to 4294967295"));
            }
            let retention = args
                .log_retention
                .parse::<LogRetention>()
                .map_err(|e| usage(format!("--log-retention: {e}")))?;
            let retention_max = args
                .log_retention_max
                .parse::<LogRetention>()
                .ok()
                .filter(|limit| limit.max_age.is_none())
                .and_then(|limit| limit.max_bytes)
                .ok_or_else(|| usage("--log-retention-max: a size, as 16GiB or 512MiB"))?;
            let tombstone_lifetime = args
                .tombstone_lifetime
                .parse::<LogRetention>()
                .ok()
                .filter(|limit| limit.max_bytes.is_none())
                .and_then(|limit| limit.max_age)
                .ok_or_else(|| usage("--tombstone-lifetime: a duration, as 1h or 90m"))?;
            Some(DiskSettings {
                log_retention_max_bytes: retention_max,
                tombstone_lifetime_seconds: (!args.peers.is_empty())
                    .then_some(tombstone_lifetime.as_secs()),
                dir: args.dir.clone(),
                map_size_bytes: map_size,
                sync: args.sync.clone(),
                reserve_bytes: reserve as u64,
                memory_budget_bytes: memory_limit,
                pending_limit_bytes: memory_limit / 4,
                log_values_from_bytes: log_values_from,
                server_id: args.server_id,
                log_retention_seconds: retention.max_age.map(|age| age.as_secs()),
                log_retention_bytes: retention.max_bytes,
            })
        }
    };
    for option in args.extended.iter().flat_map(|o| o.split(',')) {
        extended::apply(option.trim(), &mut server).map_err(usage)?;
    }
    server.udp_port = udp_port;
    server.tyrant_port = tyrant_port;
    server.tyrant_db = args.tyrant_db.clone();
    // ttserver's flags: the master may be a ttserver or a kura; an
    // address `tyrant:HOST:PORT` is followed by Tokyo Tyrant's protocol.
    let (replica_of, protocol) = match (&args.mhost, args.mport, &args.replica_of) {
        (Some(host), Some(port), _) if host.contains(':') => {
            (Some(format!("[{host}]:{port}")), MasterProtocol::Either)
        }
        (Some(host), Some(port), _) => (Some(format!("{host}:{port}")), MasterProtocol::Either),
        (_, _, Some(master)) => match master.strip_prefix("tyrant:") {
            Some(master) => (Some(master.to_string()), MasterProtocol::TokyoTyrant),
            None => (Some(master.clone()), MasterProtocol::Kura),
        },
        _ => (None, MasterProtocol::Kura),
    };
    if let Some(master) = &replica_of {
        if args.engine != EngineArg::Disk {
            return Err(usage("--replica-of needs the disk engine (--engine disk)"));
        }
        if !master.contains(':') {
            return Err(usage(
                "--replica-of: HOST:PORT, the master's memcached port",
            ));
        }
    }
    for peer in &args.peers {
        if args.engine != EngineArg::Disk {
            return Err(usage("--peer needs the disk engine (--engine disk)"));
        }
        if !peer.contains(':') {
            return Err(usage("--peer: HOST:PORT, the peer's memcached port"));
        }
    }
    server.peers = args.peers.clone();
    server.replica_of = replica_of;
    server.replica_protocol = protocol;
    server.hs_read_port = hs_read_port;
    server.hs_write_port = hs_write_port;
    server.hs_read_secret = args.hs_secret.clone();
    server.hs_write_secret = args.hs_write_secret.clone();
    server.memory_file = args.memory_file.clone();
    server.dumping_enabled = !args.disable_dumping;
    server.watch_enabled = !args.disable_watch;
    if let Some(delimiter) = &args.prefix_delimiter {
        let &[byte] = delimiter.as_bytes() else {
            return Err(usage("-D: the delimiter must be one character"));
        };
        server.detail_delimiter = Some(byte);
    }
    server.max_detail_prefixes = args.max_detail_prefixes;
    server.auth_file = args.auth_file.clone();
    if args.enable_sasl {
        // memcached refuses SASL while the text protocol is allowed.
        if server.protocol != ProtocolChoice::Binary {
            return Err(usage(
                "-S: SASL works on the binary protocol only; add -B binary",
            ));
        }
        server.sasl = true;
        server.sasl_users_file = std::env::var_os("MEMCACHED_SASL_PWDB")
            .map(PathBuf::from)
            .or_else(|| args.auth_file.clone());
    }
    if args.enable_tls && server.tls.is_none() {
        return Err(usage("-Z: TLS needs -o ssl_chain_cert=FILE,ssl_key=FILE"));
    }
    if !args.enable_tls {
        server.tls = None;
    }
    Ok(Resolved {
        server,
        disk,
        memory: MemorySettings {
            limit_bytes: memory_limit,
            evictions: !args.disable_evictions,
            item_overhead_bytes: kura_store::memory::ITEM_OVERHEAD,
        },
        process: ProcessSettings {
            user: args.user.clone(),
            daemon: args.daemon,
            pidfile: args.pidfile.clone(),
            verbosity: args.verbose,
            open_files_limit: (0, 0),
        },
    })
}

/// Raises the open-file limit so `connections` and the disk engine's files
/// fit: root may raise the hard limit too; anyone else goes up to the hard
/// limit. Returns (before, after).
fn raise_open_files_limit(connections: usize) -> (u64, u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return (0, 0);
    };
    // Listeners, the poll and waker descriptors, logs: a small reserve.
    let engine = kura_store::disk::MOST_FILES_OPEN as u64;
    let wanted = (connections as u64 + 64 + engine).max(soft);
    if wanted > hard && setrlimit(Resource::RLIMIT_NOFILE, wanted, wanted).is_ok() {
        return (soft, wanted);
    }
    let target = wanted.min(hard).max(soft);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        return (soft, target);
    }
    (soft, soft)
}

fn drop_privileges(user: &str) -> anyhow::Result<()> {
    use nix::unistd::{setgid, setgroups, setuid, Uid, User};
    if !Uid::effective().is_root() {
        return Ok(());
    }
    let account = User::from_name(user)
        .context("looking up the -u user")?
        .with_context(|| format!("no such user: {user}"))?;
    setgroups(&[account.gid]).context("setgroups")?;
    setgid(account.gid).context("setgid")?;
    setuid(account.uid).context("setuid")?;
    Ok(())
}

pub fn run(args: ServeArgs) -> Result<(), Failure> {
    if args.version {
        outln!("kura {}", env!("CARGO_PKG_VERSION"))?;
        return Ok(());
    }
    if args.license {
        outln!(
            "kura {}: {} licence",
            env!("CARGO_PKG_VERSION"),
            env!("CARGO_PKG_LICENSE")
        )?;
        return Ok(());
    }
    let mut resolved = resolve(&args)?;
    resolved.process.open_files_limit = raise_open_files_limit(resolved.server.max_connections);
    if args.print_config {
        outln!(
            "{}",
            serde_json::to_string_pretty(&resolved).map_err(|e| Failure::Runtime(e.into()))?
        )?;
        return Ok(());
    }
    init_logging(args.verbose);
    kura_store::keep_freed_memory_until_trimmed();
    let (before, after) = resolved.process.open_files_limit;
    tracing::info!(before, after, "open file limit");
    // Every connection needs a descriptor; warn rather than fail, as the
    // acceptor copes with running out.
    if (after as usize) < resolved.server.max_connections + 32 {
        tracing::warn!(
            limit = after,
            connections = resolved.server.max_connections,
            "the open file limit is below the connection limit (-c)"
        );
    }
    if args.enable_coredumps {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_CORE) {
            let _ = setrlimit(Resource::RLIMIT_CORE, hard, hard);
        }
    }
    if args.lock_memory {
        use nix::sys::mman::{mlockall, MlockAllFlags};
        if let Err(e) = mlockall(MlockAllFlags::MCL_CURRENT | MlockAllFlags::MCL_FUTURE) {
            eprintln!("kura: warning: -k could not lock memory ({e}); going on without");
        }
    }
    if args.daemon {
        nix::unistd::daemon(true, args.verbose > 0).context("daemonizing")?;
    }
    if let Some(path) = &args.pidfile {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .context("writing the pid file")?;
    }
    let classes = SizeClasses::new(
        resolved.server.chunk_size,
        resolved.server.growth_factor,
        resolved.server.max_item_size.max(MIB),
    );
    // The memory engine itself, when a graceful shutdown is to keep it.
    let mut kept: Option<(PathBuf, Arc<MemoryStore>)> = None;
    let store: Arc<dyn Store> = match &resolved.disk {
        Some(disk) => Arc::new(
            DiskStore::open(DiskConfig {
                map_size: disk.map_size_bytes,
                sync: disk.sync.parse().map_err(|e: String| usage(e))?,
                classes,
                reserve_bytes: disk.reserve_bytes,
                memory_budget: disk.memory_budget_bytes,
                pending_limit: disk.pending_limit_bytes,
                log_values_from: disk.log_values_from_bytes,
                background_expiry: resolved.server.lru_maintainer,
                server_id: disk.server_id,
                max_value_bytes: resolved.server.max_item_size,
                workers: resolved.server.threads,
                log_retention: LogRetention {
                    max_age: disk
                        .log_retention_seconds
                        .map(std::time::Duration::from_secs),
                    max_bytes: disk.log_retention_bytes,
                },
                log_retention_max: disk.log_retention_max_bytes,
                multi_primary: disk.tombstone_lifetime_seconds.map(|seconds| MultiPrimary {
                    tombstone_lifetime: std::time::Duration::from_secs(seconds),
                }),
                ..DiskConfig::new(&disk.dir)
            })
            .with_context(|| format!("opening the data directory {}", disk.dir.display()))?,
        ),
        None => {
            let memory = Arc::new(MemoryStore::new(MemoryConfig {
                limit_bytes: resolved.memory.limit_bytes,
                evict: resolved.memory.evictions,
                max_value_bytes: resolved.server.max_item_size,
                classes,
                // Without CAS values memcached's flush_all covers its whole second.
                flush_whole_second: !resolved.server.cas_enabled,
                background_sweep: resolved.server.lru_maintainer,
                strict_lru: resolved.server.legacy_lru,
                temporary_ttl: resolved.server.temporary_ttl,
                hash_power: match resolved.server.hash_power_init {
                    0 => DEFAULT_HASH_POWER,
                    power => power,
                },
                ..MemoryConfig::default()
            }));
            if let Some(path) = &resolved.server.memory_file {
                kept = Some((path.clone(), memory.clone()));
            }
            memory
        }
    };
    let restored = match &kept {
        Some((path, memory)) => warm_start(path, memory)?,
        None => None,
    };
    let serving = ServingLine::before_start(&resolved, restored);
    // Caught from before the port opens: a client (or test) that signals
    // as soon as it can connect must get a clean stop, not the default
    // action's death.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGUSR1,
    ])
    .context("installing signal handlers")?;
    let handle = kura_server::start(resolved.server, store, resolved.memory.evictions)
        .context("starting the server")?;
    if let Some(user) = &args.user {
        drop_privileges(user)?;
    }
    eprintln!("kura: {}", serving.after_start(&handle));
    if let Some(path) = std::env::var_os("MEMCACHED_PORT_FILENAME") {
        write_port_file(Path::new(&path), &handle).context("writing MEMCACHED_PORT_FILENAME")?;
    }
    let shared = handle.shared().clone();
    let stopped = shared.clone();
    std::thread::Builder::new()
        .name("kura-signals".into())
        .spawn(move || {
            let mut received = signals.forever();
            if let Some(signal) = received.next() {
                tracing::info!(signal, "shutting down");
                // memcached's meaning: SIGUSR1 stops gracefully, keeping
                // the cache for the next start with -e.
                if signal == signal_hook::consts::SIGUSR1 {
                    shared.request_graceful_shutdown();
                } else {
                    shared.request_shutdown();
                }
            }
            // Another while stopping (a long save for -e): stop at once, as
            // a kill would; the signal would otherwise be ignored.
            if let Some(signal) = received.next() {
                eprintln!("kura: signal {signal} while stopping: exiting now");
                std::process::exit(1);
            }
        })
        .context("starting the signal thread")?;
    handle.wait();
    if let (Some((path, memory)), true) = (&kept, stopped.graceful()) {
        let saved = warm::save(path, memory)
            .with_context(|| format!("-e {}: keeping the cache", path.display()))?;
        eprintln!(
            "kura: kept {} items ({} MiB) in {} for the next start",
            saved.items,
            saved.bytes / MIB as u64,
            path.display()
        );
    }
    if let Some(path) = &args.pidfile {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Loads what the last graceful shutdown kept in `path` (`-e`), then removes
/// the file, so that a crash from here on starts empty rather than with
/// items older than what this run serves. A file kura cannot trust stops
/// the start, as memcached stops on a damaged metadata file: quietly
/// starting empty would overwrite it at the next graceful shutdown.
fn warm_start(path: &Path, memory: &MemoryStore) -> Result<Option<Loaded>, Failure> {
    let place = path.display();
    warm::prepare(path).with_context(|| format!("-e {place}: cannot write a file there"))?;
    let loaded = warm::load(path, memory).map_err(|e| {
        Failure::Runtime(anyhow::anyhow!(
            "-e {place}: {e}; remove it to start with an empty cache"
        ))
    })?;
    if loaded.is_some() {
        warm::remove(path).with_context(|| format!("-e {place}: removing it once loaded"))?;
    }
    Ok(loaded)
}

/// memcached's `MEMCACHED_PORT_FILENAME`: the ports actually bound, one
/// `TCP INET: 11211` line each (`INET6` for IPv6, `UDP` for UDP), written
/// beside the file and renamed into place, so a reader never sees half.
fn write_port_file(path: &Path, handle: &kura_server::ServerHandle) -> std::io::Result<()> {
    let mut text = String::new();
    let tcp = handle.tcp_addrs().iter().map(|a| ("TCP", a));
    let udp = handle.udp_addrs().iter().map(|a| ("UDP", a));
    for (transport, addr) in tcp.chain(udp) {
        let family = if addr.is_ipv6() { "INET6" } else { "INET" };
        text.push_str(&format!("{transport} {family}: {}\n", addr.port()));
    }
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".lck");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

/// The one line a start prints: where (the addresses bound, so `-p -1`
/// shows its port), which engine, where the data is, what a warm restart
/// brought back, and the memory limit.
struct ServingLine {
    /// Whether each `-l` listener speaks TLS, in order.
    tls: Vec<bool>,
    unix_socket: Option<PathBuf>,
    /// Engine, data and memory limit.
    storage: String,
}

impl ServingLine {
    fn before_start(resolved: &Resolved, restored: Option<Loaded>) -> ServingLine {
        let server = &resolved.server;
        let tls = (server.listen.iter())
            .map(|l| server.tls.is_some() && !l.no_tls)
            .collect();
        let storage = match &resolved.disk {
            Some(disk) => format!("disk engine, data in {}", disk.dir.display()),
            None => match (&server.memory_file, restored) {
                (Some(file), None) => format!(
                    "memory engine, kept in {} on graceful restart",
                    file.display()
                ),
                (Some(file), Some(loaded)) => format!(
                    "memory engine, kept in {} on graceful restart ({} items restored, {} expired while stopped{})",
                    file.display(),
                    loaded.restored,
                    loaded.expired,
                    match loaded.dropped {
                        0 => String::new(),
                        n => format!(", {n} over the memory limit"),
                    }
                ),
                (None, _) => "memory engine".to_string(),
            },
        };
        ServingLine {
            tls,
            unix_socket: server.unix_socket.clone(),
            storage: format!(
                "{storage}; memory limit {} MiB",
                resolved.memory.limit_bytes / MIB
            ),
        }
    }

    fn after_start(&self, handle: &kura_server::ServerHandle) -> String {
        let others: Vec<_> = (handle.tyrant_addr().into_iter())
            .chain(
                [false, true]
                    .map(|write| handle.handlersocket_addr(write))
                    .into_iter()
                    .flatten(),
            )
            .collect();
        let tcp: Vec<_> = (handle.tcp_addrs().iter())
            .filter(|addr| !others.contains(addr))
            .collect();
        // One bound address per `-l` listener; TLS as the listener says.
        let tls = |n: usize| tcp.len() == self.tls.len() && self.tls[n];
        let mut places: Vec<String> = (tcp.iter().enumerate())
            .map(|(n, addr)| format!("{addr}{}", if tls(n) { " (TLS)" } else { "" }))
            .collect();
        places.extend(
            self.unix_socket
                .iter()
                .map(|path| path.display().to_string()),
        );
        places.extend(handle.udp_addrs().iter().map(|addr| format!("udp {addr}")));
        places.extend(handle.tyrant_addr().map(|addr| format!("tyrant {addr}")));
        for (write, name) in [(false, "handlersocket read"), (true, "handlersocket write")] {
            places.extend(
                handle
                    .handlersocket_addr(write)
                    .map(|addr| format!("{name} {addr}")),
            );
        }
        // memcached runs with every port off (`-p 0`) too.
        let places = match places.is_empty() {
            true => "no port".to_string(),
            false => places.join(", "),
        };
        format!("serving on {places}; {}", self.storage)
    }
}

fn init_logging(verbosity: u8) {
    let default = match verbosity {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_suffixes() {
        assert_eq!(parse_size("64", MIB, "-m").ok(), Some(64 * MIB));
        assert_eq!(parse_size("1m", 1, "-I").ok(), Some(MIB));
        assert_eq!(parse_size("512k", 1, "-I").ok(), Some(512 * 1024));
        assert_eq!(parse_size("1g", 1, "-I").ok(), Some(1024 * MIB));
        assert!(parse_size("lots", 1, "-I").is_err());
    }
}
