//! The update log's records, byte by byte: how a record is framed,
//! checksummed, encoded and decoded, how a segment's entries are numbered,
//! and where a record starts ([`Location`]).
//! [`journal`](super::journal) keeps them in segment files.
//!
//! Record: `len u32 LE | crc32 u32 LE | body`, the body being
//! `kind u8 | key_len u16 LE | key | rest`: a put's rest is the record as
//! LMDB stores it (a row put's, the row's columns), a move's the segment
//! and offset it moves from (u64 LE each) and then the record, a remove
//! (of an item or a row) has none, a flush has its CAS boundary (u64 LE)
//! and no key. A group starts with a head (no key; first LSN u64 LE, time
//! in µs since the Unix epoch u64 LE, origin server id u32 LE, entries
//! u32 LE): its puts, removes (items' and rows') and flush are the update
//! log's entries, numbered from that LSN on, and the head counts them, so a
//! group a kill or a power cut wrote only part of is known and taken not at
//! all (a group is one server's, a replica's or a peer's step, and its
//! entries go together). Moves are the compactor's and no entries. A torn
//! or corrupt record ends a segment's replay: only a power loss leaves one,
//! and only under a policy that allows losing the last writes.

use crate::log_position::{decode_pair, encode_pair, LogPosition};

const PUT: u8 = 1;
const REMOVE: u8 = 2;
const FLUSH: u8 = 3;
const MOVE: u8 = 4;
const GROUP: u8 = 5;
const ROW_PUT: u8 = 6;
const ROW_REMOVE: u8 = 7;
const GROUP_HEAD_LEN: usize = 24;
pub const FRAME: usize = 8;
const BODY_HEAD: usize = 3;

/// Where a record starts in the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Location {
    pub segment: u64,
    pub offset: u64,
}

impl Location {
    pub fn new(segment: u64, offset: u64) -> Location {
        Location { segment, offset }
    }

    pub(super) fn encode(&self) -> [u8; 16] {
        encode_pair(self.segment, self.offset)
    }

    pub(super) fn decode(bytes: &[u8]) -> Option<Location> {
        let (segment, offset) = decode_pair(bytes)?;
        Some(Location { segment, offset })
    }
}

/// One journalled change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    Put {
        key: &'a [u8],
        record: &'a [u8],
    },
    Remove {
        key: &'a [u8],
    },
    /// `flush_all`: every item with a CAS up to this is gone.
    Flush(u64),
    /// The compactor copied a live record out of a segment: the key's
    /// record points here if it still points at `from`.
    Move {
        key: &'a [u8],
        from: Location,
        record: &'a [u8],
    },
    /// A table row's new state: `key` is the row's key (`rows::row_key`:
    /// table and primary key), `record` its columns as stored.
    RowPut {
        key: &'a [u8],
        record: &'a [u8],
    },
    RowRemove {
        key: &'a [u8],
    },
    /// The head of a group of entries: the `entries` records after it are
    /// entries `first_lsn`, `first_lsn + 1`, …, all appended at `micros` by
    /// server `origin`.
    Group(GroupHead),
}

/// What a group's entries share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupHead {
    pub first_lsn: u64,
    /// Microseconds since the Unix epoch.
    pub micros: u64,
    pub origin: u32,
    /// The entries that follow it (one at least).
    pub entries: u32,
}

