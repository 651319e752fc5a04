//! Tokyo Tyrant's binary protocol (ttserver 1.1.41): a request is the magic
//! byte 0xC8, a command byte, fixed big-endian fields, then the bytes those
//! fields announce.
//!
//! ```text
//!  put      C8 10 [ksiz:4][vsiz:4][key][value]          → [code]
//!  get      C8 30 [ksiz:4][key]                         → [0][vsiz:4][value] | [1]
//!  mget     C8 31 [n:4]{[ksiz:4][key]}*n                → [0][hits:4]{[ksiz:4][vsiz:4][key][value]}*
//!  misc     C8 90 [nsiz:4][opts:4][n:4][name]{[asiz:4][arg]}*n → [code][n:4]{[esiz:4][elem]}*
//! ```
//!
//! ttserver answers a malformed request (a size out of range, an unknown
//! command byte) with nothing and closes the connection; so does kura
//! ([`Parse::Close`]). Every other failure is the status byte 1.

/// The first byte of every binary request.
pub const MAGIC: u8 = 0xC8;
/// The most arguments of an `mget` or a `misc` (ttserver's `MAXARGNUM`).
pub const MAX_ARGS: usize = 1 << 20;
/// The longest name of a `misc` or `ext` function (ttserver refuses 1024).
pub const MAX_NAME: usize = 1023;

/// Command bytes (ttserver's `ttutil.h`).
pub mod command {
    pub const PUT: u8 = 0x10;
    pub const PUTKEEP: u8 = 0x11;
    pub const PUTCAT: u8 = 0x12;
    pub const PUTSHL: u8 = 0x13;
    pub const PUTNR: u8 = 0x18;
    pub const OUT: u8 = 0x20;
    pub const GET: u8 = 0x30;
    pub const MGET: u8 = 0x31;
    pub const VSIZ: u8 = 0x38;
    pub const ITERINIT: u8 = 0x50;
    pub const ITERNEXT: u8 = 0x51;
    pub const FWMKEYS: u8 = 0x58;
    pub const ADDINT: u8 = 0x60;
    pub const ADDDOUBLE: u8 = 0x61;
    pub const EXT: u8 = 0x68;
    pub const SYNC: u8 = 0x70;
    pub const OPTIMIZE: u8 = 0x71;
    pub const VANISH: u8 = 0x72;
    pub const COPY: u8 = 0x73;
    pub const RESTORE: u8 = 0x74;
    pub const SETMST: u8 = 0x78;
    pub const RNUM: u8 = 0x80;
    pub const SIZE: u8 = 0x81;
    pub const STAT: u8 = 0x88;
    pub const MISC: u8 = 0x90;
    pub const REPL: u8 = 0xA0;
}

/// `misc` option bit: do not write the call to the update log.
pub const MISC_NO_LOG: u32 = 1;

/// How a put treats an existing record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    /// Overwrite.
    Put,
    /// Only if the key is new.
    Keep,
    /// Append to the existing value (or create it).
    Cat,
    /// Overwrite, and send no reply at all.
    NoReply,
}

/// One request, borrowing its parts from the input.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<'a> {
    Put {
        mode: PutMode,
        key: &'a [u8],
        value: &'a [u8],
    },
    /// Append, then keep only the last `width` bytes.
    PutShl {
        key: &'a [u8],
        value: &'a [u8],
        width: u32,
    },
    Out {
        key: &'a [u8],
    },
    Get {
        key: &'a [u8],
    },
    Mget {
        keys: Vec<&'a [u8]>,
    },
    Vsiz {
        key: &'a [u8],
    },
    IterInit,
    IterNext,
    /// Keys starting with `prefix`, at most `max` (negative: all).
    Fwmkeys {
        prefix: &'a [u8],
        max: i32,
    },
    AddInt {
        key: &'a [u8],
        delta: i32,
    },
    AddDouble {
        key: &'a [u8],
        delta: f64,
    },
    /// A call of the server's script extension.
    Ext {
        name: &'a [u8],
        opts: u32,
        key: &'a [u8],
        value: &'a [u8],
    },
    Sync,
    Optimize {
        params: &'a [u8],
    },
    Vanish,
    Copy {
        path: &'a [u8],
    },
    /// Replays the update log in `path` from `micros` on.
    Restore {
        path: &'a [u8],
        micros: u64,
        opts: u32,
    },
    SetMaster {
        host: &'a [u8],
        port: u32,
        micros: u64,
        opts: u32,
    },
    Rnum,
    Size,
    Stat,
    Misc {
        name: &'a [u8],
        opts: u32,
        args: Vec<&'a [u8]>,
    },
    /// A replica asks for the update log from `micros` on.
    Repl {
        micros: u64,
        server_id: u32,
    },
}

