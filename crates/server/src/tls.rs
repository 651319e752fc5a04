//! TLS for the listeners (memcached's `-Z` and `-o ssl_*`), with rustls.
//!
//! `TlsStream` puts a rustls server session over a non-blocking TCP socket
//! and gives the worker the plain `Read`/`Write` of any other stream:
//! - a read feeds the socket's records to rustls until plaintext comes out
//!   or the socket would block; handshake replies go out on the way;
//! - a write hands plaintext to rustls and sends the records the socket
//!   takes; what it does not take waits inside rustls (`wants_write`), and
//!   the worker keeps the connection writable until it is gone.
//!
//! The certificate is loaded at start and again on `refresh_certs`
//! (`Certificates::reload`); connections that are open keep the one they
//! started with.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use mio::net::TcpStream;
use parking_lot::RwLock;
use rustls::server::{
    ClientHello, NoServerSessionStorage, ResolvesServerCert, ServerSessionMemoryCache,
    WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig as RustlsConfig, ServerConnection};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsSettings;

/// Sessions a server-side cache keeps (`ssl_session_cache`).
const SESSION_CACHE_ENTRIES: usize = 1024;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("-Z needs -o ssl_chain_cert=FILE")]
    NoCertificate,
    #[error("cannot read {path}: {reason}")]
    File { path: String, reason: String },
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("ssl_ca_cert: {0}")]
    Verifier(String),
}

/// TLS counters for `stats`.
#[derive(Debug, Default)]
pub struct TlsCounters {
    pub handshake_errors: AtomicU64,
    pub new_sessions: AtomicU64,
}

/// The server's certificate, which `refresh_certs` may replace.
#[derive(Debug)]
pub struct Certificates {
    settings: TlsSettings,
    current: RwLock<Arc<CertifiedKey>>,
    /// Server uptime in seconds when the certificate was last loaded (0:
    /// at start), for `stats`' `time_since_server_cert_refresh`.
    refreshed_at: AtomicU32,
}

