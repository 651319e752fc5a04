//! Secondary indexes as key sets: what a row's value puts into an index of
//! each of Tokyo Cabinet's four kinds, and which index keys can hold the
//! rows a condition matches. An index only narrows the rows a query looks
//! at: every condition is still checked on every row it yields, so a query
//! finds exactly what a scan finds, in the same order.

use std::ops::Bound;

use crate::condition::{Condition, Operator};
use crate::{number, text};

/// Tokyo Cabinet's index kinds (`TDBIT*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexKind {
    /// The value (STREQ, STRBW, STROREQ).
    Lexical = 0,
    /// The value as a number (NUMEQ … NUMOREQ).
    Decimal = 1,
    /// Each word (STRAND, STROR).
    Token = 2,
    /// Each four characters of the folded text (the full-text operators,
    /// and STRINC).
    QGram = 3,
}

/// What `setindex` asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexCommand {
    /// Build (or rebuild) an index; `keep`: fail if there is one.
    Build { kind: IndexKind, keep: bool },
    /// Optimize an index (kura's need nothing).
    Optimize,
    /// Drop an index.
    Void,
}

impl IndexCommand {
    /// Reads an index type as `tctdbstrtoindextype` does.
    pub fn parse(text: &str) -> Option<IndexCommand> {
        /// `TDBITKEEP`: a number's bit for `+`.
        const KEEP: i64 = 1 << 24;
        let (mut keep, rest) = match text.strip_prefix('+') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let kind = match rest.to_ascii_uppercase().as_str() {
            "LEX" | "LEXICAL" | "STR" => IndexKind::Lexical,
            "DEC" | "DECIMAL" | "NUM" => IndexKind::Decimal,
            "TOK" | "TOKEN" => IndexKind::Token,
            "QGR" | "QGRAM" | "FTS" => IndexKind::QGram,
            // With the keep flag these fail (`tctdbsetindeximpl`).
            "OPT" | "OPTIMIZE" => return (!keep).then_some(IndexCommand::Optimize),
            "VOID" | "NULL" => return (!keep).then_some(IndexCommand::Void),
            other => match other.parse::<i64>().ok()? {
                number if number & KEEP != 0 => {
                    keep = true;
                    match Self::parse(&(number & !KEEP).to_string())? {
                        IndexCommand::Build { kind, .. } => kind,
                        // Optimize or void, which fail with the flag.
                        _ => return None,
                    }
                }
                0 => IndexKind::Lexical,
                1 => IndexKind::Decimal,
                2 => IndexKind::Token,
                3 => IndexKind::QGram,
                9998 => return Some(IndexCommand::Optimize),
                9999 => return Some(IndexCommand::Void),
                _ => return None,
            },
        };
        Some(IndexCommand::Build { kind, keep })
    }
}

impl IndexKind {
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Lexical => "lexical",
            IndexKind::Decimal => "decimal",
            IndexKind::Token => "token",
            IndexKind::QGram => "qgram",
        }
    }

    pub fn from_code(code: u8) -> Option<IndexKind> {
        Some(match code {
            0 => IndexKind::Lexical,
            1 => IndexKind::Decimal,
            2 => IndexKind::Token,
            3 => IndexKind::QGram,
            _ => return None,
        })
    }
}

/// The longest value part of an index key: LMDB's keys are at most 511
/// bytes, and the engine puts the index's id in front. A longer value is
/// cut, so its key stands for every value sharing the cut part.
pub const MAX_INDEXED: usize = 480;

/// Characters per q-gram. Four rather than three: in a million rows of
/// text, a gram of three is in a tenth of them, so a word's gram lists
/// were long to walk; with four they are about a seventh as long, and a
/// word shorter than a gram is found by prefix (docs/BENCHMARKS.md).
const GRAM: usize = 4;

fn cut(bytes: &[u8]) -> Vec<u8> {
    bytes[..bytes.len().min(MAX_INDEXED)].to_vec()
}

/// A value's key in a lexical index: up to a NUL, cut.
pub fn lexical_key(value: &[u8]) -> Vec<u8> {
    cut(text::c_str(value))
}

/// A number as 8 bytes that sort as the numbers do (-0 as 0).
pub fn decimal_key(number: f64) -> [u8; 8] {
    let bits = (number + 0.0).to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    ordered.to_be_bytes()
}

