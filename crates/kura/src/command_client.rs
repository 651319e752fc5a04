//! One command line to a running kura on its memcached port, and the reply
//! lines: the connection opened within a time limit, each line bounded,
//! each line whole within the command's time limit. `kura backup` and `kura
//! admin` speak through it.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::{Duration, Instant};

/// How long a connection to the server may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest reply line read unless the caller says otherwise: a
/// `replicas` line names one replica (a backup's manifest has its own bound).
pub const MAX_LINE: u64 = 1 << 20;

pub struct CommandClient {
    server: String,
    timeout: Duration,
    reader: BufReader<TcpStream>,
}

impl CommandClient {
    /// Connects to `server` and sends `command`; `timeout` (zero: none)
    /// bounds each wait for the reply.
    pub fn send(server: &str, command: &str, timeout: Duration) -> anyhow::Result<Self> {
        let mut stream =
            connect(server).map_err(|error| anyhow::anyhow!("connecting to {server}: {error}"))?;
        stream
            .set_read_timeout((!timeout.is_zero()).then_some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(CONNECT_TIMEOUT)))
            .and_then(|()| stream.write_all(format!("{command}\r\n").as_bytes()))
            .map_err(|error| anyhow::anyhow!("sending to {server}: {error}"))?;
        Ok(CommandClient {
            server: server.to_string(),
            timeout,
            reader: BufReader::new(stream),
        })
    }

    /// The next reply line, without its line end.
    pub fn line(&mut self) -> anyhow::Result<String> {
        self.line_within(MAX_LINE)
    }

    /// The next reply line, of at most `limit` bytes, without its line end.
    /// The whole line comes within the time limit: a server that sends a
    /// byte at a time does not hold the client past it.
    pub fn line_within(&mut self, limit: u64) -> anyhow::Result<String> {
        let server = &self.server;
        let timed_out = || {
            anyhow::anyhow!(
                "{server} did not reply within {} s (--timeout)",
                self.timeout.as_secs()
            )
        };
        let deadline = (!self.timeout.is_zero()).then(|| Instant::now() + self.timeout);
        let mut bytes = Vec::new();
        while !bytes.ends_with(b"\n") && (bytes.len() as u64) < limit {
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out());
                }
                self.reader.get_ref().set_read_timeout(Some(left))?;
            }
            let available = self.reader.fill_buf().map_err(|error| match error.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => timed_out(),
                _ => anyhow::anyhow!("reading the reply of {server}: {error}"),
            })?;
            if available.is_empty() {
                break;
            }
            let wanted = (limit - bytes.len() as u64).min(available.len() as u64) as usize;
            let took = available[..wanted]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(wanted, |end| end + 1);
            bytes.extend_from_slice(&available[..took]);
            self.reader.consume(took);
        }
        let line = String::from_utf8(bytes).map_err(|_| {
            anyhow::anyhow!("{server} replied with bytes that are not text (not a kura server?)")
        })?;
        if line.is_empty() {
            anyhow::bail!("{server} closed the connection without a reply");
        }
        if !line.ends_with('\n') {
            anyhow::bail!(
                "{server} sent no whole reply line in {limit} bytes (not a kura server?)"
            );
        }
        Ok(line.trim_end().to_string())
    }
}

/// A connection to `server` (`host:port`), each of its addresses tried
/// within [`CONNECT_TIMEOUT`].
pub fn connect(server: &str) -> std::io::Result<TcpStream> {
    let mut last = None;
    for address in server.to_socket_addrs()? {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("the name has no address")))
}
