//! A place in the update log: an entry's LSN and its group's time. The
//! disk engine numbers its entries so, and replication speaks of them so
//! between servers.

/// An entry's place in the update log's order: its LSN and its group's
/// time.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct LogPosition {
    pub lsn: u64,
    /// µs since the Unix epoch.
    pub micros: u64,
}

impl LogPosition {
    pub fn new(lsn: u64, micros: u64) -> LogPosition {
        LogPosition { lsn, micros }
    }

    /// `lsn u64 LE | micros u64 LE`.
    pub fn encode(&self) -> [u8; 16] {
        encode_pair(self.lsn, self.micros)
    }

    pub fn decode(bytes: &[u8]) -> Option<LogPosition> {
        let (lsn, micros) = decode_pair(bytes)?;
        Some(LogPosition { lsn, micros })
    }
}

/// Two u64s little-endian: a [`LogPosition`], and in the disk engine a
/// journal `Location`, a group head's LSN and time, a class's counts.
pub(crate) fn encode_pair(first: u64, second: u64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&first.to_le_bytes());
    out[8..].copy_from_slice(&second.to_le_bytes());
    out
}

pub(crate) fn decode_pair(bytes: &[u8]) -> Option<(u64, u64)> {
    Some((
        u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?),
        u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?),
    ))
}

/// As operators read it: `LSN 12 (2026-11-30T03:16:26.500743Z)`.
impl std::fmt::Display for LogPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LSN {} ({})", self.lsn, format_micros(self.micros))
    }
}

/// µs since the epoch as RFC 3339 in UTC, always with six digits of
/// fraction, so that times sort as text (`sort`, `grep` ranges).
pub fn format_micros(micros: u64) -> String {
    let nanos = i128::from(micros) * 1000;
    match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(time) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            time.year(),
            u8::from(time.month()),
            time.day(),
            time.hour(),
            time.minute(),
            time.second(),
            time.microsecond()
        ),
        Err(_) => format!("@{micros}µs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_round_trips_and_reads_as_an_lsn_and_a_time() {
        let at = LogPosition {
            lsn: 12,
            micros: 1_700_000_000_000_001,
        };
        assert_eq!(LogPosition::decode(&at.encode()), Some(at));
        assert_eq!(LogPosition::decode(&at.encode()[..15]), None);
        assert_eq!(at.to_string(), "LSN 12 (2023-11-14T22:13:20.000001Z)");
    }

    #[test]
    fn times_have_a_fixed_width_so_that_they_sort_as_text() {
        assert_eq!(
            format_micros(1_700_000_000_000_000),
            "2023-11-14T22:13:20.000000Z"
        );
        assert_eq!(
            format_micros(1_700_000_000_500_000),
            "2023-11-14T22:13:20.500000Z"
        );
        assert_eq!(format_micros(0), "1970-01-01T00:00:00.000000Z");
        assert!(format_micros(1_700_000_000_000_000) < format_micros(1_700_000_000_500_000));
    }
}
