//! The journal: every group of writes is appended here, in one sequential
//! write, before it is acknowledged; LMDB gets the writes later, many groups
//! at once (`applier.rs`).
//!
//! A small LMDB commit rewrites every page it touches and their branches:
//! about 47 pages for a group of 22 small writes. An append writes the
//! group's bytes once. Applying a second's worth of groups to LMDB in one
//! transaction then touches each leaf once, not once per group.
//!
//! The journal is also the value log: a large value is written only here,
//! and LMDB keeps a pointer to its record ([`record::LogPointer`]) instead
//! of a second copy. The journal is a series of segment files,
//! `journal-<n:016x>.log`. The applier starts a new segment when it takes
//! the writes logged so far for LMDB, unless the round is only to catch
//! LMDB up (for a read, or expired items) and the segment is young (LMDB
//! then holds part of it, as of a round committed in parts). On open, segments newer than
//! the last applied one (LMDB's `meta` remembers it) are replayed. An
//! applied segment is deleted once retention lets it go and no pointer
//! leads into it: LMDB counts the bytes each segment still holds for it,
//! and the compactor moves the values out of a segment past retention that
//! is mostly garbage (a move record). The records' format is
//! [`log_format`](super::log_format)'s.
//!
//! [`record::LogPointer`]: super::record::LogPointer

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM;
use parking_lot::Mutex;

use super::io::Io;
use super::log_format::{decode, Location, Record, FRAME};
use super::page_window::PageWindow;
use super::record::LogPointer;
use super::retention::SegmentAge;
use crate::log_position::LogPosition;

/// The longest record an append writes: the largest value, with its key
/// and header. A frame or pointer that claims more is damage, and no read
/// allocates for it.
const MAX_FRAME: usize = FRAME + crate::MAX_VALUE_BYTES + (1 << 20);
/// Segment files kept open for reads of values at once.
const OPEN_SEGMENTS: usize = 256;
/// The most files the engine keeps open for itself: the segments above,
/// those the page window follows, the current one, LMDB's data and lock
/// files, the directory's lock, and a few a backup or feed opens meanwhile.
pub const MOST_FILES_OPEN: usize = OPEN_SEGMENTS + super::page_window::TRACKED_SEGMENTS + 16;
/// Space reserved ahead of a segment's appends, a step at a time (at most a
/// sixteenth of the free space): appends into reserved blocks cost ext4
/// about half the CPU of appends that allocate as they go (fio, 200 KiB
/// appends and an fsync: 0.55 s of CPU per 2 GiB against 1.2–1.6 s). What a
/// segment leaves unused is given back when it is retired.
const PREALLOCATE: u64 = 64 << 20;

pub fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("journal-{number:016x}.log"))
}

/// Bytes free to an unprivileged writer on the file system of `dir`; none
/// known on one that counts no blocks (ramfs, a tmpfs of `size=0`), where
/// 0 free would refuse every write.
pub fn free_space(dir: &Path) -> Option<u64> {
    let fs = nix::sys::statvfs::statvfs(dir).ok()?;
    (fs.blocks() > 0).then(|| fs.blocks_available() * fs.fragment_size())
}

/// The number of the segment a file of this name is, if it is one.
pub fn segment_number(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("journal-")?.strip_suffix(".log")?;
    // Hex digits only (`from_str_radix` would take a sign).
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The journal's segments in `dir`, oldest first. A directory of that name
/// or a FIFO (which would block its reader) is none; a symbolic link is
/// what it leads to, and an entry that cannot be looked at (removed since,
/// a dangling link) is listed, for its reader to fail on.
pub fn segments(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if fs::metadata(&path).is_ok_and(|meta| !meta.is_file()) {
            continue;
        }
        let name = path.file_name().and_then(|name| name.to_str());
        found.extend(name.and_then(segment_number).map(|number| (number, path)));
    }
    found.sort();
    Ok(found)
}

/// Where a replay of a segment stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentEnd {
    /// The segment's size when the replay began.
    pub size: u64,
    /// Where its whole records (and whole groups) end.
    pub whole_to: u64,
}

