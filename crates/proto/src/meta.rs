//! memcached's meta commands: `mg`, `ms`, `md`, `ma`, `mn`, `me`.
//!
//! `<cm> <key> [<datalen>] <flag>*` where a flag is one character, optionally
//! followed by a token (`T30`, `Oabc`). Flags that ask for data back are
//! answered in the order they were given, so the parser keeps that order.

use std::borrow::Cow;

use base64::Engine as _;

use crate::line::{data_block, valid_key, DataBlock, Limits, Tokens, TooLarge};
use crate::number::{parse_data_length, parse_exptime, parse_flags, parse_u64};
use crate::{ErrorReply, Parse, Recovery};

/// memcached's limit on the opaque token, its `O` included.
pub const MAX_OPAQUE_LEN: usize = 32;
/// The flags memcached knows. Every meta command takes all of them and
/// ignores those it has no use for, as memcached does, so a client may send
/// one set of flags to every command.
const KNOWN_FLAGS: &[u8] = b"bcfhklOqstuvCDFIJMNRTPL";
/// memcached's limit on tokens in one meta command.
const MAX_FLAGS: usize = 24;

#[derive(Debug, PartialEq, Eq)]
pub enum MetaRequest<'a> {
    Get(MetaCommand<'a>),
    Set {
        command: MetaCommand<'a>,
        data: &'a [u8],
    },
    Delete(MetaCommand<'a>),
    Arith(MetaCommand<'a>),
    Noop,
    Debug {
        key: MetaKey<'a>,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub struct MetaCommand<'a> {
    pub key: MetaKey<'a>,
    pub flags: MetaFlags<'a>,
}

/// A key as sent (`wire`, echoed by the `k` flag) and as stored (`bytes`,
/// base64-decoded under the `b` flag).
#[derive(Debug, PartialEq, Eq)]
pub struct MetaKey<'a> {
    pub wire: &'a [u8],
    pub bytes: Cow<'a, [u8]>,
    pub base64: bool,
}

/// The mode of `ms` (`M` flag); mode letters are upper case only, as in memcached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SetMode {
    #[default]
    Set,
    Add,
    Replace,
    Append,
    Prepend,
}

/// Every flag of every meta command; each command reads those it uses.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MetaFlags<'a> {
    /// Flags that return a token, in request order: `c f h k l O s t`.
    pub returns: ReturnOrder,
    pub opaque: Option<&'a [u8]>,
    /// `q`: suppress the ordinary answer (`EN` for mg, `HD` for the others).
    pub quiet: bool,
    /// `u`: do not bump the item in the LRU nor mark it accessed.
    pub no_bump: bool,
    /// `v`: return the value.
    pub value: bool,
    /// `N`: vivify on miss with this TTL (mg, ma).
    pub vivify: Option<i64>,
    /// `R`: win the recache if the remaining TTL is below this.
    pub recache: Option<i64>,
    /// `T`: new TTL.
    pub ttl: Option<i64>,
    /// `C`: compare this CAS value.
    pub compare_cas: Option<u64>,
    /// `F`: client flags to store.
    pub client_flags: Option<u32>,
    /// `I`: invalidate (md) or set-to-stale on an older CAS (ms).
    pub invalidate: bool,
    pub set_mode: SetMode,
    /// `M` of `ma`: true for decrement.
    pub decrement: bool,
    /// `J`: initial value of a vivified counter.
    pub initial: Option<u64>,
    /// `D`: delta of `ma`.
    pub delta: Option<u64>,
}

/// The order of return flags, without allocating.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReturnOrder {
    flags: [u8; MAX_FLAGS],
    len: u8,
}

