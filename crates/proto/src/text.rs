//! memcached's classic text protocol: `get`, `set`, `incr`, `stats`, … .
//!
//! A request is one line (`\r\n` or a bare `\n`), plus a data block for the
//! storage commands. Tokens are separated by spaces; runs of spaces are one
//! separator. Meta commands (`mg`, `ms`, …) share the framing and are handed
//! to [`crate::meta`].

pub use crate::line::{data_block, split_line, valid_key, DataBlock, Limits, Tokens, TooLarge};
use crate::meta::{self, MetaRequest};
use crate::number::{parse_data_length, parse_exptime, parse_flags, parse_i64, parse_u64};
use crate::{ErrorReply, Parse, Recovery, MAX_LINE_LEN};

/// memcached answers a line with more tokens than this with `ERROR`
/// (except retrievals, whose key lists may be long).
const MAX_TOKENS: usize = 24;

/// One parsed text-protocol request, borrowing keys and data from the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Get {
        mode: GetMode,
        keys: Keys<'a>,
    },
    Store(StoreRequest<'a>),
    Delete {
        key: &'a [u8],
        noreply: bool,
    },
    Arith {
        key: &'a [u8],
        incr: bool,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        delay: i64,
        noreply: bool,
    },
    Version,
    Verbosity {
        noreply: bool,
    },
    Quit,
    Shutdown {
        mode: ShutdownMode,
    },
    /// `slabs automove <0|1|2>` or `slabs automove ratio <x>`: kura has no
    /// slab pages to move between size classes, so a valid setting is
    /// accepted and changes nothing.
    SlabsAutomove {
        noreply: bool,
    },
    /// `debugtime <seconds>`: moves the server clock forward, as in
    /// memcached's debug build, so tests need not sleep.
    DebugTime {
        seconds: i64,
    },
    CacheMemlimit {
        megabytes: u64,
        noreply: bool,
    },
    /// `refresh_certs`: load the TLS certificate and key files again.
    RefreshCerts {
        noreply: bool,
    },
    /// `backup <dir> [since <dir>]` (kura's own): a hot backup of the disk
    /// engine into a directory on the server's machine, full or
    /// incremental, as Tokyo Tyrant's `copy` writes one on its host.
    Backup {
        to: &'a [u8],
        since: Option<&'a [u8]>,
    },
    /// `replicate <replica id> <lsn> <µs>|none <format>` (kura's own): a
    /// replica asks for the log after its position; the connection then carries
    /// replication frames (`replication.rs`).
    Replicate(crate::replication::ReplicaHello),
    /// `replicaof <host> <port>` follows a master from now on; `replicaof
    /// no one` stops following and takes writes (promotes), as in Redis;
    /// `replicaof no one force` even with only part of a snapshot loaded.
    ReplicaOf {
        master: Option<(&'a [u8], u16)>,
        force: bool,
    },
    /// `replicas`: this server's replication state and attached replicas.
    Replicas,
    /// `stats` and its arguments (`settings`, `items`, `slabs`, …), raw.
    Stats {
        args: Keys<'a>,
    },
    /// `lru_crawler …`: the crawler's switches, crawls and metadata dumps.
    LruCrawler(LruCrawler<'a>),
    /// `lru tune|mode|temp_ttl …`: memcached's LRU settings.
    Lru {
        command: Lru,
        noreply: bool,
    },
    /// `watch [kind …]`: the connection becomes a log watcher. The kinds
    /// (`fetchers`, `mutations`, …) are left raw for the server to judge.
    Watch {
        kinds: Keys<'a>,
    },
    Meta(MetaRequest<'a>),
    /// A storage command (text or `ms`) whose data block is larger than the
    /// item size limit (`-I`). Its data block follows and is discarded.
    TooLarge(TooLarge<'a>),
}

impl Request<'_> {
    /// Bytes after the request that belong to it and are to be discarded
    /// unread (the data block of a storage command that is refused before its
    /// data arrives).
    pub fn bytes_to_discard(&self) -> u64 {
        match self {
            Request::TooLarge(too_large) => too_large.data_len + 2,
            _ => 0,
        }
    }
}

/// `lru …` as memcached's `process_lru_command` judges it. kura's LRU has
/// no segments and its temporary TTL is fixed at start, so these name the
/// answer, not a setting to change.
#[derive(Debug, PartialEq, Eq)]
pub enum Lru {
    /// `tune <hot %> <warm %> <hot factor> <warm factor>` with good values.
    Tune,
    /// `tune` whose hot and warm percentages add up to more than 80.
    TuneOverEighty,
    /// `tune` with an age factor of 0 or less.
    TuneFactorNotPositive,
    /// `mode flat` or `mode segmented`.
    Mode { segmented: bool },
    /// `temp_ttl <seconds>`.
    TempTtl,
    /// Anything else, or a number that is not one: a bare `ERROR`.
    Invalid,
}

/// The `lru_crawler` subcommands, as memcached's `process_lru_crawler_command`
/// tells them apart.
#[derive(Debug, PartialEq, Eq)]
pub enum LruCrawler<'a> {
    Enable,
    Disable,
    /// `crawl <classes>`: `all` or a comma-separated list of class ids.
    Crawl(&'a [u8]),
    /// `metadump <all|hash|classes>`.
    Metadump(&'a [u8]),
    /// `tocrawl <n>` and `sleep <µs>`: tuning memcached's crawler thread;
    /// None when the number is not one.
    Tune {
        sleep: bool,
        value: Option<u64>,
    },
}

/// How `shutdown` was asked to stop the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`: stop now.
    Immediate,
    /// `shutdown graceful` (memcached's SIGUSR1).
    Graceful,
    /// Any other argument. memcached checks that `shutdown` is allowed
    /// before it looks at the mode, so this is refused when executed.
    Unknown,
}

/// Which retrieval verb: `get`, `gets` (with CAS), `gat`/`gats` (get and touch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetMode {
    Get,
    Gets,
    Gat { exptime: i64 },
    Gats { exptime: i64 },
}

impl GetMode {
    pub fn returns_cas(self) -> bool {
        matches!(self, GetMode::Gets | GetMode::Gats { .. })
    }

    pub fn touch(self) -> Option<i64> {
        match self {
            GetMode::Gat { exptime } | GetMode::Gats { exptime } => Some(exptime),
            _ => None,
        }
    }
}

/// The storage verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreVerb {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// `set`/`add`/`replace`/`append`/`prepend`/`cas` with their data block.
#[derive(Debug, PartialEq, Eq)]
pub struct StoreRequest<'a> {
    pub verb: StoreVerb,
    pub key: &'a [u8],
    pub flags: u32,
    pub exptime: i64,
    /// The `cas unique` of a `cas` command; 0 for the other verbs.
    pub cas_unique: u64,
    pub noreply: bool,
    pub data: &'a [u8],
}

/// A space-separated list of keys (or arguments), iterated without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys<'a>(&'a [u8]);

impl<'a> Keys<'a> {
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.0.split(|&b| b == b' ').filter(|t| !t.is_empty())
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// Parses one request from the front of `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parse<Request<'a>> {
    let Some((line, line_len)) = split_line(buf) else {
        return incomplete_line(buf);
    };
    let mut tokens = Tokens::new(line);
    let Some(verb) = tokens.next() else {
        return reject(ErrorReply::UnknownCommand, line_len);
    };
    match verb {
        // `bget`: memcached keeps it, as `get`, for old clients.
        b"get" | b"bget" => parse_get(GetMode::Get, tokens, line_len),
        b"gets" => parse_get(GetMode::Gets, tokens, line_len),
        b"gat" | b"gats" => parse_gat(verb == b"gats", tokens, line_len),
        b"set" => parse_store(StoreVerb::Set, tokens, buf, line_len, limits),
        b"add" => parse_store(StoreVerb::Add, tokens, buf, line_len, limits),
        b"replace" => parse_store(StoreVerb::Replace, tokens, buf, line_len, limits),
        b"append" => parse_store(StoreVerb::Append, tokens, buf, line_len, limits),
        b"prepend" => parse_store(StoreVerb::Prepend, tokens, buf, line_len, limits),
        b"cas" => parse_store(StoreVerb::Cas, tokens, buf, line_len, limits),
        b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me" => {
            meta::parse(verb, tokens.rest(), buf, line_len, limits).map(|parsed| match parsed {
                meta::Parsed::Request(request) => Request::Meta(request),
                meta::Parsed::TooLarge(too_large) => Request::TooLarge(too_large),
            })
        }
        _ => parse_other(verb, tokens, line_len),
    }
}

