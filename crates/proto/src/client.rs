//! The client side of the codecs: requests composed, responses recognised.
//! Used by `kura bench` (and any tool that talks to a server): the same
//! protocols as the server side, seen from the other end.
//!
//! A response parser must know what it waits for (a retrieval ends with
//! `END`, a store with one line), so each call says what it expects.

use crate::binary;
use crate::reply::push_u64;

/// Protocols a client can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientProtocol {
    /// memcached's classic text protocol.
    Text,
    /// memcached's meta commands.
    Meta,
    /// memcached's binary protocol.
    Binary,
    /// Redis's RESP (GET, SET, DEL, INCR).
    Resp,
}

impl std::str::FromStr for ClientProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" | "ascii" => Ok(ClientProtocol::Text),
            "meta" => Ok(ClientProtocol::Meta),
            "binary" => Ok(ClientProtocol::Binary),
            "resp" | "redis" => Ok(ClientProtocol::Resp),
            _ => Err(format!("unknown protocol '{s}' (text, meta, binary, resp)")),
        }
    }
}

impl ClientProtocol {
    pub fn name(self) -> &'static str {
        match self {
            ClientProtocol::Text => "text",
            ClientProtocol::Meta => "meta",
            ClientProtocol::Binary => "binary",
            ClientProtocol::Resp => "resp",
        }
    }
}

/// Operations a client issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Get,
    Gets,
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
    Delete,
    Incr,
    Decr,
    Touch,
}

impl Op {
    pub const ALL: [Op; 12] = [
        Op::Get,
        Op::Gets,
        Op::Set,
        Op::Add,
        Op::Replace,
        Op::Append,
        Op::Prepend,
        Op::Cas,
        Op::Delete,
        Op::Incr,
        Op::Decr,
        Op::Touch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Gets => "gets",
            Op::Set => "set",
            Op::Add => "add",
            Op::Replace => "replace",
            Op::Append => "append",
            Op::Prepend => "prepend",
            Op::Cas => "cas",
            Op::Delete => "delete",
            Op::Incr => "incr",
            Op::Decr => "decr",
            Op::Touch => "touch",
        }
    }

    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Whether the operation carries a value.
    pub fn has_value(self) -> bool {
        matches!(
            self,
            Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas
        )
    }

    /// Whether the operation reads values.
    pub fn is_retrieval(self) -> bool {
        matches!(self, Op::Get | Op::Gets)
    }
}

/// One request to compose.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub op: Op,
    /// One key, or several for a multi-get.
    pub keys: &'a [&'a [u8]],
    pub value: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    /// CAS unique for `cas`; delta for incr/decr.
    pub number: u64,
}

/// Appends the request for `call`. Returns false when the protocol has no
/// such operation.
pub fn compose(protocol: ClientProtocol, call: &Call<'_>, out: &mut Vec<u8>) -> bool {
    match protocol {
        ClientProtocol::Text => compose_text(call, out),
        ClientProtocol::Meta => compose_meta(call, out),
        ClientProtocol::Binary => compose_binary(call, out),
        ClientProtocol::Resp => compose_resp(call, out),
    }
}

