//! One condition of a query: a column, an operator and an expression, with
//! Tokyo Cabinet's flags (negate, no index) and its exact matching rules.

use std::collections::HashSet;

use regex::bytes::{Regex, RegexBuilder};

use crate::columns::Columns;
#[cfg(test)]
use crate::columns::Record;
use crate::{number, text};

/// Tokyo Cabinet's 19 condition operators, numbered as its `TDBQC*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    StrEq = 0,
    StrInc = 1,
    StrBw = 2,
    StrEw = 3,
    StrAnd = 4,
    StrOr = 5,
    StrOrEq = 6,
    StrRx = 7,
    NumEq = 8,
    NumGt = 9,
    NumGe = 10,
    NumLt = 11,
    NumLe = 12,
    NumBt = 13,
    NumOrEq = 14,
    FtsPh = 15,
    FtsAnd = 16,
    FtsOr = 17,
    FtsEx = 18,
    /// A numeric code Tokyo Cabinet does not know: its condition is kept
    /// and never holds (negated, it always does).
    Unknown = 19,
}

/// `TDBQCNEGATE`: the condition holds where the operator does not.
pub const NEGATE: i64 = 1 << 24;
/// `TDBQCNOIDX`: the condition is checked by a scan, never an index.
pub const NO_INDEX: i64 = 1 << 25;

/// The most a `STRRX` expression may compile to; a longer one matches
/// nothing (as one that does not compile). Its search cache may take four
/// times as much.
pub const REGEX_BYTES: usize = 256 << 10;

impl Operator {
    pub const ALL: [Operator; 19] = [
        Operator::StrEq,
        Operator::StrInc,
        Operator::StrBw,
        Operator::StrEw,
        Operator::StrAnd,
        Operator::StrOr,
        Operator::StrOrEq,
        Operator::StrRx,
        Operator::NumEq,
        Operator::NumGt,
        Operator::NumGe,
        Operator::NumLt,
        Operator::NumLe,
        Operator::NumBt,
        Operator::NumOrEq,
        Operator::FtsPh,
        Operator::FtsAnd,
        Operator::FtsOr,
        Operator::FtsEx,
    ];

    pub fn from_code(code: i64) -> Option<Operator> {
        usize::try_from(code)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }

    /// The name Tokyo Cabinet's tools print and accept first.
    pub fn name(self) -> &'static str {
        match self {
            Operator::StrEq => "STREQ",
            Operator::StrInc => "STRINC",
            Operator::StrBw => "STRBW",
            Operator::StrEw => "STREW",
            Operator::StrAnd => "STRAND",
            Operator::StrOr => "STROR",
            Operator::StrOrEq => "STROREQ",
            Operator::StrRx => "STRRX",
            Operator::NumEq => "NUMEQ",
            Operator::NumGt => "NUMGT",
            Operator::NumGe => "NUMGE",
            Operator::NumLt => "NUMLT",
            Operator::NumLe => "NUMLE",
            Operator::NumBt => "NUMBT",
            Operator::NumOrEq => "NUMOREQ",
            Operator::FtsPh => "FTSPH",
            Operator::FtsAnd => "FTSAND",
            Operator::FtsOr => "FTSOR",
            Operator::FtsEx => "FTSEX",
            Operator::Unknown => "UNKNOWN",
        }
    }

    /// Reads an operator as `tctdbqrystrtocondop` does: `~` or `!` first
    /// negates, then `+` turns the index off, then a name (any case, with
    /// Tokyo Cabinet's aliases) or a numeric code (which may carry the
    /// flags itself). Returns the operator and its flags; `None` for an
    /// unknown name or a negative code, which Tokyo Cabinet then ignores
    /// with its condition. A code it does not know is [`Operator::Unknown`].
    pub fn parse(text: &str) -> Option<(Operator, i64)> {
        let mut rest = text;
        let mut flags = 0;
        if let Some(tail) = rest.strip_prefix(['~', '!']) {
            flags |= NEGATE;
            rest = tail;
        }
        if let Some(tail) = rest.strip_prefix('+') {
            flags |= NO_INDEX;
            rest = tail;
        }
        let upper = rest.to_ascii_uppercase();
        let operator = match upper.as_str() {
            "STREQ" | "STR" | "EQ" => Operator::StrEq,
            "STRINC" | "INC" => Operator::StrInc,
            "STRBW" | "BW" => Operator::StrBw,
            "STREW" | "EW" => Operator::StrEw,
            "STRAND" | "AND" => Operator::StrAnd,
            "STROR" | "OR" => Operator::StrOr,
            "STROREQ" | "OREQ" => Operator::StrOrEq,
            "STRRX" | "RX" => Operator::StrRx,
            "NUMEQ" | "NUM" | "=" | "==" => Operator::NumEq,
            "NUMGT" | ">" => Operator::NumGt,
            "NUMGE" | ">=" => Operator::NumGe,
            "NUMLT" | "<" => Operator::NumLt,
            "NUMLE" | "<=" => Operator::NumLe,
            "NUMBT" => Operator::NumBt,
            "NUMOREQ" => Operator::NumOrEq,
            "FTSPH" | "FTS" => Operator::FtsPh,
            "FTSAND" => Operator::FtsAnd,
            "FTSOR" => Operator::FtsOr,
            "FTSEX" => Operator::FtsEx,
            _ => {
                let code = parse_c_int(rest).filter(|&code| code >= 0)?;
                flags |= code & (NEGATE | NO_INDEX);
                Operator::from_code(code & !(NEGATE | NO_INDEX)).unwrap_or(Operator::Unknown)
            }
        };
        Some((operator, flags))
    }
}