impl GroupHead {
    fn encode(&self) -> [u8; GROUP_HEAD_LEN] {
        let mut out = [0; GROUP_HEAD_LEN];
        out[..16].copy_from_slice(&encode_pair(self.first_lsn, self.micros));
        out[16..20].copy_from_slice(&self.origin.to_le_bytes());
        out[20..].copy_from_slice(&self.entries.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<GroupHead> {
        let bytes: &[u8; GROUP_HEAD_LEN] = bytes.try_into().ok()?;
        let (first_lsn, micros) = decode_pair(bytes)?;
        Some(GroupHead {
            first_lsn,
            micros,
            origin: u32::from_le_bytes(bytes[16..20].try_into().ok()?),
            entries: u32::from_le_bytes(bytes[20..].try_into().ok()?),
        })
    }

    /// The position of the group's last entry.
    pub fn last(&self) -> LogPosition {
        debug_assert!(self.entries > 0 && self.first_lsn > 0);
        let entries = u64::from(self.entries.max(1));
        LogPosition::new(self.first_lsn.saturating_add(entries - 1), self.micros)
    }
}

/// The records of `bytes`, every one whole and checksummed.
pub fn decode_all(bytes: &[u8]) -> Option<Vec<Record<'_>>> {
    let mut records = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (record, len) = decode(rest)?;
        records.push(record);
        rest = &rest[len..];
    }
    Some(records)
}

impl Record<'_> {
    /// Whether it is an entry of the update log (a change a client made).
    pub fn is_entry(&self) -> bool {
        !matches!(self, Record::Move { .. } | Record::Group(_))
    }
}

/// Numbers a segment's entries as it is read: a group head gives the next
/// entry's LSN and time.
#[derive(Debug, Default)]
pub struct Numbering {
    head: Option<GroupHead>,
    next: u64,
}

impl Numbering {
    /// The LSN and group of `record` if it is an entry (a head starts a
    /// group; moves are no entries). `None` also for an entry without a
    /// head before it, which only a damaged segment holds.
    pub fn number(&mut self, record: &Record<'_>) -> Option<(u64, GroupHead)> {
        if let Record::Group(head) = record {
            self.head = Some(*head);
            self.next = head.first_lsn;
            return None;
        }
        let head = self.head.filter(|_| record.is_entry())?;
        let lsn = self.next;
        self.next = lsn.saturating_add(1);
        Some((lsn, head))
    }
}

/// The framed length of a put of `record` under `key`.
pub fn put_len(key: &[u8], record_len: usize) -> usize {
    FRAME + BODY_HEAD + key.len() + record_len
}