fn compose_text(call: &Call<'_>, out: &mut Vec<u8>) -> bool {
    let key = call.keys.first().copied().unwrap_or_default();
    match call.op {
        Op::Get | Op::Gets => {
            out.extend_from_slice(if call.op == Op::Get { b"get" } else { b"gets" });
            for key in call.keys {
                out.push(b' ');
                out.extend_from_slice(key);
            }
            out.extend_from_slice(b"\r\n");
        }
        Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas => {
            out.extend_from_slice(call.op.name().as_bytes());
            out.push(b' ');
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, u64::from(call.flags));
            out.push(b' ');
            push_u64(out, u64::from(call.exptime));
            out.push(b' ');
            push_u64(out, call.value.len() as u64);
            if call.op == Op::Cas {
                out.push(b' ');
                push_u64(out, call.number);
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(call.value);
            out.extend_from_slice(b"\r\n");
        }
        Op::Delete => {
            out.extend_from_slice(b"delete ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        Op::Incr | Op::Decr => {
            out.extend_from_slice(call.op.name().as_bytes());
            out.push(b' ');
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, call.number);
            out.extend_from_slice(b"\r\n");
        }
        Op::Touch => {
            out.extend_from_slice(b"touch ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, u64::from(call.exptime));
            out.extend_from_slice(b"\r\n");
        }
    }
    true
}

fn compose_meta(call: &Call<'_>, out: &mut Vec<u8>) -> bool {
    let key = call.keys.first().copied().unwrap_or_default();
    match call.op {
        Op::Get | Op::Gets => {
            // One mg per key; the caller expects as many replies.
            for key in call.keys {
                out.extend_from_slice(b"mg ");
                out.extend_from_slice(key);
                out.extend_from_slice(if call.op == Op::Gets {
                    b" v f c\r\n"
                } else {
                    b" v f\r\n"
                });
            }
        }
        Op::Set | Op::Add | Op::Replace | Op::Append | Op::Prepend | Op::Cas => {
            out.extend_from_slice(b"ms ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, call.value.len() as u64);
            out.extend_from_slice(b" F");
            push_u64(out, u64::from(call.flags));
            out.extend_from_slice(b" T");
            push_u64(out, u64::from(call.exptime));
            let mode: &[u8] = match call.op {
                Op::Add => b" ME",
                Op::Replace => b" MR",
                Op::Append => b" MA",
                Op::Prepend => b" MP",
                _ => b"",
            };
            out.extend_from_slice(mode);
            if call.op == Op::Cas {
                out.extend_from_slice(b" C");
                push_u64(out, call.number);
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(call.value);
            out.extend_from_slice(b"\r\n");
        }
        Op::Delete => {
            out.extend_from_slice(b"md ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        Op::Incr | Op::Decr => {
            out.extend_from_slice(b"ma ");
            out.extend_from_slice(key);
            out.extend_from_slice(if call.op == Op::Decr { b" MD D" } else { b" D" });
            push_u64(out, call.number);
            out.extend_from_slice(b" v\r\n");
        }
        Op::Touch => {
            out.extend_from_slice(b"mg ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" T");
            push_u64(out, u64::from(call.exptime));
            out.extend_from_slice(b"\r\n");
        }
    }
    true
}

fn compose_binary(call: &Call<'_>, out: &mut Vec<u8>) -> bool {
    use binary::opcode as op;
    let key = call.keys.first().copied().unwrap_or_default();
    let mut storage_extras = [0u8; 8];
    storage_extras[..4].copy_from_slice(&call.flags.to_be_bytes());
    storage_extras[4..].copy_from_slice(&call.exptime.to_be_bytes());
    match call.op {
        Op::Get | Op::Gets => {
            if call.keys.len() == 1 {
                binary::compose_request(out, op::GET, 0, 0, &[], key, &[]);
            } else {
                // A multi-get: quiet getk for each key, then a noop that ends it.
                for key in call.keys {
                    binary::compose_request(out, op::GETKQ, 0, 0, &[], key, &[]);
                }
                binary::compose_request(out, op::NOOP, 0, 0, &[], &[], &[]);
            }
        }
        Op::Set | Op::Cas => {
            let cas = if call.op == Op::Cas { call.number } else { 0 };
            binary::compose_request(out, op::SET, 0, cas, &storage_extras, key, call.value);
        }
        Op::Add => binary::compose_request(out, op::ADD, 0, 0, &storage_extras, key, call.value),
        Op::Replace => {
            binary::compose_request(out, op::REPLACE, 0, 0, &storage_extras, key, call.value)
        }
        Op::Append => binary::compose_request(out, op::APPEND, 0, 0, &[], key, call.value),
        Op::Prepend => binary::compose_request(out, op::PREPEND, 0, 0, &[], key, call.value),
        Op::Delete => binary::compose_request(out, op::DELETE, 0, 0, &[], key, &[]),
        Op::Incr | Op::Decr => {
            let mut extras = [0u8; 20];
            extras[..8].copy_from_slice(&call.number.to_be_bytes());
            extras[16..].copy_from_slice(&u32::MAX.to_be_bytes()); // do not create
            let code = if call.op == Op::Incr {
                op::INCREMENT
            } else {
                op::DECREMENT
            };
            binary::compose_request(out, code, 0, 0, &extras, key, &[]);
        }
        Op::Touch => {
            binary::compose_request(out, op::TOUCH, 0, 0, &call.exptime.to_be_bytes(), key, &[])
        }
    }
    true
}

fn compose_resp(call: &Call<'_>, out: &mut Vec<u8>) -> bool {
    let key = call.keys.first().copied().unwrap_or_default();
    let mut array = |parts: &[&[u8]]| {
        out.push(b'*');
        push_u64(out, parts.len() as u64);
        out.extend_from_slice(b"\r\n");
        for part in parts {
            out.push(b'$');
            push_u64(out, part.len() as u64);
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(part);
            out.extend_from_slice(b"\r\n");
        }
    };
    match call.op {
        Op::Get if call.keys.len() == 1 => array(&[b"GET", key]),
        Op::Get => {
            let mut parts: Vec<&[u8]> = vec![b"MGET"];
            parts.extend_from_slice(call.keys);
            array(&parts);
        }
        Op::Set => array(&[b"SET", key, call.value]),
        Op::Delete => array(&[b"DEL", key]),
        Op::Incr => {
            let mut delta = Vec::new();
            push_u64(&mut delta, call.number);
            array(&[b"INCRBY", key, &delta]);
        }
        Op::Decr => {
            let mut delta = Vec::new();
            push_u64(&mut delta, call.number);
            array(&[b"DECRBY", key, &delta]);
        }
        _ => return false,
    }
    true
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResponseKind {
    Stored,
    NotStored,
    Exists,
    NotFound,
    Deleted,
    Touched,
    /// A retrieval that returned at least one value.
    Value,
    /// A retrieval that returned nothing.
    End,
    /// A number (incr/decr).
    Number,
    Error,
    ClientError,
    ServerError,
}

impl ResponseKind {
    /// mcperf's names for response types.
    pub fn name(self) -> &'static str {
        match self {
            ResponseKind::Stored => "stored",
            ResponseKind::NotStored => "not_stored",
            ResponseKind::Exists => "exists",
            ResponseKind::NotFound => "not_found",
            ResponseKind::Deleted => "deleted",
            ResponseKind::Touched => "touched",
            ResponseKind::Value => "value",
            ResponseKind::End => "end",
            ResponseKind::Number => "num",
            ResponseKind::Error => "error",
            ResponseKind::ClientError => "client_error",
            ResponseKind::ServerError => "server_error",
        }
    }

    pub fn is_error(self) -> bool {
        matches!(
            self,
            ResponseKind::Error | ResponseKind::ClientError | ResponseKind::ServerError
        )
    }
}

/// A complete response: its kind, the bytes it took, and the values it
/// carried as (key if returned, value) ranges into the buffer.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub kind: ResponseKind,
    pub consumed: usize,
    /// (key range, value range) of each returned value; the key range is
    /// empty when the protocol does not return keys.
    pub values: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>,
}

/// Why a response could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("unexpected response: {0}")]
    Unexpected(String),
}

/// Reads one response to a call of `op` with `keys` keys from the front of
/// `buf`. `Ok(None)` means more bytes are needed.
pub fn parse_response(
    protocol: ClientProtocol,
    op: Op,
    keys: usize,
    buf: &[u8],
) -> Result<Option<Response>, ResponseError> {
    match protocol {
        ClientProtocol::Text => parse_text(op, buf),
        ClientProtocol::Meta => parse_meta(op, keys, buf),
        ClientProtocol::Binary => parse_binary(op, keys, buf),
        ClientProtocol::Resp => parse_resp(op, buf),
    }
}

fn line(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = &buf[from..];
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], from + end + 2))
}