/// No newline yet. A long line is allowed only for a multi-get, exactly as
/// memcached allows it; anything else that long is garbage and the
/// connection is closed.
fn incomplete_line<T>(buf: &[u8]) -> Parse<T> {
    if buf.len() <= MAX_LINE_LEN {
        return Parse::Incomplete;
    }
    let leading_spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[leading_spaces..];
    if leading_spaces <= 100 && (rest.starts_with(b"get ") || rest.starts_with(b"gets ")) {
        Parse::Incomplete
    } else {
        Parse::Reject {
            error: ErrorReply::LineTooLong,
            consumed: buf.len(),
            recovery: Recovery::Close,
            noreply: false,
        }
    }
}

fn reject<T>(error: ErrorReply, consumed: usize) -> Parse<T> {
    reject_unless_noreply(error, consumed, false)
}

/// A rejection of a command line that ended in `noreply`: memcached notes
/// the `noreply` before it checks the arguments, so such errors are silent.
fn reject_unless_noreply<T>(error: ErrorReply, consumed: usize, noreply: bool) -> Parse<T> {
    Parse::Reject {
        error,
        consumed,
        recovery: Recovery::Continue,
        noreply,
    }
}

fn done(request: Request<'_>, consumed: usize) -> Parse<Request<'_>> {
    Parse::Done { request, consumed }
}

fn is_noreply(token: Option<&[u8]>) -> bool {
    token == Some(b"noreply")
}

fn parse_get<'a>(mode: GetMode, tokens: Tokens<'a>, line_len: usize) -> Parse<Request<'a>> {
    let keys = Keys(tokens.rest());
    // `gat <exptime>` without keys is answered with an empty END, like memcached.
    if keys.is_empty() && mode.touch().is_none() {
        return reject(ErrorReply::UnknownCommand, line_len);
    }
    if !keys.iter().all(valid_key) {
        return reject(ErrorReply::BadCommandLine, line_len);
    }
    done(Request::Get { mode, keys }, line_len)
}