impl Certificates {
    fn load(settings: &TlsSettings) -> Result<CertifiedKey, TlsError> {
        let chain_path = settings
            .chain_cert
            .as_deref()
            .ok_or(TlsError::NoCertificate)?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain_path)
            .and_then(|certs| certs.collect::<Result<_, _>>())
            .map_err(|e| file_error(chain_path, e))?;
        if chain.is_empty() {
            return Err(file_error(chain_path, "no certificate in it"));
        }
        let key_path = settings.key.as_deref().unwrap_or(chain_path);
        let key = if settings.key_format == 2 {
            let der = std::fs::read(key_path).map_err(|e| file_error(key_path, e))?;
            PrivateKeyDer::try_from(der).map_err(|e| file_error(key_path, e))?
        } else {
            PrivateKeyDer::from_pem_file(key_path).map_err(|e| file_error(key_path, e))?
        };
        let provider = rustls::crypto::ring::default_provider();
        let signing_key = provider
            .key_provider
            .load_private_key(key)
            .map_err(TlsError::Rustls)?;
        let certified = CertifiedKey::new(chain, signing_key);
        // As memcached's SSL_CTX_check_private_key: a key that is not the
        // certificate's is refused (a rotation half done), and a refresh
        // keeps the certificate it had.
        match certified.keys_match() {
            Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
                Ok(certified)
            }
            Err(error) => Err(TlsError::Rustls(error)),
        }
    }

    /// Reads the certificate and key files again (`refresh_certs`);
    /// `uptime` is the server's uptime in seconds, kept as the refresh time.
    pub fn reload(&self, uptime: u32) -> Result<(), TlsError> {
        let fresh = Self::load(&self.settings)?;
        *self.current.write() = Arc::new(fresh);
        self.refreshed_at.store(uptime, Ordering::Relaxed);
        Ok(())
    }

    /// Server uptime in seconds when the certificate was last loaded.
    pub fn refreshed_at(&self) -> u32 {
        self.refreshed_at.load(Ordering::Relaxed)
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

fn file_error(path: &Path, reason: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// Everything a listener needs to start TLS sessions.
pub struct TlsAcceptor {
    config: Arc<RustlsConfig>,
    pub certificates: Arc<Certificates>,
    pub counters: Arc<TlsCounters>,
}

impl TlsAcceptor {
    pub fn new(settings: &TlsSettings) -> Result<TlsAcceptor, TlsError> {
        let certificates = Arc::new(Certificates {
            current: RwLock::new(Arc::new(Certificates::load(settings)?)),
            settings: settings.clone(),
            refreshed_at: AtomicU32::new(0),
        });
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let versions: &[&rustls::SupportedProtocolVersion] = if settings.min_version >= 3 {
            &[&rustls::version::TLS13]
        } else {
            &[&rustls::version::TLS12, &rustls::version::TLS13]
        };
        let builder = RustlsConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)?;
        let builder = match (settings.verify_mode, &settings.ca_cert) {
            (0, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(TlsError::Verifier(
                    "ssl_verify_mode above 0 needs -o ssl_ca_cert=FILE".into(),
                ))
            }
            (mode, Some(ca)) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(ca).map_err(|e| file_error(ca, e))? {
                    roots
                        .add(cert.map_err(|e| file_error(ca, e))?)
                        .map_err(|e| TlsError::Verifier(e.to_string()))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider);
                // 1 asks for a certificate; 2 and 3 require one.
                let verifier = if mode == 1 {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(
                    verifier
                        .build()
                        .map_err(|e| TlsError::Verifier(e.to_string()))?,
                )
            }
        };
        let mut config = builder.with_cert_resolver(certificates.clone());
        config.session_storage = if settings.session_cache {
            ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES)
        } else {
            Arc::new(NoServerSessionStorage {})
        };
        // memcached resumes through its session cache only, not tickets.
        config.send_tls13_tickets = if settings.session_cache { 1 } else { 0 };
        Ok(TlsAcceptor {
            config: Arc::new(config),
            certificates,
            counters: Arc::new(TlsCounters::default()),
        })
    }

    pub fn accept(&self, tcp: TcpStream) -> io::Result<TlsStream> {
        let session = ServerConnection::new(self.config.clone()).map_err(io::Error::other)?;
        Ok(TlsStream {
            tcp,
            session,
            counters: self.counters.clone(),
            handshaking: true,
        })
    }
}

/// A TLS session over a non-blocking TCP socket.
pub struct TlsStream {
    pub tcp: TcpStream,
    session: ServerConnection,
    counters: Arc<TlsCounters>,
    /// Until the handshake is done (for the counters).
    handshaking: bool,
}

impl TlsStream {
    /// Records rustls holds that the socket has not taken yet.
    pub fn wants_write(&self) -> bool {
        self.session.wants_write()
    }

    /// Sends what rustls holds; Ok(true) when nothing is left.
    pub fn send_records(&mut self) -> io::Result<bool> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn note_handshake(&mut self) {
        if self.handshaking && !self.session.is_handshaking() {
            self.handshaking = false;
            // A full handshake is a new session; a resumed one is not.
            if self.session.handshake_kind() == Some(rustls::HandshakeKind::Full) {
                self.counters.new_sessions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.session.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: an end of file all the same.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e),
            }
            match self.session.read_tls(&mut self.tcp) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Err(error) = self.session.process_new_packets() {
                if self.handshaking {
                    self.counters
                        .handshake_errors
                        .fetch_add(1, Ordering::Relaxed);
                }
                // Tell the peer why (an alert), then give up on it.
                let _ = self.send_records();
                return Err(io::Error::new(io::ErrorKind::InvalidData, error));
            }
            self.note_handshake();
            self.send_records()?;
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Take no more plaintext while records wait: the caller keeps it.
        if !self.send_records()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let taken = self.session.writer().write(buf)?;
        self.send_records()?;
        Ok(taken)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_records().map(|_| ())
    }
}
