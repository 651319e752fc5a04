//! Replication's master side: the update log read as it grows, from a
//! replica's position on, one group at a time. Each group goes out as the
//! journal's own records (head, then entries), as the segment holds them
//! with their checksums: every put in the log carries its value
//! (a touch journals the item whole), so a group needs no other segment.
//! Moves are the compactor's, not changes, and are not sent.
//!
//! A group is read only once the journal says it is whole (its first LSN
//! is at most the journal's last), so a group being appended is never sent
//! half.

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::disk::history::position::{find_group, locate, Place};
use crate::disk::journal;
use crate::disk::log_format::{self, GroupHead, Record};
use crate::disk::retention::SegmentAge;
use crate::disk::Inner;
use crate::log_position::LogPosition;
use crate::replication::{FedGroup, FeedRefused, LogFeed};

/// The longest a waiting feed sleeps before it looks at the journal again:
/// every append wakes it sooner (an append that decides no write, a flush
/// alone, does not).
const POLL: Duration = Duration::from_millis(50);
/// Bytes read from a segment at once.
const READ_CHUNK: usize = 1 << 20;

/// The segments that attached replicas still need, by feed: retention
/// keeps them (`compactor.rs`), up to `--log-retention-max`.
#[derive(Default)]
pub(in crate::disk) struct ReplicaHolds {
    next_id: AtomicU64,
    /// (feed id, the oldest segment it still needs)
    held: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl ReplicaHolds {
    fn add(&self, segment: u64) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.held.lock().push((id, segment));
        id
    }

    fn set(&self, id: u64, segment: u64) {
        if let Some(held) = self.held.lock().iter_mut().find(|(found, _)| *found == id) {
            held.1 = segment;
        }
    }

    fn remove(&self, id: u64) {
        self.held.lock().retain(|(found, _)| *found != id);
    }

    /// Takes out of `segments` (oldest first) those attached replicas
    /// still need, unless that keeps more than `limit` bytes: then every
    /// hold goes, and those replicas will resynchronize.
    pub(in crate::disk) fn keep(&self, segments: &mut Vec<SegmentAge>, limit: u64) {
        let mut held = self.held.lock();
        let Some(needed) = held.iter().map(|(_, segment)| *segment).min() else {
            return;
        };
        let kept: u64 = segments
            .iter()
            .filter(|segment| segment.number >= needed)
            .map(|segment| segment.len)
            .sum();
        if kept > limit {
            tracing::warn!(
                kept,
                limit,
                "replicas lag past --log-retention-max: they will resynchronize"
            );
            held.clear();
        } else {
            segments.retain(|segment| segment.number < needed);
        }
    }
}

/// A replica's feed: where it reads, and what it sent and the replica has
/// not acknowledged.
pub(super) struct Feed {
    inner: Arc<Inner>,
    segment: u64,
    file: File,
    /// Where the next record starts.
    offset: u64,
    /// Bytes of the segment read ahead, from `buffer_at`: the first
    /// `filled` (the rest is room, kept so reads need not zero it again).
    buffer: Vec<u8>,
    filled: usize,
    buffer_at: u64,
    hold: u64,
    /// Groups sent and not acknowledged: last LSN and segment.
    unacknowledged: VecDeque<(u64, u64)>,
    /// The first LSN the next group must have (`None` before the first
    /// group of a feed that starts at a time). A group numbered past it
    /// follows a damaged record, and the feed says so instead of sending
    /// the log with a hole in it.
    next_lsn: Option<u64>,
    /// The journal's restarts when the feed began: a log started over
    /// (this server loaded its own master's snapshot) is another history.
    restarts: u64,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.inner.replica_holds.remove(self.hold);
    }
}

impl Feed {
    /// A feed of the groups after `after`, or why there is none: the log
    /// no longer holds them (retention), or `after` is not a point of this
    /// log (another history, or one the replica has and the master not).
    pub(super) fn open(inner: &Arc<Inner>, after: LogPosition) -> Result<Feed, FeedRefused> {
        // Promoted with a snapshot cut off (`replicaof no one force`): its
        // items are in LMDB, not in the log, so only a snapshot has them.
        if inner.base_incomplete.load(Ordering::Acquire) {
            return Err(FeedRefused::Gone(
                "this server's own snapshot from its master is incomplete".to_string(),
            ));
        }
        Self::holding_the_log(inner, |hold| Self::open_held(inner, after, hold))
    }

