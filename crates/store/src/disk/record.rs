//! How an item is laid out in LMDB.
//!
//! ```text
//!  items   key ─▶ [flags u32 LE | expiry u32 LE (Unix s, 0 = never) | cas u64 LE | bits u8 | value …]
//!          (bit IN_LOG: the value is in the journal, and in its place is
//!          [segment u64 LE | offset u64 LE | frame_len u32 LE | value_len u32 LE])
//!  expiry  [expiry u32 BE | key] ─▶ ()      (background reclaim walks this in time order)
//!  meta    "cas" ─▶ u64 LE                  (the last CAS handed out; opens go 2^32 past it)
//!          "classes" ─▶ [items u64 LE | bytes u64 LE] per size class
//!          "log" segment u64 BE ─▶ bytes u64 LE  (journal bytes LMDB points to, per segment)
//! ```

use super::log_format::Location;
use crate::log_position::{decode_pair, encode_pair};

pub const HEADER_LEN: usize = 17;

pub use crate::semantics::{FETCHED, STALE, WIN_SENT};
/// The value is in the journal: the record holds a [`LogPointer`].
pub const IN_LOG: u8 = 8;

/// Where a value kept in the journal is: its record's place and framed
/// length, and the value's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPointer {
    pub at: Location,
    pub frame_len: u32,
    pub value_len: u32,
}

impl LogPointer {
    pub const LEN: usize = 24;

    /// The length of the record it points to: a header and the value.
    pub fn record_len(&self) -> usize {
        HEADER_LEN + self.value_len as usize
    }

    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0; Self::LEN];
        out[..16].copy_from_slice(&self.at.encode());
        out[16..20].copy_from_slice(&self.frame_len.to_le_bytes());
        out[20..].copy_from_slice(&self.value_len.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<LogPointer> {
        let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
        Some(LogPointer {
            at: Location::decode(bytes)?,
            frame_len: u32_at(16)?,
            value_len: u32_at(20)?,
        })
    }

    /// The pointer a record stored in LMDB holds, if its value is in the log.
    pub fn of_stored(header: &Header, value: &[u8]) -> Option<LogPointer> {
        LogPointer::decode(header.has(IN_LOG).then_some(value)?)
    }
}

/// The header and value of a put's record as the log holds it or another
/// server sends it: `None` unless it is a header and the value itself.
/// (Only LMDB holds pointers; one in a put would lead into a log at
/// offsets no reader can trust.)
pub fn value_in_place(stored: &[u8]) -> Option<(Header, &[u8])> {
    let (header, value) = Header::decode(stored)?;
    (!header.has(IN_LOG)).then_some((header, value))
}

/// The LMDB record of `header` with its value in the log at `pointer`.
pub fn pointer_record(header: &Header, pointer: &LogPointer) -> [u8; HEADER_LEN + LogPointer::LEN] {
    let mut out = [0; HEADER_LEN + LogPointer::LEN];
    out[..HEADER_LEN].copy_from_slice(&header.encode());
    out[HEADER_LEN..].copy_from_slice(&pointer.encode());
    set_bits(&mut out, IN_LOG);
    out
}

/// What LMDB stores for a put the log holds at `at`, if its value stays in
/// the log there: a pointer record. `None`: the record is a pointer
/// already, or its value is stored in LMDB.
pub fn pointer_for_put(
    key: &[u8],
    stored: &[u8],
    at: Location,
    keeps_in_log: impl Fn(usize) -> bool,
) -> Option<[u8; HEADER_LEN + LogPointer::LEN]> {
    let (header, value) = value_in_place(stored).filter(|(_, value)| keeps_in_log(value.len()))?;
    let pointer = LogPointer {
        at,
        frame_len: super::log_format::put_len(key, stored.len()) as u32,
        value_len: value.len() as u32,
    };
    Some(pointer_record(&header, &pointer))
}

/// The segment a [`log_live_key`] names.
pub fn log_live_segment(key: &[u8]) -> Option<u64> {
    let number = key.strip_prefix(b"log")?;
    Some(u64::from_be_bytes(number.try_into().ok()?))
}

/// The meta key of a journal segment's live byte count.
pub fn log_live_key(segment: u64) -> Vec<u8> {
    [&b"log"[..], &segment.to_be_bytes()].concat()
}

/// Which keyspace a record belongs to: memcached's items (the `items`
/// database), or table rows (`rows`). The same bytes in two spaces are two
/// keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Space {
    Item,
    Row,
}

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
        Keyed {
            key_len: key.len(),
            bytes: [key, record].concat().into_boxed_slice(),
        }
    }

    /// The record of `header` and the value parts, under `key`.
    pub fn encode(key: &[u8], header: &Header, value_parts: &[&[u8]]) -> Keyed {
        let value_len = value_parts.iter().map(|p| p.len()).sum::<usize>();
        let mut bytes = Vec::with_capacity(key.len() + HEADER_LEN + value_len);
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&header.encode());
        for part in value_parts {
            bytes.extend_from_slice(part);
        }
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
        let (head, value) = record.split_at_checked(HEADER_LEN)?;
        let header = Header {
            flags: u32::from_le_bytes(head[0..4].try_into().ok()?),
            expiry_unix: u32::from_le_bytes(head[4..8].try_into().ok()?),
            cas: u64::from_le_bytes(head[8..16].try_into().ok()?),
            bits: head[16],
        };
        Some((header, value))
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0; HEADER_LEN];
        out[0..4].copy_from_slice(&self.flags.to_le_bytes());
        out[4..8].copy_from_slice(&self.expiry_unix.to_le_bytes());
        out[8..16].copy_from_slice(&self.cas.to_le_bytes());
        out[16] = self.bits;
        out
    }

    /// Puts this header in place of the one `record` starts with.
    pub fn write_over(&self, record: &mut [u8]) {
        record[..HEADER_LEN].copy_from_slice(&self.encode());
    }

    pub fn has(&self, bit: u8) -> bool {
        self.bits & bit != 0
    }
}

