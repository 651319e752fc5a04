//! memcached's number rules, byte for byte.
//!
//! memcached parses with `strtoul`/`strtol` and then narrows the result, so a
//! flags value of 4294967296 is stored as 0 and an exptime of 9999999999 wraps
//! to a time in the past. Clients rely on those answers, so we reproduce them.

/// An unsigned decimal, with an optional `+` as `strtoull` takes it (no
/// `-`). `None` on overflow or junk.
pub fn parse_u64(token: &[u8]) -> Option<u64> {
    parse_digits(token.strip_prefix(b"+").unwrap_or(token))
}

/// Digits only. `None` on overflow or junk.
fn parse_digits(token: &[u8]) -> Option<u64> {
    if token.is_empty() || token.len() > 20 {
        return None;
    }
    let mut value: u64 = 0;
    for &b in token {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

/// A signed decimal with an optional leading `-` or `+`.
pub fn parse_i64(token: &[u8]) -> Option<i64> {
    match token.split_first() {
        Some((b'-', digits)) => {
            let magnitude = parse_digits(digits)?;
            if magnitude > i64::MAX as u64 + 1 {
                None
            } else {
                Some((magnitude as i64).wrapping_neg())
            }
        }
        _ => i64::try_from(parse_u64(token)?).ok(),
    }
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
