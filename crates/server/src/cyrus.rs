//! Cyrus SASL through the system's libsasl2, as memcached authenticates
//! (`-S` without `MEMCACHED_SASL_PWDB` or `-Y`): users in a sasldb written by
//! `saslpasswd2 -a memcached`, the mechanisms the SASL configuration lists
//! (`mech_list`, e.g. PLAIN and CRAM-MD5).
//!
//! libsasl2 is loaded with `dlopen` when `-S` asks for it, so kura neither
//! needs libsasl2's headers to build nor links it when nobody authenticates.
//! No Rust crate reads a Cyrus sasldb (a Berkeley DB file) or serves
//! CRAM-MD5 from it; the library that wrote the database is the one that can.
//!
//! Like memcached, kura refuses to start when no SASL configuration is found
//! (`SASL_CONF_PATH`, or `/etc/sasl{,2}/memcached.conf`): without one,
//! libsasl2 offers every installed mechanism, ANONYMOUS included.
//!
//! libsasl2's own locks are no-ops, so every call into it holds one
//! process-wide lock. Authentication is rare; contention does not matter.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

const SASL_OK: c_int = 0;
const SASL_CONTINUE: c_int = 1;
const SASL_CB_LIST_END: c_ulong = 0;
const SASL_CB_LOG: c_ulong = 2;
const SASL_CB_GETCONFPATH: c_ulong = 5;
const SASL_LOG_FAIL: c_int = 2;
const SASL_LOG_WARN: c_int = 3;

/// The name libsasl2 reads the configuration under (`memcached.conf`), and
/// the service the sasldb's users belong to (`saslpasswd2 -a memcached`).
const APP: &CStr = c"memcached";
const LIBRARY: &CStr = c"libsasl2.so.2";

/// `sasl_callback_t`.
#[repr(C)]
struct Callback {
    id: c_ulong,
    procedure: *const c_void,
    context: *mut c_void,
}

type ServerInit = unsafe extern "C" fn(*const Callback, *const c_char) -> c_int;
type ServerNew = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const c_char,
    *const c_char,
    *const c_char,
    *const Callback,
    c_uint,
    *mut *mut c_void,
) -> c_int;
type ListMech = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    *const c_char,
    *const c_char,
    *const c_char,
    *mut *const c_char,
    *mut c_uint,
    *mut c_int,
) -> c_int;
type ServerStart = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    *const c_char,
    c_uint,
    *mut *const c_char,
    *mut c_uint,
) -> c_int;
type ServerStep = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    c_uint,
    *mut *const c_char,
    *mut c_uint,
) -> c_int;
type Dispose = unsafe extern "C" fn(*mut *mut c_void);

/// The loaded library, initialised once per process.
pub struct Library {
    server_new: ServerNew,
    listmech: ListMech,
    server_start: ServerStart,
    server_step: ServerStep,
    dispose: Dispose,
    /// Passed as the user realm, as memcached passes its host name.
    hostname: CString,
    lock: Mutex<()>,
}

/// The configuration directory the getconfpath callback hands libsasl2.
static CONFIG_DIR: OnceLock<CString> = OnceLock::new();
/// `sasl_server_init` may run once per process.
static LOADED: OnceLock<Result<Arc<Library>, String>> = OnceLock::new();

/// What one authentication request came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Authenticated,
    /// The mechanism needs another step; the challenge for the client.
    Continue(Vec<u8>),
    Failed,
}

/// Where memcached looks for `memcached.conf`: `SASL_CONF_PATH`, else
/// `/etc/sasl`, else `/etc/sasl2`. A directory without the file does not
/// count: libsasl2 would start with every mechanism it has.
pub fn config_dir(env: Option<&Path>) -> Option<PathBuf> {
    let candidates: Vec<&Path> = match env {
        Some(dir) => vec![dir],
        None => vec![Path::new("/etc/sasl"), Path::new("/etc/sasl2")],
    };
    candidates
        .into_iter()
        .find(|dir| dir.join("memcached.conf").is_file())
        .map(Path::to_path_buf)
}

impl Library {
    /// Loads and initialises libsasl2 (once per process; later calls get
    /// the same library, or the same error).
    pub fn load() -> Result<Arc<Library>, String> {
        LOADED.get_or_init(Self::load_once).clone()
    }