    /// Runs `find` (which looks for where a feed starts) with a hold that
    /// keeps every segment meanwhile; the feed it returns takes the hold
    /// over, a refusal lets it go.
    fn holding_the_log(
        inner: &Arc<Inner>,
        find: impl FnOnce(u64) -> Result<Feed, FeedRefused>,
    ) -> Result<Feed, FeedRefused> {
        // Read before `find` looks: a restart meanwhile ends the feed.
        let restarts = inner.journal.restarts();
        let hold = inner.replica_holds.add(0);
        let found = find(hold).inspect_err(|_| inner.replica_holds.remove(hold));
        found.map(|mut feed| {
            feed.restarts = restarts;
            feed
        })
    }

    fn open_held(inner: &Arc<Inner>, after: LogPosition, hold: u64) -> Result<Feed, FeedRefused> {
        let (current, current_len, last) = inner.journal.current_end();
        if after.lsn > last.lsn {
            return Err(FeedRefused::Diverged(format!(
                "the replica is at LSN {}, past this server's last entry {}",
                after.lsn, last.lsn
            )));
        }
        let next_lsn = Some(after.lsn + 1);
        if after == last {
            return Self::at(inner, (current, current_len), next_lsn, hold).map_err(io_refused);
        }
        let segments = journal::segments(&inner.config.dir).map_err(io_refused)?;
        let (number, next) =
            match locate(&*inner.config.io, &segments, after, last.lsn).map_err(io_refused)? {
                Place::Found { segment, next } => (segment, next),
                Place::Gone => {
                    return Err(FeedRefused::Gone(format!(
                        "this server's log no longer holds LSN {}",
                        after.lsn + 1
                    )))
                }
                Place::Diverged => {
                    return Err(FeedRefused::Diverged(format!(
                        "LSN {} at {} µs is not the end of a group of this server's log",
                        after.lsn, after.micros
                    )))
                }
            };
        // Segments nothing points into go before older ones that hold
        // values: every one from the start on must still be there.
        let present = |n: u64| {
            segments
                .binary_search_by_key(&n, |(found, _)| *found)
                .is_ok()
        };
        if let Some(gone) = (number..current).find(|&n| !present(n)) {
            return Err(FeedRefused::Gone(format!(
                "this server's log no longer holds segment {gone}, after LSN {}",
                after.lsn
            )));
        }
        Self::at(inner, (number, next), next_lsn, hold).map_err(io_refused)
    }

    /// A feed from the group after `at`, a position of this server's own
    /// LMDB (a snapshot's): it ends a group, so nothing is checked.
    pub(super) fn open_at_group_after(inner: &Arc<Inner>, at: LogPosition) -> io::Result<Feed> {
        // Each start holds the segment it starts in.
        let feed_at = |segment, offset| {
            let hold = inner.replica_holds.add(segment);
            Self::at(inner, (segment, offset), Some(at.lsn + 1), hold)
        };
        let (current, current_len, last) = inner.journal.current_end();
        if at.lsn >= last.lsn {
            return feed_at(current, current_len);
        }
        for (number, path) in journal::segments(&inner.config.dir)?.iter().rev() {
            // The group after `at`, or the first group, if it is before.
            let mut first_before = None;
            let after = find_group(&*inner.config.io, path, *number, |group| {
                first_before.get_or_insert(group.head.first_lsn <= at.lsn);
                group.head.first_lsn == at.lsn + 1
            })?;
            if let Some(group) = after {
                return feed_at(*number, group.offset);
            }
            if first_before == Some(true) {
                break;
            }
        }
        Err(io::Error::other(format!(
            "the log lacks the group after LSN {}",
            at.lsn
        )))
    }

    /// A feed from the first group appended at or after `micros`, or from
    /// the oldest group the log holds.
    pub(super) fn open_since(inner: &Arc<Inner>, micros: u64) -> Result<Feed, FeedRefused> {
        Self::holding_the_log(inner, |hold| {
            let (current, current_len, _) = inner.journal.current_end();
            for (number, path) in journal::segments(&inner.config.dir).map_err(io_refused)? {
                let io = &*inner.config.io;
                let since = find_group(io, &path, number, |group| group.head.micros >= micros);
                if let Some(group) = since.map_err(io_refused)? {
                    return Self::at(inner, (number, group.offset), None, hold).map_err(io_refused);
                }
            }
            Self::at(inner, (current, current_len), None, hold).map_err(io_refused)
        })
    }