/// A decimal integer as `tcstrisnum` accepts it (optional sign, digits).
fn parse_c_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A full-text expression compiled into units: each unit holds when one
/// of its words occurs in the folded text (or, for a negative unit, none
/// does); the expression holds when every unit does.
#[derive(Clone, Debug)]
struct FullTextUnit {
    words: Vec<Vec<u8>>,
    positive: bool,
}

/// Tokyo Cabinet keeps at most this many units of an expression.
const MAX_UNITS: usize = 32;

/// One condition of a query.
#[derive(Clone, Debug)]
pub struct Condition {
    pub column: Vec<u8>,
    pub operator: Operator,
    pub expression: Vec<u8>,
    pub negated: bool,
    pub no_index: bool,
    /// `STRRX`: the compiled expression; `None` when it does not compile
    /// (then it never matches, as in Tokyo Cabinet).
    regex: Option<Regex>,
    /// The full-text operators' units.
    units: Vec<FullTextUnit>,
}

impl Condition {
    pub fn new(column: &[u8], operator: Operator, flags: i64, expression: &[u8]) -> Self {
        let mut condition = Condition {
            column: column.to_vec(),
            operator,
            expression: expression.to_vec(),
            negated: flags & NEGATE != 0,
            no_index: flags & NO_INDEX != 0,
            regex: None,
            units: Vec::new(),
        };
        match operator {
            Operator::StrRx => condition.regex = compile_posix(text::c_str(expression)),
            Operator::FtsPh | Operator::FtsAnd | Operator::FtsOr | Operator::FtsEx => {
                condition.units = full_text_units(operator, expression)
            }
            _ => {}
        }
        condition
    }

    /// Whether a record passes: a missing column fails the condition, or
    /// passes it when negated (Tokyo Cabinet's rule).
    pub fn matches<R: Columns + ?Sized>(&self, record: &R) -> bool {
        match record.get(&self.column) {
            Some(value) => self.holds(value) != self.negated,
            None => self.negated,
        }
    }

    /// Whether the operator holds for a value (before negation).
    pub fn holds(&self, value: &[u8]) -> bool {
        let expression = &self.expression[..];
        let c_value = text::c_str(value);
        let c_expression = text::c_str(expression);
        match self.operator {
            Operator::StrEq => value == expression,
            Operator::StrInc => contains(c_value, c_expression),
            Operator::StrBw => c_value.starts_with(c_expression),
            Operator::StrEw => c_value.ends_with(c_expression),
            Operator::StrAnd => {
                let words = ValueWords::of(value, expression);
                text::words(expression).all(|word| words.has(word))
            }
            Operator::StrOr => {
                let words = ValueWords::of(value, expression);
                text::words(expression).any(|word| words.has(word))
            }
            Operator::StrOrEq => text::words(expression).any(|word| word == c_value),
            Operator::StrRx => self.regex.as_ref().is_some_and(|rx| rx.is_match(c_value)),
            Operator::NumEq => number::parse(value) == number::parse(expression),
            Operator::NumGt => number::parse(value) > number::parse(expression),
            Operator::NumGe => number::parse(value) >= number::parse(expression),
            Operator::NumLt => number::parse(value) < number::parse(expression),
            Operator::NumLe => number::parse(value) <= number::parse(expression),
            Operator::NumBt => {
                let (lower, upper) = between_bounds(expression);
                let n = number::parse(value);
                n >= lower && n <= upper
            }
            Operator::NumOrEq => {
                let n = number::parse(value);
                text::number_words(expression).any(|word| n == number::parse(word))
            }
            Operator::FtsPh | Operator::FtsAnd | Operator::FtsOr | Operator::FtsEx => {
                self.full_text_holds(value)
            }
            Operator::Unknown => false,
        }
    }

