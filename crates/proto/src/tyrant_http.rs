//! Tokyo Tyrant's HTTP interface on its port: `GET`, `HEAD`, `PUT`,
//! `POST` and `DELETE` of `/<url-encoded key>`, the value as the body,
//! `X-TT-PDMODE: 1` (keep) or `2` (concatenate) on a `PUT`. HTTP/1.1 keeps
//! the connection unless asked to close; HTTP/1.0 closes it unless asked
//! to keep it. The request head is parsed by `httparse`.

/// An HTTP request starts with one of these (memcached's commands are
/// lower case, so an upper-case method tells HTTP apart on the port).
const METHODS: [&[u8]; 6] = [
    b"GET ",
    b"HEAD ",
    b"PUT ",
    b"POST ",
    b"DELETE ",
    b"OPTIONS ",
];

/// The most header lines a request may have.
const MAX_HEADERS: usize = 64;
/// The longest request head (request line and headers) waited for.
pub const MAX_HEAD: usize = 64 * 1024;

/// Whether `buf` starts an HTTP request (or may, once more bytes come).
pub fn starts_request(buf: &[u8]) -> bool {
    METHODS.iter().any(|method| {
        let n = method.len().min(buf.len());
        buf[..n] == method[..n]
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Put,
    Post,
    Delete,
    Options,
}

/// How a `PUT` treats an existing record (`X-TT-PDMODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    Overwrite,
    Keep,
    Cat,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    pub key: Vec<u8>,
    pub mode: PutMode,
    pub body: Vec<u8>,
    pub keep_alive: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Parse {
    Done {
        request: Request,
        consumed: usize,
    },
    /// The buffer ends first; once the head is whole, it must hold `needed`
    /// bytes (head and body) before a parse can get further (0: the head
    /// is not whole yet).
    Incomplete {
        needed: usize,
    },
    /// Answer this status and close the connection.
    Bad(u16),
}

pub fn parse(buf: &[u8], max_body: usize) -> Parse {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let head_len = match head.parse(buf) {
        // However the bytes arrived: a head that came whole is no longer
        // allowed than one that came in parts.
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD => return Parse::Bad(431),
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Parse::Bad(431),
        Ok(httparse::Status::Partial) => return Parse::Incomplete { needed: 0 },
        Err(_) => return Parse::Bad(400),
    };
    let method = match head.method {
        Some("GET") => Method::Get,
        Some("HEAD") => Method::Head,
        Some("PUT") => Method::Put,
        Some("POST") => Method::Post,
        Some("DELETE") => Method::Delete,
        Some("OPTIONS") => Method::Options,
        _ => return Parse::Bad(501),
    };
    let header = |name: &str| {
        head.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    // Digits only, and one length however often it is sent (RFC 9112
    // 6.3): two that differ would let a proxy that reads the other see
    // another request in the body.
    let mut lengths = (head.headers.iter())
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| h.value.trim_ascii());
    let length = lengths.next();
    if length.is_some_and(|n| n.is_empty() || !n.iter().all(u8::is_ascii_digit))
        || lengths.any(|other| Some(other) != length)
    {
        return Parse::Bad(400);
    }
    let body_len = match length.map(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok()) {
        None => 0,
        Some(Some(n)) if n <= max_body => n,
        Some(Some(_)) | Some(None) => return Parse::Bad(413),
    };
    if header("transfer-encoding").is_some() {
        // ttserver reads Content-Length only.
        return Parse::Bad(411);
    }
    let Some(body) = buf.get(head_len..head_len + body_len) else {
        return Parse::Incomplete {
            needed: head_len + body_len,
        };
    };
    let connection = header("connection");
    let keep_alive = match head.version {
        Some(0) => connection.as_deref() == Some("keep-alive"),
        _ => connection.as_deref() != Some("close"),
    };
    let mode = match header("x-tt-pdmode").as_deref() {
        Some("1") => PutMode::Keep,
        Some("2") => PutMode::Cat,
        _ => PutMode::Overwrite,
    };
    let mut path = head.path.unwrap_or("/");
    // An absolute URI's path, as ttserver takes it (one without a path
    // stays whole).
    if path
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
    {
        if let Some(slash) = path[7..].find('/') {
            path = &path[7 + slash..];
        }
    }
    let key = percent_decode(path.strip_prefix('/').unwrap_or(path).as_bytes());
    Parse::Done {
        request: Request {
            method,
            key,
            mode,
            body: body.to_vec(),
            keep_alive,
        },
        consumed: head_len + body_len,
    }
}

/// `%XX` to the byte, `+` to a space (as ttserver's `tcurldecode`).
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[at] {
            b'%' if at + 2 < bytes.len() => match (hex(bytes[at + 1]), hex(bytes[at + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    at += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            other => out.push(other),
        }
        at += 1;
    }
    out
}

/// The methods kura serves, for `OPTIONS` (ttserver lists `POST` too, for
/// its Lua extensions, which kura does not run).
pub const ALLOWED: &str = "OPTIONS, GET, HEAD, PUT, DELETE";

/// The reply to `OPTIONS`: the methods in `Allow`, as ttserver's.
pub fn reply_options(out: &mut Vec<u8>, keep_alive: bool) {
    let allow = format!("Allow: {ALLOWED}\r\n");
    write_reply(out, 200, b"", false, keep_alive, &allow);
}

/// A reply: status line, the headers ttserver sends, the body (none for
/// `HEAD`, whose `Content-Length` still tells the value's size).
pub fn reply(out: &mut Vec<u8>, status: u16, body: &[u8], send_body: bool, keep_alive: bool) {
    write_reply(out, status, body, send_body, keep_alive, "");
}

/// A reply whose head holds `headers` (whole lines) besides its own.
fn write_reply(
    out: &mut Vec<u8>,
    status: u16,
    body: &[u8],
    send_body: bool,
    keep_alive: bool,
    headers: &str,
) {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        404 => "Not Found",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Not Implemented",
    };
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: {}\r\n{headers}\r\n",
            body.len(),
            if keep_alive { "keep-alive" } else { "close" }
        )
        .as_bytes(),
    );
    if send_body {
        out.extend_from_slice(body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_told_apart_from_memcacheds_commands() {
        assert!(starts_request(b"GET /k HTTP/1.1\r\n"));
        assert!(starts_request(b"DEL"));
        assert!(!starts_request(b"get k\r\n"));
        assert!(!starts_request(b"\xc8\x10"));
    }

    #[test]
    fn a_put_carries_its_key_mode_and_body() {
        let raw = b"PUT /a%20b+c HTTP/1.1\r\nX-TT-PDMODE: 2\r\nContent-Length: 3\r\n\r\nxyzGET";
        let Parse::Done { request, consumed } = parse(raw, 100) else {
            panic!("a request");
        };
        assert_eq!(consumed, raw.len() - 3);
        assert_eq!(request.key, b"a b c");
        assert_eq!(request.mode, PutMode::Cat);
        assert_eq!(request.body, b"xyz");
        assert!(request.keep_alive);
        let needed = raw.len() - 3;
        assert_eq!(
            parse(&raw[..raw.len() - 5], 100),
            Parse::Incomplete { needed }
        );
        assert_eq!(parse(raw, 2), Parse::Bad(413));
        let Parse::Done { request, .. } = parse(b"GET /k HTTP/1.0\r\n\r\n", 10) else {
            panic!("a request");
        };
        assert!(!request.keep_alive);
        assert_eq!(
            parse(b"GET /k HTTP/1.1\r\nContent-Length: x\r\n\r\n", 10),
            Parse::Bad(400)
        );
        assert_eq!(percent_decode(b"%4"), b"%4");
    }

    #[test]
    fn one_content_length_of_digits_only() {
        let with = |headers: &str| {
            let raw = format!("PUT /k HTTP/1.1\r\n{headers}\r\nabcdef");
            match parse(raw.as_bytes(), 10) {
                Parse::Done { request, .. } => Ok(request.body),
                Parse::Bad(status) => Err(status),
                Parse::Incomplete { .. } => Err(0),
            }
        };
        assert_eq!(with("Content-Length: 3\r\n"), Ok(b"abc".to_vec()));
        assert_eq!(
            with("Content-Length: 3\r\ncontent-length: 3\r\n"),
            Ok(b"abc".to_vec())
        );
        assert_eq!(with("Content-Length: 0\r\nContent-Length: 3\r\n"), Err(400));
        assert_eq!(with("Content-Length: +3\r\n"), Err(400));
        assert_eq!(with("Content-Length: \r\n"), Err(400));
        assert_eq!(
            with("Content-Length: 99999999999999999999999\r\n"),
            Err(413)
        );
    }

    #[test]
    fn a_head_is_waited_for_up_to_its_cap() {
        let mut head = b"GET /".to_vec();
        head.resize(MAX_HEAD, b'k');
        assert_eq!(parse(&head, 1024), Parse::Incomplete { needed: 0 });
        head.push(b'k');
        assert_eq!(parse(&head, 1024), Parse::Bad(431));
        let mut long_header = b"GET /k HTTP/1.1\r\nX-Long: ".to_vec();
        long_header.resize(MAX_HEAD + 1, b'v');
        assert_eq!(parse(&long_header, 1024), Parse::Bad(431));
        // Whole in one read, too.
        long_header.extend_from_slice(b"\r\n\r\n");
        assert_eq!(parse(&long_header, 1024), Parse::Bad(431));
    }

    #[test]
    fn an_absolute_uri_names_the_key_by_its_path() {
        let key = |raw: &[u8]| match parse(raw, 10) {
            Parse::Done { request, .. } => request.key,
            other => panic!("{other:?}"),
        };
        assert_eq!(key(b"GET http://host:1978/k%21 HTTP/1.1\r\n\r\n"), b"k!");
        assert_eq!(key(b"GET HTTP://host/a/b HTTP/1.1\r\n\r\n"), b"a/b");
        // No path: ttserver keeps the URI whole.
        assert_eq!(key(b"GET http://host HTTP/1.1\r\n\r\n"), b"http://host");
        assert_eq!(key(b"GET /http://x/y HTTP/1.1\r\n\r\n"), b"http://x/y");
    }

    #[test]
    fn options_lists_the_methods_served() {
        let mut out = Vec::new();
        reply_options(&mut out, false);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 0\r\nConnection: close\r\nAllow: OPTIONS, GET, HEAD, PUT, DELETE\r\n\r\n"
        );
    }

    #[test]
    fn replies_carry_their_length_even_without_a_body() {
        let mut out = Vec::new();
        reply(&mut out, 200, b"value", false, true);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\n"
        );
    }
}
