//! The link a follower reads: the connection to the server it follows (a
//! master, a peer, or a Tokyo Tyrant master), and reads on it that give up
//! when the link is to stop or the other side falls silent. Both kinds of
//! follower (`follower.rs`, `tyrant_follower.rs`) use it.

use std::io::{self, Read};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use kura_store::replication::Replication;

use super::MasterLink;
use crate::Shared;

/// How long a connection to the master may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a blocked read looks whether the link is to stop.
pub(super) const READ_TICK: Duration = Duration::from_millis(100);
/// A master silent this long (it sends a heartbeat every 200 ms) is gone.
pub(super) const SILENCE_LIMIT: Duration = Duration::from_secs(10);
/// Why a link ends for good: the master answered with this server's id.
pub(super) const FOLLOWS_ITSELF: &str = "the master is this server itself";

/// Reads exactly `buf.len()` bytes, looking at `stopped` every tick and
/// giving up after [`SILENCE_LIMIT`] without a byte.
pub(super) fn read_full(
    reader: &mut impl Read,
    buf: &mut [u8],
    stopped: &dyn Fn() -> bool,
) -> Result<(), String> {
    let mut filled = 0;
    let mut heard = Instant::now();
    while filled < buf.len() {
        if stopped() {
            return Err("stopped".to_string());
        }
        match reader.read(&mut buf[filled..]) {
            Ok(0) => return Err("the master closed the link".to_string()),
            Ok(read) => {
                filled += read;
                heard = Instant::now();
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if heard.elapsed() > SILENCE_LIMIT {
                    return Err("the master fell silent".to_string());
                }
            }
            Err(error) => return Err(format!("reading from the master: {error}")),
        }
    }
    Ok(())
}

/// Reads `len` bytes into `buf` (emptied first), growing it as the bytes
/// come, not at once to the length the master claims.
pub(super) fn read_grown(
    reader: &mut impl Read,
    buf: &mut Vec<u8>,
    len: usize,
    stopped: &dyn Fn() -> bool,
) -> Result<(), String> {
    buf.clear();
    while buf.len() < len {
        let start = buf.len();
        buf.resize(start + (len - start).min(1 << 20), 0);
        read_full(reader, &mut buf[start..], stopped)?;
    }
    Ok(())
}

/// The engine's replication and a connection to the master, whose reads
/// wake every [`READ_TICK`] to look whether the link is to stop.
pub(super) fn connect<'s>(
    shared: &'s Shared,
    link: &MasterLink,
) -> Result<(&'s dyn Replication, TcpStream), String> {
    let replication = shared
        .store
        .replication()
        .ok_or_else(|| "replication needs the disk engine".to_string())?;
    let address = link
        .address()
        .to_socket_addrs()
        .map_err(|error| format!("cannot resolve {}: {error}", link.master))?
        .next()
        .ok_or_else(|| format!("{} has no address", link.master))?;
    let stream = TcpStream::connect_timeout(&address, CONNECT_TIMEOUT)
        .map_err(|error| format!("cannot connect to {}: {error}", link.master))?;
    let io_error = |error: io::Error| format!("talking to the master: {error}");
    stream.set_nodelay(true).map_err(io_error)?;
    stream.set_read_timeout(Some(READ_TICK)).map_err(io_error)?;
    Ok((replication, stream))
}