/// Appends `record`, framed and checksummed, to `buf`.
pub fn encode(buf: &mut Vec<u8>, record: Record<'_>) {
    let (kind, key, rest): (u8, &[u8], &[u8]) = match record {
        Record::Group(_) => (GROUP, &[], &[]),
        Record::Put { key, record } => (PUT, key, record),
        Record::Remove { key } => (REMOVE, key, &[]),
        Record::RowPut { key, record } => (ROW_PUT, key, record),
        Record::RowRemove { key } => (ROW_REMOVE, key, &[]),
        Record::Flush(_) => (FLUSH, &[], &[]),
        Record::Move { key, record, .. } => (MOVE, key, record),
    };
    let start = buf.len();
    buf.extend_from_slice(&[0; FRAME]);
    buf.push(kind);
    buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
    buf.extend_from_slice(key);
    // What comes between the key and the rest: a flush's boundary, a
    // move's origin, a group's head.
    match record {
        Record::Flush(through) => buf.extend_from_slice(&through.to_le_bytes()),
        Record::Move { from, .. } => buf.extend_from_slice(&from.encode()),
        Record::Group(head) => buf.extend_from_slice(&head.encode()),
        _ => {}
    }
    buf.extend_from_slice(rest);
    let body_len = (buf.len() - start - FRAME) as u32;
    buf[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
    let crc = crc32fast::hash(&buf[start + FRAME..]);
    buf[start + 4..start + FRAME].copy_from_slice(&crc.to_le_bytes());
}

/// The record at the start of `bytes` and its framed length; `None` at the
/// end, or at a torn or corrupt record.
pub fn decode(bytes: &[u8]) -> Option<(Record<'_>, usize)> {
    let (record, len) = decode_checked(bytes)?;
    let crc = u32::from_le_bytes(bytes[4..FRAME].try_into().ok()?);
    (crc32fast::hash(&bytes[FRAME..len]) == crc).then_some((record, len))
}

/// [`decode`] of a record whose checksum [`decode`] has already checked
/// (a reader that looks at a record before it takes it checks it once).
pub fn decode_checked(bytes: &[u8]) -> Option<(Record<'_>, usize)> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let body = bytes.get(FRAME..FRAME.checked_add(len)?)?;
    let (&[kind, key_len_lo, key_len_hi], body) = body.split_first_chunk::<BODY_HEAD>()?;
    let (key, rest) = body.split_at_checked(u16::from_le_bytes([key_len_lo, key_len_hi]).into())?;
    let record = match kind {
        PUT => Record::Put { key, record: rest },
        REMOVE if rest.is_empty() => Record::Remove { key },
        ROW_PUT => Record::RowPut { key, record: rest },
        ROW_REMOVE if rest.is_empty() => Record::RowRemove { key },
        FLUSH => Record::Flush(u64::from_le_bytes(rest.try_into().ok()?)),
        MOVE => Record::Move {
            key,
            from: Location::decode(rest)?,
            record: &rest[16..],
        },
        GROUP if key.is_empty() => {
            Record::Group(GroupHead::decode(rest).filter(|head| head.entries > 0)?)
        }
        _ => return None,
    };
    Some((record, FRAME + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_or_corrupt_one_ends_the_log() {
        let mut buf = Vec::new();
        let records = [
            Record::Put {
                key: b"alpha",
                record: &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17],
            },
            Record::Remove { key: b"beta" },
            Record::Flush(u64::MAX - 3),
            Record::Move {
                key: b"gamma",
                from: Location {
                    segment: 3,
                    offset: 1 << 40,
                },
                record: &[9; 30],
            },
            Record::Put {
                key: b"",
                record: &[],
            },
            Record::Group(GroupHead {
                first_lsn: 1 << 50,
                micros: 1_800_000_000_000_000,
                origin: u32::MAX - 1,
                entries: 70_000,
            }),
        ];
        for record in records {
            encode(&mut buf, record);
        }
        let mut at = 0;
        let mut decoded = Vec::new();
        while let Some((record, len)) = decode(&buf[at..]) {
            decoded.push(record);
            at += len;
        }
        assert_eq!(decoded, records);
        assert_eq!(at, buf.len());

        // Cut anywhere inside the last record: the others still decode.
        let last_start = buf.len() - (FRAME + BODY_HEAD + GROUP_HEAD_LEN);
        for cut in last_start..buf.len() {
            assert!(decode(&buf[last_start..cut]).is_none(), "cut at {cut}");
        }
        // One flipped bit in a body fails its checksum.
        let mut corrupt = buf.clone();
        corrupt[FRAME + 4] ^= 0x10;
        assert!(decode(&corrupt).is_none());
        // A kind nobody wrote is not taken for a record.
        let mut unknown = Vec::new();
        encode(&mut unknown, Record::Remove { key: b"k" });
        unknown[FRAME] = 9;
        let crc = crc32fast::hash(&unknown[FRAME..]);
        unknown[4..FRAME].copy_from_slice(&crc.to_le_bytes());
        assert!(decode(&unknown).is_none());
    }

    #[test]
    fn a_group_head_numbers_the_entries_after_it_and_moves_are_none() {
        let head = GroupHead {
            first_lsn: 41,
            micros: 7,
            origin: 3,
            entries: 3,
        };
        let put = Record::Put {
            key: b"k",
            record: &[0; 17],
        };
        let moved = Record::Move {
            key: b"k",
            from: Location {
                segment: 1,
                offset: 0,
            },
            record: &[0; 17],
        };
        let mut numbering = Numbering::default();
        assert_eq!(numbering.number(&put), None, "no head yet");
        assert_eq!(numbering.number(&Record::Group(head)), None);
        assert_eq!(numbering.number(&Record::Flush(9)), Some((41, head)));
        assert_eq!(numbering.number(&moved), None);
        assert_eq!(numbering.number(&put), Some((42, head)));
        assert_eq!(
            numbering.number(&Record::Remove { key: b"k" }),
            Some((43, head))
        );
    }
}