/// Calls `visit` with each intact record of segment `number` (at `path`),
/// where it starts and its framed length, in order, until it fails; returns
/// where it stopped (bytes after the last whole record, or from the head of
/// a group whose entries are not all there, are left unread: a torn append,
/// or damage). Reads through `io`, a buffer at a time: a segment can hold a
/// quarter of the memory budget. The segment ends at its end or at its
/// first record that is not whole (a torn append); a read that fails is an
/// error, not an end: the records after it were acknowledged. A group is
/// handed over once its head's count of entries has come, read again from
/// its head (from the buffer while it still holds the head): only where it
/// starts is held meanwhile. One whose entries end early is left unread.
pub fn replay<E: From<io::Error>>(
    io: &dyn Io,
    path: &Path,
    number: u64,
    mut visit: impl FnMut(Record<'_>, Location, usize) -> Result<(), E>,
) -> Result<SegmentEnd, E> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let segment = SegmentReader {
        io,
        file: &file,
        at: 0,
        size,
    };
    let mut reader = io::BufReader::with_capacity(1 << 20, segment);
    let mut frame = Vec::new();
    let mut at = 0;
    // A group read up to some of the entries its head counts: the entries
    // still to come, and where its head starts.
    let mut group: Option<(u32, u64)> = None;
    // The end of a whole group being read again, to be handed over.
    let mut handing_to = 0;
    loop {
        frame.resize(FRAME, 0);
        if !read_fully(&mut reader, &mut frame, number)? {
            break;
        }
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as u64;
        // A torn length may claim more than the file holds, or than any
        // write (a sparse file holds much at no cost).
        if FRAME + len as usize > MAX_FRAME || at + FRAME as u64 + len > size {
            break;
        }
        frame.resize(FRAME + len as usize, 0);
        if !read_fully(&mut reader, &mut frame[FRAME..], number)? {
            break;
        }
        let Some((record, _)) = decode(&frame) else {
            break;
        };
        let (here, framed) = (Location::new(number, at), frame.len());
        at += framed as u64;
        if here.offset < handing_to {
            visit(record, here, framed)?;
            continue;
        }
        match (&mut group, record) {
            (None, Record::Group(head)) => group = Some((head.entries, here.offset)),
            (None, record) => visit(record, here, framed)?,
            (Some((left, start)), record) if record.is_entry() => {
                *left -= 1;
                if *left == 0 {
                    handing_to = at;
                    reader.seek_relative(*start as i64 - at as i64)?;
                    at = *start;
                    group = None;
                }
            }
            // A head or a move amid a group's entries: damage.
            (Some(_), _) => break,
        }
    }
    if at < handing_to {
        let error = format!("segment {number} changed under its reading at offset {at}");
        return Err(io::Error::new(io::ErrorKind::InvalidData, error).into());
    }
    let whole_to = group.map_or(at, |(_, start)| start);
    Ok(SegmentEnd { size, whole_to })
}

/// Fills `buf`: false if the segment ends first (or was cut back since its
/// size was read: a failed append) in the middle of a record.
fn read_fully(reader: &mut impl Read, buf: &mut [u8], number: u64) -> io::Result<bool> {
    match reader.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(error) => Err(io::Error::new(
            error.kind(),
            format!("reading journal segment {number}: {error}"),
        )),
    }
}

/// A segment read front to back through the seam, up to the size it had
/// when the read began (a live one grows meanwhile).
struct SegmentReader<'a> {
    io: &'a dyn Io,
    file: &'a File,
    at: u64,
    size: u64,
}

impl Read for SegmentReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = usize::try_from(self.size.saturating_sub(self.at)).unwrap_or(usize::MAX);
        let len = buf.len().min(left);
        if len > 0 {
            match self.io.read_log(self.file, &mut buf[..len], self.at) {
                // Cut back since its size was read (a failed append): it
                // ends where it ends now.
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
                    let now = self.file.metadata()?.len();
                    if now >= self.at + len as u64 {
                        return Err(error);
                    }
                    self.size = now;
                    return self.read(buf);
                }
                result => result?,
            }
            self.at += len as u64;
        }
        Ok(len)
    }
}

/// Back to a group's head (`BufReader::seek_relative`, past its buffer).
impl io::Seek for SegmentReader<'_> {
    fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
        self.at = match to {
            io::SeekFrom::Start(at) => at,
            io::SeekFrom::Current(by) => self.at.saturating_add_signed(by),
            io::SeekFrom::End(by) => self.size.saturating_add_signed(by),
        };
        Ok(self.at)
    }
}

/// A segment created and not yet appended to.
pub struct NextSegment(Segment);

/// A segment no longer appended to.
pub type Retired = Segment;

/// Truncates segment `number` to its own length, `len`: that frees the
/// blocks reserved past its end, which punching a hole there does not (ext4).
fn release_reserved(file: &File, number: u64, len: u64) {
    if let Err(error) = file.set_len(len) {
        tracing::debug!(%error, segment = number, "cannot release a segment's unused space");
    }
}