/// Why a request cannot be served: ttserver closes the connection
/// without a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// The first byte is not [`MAGIC`].
    NotBinary,
    UnknownCommand(u8),
    /// A size or count beyond what the server accepts.
    TooLarge,
    /// A field out of its range (a negative width or port, a zero time).
    BadField,
}

/// What the parser made of the front of a buffer.
#[derive(Debug, PartialEq)]
pub enum Parse<'a> {
    Done {
        request: Request<'a>,
        consumed: usize,
    },
    /// The buffer ends first; it must hold at least `needed` bytes before
    /// a parse can get further (a caller need not parse again before).
    Incomplete { needed: usize },
    /// Close the connection, answering nothing.
    Close(Malformed),
}

/// Reads the fields of one request front to back; `None` means the
/// buffer ends first.
struct Fields<'a> {
    buf: &'a [u8],
    at: usize,
    /// The least length of the request known so far. A request of many
    /// arguments sent a few bytes at a time would otherwise be parsed from
    /// its start again at every read: quadratic in its arguments.
    needed: usize,
}

impl<'a> Fields<'a> {
    fn u32(&mut self) -> Option<u32> {
        let bytes = self.bytes(4)?;
        Some(u32::from_be_bytes(bytes.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Option<u64> {
        let bytes = self.bytes(8)?;
        Some(u64::from_be_bytes(bytes.try_into().expect("8 bytes")))
    }

    fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.at.saturating_add(len);
        self.needed = self.needed.max(end);
        let bytes = self.buf.get(self.at..end)?;
        self.at = end;
        Some(bytes)
    }

    /// The rest of the request is at least `len` bytes long (a field past
    /// the ones read may yet close the connection: that is found once the
    /// buffer holds this much).
    fn at_least(&mut self, len: usize) {
        self.needed = self.needed.max(self.at.saturating_add(len));
    }
}

/// A size field, checked against `limit` (ttserver reads sizes as signed
/// ints: 2^31 and more are negative, and refused).
fn size(value: u32, limit: usize) -> Result<usize, Malformed> {
    let size = value as usize;
    if value > i32::MAX as u32 || size > limit {
        return Err(Malformed::TooLarge);
    }
    Ok(size)
}

/// Parses one request. A key, value or argument longer than `max_arg`
/// closes the connection, as ttserver does past its 256 MiB.
pub fn parse(buf: &[u8], max_arg: usize) -> Parse<'_> {
    let mut fields = Fields {
        buf,
        at: 0,
        needed: 0,
    };
    match parse_fields(&mut fields, max_arg) {
        Ok(Some(request)) => Parse::Done {
            request,
            consumed: fields.at,
        },
        Ok(None) => Parse::Incomplete {
            needed: fields.needed,
        },
        Err(malformed) => Parse::Close(malformed),
    }
}

fn parse_fields<'a>(
    fields: &mut Fields<'a>,
    max_arg: usize,
) -> Result<Option<Request<'a>>, Malformed> {
    use command::*;
    let Some(magic) = fields.bytes(1) else {
        return Ok(None);
    };
    if magic[0] != MAGIC {
        return Err(Malformed::NotBinary);
    }
    let Some(command) = fields.bytes(1).map(|command| command[0]) else {
        return Ok(None);
    };
    // `?` on an `Option` below: the buffer ends before the request does.
    let request = (|| -> Option<Result<Request<'a>, Malformed>> {
        let arg = |value: u32| size(value, max_arg);
        Some(Ok(match command {
            PUT | PUTKEEP | PUTCAT | PUTNR => {
                let (key_len, value_len) = (fields.u32()?, fields.u32()?);
                let (key_len, value_len) = match (arg(key_len), arg(value_len)) {
                    (Ok(k), Ok(v)) => (k, v),
                    (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
                };
                let mode = match command {
                    PUT => PutMode::Put,
                    PUTKEEP => PutMode::Keep,
                    PUTCAT => PutMode::Cat,
                    _ => PutMode::NoReply,
                };
                Request::Put {
                    mode,
                    key: fields.bytes(key_len)?,
                    value: fields.bytes(value_len)?,
                }
            }
            PUTSHL => {
                let (key_len, value_len, width) = (fields.u32()?, fields.u32()?, fields.u32()?);
                let (key_len, value_len) = match (arg(key_len), arg(value_len)) {
                    (Ok(k), Ok(v)) => (k, v),
                    (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
                };
                if width > i32::MAX as u32 {
                    return Some(Err(Malformed::BadField));
                }
                Request::PutShl {
                    key: fields.bytes(key_len)?,
                    value: fields.bytes(value_len)?,
                    width,
                }
            }
            OUT | GET | VSIZ => {
                let key_len = match arg(fields.u32()?) {
                    Ok(len) => len,
                    Err(e) => return Some(Err(e)),
                };
                let key = fields.bytes(key_len)?;
                match command {
                    OUT => Request::Out { key },
                    GET => Request::Get { key },
                    _ => Request::Vsiz { key },
                }
            }
            MGET => {
                let count = match size(fields.u32()?, MAX_ARGS) {
                    Ok(count) => count,
                    Err(e) => return Some(Err(e)),
                };
                let mut keys = Vec::with_capacity(count.min(1024));
                for left in (1..=count).rev() {
                    fields.at_least(4 * left);
                    let key_len = match arg(fields.u32()?) {
                        Ok(len) => len,
                        Err(e) => return Some(Err(e)),
                    };
                    keys.push(fields.bytes(key_len)?);
                }
                Request::Mget { keys }
            }
            ITERINIT => Request::IterInit,
            ITERNEXT => Request::IterNext,
            FWMKEYS => {
                let (prefix_len, max) = (fields.u32()?, fields.u32()? as i32);
                let prefix_len = match arg(prefix_len) {
                    Ok(len) => len,
                    Err(e) => return Some(Err(e)),
                };
                Request::Fwmkeys {
                    prefix: fields.bytes(prefix_len)?,
                    max,
                }
            }
            ADDINT => {
                let (key_len, delta) = (fields.u32()?, fields.u32()? as i32);
                let key_len = match arg(key_len) {
                    Ok(len) => len,
                    Err(e) => return Some(Err(e)),
                };
                Request::AddInt {
                    key: fields.bytes(key_len)?,
                    delta,
                }
            }
            ADDDOUBLE => {
                let key_len = fields.u32()?;
                let (integral, fraction) = (fields.u64()? as i64, fields.u64()? as i64);
                let key_len = match arg(key_len) {
                    Ok(len) => len,
                    Err(e) => return Some(Err(e)),
                };
                Request::AddDouble {
                    key: fields.bytes(key_len)?,
                    delta: unpack_double(integral, fraction),
                }
            }
            EXT => {
                let (name_len, opts) = (fields.u32()?, fields.u32()?);
                let (key_len, value_len) = (fields.u32()?, fields.u32()?);
                let lens = (size(name_len, MAX_NAME), arg(key_len), arg(value_len));
                let (name_len, key_len, value_len) = match lens {
                    (Ok(n), Ok(k), Ok(v)) => (n, k, v),
                    (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return Some(Err(e)),
                };
                Request::Ext {
                    name: fields.bytes(name_len)?,
                    opts,
                    key: fields.bytes(key_len)?,
                    value: fields.bytes(value_len)?,
                }
            }
            SYNC => Request::Sync,
            VANISH => Request::Vanish,
            RNUM => Request::Rnum,
            SIZE => Request::Size,
            STAT => Request::Stat,
            OPTIMIZE | COPY => {
                let len = match arg(fields.u32()?) {
                    Ok(len) => len,
                    Err(e) => return Some(Err(e)),
                };
                let text = fields.bytes(len)?;
                if command == OPTIMIZE {
                    Request::Optimize { params: text }
                } else {
                    Request::Copy { path: text }
                }
            }
            RESTORE => {
                let (path_len, micros, opts) = (fields.u32()?, fields.u64()?, fields.u32()?);
                let path_len = match arg(path_len) {
                    Ok(len) => len,
                    Err(e) => return Some(Err(e)),
                };
                Request::Restore {
                    path: fields.bytes(path_len)?,
                    micros,
                    opts,
                }
            }
            SETMST => {
                let (host_len, port) = (fields.u32()?, fields.u32()?);
                let (micros, opts) = (fields.u64()?, fields.u32()?);
                let host_len = match arg(host_len) {
                    Ok(len) => len,
                    Err(e) => return Some(Err(e)),
                };
                if port > i32::MAX as u32 {
                    return Some(Err(Malformed::BadField));
                }
                Request::SetMaster {
                    host: fields.bytes(host_len)?,
                    port,
                    micros,
                    opts,
                }
            }
            MISC => {
                let (name_len, opts, count) = (fields.u32()?, fields.u32()?, fields.u32()?);
                let (name_len, count) = match (size(name_len, MAX_NAME), size(count, MAX_ARGS)) {
                    (Ok(n), Ok(c)) => (n, c),
                    (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
                };
                fields.at_least(name_len + 4 * count);
                let name = fields.bytes(name_len)?;
                let mut args = Vec::with_capacity(count.min(1024));
                for left in (1..=count).rev() {
                    fields.at_least(4 * left);
                    let len = match arg(fields.u32()?) {
                        Ok(len) => len,
                        Err(e) => return Some(Err(e)),
                    };
                    args.push(fields.bytes(len)?);
                }
                Request::Misc { name, opts, args }
            }
            REPL => {
                let (micros, server_id) = (fields.u64()?, fields.u32()?);
                if micros < 1 || server_id < 1 || server_id > i32::MAX as u32 {
                    return Some(Err(Malformed::BadField));
                }
                Request::Repl { micros, server_id }
            }
            other => return Some(Err(Malformed::UnknownCommand(other))),
        }))
    })();
    request.transpose()
}

/// ttserver's number encoding for `adddouble`: the integral part and the
/// fraction × 10^12, both truncated toward zero, as signed 64-bit integers;
/// infinities and NaN have reserved pairs.
pub fn pack_double(value: f64) -> (i64, i64) {
    if value.is_nan() {
        return (i64::MIN, i64::MIN);
    }
    if value.is_infinite() {
        return (if value > 0.0 { i64::MAX } else { i64::MIN }, 0);
    }
    let integral = value.trunc();
    (integral as i64, ((value - integral) * 1e12) as i64)
}

/// The inverse of [`pack_double`].
pub fn unpack_double(integral: i64, fraction: i64) -> f64 {
    match (integral, fraction) {
        (i64::MIN, i64::MIN) => f64::NAN,
        (i64::MAX, _) => f64::INFINITY,
        (i64::MIN, _) => f64::NEG_INFINITY,
        _ => integral as f64 + fraction as f64 / 1e12,
    }
}

/// Replies, appended to `out`.
pub mod reply {
    use super::pack_double;

    pub const SUCCESS: u8 = 0;
    pub const FAILURE: u8 = 1;

    fn sized(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    }

    /// A status alone: `[code]`.
    pub fn status(out: &mut Vec<u8>, ok: bool) {
        out.push(if ok { SUCCESS } else { FAILURE });
    }

    /// `get` (a value) or `iternext` (a key): `[0][size:4][bytes]`.
    pub fn bytes(out: &mut Vec<u8>, bytes: &[u8]) {
        out.push(SUCCESS);
        sized(out, bytes);
    }

    /// `vsiz`: `[0][size:4]`.
    pub fn value_size(out: &mut Vec<u8>, size: u32) {
        out.push(SUCCESS);
        out.extend_from_slice(&size.to_be_bytes());
    }

    /// `mget`: `[0][n:4]{[ksiz:4][vsiz:4][key][value]}*n`.
    pub fn records<'a>(
        out: &mut Vec<u8>,
        records: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
    ) {
        out.push(SUCCESS);
        out.extend_from_slice(&(records.len() as u32).to_be_bytes());
        for (key, value) in records {
            out.extend_from_slice(&(key.len() as u32).to_be_bytes());
            out.extend_from_slice(&(value.len() as u32).to_be_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
    }

    /// `fwmkeys`, and `misc` (with its status): `[code][n:4]{[size:4][bytes]}*n`.
    pub fn list<'a>(out: &mut Vec<u8>, ok: bool, items: impl ExactSizeIterator<Item = &'a [u8]>) {
        status(out, ok);
        out.extend_from_slice(&(items.len() as u32).to_be_bytes());
        for item in items {
            sized(out, item);
        }
    }

    /// `addint`: `[0][sum:4]`.
    pub fn int(out: &mut Vec<u8>, sum: i32) {
        out.push(SUCCESS);
        out.extend_from_slice(&sum.to_be_bytes());
    }

    /// `adddouble`: `[0][integral:8][fraction:8]`.
    pub fn double(out: &mut Vec<u8>, sum: f64) {
        let (integral, fraction) = pack_double(sum);
        out.push(SUCCESS);
        out.extend_from_slice(&integral.to_be_bytes());
        out.extend_from_slice(&fraction.to_be_bytes());
    }

    /// `rnum` and `size`: `[0][n:8]`.
    pub fn count(out: &mut Vec<u8>, count: u64) {
        out.push(SUCCESS);
        out.extend_from_slice(&count.to_be_bytes());
    }

    /// `stat`: `[0][size:4]` then `name\tvalue\n` lines.
    pub fn stat<'a>(out: &mut Vec<u8>, lines: impl IntoIterator<Item = (&'a str, String)>) {
        let mut text = Vec::new();
        for (name, value) in lines {
            text.extend_from_slice(name.as_bytes());
            text.push(b'\t');
            text.extend_from_slice(value.as_bytes());
            text.push(b'\n');
        }
        bytes(out, &text);
    }
}