fn unexpected(bytes: &[u8]) -> ResponseError {
    let shown = &bytes[..bytes.len().min(80)];
    ResponseError::Unexpected(String::from_utf8_lossy(shown).into_owned())
}

fn status_line(text: &[u8]) -> Option<ResponseKind> {
    Some(match text {
        b"STORED" => ResponseKind::Stored,
        b"NOT_STORED" => ResponseKind::NotStored,
        b"EXISTS" => ResponseKind::Exists,
        b"NOT_FOUND" => ResponseKind::NotFound,
        b"DELETED" => ResponseKind::Deleted,
        b"TOUCHED" => ResponseKind::Touched,
        b"END" => ResponseKind::End,
        _ if text.starts_with(b"CLIENT_ERROR") => ResponseKind::ClientError,
        _ if text.starts_with(b"SERVER_ERROR") => ResponseKind::ServerError,
        _ if text.starts_with(b"ERROR") => ResponseKind::Error,
        _ if !text.is_empty() && text.iter().all(u8::is_ascii_digit) => ResponseKind::Number,
        _ => return None,
    })
}

fn parse_text(op: Op, buf: &[u8]) -> Result<Option<Response>, ResponseError> {
    let mut at = 0;
    let mut values = Vec::new();
    loop {
        let Some((text, next)) = line(buf, at) else {
            return Ok(None);
        };
        if op.is_retrieval() && text.starts_with(b"VALUE ") {
            let mut fields = text[6..].split(|&b| b == b' ');
            let key_len = fields.next().map_or(0, <[u8]>::len);
            let len: usize = fields
                .nth(1)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
                .ok_or_else(|| unexpected(text))?;
            if buf.len() < next + len + 2 {
                return Ok(None);
            }
            if &buf[next + len..next + len + 2] != b"\r\n" {
                return Err(unexpected(&buf[at..]));
            }
            values.push((at + 6..at + 6 + key_len, next..next + len));
            at = next + len + 2;
            continue;
        }
        let kind = status_line(text).ok_or_else(|| unexpected(text))?;
        let kind = if kind == ResponseKind::End && !values.is_empty() {
            ResponseKind::Value
        } else {
            kind
        };
        return Ok(Some(Response {
            kind,
            consumed: next,
            values,
        }));
    }
}

