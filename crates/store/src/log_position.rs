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

/// µs since the epoch as RFC 3339 in UTC, to the microsecond.
pub fn format_micros(micros: u64) -> String {
    let nanos = i128::from(micros) * 1000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|time| {
            time.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("@{micros}µs"))
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
}