/// The segment being appended to.
pub struct Segment {
    pub number: u64,
    /// The newest entry appended up to the end of this segment.
    pub last: LogPosition,
    file: Arc<File>,
    len: u64,
    /// Bytes reserved for it on the file system.
    reserved: u64,
}

pub struct Journal {
    dir: PathBuf,
    io: Arc<dyn Io>,
    current: Mutex<Segment>,
    /// Every segment but the current one, with its size and when it was
    /// last appended to.
    older: Mutex<BTreeMap<u64, SegmentAge>>,
    /// Segment files open for reads of values (a bounded few).
    open: Mutex<HashMap<u64, Arc<File>>>,
    /// The newest entry appended (entries are numbered without gaps): the
    /// writer reads it without the segment's lock.
    last_lsn: AtomicU64,
    /// Times the numbering started over after another point
    /// ([`Journal::restart_at`]): a feed reading on would pass from one
    /// history into another.
    restarts: AtomicU64,
    /// Readers of the history (backups) at work: no segment goes meanwhile.
    holds: AtomicUsize,
    /// The newest retired segment whose fsync completed (those found at
    /// open count: the replay fsyncs what it replays).
    synced_retired: AtomicU64,
    /// What of the log stays in the page cache once on disk.
    window: Arc<PageWindow>,
}

/// While it lives, no segment of the journal is removed.
pub struct HistoryHold<'j>(&'j Journal);

