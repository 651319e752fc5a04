//! memcached's UDP transport (`-U`).
//!
//! Every datagram starts with an 8-byte frame header, big-endian:
//!
//! ```text
//! request id u16 | sequence number u16 | datagrams in this message u16 | reserved u16 (0)
//! ```
//!
//! A request is one datagram (memcached refuses multi-datagram requests);
//! its payload is text or binary protocol, decided by the first byte as on
//! TCP. The reply is cut into datagrams of at most 1400 bytes, header
//! included, each carrying the request's id, its sequence number and the
//! total count, so the client can put a large value back together.
//!
//! One thread serves the UDP sockets. A write is replied to only once the
//! engine acknowledges it, exactly as on TCP.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use kura_store::{AckFence, AckState};

use crate::exec::Context;
use crate::session::{Session, Stop};
use crate::stats::Counters;
use crate::Shared;

pub const FRAME_HEADER_LEN: usize = 8;
/// memcached's UDP_MAX_PAYLOAD_SIZE: a datagram's size, header included.
pub const MAX_DATAGRAM: usize = 1400;
/// The largest request datagram read.
const MAX_REQUEST: usize = 65536;

/// A request's frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub request_id: u16,
    pub sequence: u16,
    pub datagrams: u16,
}

impl FrameHeader {
    /// Reads the header of a datagram; None when it is too short.
    pub fn parse(datagram: &[u8]) -> Option<FrameHeader> {
        let field = |i: usize| u16::from_be_bytes([datagram[i], datagram[i + 1]]);
        (datagram.len() >= FRAME_HEADER_LEN).then(|| FrameHeader {
            request_id: field(0),
            sequence: field(2),
            datagrams: field(4),
        })
    }
}

/// Cuts `reply` into framed datagrams for the request `request_id`.
pub fn frame_reply(request_id: u16, reply: &[u8]) -> Vec<Vec<u8>> {
    let chunk = MAX_DATAGRAM - FRAME_HEADER_LEN;
    let count = reply.len().div_ceil(chunk).max(1);
    // A reply needing more datagrams than the header can count is cut short;
    // it cannot happen below a 90 MB value.
    let count = count.min(usize::from(u16::MAX));
    (0..count)
        .map(|sequence| {
            let start = sequence * chunk;
            let body = &reply[start.min(reply.len())..(start + chunk).min(reply.len())];
            let mut datagram = Vec::with_capacity(FRAME_HEADER_LEN + body.len());
            datagram.extend_from_slice(&request_id.to_be_bytes());
            datagram.extend_from_slice(&(sequence as u16).to_be_bytes());
            datagram.extend_from_slice(&(count as u16).to_be_bytes());
            datagram.extend_from_slice(&[0, 0]);
            datagram.extend_from_slice(body);
            datagram
        })
        .collect()
}

/// Binds a UDP socket on every listen address at `port`.
pub fn bind(shared_listen: &[std::net::IpAddr], port: u16) -> io::Result<Vec<UdpSocket>> {
    shared_listen
        .iter()
        .map(|ip| {
            let addr = SocketAddr::new(*ip, port);
            let socket = UdpSocket::bind(addr).map_err(|e| {
                io::Error::new(e.kind(), format!("cannot listen on udp {addr}: {e}"))
            })?;
            // Wake up now and then to notice shutdown.
            socket.set_read_timeout(Some(Duration::from_millis(100)))?;
            Ok(socket)
        })
        .collect()
}

/// Serves datagrams until the server stops.
pub fn run(sockets: Vec<UdpSocket>, shared: &Shared, counters: &Counters) {
    let ctx = Context {
        shared,
        counters,
        conn_id: 0,
        fence: AckFence::default(),
        datagram: true,
    };
    let mut datagram = vec![0u8; MAX_REQUEST];
    let mut reply = Vec::new();
    while !shared.stopping() {
        for socket in &sockets {
            let (len, peer) = match socket.recv_from(&mut datagram) {
                Ok(received) => received,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    tracing::debug!(error = %e, "udp receive failed");
                    continue;
                }
            };
            let Some(header) = FrameHeader::parse(&datagram[..len]) else {
                continue;
            };
            if header.datagrams != 1 || header.sequence != 0 {
                // memcached drops requests spread over several datagrams.
                continue;
            }
            counters.bytes_read.add(len as u64);
            reply.clear();
            let stop = serve_request(&datagram[FRAME_HEADER_LEN..len], &mut reply, &ctx);
            if reply.is_empty() {
                // A noreply write: nothing waits for it, not the next datagram either.
                ctx.fence.take();
            } else if acknowledged(&ctx) {
                for framed in frame_reply(header.request_id, &reply) {
                    if socket.send_to(&framed, peer).is_ok() {
                        counters.bytes_written.add(framed.len() as u64);
                    }
                }
            }
            if stop == Stop::Shutdown {
                shared.request_shutdown();
            }
        }
    }
}

/// Runs every request in one datagram; a request cut short is dropped.
fn serve_request(payload: &[u8], reply: &mut Vec<u8>, ctx: &Context<'_>) -> Stop {
    // `-B` holds over UDP too, as memcached's binding protocol does.
    let mut session = Session::new(crate::worker::fixed_protocol(ctx.shared));
    let mut budget = usize::MAX;
    session.serve(payload, reply, ctx, &mut budget).1
}

/// Waits until the writes of this datagram are journalled; false if they
/// failed (no reply: the client's retry decides).
fn acknowledged(ctx: &Context<'_>) -> bool {
    let shared = ctx.shared;
    let Some(span) = ctx.fence.take() else {
        return true;
    };
    shared.store.request_append();
    loop {
        match shared.store.ack_state(span) {
            AckState::Ready => return true,
            AckState::Failed => return false,
            AckState::Waiting => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_big_endian() {
        let header = FrameHeader::parse(&[0x01, 0x02, 0, 0, 0, 1, 0, 0, b'g']).unwrap();
        assert_eq!(
            header,
            FrameHeader {
                request_id: 0x0102,
                sequence: 0,
                datagrams: 1
            }
        );
        assert_eq!(FrameHeader::parse(&[0; 7]), None);
    }

    #[test]
    fn replies_are_cut_into_numbered_datagrams() {
        let reply: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let datagrams = frame_reply(7, &reply);
        assert_eq!(datagrams.len(), 3);
        for (i, datagram) in datagrams.iter().enumerate() {
            assert!(datagram.len() <= MAX_DATAGRAM);
            assert_eq!(&datagram[..8], &[0, 7, 0, i as u8, 0, 3, 0, 0]);
        }
        let joined: Vec<u8> = datagrams.iter().flat_map(|d| d[8..].to_vec()).collect();
        assert_eq!(joined, reply);
        assert_eq!(frame_reply(1, b"END\r\n").len(), 1);
    }
}
