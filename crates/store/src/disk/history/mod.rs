//! The update log read back: the entries a data directory or a backup
//! holds, in LSN order, each with its time, origin and full value — what
//! `kura log`, backups and restores read. It reads files only, so it works
//! on a stopped server's directory, a backup, or a live one (the segment
//! being appended ends at its last whole record).

pub mod backup;
pub(in crate::disk) mod position;
pub mod restore;
mod target;

use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use super::io::OsIo;
use super::journal;
use super::log_format::{self, Numbering, Record};
use super::record;

/// One change kura acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub lsn: u64,
    /// When its group was appended, in µs since the Unix epoch.
    pub micros: u64,
    /// The id of the server that took the write.
    pub origin: u32,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The key's item as it is from here on (a set, add, append, incr,
    /// touch… all leave the whole item).
    Set {
        key: Vec<u8>,
        flags: u32,
        /// Unix seconds; 0 never expires.
        expiry_unix: u32,
        cas: u64,
        /// `None` when the read skipped values ([`Values::Skip`]).
        value: Option<Vec<u8>>,
    },
    Remove {
        key: Vec<u8>,
    },
    /// `flush_all`: every item with a CAS up to this is gone.
    Flush {
        through_cas: u64,
    },
    /// A table row as it is from here on: its columns, in order.
    RowPut {
        table: Vec<u8>,
        key: Vec<u8>,
        columns: Vec<(Vec<u8>, Vec<u8>)>,
    },
    RowRemove {
        table: Vec<u8>,
        key: Vec<u8>,
    },
}

/// A point in the log: an LSN, or an instant (the entries of groups
/// appended at or before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogPoint {
    Lsn(u64),
    /// µs since the Unix epoch.
    Micros(u64),
}

impl LogPoint {
    /// Whether the entry `lsn` of a group appended at `micros` is at or
    /// before this point.
    pub fn covers(&self, lsn: u64, micros: u64) -> bool {
        match *self {
            LogPoint::Lsn(last) => lsn <= last,
            LogPoint::Micros(until) => micros <= until,
        }
    }

    /// Whether the entry is at or after this point taken as a start.
    pub fn starts_by(&self, lsn: u64, micros: u64) -> bool {
        match *self {
            LogPoint::Lsn(first) => lsn >= first,
            LogPoint::Micros(from) => micros >= from,
        }
    }
}

/// What a read of the log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub segments: usize,
    pub bytes: u64,
    pub entries: u64,
    /// The first and last entry's LSN and time (µs).
    pub first: Option<(u64, u64)>,
    pub last: Option<(u64, u64)>,
    /// LSN ranges between `first` and `last` that no segment holds.
    pub gaps: Vec<(u64, u64)>,
    /// Segments read whose last bytes are no whole record (a torn append,
    /// or damage: the entries there, if any, are lost).
    pub unread: Vec<Unread>,
}

/// The end of a segment that a read could not take as whole records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unread {
    pub segment: u64,
    /// Where it starts: the end of the last whole record or group.
    pub from: u64,
    pub bytes: u64,
}

/// Whether a read of the log reads the values of its sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    Read,
    /// Every set's value is `None`: for counting and checking.
    Skip,
}

/// Reads the entries of the segments in `dir`, oldest first, passing each
/// to `visit` until it breaks: nothing after that entry is read (the
/// summary's entries end there; its segments and bytes are the log's).
pub fn read(
    dir: &Path,
    values: Values,
    visit: impl FnMut(&Entry) -> ControlFlow<()>,
) -> io::Result<Summary> {
    read_segments(&journal::segments(dir)?, values, visit)
}