impl Drop for HistoryHold<'_> {
    fn drop(&mut self) {
        self.0.holds.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Journal {
    /// Starts segment `number`, newer than any in `dir`, and takes over
    /// the segments already there.
    pub fn create(
        dir: &Path,
        number: u64,
        io: Arc<dyn Io>,
        cache_bytes: u64,
    ) -> io::Result<Journal> {
        let mut older = BTreeMap::new();
        for (found, path) in segments(dir)? {
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            let metadata = file.metadata()?;
            let modified = metadata.modified()?;
            // A segment a crash (or a clean stop) left current may still
            // hold its reservation past its end. Giving it back marks the
            // file modified, and retention counts from the last append:
            // that time is put back.
            // Blocks past those its length needs (a reservation).
            let whole_blocks = metadata.len().next_multiple_of(metadata.blksize().max(1));
            if metadata.blocks() * 512 > whole_blocks {
                release_reserved(&file, found, metadata.len());
                if let Err(error) = file.set_modified(modified) {
                    tracing::warn!(%error, segment = found, "cannot keep a segment's age");
                }
            }
            let age = SegmentAge {
                number: found,
                len: metadata.len(),
                modified,
            };
            older.insert(found, age);
        }
        let newest = older.last_key_value().map_or(0, |(&number, _)| number);
        Ok(Journal {
            dir: dir.to_path_buf(),
            io,
            current: Mutex::new(Segment::create(dir, number)?),
            older: Mutex::new(older),
            open: Mutex::new(HashMap::new()),
            last_lsn: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            holds: AtomicUsize::new(0),
            synced_retired: AtomicU64::new(newest),
            window: Arc::new(PageWindow::new(cache_bytes)),
        })
    }

    /// The newest entry appended: the next group's entries follow it.
    pub fn last_lsn(&self) -> u64 {
        self.last_lsn.load(Ordering::Acquire)
    }

    /// Numbers entries on after `last` (at open, after the replay found it).
    pub fn resume_after(&self, last: LogPosition) {
        let mut current = self.current.lock();
        current.last = current.last.max(last);
        self.last_lsn.store(current.last.lsn, Ordering::Release);
    }

    /// Numbers entries on after `at`, whatever came before (a replica's
    /// new log after a snapshot).
    pub fn restart_at(&self, at: LogPosition) {
        let mut current = self.current.lock();
        current.last = at;
        self.last_lsn.store(at.lsn, Ordering::Release);
        self.restarts.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times the numbering started over since the open.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Acquire)
    }

    /// Keeps every segment until the hold is dropped (a backup copies them).
    /// Taken under the lock [`Journal::remove`] deletes under: a removal
    /// decided before the hold either ends before it or does not happen.
    pub fn hold_history(&self) -> HistoryHold<'_> {
        let _open = self.open.lock();
        self.holds.fetch_add(1, Ordering::AcqRel);
        HistoryHold(self)
    }

    /// Whether a [`HistoryHold`] is alive.
    pub fn history_held(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 0
    }

    /// The segment being appended to, how far, and its newest entry: all
    /// records below that length are whole.
    pub fn current_end(&self) -> (u64, u64, LogPosition) {
        let current = self.current.lock();
        (current.number, current.len, current.last)
    }

    /// Appends one group's records, whose last entry is `last` (none for
    /// the compactor's moves); returns where the group starts. A failed
    /// append leaves the segment as it was (a partial group is cut off),
    /// or returns the error of the cut.
    pub fn append(&self, group: &[u8], last: Option<LogPosition>) -> io::Result<Location> {
        let mut segment = self.current.lock();
        let at = segment.len;
        let end = at + group.len() as u64;
        if end > segment.reserved {
            segment.reserved = reserve(&segment.file, &self.dir, segment.reserved, end);
        }
        if let Err(error) = self.io.write_log(&segment.file, group, at) {
            segment.file.set_len(at)?;
            return Err(error);
        }
        segment.len += group.len() as u64;
        if let Some(last) = last {
            segment.last = last;
            self.last_lsn.store(last.lsn, Ordering::Release);
        }
        Ok(Location::new(segment.number, at))
    }

    /// fsyncs the segment being appended to.
    pub fn sync(&self) -> io::Result<()> {
        let (number, file, len) = self.current_file();
        self.sync_segment(number, &file, len)
    }

    /// The segment being appended to, its file and length.
    fn current_file(&self) -> (u64, Arc<File>, u64) {
        let current = self.current.lock();
        (current.number, current.file.clone(), current.len)
    }

    /// fsyncs a retired segment: it may hold acknowledged writes the syncer
    /// has not reached.
    pub fn sync_retired(&self, retired: &Retired) -> io::Result<()> {
        self.sync_segment(retired.number, &retired.file, retired.len)?;
        (self.synced_retired).fetch_max(retired.number, Ordering::AcqRel);
        Ok(())
    }

    /// fsyncs the current segment and every retired one whose own fsync
    /// has not completed (the applier fsyncs a segment after it switched
    /// away from it): everything appended so far is then durable.
    pub fn sync_everything(&self) -> io::Result<()> {
        let (number, file, len) = self.current_file();
        let synced = self.synced_retired.load(Ordering::Acquire);
        let retired: Vec<SegmentAge> = (self.older.lock().values())
            .filter(|age| age.number > synced && age.number < number)
            .copied()
            .collect();
        for age in retired {
            match self.file(age.number) {
                Ok(file) => self.sync_segment(age.number, &file, age.len)?,
                // Removed: it was applied, so fsynced, first.
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
        }
        // Every segment before the current one is durable now.
        (self.synced_retired).fetch_max(number.saturating_sub(1), Ordering::AcqRel);
        self.sync_segment(number, &file, len)
    }

    fn sync_segment(&self, number: u64, file: &Arc<File>, len: u64) -> io::Result<()> {
        self.io.sync_log(file)?;
        self.window.synced(number, file, len);
        Ok(())
    }

    /// Creates the segment that follows the current one, for
    /// [`switch`](Self::switch): creating it (and making its name durable)
    /// takes time, switching does not.
    pub fn prepare(&self) -> io::Result<NextSegment> {
        let number = self.current.lock().number + 1;
        Segment::create(&self.dir, number).map(NextSegment)
    }

    /// Appends go to `next` from now on; returns the segment before it.
    pub fn switch(&self, mut next: NextSegment) -> Retired {
        let mut current = self.current.lock();
        next.0.last = current.last;
        let old = std::mem::replace(&mut *current, next.0);
        let age = SegmentAge {
            number: old.number,
            len: old.len,
            modified: SystemTime::now(),
        };
        // Still under `current`'s lock: `bytes` sees the segment in one place.
        self.older.lock().insert(old.number, age);
        drop(current);
        old
    }

    /// The segments before the current one, oldest first, with their sizes.
    pub fn older_segments(&self) -> Vec<SegmentAge> {
        self.older.lock().values().copied().collect()
    }

    /// Deletes segment `number`: nothing in LMDB points into it, on disk.
    /// Not while a [`HistoryHold`] lives: then it is kept (`Ok(false)`).
    pub fn remove(&self, number: u64) -> io::Result<bool> {
        // Under the lock that opens files, so no reader caches it after.
        let mut open = self.open.lock();
        if self.history_held() {
            return Ok(false);
        }
        open.remove(&number);
        self.window.forget(number);
        fs::remove_file(segment_path(&self.dir, number))?;
        drop(open);
        self.older.lock().remove(&number);
        Ok(true)
    }

    /// Forgets an older segment whose file the open set aside.
    pub fn forget(&self, number: u64) {
        self.open.lock().remove(&number);
        self.window.forget(number);
        self.older.lock().remove(&number);
    }

    /// Bytes in the segment files.
    pub fn bytes(&self) -> u64 {
        // Under the current segment's lock, as `switch` moves it to `older`.
        let current = self.current.lock();
        current.len + self.older.lock().values().map(|s| s.len).sum::<u64>()
    }

    /// The stored record (header and value, as LMDB would hold it) of
    /// `key`'s put or move that `pointer` leads to. A segment deleted since
    /// the caller found the pointer is `NotFound`: look again. A record that
    /// is not what the pointer says is `InvalidData`.
    pub fn read_stored(&self, key: &[u8], pointer: &LogPointer) -> io::Result<Stored> {
        read_stored(&*self.io, &*self.file(pointer.at.segment)?, key, pointer)
    }

    fn file(&self, number: u64) -> io::Result<Arc<File>> {
        let current = self.current.lock();
        if current.number == number {
            return Ok(current.file.clone());
        }
        drop(current);
        let mut open = self.open.lock();
        if let Some(file) = open.get(&number) {
            return Ok(file.clone());
        }
        let file = File::open(segment_path(&self.dir, number))?;
        // Reads of values land anywhere: no readahead (one value, one read).
        let _ = nix::fcntl::posix_fadvise(file.as_raw_fd(), 0, 0, POSIX_FADV_RANDOM);
        let file = Arc::new(file);
        // Past the bound, any one goes: reopening a segment costs one open call.
        if let Some(&victim) = open.keys().next().filter(|_| open.len() >= OPEN_SEGMENTS) {
            open.remove(&victim);
        }
        open.insert(number, file.clone());
        Ok(file)
    }
}

