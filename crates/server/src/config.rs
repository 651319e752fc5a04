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

/// Everything the network server needs to know.
#[derive(Debug, Clone, Serialize)]
pub struct ServerConfig {
    /// Addresses to listen on (`-l`); empty when only a Unix socket is used.
    pub listen: Vec<IpAddr>,
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: vec![IpAddr::from([127, 0, 0, 1])],
            port: 11211,
            unix_socket: None,
            unix_mask: 0o700,
            threads: std::thread::available_parallelism().map_or(4, |n| n.get()),
            max_connections: 16384,
            max_item_size: 1024 * 1024,
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