fn parse_meta(op: Op, keys: usize, buf: &[u8]) -> Result<Option<Response>, ResponseError> {
    // A multi-get is one mg per key: gather `keys` replies.
    let replies = if op.is_retrieval() { keys.max(1) } else { 1 };
    let mut at = 0;
    let mut values = Vec::new();
    let mut kind = ResponseKind::End;
    for _ in 0..replies {
        let Some((text, next)) = line(buf, at) else {
            return Ok(None);
        };
        let this = match text.get(..2) {
            Some(b"VA") => {
                let len: usize = (text.get(3..).unwrap_or_default())
                    .split(|&b| b == b' ')
                    .next()
                    .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
                    .ok_or_else(|| unexpected(text))?;
                if buf.len() < next + len + 2 {
                    return Ok(None);
                }
                values.push((0..0, next..next + len));
                at = next + len + 2;
                if op.is_retrieval() {
                    ResponseKind::Value
                } else {
                    ResponseKind::Number
                }
            }
            Some(code) => {
                at = next;
                match code {
                    b"HD" => match op {
                        Op::Delete => ResponseKind::Deleted,
                        Op::Touch => ResponseKind::Touched,
                        Op::Get | Op::Gets => ResponseKind::Value,
                        Op::Incr | Op::Decr => ResponseKind::Number,
                        _ => ResponseKind::Stored,
                    },
                    b"NS" => ResponseKind::NotStored,
                    b"EX" => ResponseKind::Exists,
                    b"NF" => ResponseKind::NotFound,
                    b"EN" => {
                        if op.is_retrieval() {
                            ResponseKind::End
                        } else {
                            ResponseKind::NotFound
                        }
                    }
                    _ => status_line(text).ok_or_else(|| unexpected(text))?,
                }
            }
            None => return Err(unexpected(text)),
        };
        // A multi-get is a hit if any key was.
        if this != ResponseKind::End || kind == ResponseKind::End {
            kind = if kind == ResponseKind::Value {
                kind
            } else {
                this
            };
        }
    }
    Ok(Some(Response {
        kind,
        consumed: at,
        values,
    }))
}