/// Reads `key`'s put or move that `pointer` leads to in its segment's
/// `file`, checking it is that.
pub fn read_stored(
    io: &dyn Io,
    file: &File,
    key: &[u8],
    pointer: &LogPointer,
) -> io::Result<Stored> {
    let (at, frame_len) = (pointer.at, pointer.frame_len as usize);
    let corrupt = || io::Error::new(io::ErrorKind::InvalidData, "corrupt value-log record");
    if frame_len > MAX_FRAME {
        return Err(corrupt());
    }
    let mut frame = vec![0; frame_len];
    io.read_log(file, &mut frame, at.offset)?;
    let (record, len) = decode(&frame).ok_or_else(corrupt)?;
    let record = match record {
        Record::Put { key: found, record }
        | Record::Move {
            key: found, record, ..
        } if len == frame_len && found == key && record.len() == pointer.record_len() => record,
        _ => return Err(corrupt()),
    };
    // A put's or a move's record ends its frame.
    let start = frame_len - record.len();
    Ok(Stored { frame, start })
}

/// A stored record read from the value log: the end of its frame.
pub struct Stored {
    frame: Vec<u8>,
    start: usize,
}

impl Stored {
    pub fn record(&self) -> &[u8] {
        &self.frame[self.start..]
    }

    pub fn record_mut(&mut self) -> &mut [u8] {
        &mut self.frame[self.start..]
    }
}

/// Reserves space from `from` to a step past `needed`, without changing
/// the file's size (so a replay still ends at its last record); returns
/// where the reservation ends. Only an optimisation: on a file system
/// without room or support the appends allocate as they go, and the next
/// attempt comes a step later, not at every append.
fn reserve(file: &File, dir: &Path, from: u64, needed: u64) -> u64 {
    let step = PREALLOCATE.min(free_space(dir).unwrap_or(0) / 16) & !0xfffff;
    let end = needed.max(from) + step.max(1 << 20);
    if step > 0 {
        let flags = nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE;
        let _ = nix::fcntl::fallocate(file.as_raw_fd(), flags, from as i64, (end - from) as i64);
    }
    end
}

impl Segment {
    /// Gives back the reserved space it did not use (once retired).
    pub fn release_unused(&self) {
        release_reserved(&self.file, self.number, self.len);
    }

