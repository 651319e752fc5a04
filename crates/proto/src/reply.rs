//! Error replies of the text and meta protocols, with memcached's exact wording.

/// Every error line kura sends on a text connection. The wording is memcached's
/// own, because clients match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ErrorReply {
    #[error("ERROR")]
    UnknownCommand,
    #[error("CLIENT_ERROR bad command line format")]
    BadCommandLine,
    #[error("CLIENT_ERROR bad data chunk")]
    BadDataChunk,
    #[error("CLIENT_ERROR line too long")]
    LineTooLong,
    #[error("CLIENT_ERROR invalid exptime argument")]
    InvalidExptime,
    #[error("CLIENT_ERROR invalid numeric delta argument")]
    InvalidDelta,
    #[error("CLIENT_ERROR cannot increment or decrement non-numeric value")]
    NonNumeric,
    #[error("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]")]
    DeleteUsage,
    #[error("CLIENT_ERROR usage: stats detail on|off|dump")]
    StatsDetailUsage,
    #[error("SERVER_ERROR object too large for cache")]
    TooLarge,
    #[error("SERVER_ERROR out of memory storing object")]
    OutOfMemory,
    #[error("ERROR: shutdown not enabled")]
    ShutdownDisabled,
    #[error("MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m")]
    MemlimitTooSmall,
    #[error("MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes")]
    MemlimitNotMegabytes,
    #[error("CLIENT_ERROR invalid shutdown mode")]
    ShutdownInvalidMode,
    #[error("CLIENT_ERROR flush_all not allowed")]
    FlushDisabled,
    #[error("CLIENT_ERROR invalid flag")]
    MetaInvalidFlag,
    #[error("CLIENT_ERROR duplicate flag")]
    MetaDuplicateFlag,
    #[error("CLIENT_ERROR error decoding key")]
    MetaKeyDecode,
    #[error("CLIENT_ERROR opaque token too long")]
    MetaOpaqueTooLong,
    #[error("CLIENT_ERROR invalid mode for ms M token")]
    MetaSetMode,
    #[error("CLIENT_ERROR invalid mode for ma M token")]
    MetaArithMode,
    #[error("CLIENT_ERROR invalid or duplicate flag")]
    MetaInvalidOrDuplicateFlag,
    #[error("CLIENT_ERROR bad token in command line format")]
    MetaBadToken,
    #[error("CLIENT_ERROR invalid numeric initial value")]
    MetaInvalidInitial,
    #[error("CLIENT_ERROR invalid numeric delta value")]
    MetaInvalidDelta,
    #[error("SERVER_ERROR {0}")]
    Server(&'static str),
}

impl ErrorReply {
    /// Appends the reply line, `\r\n` included.
    pub fn compose(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{self}\r\n");
    }
}

/// Appends the decimal form of `n` without going through `fmt`.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends a signed decimal.
pub fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_end_with_crlf() {
        let mut out = Vec::new();
        ErrorReply::BadDataChunk.compose(&mut out);
        assert_eq!(out, b"CLIENT_ERROR bad data chunk\r\n");
    }

    #[test]
    fn decimal_formatting() {
        let mut out = Vec::new();
        push_u64(&mut out, 0);
        out.push(b' ');
        push_u64(&mut out, u64::MAX);
        out.push(b' ');
        push_i64(&mut out, -1);
        assert_eq!(out, b"0 18446744073709551615 -1");
    }
}