    fn load_once() -> Result<Arc<Library>, String> {
        let env = std::env::var_os("SASL_CONF_PATH").map(PathBuf::from);
        let dir = config_dir(env.as_deref()).ok_or(
            "-S: no SASL configuration: no memcached.conf in SASL_CONF_PATH's directory, \
             /etc/sasl or /etc/sasl2 (or give the users in MEMCACHED_SASL_PWDB)",
        )?;
        let dir = CString::new(dir.into_os_string().into_encoded_bytes())
            .map_err(|_| "-S: the SASL configuration path holds a NUL byte".to_string())?;
        let _ = CONFIG_DIR.set(dir);
        // SAFETY: dlopen and dlsym are given NUL-terminated names; each symbol
        // is cast to the prototype sasl.h declares for it.
        unsafe {
            let handle = libc::dlopen(LIBRARY.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if handle.is_null() {
                return Err(format!(
                    "-S: cannot load {} ({}); install Debian's libsasl2-2 and libsasl2-modules",
                    LIBRARY.to_string_lossy(),
                    last_dl_error()
                ));
            }
            let symbol = |name: &CStr| -> Result<*mut c_void, String> {
                let found = libc::dlsym(handle, name.as_ptr());
                if found.is_null() {
                    Err(format!("-S: libsasl2 has no {}", name.to_string_lossy()))
                } else {
                    Ok(found)
                }
            };
            let server_init: ServerInit = std::mem::transmute(symbol(c"sasl_server_init")?);
            let library = Library {
                server_new: std::mem::transmute::<*mut c_void, ServerNew>(symbol(
                    c"sasl_server_new",
                )?),
                listmech: std::mem::transmute::<*mut c_void, ListMech>(symbol(c"sasl_listmech")?),
                server_start: std::mem::transmute::<*mut c_void, ServerStart>(symbol(
                    c"sasl_server_start",
                )?),
                server_step: std::mem::transmute::<*mut c_void, ServerStep>(symbol(
                    c"sasl_server_step",
                )?),
                dispose: std::mem::transmute::<*mut c_void, Dispose>(symbol(c"sasl_dispose")?),
                hostname: hostname(),
                lock: Mutex::new(()),
            };
            // libsasl2 keeps the pointer: the callbacks live as long as the process.
            let callbacks: &'static [Callback; 3] = Box::leak(Box::new([
                Callback {
                    id: SASL_CB_LOG,
                    procedure: log as *const c_void,
                    context: std::ptr::null_mut(),
                },
                Callback {
                    id: SASL_CB_GETCONFPATH,
                    procedure: config_path as *const c_void,
                    context: std::ptr::null_mut(),
                },
                Callback {
                    id: SASL_CB_LIST_END,
                    procedure: std::ptr::null(),
                    context: std::ptr::null_mut(),
                },
            ]));
            let result = server_init(callbacks.as_ptr(), APP.as_ptr());
            if result != SASL_OK {
                return Err(format!(
                    "-S: libsasl2 could not start (error {result}); check {}/memcached.conf",
                    CONFIG_DIR.get().map_or("".into(), |d| d.to_string_lossy())
                ));
            }
            Ok(Arc::new(library))
        }
    }
}

fn last_dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message.
    unsafe {
        let message = libc::dlerror();
        if message.is_null() {
            "unknown error".to_string()
        } else {
            CStr::from_ptr(message).to_string_lossy().into_owned()
        }
    }
}

fn hostname() -> CString {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is writable for its length; the last byte stays NUL.
    let ok = unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len() - 1) } == 0;
    let len = name.iter().position(|&b| b == 0).unwrap_or(0);
    CString::new(if ok { &name[..len] } else { &[][..] }).unwrap_or_default()
}

/// `sasl_log_t`: libsasl2's messages go to kura's log.
extern "C" fn log(_context: *mut c_void, level: c_int, message: *const c_char) -> c_int {
    if !message.is_null() {
        // SAFETY: libsasl2 passes a NUL-terminated message.
        let message = unsafe { CStr::from_ptr(message) }.to_string_lossy();
        match level {
            ..=SASL_LOG_FAIL => tracing::warn!(target: "kura::sasl", "{message}"),
            SASL_LOG_WARN => tracing::info!(target: "kura::sasl", "{message}"),
            _ => tracing::debug!(target: "kura::sasl", "{message}"),
        }
    }
    SASL_OK
}

/// `sasl_getconfpath_t`: the directory found at load. The library takes
/// the string as its own, so it gets a copy from the C heap.
extern "C" fn config_path(_context: *mut c_void, path: *mut *mut c_char) -> c_int {
    match CONFIG_DIR.get() {
        Some(dir) if !path.is_null() => {
            // SAFETY: `path` is libsasl2's out-parameter; strdup copies a
            // NUL-terminated string.
            unsafe { *path = libc::strdup(dir.as_ptr()) };
            SASL_OK
        }
        _ => -1,
    }
}

/// One connection's authentication: a libsasl2 connection, made when the
/// client first speaks SASL.
pub struct Conversation {
    library: Arc<Library>,
    conn: *mut c_void,
    /// A start succeeded or asked for more: only then may a step follow
    /// (libsasl2 crashes on a step without a start).
    started: bool,
}

// SAFETY: a conversation belongs to one connection, served by one worker at
// a time, and every call into libsasl2 holds the library's lock.
unsafe impl Send for Conversation {}