/// The keys a row whose column holds `value` has in an index of `kind`
/// (none for a number that is NaN: no positive condition matches it).
pub fn index_keys(kind: IndexKind, value: &[u8]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = match kind {
        IndexKind::Lexical => vec![cut(text::c_str(value))],
        IndexKind::Decimal => {
            let number = number::parse(value);
            if number.is_nan() {
                return Vec::new();
            }
            vec![decimal_key(number).to_vec()]
        }
        IndexKind::Token => text::words(value).map(cut).collect(),
        IndexKind::QGram => {
            let mut keys = grams(&text::normalize(value));
            // Folding drops bytes that are not UTF-8 as Tokyo Cabinet does,
            // which may take ASCII after them along; the grams of the
            // text's UTF-8 alone hold every UTF-8 substring, for STRINC.
            let value = text::c_str(value);
            if std::str::from_utf8(value).is_err() {
                keys.extend(grams(&text::normalize(&text::utf8_only(value))));
            }
            keys
        }
    };
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Every position's gram of folded text; the last ones are shorter, so a
/// word shorter than a gram is found by prefix anywhere.
fn grams(folded: &[u8]) -> Vec<Vec<u8>> {
    let folded = std::str::from_utf8(folded).unwrap_or_default();
    let chars: Vec<char> = folded.chars().collect();
    (0..chars.len())
        .map(|at| {
            let gram: String = chars[at..(at + GRAM).min(chars.len())].iter().collect();
            gram.into_bytes()
        })
        .collect()
}

/// A set of index keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyRange {
    /// Keys starting with these bytes.
    Prefix(Vec<u8>),
    /// Keys between the bounds.
    Span(Bound<Vec<u8>>, Bound<Vec<u8>>),
}

impl KeyRange {
    fn exact(key: Vec<u8>) -> KeyRange {
        KeyRange::Span(Bound::Included(key.clone()), Bound::Included(key))
    }
}

/// Where in an index the rows a condition matches are: the rows under
/// every range (`every`), or under any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probes {
    pub ranges: Vec<KeyRange>,
    pub every: bool,
}

impl Probes {
    fn any(ranges: Vec<KeyRange>) -> Option<Probes> {
        Some(Probes {
            ranges,
            every: false,
        })
    }

    fn all(ranges: Vec<KeyRange>) -> Option<Probes> {
        Some(Probes {
            ranges,
            every: true,
        })
    }
}

/// The index keys that hold at least every row `condition` matches, when
/// an index of `kind` on its column can tell; `None` when it cannot (a
/// negated or no-index condition, another kind's operator, or a condition
/// that also matches rows the index cannot find).
pub fn probes(condition: &Condition, kind: IndexKind) -> Option<Probes> {
    if condition.negated || condition.no_index {
        return None;
    }
    let expression = &condition.expression[..];
    use Operator::*;
    match (kind, condition.operator) {
        (IndexKind::Lexical, StrEq) => {
            Probes::any(vec![KeyRange::exact(cut(text::c_str(expression)))])
        }
        (IndexKind::Lexical, StrBw) => {
            Probes::any(vec![KeyRange::Prefix(cut(text::c_str(expression)))])
        }
        (IndexKind::Lexical, StrOrEq) => Probes::any(
            text::words(expression)
                .map(|word| KeyRange::exact(cut(word)))
                .collect(),
        ),
        (IndexKind::Decimal, NumEq | NumGt | NumGe | NumLt | NumLe) => {
            let n = number::parse(expression);
            if n.is_nan() {
                return Probes::any(Vec::new());
            }
            let key = decimal_key(n).to_vec();
            let range = match condition.operator {
                NumEq => KeyRange::exact(key),
                NumGt => KeyRange::Span(Bound::Excluded(key), Bound::Unbounded),
                NumGe => KeyRange::Span(Bound::Included(key), Bound::Unbounded),
                NumLt => KeyRange::Span(Bound::Unbounded, Bound::Excluded(key)),
                _ => KeyRange::Span(Bound::Unbounded, Bound::Included(key)),
            };
            Probes::any(vec![range])
        }
        (IndexKind::Decimal, NumBt) => {
            let mut words = text::number_words(expression);
            let first = words.next().map_or(0.0, number::parse);
            let second = words.next().map_or(0.0, number::parse);
            if first.is_nan() || second.is_nan() {
                return Probes::any(Vec::new());
            }
            let (low, high) = if first > second {
                (second, first)
            } else {
                (first, second)
            };
            Probes::any(vec![KeyRange::Span(
                Bound::Included(decimal_key(low).to_vec()),
                Bound::Included(decimal_key(high).to_vec()),
            )])
        }
        (IndexKind::Decimal, NumOrEq) => Probes::any(
            text::number_words(expression)
                .map(number::parse)
                .filter(|n| !n.is_nan())
                .map(|n| KeyRange::exact(decimal_key(n).to_vec()))
                .collect(),
        ),
        (IndexKind::Token, StrAnd) => {
            let ranges: Vec<KeyRange> = text::words(expression)
                .map(|word| KeyRange::exact(cut(word)))
                .collect();
            // No word: every row with the column matches.
            (!ranges.is_empty()).then_some(Probes {
                ranges,
                every: true,
            })
        }
        (IndexKind::Token, StrOr) => Probes::any(
            text::words(expression)
                .map(|word| KeyRange::exact(cut(word)))
                .collect(),
        ),
        (IndexKind::QGram, FtsPh | FtsAnd | FtsOr | FtsEx) => full_text_probes(condition),
        (IndexKind::QGram, StrInc) => substring_probes(expression),
        _ => None,
    }
}