    /// The feed from `offset` in `segment`, whose next group should start
    /// at `next_lsn`, keeping the log from there on with `hold`.
    fn at(
        inner: &Arc<Inner>,
        (segment, offset): (u64, u64),
        next_lsn: Option<u64>,
        hold: u64,
    ) -> io::Result<Feed> {
        inner.replica_holds.set(hold, segment);
        let restarts = inner.journal.restarts();
        let file = File::open(journal::segment_path(&inner.config.dir, segment))
            .inspect_err(|_| inner.replica_holds.remove(hold))?;
        Ok(Feed {
            hold,
            inner: inner.clone(),
            segment,
            file,
            offset,
            buffer: Vec::new(),
            filled: 0,
            buffer_at: offset,
            unacknowledged: VecDeque::new(),
            next_lsn,
            restarts,
        })
    }

    /// The framed length of the record at `offset`, if it is whole (`None`:
    /// nothing, yet, at this place).
    fn look(&mut self) -> io::Result<Option<usize>> {
        let mut reads = 0;
        loop {
            let start = (self.offset - self.buffer_at) as usize;
            let available = &self.buffer[start.min(self.filled)..self.filled];
            // What to read for the record to be whole, if it is not yet.
            let want = if available.len() >= log_format::FRAME {
                let len = u32::from_le_bytes(available[..4].try_into().expect("4 bytes")) as usize;
                let framed = log_format::FRAME + len;
                (available.len() < framed).then(|| framed.max(READ_CHUNK))
            } else {
                Some(READ_CHUNK)
            };
            match want {
                // Two reads at most: then what is there is decoded as it is.
                Some(want) if reads < 2 => {
                    self.fill(want)?;
                    reads += 1;
                }
                _ => return Ok(log_format::decode(available).map(|(_, framed)| framed)),
            }
        }
    }

    /// Reads up to `want` bytes of the segment from `offset`.
    fn fill(&mut self, want: usize) -> io::Result<()> {
        // Never more than the segment holds now: a torn or damaged length
        // must not size the buffer (up to 4 GiB).
        let on_disk = self.file.metadata()?.len().saturating_sub(self.offset);
        let want = want.min(usize::try_from(on_disk).unwrap_or(usize::MAX));
        if self.buffer.len() < want {
            self.buffer.resize(want, 0);
        }
        let read =
            (self.inner.config.io).read_log(&self.file, &mut self.buffer[..want], self.offset);
        self.filled = match read {
            Ok(()) => want,
            // Cut back since its size was read (a failed append): nothing
            // new yet.
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(error) => return Err(error),
        };
        self.buffer_at = self.offset;
        Ok(())
    }

    /// The whole record of `framed` bytes at `offset`, as the segment holds it.
    fn raw_at(&self, framed: usize) -> &[u8] {
        let start = (self.offset - self.buffer_at) as usize;
        &self.buffer[start..start + framed]
    }

