//! Counters for incr/decr: a value holding a decimal unsigned 64-bit number.

/// Reads a stored value as memcached's `safe_strtoull` reads the item's
/// data (the value and its `\r\n`) for incr/decr: leading white space and
/// a sign are skipped, the digits must not overflow, and what follows them
/// must be white space (memcached pads a shrinking number with spaces;
/// anything after that space is ignored). A negative number is refused.
pub fn parse(value: &[u8]) -> Option<u64> {
    let start = value.iter().position(|&b| !is_space(b))?;
    let (negative, unsigned) = match value[start] {
        b'-' => (true, &value[start + 1..]),
        b'+' => (false, &value[start + 1..]),
        _ => (false, &value[start..]),
    };
    let end = unsigned
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(unsigned.len());
    // The item's `\r\n` follows the value: the end of it is white space. A
    // NUL ends the C string there: what follows is not read.
    if end == 0 || unsigned.get(end).is_some_and(|&b| !is_space(b) && b != 0) {
        return None;
    }
    let number = unsigned[..end].iter().try_fold(0u64, |acc, &b| {
        acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })?;
    // strtoull negates; memcached refuses what is then negative as signed.
    let number = if negative {
        number.wrapping_neg()
    } else {
        number
    };
    (!(negative && (number as i64) < 0)).then_some(number)
}

/// C's `isspace` in the "C" locale.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
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
        assert_eq!(parse(b"12\0ab"), Some(12), "strtoull stops at the NUL");
        assert_eq!(parse(b"12ab"), None);
    }

    #[test]
    fn counters_are_read_as_memcached_reads_them() {
        // White space of any kind around the digits, as a value stored
        // with its own "\r\n" has.
        assert_eq!(parse(b"9\r\n"), Some(9));
        assert_eq!(parse(b"\t7\t"), Some(7));
        // What follows the first white space after the digits is ignored.
        assert_eq!(parse(b"1 2"), Some(1));
        assert_eq!(parse(b"+5"), Some(5));
        assert_eq!(parse(b"0000000000000000000000042"), Some(42));
        assert_eq!(parse(b"-0"), Some(0));
    }

    #[test]
    fn anything_else_is_not_a_number() {
        assert_eq!(parse(b"ab"), None);
        assert_eq!(parse(b"12ab"), None);
        assert_eq!(parse(b""), None);
        assert_eq!(parse(b"   "), None);
        assert_eq!(parse(b"-"), None);
        assert_eq!(parse(b"-5"), None);
        assert_eq!(parse(b"111111111111111111111"), None);
        assert_eq!(parse(b"18446744073709551616"), None);
    }
}
