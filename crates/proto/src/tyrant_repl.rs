//! Tokyo Tyrant's replication stream, as ttserver 1.1.41 sends it after a
//! slave's `repl` request (0xC8 0xA0, the time to start from in µs and the
//! slave's server id): the master's server id (u32 BE), then messages:
//!
//! ```text
//! 0xCA                                           no operation (at most once a second)
//! 0xC9 | time µs u64 BE | origin id u32 BE | size u32 BE | body    an update-log message
//! ```
//!
//! A body is the binary request that made the change, as the update log
//! keeps it, followed by its result byte (0: it succeeded): `put`
//! `[0xC8 0x10 | key size u32 | value size u32 | key | value | 0]`, `out`
//! `[0xC8 0x20 | key size u32 | key | 0]`, `vanish` `[0xC8 0x72 | 0]`,
//! `misc` `[0xC8 0x90 | name size u32 | arg count u32 | name | (size u32 |
//! arg)… | 0]` (unlike the request, no options).

use crate::tyrant::MAGIC;

/// A message with no change (a keepalive).
pub const NOP: u8 = 0xCA;
/// An update-log message.
pub const MESSAGE: u8 = 0xC9;

const PUT: u8 = 0x10;
const OUT: u8 = 0x20;
const VANISH: u8 = 0x72;
const MISC: u8 = 0x90;

fn sized(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
}

/// The body of a `put` of `value` under `key`.
pub fn put(key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = vec![MAGIC, PUT];
    sized(&mut body, key);
    sized(&mut body, value);
    body.extend_from_slice(key);
    body.extend_from_slice(value);
    body.push(0);
    body
}

/// The body of an `out` of `key`.
pub fn out(key: &[u8]) -> Vec<u8> {
    let mut body = vec![MAGIC, OUT];
    sized(&mut body, key);
    body.extend_from_slice(key);
    body.push(0);
    body
}

/// The body of a `vanish`.
pub fn vanish() -> Vec<u8> {
    vec![MAGIC, VANISH, 0]
}

/// The body of a `misc` call `name` with `args` (a table's `put` or `out`).
pub fn misc(name: &[u8], args: &[&[u8]]) -> Vec<u8> {
    let mut body = vec![MAGIC, MISC];
    sized(&mut body, name);
    body.extend_from_slice(&(args.len() as u32).to_be_bytes());
    body.extend_from_slice(name);
    for arg in args {
        sized(&mut body, arg);
        body.extend_from_slice(arg);
    }
    body.push(0);
    body
}

/// Appends an update-log message carrying `body`, made at `micros` by
/// server `origin`.
pub fn message(micros: u64, origin: u32, body: &[u8], out: &mut Vec<u8>) {
    out.push(MESSAGE);
    out.extend_from_slice(&micros.to_be_bytes());
    out.extend_from_slice(&origin.to_be_bytes());
    sized(out, body);
    out.extend_from_slice(body);
}

/// A body read back: what a slave redoes (`tculogadbredo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<'a> {
    Put { key: &'a [u8], value: &'a [u8] },
    Out { key: &'a [u8] },
    Vanish,
    Misc { name: &'a [u8], args: Vec<&'a [u8]> },
}

/// Reads a body as a slave does; `None` for one it would refuse.
pub fn parse(body: &[u8]) -> Option<Change<'_>> {
    let (&[magic, command], rest) = body.split_first_chunk::<2>()?;
    // The last byte is the result.
    let rest = rest.get(..rest.len().checked_sub(1)?)?;
    if magic != MAGIC {
        return None;
    }
    let mut at = rest;
    let mut u32_field = || -> Option<usize> {
        let (bytes, after) = at.split_first_chunk::<4>()?;
        at = after;
        Some(u32::from_be_bytes(*bytes) as usize)
    };
    match command {
        PUT => {
            let (ksiz, vsiz) = (u32_field()?, u32_field()?);
            let key = at.get(..ksiz)?;
            let value = at.get(ksiz..ksiz.checked_add(vsiz)?)?;
            Some(Change::Put { key, value })
        }
        OUT => {
            let ksiz = u32_field()?;
            Some(Change::Out {
                key: at.get(..ksiz)?,
            })
        }
        VANISH if rest.is_empty() => Some(Change::Vanish),
        MISC => {
            let (nsiz, count) = (u32_field()?, u32_field()?);
            let name = at.get(..nsiz)?;
            at = &at[nsiz..];
            let mut args = Vec::new();
            for _ in 0..count {
                let (size, after) = at.split_first_chunk::<4>()?;
                let size = u32::from_be_bytes(*size) as usize;
                args.push(after.get(..size)?);
                at = &after[size..];
            }
            Some(Change::Misc { name, args })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_what_ttserver_logs_and_read_back() {
        let body = put(b"k", b"value");
        assert_eq!(
            body,
            [&[0xC8, 0x10, 0, 0, 0, 1, 0, 0, 0, 5][..], b"kvalue", &[0]].concat()
        );
        assert_eq!(
            parse(&body),
            Some(Change::Put {
                key: b"k",
                value: b"value"
            })
        );
        assert_eq!(parse(&out(b"gone")), Some(Change::Out { key: b"gone" }));
        assert_eq!(parse(&vanish()), Some(Change::Vanish));
        let body = misc(b"put", &[b"pk", b"name", b"ann"]);
        assert_eq!(
            parse(&body),
            Some(Change::Misc {
                name: b"put",
                args: vec![b"pk", b"name", b"ann"]
            })
        );
        let mut stream = Vec::new();
        message(7, 3, &vanish(), &mut stream);
        assert_eq!(
            stream,
            [
                &[MESSAGE][..],
                &7u64.to_be_bytes(),
                &3u32.to_be_bytes(),
                &3u32.to_be_bytes(),
                &vanish()
            ]
            .concat()
        );
    }

    #[test]
    fn cut_or_foreign_bodies_are_refused() {
        let body = put(b"k", b"value");
        assert_eq!(parse(&body[..body.len() - 3]), None);
        assert_eq!(parse(&[0xC8]), None);
        assert_eq!(parse(&[0xC7, 0x72, 0]), None);
        assert_eq!(parse(&[0xC8, 0x99, 0]), None);
        assert_eq!(parse(&[0xC8, 0x90, 0, 0, 0, 0, 0, 0, 0, 9, 0]), None);
    }
}
