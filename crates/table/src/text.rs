//! How Tokyo Cabinet cuts and folds text for its string-set and full-text
//! conditions.

/// The value as C sees it: up to its first NUL. Every string operator but
/// `STREQ` works on C strings.
pub fn c_str(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => &bytes[..end],
        None => bytes,
    }
}

/// The tokens of `STRAND`, `STROR` and `STROREQ`: runs of bytes other than
/// commas and control or space bytes (≤ 0x20).
pub fn words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    c_str(text)
        .split(|&b| b <= b' ' || b == b',')
        .filter(|word| !word.is_empty())
}

/// The tokens of `NUMBT` and `NUMOREQ`: only spaces and commas separate.
pub fn number_words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    c_str(text)
        .split(|&b| b == b' ' || b == b',')
        .filter(|word| !word.is_empty())
}

/// The tokens of `FTSAND` and `FTSOR`: split on tab, newline, return,
/// space and comma, and, as in Tokyo Cabinet, not normalized.
pub fn raw_words(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    c_str(text)
        .split(|&b| matches!(b, b'\t' | b'\n' | b'\r' | b' ' | b','))
        .filter(|word| !word.is_empty())
}

/// The tokens of an `FTSEX` expression (`tcstrtokenize`): words between
/// spaces, or a double-quoted string with backslash escapes.
pub fn expression_tokens(text: &[u8]) -> Vec<Vec<u8>> {
    let text = c_str(text);
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < text.len() {
        while at < text.len() && text[at] <= b' ' {
            at += 1;
        }
        if at < text.len() && text[at] == b'"' {
            at += 1;
            let mut token = Vec::new();
            while at < text.len() {
                match text[at] {
                    b'\\' => {
                        at += 1;
                        if let Some(&escaped) = text.get(at) {
                            token.push(escaped);
                        }
                    }
                    b'"' => {
                        at += 1;
                        break;
                    }
                    other => token.push(other),
                }
                at += 1;
            }
            tokens.push(token);
        } else {
            let end = text[at..]
                .iter()
                .position(|&b| b <= b' ')
                .map_or(text.len(), |n| at + n);
            if end > at {
                tokens.push(text[at..end].to_vec());
            }
            at = end + 1;
        }
    }
    tokens
}

/// Folds text for full-text search as Tokyo Cabinet does (`tcstrutfnorm`
/// with spaces, lower case, no accents and no width): blank characters
/// collapse to one space and the ends are trimmed, letters of Latin-1,
/// Latin Extended-A, Greek, Cyrillic and fullwidth ASCII are lowered, and
/// accented Latin letters lose their accent. Like Tokyo Cabinet it knows
/// UTF-8 of one to three bytes; other bytes are dropped.
pub fn normalize(text: &[u8]) -> Vec<u8> {
    let text = c_str(text);
    if text.is_ascii() {
        normalize_ascii(text)
    } else {
        normalize_chars(text)
    }
}

/// The text's valid UTF-8, with every byte that is not part of it left
/// out. Each valid character of the text is in it, and a substring that is
/// UTF-8 stays whole: a byte left out never starts a character, so one is
/// never cut.
pub fn utf8_only(text: &[u8]) -> Vec<u8> {
    text.utf8_chunks()
        .flat_map(|chunk| chunk.valid().as_bytes())
        .copied()
        .collect()
}

fn normalize_chars(text: &[u8]) -> Vec<u8> {
    let mut folded = String::new();
    let mut pending_space = false;
    for c in decode(text) {
        if is_blank(c) {
            pending_space = !folded.is_empty();
            continue;
        }
        if pending_space {
            folded.push(' ');
            pending_space = false;
        }
        folded.push(fold(c));
    }
    folded.into_bytes()
}

/// [`normalize`] of ASCII text, byte by byte: most text a search checks
/// is ASCII, and decoding it as characters cost more than the search.
fn normalize_ascii(text: &[u8]) -> Vec<u8> {
    let mut folded = Vec::with_capacity(text.len());
    let mut pending_space = false;
    for &byte in text {
        if byte <= b' ' || byte == 0x7f {
            pending_space = !folded.is_empty();
            continue;
        }
        if pending_space {
            folded.push(b' ');
            pending_space = false;
        }
        folded.push(byte.to_ascii_lowercase());
    }
    folded
}

fn is_blank(c: char) -> bool {
    c <= ' '
        || matches!(
            c,
            '\u{7f}' | '\u{a0}' | '\u{2002}' | '\u{2003}' | '\u{2009}' | '\u{3000}'
        )
}

/// One character lowered, stripped of its accent and of its width.
fn fold(c: char) -> char {
    let code = c as u32;
    let folded = match code {
        0x41..=0x5a => code + 0x20,
        // Latin-1 letters: lower, then the base letter (Æ and æ stay æ).
        0xc0..=0xff if code != 0xd7 && code != 0xf7 => {
            let lower = if code <= 0xde { code + 0x20 } else { code };
            latin1_base(lower).map_or(lower, u32::from)
        }
        0x100..=0x17f => latin_extended_a_base(code),
        0x391..=0x3a9 => code + 0x20,
        0x400..=0x40f => code + 0x50,
        0x410..=0x42f => code + 0x20,
        // Fullwidth ASCII becomes ASCII (and is lowered).
        0xff01..=0xff5e => {
            let ascii = code - 0xff01 + 0x21;
            if (0x41..=0x5a).contains(&ascii) {
                ascii + 0x20
            } else {
                ascii
            }
        }
        0x2010 | 0x2015 | 0x2212 => u32::from(b'-'),
        0x2019 => u32::from(b'\''),
        0x2033 => u32::from(b'"'),
        _ => code,
    };
    char::from_u32(folded).unwrap_or(c)
}