/// A stored record as the counts see it (the one a write replaces, or
/// the write itself).
pub struct Old {
    pub header: Header,
    pub value_len: usize,
    pub pointer: Option<LogPointer>,
}

impl Old {
    pub fn of(stored: &[u8]) -> Option<Old> {
        let (header, value) = Header::decode(stored)?;
        let pointer = LogPointer::of_stored(&header, value);
        Some(Old {
            header,
            value_len: pointer.map_or(value.len(), |pointer| pointer.value_len as usize),
            pointer,
        })
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
    [&expiry_unix.to_be_bytes()[..], key].concat()
}

/// The expiry time at the front of an expiry index key.
pub fn expiry_of_index_key(index_key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(index_key.get(..4)?.try_into().ok()?))
}

/// What the committed data holds, kept with every commit: items and bytes
/// per size class, and the journal bytes LMDB points to per segment; and
/// what the transaction under way reclaimed.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub classes: ClassCounts,
    pub log: LogLive,
    pub reclaims: Reclaims,
}

/// Expired and flushed items a transaction removed, by size class: added
/// to the server's counters once it commits, so a commit that fails and
/// is retried counts them once.
#[derive(Debug, Clone, Default)]
pub struct Reclaims {
    /// memcached's `reclaimed`: by the background expiry or a flush.
    pub reclaimed: std::collections::BTreeMap<usize, u64>,
    /// `crawler_reclaimed`: by `lru_crawler crawl`.
    pub crawled: std::collections::BTreeMap<usize, u64>,
    /// Expired items never read (`expired_unfetched`).
    pub unfetched: u64,
}

impl Reclaims {
    /// Adds what `other` reclaimed.
    pub fn add(&mut self, other: Reclaims) {
        for (class, count) in other.reclaimed {
            *self.reclaimed.entry(class).or_default() += count;
        }
        for (class, count) in other.crawled {
            *self.crawled.entry(class).or_default() += count;
        }
        self.unfetched += other.unfetched;
    }
}

/// The bytes of each journal segment that LMDB points to; a segment at 0
/// can be deleted once that is on disk and retention lets it go.
#[derive(Debug, Clone, Default)]
pub struct LogLive {
    bytes: std::collections::BTreeMap<u64, u64>,
    /// Segments changed since the last [`take_touched`](Self::take_touched).
    touched: std::collections::BTreeSet<u64>,
}

impl LogLive {
    pub fn add(&mut self, pointer: &LogPointer) {
        *self.bytes.entry(pointer.at.segment).or_default() += pointer.frame_len as u64;
        self.touched.insert(pointer.at.segment);
    }

    pub fn remove(&mut self, pointer: &LogPointer) {
        let (segment, removed) = (pointer.at.segment, u64::from(pointer.frame_len));
        let live = self.of(segment);
        if live < removed {
            // A count that ran short would let a segment be deleted early.
            tracing::error!(segment, live, removed, "journal live-byte count ran short");
        }
        if let Some(bytes) = self.bytes.get_mut(&segment) {
            *bytes = live.saturating_sub(removed);
            self.touched.insert(segment);
        }
    }

    /// Loaded from `meta`.
    pub fn set(&mut self, segment: u64, bytes: u64) {
        self.bytes.insert(segment, bytes);
    }

    pub fn of(&self, segment: u64) -> u64 {
        self.bytes.get(&segment).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.bytes.values().sum()
    }

    /// After a flush: the log holds nothing for LMDB.
    pub fn clear(&mut self) {
        for (&segment, bytes) in self.bytes.iter_mut() {
            *bytes = 0;
            self.touched.insert(segment);
        }
    }

    /// Forgets a deleted segment.
    pub fn drop_segment(&mut self, segment: u64) {
        if self.bytes.remove(&segment).is_some() {
            self.touched.insert(segment);
        }
    }

    /// The segments changed since the last call, with their bytes now
    /// (`None`: forgotten).
    pub fn take_touched(&mut self) -> Vec<(u64, Option<u64>)> {
        std::mem::take(&mut self.touched)
            .into_iter()
            .map(|segment| (segment, self.bytes.get(&segment).copied()))
            .collect()
    }
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

    /// Each class's items and bytes, 16 bytes a class.
    pub fn encode(&self) -> Vec<u8> {
        self.0
            .iter()
            .flat_map(|&(items, bytes)| encode_pair(items, bytes))
            .collect()
    }

    pub fn decode(bytes: &[u8]) -> Option<ClassCounts> {
        bytes
            .chunks(16)
            .map(decode_pair)
            .collect::<Option<_>>()
            .map(ClassCounts)
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
    fn log_live_keys_round_trip_and_sort_by_segment() {
        for segment in [0, 7, u64::MAX] {
            assert_eq!(log_live_segment(&log_live_key(segment)), Some(segment));
        }
        assert!(log_live_key(2) < log_live_key(256));
        assert_eq!(log_live_segment(b"classes"), None);
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