/// [`read`] of the segments listed (number and path, oldest first). On a
/// live server retention may remove the oldest between the listing and
/// their read: those the read had not reached yet are passed over, as if
/// listed a moment later; one removed after the read began is an error.
pub fn read_segments(
    segments: &[(u64, PathBuf)],
    values: Values,
    mut visit: impl FnMut(&Entry) -> ControlFlow<()>,
) -> io::Result<Summary> {
    let mut summary = Summary::default();
    let mut stopped = false;
    for (number, path) in segments {
        let size = match std::fs::metadata(path) {
            Ok(meta) => meta.len(),
            Err(error) => {
                pass_over_removed(error, *number, summary.entries > 0 && !stopped)?;
                continue;
            }
        };
        summary.segments += 1;
        summary.bytes += size;
        if stopped {
            continue;
        }
        let mut numbering = Numbering::default();
        let replayed = journal::replay(&OsIo, path, *number, |record, _, _| {
            let Some((lsn, head)) = numbering.number(&record) else {
                return Ok(());
            };
            // `number` passed over heads and moves: this is an entry.
            let Some(change) = change_of_record(record, values)? else {
                return Ok(());
            };
            match summary.last {
                Some((last, _)) if lsn <= last => {
                    return Err(Ended::Failed(invalid_data(format!(
                        "entry {lsn} follows entry {last} in segment {number}: the log is damaged"
                    ))));
                }
                Some((last, _)) if lsn > last + 1 => summary.gaps.push((last + 1, lsn - 1)),
                _ => {}
            }
            summary.first.get_or_insert((lsn, head.micros));
            summary.last = Some((lsn, head.micros));
            summary.entries += 1;
            let entry = Entry {
                lsn,
                micros: head.micros,
                origin: head.origin,
                change,
            };
            stopped = visit(&entry).is_break();
            match stopped {
                // The rest of the segment is not read.
                true => Err(Ended::Early(())),
                false => Ok(()),
            }
        });
        match replayed {
            Ok(end) if end.whole_to < end.size => summary.unread.push(Unread {
                segment: *number,
                from: end.whole_to,
                bytes: end.size - end.whole_to,
            }),
            Ok(_) | Err(Ended::Early(())) => {}
            Err(Ended::Failed(error)) => {
                pass_over_removed(error, *number, summary.entries > 0)?;
                // Removed between its size and its open: listed no more.
                summary.segments -= 1;
                summary.bytes -= size;
            }
        }
    }
    Ok(summary)
}

/// How a visit of a segment's records (`journal::replay`) ended early.
enum Ended<B = ()> {
    Failed(io::Error),
    /// The caller has what it asked for.
    Early(B),
}

impl<B> From<io::Error> for Ended<B> {
    fn from(error: io::Error) -> Self {
        Ended::Failed(error)
    }
}

/// `Ok` for a segment that was listed and is gone (retention removed it)
/// if the read had `begun` on no entry yet; `error` otherwise.
fn pass_over_removed(error: io::Error, number: u64, begun: bool) -> io::Result<()> {
    match error.kind() {
        io::ErrorKind::NotFound if !begun => Ok(()),
        io::ErrorKind::NotFound => Err(io::Error::new(
            error.kind(),
            format!(
                "segment {number} was removed while the log was read \
                 (retention let it go): read the log again"
            ),
        )),
        _ => Err(error),
    }
}

/// The changes of a group as a feed sends it (`crate::replication::FedGroup`):
/// journal records, every value in place.
pub fn group_changes(bytes: &[u8]) -> io::Result<Vec<Change>> {
    log_format::decode_all(bytes)
        .ok_or_else(|| invalid_data("a damaged group"))?
        .into_iter()
        .filter_map(|record| change_of_record(record, Values::Read).transpose())
        .collect()
}

/// The change a journal record makes (a put's value read or skipped as
/// `values` says); `None` for a record that is no entry: a group's head, a
/// move.
fn change_of_record(record: Record<'_>, values: Values) -> io::Result<Option<Change>> {
    Ok(Some(match record {
        Record::Put { key, record } => put_change(key, record, values)?,
        Record::Remove { key } => Change::Remove { key: key.to_vec() },
        Record::Flush(through_cas) => Change::Flush { through_cas },
        Record::RowPut { key, record } => row_change(key, Some(record))?,
        Record::RowRemove { key } => row_change(key, None)?,
        Record::Group(_) | Record::Move { .. } => return Ok(None),
    }))
}