fn parse_binary(op: Op, keys: usize, buf: &[u8]) -> Result<Option<Response>, ResponseError> {
    use binary::{opcode, Status};
    let multi = op.is_retrieval() && keys > 1;
    let mut at = 0;
    let mut values = Vec::new();
    loop {
        if buf.len() < at + binary::HEADER_LEN {
            return Ok(None);
        }
        let header = &buf[at..at + binary::HEADER_LEN];
        if header[0] != binary::RESPONSE_MAGIC {
            return Err(unexpected(header));
        }
        let code = header[1];
        let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let extras_len = usize::from(header[4]);
        let status = u16::from_be_bytes([header[6], header[7]]);
        let body_len = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        let end = at + binary::HEADER_LEN + body_len;
        if extras_len + key_len > body_len {
            return Err(unexpected(header));
        }
        if buf.len() < end {
            return Ok(None);
        }
        let body = at + binary::HEADER_LEN;
        let key = body + extras_len..body + extras_len + key_len;
        let value = body + extras_len + key_len..end;
        at = end;
        if multi && code != opcode::NOOP {
            if status == Status::NoError as u16 {
                values.push((key, value));
            }
            continue;
        }
        let kind = if multi {
            if values.is_empty() {
                ResponseKind::End
            } else {
                ResponseKind::Value
            }
        } else {
            match status {
                s if s == Status::NoError as u16 => {
                    if op.is_retrieval() {
                        values.push((key, value));
                    }
                    match op {
                        Op::Get | Op::Gets => ResponseKind::Value,
                        Op::Delete => ResponseKind::Deleted,
                        Op::Touch => ResponseKind::Touched,
                        Op::Incr | Op::Decr => ResponseKind::Number,
                        _ => ResponseKind::Stored,
                    }
                }
                s if s == Status::KeyNotFound as u16 => {
                    if op.is_retrieval() {
                        ResponseKind::End
                    } else {
                        ResponseKind::NotFound
                    }
                }
                s if s == Status::KeyExists as u16 => ResponseKind::Exists,
                s if s == Status::ItemNotStored as u16 => ResponseKind::NotStored,
                s if s == Status::InvalidArguments as u16 || s == Status::NonNumeric as u16 => {
                    ResponseKind::ClientError
                }
                s if s == Status::UnknownCommand as u16 => ResponseKind::Error,
                _ => ResponseKind::ServerError,
            }
        };
        return Ok(Some(Response {
            kind,
            consumed: at,
            values,
        }));
    }
}