/// The grams a text holding `word` must have: all its grams for a word of
/// a gram's length or more, else a gram starting with it.
fn grams_of(word: &[u8]) -> Option<Vec<KeyRange>> {
    let word = std::str::from_utf8(word).ok()?;
    let chars: Vec<char> = word.chars().collect();
    if chars.is_empty() {
        return None;
    }
    if chars.len() < GRAM {
        return Some(vec![KeyRange::Prefix(word.as_bytes().to_vec())]);
    }
    Some(
        chars
            .windows(GRAM)
            .map(|gram| KeyRange::exact(gram.iter().collect::<String>().into_bytes()))
            .collect(),
    )
}

/// `STRINC`'s: a value that holds a UTF-8 substring holds, folded, the
/// folded substring (its UTF-8 alone does, see [`index_keys`]), so every
/// gram of it. A substring that is not UTF-8, or folds to nothing, cannot
/// narrow.
fn substring_probes(expression: &[u8]) -> Option<Probes> {
    std::str::from_utf8(text::c_str(expression)).ok()?;
    Probes::all(grams_of(&text::normalize(expression))?)
}

/// The start of a word as a gram prefix: what any text holding it has.
fn gram_start(word: &[u8]) -> Option<KeyRange> {
    let word = std::str::from_utf8(word).ok()?;
    let start: String = word.chars().take(GRAM).collect();
    (!start.is_empty()).then(|| KeyRange::Prefix(start.into_bytes()))
}

fn full_text_probes(condition: &Condition) -> Option<Probes> {
    let units: Vec<(&[Vec<u8>], bool)> = condition.full_text_units().collect();
    match units.first() {
        // No unit, or a negative first one: the condition matches nothing.
        None | Some((_, false)) => return Probes::any(Vec::new()),
        Some(_) => {}
    }
    match condition.operator {
        // One word (the folded phrase), or one unit per word: every word's
        // grams.
        Operator::FtsPh | Operator::FtsAnd => {
            let mut ranges = Vec::new();
            for (words, _) in &units {
                // A word that is not UTF-8, or empty, cannot narrow.
                ranges.extend(grams_of(words.first()?)?);
            }
            Probes::all(ranges)
        }
        // The first unit finds one of its words: any word's start.
        _ => {
            let (words, _) = units[0];
            Probes::any(
                words
                    .iter()
                    .map(|word| gram_start(word))
                    .collect::<Option<_>>()?,
            )
        }
    }
}

/// One condition's lookup in an index: the rows it can match are among
/// those the index holds under `probes`.
#[derive(Clone, Debug, PartialEq)]
pub struct Lookup {
    pub condition: usize,
    pub column: Vec<u8>,
    pub kind: IndexKind,
    pub probes: Probes,
}

impl Lookup {
    /// Tokyo Cabinet's hint line for it: the main index, or an auxiliary one.
    pub fn hint(&self, condition: &Condition, main: bool) -> String {
        use Operator::*;
        let column = String::from_utf8_lossy(&self.column);
        let how = match condition.operator {
            StrEq if !main => "one (STREQ)".to_string(),
            StrEq | StrBw | NumEq | NumBt => format!("asc ({})", condition.operator.name()),
            NumGt | NumGe => "asc (NUMGT/NUMGE)".to_string(),
            NumLt | NumLe => "desc (NUMLT/NUMLE)".to_string(),
            StrOrEq | NumOrEq => format!("skip ({})", condition.operator.name()),
            StrAnd | StrOr | StrInc => format!("inverted ({})", condition.operator.name()),
            _ => "inverted (FTS)".to_string(),
        };
        match main {
            true => format!("using an index: \"{column}\" {how}"),
            false => format!("using an auxiliary index: \"{column}\" {how}"),
        }
    }
}

