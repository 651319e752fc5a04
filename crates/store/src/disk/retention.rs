//! How much of the update log is kept after LMDB holds it: entries are
//! history (for `kura log`, incremental backups, point-in-time restores and
//! replicas), kept for a while and up to a size, not deleted once applied.

use std::time::{Duration, SystemTime};

/// `--log-retention`: a duration, a size, or both (`24h,4GiB`); whichever
/// is reached first lets the oldest segments go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRetention {
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
}

impl Default for LogRetention {
    /// A day of history, at most 4 GiB of it.
    fn default() -> Self {
        LogRetention {
            max_age: Some(Duration::from_secs(24 * 3600)),
            max_bytes: Some(4 << 30),
        }
    }
}

impl LogRetention {
    /// Nothing past what LMDB needs (`0`; also while the disk is full).
    pub const NOTHING: LogRetention = LogRetention {
        max_age: Some(Duration::ZERO),
        max_bytes: Some(0),
    };

    /// How many of the segments of `older` (oldest first) retention lets
    /// go: the oldest, while the segments after them still hold more than
    /// the size limit, and those last appended to before the age limit.
    pub fn past(&self, older: &[SegmentAge], now: SystemTime) -> usize {
        let mut kept: u64 = older.iter().map(|segment| segment.len).sum();
        let past = |segment: &&SegmentAge| {
            let too_big = self.max_bytes.is_some_and(|limit| kept > limit);
            let too_old = self.max_age.is_some_and(|limit| {
                now.duration_since(segment.modified)
                    .is_ok_and(|age| age > limit)
            });
            kept -= segment.len;
            too_big || too_old
        };
        older.iter().take_while(past).count()
    }
}

impl std::str::FromStr for LogRetention {
    type Err = String;

    /// `24h`, `90m`, `3600s`, `2d`; `512MiB`, `4GiB`, `1000000B`; both
    /// separated by a comma; `0` keeps nothing past what LMDB needs.
    fn from_str(text: &str) -> Result<Self, String> {
        if text.trim() == "0" {
            return Ok(LogRetention::NOTHING);
        }
        let mut retention = LogRetention {
            max_age: None,
            max_bytes: None,
        };
        for part in text.split(',').map(str::trim) {
            let twice = match parse_limit(part) {
                Some((bytes, false)) => retention.max_bytes.replace(bytes).map(|_| "sizes"),
                Some((secs, true)) => (retention.max_age)
                    .replace(Duration::from_secs(secs))
                    .map(|_| "durations"),
                None => return Err(format!(
                    "log retention {part:?} is neither a duration (24h, 90m, 3600s, 2d) nor a size (512MiB, 4GiB)"
                )),
            };
            if let Some(what) = twice {
                return Err(format!("two {what} in log retention {text:?}"));
            }
        }
        Ok(retention)
    }
}

/// `24h`, `90m`, `3600s`, `2d` (an age, in seconds: true); `512MiB`,
/// `4GiB`, `1000000B` (a size, in bytes: false).
fn parse_limit(text: &str) -> Option<(u64, bool)> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let number: u64 = number.parse().ok()?;
    let (scale, is_age): (u64, bool) = match unit {
        "s" => (1, true),
        "m" | "min" => (60, true),
        "h" => (3600, true),
        "d" => (86_400, true),
        "B" => (1, false),
        "KiB" | "K" | "KB" => (1 << 10, false),
        "MiB" | "M" | "MB" => (1 << 20, false),
        "GiB" | "G" | "GB" => (1 << 30, false),
        "TiB" | "T" | "TB" => (1 << 40, false),
        _ => return None,
    };
    Some((number.checked_mul(scale)?, is_age))
}

/// A segment the applier is done with, as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentAge {
    pub number: u64,
    pub len: u64,
    /// When it was last appended to.
    pub modified: SystemTime,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_is_a_duration_a_size_or_both() {
        let both: LogRetention = "24h,4GiB".parse().unwrap();
        assert_eq!(both, LogRetention::default());
        let age: LogRetention = "90m".parse().unwrap();
        assert_eq!(age.max_age, Some(Duration::from_secs(5400)));
        assert_eq!(age.max_bytes, None);
        let size: LogRetention = "512MiB".parse().unwrap();
        assert_eq!((size.max_age, size.max_bytes), (None, Some(512 << 20)));
        let nothing: LogRetention = "0".parse().unwrap();
        assert_eq!(nothing.max_bytes, Some(0));
        for bad in ["", "24", "4GB,8GB", "1h,2h", "fast", "4 parsecs"] {
            assert!(bad.parse::<LogRetention>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_oldest_segments_go_past_the_size_or_the_age() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let segment = |number, len, age_seconds| SegmentAge {
            number,
            len,
            modified: now - Duration::from_secs(age_seconds),
        };
        let older = [
            segment(1, 100, 500),
            segment(2, 100, 300),
            segment(3, 100, 10),
        ];
        let by_size = LogRetention {
            max_age: None,
            max_bytes: Some(150),
        };
        assert_eq!(by_size.past(&older, now), 2);
        let by_age = LogRetention {
            max_age: Some(Duration::from_secs(400)),
            max_bytes: None,
        };
        assert_eq!(by_age.past(&older, now), 1);
        let forever = LogRetention {
            max_age: None,
            max_bytes: None,
        };
        assert_eq!(forever.past(&older, now), 0);
        let keep_nothing: LogRetention = "0".parse().unwrap();
        assert_eq!(keep_nothing.past(&older, now), 3);
    }
}
