//! `STRRX`'s patterns: POSIX extended regular expressions as glibc's
//! `regcomp(REG_EXTENDED)` reads them for Tokyo Cabinet, rewritten in the
//! syntax of the `regex` crate, which runs them in linear time.
//!
//! Where the two differ: a backslash inside brackets is a literal, `\d`,
//! `\n`, `\x41`, `\A` or `\z` are the letters themselves, `[.a.]` and
//! `[=a=]` are `a`, `a{,2}` is `a{0,2}`, a `)` without its `(` is a
//! literal, and a repetition with nothing to repeat (`*a`, `(?i)`, `^*`) is
//! an error, as are unknown classes, unclosed brackets and bad intervals.
//! glibc's `\w \W \s \S \b \B \< \>` keep their meaning. A back-reference
//! (`\1`) has no counterpart in a linear-time engine: kura refuses the
//! pattern, and a refused pattern never matches (as one glibc refuses).

/// Levels of groups and repetitions past which a pattern is refused: the
/// `regex` crate's nest limit, which counts these and more, so nothing it
/// would take is refused. Each repetition of a repetition (`a**`) wraps
/// its atom in a group, copying it: the bound keeps the copies of any
/// byte to a hundred or so, where an unbounded run costs its length
/// squared (a million `*` took 45 s) before the crate refuses the result.
const MAX_NESTING: usize = 250;

/// The pattern in the `regex` crate's syntax (bytes mode, ASCII classes);
/// `None` where glibc would refuse it, for a back-reference, or past
/// [`MAX_NESTING`].
pub fn translate(pattern: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(pattern.len() * 2);
    // Where the last atom (what a repetition applies to) starts in `out`,
    // how deep it nests, and how many repetitions already follow it.
    let mut atom: Option<usize> = None;
    let mut atom_depth = 0usize;
    let mut repeated = 0usize;
    // Each group still open: where it starts in `out` (a wrap inserts only
    // after it: the atom it wraps is inside the innermost), and the deepest
    // nesting inside it so far.
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut at = 0;
    while at < pattern.len() {
        let byte = pattern[at];
        at += 1;
        let start = out.len();
        match byte {
            b'*' | b'+' | b'?' | b'{' => {
                // Nothing to repeat: at the start, after `(`, `|` or `^`.
                let atom_start = atom?;
                let quantifier = match byte {
                    b'{' => {
                        let (interval, len) = interval(&pattern[at..])?;
                        at += len;
                        interval
                    }
                    other => char::from(other).to_string(),
                };
                atom_depth += if repeated > 0 { 2 } else { 1 };
                if atom_depth > MAX_NESTING {
                    return None;
                }
                if let Some((_, inner)) = groups.last_mut() {
                    *inner = (*inner).max(atom_depth);
                }
                if repeated > 0 {
                    // glibc repeats a repetition; the crate wants a group.
                    out.insert_str(atom_start, "(?:");
                    out.push(')');
                }
                out.push_str(&quantifier);
                repeated += 1;
                continue;
            }
            b'(' => {
                groups.push((out.len(), 0));
                out.push('(');
                atom = None;
                repeated = 0;
                continue;
            }
            b'|' => {
                out.push('|');
                atom = None;
                repeated = 0;
                continue;
            }
            b'^' => {
                out.push('^');
                atom = None;
                repeated = 0;
                continue;
            }
            b')' if !groups.is_empty() => {
                out.push(')');
                // The group is the atom.
                let (start, inner) = groups.pop()?;
                atom = Some(start);
                atom_depth = inner + 1;
                if atom_depth > MAX_NESTING {
                    return None;
                }
                if let Some((_, outer)) = groups.last_mut() {
                    *outer = (*outer).max(atom_depth);
                }
                repeated = 0;
                continue;
            }
            b'$' => out.push('$'),
            b'.' => out.push('.'),
            b'[' => {
                let (class, len) = bracket(&pattern[at..])?;
                at += len;
                out.push_str(&class);
            }
            b'\\' => {
                let escaped = *pattern.get(at)?;
                at += 1;
                match escaped {
                    b'w' | b'W' | b's' | b'S' | b'b' | b'B' => {
                        out.push('\\');
                        out.push(char::from(escaped));
                    }
                    b'<' => out.push_str(r"\b{start}"),
                    b'>' => out.push_str(r"\b{end}"),
                    b'`' => out.push_str(r"\A"),
                    b'\'' => out.push_str(r"\z"),
                    b'1'..=b'9' => return None,
                    other => push_literal(&mut out, other),
                }
            }
            // `)` without its `(`, and every other byte: itself.
            other => push_literal(&mut out, other),
        }
        atom = Some(start);
        atom_depth = 0;
        repeated = 0;
    }
    groups.is_empty().then_some(out)
}