fn parse_gat(with_cas: bool, mut tokens: Tokens<'_>, line_len: usize) -> Parse<Request<'_>> {
    if tokens.remaining() == 0 {
        return reject(ErrorReply::UnknownCommand, line_len);
    }
    let Some(exptime) = tokens.next().and_then(parse_exptime) else {
        return reject(ErrorReply::InvalidExptime, line_len);
    };
    let mode = if with_cas {
        GetMode::Gats { exptime }
    } else {
        GetMode::Gat { exptime }
    };
    parse_get(mode, tokens, line_len)
}

fn parse_store<'a>(
    verb: StoreVerb,
    tokens: Tokens<'a>,
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Parse<Request<'a>> {
    let args: Vec<&[u8]> = tokens.take(MAX_TOKENS).collect();
    let required = if verb == StoreVerb::Cas { 5 } else { 4 };
    if args.len() != required && args.len() != required + 1 {
        return reject(ErrorReply::UnknownCommand, line_len);
    }
    let noreply = is_noreply(args.last().copied());
    let bad_line = || reject_unless_noreply(ErrorReply::BadCommandLine, line_len, noreply);
    let key = args[0];
    if !valid_key(key) {
        return bad_line();
    }
    let (Some(flags), Some(exptime), Some(length)) = (
        parse_flags(args[1]),
        parse_exptime(args[2]),
        parse_data_length(args[3]).filter(|&n| (0..=i32::MAX - 2).contains(&n)),
    ) else {
        return bad_line();
    };
    let cas_unique = if verb == StoreVerb::Cas {
        match parse_u64(args[4]) {
            Some(cas) => cas,
            None => return bad_line(),
        }
    } else {
        0
    };
    let length = length as usize;
    if length > limits.max_item_size {
        let request = Request::TooLarge(TooLarge {
            key: key.into(),
            removes_old_item: verb == StoreVerb::Set,
            data_len: length as u64,
            noreply,
        });
        return done(request, line_len);
    }
    match data_block(buf, line_len, length) {
        DataBlock::Incomplete => Parse::Incomplete,
        DataBlock::Bad(consumed) => Parse::Reject {
            error: ErrorReply::BadDataChunk,
            consumed,
            recovery: Recovery::Continue,
            noreply,
        },
        DataBlock::Ok(data, consumed) => done(
            Request::Store(StoreRequest {
                verb,
                key,
                flags,
                exptime,
                cas_unique,
                noreply,
                data,
            }),
            consumed,
        ),
    }
}