impl std::fmt::Debug for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversation")
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl Conversation {
    pub fn new(library: &Arc<Library>) -> Option<Conversation> {
        let mut conn = std::ptr::null_mut();
        let _held = library.lock.lock();
        // SAFETY: the service and realm are NUL-terminated and outlive the
        // call; `conn` receives the new connection.
        let result = unsafe {
            (library.server_new)(
                APP.as_ptr(),
                std::ptr::null(),
                library.hostname.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                std::ptr::null(),
                0,
                &mut conn,
            )
        };
        (result == SASL_OK && !conn.is_null()).then(|| Conversation {
            library: library.clone(),
            conn,
            started: false,
        })
    }

    /// The mechanisms offered, separated by spaces.
    pub fn mechanisms(&mut self) -> Option<Vec<u8>> {
        let _held = self.library.lock.lock();
        let mut list: *const c_char = std::ptr::null();
        let mut len: c_uint = 0;
        // SAFETY: the separators are NUL-terminated; the list belongs to the
        // connection and is copied before the lock is released.
        unsafe {
            let result = (self.library.listmech)(
                self.conn,
                std::ptr::null(),
                c"".as_ptr(),
                c" ".as_ptr(),
                c"".as_ptr(),
                &mut list,
                &mut len,
                std::ptr::null_mut(),
            );
            (result == SASL_OK && !list.is_null())
                .then(|| std::slice::from_raw_parts(list.cast::<u8>(), len as usize).to_vec())
        }
    }

    /// `SASL_AUTH`: starts `mechanism` with the client's first message.
    pub fn start(&mut self, mechanism: &[u8], input: &[u8]) -> Outcome {
        let Ok(mechanism) = CString::new(mechanism) else {
            return Outcome::Failed;
        };
        let server_start = self.library.server_start;
        let conn = self.conn;
        // SAFETY: the mechanism is NUL-terminated and outlives the call.
        let (result, outcome) = self.exchange(input, |input, len, out, out_len| unsafe {
            server_start(conn, mechanism.as_ptr(), input, len, out, out_len)
        });
        self.started = result == SASL_OK || result == SASL_CONTINUE;
        outcome
    }

    /// `SASL_STEP`: the client's next message.
    pub fn step(&mut self, input: &[u8]) -> Outcome {
        if !self.started {
            return Outcome::Failed;
        }
        let server_step = self.library.server_step;
        let conn = self.conn;
        // SAFETY: the arguments are as `exchange` describes.
        self.exchange(input, |input, len, out, out_len| unsafe {
            server_step(conn, input, len, out, out_len)
        })
        .1
    }

    /// One call into libsasl2 with the client's message: `call` gets the
    /// message NUL-terminated (the sentinel not counted, as libsasl2
    /// requires; NULL when empty) and the places for the reply, which
    /// belongs to the connection and is copied before the lock is released.
    fn exchange(
        &mut self,
        input: &[u8],
        call: impl FnOnce(*const c_char, c_uint, &mut *const c_char, &mut c_uint) -> c_int,
    ) -> (c_int, Outcome) {
        let input = with_sentinel(input);
        let (bytes, len) = input
            .as_ref()
            .map_or((std::ptr::null(), 0), |(bytes, len)| {
                (bytes.as_ptr().cast(), *len)
            });
        let _held = self.library.lock.lock();
        let mut out: *const c_char = std::ptr::null();
        let mut out_len: c_uint = 0;
        let result = call(bytes, len, &mut out, &mut out_len);
        (result, outcome(result, out, out_len))
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        let _held = self.library.lock.lock();
        // SAFETY: `conn` came from sasl_server_new and is disposed once.
        unsafe { (self.library.dispose)(&mut self.conn) };
    }
}

/// The client's message with a NUL after it, and its length without; None
/// for an empty message (memcached passes NULL then).
fn with_sentinel(input: &[u8]) -> Option<(Vec<u8>, c_uint)> {
    if input.is_empty() {
        return None;
    }
    let len = c_uint::try_from(input.len()).ok()?;
    let mut bytes = Vec::with_capacity(input.len() + 1);
    bytes.extend_from_slice(input);
    bytes.push(0);
    Some((bytes, len))
}

fn outcome(result: c_int, out: *const c_char, out_len: c_uint) -> Outcome {
    match result {
        SASL_OK => Outcome::Authenticated,
        SASL_CONTINUE => {
            let challenge = if out.is_null() {
                Vec::new()
            } else {
                // SAFETY: libsasl2 hands `out_len` bytes at `out`.
                unsafe { std::slice::from_raw_parts(out.cast::<u8>(), out_len as usize) }.to_vec()
            };
            Outcome::Continue(challenge)
        }
        _ => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_is_looked_for_where_memcached_looks() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(config_dir(Some(dir.path())), None, "no memcached.conf");
        std::fs::write(dir.path().join("memcached.conf"), "mech_list: plain\n").unwrap();
        assert_eq!(config_dir(Some(dir.path())), Some(dir.path().to_path_buf()));
    }

    #[test]
    fn messages_get_a_sentinel_that_is_not_counted() {
        assert_eq!(with_sentinel(b""), None);
        assert_eq!(with_sentinel(b"ab"), Some((b"ab\0".to_vec(), 2)));
    }

    #[test]
    fn results_map_to_outcomes() {
        assert_eq!(outcome(0, std::ptr::null(), 0), Outcome::Authenticated);
        assert_eq!(outcome(-13, std::ptr::null(), 0), Outcome::Failed);
        let challenge = c"<1.2@host>";
        assert_eq!(
            outcome(1, challenge.as_ptr(), 10),
            Outcome::Continue(b"<1.2@host>".to_vec())
        );
    }
}
