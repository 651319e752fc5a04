//! Authentication as memcached does it.
//!
//! - **Text protocol, `-Y authfile`**: the file holds `user:password` lines.
//!   Until a connection logs in, its only accepted request is a `set` whose
//!   data is `user password` (the key is ignored): `STORED` logs it in,
//!   `CLIENT_ERROR authentication failure` does not; any other request is
//!   answered `CLIENT_ERROR unauthenticated`.
//! - **Binary protocol, `-S`**: SASL PLAIN (`[authzid] NUL user NUL password`)
//!   against the users of the file named by `$MEMCACHED_SASL_PWDB` (memcached's
//!   own password-file option), or of `-Y`'s file. Until a connection
//!   authenticates, every command but the SASL ones and `version` gets
//!   status 0x20, "Auth failure.".
//!
//! Checking is a pure function of the bytes and the user list, so it is
//! tested without a socket.

use std::path::Path;

/// Who may log in.
#[derive(Debug, Clone, Default)]
pub struct Users {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The SASL mechanisms kura's own SASL offers, as `SASL_LIST_MECHS` answers.
pub const SASL_MECHANISMS: &[u8] = b"PLAIN";

/// Who checks SASL credentials (`-S`).
pub enum SaslBackend {
    /// kura's own PLAIN, users from `MEMCACHED_SASL_PWDB` or `-Y`'s file.
    Builtin(Users),
    /// The system's Cyrus SASL library, as memcached does it.
    Cyrus(std::sync::Arc<crate::cyrus::Library>),
}

impl Users {
    /// Reads `user:password` lines; blank lines are skipped.
    pub fn load(path: &Path) -> Result<Users, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("cannot read the auth file {}: {e}", path.display()))?;
        Users::parse(&text)
            .map_err(|line| format!("{}: line {line} is not user:password", path.display()))
    }

    /// Parses the file's text; the error is the first bad line's number.
    pub fn parse(text: &[u8]) -> Result<Users, usize> {
        let mut entries = Vec::new();
        for (number, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let colon = line
                .iter()
                .position(|&b| b == b':')
                .filter(|&at| at > 0)
                .ok_or(number + 1)?;
            entries.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
        }
        Ok(Users { entries })
    }

    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        // Every entry is compared in full, so the time taken does not
        // tell which user exists or how much of a password was right.
        self.entries.iter().fold(false, |found, (u, p)| {
            found | (constant_time_eq(u, user) & constant_time_eq(p, password))
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One step of a text-protocol login.
#[derive(Debug, PartialEq, Eq)]
pub enum TextLogin {
    /// More bytes are needed.
    Incomplete,
    /// `consumed` bytes were a login attempt or a refused request; `reply`
    /// goes back; `authenticated` says whether the connection is now in.
    Answered {
        consumed: usize,
        reply: &'static [u8],
        authenticated: bool,
    },
}

/// Reads what an unauthenticated text connection sent (memcached's
/// `process_ascii_auth`).
pub fn text_login(input: &[u8], users: &Users) -> TextLogin {
    let Some(newline) = input.iter().position(|&b| b == b'\n') else {
        return TextLogin::Incomplete;
    };
    let line = &input[..newline];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let tokens: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .collect();
    let size = tokens
        .get(4)
        .and_then(|t| std::str::from_utf8(t).ok())
        .and_then(|t| t.parse::<usize>().ok());
    let (true, Some(size)) = (tokens.first() == Some(&&b"set"[..]), size) else {
        return TextLogin::Answered {
            consumed: newline + 1,
            reply: b"CLIENT_ERROR unauthenticated\r\n",
            authenticated: false,
        };
    };
    let data_start = newline + 1;
    let Some(end) = data_start.checked_add(size).and_then(|e| e.checked_add(2)) else {
        return refused(newline + 1);
    };
    if input.len() < end {
        return TextLogin::Incomplete;
    }
    let answer = |reply, authenticated| TextLogin::Answered {
        consumed: end,
        reply,
        authenticated,
    };
    if &input[end - 2..end] != b"\r\n" {
        return answer(b"CLIENT_ERROR bad command line termination\r\n", false);
    }
    let mut credentials = input[data_start..end - 2]
        .split(|&b| b == b' ')
        .filter(|t| !t.is_empty());
    match (credentials.next(), credentials.next()) {
        (Some(user), Some(password)) if users.check(user, password) => answer(b"STORED\r\n", true),
        (Some(_), Some(_)) => answer(b"CLIENT_ERROR authentication failure\r\n", false),
        _ => answer(b"CLIENT_ERROR bad authentication token format\r\n", false),
    }
}

fn refused(consumed: usize) -> TextLogin {
    TextLogin::Answered {
        consumed,
        reply: b"CLIENT_ERROR unauthenticated\r\n",
        authenticated: false,
    }
}

/// Checks a SASL PLAIN message: `[authzid] NUL authcid NUL password`.
pub fn sasl_plain(message: &[u8], users: &Users) -> bool {
    let mut parts = message.split(|&b| b == 0);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_authzid), Some(user), Some(password), None) => users.check(user, password),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Users {
        Users::parse(b"foo:bar\nbaaaz:quux\n\n").unwrap()
    }

    #[test]
    fn the_file_is_user_colon_password_lines() {
        assert!(users().check(b"foo", b"bar"));
        assert!(users().check(b"baaaz", b"quux"));
        assert!(!users().check(b"foo", b"quux"));
        assert!(!users().check(b"fo", b"bar"));
        assert_eq!(Users::parse(b"ok:1\nnocolon\n").unwrap_err(), 2);
        assert_eq!(Users::parse(b":nouser\n").unwrap_err(), 1);
    }

    #[test]
    fn a_text_login_is_a_set_of_user_and_password() {
        let answered = |reply: &'static [u8], consumed, authenticated| TextLogin::Answered {
            consumed,
            reply,
            authenticated,
        };
        assert_eq!(
            text_login(b"set foo 0 0 7\r\nfoo bar\r\n", &users()),
            answered(b"STORED\r\n", 24, true)
        );
        assert_eq!(
            text_login(b"set foo 0 0 7\r\nfoo bab\r\n", &users()),
            answered(b"CLIENT_ERROR authentication failure\r\n", 24, false)
        );
        assert_eq!(
            text_login(b"get foo\r\nnext", &users()),
            answered(b"CLIENT_ERROR unauthenticated\r\n", 9, false)
        );
        assert_eq!(
            text_login(b"set foo 0 0 3\r\nfoo\r\n", &users()),
            answered(
                b"CLIENT_ERROR bad authentication token format\r\n",
                20,
                false
            )
        );
        assert_eq!(
            text_login(b"set foo 0 0 7\r\nfoo barXY", &users()),
            answered(b"CLIENT_ERROR bad command line termination\r\n", 24, false)
        );
        assert_eq!(
            text_login(b"set foo 0 0 7\r\nfoo", &users()),
            TextLogin::Incomplete
        );
        assert_eq!(text_login(b"set foo 0", &users()), TextLogin::Incomplete);
    }

    #[test]
    fn sasl_plain_checks_user_and_password() {
        assert!(sasl_plain(b"\0foo\0bar", &users()));
        assert!(sasl_plain(b"admin\0foo\0bar", &users()));
        assert!(!sasl_plain(b"\0foo\0wrong", &users()));
        assert!(!sasl_plain(b"foo\0bar", &users()));
        assert!(!sasl_plain(b"\0foo\0bar\0extra", &users()));
    }
}
