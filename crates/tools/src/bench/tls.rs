//! TLS for `kura bench` (`--tls`): a rustls client session over each
//! non-blocking connection, for servers started with memcached's `-Z`.
//!
//! A connection counts as connected once its handshake is done: the connect
//! time of a TLS run includes the handshake, and no request is sent before
//! it. Plaintext connections never reach this module: the engine keeps the
//! session in an `Option` beside the socket and goes straight to the socket
//! when there is none.
//!
//! The socket is edge-triggered, and rustls takes at most 4 KiB of records
//! per `read_tls` and holds at most 16 KiB of plaintext, so a read goes on
//! until the socket is drained, moving the plaintext out after every record
//! batch: stopping when rustls has returned plaintext could leave records in
//! the socket with no event left to announce them. Drained means a `recv`
//! that returned less than it was offered (as on the plaintext path) or
//! would block: the usual response then costs one `recv`, not two.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// What every TLS connection of a run shares: one client configuration and
/// the name each server's certificate must carry.
#[derive(Debug, Clone)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
    /// One per server, in the order of `Workload::servers`.
    names: Vec<ServerName<'static>>,
    /// The CA file certificates are verified against; `None`: not verified.
    ca: Option<PathBuf>,
}

impl TlsClient {
    /// `hosts` are the servers as the user named them (names or addresses),
    /// one per server; `server_name` overrides all of them.
    pub fn new(
        ca: Option<&Path>,
        server_name: Option<&str>,
        hosts: &[String],
    ) -> Result<TlsClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .map_err(|e| format!("TLS settings: {e}"))?;
        let config = match ca {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("cannot read --tls-ca {}: {e}", path.display()))?;
                if certs.is_empty() {
                    return Err(format!(
                        "--tls-ca {}: no PEM certificate in it",
                        path.display()
                    ));
                }
                for cert in certs {
                    roots
                        .add(cert)
                        .map_err(|e| format!("--tls-ca {}: {e}", path.display()))?;
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth(),
        };
        let names = hosts
            .iter()
            .map(|host| {
                let name = server_name.unwrap_or(host);
                ServerName::try_from(name.to_string())
                    .map_err(|_| format!("'{name}' is not a valid TLS server name"))
            })
            .collect::<Result<_, _>>()?;
        Ok(TlsClient {
            config: Arc::new(config),
            names,
            ca: ca.map(Path::to_path_buf),
        })
    }

    /// A new session with server `server` (an index into the run's servers).
    pub(crate) fn session(&self, server: usize) -> Result<Session, rustls::Error> {
        let name = self.names[server.min(self.names.len() - 1)].clone();
        Ok(Session {
            conn: ClientConnection::new(self.config.clone(), name)?,
        })
    }

    /// How the server's certificate is checked, for the summary.
    pub fn verification(&self) -> String {
        match &self.ca {
            Some(path) => format!("certificate verified against {}", path.display()),
            None => "certificate NOT verified (no --tls-ca)".into(),
        }
    }
}

/// Why a TLS connection failed: its socket, or TLS itself (a certificate
/// the CA does not sign, an alert from the server, a handshake that does not
/// parse).
pub(crate) enum SessionError {
    Io(io::Error),
    Tls(rustls::Error),
}

impl From<io::Error> for SessionError {
    fn from(error: io::Error) -> Self {
        SessionError::Io(error)
    }
}

/// One client session over a non-blocking socket.
pub(crate) struct Session {
    conn: ClientConnection,
}

impl Session {
    pub(crate) fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Records rustls holds that the socket has not taken yet.
    pub(crate) fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// The negotiated version and cipher suite, e.g. `TLSv1_3 TLS13_AES_256_GCM_SHA384`.
    pub(crate) fn describe(&self) -> Option<String> {
        let version = self.conn.protocol_version()?;
        let suite = self.conn.negotiated_cipher_suite()?;
        Some(format!("{version:?} {:?}", suite.suite()))
    }

    /// Sends the records rustls holds; Ok(true) when none is left.
    pub(crate) fn send(&mut self, tcp: &mut TcpStream) -> io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Encrypts `data` and sends it until the socket is full; returns how
    /// much of `data` was taken. rustls holds at most 64 KiB of records, so
    /// it goes round until the socket would block: stopping at rustls's
    /// limit would leave a writable socket that no event will announce.
    pub(crate) fn write(&mut self, tcp: &mut TcpStream, data: &[u8]) -> io::Result<usize> {
        let mut taken = 0;
        while self.send(tcp)? && taken < data.len() {
            taken += self.conn.writer().write(&data[taken..])?;
        }
        Ok(taken)
    }

    /// Reads everything the socket has, appending the plaintext to `input`
    /// (through `buf`); handshake replies and alerts go out on the way.
    /// Ok(true) at end of file.
    pub(crate) fn read(
        &mut self,
        tcp: &mut TcpStream,
        buf: &mut [u8],
        input: &mut Vec<u8>,
    ) -> Result<bool, SessionError> {
        let eof = loop {
            let mut socket = Drained {
                tcp,
                drained: false,
            };
            let eof = match self.conn.read_tls(&mut socket) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            let drained = socket.drained;
            if let Err(error) = self.conn.process_new_packets() {
                // Tell the server why (an alert) before giving up.
                let _ = self.send(tcp);
                return Err(SessionError::Tls(error));
            }
            if self.drain(buf, input)? || eof {
                break true;
            }
            if drained {
                break false;
            }
        };
        self.send(tcp)?;
        Ok(eof)
    }

    /// Moves the plaintext rustls holds into `input`; true once the server
    /// has closed (close_notify, or end of file without it).
    fn drain(&mut self, buf: &mut [u8], input: &mut Vec<u8>) -> io::Result<bool> {
        loop {
            match self.conn.reader().read(buf) {
                Ok(0) => return Ok(true),
                Ok(n) => input.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }
}

/// The socket as rustls reads it, noting a short read: the socket had no
/// more than that, so the next `recv` would only say it would block.
struct Drained<'a> {
    tcp: &'a mut TcpStream,
    drained: bool,
}

impl Read for Drained<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        self.drained = n < buf.len();
        Ok(n)
    }
}

/// The verifier of `--tls` without `--tls-ca`: any certificate is taken for
/// the server's. The handshake's signatures are still checked, so the
/// session is encrypted to whoever holds the certificate's key — but that
/// may be anyone.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
