//! Numbers as Tokyo Cabinet's table queries read them (`tctdbatof`): the
//! longest numeric prefix, so `"abc"` is 0, `"1e3"` is 1 and `" +7"` is 7.

/// Fraction digits are read until this many significant digits in all.
const SIGNIFICANT_DIGITS: u32 = 16;

/// Reads a number the way `tctdbatof` does (in `f64`, where Tokyo Cabinet
/// uses `long double`).
pub fn parse(text: &[u8]) -> f64 {
    let mut rest = text;
    // Stops at a NUL, as the C string does.
    while let [first, tail @ ..] = rest {
        if *first == 0 || *first > b' ' {
            break;
        }
        rest = tail;
    }
    let mut sign = 1.0;
    match rest.first() {
        Some(b'-') => {
            sign = -1.0;
            rest = &rest[1..];
        }
        Some(b'+') => rest = &rest[1..],
        _ => {}
    }
    if starts_with_ignoring_case(rest, b"inf") {
        return f64::INFINITY * sign;
    }
    if starts_with_ignoring_case(rest, b"nan") {
        return f64::NAN;
    }
    let mut number = 0.0;
    let mut digits = 0;
    while let [digit @ b'0'..=b'9', tail @ ..] = rest {
        number = number * 10.0 + f64::from(digit - b'0');
        if number > 0.0 {
            digits += 1;
        }
        rest = tail;
    }
    if let [b'.', tail @ ..] = rest {
        rest = tail;
        let mut base = 10.0;
        let mut fraction = 0.0;
        while digits < SIGNIFICANT_DIGITS {
            let [digit @ b'0'..=b'9', tail @ ..] = rest else {
                break;
            };
            fraction += f64::from(digit - b'0') / base;
            base *= 10.0;
            digits += 1;
            rest = tail;
        }
        number += fraction;
    }
    number * sign
}

fn starts_with_ignoring_case(text: &[u8], prefix: &[u8]) -> bool {
    text.len() >= prefix.len() && text[..prefix.len()].eq_ignore_ascii_case(prefix)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn only_the_numeric_prefix_counts() {
        assert_eq!(parse(b"abc"), 0.0);
        assert_eq!(parse(b""), 0.0);
        assert_eq!(parse(b"1e3"), 1.0);
        assert_eq!(parse(b"0x10"), 0.0);
        assert_eq!(parse(b" \t+7"), 7.0);
        assert_eq!(parse(b"-2.5kg"), -2.5);
        assert_eq!(parse(b"30.0"), 30.0);
        assert_eq!(parse(b"-Infinity"), f64::NEG_INFINITY);
        assert!(parse(b"NaN").is_nan());
        assert_eq!(parse(b"12\0 34"), 12.0);
    }
}