    fn create(dir: &Path, number: u64) -> io::Result<Segment> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(segment_path(dir, number))?;
        let reserved = reserve(&file, dir, 0, 0);
        // The new name must survive a power loss with the writes in it.
        File::open(dir)?.sync_all()?;
        Ok(Segment {
            number,
            last: LogPosition::default(),
            file: Arc::new(file),
            len: 0,
            reserved,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    use crate::disk::io::OsIo;
    use crate::disk::log_format::{encode, put_len};

    /// Entry `lsn` of a group appended at `lsn` µs.
    fn lsn(lsn: u64) -> LogPosition {
        LogPosition { lsn, micros: lsn }
    }

    #[test]
    fn a_segment_is_named_by_hex_digits_only() {
        assert_eq!(segment_number("journal-0000000000000003.log"), Some(3));
        assert_eq!(segment_number("journal-1F.log"), Some(31));
        for name in [
            "journal-+3.log",
            "journal-.log",
            "journal- 3.log",
            "journal-3.log.tmp",
        ] {
            assert_eq!(segment_number(name), None, "{name}");
        }
    }

    #[test]
    fn appends_reserve_space_a_step_ahead_and_a_retired_segment_gives_back_the_rest() {
        use std::os::unix::fs::MetadataExt;
        let dir = crate::disk::test_dirs::on_disk();
        if free_space(dir.path()).unwrap_or(0) < 16 * PREALLOCATE {
            eprintln!("skipped: the file system has under 1 GiB free");
            return;
        }
        let allocated = |n: u64| fs::metadata(segment_path(dir.path(), n)).unwrap().blocks() * 512;
        let journal = Journal::create(dir.path(), 1, Arc::new(OsIo), 1 << 30).unwrap();
        assert!(allocated(1) >= PREALLOCATE, "a new segment is reserved");
        // Appends past the first step reserve the next one before writing.
        let mut group = Vec::new();
        let value = vec![7u8; 1 << 20];
        encode(
            &mut group,
            Record::Put {
                key: b"k",
                record: &value,
            },
        );
        let mut len = 0;
        while len <= PREALLOCATE {
            journal.append(&group, Some(lsn(1))).unwrap();
            len += group.len() as u64;
        }
        assert!(allocated(1) >= len + PREALLOCATE - (1 << 20));
        let retired = journal.switch(journal.prepare().unwrap());
        retired.release_unused();
        assert_eq!(
            fs::metadata(segment_path(dir.path(), 1)).unwrap().len(),
            len
        );
        assert!(
            allocated(1) < len + (1 << 20),
            "the unused reservation is given back"
        );
    }

    /// The records `replay` finds in segment `number` at `path`, each with
    /// its offset.
    fn replayed(path: &Path, number: u64) -> Vec<String> {
        let mut seen = Vec::new();
        replay(&OsIo, path, number, |record, at, _| {
            seen.push(format!("{}: {record:?}", at.offset));
            Ok::<_, io::Error>(())
        })
        .unwrap();
        seen
    }

    /// A group of puts from entry `first_lsn`, one of each length in
    /// `values`.
    fn group_of(first_lsn: u64, values: &[usize]) -> Vec<u8> {
        let mut bytes = Vec::new();
        let head = crate::disk::log_format::GroupHead {
            first_lsn,
            micros: first_lsn,
            origin: 1,
            entries: values.len() as u32,
        };
        encode(&mut bytes, Record::Group(head));
        for (i, &len) in values.iter().enumerate() {
            let (key, record) = ([b'a' + i as u8], vec![i as u8; len]);
            encode(
                &mut bytes,
                Record::Put {
                    key: &key,
                    record: &record,
                },
            );
        }
        bytes
    }

    /// Replays `path` as segment 3 through `io`: each record's offset,
    /// framed length and put's value length (-1 for other records), and
    /// the end.
    fn replay_puts(io: &dyn Io, path: &Path) -> (Vec<(u64, usize, i64)>, SegmentEnd) {
        let mut seen = Vec::new();
        let end = replay(io, path, 3, |record, at, framed| {
            let len = match record {
                Record::Put { record, .. } => record.len() as i64,
                _ => -1,
            };
            seen.push((at.offset, framed, len));
            Ok::<_, io::Error>(())
        })
        .unwrap();
        // In order and back to back.
        let mut next = 0;
        for &(offset, framed, _) in &seen {
            assert_eq!(offset, next);
            next += framed as u64;
        }
        (seen, end)
    }

    #[test]
    fn a_group_larger_than_the_read_buffer_is_handed_over_whole_and_a_torn_one_not() {
        let mut segment = group_of(1, &[10]);
        // Three entries of 600 KiB: read again past the 1 MiB buffer.
        segment.extend(group_of(2, &[600 << 10; 3]));
        segment.extend(group_of(5, &[20, 30]));
        let whole = segment.len() as u64;
        // Its head counts two entries; one came.
        let torn = group_of(7, &[40, 50]);
        segment.extend(&torn[..torn.len() - 60]);
        let dir = tempfile::tempdir().unwrap();
        let path = segment_path(dir.path(), 3);
        fs::write(&path, &segment).unwrap();
        let (seen, end) = replay_puts(&OsIo, &path);
        let lens: Vec<i64> = seen.iter().map(|&(_, _, len)| len).collect();
        let big = 600 << 10;
        assert_eq!(lens, [-1, 10, -1, big, big, big, -1, 20, 30]);
        let size = segment.len() as u64;
        assert_eq!(
            end,
            SegmentEnd {
                size,
                whole_to: whole
            }
        );
    }

    /// Cuts the segment at `path` back to `to` when a read starts at `at`.
    #[derive(Debug)]
    struct CutBack {
        path: PathBuf,
        at: u64,
        to: u64,
    }

    impl Io for CutBack {
        fn read_log(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
            if offset == self.at {
                OpenOptions::new()
                    .write(true)
                    .open(&self.path)?
                    .set_len(self.to)?;
            }
            file.read_exact_at(buf, offset)
        }
    }

    #[test]
    fn a_segment_cut_back_behind_a_group_read_again_ends_after_it() {
        let mut segment = group_of(1, &[10]);
        let big_group_at = segment.len() as u64;
        segment.extend(group_of(2, &[600 << 10; 3]));
        let cut_to = segment.len() as u64;
        // Bytes a failed append wrote, cut back while the replay runs:
        // when it reads the large group again from its head (past the
        // first buffer, the only read that starts there).
        segment.extend(group_of(5, &[700 << 10]));
        let dir = tempfile::tempdir().unwrap();
        let path = segment_path(dir.path(), 3);
        fs::write(&path, &segment).unwrap();
        let cut = CutBack {
            path: path.clone(),
            at: big_group_at,
            to: cut_to,
        };
        let (seen, end) = replay_puts(&cut, &path);
        assert_eq!(seen.len(), 6, "both groups, heads included: {seen:?}");
        assert_eq!(fs::metadata(&path).unwrap().len(), cut_to, "it was cut");
        let size = segment.len() as u64;
        assert_eq!(
            end,
            SegmentEnd {
                size,
                whole_to: cut_to
            }
        );
    }

    #[test]
    fn a_segment_cut_back_under_a_read_ends_at_its_last_whole_group_left() {
        let mut segment = Vec::new();
        let mut ends = Vec::new();
        for lsn in 1..=15 {
            segment.extend(group_of(lsn, &[100 << 10]));
            ends.push(segment.len() as u64);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = segment_path(dir.path(), 3);
        fs::write(&path, &segment).unwrap();
        // Cut inside group 13 when the reader asks for its second MiB.
        let cut = CutBack {
            path: path.clone(),
            at: 1 << 20,
            to: ends[11] + 1000,
        };
        let (seen, end) = replay_puts(&cut, &path);
        assert_eq!(seen.len(), 2 * 12, "twelve groups, each a head and a put");
        let size = segment.len() as u64;
        assert_eq!(
            end,
            SegmentEnd {
                size,
                whole_to: ends[11]
            }
        );
    }

    #[test]
    fn segments_rotate_replay_and_are_removed_once_applied() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::create(dir.path(), 7, Arc::new(OsIo), 1 << 30).unwrap();
        let mut group = Vec::new();
        encode(&mut group, Record::Remove { key: b"a" });
        journal.append(&group, Some(lsn(1))).unwrap();
        let retired = journal.switch(journal.prepare().unwrap());
        journal.sync_retired(&retired).unwrap();
        assert_eq!((retired.number, retired.last), (7, lsn(1)));
        let mut second = Vec::new();
        encode(&mut second, Record::Flush(5));
        journal.append(&second, Some(lsn(2))).unwrap();
        let mut third = Vec::new();
        encode(&mut third, Record::Remove { key: b"a" });
        journal.append(&third, None).unwrap();
        assert_eq!(journal.last_lsn(), 2, "a move is no entry");
        journal.sync().unwrap();
        let found = segments(dir.path()).unwrap();
        assert_eq!(
            found.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![7, 8]
        );
        let flush_len = second.len();
        assert_eq!(
            replayed(&found[1].1, 8),
            [
                "0: Flush(5)".to_string(),
                format!("{flush_len}: Remove {{ key: [97] }}")
            ]
        );
        // A torn tail (a length that claims more than the file holds) ends
        // the replay after the intact records.
        let torn = dir.path().join("torn.log");
        let mut bytes = fs::read(&found[1].1).unwrap();
        bytes.extend_from_slice(&third[..FRAME + 1]);
        fs::write(&torn, &bytes).unwrap();
        assert_eq!(replayed(&torn, 8).len(), 2);
        assert_eq!(journal.bytes(), (2 * group.len() + second.len()) as u64);
        let older = journal.older_segments();
        assert_eq!(
            older.iter().map(|s| (s.number, s.len)).collect::<Vec<_>>(),
            vec![(7, group.len() as u64)]
        );
        let hold = journal.hold_history();
        assert!(
            !journal.remove(7).unwrap(),
            "a held history keeps its segments"
        );
        assert_eq!(segments(dir.path()).unwrap().len(), 2);
        drop(hold);
        assert!(journal.remove(7).unwrap());
        assert_eq!(segments(dir.path()).unwrap().len(), 1);
        assert_eq!(journal.bytes(), (group.len() + second.len()) as u64);
        assert!(journal.older_segments().is_empty());

        let retired = journal.switch(journal.prepare().unwrap());
        assert_eq!(retired.number, 8);
        let mut fourth = Vec::new();
        encode(&mut fourth, Record::Flush(9));
        let at = journal.append(&fourth, Some(lsn(3))).unwrap();
        assert_eq!((at.segment, at.offset), (9, 0));
        let nine = segment_path(dir.path(), 9);
        assert_eq!(replayed(&nine, 9), ["0: Flush(9)"]);
    }

    /// A pointer to a `frame_len`-byte frame at `at` holding a record of
    /// `record_len` bytes (a 17-byte header and the value).
    fn pointer(at: Location, frame_len: usize, record_len: u32) -> LogPointer {
        LogPointer {
            at,
            frame_len: frame_len as u32,
            value_len: record_len.wrapping_sub(crate::disk::record::HEADER_LEN as u32),
        }
    }

    #[test]
    fn a_value_is_read_back_where_its_put_or_move_landed() {
        // Records as LMDB stores them: a header (here 17 zeros), the value.
        let stored = |value: &[u8]| {
            let mut record = vec![0; 17];
            record.extend_from_slice(value);
            record
        };
        let (first, moved_value) = (stored(b"first"), stored(b"moved"));
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::create(dir.path(), 1, Arc::new(OsIo), 1 << 30).unwrap();
        let mut group = Vec::new();
        encode(&mut group, Record::Remove { key: b"x" });
        let put_at = group.len();
        encode(
            &mut group,
            Record::Put {
                key: b"k",
                record: &first,
            },
        );
        let start = journal.append(&group, Some(lsn(2))).unwrap();
        assert_eq!((start.segment, start.offset), (1, 0));
        let put = Location {
            segment: 1,
            offset: put_at as u64,
        };
        let put_frame = put_len(b"k", first.len());
        let read = |key: &[u8], at, frame_len, record_len| {
            journal.read_stored(key, &pointer(at, frame_len, record_len))
        };
        assert_eq!(read(b"k", put, put_frame, 22).unwrap().record(), &first[..]);
        // A remove is no value; a wrong length, key or value length is no
        // record; a length beyond reason is not even read.
        assert!(read(b"x", start, put_at, 0).is_err());
        assert!(read(b"k", put, put_frame - 1, 22).is_err());
        assert!(read(b"j", put, put_frame, 22).is_err());
        assert!(read(b"k", put, put_frame, 21).is_err());
        let huge = read(b"k", put, u32::MAX as usize, 22).err().unwrap();
        assert_eq!(huge.kind(), io::ErrorKind::InvalidData);

        // After a switch the old segment is read from its file, and a move
        // in the new one reads as its record.
        let retired = journal.switch(journal.prepare().unwrap());
        assert_eq!(retired.number, 1);
        retired.release_unused();
        let mut moves = Vec::new();
        encode(
            &mut moves,
            Record::Move {
                key: b"k",
                from: put,
                record: &moved_value,
            },
        );
        let moved = journal.append(&moves, None).unwrap();
        assert_eq!(moved.segment, 2);
        assert_eq!(read(b"k", put, put_frame, 22).unwrap().record(), &first[..]);
        // `moves` is the one record.
        let move_frame = moves.len();
        assert_eq!(
            read(b"k", moved, move_frame, 22).unwrap().record(),
            &moved_value[..]
        );
        journal.remove(1).unwrap();
        let gone = read(b"k", put, put_frame, 22).err().unwrap();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
    }
}
