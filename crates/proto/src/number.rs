//! memcached's number rules, byte for byte.
//!
//! memcached parses with `strtoul`/`strtol` and then narrows the result, so a
//! flags value of 4294967296 is stored as 0 and an exptime of 9999999999 wraps
//! to a time in the past. Clients rely on those answers, so we reproduce them.

/// An unsigned decimal as memcached's `safe_strtoull` reads it (see
/// [`strto`]). A `-` is taken as `strtoull` takes it, negating, and then
/// refused unless the result is small enough to read as a non-negative
/// signed number: `-0` is 0, `-5` is refused. `None` on overflow or junk.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    let (negative, magnitude) = strto(token)?;
    if !negative {
        return Some(magnitude);
    }
    let value = magnitude.wrapping_neg();
    (value as i64 >= 0).then_some(value)
}

/// A signed decimal as memcached's `safe_strtoll` reads it (see [`strto`]);
/// `None` past 64 signed bits or on junk.
pub fn parse_i64(token: &[u8]) -> Option<i64> {
    match strto(token)? {
        (true, magnitude) if magnitude <= i64::MAX as u64 + 1 => {
            Some((magnitude as i64).wrapping_neg())
        }
        (true, _) => None,
        (false, magnitude) => i64::try_from(magnitude).ok(),
    }
}

/// What C's `strtoull` and `strtoll` read of a token, with memcached's
/// checks around them: blanks, one optional sign, at least one digit (as
/// many leading zeros as there are), then the end or a blank (`isspace`:
/// memcached splits lines at spaces only, so `3\t` and `1\r` are tokens,
/// and what follows the blank is not looked at). The sign and the
/// magnitude; `None` for no digits, junk after them, or a magnitude past
/// 64 bits.
fn strto(token: &[u8]) -> Option<(bool, u64)> {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = token.iter().position(|b| !blank(b)).unwrap_or(token.len());
    let (negative, rest) = match &token[start..] {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        rest => (false, rest),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits).is_some_and(|b| !blank(b)) {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &b in &rest[..digits] {
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(b - b'0'))?;
    }
    Some((negative, magnitude))
}

/// Client flags: any non-negative number, narrowed to 32 bits as memcached does.
pub fn parse_flags(token: &[u8]) -> Option<u32> {
    parse_u64(token).map(|v| v as u32)
}

/// An expiration time: a signed number narrowed to 32 bits as memcached does.
pub fn parse_exptime(token: &[u8]) -> Option<i64> {
    parse_i64(token).map(|v| i64::from(v as i32))
}

/// The data length of a storage command: memcached reads it as a 64-bit
/// signed number and keeps the low 32 bits, so 4294967296 is 0. Negative
/// lengths are the caller's to refuse.
pub fn parse_data_length(token: &[u8]) -> Option<i32> {
    parse_i64(token).map(|v| v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_numbers() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        // A leading plus, as memcached's strtoull takes it; only one sign.
        assert_eq!(parse_u64(b"+5"), Some(5));
        assert_eq!(parse_u64(b"+18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"+"), None);
        assert_eq!(parse_u64(b"++5"), None);
        assert_eq!(parse_u64(b"-5"), None);
        assert_eq!(parse_i64(b"+7"), Some(7));
        assert_eq!(parse_i64(b"-+7"), None);
        assert_eq!(parse_u64(b"99999999999999999999"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b""), None);
    }

    #[test]
    fn numbers_are_read_as_strtoull_reads_them() {
        // A blank ends the number, and what follows it is not looked at.
        assert_eq!(parse_u64(b"3\t"), Some(3));
        assert_eq!(parse_u64(b"3\tjunk"), Some(3));
        assert_eq!(parse_u64(b"1\r"), Some(1));
        assert_eq!(parse_u64(b"7\x0b"), Some(7));
        assert_eq!(parse_u64(b"\t5"), Some(5));
        assert_eq!(parse_u64(b"\t"), None);
        // Leading zeros, however many.
        assert_eq!(parse_u64(b"0000000000000000000000001"), Some(1));
        // `-0` is 0; a negative number is refused.
        assert_eq!(parse_u64(b"-0"), Some(0));
        assert_eq!(parse_u64(b"-"), None);
        assert_eq!(parse_i64(b"-0"), Some(0));
        assert_eq!(parse_i64(b"-12\r"), Some(-12));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"-9223372036854775809"), None);
        assert_eq!(parse_i64(b"9223372036854775808"), None);
    }

    #[test]
    fn flags_narrow_to_32_bits_like_memcached() {
        assert_eq!(parse_flags(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_flags(b"4294967296"), Some(0));
        assert_eq!(parse_flags(b"-1"), None);
    }

    #[test]
    fn exptime_narrows_to_32_bits_like_memcached() {
        assert_eq!(parse_exptime(b"-1"), Some(-1));
        assert_eq!(parse_exptime(b"2592000"), Some(2_592_000));
        assert_eq!(parse_exptime(b"9999999999"), Some(1_410_065_407));
        assert_eq!(parse_exptime(b"abc"), None);
    }

    #[test]
    fn data_length_narrows_to_32_bits_like_memcached() {
        assert_eq!(parse_data_length(b"5"), Some(5));
        assert_eq!(parse_data_length(b"4294967296"), Some(0));
        assert_eq!(parse_data_length(b"4294967295"), Some(-1));
        assert_eq!(parse_data_length(b"99999999999999999999"), None);
        assert_eq!(parse_data_length(b"5x"), None);
    }
}

/// C's `atoll`: blanks, an optional sign, then the digits that follow;
/// anything else is 0 (as Tokyo Tyrant's and HandlerSocket's servers read
/// numbers). Wraps on overflow.
pub fn c_atoll(bytes: &[u8]) -> i64 {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let (negative, digits) = match &bytes[start..] {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        rest => (false, rest),
    };
    let magnitude = digits
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0i64, |n, b| {
            n.wrapping_mul(10).wrapping_add(i64::from(b - b'0'))
        });
    if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    }
}

#[cfg(test)]
mod c_atoll_tests {
    use super::c_atoll;

    #[test]
    fn reads_a_sign_and_leading_digits_only() {
        assert_eq!(c_atoll(b" -12x"), -12);
        assert_eq!(c_atoll(b"+7"), 7);
        assert_eq!(c_atoll(b"x1"), 0);
        assert_eq!(c_atoll(b""), 0);
    }
}