    /// The record `look` found whole and checked at `offset`.
    fn record_at(&self, framed: usize) -> Record<'_> {
        log_format::decode_checked(self.raw_at(framed))
            .expect("looked at")
            .0
    }

    /// Goes on to the next segment once this one is retired and read to
    /// its end. Returns false when there is none yet (true also when the
    /// retired one turned out to hold more).
    fn next_segment(&mut self) -> io::Result<bool> {
        if self.segment >= self.inner.journal.current_end().0 {
            return Ok(false);
        }
        // Retired: nothing more comes to it, but a group may have been
        // appended between the read that found its end and the switch.
        self.filled = 0;
        if self.look()?.is_some() {
            return Ok(true);
        }
        let next = self.segment + 1;
        self.file = File::open(journal::segment_path(&self.inner.config.dir, next))?;
        self.segment = next;
        self.offset = 0;
        self.filled = 0;
        self.buffer_at = 0;
        if self.unacknowledged.is_empty() {
            self.inner.replica_holds.set(self.hold, next);
        }
        Ok(true)
    }

    /// The group whose head is at `offset`, with its entries; `None` for a
    /// head without all it counts: a kill or a power cut tore them off (a
    /// write cut short), the replay took none of them, and the first group
    /// after the restart has the same first LSN.
    fn read_group(&mut self, head: GroupHead, head_len: usize) -> io::Result<Option<FedGroup>> {
        if let Some(next) = self.next_lsn.filter(|&next| head.first_lsn < next) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the update log numbers LSN {} again after {}, at offset {} of segment {}",
                    head.first_lsn,
                    next - 1,
                    self.offset,
                    self.segment
                ),
            ));
        }
        if let Some(next) = self.next_lsn.filter(|&next| head.first_lsn > next) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the update log lacks LSNs {next} to {}: a record before offset {} of segment {} is damaged",
                    head.first_lsn - 1,
                    self.offset,
                    self.segment
                ),
            ));
        }
        let mut out = self.raw_at(head_len).to_vec();
        self.offset += head_len as u64;
        let mut entries = 0;
        while entries < head.entries {
            let Some(framed) = self.look()? else {
                break;
            };
            if !self.record_at(framed).is_entry() {
                break;
            }
            out.extend_from_slice(self.raw_at(framed));
            entries += 1;
            self.offset += framed as u64;
        }
        if entries < head.entries {
            return Ok(None);
        }
        let last_lsn = head.last().lsn;
        self.next_lsn = Some(last_lsn + 1);
        self.unacknowledged.push_back((last_lsn, self.segment));
        Ok(Some(FedGroup {
            origin: head.origin,
            bytes: out,
            last_lsn,
            micros: head.micros,
        }))
    }
}

