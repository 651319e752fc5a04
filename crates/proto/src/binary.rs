//! memcached's binary protocol: a 24-byte header, then extras, key and value.
//!
//! ```text
//!  byte 0      1       2..3     4        5         6..7              8..11      12..15   16..23
//!  magic | opcode | key len | ext len | datatype | vbucket/status | body len | opaque | cas
//! ```
//! All integers are big-endian. Requests carry magic 0x80, responses 0x81.

use crate::Recovery;

pub const REQUEST_MAGIC: u8 = 0x80;
pub const RESPONSE_MAGIC: u8 = 0x81;
pub const HEADER_LEN: usize = 24;

/// Opcodes memcached 1.6 serves.
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
}

/// Response status codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    NoError = 0x0000,
    KeyNotFound = 0x0001,
    KeyExists = 0x0002,
    ValueTooLarge = 0x0003,
    InvalidArguments = 0x0004,
    ItemNotStored = 0x0005,
    NonNumeric = 0x0006,
    AuthError = 0x0020,
    AuthContinue = 0x0021,
    UnknownCommand = 0x0081,
    OutOfMemory = 0x0082,
    InternalError = 0x0084,
}

impl Status {
    /// The body memcached sends with an error status.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::NoError => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::ValueTooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::ItemNotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::AuthContinue => b"",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
            Status::InternalError => b"Internal error",
        }
    }
}

/// A request header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub body_len: u32,
    pub opaque: u32,
    pub cas: u64,
}

/// One request, borrowing its parts from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    pub header: Header,
    pub extras: &'a [u8],
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// What the binary parser made of the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse<'a> {
    Done {
        request: Request<'a>,
        consumed: usize,
    },
    Incomplete,
    /// Answer `status` to `header` (its opcode and opaque), then recover.
    Reject {
        header: Header,
        status: Status,
        consumed: usize,
        recovery: Recovery,
    },
    /// A value over the limit: answer "too large" (a set also removes the
    /// item of `key`, as memcached does), then swallow the `rest` of the
    /// body, the value, which is not buffered.
    TooLarge {
        header: Header,
        key: &'a [u8],
        consumed: usize,
        rest: u64,
    },
    /// Not a binary request at all: memcached closes the connection.
    BadMagic,
}

/// Parses one binary request. A value longer than `max_value` is answered
/// with "value too large" and swallowed without being buffered.
pub fn parse(buf: &[u8], max_value: usize) -> Parse<'_> {
    if buf.is_empty() {
        return Parse::Incomplete;
    }
    if buf[0] != REQUEST_MAGIC {
        return Parse::BadMagic;
    }
    if buf.len() < HEADER_LEN {
        return Parse::Incomplete;
    }
    let header = Header {
        opcode: buf[1],
        key_len: u16::from_be_bytes([buf[2], buf[3]]),
        extras_len: buf[4],
        body_len: u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]),
        opaque: u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]),
        cas: u64::from_be_bytes(buf[16..24].try_into().expect("8 bytes")),
    };
    let body_len = header.body_len as usize;
    let fixed = usize::from(header.key_len) + usize::from(header.extras_len);
    if fixed > body_len {
        // The lengths contradict each other: the stream cannot be trusted.
        return Parse::Reject {
            header,
            status: Status::InvalidArguments,
            consumed: HEADER_LEN,
            recovery: Recovery::Close,
        };
    }
    // As memcached does, a key too long or lengths that do not suit the
    // opcode are a protocol error: "invalid arguments", then the close.
    let value_len = body_len - fixed;
    let (extras_len, key_len) = (usize::from(header.extras_len), usize::from(header.key_len));
    if key_len > crate::MAX_KEY_LEN || !well_framed(header.opcode, extras_len, key_len, value_len) {
        return Parse::Reject {
            header,
            status: Status::InvalidArguments,
            consumed: HEADER_LEN,
            recovery: Recovery::Close,
        };
    }
    if value_len > max_value {
        // Only the extras and key are read: at most 505 bytes.
        let key_end = HEADER_LEN + fixed;
        if buf.len() < key_end {
            return Parse::Incomplete;
        }
        return Parse::TooLarge {
            header,
            key: &buf[HEADER_LEN + extras_len..key_end],
            consumed: key_end,
            rest: value_len as u64,
        };
    }
    if buf.len() < HEADER_LEN + body_len {
        return Parse::Incomplete;
    }
    let body = &buf[HEADER_LEN..HEADER_LEN + body_len];
    let (extras, rest) = body.split_at(usize::from(header.extras_len));
    let (key, value) = rest.split_at(usize::from(header.key_len));
    Parse::Done {
        request: Request {
            header,
            extras,
            key,
            value,
        },
        consumed: HEADER_LEN + body_len,
    }
}