fn parse_other<'a>(verb: &'a [u8], mut tokens: Tokens<'a>, line_len: usize) -> Parse<Request<'a>> {
    let argc = tokens.remaining();
    // Commands that take `noreply` note it before they check their
    // arguments, so their argument errors are silent under it.
    let noreply = is_noreply(tokens.clone().last());
    let quiet_reject = |error| reject_unless_noreply(error, line_len, noreply);
    let request = match (verb, argc) {
        (b"delete", 1..=3) => return parse_delete(tokens, argc, line_len),
        (b"incr" | b"decr", 2 | 3) => {
            let key = tokens.next().unwrap_or_default();
            if !valid_key(key) {
                return quiet_reject(ErrorReply::BadCommandLine);
            }
            let Some(delta) = tokens.next().and_then(parse_u64) else {
                return quiet_reject(ErrorReply::InvalidDelta);
            };
            Request::Arith {
                key,
                incr: verb == b"incr",
                delta,
                noreply,
            }
        }
        (b"touch", 2 | 3) => {
            let key = tokens.next().unwrap_or_default();
            if !valid_key(key) {
                return quiet_reject(ErrorReply::BadCommandLine);
            }
            let Some(exptime) = tokens.next().and_then(parse_exptime) else {
                return quiet_reject(ErrorReply::InvalidExptime);
            };
            Request::Touch {
                key,
                exptime,
                noreply,
            }
        }
        (b"flush_all", 0..=2) => {
            // A lone `noreply` is not a delay; anything else in first place is.
            let delay = if argc == usize::from(noreply) {
                0
            } else {
                match tokens.next().and_then(parse_exptime) {
                    Some(delay) => delay,
                    None => return quiet_reject(ErrorReply::InvalidExptime),
                }
            };
            Request::FlushAll { delay, noreply }
        }
        // memcached ignores anything after these two.
        (b"version", _) => Request::Version,
        (b"verbosity", 1 | 2) => {
            // The level must be a number; kura keeps no log to make louder.
            if tokens.next().and_then(parse_flags).is_none() {
                return quiet_reject(ErrorReply::BadCommandLine);
            }
            Request::Verbosity { noreply }
        }
        (b"quit", _) => Request::Quit,
        (b"shutdown", _) => Request::Shutdown {
            mode: match (argc, tokens.next()) {
                (0, _) => ShutdownMode::Immediate,
                (1, Some(b"graceful")) => ShutdownMode::Graceful,
                _ => ShutdownMode::Unknown,
            },
        },
        (b"slabs", 2..) if tokens.next() == Some(b"automove") => {
            return parse_slabs_automove(tokens, argc, line_len, noreply)
        }
        (b"cache_memlimit", 1 | 2) => {
            let Some(megabytes) = tokens.next().and_then(parse_u64) else {
                return quiet_reject(ErrorReply::UnknownCommand);
            };
            Request::CacheMemlimit { megabytes, noreply }
        }
        (b"lru", 1..) => Request::Lru {
            command: parse_lru(tokens),
            noreply,
        },
        (b"lru_crawler", 1 | 2) => {
            let command = match (tokens.next().unwrap_or_default(), tokens.next()) {
                (b"enable", None) => LruCrawler::Enable,
                (b"disable", None) => LruCrawler::Disable,
                (b"crawl", Some(classes)) => LruCrawler::Crawl(classes),
                (b"metadump", Some(classes)) => LruCrawler::Metadump(classes),
                (verb @ (b"tocrawl" | b"sleep"), Some(value)) => LruCrawler::Tune {
                    sleep: verb == b"sleep",
                    value: parse_u64(value),
                },
                _ => return reject(ErrorReply::UnknownCommand, line_len),
            };
            Request::LruCrawler(command)
        }
        (b"watch", _) => Request::Watch {
            kinds: Keys(tokens.rest()),
        },
        (b"refresh_certs", _) => Request::RefreshCerts { noreply },
        (b"backup", 1 | 3) => {
            let to = tokens.next().unwrap_or_default();
            let since = match (tokens.next(), tokens.next()) {
                (None, _) => None,
                (Some(b"since"), Some(dir)) => Some(dir),
                _ => return reject(ErrorReply::BadCommandLine, line_len),
            };
            Request::Backup { to, since }
        }
        (b"backup", _) => return reject(ErrorReply::BadCommandLine, line_len),
        (b"replicate", 3 | 4) => {
            let replica = tokens
                .next()
                .and_then(parse_u64)
                .and_then(|id| u32::try_from(id).ok());
            let (after, format) = match (tokens.next(), tokens.next(), tokens.next()) {
                (Some(b"none"), Some(format), None) => (Some(None), Some(format)),
                (Some(lsn), Some(micros), Some(format)) => (
                    parse_u64(lsn).zip(parse_u64(micros)).map(Some),
                    Some(format),
                ),
                _ => (None, None),
            };
            let format = format
                .and_then(parse_u64)
                .and_then(|format| u32::try_from(format).ok());
            match (replica, after, format) {
                (Some(replica), Some(after), Some(format)) => {
                    Request::Replicate(crate::replication::ReplicaHello {
                        replica,
                        after,
                        format,
                    })
                }
                _ => return reject(ErrorReply::BadCommandLine, line_len),
            }
        }
        (b"replicaof", 2) => {
            let (host, port) = (
                tokens.next().unwrap_or_default(),
                tokens.next().unwrap_or_default(),
            );
            if host.eq_ignore_ascii_case(b"no") && port.eq_ignore_ascii_case(b"one") {
                Request::ReplicaOf {
                    master: None,
                    force: false,
                }
            } else {
                match parse_u64(port).and_then(|port| u16::try_from(port).ok()) {
                    Some(port) if port > 0 => Request::ReplicaOf {
                        master: Some((host, port)),
                        force: false,
                    },
                    _ => return reject(ErrorReply::BadCommandLine, line_len),
                }
            }
        }
        (b"replicaof", 3) => {
            let words =
                [tokens.next(), tokens.next(), tokens.next()].map(Option::unwrap_or_default);
            match words
                .iter()
                .zip([&b"no"[..], b"one", b"force"])
                .all(|(w, e)| w.eq_ignore_ascii_case(e))
            {
                true => Request::ReplicaOf {
                    master: None,
                    force: true,
                },
                false => return reject(ErrorReply::BadCommandLine, line_len),
            }
        }
        (b"replicate" | b"replicaof", _) => return reject(ErrorReply::BadCommandLine, line_len),
        (b"replicas", 0) => Request::Replicas,
        (b"stats", _) => Request::Stats {
            args: Keys(tokens.rest()),
        },
        (b"debugtime", 1..) => match tokens.next().and_then(parse_i64) {
            Some(seconds) => Request::DebugTime { seconds },
            None => return reject(ErrorReply::UnknownCommand, line_len),
        },
        _ if is_http_request(verb, tokens.last()) => {
            // Someone pointed a web client at the cache: memcached hangs up
            // without a word.
            return Parse::Reject {
                error: ErrorReply::UnknownCommand,
                consumed: line_len,
                recovery: Recovery::Close,
                noreply: true,
            };
        }
        _ => return reject(ErrorReply::UnknownCommand, line_len),
    };
    done(request, line_len)
}

/// An HTTP request line (`GET / HTTP/1.1`). memcached recognises one only
/// among lines whose verb is not one of its own (so not `get ... HTTP/1.0`):
/// its last word starts with `HTTP/`.
fn is_http_request(verb: &[u8], last: Option<&[u8]>) -> bool {
    // memcached picks most commands by their first letter and the rest by
    // name; only a line that matches neither is checked for HTTP.
    let dispatched_by_initial = matches!(
        verb.first(),
        Some(b'g' | b's' | b'a' | b'c' | b'i' | b'd' | b't')
    ) || (verb.len() == 2 && verb[0] == b'm');
    let dispatched_by_name = matches!(
        verb,
        b"replace"
            | b"prepend"
            | b"bget"
            | b"flush_all"
            | b"version"
            | b"quit"
            | b"lru_crawler"
            | b"watch"
            | b"verbosity"
            | b"lru"
    );
    !dispatched_by_initial
        && !dispatched_by_name
        && verb.len() >= 2
        && last.is_some_and(|word| word.starts_with(b"HTTP/"))
}

