//! kura's wire codecs: bytes in, typed requests out; typed replies in, bytes out.
//!
//! Nothing here touches a socket, a clock or a store. Each parser is a pure
//! function over `&[u8]` that answers with a complete request and the number of
//! bytes it used, `Incomplete` (wait for more bytes — a normal outcome), or a
//! rejection carrying memcached's exact error reply and how the stream recovers.
//! The same codec serves the server, `kura bench` and the tests.

pub mod binary;
pub mod client;
pub mod handlersocket;
pub mod line;
pub mod meta;
pub mod number;
pub mod replication;
pub mod reply;
pub mod text;
pub mod tyrant;
pub mod tyrant_http;
pub mod tyrant_repl;

pub use reply::ErrorReply;

/// memcached's longest key, in bytes.
pub const MAX_KEY_LEN: usize = 250;

/// A command line longer than this without a newline is not a command (except
/// a multi-get, which may carry hundreds of keys); memcached closes such a
/// connection, and so do we.
pub const MAX_LINE_LEN: usize = 2048;

/// What a parser made of the bytes at the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse<T> {
    /// A whole request; `consumed` bytes of the buffer belong to it.
    Done { request: T, consumed: usize },
    /// The buffer holds only the start of a request: read more.
    Incomplete,
    /// The request is invalid: answer `error` (unless the request said
    /// `noreply`), drop `consumed` bytes and then recover as `recovery` says.
    Reject {
        error: ErrorReply,
        consumed: usize,
        recovery: Recovery,
        /// memcached stays silent about errors found after a `noreply`
        /// command line was understood (too large, bad data chunk).
        noreply: bool,
    },
}

impl<T> Parse<T> {
    /// The same outcome with the request turned into another type.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Parse<U> {
        match self {
            Parse::Done { request, consumed } => Parse::Done {
                request: f(request),
                consumed,
            },
            Parse::Incomplete => Parse::Incomplete,
            Parse::Reject {
                error,
                consumed,
                recovery,
                noreply,
            } => Parse::Reject {
                error,
                consumed,
                recovery,
                noreply,
            },
        }
    }
}

/// How the stream goes on after a rejected request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Parse the next request from the following bytes.
    Continue,
    /// Discard this many further bytes first (the data block of a rejected
    /// storage command, which may not have arrived yet), so the stream stays
    /// in sync.
    Swallow(u64),
    /// The stream cannot be resynchronised: close the connection.
    Close,
}

/// Which protocol a connection speaks; memcached's `-B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Text,
    Binary,
    /// Tokyo Tyrant's binary protocol (`tyrant.rs`), on `--tyrant-port`.
    Tyrant,
    /// Tokyo Tyrant's HTTP interface (`tyrant_http.rs`), on the same port.
    TyrantHttp,
    /// HandlerSocket's protocol (`handlersocket.rs`), on `--hs-read-port`
    /// and `--hs-write-port`.
    HandlerSocket,
}

/// The first byte of a binary request; anything else is text (memcached's `-B auto`).
pub fn detect_protocol(first_byte: u8) -> Protocol {
    if first_byte == binary::REQUEST_MAGIC {
        Protocol::Binary
    } else {
        Protocol::Text
    }
}
