//! HandlerSocket's protocol (DeNA's plugin for MySQL, 1.1): one request per
//! line (LF, a CR before it tolerated), tokens separated by one TAB, bytes
//! below 0x10 escaped as 0x01 and the byte plus 0x40, NULL as the one-byte
//! token 0x00. Requests:
//!
//! ```text
//!  P <id> <db> <table> <index> <columns> [<fcolumns>]               open an index
//!  A <type> <key>                                                  authenticate
//!  <id> <op> <n> <v1>…<vn> [<limit> [<offset> [IN] [FILTER…] [MOD]]]  find, modify, insert
//!    IN     = @ <icol> <m> <iv1>…<ivm>
//!    FILTER = F|W <fop> <fcol> <fval>
//!    MOD    = U|D|+|- (with ? to return the rows as they were) <m1>…
//! ```
//!
//! A reply is `<code>\t<ncols>[\t<value>…]\n`. The parser reads a line as
//! the plugin does (numbers skip non-digits, missing tokens are empty,
//! a malformed escape ends its value); what needs the connection's state
//! (open indexes, authentication) is the server's to check.

/// A token that is one NUL byte is NULL.
const NULL: &[u8] = b"\0";
const ESCAPE: u8 = 0x01;
const ESCAPE_SHIFT: u8 = 0x40;
/// Bytes from here up go out as they are.
const PLAIN_FROM: u8 = 0x10;

/// What a line asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Open {
        id: u32,
        db: Vec<u8>,
        table: Vec<u8>,
        index: Vec<u8>,
        columns: Vec<u8>,
        filter_columns: Vec<u8>,
    },
    Auth {
        kind: Vec<u8>,
        key: Vec<u8>,
    },
    Exec(Exec),
    /// An empty line, or one that is none of the above: `2 1 cmd`.
    Unknown,
}

/// A find, find-and-modify or insert on an open index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exec {
    pub id: u32,
    pub op: Vec<u8>,
    /// How many key values the line announced (`<vlen>`).
    pub count: u32,
    /// The key values (an insert's column values) the line holds, at most
    /// `count`; `None` is NULL. Announced values past the end of the line
    /// are empty strings.
    pub values: Vec<Option<Vec<u8>>>,
    pub limit: u32,
    pub offset: u32,
    pub within: Option<Within>,
    pub filters: Vec<Filter>,
    pub modify: Option<Modify>,
    /// A fault the line itself shows (`invalueslen`, `filtertype`), which
    /// the server reports in the plugin's order.
    pub fault: Option<&'static str>,
}

/// IN: the key part `column` (0-based) takes each of `values` in turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Within {
    pub column: u32,
    pub values: Vec<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// `W`: stop at the first row that fails; `F`: skip it.
    pub stops: bool,
    pub op: Vec<u8>,
    /// Into the open index's filter columns.
    pub column: u32,
    pub value: Option<Vec<u8>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modify {
    /// The whole `<mop>` token: its first byte is `U`, `D`, `+` or `-`
    /// (else `modop`), a second byte `?` returns the rows.
    pub op: Vec<u8>,
    /// Every token after the op; the server takes one per opened column.
    pub values: Vec<Option<Vec<u8>>>,
}

impl Modify {
    pub fn returns_rows(&self) -> bool {
        self.op.get(1) == Some(&b'?')
    }
}

/// The next request in `buf` and the bytes it used, or `None` until a whole
/// line is there.
pub fn parse(buf: &[u8]) -> Option<(Request, usize)> {
    let newline = buf.iter().position(|&b| b == b'\n')?;
    let mut line = &buf[..newline];
    if let [rest @ .., b'\r'] = line {
        if !rest.is_empty() {
            line = rest;
        }
    }
    Some((parse_line(line), newline + 1))
}

/// Reads tokens one TAB apart; past the end every token is empty.
struct Tokens<'a> {
    rest: Option<&'a [u8]>,
}

impl<'a> Tokens<'a> {
    fn next(&mut self) -> &'a [u8] {
        let Some(rest) = self.rest else {
            return b"";
        };
        match rest.iter().position(|&b| b == b'\t') {
            Some(tab) => {
                self.rest = Some(&rest[tab + 1..]);
                &rest[..tab]
            }
            None => {
                self.rest = None;
                rest
            }
        }
    }

    fn done(&self) -> bool {
        self.rest.is_none()
    }

    /// The first byte of the next token, without taking it.
    fn peek(&self) -> Option<u8> {
        self.rest.and_then(|rest| rest.first().copied())
    }

    fn number(&mut self) -> u32 {
        number(self.next())
    }

    fn value(&mut self) -> Option<Vec<u8>> {
        let token = self.next();
        (token != NULL).then(|| unescape(token))
    }
}

