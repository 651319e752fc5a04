//! What the process-level tests share: a free port, and waiting for a
//! started `kura serve` to answer.

pub mod client;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port free now and not handed out before in this process: tests run
/// in parallel, and the system may give a port just let go to the next
/// caller before the server meant for it has bound it. Taken below the
/// kernel's ephemeral range (from 32768), so that no client's outgoing
/// connection takes it before its server binds it: the 20,000-connection
/// tests use most of that range while the others start servers.
pub fn free_port() -> u16 {
    const BELOW_EPHEMERAL: std::ops::Range<u16> = 20_000..32_000;
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap();
    loop {
        let port = rand::random_range(BELOW_EPHEMERAL);
        if !handed_out.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
}

/// The `kura` binary under test: `KURA_BIN`, else the one cargo built.
#[allow(dead_code)]
pub fn kura_bin() -> String {
    std::env::var("KURA_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_kura").to_string())
}

/// Starts `kura serve` on the disk engine in `dir`, on 127.0.0.1:`port`
/// with two threads and `extra` flags, and waits until it answers.
#[allow(dead_code)]
pub fn serve_disk(dir: &Path, port: u16, extra: &[&str]) -> Child {
    let mut child = Command::new(kura_bin())
        .args([
            "serve",
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "2",
        ])
        .args(["--engine", "disk", "--dir"])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("kura starts");
    wait_until_ready(&mut child, SocketAddr::from(([127, 0, 0, 1], port)));
    child
}

/// Waits until the server answers `version` on `addr` (no fixed sleep);
/// fails if it exits first or takes more than 20 s.
pub fn wait_until_ready(child: &mut Child, addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut stream) = TcpStream::connect(addr) {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            if stream.write_all(b"version\r\n").is_ok() {
                let mut buf = [0u8; 32];
                if stream
                    .read(&mut buf)
                    .is_ok_and(|n| buf[..n].starts_with(b"VERSION"))
                {
                    return;
                }
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("kura exited while starting on {addr}: {status}");
        }
        assert!(Instant::now() < deadline, "kura did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A started process (a `kura serve`), killed with SIGKILL and reaped when
/// dropped, so a failing test leaves no server behind. (Not every test
/// that shares this module starts one.)
#[allow(dead_code)]
pub struct Running(pub Child);

#[allow(dead_code)]
impl Running {
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}
