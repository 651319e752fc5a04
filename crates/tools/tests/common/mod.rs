//! What the tools' tests share: Debian's memcached on a port of 127.0.0.1
//! that no other test of the same binary was given, killed when dropped.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

pub const MEMCACHED: &str = "/usr/bin/memcached";

/// Where the servers' ports come from: below Linux's ephemeral range
/// (32768–60999), so no client connection holds one as its own port.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port no earlier call in this process returned, free when probed. The
/// kernel's pick (binding port 0) could give two tests running at once the
/// same port between the probe and the server's bind; the second server
/// then failed to listen while its readiness check reached the first one,
/// and that test's connections were reset when the first test ended.
pub fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Each test binary starts at its own place, so that two runs at once
    // seldom probe the same ports.
    let start = PORTS.start + (std::process::id() % 10_000) as u16;
    let _ = NEXT.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    loop {
        let port = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(PORTS.contains(&port), "no free port left in {PORTS:?}");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

pub struct Memcached {
    child: Child,
    pub port: u16,
}

impl Memcached {
    /// memcached with `args` besides its address, port and one thread;
    /// ready once it accepts a connection.
    pub fn start(args: &[&str]) -> Memcached {
        assert!(
            std::path::Path::new(MEMCACHED).exists(),
            "{MEMCACHED} is missing: apt-get install memcached (scripts/test does)"
        );
        let port = free_port();
        let child = Command::new(MEMCACHED)
            .args([
                "-l",
                "127.0.0.1",
                "-U",
                "0",
                "-t",
                "1",
                "-p",
                &port.to_string(),
            ])
            .args(args)
            // memcached refuses to run as root unless told which user to
            // become; it ignores -u when it is not root.
            .args(["-u", "nobody"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Memcached { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("memcached {args:?} -p {port} exited: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "memcached -p {port} never listened"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