/// The plugin's `read_ui32`: every digit counts, anything else is skipped,
/// and the number wraps.
pub fn number(token: &[u8]) -> u32 {
    token
        .iter()
        .filter(|b| b.is_ascii_digit())
        .fold(0u32, |n, b| {
            n.wrapping_mul(10).wrapping_add(u32::from(b - b'0'))
        })
}

fn parse_line(line: &[u8]) -> Request {
    let mut tokens = Tokens { rest: Some(line) };
    let command = tokens.next();
    match command {
        b"P" => Request::Open {
            id: tokens.number(),
            db: tokens.next().to_vec(),
            table: tokens.next().to_vec(),
            index: tokens.next().to_vec(),
            columns: tokens.next().to_vec(),
            filter_columns: tokens.next().to_vec(),
        },
        b"A" => Request::Auth {
            kind: tokens.next().to_vec(),
            key: tokens.next().to_vec(),
        },
        [b'0'..=b'9', ..] => Request::Exec(parse_exec(number(command), &mut tokens)),
        _ => Request::Unknown,
    }
}

fn parse_exec(id: u32, tokens: &mut Tokens<'_>) -> Exec {
    let mut exec = Exec {
        id,
        op: tokens.next().to_vec(),
        ..Exec::default()
    };
    exec.count = tokens.number();
    // Only what the line holds: a huge count claims no memory.
    for _ in 0..exec.count {
        if tokens.done() {
            break;
        }
        exec.values.push(tokens.value());
    }
    exec.limit = tokens.number();
    exec.offset = tokens.number();
    if tokens.done() {
        return exec;
    }
    if tokens.peek() == Some(b'@') {
        tokens.next();
        let column = tokens.number();
        let count = tokens.number();
        if count == 0 {
            exec.fault.get_or_insert("invalueslen");
        }
        let mut values = Vec::new();
        for _ in 0..count {
            if tokens.done() {
                break;
            }
            // No NULL in IN: a NUL token is the byte 0.
            values.push(unescape(tokens.next()));
        }
        exec.within = Some(Within { column, values });
    }
    while matches!(tokens.peek(), Some(b'F' | b'W')) {
        let kind = tokens.next();
        let filter = Filter {
            stops: kind[0] == b'W',
            op: tokens.next().to_vec(),
            column: tokens.number(),
            value: tokens.value(),
        };
        if kind.len() != 1 {
            exec.fault.get_or_insert("filtertype");
        }
        exec.filters.push(filter);
    }
    // An empty op (a trailing tab) modifies nothing, as the plugin's
    // `mod_op_str.size() != 0`.
    let op = tokens.next();
    if !op.is_empty() {
        let mut values = Vec::new();
        while !tokens.done() {
            values.push(tokens.value());
        }
        exec.modify = Some(Modify {
            op: op.to_vec(),
            values,
        });
    }
    exec
}

/// Undoes the escaping; a malformed escape (0x01 before a byte below 0x40,
/// or last) ends the value there, as the plugin's does.
pub fn unescape(token: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(token.len());
    let mut bytes = token.iter();
    while let Some(&byte) = bytes.next() {
        if byte != ESCAPE {
            out.push(byte);
            continue;
        }
        match bytes.next() {
            Some(&next) if next >= ESCAPE_SHIFT => out.push(next - ESCAPE_SHIFT),
            _ => break,
        }
    }
    out
}

/// Escapes a value for a reply.
pub fn escape(out: &mut Vec<u8>, value: &[u8]) {
    for &byte in value {
        if byte >= PLAIN_FROM {
            out.push(byte);
        } else {
            out.push(ESCAPE);
            out.push(byte + ESCAPE_SHIFT);
        }
    }
}

/// The bytes `escape` writes for `value`.
pub fn escaped_len(value: &[u8]) -> usize {
    value.len() + value.iter().filter(|&&byte| byte < PLAIN_FROM).count()
}

/// Replies, as the plugin writes them.
pub mod reply {
    use super::escape;

    /// `<code>\t1[\t<message>]\n`
    pub fn short(out: &mut Vec<u8>, code: u8, message: &str) {
        out.extend_from_slice(format!("{code}\t1").as_bytes());
        if !message.is_empty() {
            out.push(b'\t');
            out.extend_from_slice(message.as_bytes());
        }
        out.push(b'\n');
    }

    /// `0\t1\t<n>\n`: rows modified, or an insert's id.
    pub fn number(out: &mut Vec<u8>, n: u64) {
        out.extend_from_slice(format!("0\t1\t{n}\n").as_bytes());
    }