impl ReturnOrder {
    fn push(&mut self, flag: u8) {
        if usize::from(self.len) < MAX_FLAGS {
            self.flags[usize::from(self.len)] = flag;
            self.len += 1;
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        self.flags[..usize::from(self.len)].iter().copied()
    }

    pub fn contains(&self, flag: u8) -> bool {
        self.iter().any(|f| f == flag)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Set,
    Delete,
    Arith,
}

impl Verb {
    /// memcached words flag errors differently for mg/ms and md/ma.
    fn flag_error(self, specific: ErrorReply) -> ErrorReply {
        match self {
            Verb::Get | Verb::Set => specific,
            Verb::Delete | Verb::Arith => ErrorReply::MetaInvalidOrDuplicateFlag,
        }
    }
}

/// A parsed meta command, or an `ms` refused for its size (a request of its
/// own: its data block is swallowed and the old item removed).
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    Request(MetaRequest<'a>),
    TooLarge(TooLarge<'a>),
}

/// Parses a meta command whose two-letter verb is `verb`; `args` is the rest
/// of the line, `buf` the whole input (for the data block of `ms`).
pub fn parse<'a>(
    verb: &'a [u8],
    args: &'a [u8],
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Parse<Parsed<'a>> {
    let mut tokens = Tokens::new(args);
    let verb = match verb {
        b"mn" => return done(MetaRequest::Noop, line_len),
        b"me" => return parse_debug(tokens, line_len),
        b"mg" => Verb::Get,
        b"ms" => Verb::Set,
        b"md" => Verb::Delete,
        _ => Verb::Arith,
    };
    let Some(key) = tokens.next() else {
        return reject(ErrorReply::UnknownCommand, line_len, Recovery::Continue);
    };
    if !valid_key(key) {
        return reject(ErrorReply::BadCommandLine, line_len, Recovery::Continue);
    }
    // Only ms carries data; once its length is known every later error must
    // swallow the data block to keep the stream in sync.
    let mut recovery = Recovery::Continue;
    let mut data_len = 0usize;
    if verb == Verb::Set {
        match tokens
            .next()
            .and_then(parse_data_length)
            .filter(|&n| (0..=i32::MAX - 2).contains(&n))
        {
            Some(n) => {
                data_len = n as usize;
                recovery = Recovery::Swallow(n as u64 + 2);
            }
            None => return reject(ErrorReply::BadCommandLine, line_len, Recovery::Continue),
        }
    }
    let flags = match parse_flags_of(verb, tokens) {
        Ok(flags) => flags,
        Err(error) => return reject(error, line_len, recovery),
    };
    let key = match decode_key(key, flags.0) {
        Some(key) => key,
        None => return reject(ErrorReply::MetaKeyDecode, line_len, recovery),
    };
    let command = MetaCommand {
        key,
        flags: flags.1,
    };
    match verb {
        Verb::Get => done(MetaRequest::Get(command), line_len),
        Verb::Delete => done(MetaRequest::Delete(command), line_len),
        Verb::Arith => done(MetaRequest::Arith(command), line_len),
        Verb::Set => {
            if data_len > limits.max_item_size {
                let request = Parsed::TooLarge(TooLarge {
                    key: command.key.bytes,
                    removes_old_item: true,
                    data_len: data_len as u64,
                    // `q` hides only the ordinary answer, never an error.
                    noreply: false,
                });
                return Parse::Done {
                    request,
                    consumed: line_len,
                };
            }
            match data_block(buf, line_len, data_len) {
                DataBlock::Incomplete => Parse::Incomplete,
                DataBlock::Bad(consumed) => {
                    reject(ErrorReply::BadDataChunk, consumed, Recovery::Continue)
                }
                DataBlock::Ok(data, consumed) => done(MetaRequest::Set { command, data }, consumed),
            }
        }
    }
}

fn done(request: MetaRequest<'_>, consumed: usize) -> Parse<Parsed<'_>> {
    Parse::Done {
        request: Parsed::Request(request),
        consumed,
    }
}

fn reject<T>(error: ErrorReply, consumed: usize, recovery: Recovery) -> Parse<T> {
    Parse::Reject {
        error,
        consumed,
        recovery,
        noreply: false,
    }
}

fn parse_debug(mut tokens: Tokens<'_>, line_len: usize) -> Parse<Parsed<'_>> {
    let Some(key) = tokens.next().filter(|k| valid_key(k)) else {
        return reject(ErrorReply::BadCommandLine, line_len, Recovery::Continue);
    };
    let base64 = tokens.next() == Some(b"b");
    match decode_key(key, base64) {
        Some(key) => done(MetaRequest::Debug { key }, line_len),
        None => reject(ErrorReply::BadCommandLine, line_len, Recovery::Continue),
    }
}

/// Base64 as memcached decodes a key: padded, and the bits past the last
/// byte ignored (`n8==` is `\x9f`, as `nw==`).
const KEY_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

fn decode_key(wire: &[u8], base64: bool) -> Option<MetaKey<'_>> {
    let bytes = if base64 {
        let decoded = KEY_BASE64
            .decode(wire)
            .ok()
            .filter(|k| !k.is_empty() && k.len() <= crate::MAX_KEY_LEN)?;
        Cow::Owned(decoded)
    } else {
        Cow::Borrowed(wire)
    };
    Some(MetaKey {
        wire,
        bytes,
        base64,
    })
}

/// Returns (base64 key?, flags).
fn parse_flags_of<'a>(verb: Verb, tokens: Tokens<'a>) -> Result<(bool, MetaFlags<'a>), ErrorReply> {
    let mut flags = MetaFlags::default();
    let mut base64 = false;
    let mut seen = 0u64;
    for (count, token) in tokens.enumerate() {
        if count >= MAX_FLAGS {
            return Err(ErrorReply::BadCommandLine);
        }
        let (&flag, arg) = token.split_first().unwrap_or((&0, &[]));
        // memcached marks flags seen in a table of 127: a byte past it is
        // a "duplicate".
        if flag >= 127 {
            return Err(verb.flag_error(ErrorReply::MetaDuplicateFlag));
        }
        if !KNOWN_FLAGS.contains(&flag) {
            return Err(verb.flag_error(ErrorReply::MetaInvalidFlag));
        }
        let bit = 1u64 << (flag - b'A');
        if seen & bit != 0 {
            return Err(verb.flag_error(ErrorReply::MetaDuplicateFlag));
        }
        seen |= bit;
        let bad_token = verb.flag_error(ErrorReply::MetaBadToken);
        match flag {
            b'b' => base64 = true,
            b'c' | b'f' | b'h' | b'k' | b'l' | b's' | b't' => flags.returns.push(flag),
            b'O' => {
                if token.len() > MAX_OPAQUE_LEN {
                    return Err(ErrorReply::MetaOpaqueTooLong);
                }
                flags.opaque = Some(arg);
                flags.returns.push(flag);
            }
            b'q' => flags.quiet = true,
            b'u' => flags.no_bump = true,
            b'v' => flags.value = true,
            b'I' => flags.invalidate = true,
            b'N' => flags.vivify = Some(parse_exptime(arg).ok_or(bad_token)?),
            b'R' => flags.recache = Some(parse_exptime(arg).ok_or(bad_token)?),
            b'T' => flags.ttl = Some(parse_exptime(arg).ok_or(bad_token)?),
            b'C' => flags.compare_cas = Some(parse_u64(arg).ok_or(bad_token)?),
            b'F' => {
                flags.client_flags =
                    Some(parse_flags(arg).ok_or(verb.flag_error(ErrorReply::BadCommandLine))?)
            }
            b'J' => {
                let invalid = verb.flag_error(ErrorReply::MetaInvalidInitial);
                flags.initial = Some(parse_u64(arg).ok_or(invalid)?)
            }
            b'D' => {
                let invalid = verb.flag_error(ErrorReply::MetaInvalidDelta);
                flags.delta = Some(parse_u64(arg).ok_or(invalid)?)
            }
            b'M' => parse_mode(verb, arg, &mut flags)?,
            _ => {} // P and L: routing hints for proxies, ignored.
        }
    }
    Ok((base64, flags))
}

fn parse_mode(verb: Verb, arg: &[u8], flags: &mut MetaFlags<'_>) -> Result<(), ErrorReply> {
    let mode = match arg {
        [mode] => *mode,
        _ => 0,
    };
    if matches!(verb, Verb::Get | Verb::Delete) {
        // A mode they have no use for, if it is one character.
        return match mode {
            0 => Err(verb.flag_error(ErrorReply::MetaBadToken)),
            _ => Ok(()),
        };
    }
    if verb == Verb::Set {
        flags.set_mode = match mode {
            b'S' => SetMode::Set,
            b'E' => SetMode::Add,
            b'R' => SetMode::Replace,
            b'A' => SetMode::Append,
            b'P' => SetMode::Prepend,
            _ => return Err(ErrorReply::MetaSetMode),
        };
    } else {
        flags.decrement = match mode {
            b'I' | b'+' => false,
            b'D' | b'-' => true,
            _ => return Err(ErrorReply::MetaArithMode),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::line::split_line;

    /// A whole meta line as the text parser hands it over.
    fn parse_line<'a>(input: &'a [u8], limits: &Limits) -> Parse<Parsed<'a>> {
        let (line, line_len) = split_line(input).expect("a whole line");
        let (verb, args) = line.split_at(2);
        parse(verb, args, input, line_len, limits)
    }

    const LIMITS: Limits = Limits {
        max_item_size: 1024 * 1024,
    };

    fn meta(input: &[u8]) -> MetaRequest<'_> {
        match parse_line(input, &LIMITS) {
            Parse::Done {
                request: Parsed::Request(m),
                ..
            } => m,
            other => panic!("expected a meta request from {input:?}, got {other:?}"),
        }
    }

    fn rejected(input: &[u8]) -> (ErrorReply, Recovery) {
        match parse_line(input, &LIMITS) {
            Parse::Reject {
                error, recovery, ..
            } => (error, recovery),
            other => panic!("expected a rejection of {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn get_keeps_the_order_of_return_flags() {
        let MetaRequest::Get(cmd) = meta(b"mg foo t f v c k O9 q\r\n") else {
            panic!("not mg")
        };
        assert_eq!(cmd.key.bytes.as_ref(), b"foo");
        assert_eq!(cmd.flags.returns.iter().collect::<Vec<_>>(), b"tfckO");
        assert_eq!(cmd.flags.opaque, Some(&b"9"[..]));
        assert!(cmd.flags.value && cmd.flags.quiet);
    }

    #[test]
    fn set_with_mode_ttl_and_data() {
        let MetaRequest::Set { command, data } = meta(b"ms k 2 T90 F5 MA\r\nhi\r\n") else {
            panic!("not ms")
        };
        assert_eq!(data, b"hi");
        assert_eq!(command.flags.ttl, Some(90));
        assert_eq!(command.flags.client_flags, Some(5));
        assert_eq!(command.flags.set_mode, SetMode::Append);
    }

    #[test]
    fn base64_keys_are_decoded() {
        let MetaRequest::Get(cmd) = meta(b"mg bWtleQ== b k v\r\n") else {
            panic!("not mg")
        };
        assert_eq!(cmd.key.bytes.as_ref(), b"mkey");
        assert_eq!(cmd.key.wire, b"bWtleQ==");
        assert_eq!(rejected(b"mg !!! b v\r\n").0, ErrorReply::MetaKeyDecode);
        // Bits past the last byte are ignored, as memcached's decoder does.
        let MetaRequest::Get(cmd) = meta(b"mg n8== b v\r\n") else {
            panic!("not mg")
        };
        assert_eq!(cmd.key.bytes.as_ref(), b"\x9f");
        assert_eq!(rejected(b"mg n8 b v\r\n").0, ErrorReply::MetaKeyDecode);
    }

    #[test]
    fn flag_errors_use_memcached_wording() {
        assert_eq!(rejected(b"mg k zz\r\n").0, ErrorReply::MetaInvalidFlag);
        assert_eq!(rejected(b"mg k v v\r\n").0, ErrorReply::MetaDuplicateFlag);
        // memcached's duplicate check covers the proxy's hints too.
        assert_eq!(rejected(b"mg k Pa Pb\r\n").0, ErrorReply::MetaDuplicateFlag);
        assert_eq!(rejected(b"mg k Tabc\r\n").0, ErrorReply::MetaBadToken);
        assert_eq!(rejected(b"mg k Jx\r\n").0, ErrorReply::MetaInvalidInitial);
        assert_eq!(rejected(b"mg k Dx\r\n").0, ErrorReply::MetaInvalidDelta);
        assert_eq!(rejected(b"mg k \xff\r\n").0, ErrorReply::MetaDuplicateFlag);
        assert_eq!(
            rejected(b"md k x\r\n").0,
            ErrorReply::MetaInvalidOrDuplicateFlag
        );
        assert_eq!(
            rejected(b"ma k Dabc\r\n").0,
            ErrorReply::MetaInvalidOrDuplicateFlag
        );
        assert_eq!(rejected(b"ma k MX\r\n").0, ErrorReply::MetaArithMode);
        // The token, its `O` included, holds 32 bytes at most.
        let long = [&b"mg k O"[..], &[b'a'; 32], b"\r\n"].concat();
        assert_eq!(rejected(&long).0, ErrorReply::MetaOpaqueTooLong);
        let long = [&b"ma k O"[..], &[b'a'; 32], b"\r\n"].concat();
        assert_eq!(rejected(&long).0, ErrorReply::MetaOpaqueTooLong);
        let longest = [&b"mg k O"[..], &[b'a'; 31], b"\r\n"].concat();
        assert!(matches!(meta(&longest), MetaRequest::Get(_)));
        assert_eq!(rejected(b"mg\r\n").0, ErrorReply::UnknownCommand);
    }

    #[test]
    fn every_command_takes_every_known_flag_and_ignores_those_it_does_not_use() {
        // As memcached: a client may send one set of flags to all commands.
        for line in [
            &b"ms k 1 t f h l s u v D1 J1 N1 R1\r\nx\r\n"[..],
            b"mg k I C1 D1 F1 J1 M1\r\n",
            b"md k c f h l s t u v D1 F1 J1 M1 N1 R1\r\n",
            b"ma k f h l s u I F1 R1\r\n",
        ] {
            assert!(
                matches!(
                    parse_line(line, &LIMITS),
                    Parse::Done {
                        request: Parsed::Request(_),
                        ..
                    }
                ),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn set_errors_swallow_the_data_once_its_length_is_known() {
        assert_eq!(
            rejected(b"ms k 2 MX\r\nhi\r\n"),
            (ErrorReply::MetaSetMode, Recovery::Swallow(4))
        );
        assert_eq!(
            rejected(b"ms k 2 F-1\r\nhi\r\n"),
            (ErrorReply::BadCommandLine, Recovery::Swallow(4))
        );
        assert_eq!(
            rejected(b"ms k abc\r\nhi\r\n"),
            (ErrorReply::BadCommandLine, Recovery::Continue)
        );
        let Parse::Done {
            request: Parsed::TooLarge(too_large),
            consumed,
        } = parse_line(b"ms k 2000000\r\n", &LIMITS)
        else {
            panic!("a too large ms is a request of its own")
        };
        assert_eq!(consumed, 14);
        assert_eq!(too_large.data_len, 2_000_000);
    }

    #[test]
    fn noop_and_debug() {
        assert_eq!(meta(b"mn\r\n"), MetaRequest::Noop);
        assert!(matches!(meta(b"me foo\r\n"), MetaRequest::Debug { .. }));
        assert_eq!(rejected(b"me\r\n").0, ErrorReply::BadCommandLine);
    }
}