    /// The full-text operators' units: each its words and whether it is
    /// positive (the expression holds when each positive unit finds one of
    /// its words and each negative one finds none).
    pub fn full_text_units(&self) -> impl Iterator<Item = (&[Vec<u8>], bool)> {
        self.units
            .iter()
            .map(|unit| (&unit.words[..], unit.positive))
    }

    fn full_text_holds(&self, value: &[u8]) -> bool {
        // An expression must start with a positive unit.
        if !self.units.first().is_some_and(|unit| unit.positive) {
            return false;
        }
        let folded = text::normalize(value);
        self.units.iter().all(|unit| {
            let hit = unit.words.iter().any(|word| contains(&folded, word));
            hit == unit.positive
        })
    }
}

/// `NUMBT`'s two bounds: the first two words (space or comma apart), in
/// either order; a missing second bound is 0.
fn between_bounds(expression: &[u8]) -> (f64, f64) {
    let mut words = text::number_words(expression);
    let first = words.next().map_or(0.0, number::parse);
    let second = words.next().map_or(0.0, number::parse);
    if first > second {
        (second, first)
    } else {
        (first, second)
    }
}

/// A value's words, looked up by the words of an expression: in a set once
/// the expression has more than a few (a scan of them per word of the
/// expression would cost their product: minutes for a request of many
/// words against a large value).
enum ValueWords<'v> {
    Scan(&'v [u8]),
    Set(HashSet<&'v [u8]>),
}

impl<'v> ValueWords<'v> {
    fn of(value: &'v [u8], expression: &[u8]) -> Self {
        match text::words(expression).nth(4) {
            Some(_) => ValueWords::Set(text::words(value).collect()),
            None => ValueWords::Scan(value),
        }
    }

    fn has(&self, word: &[u8]) -> bool {
        match self {
            ValueWords::Scan(value) => text::words(value).any(|w| w == word),
            ValueWords::Set(words) => words.contains(word),
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// A POSIX extended regular expression matched on bytes in the C locale,
/// as `regcomp(REG_EXTENDED | REG_NOSUB)`; a leading `*` makes it ignore
/// case. Bytes outside ASCII are matched as themselves.
fn compile_posix(pattern: &[u8]) -> Option<Regex> {
    let (pattern, ignore_case) = match pattern.strip_prefix(b"*") {
        Some(rest) => (rest, true),
        None => (pattern, false),
    };
    let source = crate::posix_regex::translate(pattern)?;
    RegexBuilder::new(&source)
        .unicode(false)
        .dot_matches_new_line(true)
        .case_insensitive(ignore_case)
        .size_limit(REGEX_BYTES)
        .dfa_size_limit(4 * REGEX_BYTES)
        .build()
        .ok()
}

/// Compiles a full-text expression as `tctdbftsparseexpr` does.
fn full_text_units(operator: Operator, expression: &[u8]) -> Vec<FullTextUnit> {
    let positive = |words| FullTextUnit {
        words,
        positive: true,
    };
    match operator {
        Operator::FtsPh => vec![positive(vec![text::normalize(expression)])],
        // Tokyo Cabinet does not fold these words (so an upper-case word
        // never matches); kura keeps that.
        Operator::FtsAnd => text::raw_words(expression)
            .take(MAX_UNITS)
            .map(|word| positive(vec![word.to_vec()]))
            .collect(),
        Operator::FtsOr => {
            let words: Vec<_> = text::raw_words(expression).map(<[u8]>::to_vec).collect();
            vec![positive(words)]
        }
        _ => {
            // `a b` is `a && b`; `||` joins a word to the unit before;
            // `!!` makes the next unit negative.
            let mut units: Vec<FullTextUnit> = Vec::new();
            let mut joiner = Joiner::And;
            for token in text::expression_tokens(&text::normalize(expression)) {
                match &token[..] {
                    b"&&" => joiner = Joiner::And,
                    b"||" => joiner = Joiner::Or,
                    b"!!" => joiner = Joiner::Not,
                    _ => {
                        match joiner {
                            Joiner::Or => {
                                if units.is_empty() {
                                    units.push(FullTextUnit {
                                        words: Vec::new(),
                                        positive: false,
                                    });
                                }
                                if let Some(last) = units.last_mut() {
                                    last.words.push(token);
                                }
                            }
                            Joiner::And | Joiner::Not if units.len() < MAX_UNITS => {
                                units.push(FullTextUnit {
                                    words: vec![token],
                                    positive: joiner == Joiner::And,
                                })
                            }
                            Joiner::And | Joiner::Not => {}
                        }
                        joiner = Joiner::And;
                    }
                }
            }
            units
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Joiner {
    And,
    Or,
    Not,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pairs: &[(&str, &str)]) -> Record {
        let mut record = Record::new(&b"k3"[..]);
        for (name, value) in pairs {
            record.put(name.as_bytes(), value.as_bytes());
        }
        record
    }

    fn check(operator: &str, expression: &str, value: &str) -> bool {
        let (operator, flags) = Operator::parse(operator).unwrap();
        Condition::new(b"c", operator, flags, expression.as_bytes())
            .matches(&record(&[("c", value)]))
    }

    #[test]
    fn operator_names_flags_and_codes_read_as_tokyo_cabinet_reads_them() {
        assert_eq!(Operator::parse("streq"), Some((Operator::StrEq, 0)));
        assert_eq!(
            Operator::parse("!+STRINC"),
            Some((Operator::StrInc, NEGATE | NO_INDEX))
        );
        assert_eq!(Operator::parse("~>="), Some((Operator::NumGe, NEGATE)));
        assert_eq!(Operator::parse("+!STRINC"), None);
        assert_eq!(Operator::parse("13"), Some((Operator::NumBt, 0)));
        assert_eq!(
            Operator::parse(&(16777216 + 2).to_string()),
            Some((Operator::StrBw, NEGATE))
        );
        assert_eq!(Operator::parse("BOGUS"), None);
        assert_eq!(Operator::parse("-5"), None);
    }

    #[test]
    fn a_code_tokyo_cabinet_does_not_know_never_holds_and_negated_always_does() {
        assert_eq!(Operator::parse("19"), Some((Operator::Unknown, 0)));
        assert_eq!(
            Operator::parse(&(1 << 26).to_string()),
            Some((Operator::Unknown, 0))
        );
        assert!(!check("19", "x", "x"));
        assert!(!check("99", "", "anything"));
        assert!(check(&(16777216 + 19).to_string(), "x", "x"));
    }

    #[test]
    fn string_operators() {
        assert!(check("STREQ", "Bob", "Bob"));
        assert!(!check("STREQ", "bob", "Bob"));
        assert!(check("STRINC", "", "x"));
        assert!(check("STRAND", "green,red", "red,green blue"));
        assert!(!check("STRAND", "gre", "green"));
        assert!(check("STRAND", "", "x"));
        assert!(!check("STROR", "", "x"));
        assert!(!check("STROREQ", "Bob,Smith", "Bob Smith"));
        assert!(check("STROREQ", "x,Bob", "Bob"));
    }

    #[test]
    fn regular_expressions_are_posix_and_a_star_ignores_case() {
        assert!(!check("STRRX", "^b", "Bob"));
        assert!(check("STRRX", "*^b", "Bob"));
        assert!(!check("STRRX", "(", "("));
        assert!(check("~STRRX", "(", "("));
    }

    #[test]
    fn number_operators() {
        assert!(check("NUMEQ", "30", "30.0"));
        assert!(check("NUMBT", "31,5", "5"));
        assert!(check("NUMBT", "5", "0"));
        assert!(check("NUMOREQ", "1,30 7", "7"));
        assert!(!check("NUMGT", "nan", "1"));
    }

    #[test]
    fn full_text_operators() {
        assert!(check("FTSPH", "lo wo", "Hello World"));
        assert!(!check("FTSAND", "Ruby", "Ruby on Rails"));
        assert!(check("FTSEX", "RUBY", "Ruby on Rails"));
        assert!(check("FTSEX", "ruby !! perl", "ruby on rails"));
        assert!(!check("FTSEX", "ruby !! rails", "ruby on rails"));
        assert!(check("FTSEX", "perl || ruby rails", "ruby on rails"));
        assert!(!check("FTSEX", "!! perl", "ruby"));
        assert!(!check("FTSOR", "", "x"));
        assert!(check("FTSPH", "", "x"));
    }

    #[test]
    fn a_missing_column_fails_a_condition_and_passes_its_negation() {
        let (op, flags) = Operator::parse("!STREQ").unwrap();
        assert!(Condition::new(b"none", op, flags, b"x").matches(&record(&[])));
        let (op, flags) = Operator::parse("STREQ").unwrap();
        assert!(!Condition::new(b"none", op, flags, b"x").matches(&record(&[])));
        assert!(Condition::new(b"", op, flags, b"k3").matches(&record(&[])));
    }
}