/// A byte as itself: letters, digits and space as they are, every other
/// byte as `\xNN` (the crate's escapes differ from POSIX's, a hex escape
/// means one byte in both places).
fn push_literal(out: &mut String, byte: u8) {
    if byte.is_ascii_alphanumeric() || byte == b' ' {
        out.push(char::from(byte));
    } else {
        out.push_str(&format!(r"\x{byte:02x}"));
    }
}

/// An interval after its `{`: `m`, `m,`, `m,n` or `,n` and the `}`; the
/// crate's form and the bytes it took.
fn interval(rest: &[u8]) -> Option<(String, usize)> {
    let close = rest.iter().position(|&b| b == b'}')?;
    let body = std::str::from_utf8(&rest[..close]).ok()?;
    let number = |text: &str| -> Option<u32> {
        (text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty())
            .then(|| text.parse().ok())
            .flatten()
    };
    let form = match body.split_once(',') {
        None => format!("{{{}}}", number(body)?),
        Some((min, "")) => format!("{{{},}}", number(min)?),
        Some(("", max)) => format!("{{0,{}}}", number(max)?),
        Some((min, max)) => {
            let (min, max) = (number(min)?, number(max)?);
            if min > max {
                return None;
            }
            format!("{{{min},{max}}}")
        }
    };
    Some((form, close + 1))
}

/// A bracket expression after its `[`: the crate's class and the bytes it
/// took. A `]` first (after an optional `^`) is a member; `[:name:]` is a
/// class, `[.c.]` and `[=c=]` the byte c; `-` between two members is a
/// range, first or last a member.
fn bracket(rest: &[u8]) -> Option<(String, usize)> {
    let mut class = String::from("[");
    let mut at = 0;
    if rest.first() == Some(&b'^') {
        class.push('^');
        at += 1;
    }
    let first = at;
    loop {
        let byte = *rest.get(at)?;
        if byte == b']' && at > first {
            class.push(']');
            return Some((class, at + 1));
        }
        let (found, len) = member(&rest[at..])?;
        at += len;
        match found {
            Member::Class(name) => class.push_str(&format!("[:{name}:]")),
            Member::Byte(low) => {
                // A range, unless the `-` is last.
                let is_range = rest.get(at) == Some(&b'-') && rest.get(at + 1) != Some(&b']');
                push_literal(&mut class, low);
                if is_range {
                    let (Member::Byte(high), len) = member(&rest[at + 1..])? else {
                        return None;
                    };
                    if high < low {
                        return None;
                    }
                    class.push('-');
                    push_literal(&mut class, high);
                    at += 1 + len;
                }
            }
        }
    }
}

enum Member {
    Byte(u8),
    Class(&'static str),
}

/// One member of a bracket expression, and its length.
fn member(rest: &[u8]) -> Option<(Member, usize)> {
    const CLASSES: [&str; 12] = [
        "alpha", "upper", "lower", "digit", "xdigit", "space", "print", "punct", "graph", "cntrl",
        "blank", "alnum",
    ];
    let byte = *rest.first()?;
    if byte == b'[' {
        if let Some(&kind @ (b':' | b'.' | b'=')) = rest.get(1) {
            let end = rest[2..].windows(2).position(|w| w == [kind, b']'])? + 2;
            let inside = &rest[2..end];
            let member = match kind {
                b':' => Member::Class(CLASSES.iter().find(|name| name.as_bytes() == inside)?),
                _ => match inside {
                    [single] => Member::Byte(*single),
                    _ => return None,
                },
            };
            return Some((member, end + 2));
        }
    }
    Some((Member::Byte(byte), 1))
}

#[cfg(test)]
mod tests {
    use super::translate;

    fn rx(pattern: &str) -> Option<String> {
        translate(pattern.as_bytes())
    }