    /// `0\t<columns>` then every value of every row (NULL as 0x00).
    pub fn rows<'a>(
        out: &mut Vec<u8>,
        columns: usize,
        values: impl IntoIterator<Item = Option<&'a [u8]>>,
    ) {
        out.extend_from_slice(format!("0\t{columns}").as_bytes());
        for value in values {
            out.push(b'\t');
            match value {
                Some(value) => escape(out, value),
                None => out.push(0),
            }
        }
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &[u8]) -> Request {
        let (request, used) = parse(line).expect("a whole line");
        assert_eq!(used, line.len());
        request
    }

    #[test]
    fn lines_wait_for_their_newline_and_tolerate_a_return() {
        assert_eq!(parse(b"P\t1\tdb"), None);
        assert_eq!(
            one(b"P\t1\ttest\tuser\tPRIMARY\tid,name\tage\r\n"),
            Request::Open {
                id: 1,
                db: b"test".to_vec(),
                table: b"user".to_vec(),
                index: b"PRIMARY".to_vec(),
                columns: b"id,name".to_vec(),
                filter_columns: b"age".to_vec(),
            }
        );
        assert_eq!(one(b"\n"), Request::Unknown);
        assert_eq!(one(b"P1\n"), Request::Unknown);
        assert_eq!(
            one(b"A\t1\tsecret\n"),
            Request::Auth {
                kind: b"1".to_vec(),
                key: b"secret".to_vec()
            }
        );
    }

    #[test]
    fn a_find_reads_values_limit_offset_in_filters_and_modify() {
        let Request::Exec(exec) = one(
            b"0\t>=\t2\tfoo\t\0\t10\t5\t@\t0\t2\tx\t\0\tF\t>\t1\t18\tW\t<\t0\t\0\tU?\tnew\t\0\n",
        ) else {
            panic!("an exec");
        };
        assert_eq!(exec.op, b">=");
        assert_eq!(exec.values, [Some(b"foo".to_vec()), None]);
        assert_eq!((exec.limit, exec.offset), (10, 5));
        assert_eq!(
            exec.within,
            Some(Within {
                column: 0,
                values: vec![b"x".to_vec(), vec![0]]
            })
        );
        assert_eq!(exec.filters.len(), 2);
        assert!(!exec.filters[0].stops && exec.filters[1].stops);
        assert_eq!(exec.filters[1].value, None);
        let modify = exec.modify.unwrap();
        assert!(modify.returns_rows());
        assert_eq!(modify.values, [Some(b"new".to_vec()), None]);
        assert_eq!(exec.fault, None);
    }

    #[test]
    fn the_plugins_leniencies_are_kept() {
        let Request::Exec(exec) = one(b"1x2\t=\t3\ta\n") else {
            panic!("an exec");
        };
        assert_eq!(exec.id, 12);
        // Values past the end of the line are counted (empty, not NULL).
        assert_eq!((exec.count, exec.values), (3, vec![Some(b"a".to_vec())]));
        assert_eq!((exec.limit, exec.offset), (0, 0));
        let Request::Exec(exec) = one(b"0\t=\t1\t1\t1\t0\t@\t0\t0\n") else {
            panic!("an exec");
        };
        assert_eq!(exec.fault, Some("invalueslen"));
        let Request::Exec(exec) = one(b"0\t=\t1\t1\t1\t0\tFx\t=\t0\t1\n") else {
            panic!("an exec");
        };
        assert_eq!(exec.fault, Some("filtertype"));
        assert_eq!(number(b"-5"), 5);
        // A trailing tab, or an empty op, is a find.
        for line in [&b"1\t>=\t1\ta\t10\t0\t\n"[..], b"1\t>=\t1\ta\t10\t0\t\t9\n"] {
            let Request::Exec(exec) = one(line) else {
                panic!("an exec");
            };
            assert_eq!((exec.limit, exec.modify), (10, None));
        }
    }

    #[test]
    fn escaping_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let mut escaped = Vec::new();
        escape(&mut escaped, &all);
        assert!(!escaped.contains(&b'\t') && !escaped.contains(&b'\n'));
        assert_eq!(unescape(&escaped), all);
        assert_eq!(unescape(b"ab\x010c"), b"ab");
        assert_eq!(unescape(b"a\x01\x49b"), b"a\tb");
    }

    #[test]
    fn replies_are_laid_out_as_the_plugin_writes_them() {
        let mut out = Vec::new();
        reply::short(&mut out, 0, "");
        reply::short(&mut out, 2, "stmtnum");
        reply::number(&mut out, 3);
        reply::rows(&mut out, 2, [Some(&b"a\tb"[..]), None]);
        assert_eq!(out, b"0\t1\n2\t1\tstmtnum\n0\t1\t3\n0\t2\ta\x01\x49b\t\0\n");
    }
}