/// The change a row record makes (`stored`: its columns; `None`: removed).
fn row_change(key: &[u8], stored: Option<&[u8]>) -> io::Result<Change> {
    let damaged = || invalid_data("a damaged row record");
    let (table, primary_key) = super::tables::rows::split_row_key(key).ok_or_else(damaged)?;
    let (table, key) = (table.to_vec(), primary_key.to_vec());
    Ok(match stored {
        Some(stored) => Change::RowPut {
            columns: kura_table::Record::decode_columns(&key, stored)
                .ok_or_else(damaged)?
                .columns,
            table,
            key,
        },
        None => Change::RowRemove { table, key },
    })
}

/// The change a journalled put of `record` under `key` makes. Every put in
/// the log carries its value (a touch journals the item whole): one holding
/// a pointer is damage.
fn put_change(key: &[u8], record: &[u8], values: Values) -> io::Result<Change> {
    let (header, value) = record::value_in_place(record)
        .ok_or_else(|| invalid_data("a put without its value in place: the log is damaged"))?;
    Ok(Change::Set {
        key: key.to_vec(),
        flags: header.flags,
        expiry_unix: header.expiry_unix,
        cas: header.cas,
        value: (values == Values::Read).then(|| value.to_vec()),
    })
}

/// The error for damage found in the log.
fn invalid_data(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// How many whole records follow the first record of `unread` (in `dir`)
/// that is not whole. A torn append only ever cuts a segment's end, so
/// none follow one; some follow damage inside the segment (or a power cut
/// that wrote later pages before earlier ones). The whole records at its
/// start (the head and entries of a group cut short) are passed over;
/// looks at the first 64 MiB.
pub fn whole_records_after(dir: &Path, unread: &Unread) -> io::Result<u64> {
    use std::io::{Read, Seek};
    const MOST_READ: u64 = 64 << 20;
    let mut file = std::fs::File::open(journal::segment_path(dir, unread.segment))?;
    file.seek(io::SeekFrom::Start(unread.from))?;
    let mut tail = Vec::new();
    file.take(unread.bytes.min(MOST_READ))
        .read_to_end(&mut tail)?;
    // The read stopped at a record that is not whole, or at the head of a
    // group cut short: past its whole entries is the first record that
    // is not one of them.
    let mut first_bad = 0;
    if let Some((Record::Group(head), len)) = log_format::decode(&tail) {
        first_bad = len;
        for _ in 0..head.entries {
            match log_format::decode(&tail[first_bad..]) {
                Some((record, len)) if record.is_entry() => first_bad += len,
                _ => break,
            }
        }
    }
    // Checksums over at most this many bytes: a crafted tail of plausible
    // lengths at every offset would otherwise cost its square.
    let mut hash_budget = 16 * MOST_READ as usize;
    for start in first_bad..tail.len() {
        let Some((_, len)) = log_format::decode_checked(&tail[start..]) else {
            continue;
        };
        hash_budget = match hash_budget.checked_sub(len) {
            Some(left) => left,
            None => return Ok(0),
        };
        if log_format::decode(&tail[start..]).is_some() {
            let (mut records, mut at) = (0, start);
            while let Some((_, len)) = log_format::decode(&tail[at..]) {
                (records, at) = (records + 1, at + len);
            }
            return Ok(records);
        }
    }
    Ok(0)
}

/// The LSNs from `first` through `last` that no segment in `dir` holds, as
/// ranges (entries before `first` are older history and do not count).
pub fn missing(dir: &Path, first: u64, last: u64) -> io::Result<Vec<(u64, u64)>> {
    span(dir, first, last, true).map(|span| span.missing)
}

/// What the log in `dir` holds of the entries `first` through `last`.
pub struct Span {
    /// The LSNs it lacks, as ranges.
    pub missing: Vec<(u64, u64)>,
    /// The time of entry `last` (µs), if it holds it.
    pub last_micros: Option<u64>,
    /// Its newest entry's LSN (read only if not `stop_at_last`).
    pub newest: Option<u64>,
}

/// The log in `dir` against `first` through `last`; `stop_at_last`: read
/// no further than entry `last`.
pub fn span(dir: &Path, first: u64, last: u64, stop_at_last: bool) -> io::Result<Span> {
    let mut expected = first;
    let mut span = Span {
        missing: Vec::new(),
        last_micros: None,
        newest: None,
    };
    read(dir, Values::Skip, |entry| {
        if entry.lsn > last && stop_at_last {
            return ControlFlow::Break(());
        }
        span.newest = span.newest.max(Some(entry.lsn));
        if entry.lsn == last {
            span.last_micros = Some(entry.micros);
        }
        if entry.lsn > expected && expected <= last {
            span.missing
                .push((expected, entry.lsn.min(last.saturating_add(1)) - 1));
        }
        expected = expected.max(entry.lsn.saturating_add(1));
        ControlFlow::Continue(())
    })?;
    if expected <= last {
        span.missing.push((expected, last));
    }
    Ok(span)
}

/// `12-15, 20`: LSN ranges for a message.
pub fn describe_ranges(ranges: &[(u64, u64)]) -> String {
    ranges
        .iter()
        .map(|&(first, last)| match first == last {
            true => first.to_string(),
            false => format!("{first}-{last}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::log_format::GroupHead;

    /// A segment of groups of the given numbers of entries (removes).
    fn groups(sizes: &[u32]) -> Vec<u8> {
        let (mut bytes, mut lsn) = (Vec::new(), 1);
        for &entries in sizes {
            let head = GroupHead {
                first_lsn: lsn,
                micros: 1,
                origin: 1,
                entries,
            };
            log_format::encode(&mut bytes, Record::Group(head));
            for _ in 0..entries {
                let key = format!("k{lsn}");
                log_format::encode(
                    &mut bytes,
                    Record::Remove {
                        key: key.as_bytes(),
                    },
                );
                lsn += 1;
            }
        }
        bytes
    }

    /// Segment 1 holding `bytes`, and what a read of it left unread.
    fn read_back(bytes: &[u8]) -> (tempfile::TempDir, Unread) {
        let dir = tempfile::tempdir().unwrap();
        let path = journal::segment_path(dir.path(), 1);
        std::fs::write(&path, bytes).unwrap();
        let end = journal::replay::<io::Error>(&OsIo, &path, 1, |_, _, _| Ok(())).unwrap();
        let unread = Unread {
            segment: 1,
            from: end.whole_to,
            bytes: end.size - end.whole_to,
        };
        (dir, unread)
    }

    #[test]
    fn a_group_cut_inside_its_last_entry_is_a_torn_append() {
        let mut bytes = groups(&[2, 3]);
        bytes.truncate(bytes.len() - 3);
        let (dir, unread) = read_back(&bytes);
        // The read left the whole cut group, head and all.
        assert_eq!(unread.from, groups(&[2]).len() as u64);
        assert_eq!(whole_records_after(dir.path(), &unread).unwrap(), 0);
    }

    #[test]
    fn a_bad_entry_followed_by_whole_records_is_damage() {
        let mut bytes = groups(&[2, 3, 1, 1]);
        // Inside the second group's second entry.
        let second_entry = groups(&[2]).len() + groups(&[1]).len();
        bytes[second_entry + 9] ^= 0x5a;
        let (dir, unread) = read_back(&bytes);
        assert_eq!(unread.from, groups(&[2]).len() as u64);
        // Its third entry, then two groups of a head and an entry each.
        assert_eq!(whole_records_after(dir.path(), &unread).unwrap(), 5);
    }
}