/// `lru`'s subcommand and its arguments (`noreply` aside), checked as
/// memcached checks them: percentages as `safe_strtoul` (narrowed to 32
/// bits, their sum too), factors as `safe_strtod`, a TTL as `safe_strtol`.
fn parse_lru(tokens: Tokens<'_>) -> Lru {
    let factor = |token: &[u8]| {
        let end = (token.iter().position(u8::is_ascii_whitespace)).unwrap_or(token.len());
        std::str::from_utf8(&token[..end]).ok()?.parse::<f64>().ok()
    };
    match tokens.collect::<Vec<_>>().as_slice() {
        [b"tune", hot, warm, hot_factor, warm_factor, ..] => {
            let (Some(hot), Some(warm), Some(hot_factor), Some(warm_factor)) = (
                parse_u64(hot),
                parse_u64(warm),
                factor(hot_factor),
                factor(warm_factor),
            ) else {
                return Lru::Invalid;
            };
            if (hot as u32).wrapping_add(warm as u32) > 80 {
                Lru::TuneOverEighty
            } else if hot_factor <= 0.0 || warm_factor <= 0.0 {
                Lru::TuneFactorNotPositive
            } else {
                Lru::Tune
            }
        }
        [b"mode", b"flat", ..] => Lru::Mode { segmented: false },
        [b"mode", b"segmented", ..] => Lru::Mode { segmented: true },
        [b"temp_ttl", ttl, ..] if parse_i64(ttl).is_some() => Lru::TempTtl,
        _ => Lru::Invalid,
    }
}

/// `slabs automove <level>` (0, 1 or 2) or `slabs automove ratio <x>`, with
/// memcached's answers to bad values: `CLIENT_ERROR` for a level that is not
/// a number, `ERROR` for a level out of range or a missing ratio.
fn parse_slabs_automove(
    mut tokens: Tokens<'_>,
    argc: usize,
    line_len: usize,
    noreply: bool,
) -> Parse<Request<'_>> {
    let valid = match tokens.next() {
        Some(b"ratio") => {
            let ratio = tokens.next().and_then(|t| std::str::from_utf8(t).ok());
            if argc < 3 || ratio.and_then(|r| r.parse::<f64>().ok()).is_none() {
                return reject_unless_noreply(ErrorReply::UnknownCommand, line_len, noreply);
            }
            true
        }
        level => match level.and_then(parse_flags) {
            None => return reject_unless_noreply(ErrorReply::BadCommandLine, line_len, noreply),
            Some(level) => level <= 2,
        },
    };
    if !valid {
        return reject_unless_noreply(ErrorReply::UnknownCommand, line_len, noreply);
    }
    done(Request::SlabsAutomove { noreply }, line_len)
}

