//! `kura serve -S` with Cyrus SASL, as memcached runs it: a SASL
//! configuration (`SASL_CONF_PATH`), users written by Debian's `saslpasswd2`
//! into a sasldb, PLAIN in one step and CRAM-MD5 in two. Needs Debian's
//! sasl2-bin and libsasl2-modules (scripts/test installs them).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use hmac::{Hmac, Mac};
use kura_proto::binary::{compose_request, opcode};

// Shared with the other process tests; this one waits in its own way.
#[allow(dead_code)]
mod support;

use support::{free_port, Running};

const KURA: &str = env!("CARGO_BIN_EXE_kura");
const REALM: &str = "kura.realm";

/// A SASL configuration offering PLAIN and CRAM-MD5 from a sasldb holding
/// `alice`'s password, as memcached's binary-sasl.t sets one up.
fn sasl_config(dir: &Path) {
    let sasldb = dir.join("users.sasldb");
    std::fs::write(
        dir.join("memcached.conf"),
        format!(
            "mech_list: plain cram-md5\nsasldb_path: {}\n",
            sasldb.display()
        ),
    )
    .unwrap();
    let mut saslpasswd = Command::new("saslpasswd2")
        .args(["-a", "memcached", "-u", REALM, "-c", "-p", "alice"])
        .env("SASL_CONF_PATH", dir)
        .stdin(Stdio::piped())
        .spawn()
        .expect("saslpasswd2 (Debian's sasl2-bin) is installed");
    saslpasswd
        .stdin
        .take()
        .unwrap()
        .write_all(b"wonderland")
        .unwrap();
    assert!(saslpasswd.wait().unwrap().success());
    assert!(sasldb.exists());
}

fn start(conf: Option<&Path>) -> Result<(Running, SocketAddr), String> {
    let port = free_port();
    let mut command = Command::new(KURA);
    command
        .args(["serve", "--engine", "memory", "-B", "binary", "-S"])
        .args(["-p", &port.to_string(), "-l", "127.0.0.1"])
        .env_remove("MEMCACHED_SASL_PWDB")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    match conf {
        Some(dir) => command.env("SASL_CONF_PATH", dir),
        // A directory without memcached.conf.
        None => command.env("SASL_CONF_PATH", tempfile::tempdir().unwrap().path()),
    };
    let mut child = command.spawn().expect("kura starts");
    if conf.is_none() {
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        return Err(format!("{status}: {stderr}"));
    }
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let server = Running(child);
    // -B binary: ready once a binary `version` is answered.
    for _ in 0..2000 {
        if let Ok(mut stream) = TcpStream::connect(addr) {
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            if request(&mut stream, opcode::VERSION, b"", b"").0 == 0 {
                return Ok((server, addr));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("kura did not start on {addr}");
}

/// Sends one binary request; the reply's status and body.
fn request(stream: &mut TcpStream, op: u8, key: &[u8], value: &[u8]) -> (u16, Vec<u8>) {
    let extras: &[u8] = if op == opcode::SET { &[0; 8] } else { &[] };
    let mut out = Vec::new();
    compose_request(&mut out, op, 0, 0, extras, key, value);
    stream.write_all(&out).unwrap();
    let mut header = [0u8; 24];
    stream.read_exact(&mut header).unwrap();
    let status = u16::from_be_bytes([header[6], header[7]]);
    let body_len = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
    let mut body = vec![0; body_len];
    stream.read_exact(&mut body).unwrap();
    let skip = usize::from(header[4]) + usize::from(u16::from_be_bytes([header[2], header[3]]));
    (status, body[skip..].to_vec())
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

#[test]
fn cyrus_sasl_users_authenticate_with_plain_and_cram_md5() {
    let dir = tempfile::tempdir().unwrap();
    sasl_config(dir.path());
    let (_server, addr) = start(Some(dir.path())).unwrap();
    let mut stream = connect(addr);
    let (status, mechanisms) = request(&mut stream, opcode::SASL_LIST_MECHS, b"", b"");
    assert_eq!(status, 0);
    let mut mechanisms: Vec<_> = mechanisms.split(|&b| b == b' ').collect();
    mechanisms.sort();
    assert_eq!(mechanisms, [&b"CRAM-MD5"[..], b"PLAIN"]);

    // PLAIN: a wrong password, then the right one.
    let user = format!("alice@{REALM}");
    let plain = |password: &str| format!("\0{user}\0{password}").into_bytes();
    let (status, _) = request(&mut stream, opcode::SASL_AUTH, b"PLAIN", &plain("queen"));
    assert_eq!(status, 0x20);
    let mut stream = connect(addr);
    let (status, body) = request(
        &mut stream,
        opcode::SASL_AUTH,
        b"PLAIN",
        &plain("wonderland"),
    );
    assert_eq!((status, body), (0, b"Authenticated".to_vec()));
    assert_eq!(request(&mut stream, opcode::SET, b"k", b"v").0, 0);

    // CRAM-MD5: a challenge (status 0x21, "continue"), then the answer.
    let mut stream = connect(addr);
    let (status, challenge) = request(&mut stream, opcode::SASL_AUTH, b"CRAM-MD5", b"");
    assert_eq!(status, 0x21, "{challenge:?}");
    assert!(challenge.starts_with(b"<"), "{challenge:?}");
    let mut mac = Hmac::<md5::Md5>::new_from_slice(b"wonderland").unwrap();
    mac.update(&challenge);
    let digest: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let answer = format!("{user} {digest}");
    let (status, body) = request(
        &mut stream,
        opcode::SASL_STEP,
        b"CRAM-MD5",
        answer.as_bytes(),
    );
    assert_eq!((status, body), (0, b"Authenticated".to_vec()));
    assert_eq!(
        request(&mut stream, opcode::GET, b"k", b""),
        (0, b"v".to_vec())
    );

    // A step with no start is refused (libsasl2 would crash on it).
    let mut stream = connect(addr);
    let (status, _) = request(
        &mut stream,
        opcode::SASL_STEP,
        b"PLAIN",
        &plain("wonderland"),
    );
    assert_eq!(status, 0x20);
}

#[test]
fn without_a_sasl_configuration_the_server_refuses_to_start() {
    let error = start(None).err().expect("no configuration: no start");
    assert!(error.contains("no SASL configuration"), "{error}");
}