fn parse_resp(op: Op, buf: &[u8]) -> Result<Option<Response>, ResponseError> {
    let Some((text, next)) = line(buf, 0) else {
        return Ok(None);
    };
    let Some((&tag, rest)) = text.split_first() else {
        return Err(unexpected(text));
    };
    let number = |bytes: &[u8]| -> Result<i64, ResponseError> {
        std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| unexpected(text))
    };
    let (kind, consumed, values) = match tag {
        b'+' => (ResponseKind::Stored, next, Vec::new()),
        b'-' => (ResponseKind::Error, next, Vec::new()),
        b':' => {
            let n = number(rest)?;
            let kind = match op {
                Op::Delete if n == 0 => ResponseKind::NotFound,
                Op::Delete => ResponseKind::Deleted,
                _ => ResponseKind::Number,
            };
            (kind, next, Vec::new())
        }
        b'$' => {
            let len = number(rest)?;
            if len < 0 {
                (ResponseKind::End, next, Vec::new())
            } else {
                let len = len as usize;
                if buf.len() < next + len + 2 {
                    return Ok(None);
                }
                (
                    ResponseKind::Value,
                    next + len + 2,
                    vec![(0..0, next..next + len)],
                )
            }
        }
        b'*' => {
            // MGET: an array of bulk strings.
            let count = number(rest)?.max(0) as usize;
            let mut at = next;
            let mut values = Vec::new();
            for _ in 0..count {
                let Some((item, after)) = line(buf, at) else {
                    return Ok(None);
                };
                let len = number(item.get(1..).unwrap_or_default())?;
                if len < 0 {
                    at = after;
                    continue;
                }
                let len = len as usize;
                if buf.len() < after + len + 2 {
                    return Ok(None);
                }
                values.push((0..0, after..after + len));
                at = after + len + 2;
            }
            let kind = if values.is_empty() {
                ResponseKind::End
            } else {
                ResponseKind::Value
            };
            (kind, at, values)
        }
        _ => return Err(unexpected(text)),
    };
    Ok(Some(Response {
        kind,
        consumed,
        values,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(op: Op, keys: &'a [&'a [u8]], value: &'a [u8]) -> Call<'a> {
        Call {
            op,
            keys,
            value,
            flags: 3,
            exptime: 0,
            number: 5,
        }
    }

    #[test]
    fn text_requests() {
        let mut out = Vec::new();
        compose(
            ClientProtocol::Text,
            &call(Op::Set, &[b"k"], b"abc"),
            &mut out,
        );
        compose(
            ClientProtocol::Text,
            &call(Op::Get, &[b"a", b"b"], b""),
            &mut out,
        );
        compose(
            ClientProtocol::Text,
            &call(Op::Incr, &[b"n"], b""),
            &mut out,
        );
        assert_eq!(out, b"set k 3 0 3\r\nabc\r\nget a b\r\nincr n 5\r\n");
    }

    #[test]
    fn text_responses_need_their_whole_length() {
        let reply = b"VALUE a 0 3\r\nabc\r\nVALUE b 0 1\r\nx\r\nEND\r\n";
        for cut in 0..reply.len() {
            assert_eq!(
                parse_response(ClientProtocol::Text, Op::Get, 2, &reply[..cut]),
                Ok(None)
            );
        }
        let response = parse_response(ClientProtocol::Text, Op::Get, 2, reply)
            .unwrap()
            .unwrap();
        assert_eq!(response.kind, ResponseKind::Value);
        assert_eq!(response.consumed, reply.len());
        assert_eq!(&reply[response.values[0].1.clone()], b"abc");
        assert_eq!(&reply[response.values[0].0.clone()], b"a");
        let stored = parse_response(ClientProtocol::Text, Op::Set, 1, b"STORED\r\nEND\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((stored.kind, stored.consumed), (ResponseKind::Stored, 8));
        let miss = parse_response(ClientProtocol::Text, Op::Get, 1, b"END\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(miss.kind, ResponseKind::End);
        assert!(parse_response(ClientProtocol::Text, Op::Get, 1, b"garbage\r\n").is_err());
    }

    #[test]
    fn meta_multiget_gathers_one_reply_per_key() {
        let reply = b"EN\r\nVA 2 f0\r\nhi\r\n";
        let response = parse_response(ClientProtocol::Meta, Op::Get, 2, reply)
            .unwrap()
            .unwrap();
        assert_eq!(response.kind, ResponseKind::Value);
        assert_eq!(response.consumed, reply.len());
        assert_eq!(&reply[response.values[0].1.clone()], b"hi");
    }

    #[test]
    fn binary_round_trip_through_the_server_codec() {
        let mut request = Vec::new();
        compose(
            ClientProtocol::Binary,
            &call(Op::Set, &[b"key"], b"value"),
            &mut request,
        );
        let crate::binary::Parse::Done {
            request: parsed, ..
        } = crate::binary::parse(&request, 1 << 20)
        else {
            panic!("the server codec must accept the client's request")
        };
        assert_eq!((parsed.key, parsed.value), (&b"key"[..], &b"value"[..]));
        let mut reply = Vec::new();
        crate::binary::compose(
            &mut reply,
            crate::binary::opcode::GET,
            crate::binary::Status::NoError,
            0,
            1,
            &[0; 4],
            &[],
            b"v",
        );
        let response = parse_response(ClientProtocol::Binary, Op::Get, 1, &reply)
            .unwrap()
            .unwrap();
        assert_eq!(response.kind, ResponseKind::Value);
        assert_eq!(&reply[response.values[0].1.clone()], b"v");
    }

    #[test]
    fn resp_requests_and_replies() {
        let mut out = Vec::new();
        compose(
            ClientProtocol::Resp,
            &call(Op::Set, &[b"k"], b"v"),
            &mut out,
        );
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
        assert!(!compose(
            ClientProtocol::Resp,
            &call(Op::Append, &[b"k"], b"v"),
            &mut out
        ));
        let hit = parse_response(ClientProtocol::Resp, Op::Get, 1, b"$2\r\nhi\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(hit.kind, ResponseKind::Value);
        let miss = parse_response(ClientProtocol::Resp, Op::Get, 1, b"$-1\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(miss.kind, ResponseKind::End);
        let ok = parse_response(ClientProtocol::Resp, Op::Set, 1, b"+OK\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(ok.kind, ResponseKind::Stored);
    }
}