impl LogFeed for Feed {
    /// The next whole group, or `None` if none came within `wait`.
    fn next_group(&mut self, wait: Duration) -> io::Result<Option<FedGroup>> {
        let deadline = Instant::now() + wait;
        loop {
            if self.inner.journal.restarts() != self.restarts {
                return Err(io::Error::other(
                    "this server's log started over from its master's snapshot",
                ));
            }
            // Read before looking: an append after it ends the wait below.
            let decided = self.inner.acks.decided();
            let bound = self.inner.journal.last_lsn();
            match self.look()? {
                Some(framed) => match self.record_at(framed) {
                    Record::Group(head) if head.first_lsn <= bound => {
                        match self.read_group(head, framed)? {
                            Some(group) => return Ok(Some(group)),
                            None => continue,
                        }
                    }
                    Record::Group(_) => {}
                    // Moves, and anything before the first head.
                    _ => {
                        self.offset += framed as u64;
                        continue;
                    }
                },
                None => {
                    if self.next_segment()? {
                        continue;
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.inner.acks.wait(decided + 1, POLL.min(deadline - now));
        }
    }

    fn acknowledged(&mut self, lsn: u64) {
        while self
            .unacknowledged
            .front()
            .is_some_and(|(last, _)| *last <= lsn)
        {
            self.unacknowledged.pop_front();
        }
        let oldest = self
            .unacknowledged
            .front()
            .map_or(self.segment, |(_, segment)| *segment);
        self.inner.replica_holds.set(self.hold, oldest);
    }

    fn last_position(&self) -> LogPosition {
        self.inner.journal.current_end().2
    }
}

fn io_refused(error: io::Error) -> FeedRefused {
    FeedRefused::Gone(format!("reading the log: {error}"))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::disk::{DiskConfig, DiskStore};
    use crate::{AckFence, Store, StoreCommand, StoreMode};

    #[test]
    fn replicas_keep_the_segments_they_need_up_to_the_limit_and_past_it_none() {
        let segment = |number| SegmentAge {
            number,
            len: 100,
            modified: std::time::SystemTime::UNIX_EPOCH,
        };
        let numbers = |segments: &[SegmentAge]| -> Vec<u64> {
            segments.iter().map(|segment| segment.number).collect()
        };
        let holds = ReplicaHolds::default();
        let mut segments: Vec<_> = (1..=5).map(segment).collect();
        holds.keep(&mut segments, 0);
        assert_eq!(numbers(&segments), [1, 2, 3, 4, 5], "no replica, no hold");
        let far = holds.add(4);
        holds.add(3);
        holds.keep(&mut segments, 300);
        assert_eq!(numbers(&segments), [1, 2], "3 to 5 are needed: 300 bytes");
        holds.remove(far);
        let mut segments: Vec<_> = (1..=5).map(segment).collect();
        holds.keep(&mut segments, 299);
        assert_eq!(numbers(&segments), [1, 2, 3, 4, 5], "past the limit");
        let mut segments: Vec<_> = (1..=5).map(segment).collect();
        holds.keep(&mut segments, u64::MAX);
        assert_eq!(numbers(&segments), [1, 2, 3, 4, 5], "the holds went");
    }

    #[test]
    fn a_damaged_length_does_not_size_the_read_buffer_past_the_segment() {
        let dir = tempfile::tempdir().unwrap();
        let store = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
        for key in [b"a", b"b", b"c"] {
            set(&store, key);
        }
        // A record head after the last group whose length claims 256 MiB
        // (a torn write, or damage), then a few bytes of body. Not 4 GiB:
        // a fill that regressed fails the assertion, not the machine.
        let (segment, _, _) = store.inner.journal.current_end();
        let path = journal::segment_path(dir.path(), segment);
        let mut damaged = (1u32 << 28).to_le_bytes().to_vec();
        damaged.extend_from_slice(&[0xab; 4 + 32]);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&damaged)
            .unwrap();
        // Each applied round starts a segment: the feed reads several, and
        // its buffer (kept from one to the next) fits the largest.
        let largest = journal::segments(dir.path())
            .unwrap()
            .iter()
            .map(|(_, path)| std::fs::metadata(path).unwrap().len())
            .max()
            .unwrap();

        let mut feed = Feed::open(&store.inner, LogPosition::default()).unwrap();
        let mut groups = 0;
        while feed.next_group(Duration::ZERO).unwrap().is_some() {
            groups += 1;
        }
        // The groups before the damage go out; the damaged record is never
        // whole, and reading it asked for no more than the file holds.
        assert_eq!(groups, 3);
        assert!(
            feed.buffer.len() as u64 <= largest,
            "a buffer of {} bytes for segments of at most {largest}",
            feed.buffer.len()
        );
    }

    fn set(store: &DiskStore, key: &[u8]) {
        let command = StoreCommand {
            mode: StoreMode::Set,
            key,
            value: b"value",
            flags: 0,
            expiry: 0,
            compare_cas: None,
            stale_if_older: false,
        };
        store.store(&command, &AckFence::default());
        store.wait_until_all_applied();
    }

    /// A store in `dir` holding `keys`, then `torn` (a group written in
    /// part, numbered from the next LSN) at the end of its segment, opened
    /// again; and that group's first LSN.
    fn reopened_after_a_torn_group(
        dir: &std::path::Path,
        keys: &[&[u8]],
        torn: impl FnOnce(u64) -> Vec<u8>,
    ) -> (DiskStore, u64) {
        let torn_lsn = {
            let store = DiskStore::open(DiskConfig::for_tests(dir)).unwrap();
            for key in keys {
                set(&store, key);
            }
            let (segment, _, _) = store.inner.journal.current_end();
            let torn_lsn = store.inner.journal.last_lsn() + 1;
            std::fs::OpenOptions::new()
                .append(true)
                .open(journal::segment_path(dir, segment))
                .unwrap()
                .write_all(&torn(torn_lsn))
                .unwrap();
            torn_lsn
        };
        (
            DiskStore::open(DiskConfig::for_tests(dir)).unwrap(),
            torn_lsn,
        )
    }

    /// The feed from the start sends every LSN up to `last` once, in order,
    /// and no entry of the torn group's `key`.
    fn feeds_every_lsn_once(store: &DiskStore, last: u64, key: Option<&[u8]>) {
        let mut feed = Feed::open(&store.inner, LogPosition::default()).unwrap();
        let mut next_lsn = 1;
        while let Some(group) = feed.next_group(Duration::ZERO).unwrap() {
            let (head, entries) = super::super::replica::group_of(&group.bytes).unwrap();
            assert_eq!(head.first_lsn, next_lsn);
            assert_eq!(group.last_lsn + 1, head.first_lsn + entries.len() as u64);
            let of_key =
                |entry: &Record<'_>| matches!(entry, Record::Put { key: k, .. } if Some(*k) == key);
            assert!(
                !entries.iter().any(of_key),
                "sent an entry of the torn group"
            );
            next_lsn = group.last_lsn + 1;
        }
        assert_eq!(next_lsn, last + 1, "every entry was sent");
    }

    /// A kill that cut a group's write short right after its head leaves a
    /// head without entries at the end of its segment, and the first group
    /// after the restart takes the same first LSN: the feed sends what a
    /// peer or replica can take, every LSN once, in order.
    #[test]
    fn a_group_head_torn_from_its_entries_is_not_sent() {
        let dir = tempfile::tempdir().unwrap();
        let (store, torn_lsn) = reopened_after_a_torn_group(dir.path(), &[b"a", b"b"], |lsn| {
            let mut torn = Vec::new();
            let head = GroupHead {
                first_lsn: lsn,
                micros: 1,
                origin: 1,
                entries: 1,
            };
            log_format::encode(&mut torn, Record::Group(head));
            // The first entry's length, and less of it than it claims.
            torn.extend_from_slice(&100u32.to_le_bytes());
            torn.extend_from_slice(&[0xab; 20]);
            torn
        });
        set(&store, b"c");
        assert_eq!(store.inner.journal.last_lsn(), torn_lsn);
        feeds_every_lsn_once(&store, torn_lsn, None);
    }

    /// A kill or a power cut that wrote a group only in part (here its
    /// head, which counts two entries, and one of them whole) leaves it out
    /// of the replay whole: none of its entries is taken, the next group
    /// takes its LSNs, and the feed sends every LSN once.
    #[test]
    fn a_group_written_in_part_is_taken_not_at_all() {
        use crate::disk::record::{Header, Keyed};
        let dir = tempfile::tempdir().unwrap();
        let (store, torn_lsn) = reopened_after_a_torn_group(dir.path(), &[b"a"], |lsn| {
            let mut torn = Vec::new();
            let head = GroupHead {
                first_lsn: lsn,
                micros: 1,
                origin: 1,
                entries: 2,
            };
            log_format::encode(&mut torn, Record::Group(head));
            let header = Header {
                flags: 0,
                expiry_unix: 0,
                cas: 1 << 40,
                bits: 0,
            };
            let item = Keyed::encode(b"half", &header, &[b"v"]);
            let put = Record::Put {
                key: b"half",
                record: item.record(),
            };
            log_format::encode(&mut torn, put);
            // The second entry's frame, cut short.
            torn.extend_from_slice(&100u32.to_le_bytes());
            torn
        });
        let mut found = false;
        store.get(
            b"half",
            &Default::default(),
            &AckFence::default(),
            &mut |_| found = true,
        );
        assert!(!found, "an entry of a group written in part was replayed");
        set(&store, b"b");
        assert_eq!(store.inner.journal.last_lsn(), torn_lsn);
        feeds_every_lsn_once(&store, torn_lsn, Some(b"half"));
    }

    /// A damaged entry in a retired segment ends that segment's reading;
    /// the feed then says which LSNs it cannot send instead of going on
    /// with the next segment as if none were missing.
    #[test]
    fn a_damaged_entry_stops_the_feed_with_the_lsns_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
            for key in [b"a", b"b", b"c"] {
                set(&store, key);
            }
        }
        let store = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
        set(&store, b"d");
        // "b"'s group (LSN 2), in a segment the reopening retired; the last
        // byte of its only entry changed, so that entry's checksum fails.
        let (path, damaged) = journal::segments(dir.path())
            .unwrap()
            .into_iter()
            .find_map(|(number, path)| {
                let io = &crate::disk::io::OsIo;
                let group = find_group(io, &path, number, |g| g.head.first_lsn == 2).unwrap()?;
                Some((path, group))
            })
            .expect("LSN 2 is in the log");
        assert_eq!(damaged.entries, 1);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&file, &[0xff], damaged.end - 1).unwrap();

        let mut feed = Feed::open(&store.inner, LogPosition::default()).unwrap();
        let first = feed.next_group(Duration::ZERO).unwrap().unwrap();
        assert_eq!(first.last_lsn, 1);
        let error = feed.next_group(Duration::ZERO).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            error
                .to_string()
                .starts_with("the update log lacks LSNs 2 to "),
            "{error}"
        );
    }
}
