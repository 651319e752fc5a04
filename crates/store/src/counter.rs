//! Counters for incr/decr: a value holding a decimal unsigned 64-bit number.

/// Reads a stored value as memcached's `strtoull` does for incr/decr: spaces
/// around the digits are allowed (memcached pads a shrinking number with
/// trailing spaces), anything else makes the value non-numeric.
pub fn parse(value: &[u8]) -> Option<u64> {
    let start = value.iter().position(|&b| b != b' ')?;
    let rest = &value[start..];
    let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    if rest[end..].iter().any(|&b| b != b' ') || end > 20 {
        return None;
    }
    rest[..end].iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// Appends the decimal digits of `value`.
pub fn push(out: &mut Vec<u8>, value: u64) {
    use std::io::Write;
    let _ = write!(out, "{value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_accept_memcached_padding() {
        assert_eq!(parse(b"12"), Some(12));
        assert_eq!(parse(b" 12"), Some(12));
        assert_eq!(parse(b"99 "), Some(99));
        assert_eq!(parse(b"18446744073709551615"), Some(u64::MAX));
    }

    #[test]
    fn anything_else_is_not_a_number() {
        assert_eq!(parse(b"1 2"), None);
        assert_eq!(parse(b"ab"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"   "), None);
        assert_eq!(parse(b"111111111111111111111"), None);
        assert_eq!(parse(b"18446744073709551616"), None);
    }
}
