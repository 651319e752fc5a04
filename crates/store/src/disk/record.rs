//! How an item is laid out in LMDB.
//!
//! ```text
//!  items   key ─▶ [flags u32 LE | expiry u32 LE (Unix s, 0 = never) | cas u64 LE | bits u8 | value …]
//!  expiry  [expiry u32 BE | key] ─▶ ()      (background reclaim walks this in time order)
//!  meta    "cas" ─▶ u64 LE                  (the last CAS handed out: unique across restarts)
//!          "classes" ─▶ [items u64 LE | bytes u64 LE] per size class
//! ```

pub const HEADER_LEN: usize = 17;
/// The item has been read since it was stored.
pub const FETCHED: u8 = 1;
/// Marked stale by a meta delete with `I`.
pub const STALE: u8 = 2;
/// A reader has already won the right to recache it.
pub const WIN_SENT: u8 = 4;

/// A key and its stored record in one allocation: what a pending write
/// and a cached read hold, so a lookup touches the table and one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    key_len: usize,
    /// The key, then the record.
    bytes: Box<[u8]>,
}

impl Keyed {
    pub fn new(key: &[u8], record: &[u8]) -> Keyed {
        let mut bytes = Vec::with_capacity(key.len() + record.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(record);
        Keyed {
            key_len: key.len(),
            bytes: bytes.into_boxed_slice(),
        }
    }

    /// The record of `header` and the value parts, under `key`.
    pub fn encode(key: &[u8], header: &Header, value_parts: &[&[u8]]) -> Keyed {
        let value_len = value_parts.iter().map(|p| p.len()).sum::<usize>();
        let mut bytes = Vec::with_capacity(key.len() + HEADER_LEN + value_len);
        bytes.extend_from_slice(key);
        header.encode_into(&mut bytes, value_parts);
        Keyed {
            key_len: key.len(),
            bytes: bytes.into_boxed_slice(),
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len]
    }

    pub fn record(&self) -> &[u8] {
        &self.bytes[self.key_len..]
    }

    pub fn record_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.key_len..]
    }
}

/// An item's header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub flags: u32,
    /// Unix seconds; 0 never expires.
    pub expiry_unix: u32,
    pub cas: u64,
    pub bits: u8,
}

impl Header {
    /// Splits a stored record into its header and value.
    pub fn decode(record: &[u8]) -> Option<(Header, &[u8])> {
        if record.len() < HEADER_LEN {
            return None;
        }
        Some((
            Header {
                flags: u32::from_le_bytes(record[0..4].try_into().ok()?),
                expiry_unix: u32::from_le_bytes(record[4..8].try_into().ok()?),
                cas: u64::from_le_bytes(record[8..16].try_into().ok()?),
                bits: record[16],
            },
            &record[HEADER_LEN..],
        ))
    }

    /// Appends the record of this header followed by the value parts.
    fn encode_into(&self, out: &mut Vec<u8>, value_parts: &[&[u8]]) {
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.expiry_unix.to_le_bytes());
        out.extend_from_slice(&self.cas.to_le_bytes());
        out.push(self.bits);
        for part in value_parts {
            out.extend_from_slice(part);
        }
    }

    pub fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }
}

/// What an item weighs in `stats`: key, header and value.
pub fn item_size(key: &[u8], value_len: usize) -> usize {
    key.len() + HEADER_LEN + value_len
}

/// Sets the header bits of an encoded record in place.
pub fn set_bits(record: &mut [u8], bits: u8) {
    if let Some(byte) = record.get_mut(HEADER_LEN - 1) {
        *byte |= bits;
    }
}

/// The expiry index key: expiry time first, so the index is in time order.
pub fn expiry_key(expiry_unix: u32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len());
    out.extend_from_slice(&expiry_unix.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// The expiry time at the front of an expiry index key.
pub fn expiry_of_index_key(index_key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(index_key.get(..4)?.try_into().ok()?))
}

/// Items and bytes per size class (1-based classes at index class - 1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassCounts(pub Vec<(u64, u64)>);

impl ClassCounts {
    pub fn add(&mut self, class: usize, bytes: u64) {
        if self.0.len() < class {
            self.0.resize(class, (0, 0));
        }
        let entry = &mut self.0[class - 1];
        entry.0 += 1;
        entry.1 += bytes;
    }

    pub fn remove(&mut self, class: usize, bytes: u64) {
        if let Some(entry) = self.0.get_mut(class.wrapping_sub(1)) {
            entry.0 = entry.0.saturating_sub(1);
            entry.1 = entry.1.saturating_sub(bytes);
        }
    }

    pub fn items(&self) -> u64 {
        self.0.iter().map(|c| c.0).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.0.iter().map(|c| c.1).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        self.0
            .iter()
            .flat_map(|(items, bytes)| items.to_le_bytes().into_iter().chain(bytes.to_le_bytes()))
            .collect()
    }

    pub fn decode(bytes: &[u8]) -> Option<ClassCounts> {
        if !bytes.len().is_multiple_of(16) {
            return None;
        }
        Some(ClassCounts(
            bytes
                .chunks_exact(16)
                .map(|c| {
                    (
                        u64::from_le_bytes(c[..8].try_into().unwrap_or_default()),
                        u64::from_le_bytes(c[8..].try_into().unwrap_or_default()),
                    )
                })
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_bits_set_in_place() {
        let header = Header {
            flags: 0xdead_beef,
            expiry_unix: 1_900_000_000,
            cas: 42,
            bits: STALE,
        };
        let mut keyed = Keyed::encode(b"key", &header, &[b"hello ", b"world"]);
        set_bits(keyed.record_mut(), FETCHED);
        assert_eq!(keyed.key(), b"key");
        let record = keyed.record();
        let (decoded, value) = Header::decode(record).unwrap();
        assert_eq!(decoded.bits, STALE | FETCHED);
        assert_eq!((decoded.flags, decoded.cas), (0xdead_beef, 42));
        assert_eq!(value, b"hello world");
        assert!(Header::decode(&record[..HEADER_LEN - 1]).is_none());
        assert_eq!(Keyed::new(b"key", record), keyed);
    }

    #[test]
    fn expiry_keys_sort_by_time() {
        let early = expiry_key(100, b"zzz");
        let late = expiry_key(70_000, b"aaa");
        assert!(early < late);
        assert_eq!(expiry_of_index_key(&late), Some(70_000));
    }

    #[test]
    fn class_counts_round_trip() {
        let mut counts = ClassCounts::default();
        counts.add(3, 100);
        counts.add(3, 50);
        counts.add(1, 10);
        counts.remove(3, 100);
        assert_eq!(counts.items(), 2);
        assert_eq!(counts.bytes(), 60);
        assert_eq!(ClassCounts::decode(&counts.encode()), Some(counts));
    }
}
