//! memcached's UDP framing over a real socket: a set, a get, and a reply
//! larger than one datagram.

mod support;

use std::net::UdpSocket;
use std::time::Duration;

use kura_server::ServerConfig;
use kura_store::MemoryConfig;
use support::TestServer;

/// Sends one framed request and puts the framed reply back together.
fn request(socket: &UdpSocket, id: u16, payload: &[u8]) -> Vec<u8> {
    let mut datagram = vec![(id >> 8) as u8, id as u8, 0, 0, 0, 1, 0, 0];
    datagram.extend_from_slice(payload);
    socket.send(&datagram).unwrap();
    let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let n = socket.recv(&mut buf).expect("a reply datagram");
        assert!(n <= 1400, "datagram of {n} bytes");
        assert_eq!(
            u16::from_be_bytes([buf[0], buf[1]]),
            id,
            "request id echoed"
        );
        let sequence = usize::from(u16::from_be_bytes([buf[2], buf[3]]));
        let total = usize::from(u16::from_be_bytes([buf[4], buf[5]]));
        parts.resize(total, None);
        parts[sequence] = Some(buf[8..n].to_vec());
        if parts.iter().all(Option::is_some) {
            return parts.into_iter().flatten().flatten().collect();
        }
    }
}

#[test]
fn get_and_set_through_udp_frames() {
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = TestServer::with(
        ServerConfig {
            udp_port: Some(port),
            ..ServerConfig::default()
        },
        MemoryConfig::default(),
    );
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(("127.0.0.1", port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();

    assert_eq!(
        request(&socket, 1, b"set k 5 0 3\r\nabc\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        request(&socket, 2, b"get k\r\n"),
        b"VALUE k 5 3\r\nabc\r\nEND\r\n"
    );
    let big = "x".repeat(5000);
    let set = format!("set big 0 0 {}\r\n{big}\r\n", big.len());
    assert_eq!(request(&socket, 3, set.as_bytes()), b"STORED\r\n");
    let expected = format!("VALUE big 0 {}\r\n{big}\r\nEND\r\n", big.len());
    assert_eq!(request(&socket, 4, b"get big\r\n"), expected.as_bytes());
    // And it is the same store as TCP's.
    assert_eq!(
        server.exchange(b"get k\r\n", 22),
        b"VALUE k 5 3\r\nabc\r\nEND\r\n"
    );
    // A metadump is not sent back over UDP (memcached's goes to the
    // socket, which has no peer): one small datagram asks for nothing big.
    let mut datagram = vec![0, 5, 0, 0, 0, 1, 0, 0];
    datagram.extend_from_slice(b"lru_crawler metadump all\r\n");
    socket.send(&datagram).unwrap();
    assert_eq!(
        request(&socket, 6, b"get k\r\n"),
        b"VALUE k 5 3\r\nabc\r\nEND\r\n"
    );
    // Nor is a backup taken: it would hold up every UDP client meanwhile.
    assert_eq!(
        request(&socket, 7, b"backup /tmp/kura-udp-backup\r\n"),
        b"SERVER_ERROR backups are taken over TCP only\r\n"
    );
    assert!(!std::path::Path::new("/tmp/kura-udp-backup").exists());
}