/// The base letter of a lower-case Latin-1 letter, if it has an accent.
fn latin1_base(lower: u32) -> Option<u8> {
    Some(match lower {
        0xe0..=0xe5 => b'a',
        0xe7 => b'c',
        0xe8..=0xeb => b'e',
        0xec..=0xef => b'i',
        0xf0 => b'd',
        0xf1 => b'n',
        0xf2..=0xf6 | 0xf8 => b'o',
        0xf9..=0xfc => b'u',
        0xfd..=0xff => b'y',
        0xdf => b's',
        _ => return None,
    })
}

/// Latin Extended-A folds to the base letter, except the ligatures Ĳ and Œ,
/// which are only lowered (measured against Tokyo Cabinet 1.4.48).
fn latin_extended_a_base(code: u32) -> u32 {
    let base = match code {
        0x100..=0x105 => b'a',
        0x106..=0x10d => b'c',
        0x10e..=0x111 => b'd',
        0x112..=0x11b => b'e',
        0x11c..=0x123 => b'g',
        0x124..=0x127 => b'h',
        0x128..=0x131 => b'i',
        0x132 | 0x133 => return 0x133,
        0x134 | 0x135 => b'j',
        0x136..=0x138 => b'k',
        0x139..=0x142 => b'l',
        0x143..=0x14b => b'n',
        0x14c..=0x151 => b'o',
        0x152 | 0x153 => return 0x153,
        0x154..=0x159 => b'r',
        0x15a..=0x161 | 0x17f => b's',
        0x162..=0x167 => b't',
        0x168..=0x173 => b'u',
        0x174 | 0x175 => b'w',
        0x176..=0x178 => b'y',
        0x179..=0x17e => b'z',
        _ => return code,
    };
    u32::from(base)
}

/// UTF-8 of one to three bytes, as `tcstrutftoucs` reads it.
fn decode(bytes: &[u8]) -> impl Iterator<Item = char> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        while at < bytes.len() {
            let first = bytes[at];
            let width = match first {
                0x00..=0x7f => 1,
                0xc0..=0xdf => 2,
                0xe0..=0xef => 3,
                _ => {
                    at += 1;
                    continue;
                }
            };
            let Some(sequence) = bytes.get(at..at + width) else {
                at = bytes.len();
                return None;
            };
            at += width;
            if let Some(c) = std::str::from_utf8(sequence)
                .ok()
                .and_then(|s| s.chars().next())
            {
                return Some(c);
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_only_drops_the_bytes_outside_characters_and_keeps_every_character() {
        assert_eq!(utf8_only("é a".as_bytes()), "é a".as_bytes());
        // A lead byte followed by ASCII, a stray continuation byte, a lead
        // cut short by the end: dropped, and nothing after them.
        assert_eq!(utf8_only(b"\xc3abc\xa9d\xe3\x81"), b"abcd");
        assert_eq!(utf8_only("\u{fe}é".as_bytes()), "\u{fe}é".as_bytes());
        assert_eq!(utf8_only(b"\xc3\xc3\xa9"), "é".as_bytes());
    }

    #[test]
    fn words_split_on_commas_and_blanks() {
        let split: Vec<_> = words(b" red,green  blue,,\tx").collect();
        assert_eq!(split, [&b"red"[..], b"green", b"blue", b"x"]);
        let split: Vec<_> = number_words(b"1,30 7\t8").collect();
        assert_eq!(split, [&b"1"[..], b"30", b"7\t8"]);
    }

    #[test]
    fn normalizing_lowers_strips_accents_and_collapses_blanks() {
        assert_eq!(
            normalize("  Héllo\t\u{3000} WÖRLD ".as_bytes()),
            b"hello world"
        );
        assert_eq!(normalize("ÆĲŒßŸ".as_bytes()), "æĳœsy".as_bytes());
        assert_eq!(normalize("ＡＢｃ１".as_bytes()), b"abc1");
        assert_eq!(normalize("ΣИ".as_bytes()), "σи".as_bytes());
        assert_eq!(normalize(b"  Hello\t\x7f WORLD \0 hidden"), b"hello world");
    }

    #[test]
    fn expression_tokens_keep_quoted_phrases_whole() {
        assert_eq!(
            expression_tokens(br#"ruby "on \"rails\"" && x"#),
            [
                b"ruby".to_vec(),
                br#"on "rails""#.to_vec(),
                b"&&".to_vec(),
                b"x".to_vec()
            ]
        );
    }

    #[test]
    fn the_ascii_path_folds_as_the_character_path_does() {
        // Every ASCII byte, blanks and controls included, in many mixes.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let len = (state >> 59) as usize;
            let text: Vec<u8> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    (state >> 57) as u8 & 0x7f
                })
                .collect();
            let text = c_str(&text);
            assert_eq!(normalize_ascii(text), normalize_chars(text), "{text:?}");
        }
    }
}
