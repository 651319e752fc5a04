//! The journal: every group of writes is appended here, in one sequential
//! write, before it is acknowledged; LMDB gets the writes later, many groups
//! at once (`writer.rs`).
//!
//! A small LMDB commit rewrites every page it touches and their branches:
//! about 47 pages for a group of 22 small writes. An append writes the
//! group's bytes once. Applying a second's worth of groups to LMDB in one
//! transaction then touches each leaf once, not once per group.
//!
//! The journal is a series of segment files, `journal-<number>.log`. The
//! applier starts a new segment whenever it takes the writes logged so far
//! for LMDB; once that transaction is committed and the data file fsynced,
//! every segment up to the applied one is deleted. On open, segments newer
//! than the last applied one (LMDB's `meta` remembers it) are replayed.
//!
//! Record: `len u32 LE | crc32 u32 LE | body`, the body being
//! `kind u8 | key_len u16 LE | key | rest`: a put's rest is the record as
//! LMDB stores it, a remove has none, a flush has its CAS boundary (u64 LE)
//! and no key. A torn or corrupt record ends the segment's replay: only a
//! power loss leaves one, and only under a policy that allows losing the
//! last writes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

const PUT: u8 = 1;
const REMOVE: u8 = 2;
const FLUSH: u8 = 3;
const FRAME: usize = 8;
const BODY_HEAD: usize = 3;

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
}

/// Appends `record`, framed, to `buf`.
pub fn encode(buf: &mut Vec<u8>, record: Record<'_>) {
    let (kind, key, rest): (u8, &[u8], &[u8]) = match record {
        Record::Put { key, record } => (PUT, key, record),
        Record::Remove { key } => (REMOVE, key, &[]),
        Record::Flush(_) => (FLUSH, &[], &[]),
    };
    let boundary;
    let rest = if let Record::Flush(through) = record {
        boundary = through.to_le_bytes();
        &boundary[..]
    } else {
        rest
    };
    let body_len = BODY_HEAD + key.len() + rest.len();
    let start = buf.len();
    buf.extend_from_slice(&(body_len as u32).to_le_bytes());
    buf.extend_from_slice(&[0; 4]);
    buf.push(kind);
    buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(rest);
    let crc = crc32fast::hash(&buf[start + FRAME..]);
    buf[start + 4..start + FRAME].copy_from_slice(&crc.to_le_bytes());
}

/// The record at the start of `bytes` and its framed length; `None` at the
/// end, or at a torn or corrupt record.
pub fn decode(bytes: &[u8]) -> Option<(Record<'_>, usize)> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..FRAME)?.try_into().ok()?);
    let body = bytes.get(FRAME..FRAME.checked_add(len)?)?;
    if len < BODY_HEAD || crc32fast::hash(body) != crc {
        return None;
    }
    let key_len = u16::from_le_bytes([body[1], body[2]]) as usize;
    let key = body.get(BODY_HEAD..BODY_HEAD + key_len)?;
    let rest = &body[BODY_HEAD + key_len..];
    let record = match body[0] {
        PUT => Record::Put { key, record: rest },
        REMOVE if rest.is_empty() => Record::Remove { key },
        FLUSH => Record::Flush(u64::from_le_bytes(rest.try_into().ok()?)),
        _ => return None,
    };
    Some((record, FRAME + len))
}

fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("journal-{number:016x}.log"))
}

/// The journal's segments in `dir`, oldest first.
pub fn segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|name| name.to_str())
            .and_then(|name| name.strip_prefix("journal-")?.strip_suffix(".log"))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        if let Some(number) = number {
            found.push((number, path));
        }
    }
    found.sort();
    Ok(found)
}

