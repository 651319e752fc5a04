//! The parsers against arbitrary and near-valid bytes (proptest): they never
//! panic, never claim more bytes than they were given, and read a request
//! the same however its bytes are split across reads.

use kura_proto::text::{self, Limits};
use kura_proto::{binary, Parse};
use proptest::prelude::*;

const LIMITS: Limits = Limits {
    max_item_size: 1024,
};

/// Bytes that look like memcached's text and meta commands: a verb from the
/// protocol's vocabulary, tokens of digits, letters and flags, sometimes a
/// data block, with `\r\n` or `\n` endings — more of the parser's branches
/// are reached than with uniformly random bytes.
fn near_text() -> impl Strategy<Value = Vec<u8>> {
    let verb = prop::sample::select(vec![
        "get",
        "gets",
        "gat",
        "gats",
        "set",
        "add",
        "replace",
        "append",
        "prepend",
        "cas",
        "delete",
        "incr",
        "decr",
        "touch",
        "flush_all",
        "version",
        "verbosity",
        "stats",
        "mg",
        "ms",
        "md",
        "ma",
        "mn",
        "me",
        "quit",
        "shutdown",
        "lru_crawler",
        "watch",
        "cache_memlimit",
        "misbehave",
        "GET",
        "",
    ]);
    let token = prop_oneof![
        "[a-z]{1,8}",
        "[0-9]{1,12}",
        "-[0-9]{1,3}",
        "[A-Za-z][0-9]{0,5}",
        "noreply",
        "[ -~]{0,300}",
    ];
    (
        verb,
        prop::collection::vec(token, 0..8),
        prop::sample::select(vec!["\r\n", "\n", "", " \r\n"]),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(verb, tokens, end, tail)| {
            let mut line = verb.to_string();
            for token in tokens {
                line.push(' ');
                line.push_str(&token);
            }
            line.push_str(end);
            let mut bytes = line.into_bytes();
            bytes.extend_from_slice(&tail);
            bytes
        })
}

/// A binary request header with arbitrary lengths, then some body bytes.
fn near_binary() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<u8>(),
        0u16..300,
        0u8..40,
        0u32..2048,
        prop::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(|(opcode, key_len, extras_len, body_len, body)| {
            let mut bytes = vec![binary::REQUEST_MAGIC, opcode];
            bytes.extend_from_slice(&key_len.to_be_bytes());
            bytes.push(extras_len);
            bytes.extend_from_slice(&[0, 0, 0]);
            bytes.extend_from_slice(&body_len.to_be_bytes());
            bytes.extend_from_slice(&[0; 12]);
            bytes.extend_from_slice(&body);
            bytes
        })
}

/// Bytes claimed by a text parse, or None while it wants more.
fn text_claims(buf: &[u8]) -> Option<usize> {
    match text::parse(buf, &LIMITS) {
        Parse::Done { consumed, .. } => {
            assert!(consumed > 0, "an empty request");
            Some(consumed)
        }
        Parse::Reject { consumed, .. } => Some(consumed),
        Parse::Incomplete => None,
    }
}

fn binary_claims(buf: &[u8]) -> Option<usize> {
    match binary::parse(buf, 1024) {
        binary::Parse::Done { consumed, .. }
        | binary::Parse::Reject { consumed, .. }
        | binary::Parse::TooLarge { consumed, .. } => Some(consumed),
        binary::Parse::Incomplete => None,
        binary::Parse::BadMagic => {
            assert_ne!(buf[0], binary::REQUEST_MAGIC);
            Some(0)
        }
    }
}

/// A request read whole is read the same when its bytes came in two parts:
/// every shorter prefix asks for more rather than deciding otherwise.
fn split_reads_agree(buf: &[u8], claims: fn(&[u8]) -> Option<usize>) {
    let Some(whole) = claims(buf) else {
        return;
    };
    assert!(whole <= buf.len(), "claimed {whole} of {}", buf.len());
    for cut in 1..whole.min(buf.len()) {
        assert_eq!(
            claims(&buf[..cut]),
            None,
            "the first {cut} of {whole} bytes were decided on"
        );
    }
}

proptest! {
    #[test]
    fn text_parsing_arbitrary_bytes_claims_at_most_what_it_got(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Some(claimed) = text_claims(&buf) {
            prop_assert!(claimed <= buf.len());
        }
    }

    #[test]
    fn text_requests_read_the_same_however_they_are_split(buf in near_text()) {
        split_reads_agree(&buf, text_claims);
    }

    #[test]
    fn binary_parsing_arbitrary_bytes_claims_at_most_what_it_got(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Some(claimed) = binary_claims(&buf) {
            prop_assert!(claimed <= buf.len());
        }
    }

    #[test]
    fn binary_requests_read_the_same_however_they_are_split(buf in near_binary()) {
        split_reads_agree(&buf, binary_claims);
    }
}