/// Requests, as a client sends them (kura's tools and tests).
pub fn compose(out: &mut Vec<u8>, request: &Request<'_>) {
    use command::*;
    let u32_of = |out: &mut Vec<u8>, n: usize| out.extend_from_slice(&(n as u32).to_be_bytes());
    out.push(MAGIC);
    match request {
        Request::Put { mode, key, value } => {
            out.push(match mode {
                PutMode::Put => PUT,
                PutMode::Keep => PUTKEEP,
                PutMode::Cat => PUTCAT,
                PutMode::NoReply => PUTNR,
            });
            u32_of(out, key.len());
            u32_of(out, value.len());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Request::PutShl { key, value, width } => {
            out.push(PUTSHL);
            u32_of(out, key.len());
            u32_of(out, value.len());
            out.extend_from_slice(&width.to_be_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Request::Out { key } | Request::Get { key } | Request::Vsiz { key } => {
            out.push(match request {
                Request::Out { .. } => OUT,
                Request::Get { .. } => GET,
                _ => VSIZ,
            });
            u32_of(out, key.len());
            out.extend_from_slice(key);
        }
        Request::Mget { keys } => {
            out.push(MGET);
            u32_of(out, keys.len());
            for key in keys {
                u32_of(out, key.len());
                out.extend_from_slice(key);
            }
        }
        Request::IterInit => out.push(ITERINIT),
        Request::IterNext => out.push(ITERNEXT),
        Request::Fwmkeys { prefix, max } => {
            out.push(FWMKEYS);
            u32_of(out, prefix.len());
            out.extend_from_slice(&max.to_be_bytes());
            out.extend_from_slice(prefix);
        }
        Request::AddInt { key, delta } => {
            out.push(ADDINT);
            u32_of(out, key.len());
            out.extend_from_slice(&delta.to_be_bytes());
            out.extend_from_slice(key);
        }
        Request::AddDouble { key, delta } => {
            out.push(ADDDOUBLE);
            u32_of(out, key.len());
            let (integral, fraction) = pack_double(*delta);
            out.extend_from_slice(&integral.to_be_bytes());
            out.extend_from_slice(&fraction.to_be_bytes());
            out.extend_from_slice(key);
        }
        Request::Ext {
            name,
            opts,
            key,
            value,
        } => {
            out.push(EXT);
            u32_of(out, name.len());
            out.extend_from_slice(&opts.to_be_bytes());
            u32_of(out, key.len());
            u32_of(out, value.len());
            out.extend_from_slice(name);
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        Request::Sync => out.push(SYNC),
        Request::Vanish => out.push(VANISH),
        Request::Rnum => out.push(RNUM),
        Request::Size => out.push(SIZE),
        Request::Stat => out.push(STAT),
        Request::Optimize { params: text } | Request::Copy { path: text } => {
            out.push(if matches!(request, Request::Optimize { .. }) {
                OPTIMIZE
            } else {
                COPY
            });
            u32_of(out, text.len());
            out.extend_from_slice(text);
        }
        Request::Restore { path, micros, opts } => {
            out.push(RESTORE);
            u32_of(out, path.len());
            out.extend_from_slice(&micros.to_be_bytes());
            out.extend_from_slice(&opts.to_be_bytes());
            out.extend_from_slice(path);
        }
        Request::SetMaster {
            host,
            port,
            micros,
            opts,
        } => {
            out.push(SETMST);
            u32_of(out, host.len());
            out.extend_from_slice(&port.to_be_bytes());
            out.extend_from_slice(&micros.to_be_bytes());
            out.extend_from_slice(&opts.to_be_bytes());
            out.extend_from_slice(host);
        }
        Request::Misc { name, opts, args } => {
            out.push(MISC);
            u32_of(out, name.len());
            out.extend_from_slice(&opts.to_be_bytes());
            u32_of(out, args.len());
            out.extend_from_slice(name);
            for arg in args {
                u32_of(out, arg.len());
                out.extend_from_slice(arg);
            }
        }
        Request::Repl { micros, server_id } => {
            out.push(REPL);
            out.extend_from_slice(&micros.to_be_bytes());
            out.extend_from_slice(&server_id.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    fn done(bytes: &[u8]) -> Request<'_> {
        match parse(bytes, MAX) {
            Parse::Done { request, consumed } => {
                assert_eq!(consumed, bytes.len(), "the whole request is used");
                request
            }
            other => panic!("not a request: {other:?}"),
        }
    }

    /// Every prefix of a whole request is `Incomplete`.
    fn every_prefix_incomplete(bytes: &[u8]) {
        for cut in 0..bytes.len() {
            match parse(&bytes[..cut], MAX) {
                // More is needed, and no more than the request holds.
                Parse::Incomplete { needed } => {
                    assert!(
                        cut < needed && needed <= bytes.len(),
                        "cut at {cut}: {needed}"
                    );
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_put_is_magic_command_two_sizes_key_and_value() {
        let bytes = b"\xc8\x10\0\0\0\x03\0\0\0\x03foohop";
        assert_eq!(
            done(bytes),
            Request::Put {
                mode: PutMode::Put,
                key: b"foo",
                value: b"hop"
            }
        );
        every_prefix_incomplete(bytes);
        for (command, mode) in [
            (0x11, PutMode::Keep),
            (0x12, PutMode::Cat),
            (0x18, PutMode::NoReply),
        ] {
            let mut bytes = bytes.to_vec();
            bytes[1] = command;
            assert!(matches!(done(&bytes), Request::Put { mode: m, .. } if m == mode));
        }
    }

    #[test]
    fn fields_that_come_before_the_key_are_read_in_ttservers_order() {
        // putshl: the width follows the two sizes.
        assert_eq!(
            done(b"\xc8\x13\0\0\0\x01\0\0\0\x02\0\0\0\x05kvv"),
            Request::PutShl {
                key: b"k",
                value: b"vv",
                width: 5
            }
        );
        // addint: the addend (signed) before the key.
        assert_eq!(
            done(b"\xc8\x60\0\0\0\x01\xff\xff\xff\xfek"),
            Request::AddInt {
                key: b"k",
                delta: -2
            }
        );
        // fwmkeys: max -1 means all.
        assert_eq!(
            done(b"\xc8\x58\0\0\0\x02\xff\xff\xff\xffab"),
            Request::Fwmkeys {
                prefix: b"ab",
                max: -1
            }
        );
        // restore: path size, time, options, path.
        assert_eq!(
            done(b"\xc8\x74\0\0\0\x01\0\0\0\0\0\0\0\x07\0\0\0\x01p"),
            Request::Restore {
                path: b"p",
                micros: 7,
                opts: 1
            }
        );
        // setmst: host size, port, time, options, host.
        assert_eq!(
            done(b"\xc8\x78\0\0\0\x01\0\0\x07\xba\0\0\0\0\0\0\0\x09\0\0\0\0h"),
            Request::SetMaster {
                host: b"h",
                port: 1978,
                micros: 9,
                opts: 0
            }
        );
    }

    #[test]
    fn mget_and_misc_carry_counted_lists() {
        let mget = b"\xc8\x31\0\0\0\x02\0\0\0\x01a\0\0\0\x02bc";
        assert_eq!(
            done(mget),
            Request::Mget {
                keys: vec![b"a", b"bc"]
            }
        );
        every_prefix_incomplete(mget);
        let misc = b"\xc8\x90\0\0\0\x03\0\0\0\x01\0\0\0\x02put\0\0\0\x01k\0\0\0\x03c\0v";
        assert_eq!(
            done(misc),
            Request::Misc {
                name: b"put",
                opts: MISC_NO_LOG,
                args: vec![b"k", b"c\0v"]
            }
        );
        every_prefix_incomplete(misc);
    }

    /// A list's every key needs its four length bytes: a buffer is not
    /// parsed again before they can all have come.
    #[test]
    fn a_list_sent_in_pieces_needs_four_bytes_a_key_left() {
        let mut mget = b"\xc8\x31\0\0\x03\xe8".to_vec();
        assert_eq!(parse(&mget, MAX), Parse::Incomplete { needed: 6 + 4000 });
        for _ in 0..10 {
            mget.extend_from_slice(b"\0\0\0\x02ab");
        }
        // Ten keys read, 990 left.
        assert_eq!(
            parse(&mget, MAX),
            Parse::Incomplete {
                needed: mget.len() + 4 * 990
            }
        );
        let misc = b"\xc8\x90\0\0\0\x03\0\0\0\0\0\0\0\x64pu";
        assert_eq!(
            parse(misc, MAX),
            Parse::Incomplete {
                needed: 14 + 3 + 400
            }
        );
    }

    #[test]
    fn commands_without_fields_are_two_bytes() {
        for (byte, request) in [
            (0x50, Request::IterInit),
            (0x51, Request::IterNext),
            (0x70, Request::Sync),
            (0x72, Request::Vanish),
            (0x80, Request::Rnum),
            (0x81, Request::Size),
            (0x88, Request::Stat),
        ] {
            assert_eq!(done(&[0xc8, byte]), request);
        }
    }

    #[test]
    fn malformed_requests_close_the_connection_as_ttserver_does() {
        assert_eq!(parse(b"get x\r\n", MAX), Parse::Close(Malformed::NotBinary));
        assert_eq!(
            parse(b"\xc8\x99", MAX),
            Parse::Close(Malformed::UnknownCommand(0x99))
        );
        // A size past the limit is refused before its bytes arrive.
        assert_eq!(
            parse(b"\xc8\x30\0\x20\0\x01", MAX),
            Parse::Close(Malformed::TooLarge)
        );
        // ttserver reads sizes as signed: 2^31 and up are negative.
        assert_eq!(
            parse(b"\xc8\x30\x80\0\0\0", usize::MAX),
            Parse::Close(Malformed::TooLarge)
        );
        assert_eq!(
            parse(b"\xc8\x31\0\x10\0\x01", MAX),
            Parse::Close(Malformed::TooLarge)
        );
        // A misc name of 1024 bytes.
        assert_eq!(
            parse(b"\xc8\x90\0\0\x04\0\0\0\0\0\0\0\0\0", MAX),
            Parse::Close(Malformed::TooLarge)
        );
        assert_eq!(
            parse(b"\xc8\x13\0\0\0\x01\0\0\0\x01\xff\xff\xff\xffkv", MAX),
            Parse::Close(Malformed::BadField)
        );
        assert_eq!(
            parse(b"\xc8\xa0\0\0\0\0\0\0\0\0\0\0\0\x01", MAX),
            Parse::Close(Malformed::BadField)
        );
    }

    #[test]
    fn doubles_travel_as_integral_part_and_fraction_times_ten_to_the_twelve() {
        assert_eq!(pack_double(-1.5), (-1, -500_000_000_000));
        assert_eq!(pack_double(2.25), (2, 250_000_000_000));
        assert_eq!(pack_double(f64::INFINITY), (i64::MAX, 0));
        assert_eq!(pack_double(f64::NEG_INFINITY), (i64::MIN, 0));
        assert_eq!(pack_double(f64::NAN), (i64::MIN, i64::MIN));
        for value in [0.0, -1.5, 2.25, 1e9 + 0.125, -3.0] {
            let (integral, fraction) = pack_double(value);
            assert_eq!(unpack_double(integral, fraction), value);
        }
        assert!(unpack_double(i64::MIN, i64::MIN).is_nan());
        assert_eq!(unpack_double(i64::MAX, 0), f64::INFINITY);
    }

    #[test]
    fn every_request_composed_parses_back_to_itself() {
        let requests = [
            Request::Put {
                mode: PutMode::Cat,
                key: b"k",
                value: b"value",
            },
            Request::PutShl {
                key: b"k",
                value: b"v",
                width: 3,
            },
            Request::Out { key: b"k" },
            Request::Get { key: b"k" },
            Request::Vsiz { key: b"" },
            Request::Mget {
                keys: vec![b"a", b"", b"c"],
            },
            Request::IterInit,
            Request::IterNext,
            Request::Fwmkeys {
                prefix: b"p",
                max: 10,
            },
            Request::AddInt {
                key: b"n",
                delta: i32::MIN,
            },
            Request::AddDouble {
                key: b"d",
                delta: -0.5,
            },
            Request::Ext {
                name: b"fn",
                opts: 2,
                key: b"k",
                value: b"v",
            },
            Request::Sync,
            Request::Optimize { params: b"" },
            Request::Vanish,
            Request::Copy { path: b"/tmp/x" },
            Request::Restore {
                path: b"/log",
                micros: u64::MAX >> 1,
                opts: 1,
            },
            Request::SetMaster {
                host: b"m",
                port: 1978,
                micros: 5,
                opts: 1,
            },
            Request::Rnum,
            Request::Size,
            Request::Stat,
            Request::Misc {
                name: b"search",
                opts: 1,
                args: vec![b"addcond\0name\x000\0x", b"count"],
            },
            Request::Repl {
                micros: 1,
                server_id: 2,
            },
        ];
        for request in &requests {
            let mut bytes = Vec::new();
            compose(&mut bytes, request);
            assert_eq!(&done(&bytes), request);
            every_prefix_incomplete(&bytes);
        }
    }

    #[test]
    fn replies_are_laid_out_as_ttserver_sends_them() {
        let mut out = Vec::new();
        reply::status(&mut out, false);
        reply::bytes(&mut out, b"hop");
        reply::records(&mut out, [(&b"a"[..], &b"xy"[..])].into_iter());
        reply::list(&mut out, true, [&b"k1"[..]].into_iter());
        reply::int(&mut out, -3);
        reply::count(&mut out, 258);
        assert_eq!(
            out,
            b"\x01\
              \0\0\0\0\x03hop\
              \0\0\0\0\x01\0\0\0\x01\0\0\0\x02axy\
              \0\0\0\0\x01\0\0\0\x02k1\
              \0\xff\xff\xff\xfd\
              \0\0\0\0\0\0\0\x01\x02"
        );
        let mut out = Vec::new();
        reply::double(&mut out, 1.5);
        assert_eq!(out, b"\0\0\0\0\0\0\0\0\x01\0\0\0\x74\x6a\x52\x88\0");
        let mut out = Vec::new();
        reply::stat(
            &mut out,
            [("type", "hash".to_string()), ("rnum", "2".into())],
        );
        assert_eq!(out, b"\0\0\0\0\x11type\thash\nrnum\t2\n");
    }
}