/// Calls `visit` with each intact record of the segment at `path`, in
/// order; returns how many there were. Reads one record at a time: a
/// segment can hold a quarter of the memory budget.
pub fn replay(path: &Path, mut visit: impl FnMut(Record<'_>)) -> io::Result<usize> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut reader = io::BufReader::with_capacity(1 << 20, file);
    let mut frame = Vec::new();
    let mut at = 0u64;
    let mut count = 0;
    loop {
        frame.resize(FRAME, 0);
        if reader.read_exact(&mut frame).is_err() {
            break;
        }
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as u64;
        // A torn length may claim more than the file holds.
        if at + FRAME as u64 + len > size {
            break;
        }
        frame.resize(FRAME + len as usize, 0);
        if reader.read_exact(&mut frame[FRAME..]).is_err() {
            break;
        }
        let Some((record, _)) = decode(&frame) else {
            break;
        };
        visit(record);
        at += frame.len() as u64;
        count += 1;
    }
    if at < size {
        tracing::warn!(path = %path.display(), at, len = size, "journal segment ends in a torn record; replayed up to it");
    }
    Ok(count)
}

/// A segment created and not yet appended to.
pub struct NextSegment(Segment);

/// A segment no longer appended to.
pub struct Retired {
    pub number: u64,
    file: Arc<File>,
}

impl Retired {
    /// fsyncs it: it may hold acknowledged writes the syncer has not reached.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// The segment being appended to.
struct Segment {
    number: u64,
    file: Arc<File>,
    len: u64,
}

pub struct Journal {
    dir: PathBuf,
    current: Mutex<Segment>,
    /// Bytes in segments not yet deleted.
    bytes: AtomicU64,
}

impl Journal {
    /// Starts segment `number` (newer than any in `dir`).
    pub fn create(dir: &Path, number: u64) -> io::Result<Journal> {
        let segment = Segment::create(dir, number)?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            current: Mutex::new(segment),
            bytes: AtomicU64::new(0),
        })
    }

    /// Appends one group's records. A failed append leaves the segment as
    /// it was (a partial group is cut off), or returns the error of the cut.
    pub fn append(&self, group: &[u8]) -> io::Result<()> {
        let mut segment = self.current.lock();
        let at = segment.len;
        if let Err(error) = segment.file.write_all_at(group, at) {
            segment.file.set_len(at)?;
            return Err(error);
        }
        segment.len += group.len() as u64;
        self.bytes.fetch_add(group.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// fsyncs the segment being appended to.
    pub fn sync(&self) -> io::Result<()> {
        let file = self.current.lock().file.clone();
        file.sync_data()
    }

    /// Creates the segment that follows the current one, for
    /// [`switch`](Self::switch): creating it (and making its name durable)
    /// takes time, switching does not.
    pub fn prepare(&self) -> io::Result<NextSegment> {
        let number = self.current.lock().number + 1;
        Segment::create(&self.dir, number).map(NextSegment)
    }

    /// Appends go to `next` from now on; returns the segment before it.
    pub fn switch(&self, next: NextSegment) -> Retired {
        let old = std::mem::replace(&mut *self.current.lock(), next.0);
        Retired {
            number: old.number,
            file: old.file,
        }
    }

    /// Deletes the segments up to `number`: LMDB holds their writes, on disk.
    pub fn remove_through(&self, number: u64) -> io::Result<()> {
        for (found, path) in segments(&self.dir)? {
            if found > number {
                break;
            }
            let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            fs::remove_file(&path)?;
            let _ = self
                .bytes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                    Some(b.saturating_sub(len))
                });
        }
        Ok(())
    }

    /// Bytes in segments not yet deleted (written since open).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

impl Segment {
    fn create(dir: &Path, number: u64) -> io::Result<Segment> {
        let path = segment_path(dir, number);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        // The new name must survive a power loss with the writes in it.
        File::open(dir)?.sync_all()?;
        Ok(Segment {
            number,
            file: Arc::new(file),
            len: 0,
        })
    }
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
            Record::Put {
                key: b"",
                record: &[],
            },
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
        let last_start = buf.len() - (FRAME + BODY_HEAD);
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
    fn segments_rotate_replay_and_are_removed_once_applied() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::create(dir.path(), 7).unwrap();
        let mut group = Vec::new();
        encode(&mut group, Record::Remove { key: b"a" });
        journal.append(&group).unwrap();
        let next = journal.prepare().unwrap();
        let retired = journal.switch(next);
        retired.sync().unwrap();
        assert_eq!(retired.number, 7);
        let mut second = Vec::new();
        encode(&mut second, Record::Flush(5));
        journal.append(&second).unwrap();
        journal.append(&group).unwrap();
        journal.sync().unwrap();
        let found = segments(dir.path()).unwrap();
        assert_eq!(
            found.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![7, 8]
        );
        let mut seen = Vec::new();
        replay(&found[1].1, |record| seen.push(format!("{record:?}"))).unwrap();
        assert_eq!(seen, ["Flush(5)", "Remove { key: [97] }"]);
        // A torn tail (a length that claims more than the file holds) ends
        // the replay after the intact records.
        let torn = dir.path().join("torn.log");
        let mut bytes = fs::read(&found[1].1).unwrap();
        bytes.extend_from_slice(&group[..FRAME + 1]);
        fs::write(&torn, &bytes).unwrap();
        seen.clear();
        let count = replay(&torn, |record| seen.push(format!("{record:?}"))).unwrap();
        assert_eq!((count, seen.len()), (2, 2));
        assert_eq!(journal.bytes(), (2 * group.len() + second.len()) as u64);
        journal.remove_through(7).unwrap();
        assert_eq!(segments(dir.path()).unwrap().len(), 1);
        assert_eq!(journal.bytes(), (group.len() + second.len()) as u64);
    }
}