    #[test]
    fn escapes_outside_brackets_are_glibcs() {
        assert_eq!(rx(r"\d").as_deref(), Some("d"));
        assert_eq!(rx(r"\n\A\z").as_deref(), Some("nAz"));
        assert_eq!(rx(r"\x41").as_deref(), Some("x41"));
        assert_eq!(rx(r"a\.b").as_deref(), Some(r"a\x2eb"));
        assert_eq!(rx(r"\w+\<\>").as_deref(), Some(r"\w+\b{start}\b{end}"));
        assert_eq!(rx(r"(a)\1"), None, "no back-references");
        assert_eq!(rx("a\\"), None, "a trailing backslash");
    }

    #[test]
    fn brackets_take_a_backslash_and_a_first_bracket_as_members() {
        assert_eq!(rx(r"[\d]").as_deref(), Some(r"[\x5cd]"));
        assert_eq!(rx(r"[a\]]").as_deref(), Some(r"[a\x5c]\x5d"));
        assert_eq!(rx("[]a]").as_deref(), Some(r"[\x5da]"));
        assert_eq!(rx("[^]a-c-]").as_deref(), Some(r"[^\x5da-c\x2d]"));
        assert_eq!(rx("[[:digit:]x]").as_deref(), Some("[[:digit:]x]"));
        assert_eq!(rx("[[.a.][=b=]]").as_deref(), Some("[ab]"));
        assert_eq!(rx("[&&~~]").as_deref(), Some(r"[\x26\x26\x7e\x7e]"));
        assert_eq!(rx("[[:nope:]]"), None);
        assert_eq!(rx("[z-a]"), None);
        assert_eq!(rx("[abc"), None);
    }

    #[test]
    fn repetitions_need_something_to_repeat_and_may_repeat_again() {
        assert_eq!(rx("a{,2}").as_deref(), Some("a{0,2}"));
        assert_eq!(rx("a{2,}b{3}").as_deref(), Some("a{2,}b{3}"));
        assert_eq!(rx("a{2,1}"), None);
        assert_eq!(rx("a{x}"), None);
        assert_eq!(rx("*a"), None);
        assert_eq!(rx("^*"), None);
        assert_eq!(rx("(?i)abc"), None);
        assert_eq!(rx("a|*b"), None);
        assert_eq!(rx("a**").as_deref(), Some("(?:a*)*"));
        assert_eq!(rx("(ab)+?").as_deref(), Some("(?:(ab)+)?"));
    }

    /// Groups and repetitions nest at most 250 deep, the crate's limit: a
    /// repetition is one level, a repetition of it two more (a group and a
    /// repetition), a group one more than what it holds.
    #[test]
    fn groups_and_repetitions_nest_at_most_250_deep() {
        let stars = |n| format!("a{}", "*".repeat(n));
        assert!(rx(&stars(125)).is_some_and(|out| out.starts_with("(?:(?:")));
        // A request of a million stars was refused by the crate only after
        // 45 s of copying.
        assert_eq!(rx(&stars(126)), None);
        assert_eq!(rx(&stars(1_000_000)), None);
        let nested = |depth| format!("{}a{}", "(".repeat(depth), ")".repeat(depth));
        assert_eq!(rx(&nested(250)), Some(nested(250)));
        assert_eq!(rx(&nested(251)), None);
        // Each group repeated twice: its copies would be quadratic.
        let wrapped = |depth| format!("{}a{}", "(".repeat(depth), ")**".repeat(depth));
        assert!(rx(&wrapped(62)).is_some());
        assert_eq!(rx(&wrapped(63)), None);
        assert_eq!(rx(&wrapped(300_000)), None);
        // What is refused, the crate refuses too.
        assert!(regex::bytes::Regex::new(&nested(251)).is_err());
    }

    #[test]
    fn nested_groups_are_atoms() {
        assert_eq!(rx("((a)b)*c").as_deref(), Some("((a)b)*c"));
        assert_eq!(rx("(a(b)*)*").as_deref(), Some("(a(b)*)*"));
        assert_eq!(rx("x(a)**").as_deref(), Some("x(?:(a)*)*"));
    }

    #[test]
    fn parentheses_group_and_an_unmatched_closing_one_is_a_literal() {
        assert_eq!(rx("(a|b)c").as_deref(), Some("(a|b)c"));
        assert_eq!(rx("a)").as_deref(), Some(r"a\x29"));
        assert_eq!(rx("(a"), None);
        assert_eq!(rx("é").as_deref(), Some(r"\xc3\xa9"));
    }
}