/// `delete <key> [0] [noreply]`: memcached still accepts a hold time of 0
/// from old clients and rejects any other. It notes a `noreply` before it
/// judges the arguments, so `delete <key> 10 noreply` fails silently.
fn parse_delete(mut tokens: Tokens<'_>, argc: usize, line_len: usize) -> Parse<Request<'_>> {
    let key = tokens.next().unwrap_or_default();
    let extra: Vec<&[u8]> = tokens.collect();
    let noreply = argc > 1 && is_noreply(extra.last().copied());
    let valid = match argc {
        1 => true,
        2 => extra[0] == b"0" || noreply,
        _ => extra[0] == b"0" && noreply,
    };
    if !valid {
        return reject_unless_noreply(ErrorReply::DeleteUsage, line_len, noreply);
    }
    if !valid_key(key) {
        return reject_unless_noreply(ErrorReply::BadCommandLine, line_len, noreply);
    }
    done(Request::Delete { key, noreply }, line_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_item_size: 1024 * 1024,
    };

    fn parse_ok(input: &[u8]) -> (Request<'_>, usize) {
        match parse(input, &LIMITS) {
            Parse::Done { request, consumed } => (request, consumed),
            other => panic!("expected a request from {input:?}, got {other:?}"),
        }
    }

    fn rejected(input: &[u8]) -> (ErrorReply, usize, Recovery) {
        match parse(input, &LIMITS) {
            Parse::Reject {
                error,
                consumed,
                recovery,
                ..
            } => (error, consumed, recovery),
            other => panic!("expected a rejection of {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn lru_commands_are_judged_as_memcached_judges_them() {
        let lru = |line: &[u8]| match parse_ok(line).0 {
            Request::Lru { command, .. } => command,
            other => panic!("{other:?}"),
        };
        assert_eq!(lru(b"lru tune 10 25 0.1 2.0\r\n"), Lru::Tune);
        assert_eq!(lru(b"lru tune 50 31 1 1\r\n"), Lru::TuneOverEighty);
        // memcached adds the two as 32-bit numbers: a sum that wraps passes.
        assert_eq!(lru(b"lru tune 4294967295 1 1 1\r\n"), Lru::Tune);
        assert_eq!(lru(b"lru tune 10 25 1 -2\r\n"), Lru::TuneFactorNotPositive);
        assert_eq!(lru(b"lru tune 10 25 1\r\n"), Lru::Invalid);
        assert_eq!(
            lru(b"lru mode segmented\r\n"),
            Lru::Mode { segmented: true }
        );
        assert_eq!(
            lru(b"lru mode flat noreply\r\n"),
            Lru::Mode { segmented: false }
        );
        assert_eq!(lru(b"lru temp_ttl -1\r\n"), Lru::TempTtl);
        assert_eq!(lru(b"lru temp_ttl x\r\n"), Lru::Invalid);
        assert_eq!(lru(b"lru flat\r\n"), Lru::Invalid);
    }

    #[test]
    fn get_with_many_keys() {
        let (request, consumed) = parse_ok(b"get a bb  ccc\r\nrest");
        assert_eq!(consumed, 15);
        let Request::Get { mode, keys } = request else {
            panic!("not a get")
        };
        assert_eq!(mode, GetMode::Get);
        assert_eq!(keys.iter().collect::<Vec<_>>(), [&b"a"[..], b"bb", b"ccc"]);
        // memcached's old `bget` is a get.
        let (request, _) = parse_ok(b"bget a\r\n");
        assert!(
            matches!(
                request,
                Request::Get {
                    mode: GetMode::Get,
                    ..
                }
            ),
            "{request:?}"
        );
    }

    #[test]
    fn set_waits_for_its_data_block() {
        assert_eq!(parse(b"set k 0 0 5\r\nhel", &LIMITS), Parse::Incomplete);
        assert_eq!(parse(b"set k 0 0 5\r\nhello\r", &LIMITS), Parse::Incomplete);
        let (request, consumed) = parse_ok(b"set k 5 10 5 noreply\r\nhello\r\n");
        assert_eq!(consumed, 29);
        assert_eq!(
            request,
            Request::Store(StoreRequest {
                verb: StoreVerb::Set,
                key: b"k",
                flags: 5,
                exptime: 10,
                cas_unique: 0,
                noreply: true,
                data: b"hello",
            })
        );
    }

    #[test]
    fn bare_newlines_end_lines_too() {
        let (request, consumed) = parse_ok(b"set a 0 0 1\nx\r\n");
        assert_eq!(consumed, 15);
        assert!(matches!(request, Request::Store(s) if s.data == b"x"));
    }

    #[test]
    fn data_block_without_crlf_is_a_bad_chunk() {
        assert_eq!(
            rejected(b"set a 0 0 3\r\nabcd\r\n"),
            (ErrorReply::BadDataChunk, 18, Recovery::Continue)
        );
    }

    #[test]
    fn too_large_discards_the_data_and_a_set_removes_the_old_item() {
        let (request, consumed) = parse_ok(b"set a 0 0 2000000\r\n");
        assert_eq!(consumed, 19);
        assert_eq!(request.bytes_to_discard(), 2_000_002);
        assert_eq!(
            request,
            Request::TooLarge(TooLarge {
                key: b"a"[..].into(),
                removes_old_item: true,
                data_len: 2_000_000,
                noreply: false,
            })
        );
        let (request, _) = parse_ok(b"add a 0 0 2000000 noreply\r\n");
        assert!(matches!(
            request,
            Request::TooLarge(TooLarge {
                removes_old_item: false,
                noreply: true,
                ..
            })
        ));
    }

    #[test]
    fn malformed_storage_lines() {
        assert_eq!(rejected(b"set a 0 0 -1\r\n").0, ErrorReply::BadCommandLine);
        assert_eq!(rejected(b"set a 0 0 abc\r\n").0, ErrorReply::BadCommandLine);
        assert_eq!(rejected(b"set a abc 0 3\r\n").0, ErrorReply::BadCommandLine);
        assert_eq!(rejected(b"set a -1 0 1\r\n").0, ErrorReply::BadCommandLine);
        assert_eq!(
            rejected(b"set a 0 0 99999999999999999999\r\n").0,
            ErrorReply::BadCommandLine
        );
        assert_eq!(rejected(b"cas a 0 0 1\r\n").0, ErrorReply::UnknownCommand);
        assert_eq!(
            rejected(b"set a 0 0 1 noreply extra\r\n").0,
            ErrorReply::UnknownCommand
        );
        let long_key = [b'k'; 251];
        let line = [&b"set "[..], &long_key, b" 0 0 1\r\n"].concat();
        assert_eq!(rejected(&line).0, ErrorReply::BadCommandLine);
    }

    #[test]
    fn unknown_and_empty_lines() {
        assert_eq!(rejected(b"GET a\r\n").0, ErrorReply::UnknownCommand);
        assert_eq!(rejected(b"\r\n").0, ErrorReply::UnknownCommand);
        assert_eq!(rejected(b"get\r\n").0, ErrorReply::UnknownCommand);
        assert_eq!(
            rejected(b"\x00\x01garbage\r\n").0,
            ErrorReply::UnknownCommand
        );
        assert!(matches!(parse_ok(b"   get a\r\n").0, Request::Get { .. }));
    }

    #[test]
    fn long_lines_close_unless_multiget() {
        let junk = vec![b'x'; 3000];
        assert_eq!(rejected(&junk).2, Recovery::Close);
        let mut multiget = b"get ".to_vec();
        multiget.extend(std::iter::repeat_n(b"k ".iter().copied(), 2000).flatten());
        assert_eq!(parse(&multiget, &LIMITS), Parse::Incomplete);
    }

    fn rejected_quietly(input: &[u8]) -> (ErrorReply, bool) {
        match parse(input, &LIMITS) {
            Parse::Reject { error, noreply, .. } => (error, noreply),
            other => panic!("expected a rejection of {input:?}, got {other:?}"),
        }
    }

    #[test]
    fn errors_after_a_noreply_line_are_silent() {
        assert_eq!(
            rejected_quietly(b"set a 0 0 3 noreply\r\nabcd\r\n"),
            (ErrorReply::BadDataChunk, true)
        );
        // memcached notes `noreply` before it checks the arguments.
        let silent: &[(&[u8], ErrorReply)] = &[
            (b"set a 0 0 abc noreply\r\n", ErrorReply::BadCommandLine),
            (b"set a x 0 1 noreply\r\n", ErrorReply::BadCommandLine),
            (b"delete a 10 noreply\r\n", ErrorReply::DeleteUsage),
            (b"incr a x noreply\r\n", ErrorReply::InvalidDelta),
            (b"touch a x noreply\r\n", ErrorReply::InvalidExptime),
            (b"flush_all x noreply\r\n", ErrorReply::InvalidExptime),
            (b"verbosity x noreply\r\n", ErrorReply::BadCommandLine),
            (b"verbosity noreply\r\n", ErrorReply::BadCommandLine),
        ];
        for &(line, error) in silent {
            assert_eq!(rejected_quietly(line), (error, true), "{line:?}");
        }
        // A wrong number of words is answered before `noreply` is looked at.
        assert_eq!(
            rejected_quietly(b"set a 0 0 1 2 noreply\r\n"),
            (ErrorReply::UnknownCommand, false)
        );
        assert_eq!(
            rejected_quietly(b"delete a 10\r\n"),
            (ErrorReply::DeleteUsage, false)
        );
    }

    #[test]
    fn numbers_with_trailing_garbage_or_out_of_range_are_bad_lines() {
        let bad: &[&[u8]] = &[
            b"set a 0 0 1x\r\n",
            b"set a 0 1x 1\r\n",
            b"set a 1x 0 1\r\n",
            b"set a 0 0 2147483647\r\n",
            b"cas a 0 0 1 1x\r\n",
            b"cas a 0 0 1 18446744073709551616\r\n",
            b"verbosity invalid\r\n",
            b"verbosity 1x\r\n",
            b"slabs automove invalid\r\n",
            b"slabs automove 1x\r\n",
        ];
        for &line in bad {
            assert_eq!(rejected(line).0, ErrorReply::BadCommandLine, "{line:?}");
        }
        assert_eq!(rejected(b"incr a 1x\r\n").0, ErrorReply::InvalidDelta);
        assert_eq!(
            rejected(b"incr a 18446744073709551616\r\n").0,
            ErrorReply::InvalidDelta
        );
        assert_eq!(rejected(b"touch a 1x\r\n").0, ErrorReply::InvalidExptime);
        // memcached keeps the low 32 bits of a data length.
        let (request, _) = parse_ok(b"set a 0 0 4294967296\r\n\r\n");
        assert!(matches!(request, Request::Store(s) if s.data.is_empty()));
    }

    #[test]
    fn slabs_automove_levels() {
        for line in [
            &b"slabs automove 0\r\n"[..],
            b"slabs automove 2\r\n",
            b"slabs automove ratio 0.8\r\n",
        ] {
            assert!(matches!(parse_ok(line).0, Request::SlabsAutomove { .. }));
        }
        assert_eq!(
            rejected(b"slabs automove 3\r\n").0,
            ErrorReply::UnknownCommand
        );
        assert_eq!(
            rejected(b"slabs automove ratio\r\n").0,
            ErrorReply::UnknownCommand
        );
        assert_eq!(rejected(b"slabs\r\n").0, ErrorReply::UnknownCommand);
    }

    #[test]
    fn http_request_lines_close_the_connection() {
        for line in [
            &b"GET / HTTP/1.0\r\n"[..],
            b"PUT /asdf/asd/fasdfasdf/sadf HTTP/1.1\r\n",
            b"DELETE HTTP/1.1\r\n",
        ] {
            assert_eq!(rejected(line).2, Recovery::Close, "{line:?}");
        }
        // A memcached verb is served as one, whatever its last word.
        assert!(matches!(
            parse_ok(b"get / HTTP/1.0\r\n").0,
            Request::Get { .. }
        ));
        assert_eq!(
            rejected(b"GET /\r\n"),
            (ErrorReply::UnknownCommand, 7, Recovery::Continue)
        );
    }

    #[test]
    fn shutdown_modes() {
        let mode = |line| match parse_ok(line).0 {
            Request::Shutdown { mode } => mode,
            other => panic!("not a shutdown: {other:?}"),
        };
        assert_eq!(mode(b"shutdown\r\n"), ShutdownMode::Immediate);
        assert_eq!(mode(b"shutdown graceful\r\n"), ShutdownMode::Graceful);
        assert_eq!(mode(b"shutdown foo\r\n"), ShutdownMode::Unknown);
        assert_eq!(mode(b"shutdown graceful now\r\n"), ShutdownMode::Unknown);
    }

    #[test]
    fn delete_accepts_zero_hold_time_only() {
        assert!(matches!(
            parse_ok(b"delete a 0 noreply\r\n").0,
            Request::Delete { noreply: true, .. }
        ));
        assert!(matches!(
            parse_ok(b"delete a 0\r\n").0,
            Request::Delete { noreply: false, .. }
        ));
        assert_eq!(rejected(b"delete a 5\r\n").0, ErrorReply::DeleteUsage);
    }

    #[test]
    fn arithmetic_and_touch_errors() {
        assert_eq!(rejected(b"incr n abc\r\n").0, ErrorReply::InvalidDelta);
        assert_eq!(rejected(b"incr n -1\r\n").0, ErrorReply::InvalidDelta);
        assert_eq!(rejected(b"touch a abc\r\n").0, ErrorReply::InvalidExptime);
        assert_eq!(rejected(b"gat abc a\r\n").0, ErrorReply::InvalidExptime);
        assert!(matches!(parse_ok(b"gat 10\r\n").0, Request::Get { keys, .. } if keys.is_empty()));
        assert_eq!(rejected(b"flush_all abc\r\n").0, ErrorReply::InvalidExptime);
    }

    #[test]
    fn refresh_certs_takes_noreply() {
        assert_eq!(
            parse_ok(b"refresh_certs\r\n").0,
            Request::RefreshCerts { noreply: false }
        );
        assert_eq!(
            parse_ok(b"refresh_certs noreply\r\n").0,
            Request::RefreshCerts { noreply: true }
        );
    }

    #[test]
    fn replication_commands_name_a_position_or_a_master() {
        use crate::replication::ReplicaHello;
        assert_eq!(
            parse_ok(b"replicate 7 120 1700000000000000 6\r\n").0,
            Request::Replicate(ReplicaHello {
                replica: 7,
                after: Some((120, 1_700_000_000_000_000)),
                format: 6
            })
        );
        assert_eq!(
            parse_ok(b"replicate 7 none 6\r\n").0,
            Request::Replicate(ReplicaHello {
                replica: 7,
                after: None,
                format: 6
            })
        );
        assert_eq!(
            parse_ok(b"replicaof 10.0.0.1 11211\r\n").0,
            Request::ReplicaOf {
                master: Some((b"10.0.0.1", 11211)),
                force: false
            }
        );
        assert_eq!(
            parse_ok(b"replicaof NO ONE\r\n").0,
            Request::ReplicaOf {
                master: None,
                force: false
            }
        );
        assert_eq!(
            parse_ok(b"replicaof no one force\r\n").0,
            Request::ReplicaOf {
                master: None,
                force: true
            }
        );
        assert_eq!(parse_ok(b"replicas\r\n").0, Request::Replicas);
        for bad in [
            &b"replicate\r\n"[..],
            b"replicate x none 6\r\n",
            b"replicate 7 none\r\n",
            b"replicate 7 12 6\r\n",
            b"replicate 7 a b 6\r\n",
            b"replicate 7 12 13\r\n",
            b"replicate 7 none x\r\n",
            b"replicate 7 none 99999999999\r\n",
            b"replicate 99999999999 none 6\r\n",
            b"replicaof host\r\n",
            b"replicaof host 0\r\n",
            b"replicaof host 70000\r\n",
            b"replicaof host 1 force\r\n",
        ] {
            assert_eq!(rejected(bad).0, ErrorReply::BadCommandLine, "{bad:?}");
        }
    }

    #[test]
    fn backup_names_its_directory_and_maybe_the_one_it_continues() {
        assert_eq!(
            parse_ok(b"backup /b/full\r\n").0,
            Request::Backup {
                to: b"/b/full",
                since: None
            }
        );
        assert_eq!(
            parse_ok(b"backup /b/inc since /b/full\r\n").0,
            Request::Backup {
                to: b"/b/inc",
                since: Some(b"/b/full")
            }
        );
        for bad in [
            &b"backup\r\n"[..],
            b"backup /a /b\r\n",
            b"backup /a after /b\r\n",
        ] {
            assert_eq!(rejected(bad).0, ErrorReply::BadCommandLine, "{bad:?}");
        }
    }

    #[test]
    fn admin_commands() {
        assert_eq!(parse_ok(b"version\r\n").0, Request::Version);
        assert_eq!(rejected(b"verbosity\r\n").0, ErrorReply::UnknownCommand);
        assert_eq!(
            parse_ok(b"verbosity 1 noreply\r\n").0,
            Request::Verbosity { noreply: true }
        );
        assert_eq!(
            parse_ok(b"flush_all noreply\r\n").0,
            Request::FlushAll {
                delay: 0,
                noreply: true
            }
        );
        assert_eq!(
            rejected(b"cache_memlimit abc\r\n").0,
            ErrorReply::UnknownCommand
        );
    }
}