/// The lookups a query can make: one for each of its conditions an index
/// of its column can narrow (Tokyo Cabinet uses the first two; the engine
/// intersects them all, which only narrows further what it reads).
pub fn plan(conditions: &[Condition], indexes: &[(Vec<u8>, IndexKind)]) -> Vec<Lookup> {
    conditions
        .iter()
        .enumerate()
        .filter_map(|(at, condition)| {
            indexes
                .iter()
                .filter(|(column, _)| *column == condition.column)
                .find_map(|(column, kind)| {
                    Some(Lookup {
                        condition: at,
                        column: column.clone(),
                        kind: *kind,
                        probes: probes(condition, *kind)?,
                    })
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(operator: &str, expression: &str) -> Condition {
        let (operator, flags) = Operator::parse(operator).unwrap();
        Condition::new(b"c", operator, flags, expression.as_bytes())
    }

    #[test]
    fn decimal_keys_sort_as_their_numbers() {
        let numbers = [
            f64::NEG_INFINITY,
            -1e9,
            -2.5,
            -0.0,
            0.0,
            1e-9,
            3.0,
            1e300,
            f64::INFINITY,
        ];
        for pair in numbers.windows(2) {
            assert!(decimal_key(pair[0]) <= decimal_key(pair[1]), "{pair:?}");
        }
        assert_eq!(decimal_key(-0.0), decimal_key(0.0));
        assert!(index_keys(IndexKind::Decimal, b"nan").is_empty());
        assert_eq!(
            index_keys(IndexKind::Decimal, b" +7kg"),
            [decimal_key(7.0).to_vec()]
        );
    }

    #[test]
    fn rows_put_words_grams_and_cut_values_in_their_indexes() {
        assert_eq!(index_keys(IndexKind::Lexical, b"ab\0cd"), [b"ab".to_vec()]);
        assert_eq!(
            index_keys(IndexKind::Lexical, &[b'x'; 600])[0].len(),
            MAX_INDEXED
        );
        assert_eq!(
            index_keys(IndexKind::Token, b"red,green red"),
            [b"green".to_vec(), b"red".to_vec()]
        );
        assert_eq!(
            index_keys(IndexKind::QGram, "Héllo".as_bytes()),
            [
                b"ello".to_vec(),
                b"hell".to_vec(),
                b"llo".to_vec(),
                b"lo".to_vec(),
                b"o".to_vec()
            ]
        );
    }

    #[test]
    fn a_value_that_is_not_utf8_also_has_the_grams_of_its_utf8() {
        // Folding drops the lead byte with the "a" it swallows; the UTF-8
        // alone keeps "abcd", so STRINC "abcd" finds the row.
        let keys = index_keys(IndexKind::QGram, b"x\xc3abcd");
        assert!(keys.contains(&b"xbcd".to_vec()), "{keys:?}");
        assert!(keys.contains(&b"abcd".to_vec()), "{keys:?}");
        assert_eq!(
            index_keys(IndexKind::QGram, b"abcd"),
            [
                b"abcd".to_vec(),
                b"bcd".to_vec(),
                b"cd".to_vec(),
                b"d".to_vec()
            ]
        );
    }

    /// Every value a STRINC matches (random bytes: ASCII, blanks, NUL,
    /// letters of two and four bytes, stray bytes) is found through its
    /// grams.
    #[test]
    fn strinc_probes_find_every_value_holding_the_substring() {
        use rand::{rngs::SmallRng, Rng, SeedableRng};
        let alphabet: [&[u8]; 11] = [
            b"a",
            b"B",
            b" ",
            b"\t",
            b"\0",
            "é".as_bytes(),
            "Ö".as_bytes(),
            "😀".as_bytes(),
            b"\xc3",
            b"\xa9",
            b"\xe3",
        ];
        let mut rng = SmallRng::seed_from_u64(7);
        let mut checked = 0;
        for _ in 0..20_000 {
            let value: Vec<u8> = (0..rng.random_range(1..12))
                .flat_map(|_| alphabet[rng.random_range(0..alphabet.len())].to_vec())
                .collect();
            let start = rng.random_range(0..value.len());
            let end = rng.random_range(start..=value.len());
            let substring = &value[start..end];
            let condition = Condition::new(b"c", Operator::StrInc, 0, substring);
            let Some(probes) = probes(&condition, IndexKind::QGram) else {
                continue;
            };
            if !condition.holds(&value) {
                continue;
            }
            let keys = index_keys(IndexKind::QGram, &value);
            for range in &probes.ranges {
                let held = keys.iter().any(|key| match range {
                    KeyRange::Prefix(prefix) => key.starts_with(prefix),
                    KeyRange::Span(from, to) => {
                        std::ops::RangeBounds::contains(&(from.as_ref(), to.as_ref()), &key)
                    }
                });
                assert!(
                    held,
                    "{value:?} holds {substring:?}, its grams miss {range:?}"
                );
            }
            checked += 1;
        }
        assert!(checked > 1_000, "only {checked} substrings could narrow");
    }

    #[test]
    fn conditions_find_their_index_keys_or_say_they_cannot() {
        let exact = |key: &[u8]| KeyRange::exact(key.to_vec());
        assert_eq!(
            probes(&condition("STREQ", "Bob"), IndexKind::Lexical),
            Probes::any(vec![exact(b"Bob")])
        );
        assert_eq!(
            probes(&condition("!STREQ", "Bob"), IndexKind::Lexical),
            None
        );
        assert_eq!(
            probes(&condition("+STREQ", "Bob"), IndexKind::Lexical),
            None
        );
        assert_eq!(probes(&condition("STRINC", "o"), IndexKind::Lexical), None);
        assert_eq!(
            probes(&condition("STRINC", " Ab "), IndexKind::QGram),
            Probes::all(vec![KeyRange::Prefix(b"ab".to_vec())])
        );
        let not_utf8 = Condition::new(b"c", Operator::StrInc, 0, b"abc\xff");
        assert_eq!(probes(&not_utf8, IndexKind::QGram), None);
        assert_eq!(probes(&condition("STRINC", "  "), IndexKind::QGram), None);
        assert_eq!(probes(&condition("STREQ", "Bob"), IndexKind::Decimal), None);
        assert_eq!(
            probes(&condition("NUMBT", "9 3"), IndexKind::Decimal),
            Probes::any(vec![KeyRange::Span(
                Bound::Included(decimal_key(3.0).to_vec()),
                Bound::Included(decimal_key(9.0).to_vec())
            )])
        );
        assert_eq!(probes(&condition("STRAND", ""), IndexKind::Token), None);
        assert_eq!(
            probes(&condition("STRAND", "a,b"), IndexKind::Token),
            Probes::all(vec![exact(b"a"), exact(b"b")])
        );
        assert_eq!(
            probes(&condition("FTSPH", "Hello"), IndexKind::QGram),
            Probes::all(vec![exact(b"hell"), exact(b"ello")])
        );
        assert_eq!(
            probes(&condition("FTSPH", "Hel"), IndexKind::QGram),
            Probes::all(vec![KeyRange::Prefix(b"hel".to_vec())])
        );
        assert_eq!(probes(&condition("FTSPH", ""), IndexKind::QGram), None);
        assert_eq!(
            probes(&condition("FTSOR", "ab cdefg"), IndexKind::QGram),
            Probes::any(vec![
                KeyRange::Prefix(b"ab".to_vec()),
                KeyRange::Prefix(b"cdef".to_vec())
            ])
        );
        assert_eq!(
            probes(&condition("FTSEX", "!! x"), IndexKind::QGram),
            Probes::any(Vec::new())
        );
    }

    #[test]
    fn index_types_read_as_tokyo_cabinet_reads_them() {
        assert_eq!(
            IndexCommand::parse("+lexical"),
            Some(IndexCommand::Build {
                kind: IndexKind::Lexical,
                keep: true
            })
        );
        assert_eq!(
            IndexCommand::parse("3"),
            Some(IndexCommand::Build {
                kind: IndexKind::QGram,
                keep: false
            })
        );
        assert_eq!(IndexCommand::parse("void"), Some(IndexCommand::Void));
        assert_eq!(IndexCommand::parse("bogus"), None);
        // A client's ITLEXICAL | ITKEEP, and ITDECIMAL | ITKEEP, as numbers.
        for (number, kind) in [
            ("16777216", IndexKind::Lexical),
            ("16777217", IndexKind::Decimal),
        ] {
            assert_eq!(
                IndexCommand::parse(number),
                Some(IndexCommand::Build { kind, keep: true })
            );
        }
        assert_eq!(IndexCommand::parse("16777220"), None);
        // The flag with optimize or void fails, as in Tokyo Cabinet.
        for keep_and_other in ["16787214", "16787215", "+void", "+OPT"] {
            assert_eq!(
                IndexCommand::parse(keep_and_other),
                None,
                "{keep_and_other}"
            );
        }
    }
}
