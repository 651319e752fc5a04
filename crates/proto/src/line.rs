//! The text protocol's lines, shared by the classic commands (`text.rs`)
//! and the meta commands (`meta.rs`): a line and its tokens, keys, the data
//! block after a storage command, and the limits a parser enforces.

use crate::MAX_KEY_LEN;

/// Limits the parser enforces.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest data block a storage command may carry (`-I`).
    pub max_item_size: usize,
}

/// Finds the end of the first line: (line without its terminator, bytes up to
/// and including the `\n`).
pub fn split_line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let newline = memchr(b'\n', buf)?;
    let mut line = &buf[..newline];
    if let Some((b'\r', rest)) = line.split_last() {
        line = rest;
    }
    Some((line, newline + 1))
}

pub(crate) fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// Space-separated tokens of one line.
#[derive(Clone)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    pub fn new(line: &'a [u8]) -> Self {
        Tokens { rest: line }
    }

    /// The unparsed remainder of the line.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// How many tokens remain (without consuming them).
    pub fn remaining(&self) -> usize {
        self.clone().fold(0, |n, _| n + 1)
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&b| b != b' ')?;
        let rest = &self.rest[start..];
        let end = memchr(b' ', rest).unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

/// A key is at most 250 bytes. memcached accepts any byte but the separators
/// (space and newline), and so do we.
pub fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

/// The outcome of looking for a data block after a command line.
pub enum DataBlock<'a> {
    Incomplete,
    /// Not followed by `\r\n`: memcached drops `length + 2` bytes and answers
    /// `CLIENT_ERROR bad data chunk`.
    Bad(usize),
    Ok(&'a [u8], usize),
}

/// Locates a data block of `length` bytes plus `\r\n` after `line_len` bytes.
pub fn data_block(buf: &[u8], line_len: usize, length: usize) -> DataBlock<'_> {
    let end = line_len + length + 2;
    if buf.len() < end {
        return DataBlock::Incomplete;
    }
    if &buf[end - 2..end] != b"\r\n" {
        return DataBlock::Bad(end);
    }
    DataBlock::Ok(&buf[line_len..end - 2], end)
}

/// A storage command refused for its size. memcached answers `SERVER_ERROR
/// object too large for cache` and, for `set` (and every `ms`), removes the
/// key's current item, so a failed write never leaves stale data served.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLarge<'a> {
    /// The key as stored (base64-decoded for `ms ... b`).
    pub key: std::borrow::Cow<'a, [u8]>,
    /// Whether the key's current item is removed.
    pub removes_old_item: bool,
    /// Length of the data block, without its `\r\n`.
    pub data_len: u64,
    pub noreply: bool,
}