/// Whether a request's lengths suit its opcode, as memcached checks them
/// before it runs the command. Unknown opcodes pass: they are answered
/// "unknown command" and the connection goes on; so does VERBOSITY, which
/// memcached 1.6.18 no longer knows (kura answers it as older ones did).
pub fn well_framed(code: u8, extras: usize, key: usize, value: usize) -> bool {
    use opcode::*;
    match code {
        VERSION | NOOP | QUIT | QUITQ | SASL_LIST_MECHS => extras == 0 && key == 0 && value == 0,
        FLUSH | FLUSHQ => (extras == 0 || extras == 4) && key == 0 && value == 0,
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => extras == 8 && key > 0,
        APPEND | APPENDQ | PREPEND | PREPENDQ => extras == 0 && key > 0,
        GET | GETQ | GETK | GETKQ | DELETE | DELETEQ => extras == 0 && key > 0 && value == 0,
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => extras == 20 && key > 0 && value == 0,
        // What follows a touch's key is skipped (memcached reads it as the
        // next request).
        TOUCH | GAT | GATQ | GATK | GATKQ => extras == 4 && key > 0,
        SASL_AUTH | SASL_STEP => extras == 0 && key > 0,
        STAT => extras == 0,
        _ => true,
    }
}

/// Appends one response.
#[allow(clippy::too_many_arguments)]
pub fn compose(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    compose_header(
        out,
        opcode,
        status,
        opaque,
        cas,
        extras.len() as u8,
        key.len() as u16,
        (extras.len() + key.len() + value.len()) as u32,
    );
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends a response header only; the caller appends a body of `body_len` bytes.
#[allow(clippy::too_many_arguments)]
pub fn compose_header(
    out: &mut Vec<u8>,
    opcode: u8,
    status: Status,
    opaque: u32,
    cas: u64,
    extras_len: u8,
    key_len: u16,
    body_len: u32,
) {
    out.push(RESPONSE_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&key_len.to_be_bytes());
    out.push(extras_len);
    out.push(0); // datatype: raw bytes
    out.extend_from_slice(&(status as u16).to_be_bytes());
    out.extend_from_slice(&body_len.to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
}

/// Appends an error response with memcached's message as the body.
pub fn compose_error(out: &mut Vec<u8>, opcode: u8, status: Status, opaque: u32) {
    compose(out, opcode, status, opaque, 0, &[], &[], status.message());
}

/// Builds a request; used by clients (`kura bench`) and tests.
pub fn compose_request(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    out.push(REQUEST_MAGIC);
    out.push(opcode);
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.push(0);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        compose_request(&mut out, opcode, 0xdead_beef, 7, extras, key, value);
        out
    }

    #[test]
    fn parses_a_set() {
        let bytes = request(opcode::SET, &[0, 0, 0, 5, 0, 0, 0, 0], b"key", b"value");
        let Parse::Done { request, consumed } = parse(&bytes, 1 << 20) else {
            panic!("not parsed")
        };
        assert_eq!(consumed, bytes.len());
        assert_eq!(request.header.opcode, opcode::SET);
        assert_eq!(request.header.opaque, 0xdead_beef);
        assert_eq!(request.header.cas, 7);
        assert_eq!(request.extras, &[0, 0, 0, 5, 0, 0, 0, 0]);
        assert_eq!(request.key, b"key");
        assert_eq!(request.value, b"value");
    }

    #[test]
    fn waits_for_the_whole_body() {
        let bytes = request(opcode::SET, &[0; 8], b"key", b"value");
        for cut in 0..bytes.len() {
            assert_eq!(
                parse(&bytes[..cut], 1 << 20),
                Parse::Incomplete,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn rejects_bad_magic_and_inconsistent_lengths() {
        assert_eq!(parse(b"get foo\r\n", 1 << 20), Parse::BadMagic);
        let mut bytes = request(opcode::GET, &[], b"key", b"");
        bytes[11] = 1; // body length 1 < key length 3
        assert!(matches!(
            parse(&bytes, 1 << 20),
            Parse::Reject {
                recovery: Recovery::Close,
                ..
            }
        ));
    }

    /// An opcode with its extras, key and value.
    type Framed = (u8, &'static [u8], &'static [u8], &'static [u8]);

    #[test]
    fn lengths_that_do_not_suit_the_opcode_or_a_long_key_close_the_connection() {
        let cases: [Framed; 11] = [
            (opcode::SET, &[], b"k", b"v"),
            (opcode::SET, &[0; 8], b"", b"v"),
            (opcode::GET, &[0; 4], b"k", b""),
            (opcode::GETQ, &[], b"k", b"v"),
            (opcode::DELETE, &[], b"", b""),
            (opcode::INCREMENT, &[0; 8], b"k", b""),
            (opcode::GAT, &[], b"k", b""),
            (opcode::FLUSH, &[0; 8], b"", b""),
            (opcode::NOOP, &[0; 4], b"", b""),
            (opcode::VERSION, &[], b"k", b""),
            (opcode::GET, &[], &[b'k'; 251], b""),
        ];
        for (code, extras, key, value) in cases {
            let bytes = request(code, extras, key, value);
            assert!(
                matches!(
                    parse(&bytes, 1 << 20),
                    Parse::Reject {
                        status: Status::InvalidArguments,
                        recovery: Recovery::Close,
                        ..
                    }
                ),
                "opcode {code:#x}, extras {}, key {}, value {}",
                extras.len(),
                key.len(),
                value.len()
            );
        }
        // Well framed, and an unknown opcode with a body, are parsed.
        let fine: [Framed; 6] = [
            (opcode::GET, &[], b"k", b""),
            (opcode::APPEND, &[], b"k", b"v"),
            (opcode::GAT, &[0; 4], b"k", b"ignored"),
            (opcode::FLUSH, &[0; 4], b"", b""),
            (opcode::STAT, &[], b"items", b""),
            (0xfe, &[0; 4], b"key", b"v"),
        ];
        for (code, extras, key, value) in fine {
            let bytes = request(code, extras, key, value);
            assert!(
                matches!(parse(&bytes, 1 << 20), Parse::Done { .. }),
                "opcode {code:#x}"
            );
        }
    }

    #[test]
    fn oversized_bodies_are_swallowed_after_their_key() {
        let bytes = request(opcode::SET, &[0; 8], b"k", &[0u8; 100]);
        assert!(matches!(
            parse(&bytes, 50),
            Parse::TooLarge {
                key: b"k",
                consumed: 33,
                rest: 100,
                ..
            }
        ));
        assert_eq!(parse(&bytes[..32], 50), Parse::Incomplete);
    }

    #[test]
    fn responses_round_trip_their_header() {
        let mut out = Vec::new();
        compose(
            &mut out,
            opcode::GETK,
            Status::NoError,
            9,
            42,
            &[0, 0, 0, 1],
            b"k",
            b"v",
        );
        assert_eq!(out.len(), HEADER_LEN + 6);
        assert_eq!(out[0], RESPONSE_MAGIC);
        assert_eq!(u16::from_be_bytes([out[6], out[7]]), 0);
        assert_eq!(u32::from_be_bytes([out[8], out[9], out[10], out[11]]), 6);
        assert_eq!(u64::from_be_bytes(out[16..24].try_into().unwrap()), 42);
    }
}
