//! The disk engine when its disk fails. `FaultyIo` stands in the engine's
//! I/O seam (`disk::io::Io`) and injects EIO, ENOSPC, failed fsyncs, short
//! writes and power cuts; each test checks what `docs/DESIGN.md` promises:
//! the client is told, nothing acknowledged is lost, the engine is poisoned
//! or short of space, and a restart recovers.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use heed::{Env, RwTxn};
use kura_store::disk::io::{Io, OsIo};
use kura_store::{
    AckFence, AckSpan, AckState, DeleteCommand, DeleteOutcome, DiskConfig, DiskStore, FlushOutcome,
    GetOptions, GetOutcome, LogRetention, Record, RowMode, RowOutcome, Store, StoreCommand,
    StoreMode, StoreOutcome, SyncPolicy,
};
use parking_lot::Mutex;

mod common;

/// A failure to inject; each stays until cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The call fails with this errno and does nothing.
    Fails(i32),
    /// A log write writes its first half, then fails with EIO.
    Short,
}

#[derive(Debug, Default)]
struct Faults {
    write_log: Option<Fault>,
    read_log: Option<Fault>,
    sync_log: Option<Fault>,
    commit: Option<Fault>,
    /// Commits that still work before every other fails with EIO.
    commits_left: Option<usize>,
    /// The next commits, in turn, ahead of `commit` and `commits_left`:
    /// `None` works, `Some(errno)` fails.
    commit_plan: VecDeque<Option<i32>>,
    sync_data: Option<Fault>,
    /// Every fsync of LMDB's data file (after a round) waits this long
    /// first (a slow disk under load); `slow_data_sync_started` then.
    slow_data_syncs: Option<Duration>,
    slow_data_sync_started: bool,
    /// The next log fsync waits this long first (an fsync of a segment
    /// never synced before can take that long); `slow_sync_started` then.
    slow_next_sync: Option<Duration>,
    /// Every log fsync the applier thread makes (of a segment it retired)
    /// waits this long first; `slow_sync_started` then.
    slow_applier_syncs: Option<Duration>,
    slow_sync_started: bool,
    /// The power is off: every write, fsync and commit fails and changes
    /// nothing, until `cut_power` leaves on disk what was made durable.
    crashed: bool,
}

/// What a power cut leaves of a segment's bytes written after its last
/// fsync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Torn {
    /// Nothing.
    Nothing,
    /// The first half of them, one byte damaged: a record cut short, which
    /// the replay's length check ends.
    HalfPage,
    /// All of them, one byte in the body of the first record damaged: its
    /// checksum ends the replay.
    Flipped,
    /// Zeros: the file's new size reached the disk, its data did not.
    Zeros,
}

impl Torn {
    const ALL: [Torn; 4] = [Torn::Nothing, Torn::HalfPage, Torn::Flipped, Torn::Zeros];

    /// The bytes this leaves after `extent.synced` of `file`.
    fn left(self, file: &File, extent: Extent) -> Vec<u8> {
        let page_end = (extent.synced / 4096 + 1) * 4096;
        let read = |end: u64| {
            let mut bytes = vec![0; (end - extent.synced) as usize];
            file.read_exact_at(&mut bytes, extent.synced).unwrap();
            bytes
        };
        match self {
            Torn::Nothing => Vec::new(),
            Torn::HalfPage => {
                let len = (extent.written.min(page_end) - extent.synced).div_ceil(2);
                let mut bytes = read(extent.synced + len);
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x5a;
                bytes
            }
            Torn::Flipped => {
                // `len u32 LE | crc32 u32 LE | body` (`disk/log_format.rs`):
                // a byte in the middle of the first record's body.
                const FRAME: usize = 8;
                let mut bytes = read(extent.written);
                let Some(len) = bytes.get(..4) else {
                    return bytes;
                };
                let len = u32::from_le_bytes(len.try_into().unwrap()) as usize;
                let at = (FRAME + len / 2).min(bytes.len() - 1);
                bytes[at] ^= 0x5a;
                bytes
            }
            Torn::Zeros => vec![0; (extent.written.min(page_end) - extent.synced) as usize],
        }
    }
}

/// What the disk holds durably of each log segment (by inode): the end of
/// the writes made before its last fsync; `written`: the end of all writes.
#[derive(Debug, Default, Clone, Copy)]
struct Extent {
    written: u64,
    synced: u64,
}

#[derive(Debug)]
struct FaultyIo {
    dir: PathBuf,
    /// The data file as of its last fsync.
    durable_data: PathBuf,
    faults: Mutex<Faults>,
    extents: Mutex<HashMap<u64, Extent>>,
    /// Commits and the copy made at an fsync of the data file take turns.
    data: Mutex<()>,
    _shadow: tempfile::TempDir,
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// A failed commit as heed reports one: LMDB's return code is an errno,
/// which heed turns from `MdbError::Other` into `Error::Io`.
fn heed_error(code: i32) -> heed::Error {
    heed::Error::Io(io::Error::from_raw_os_error(code))
}

fn inode(file: &File) -> u64 {
    file.metadata().map_or(0, |m| m.ino())
}

fn is_segment(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.starts_with("journal-") && name.ends_with(".log"))
}

impl FaultyIo {
    /// Whatever is in `dir` now is durable.
    fn new(dir: &Path) -> Arc<FaultyIo> {
        let shadow = tempfile::tempdir().unwrap();
        let durable_data = shadow.path().join("data.mdb");
        let mut extents = HashMap::new();
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                let meta = entry.metadata().unwrap();
                if is_segment(&entry.path()) {
                    extents.insert(
                        meta.ino(),
                        Extent {
                            written: meta.len(),
                            synced: meta.len(),
                        },
                    );
                }
            }
        }
        let data = dir.join("data.mdb");
        if data.exists() {
            fs::copy(&data, &durable_data).unwrap();
        }
        Arc::new(FaultyIo {
            dir: dir.to_path_buf(),
            durable_data,
            faults: Mutex::new(Faults::default()),
            extents: Mutex::new(extents),
            data: Mutex::new(()),
            _shadow: shadow,
        })
    }

    fn set(&self, change: impl FnOnce(&mut Faults)) {
        change(&mut self.faults.lock());
    }

    fn crash(&self) {
        self.set(|faults| faults.crashed = true);
    }

    /// After a crash, with the engine gone: leaves on disk what was fsynced,
    /// plus what `torn` says of the bytes written after it. Returns the
    /// torn bytes left.
    fn cut_power(&self, torn: Torn) -> usize {
        assert!(
            self.faults.lock().crashed,
            "cut the power of a crashed disk"
        );
        let extents = self.extents.lock().clone();
        let mut torn_bytes = 0;
        for entry in fs::read_dir(&self.dir).unwrap().flatten() {
            let path = entry.path();
            if !is_segment(&path) {
                continue;
            }
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let extent = extents.get(&inode(&file)).copied().unwrap_or_default();
            let unsynced = match extent.written > extent.synced {
                true => torn.left(&file, extent),
                false => Vec::new(),
            };
            file.set_len(extent.synced).unwrap();
            file.seek(SeekFrom::Start(extent.synced)).unwrap();
            file.write_all(&unsynced).unwrap();
            torn_bytes += unsynced.len();
        }
        // A data file never fsynced holds nothing (LMDB makes it again).
        match self.durable_data.exists() {
            true => fs::copy(&self.durable_data, self.dir.join("data.mdb")).map(drop),
            false => fs::remove_file(self.dir.join("data.mdb")),
        }
        .unwrap();
        torn_bytes
    }

    fn fault(&self, pick: impl FnOnce(&Faults) -> Option<Fault>) -> Option<Fault> {
        let faults = self.faults.lock();
        if faults.crashed {
            return Some(Fault::Fails(libc::EIO));
        }
        pick(&faults)
    }
}

impl Io for FaultyIo {
    fn write_log(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        let end = match self.fault(|f| f.write_log) {
            Some(Fault::Fails(code)) => return Err(errno(code)),
            Some(Fault::Short) => {
                let half = bytes.len() / 2;
                file.write_all_at(&bytes[..half], offset)?;
                self.note_write(file, offset, offset + half as u64);
                return Err(errno(libc::EIO));
            }
            None => {
                file.write_all_at(bytes, offset)?;
                offset + bytes.len() as u64
            }
        };
        self.note_write(file, offset, end);
        Ok(())
    }

    fn read_log(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // Reads work while the power is "off": the engine is gone by then.
        if let Some(Fault::Fails(code)) = self.faults.lock().read_log {
            return Err(errno(code));
        }
        file.read_exact_at(buf, offset)
    }

    fn sync_log(&self, file: &File) -> io::Result<()> {
        if let Some(Fault::Fails(code)) = self.fault(|f| f.sync_log) {
            return Err(errno(code));
        }
        let slow = {
            let mut faults = self.faults.lock();
            let applier = std::thread::current().name() == Some("kura-disk-applier");
            let slow =
                (faults.slow_next_sync.take()).or(faults.slow_applier_syncs.filter(|_| applier));
            faults.slow_sync_started |= slow.is_some();
            slow
        };
        if let Some(delay) = slow {
            std::thread::sleep(delay);
            // The power went before the fsync: it made nothing durable.
            if self.faults.lock().crashed {
                return Err(errno(libc::EIO));
            }
        }
        file.sync_data()?;
        let mut extents = self.extents.lock();
        let extent = extents.entry(inode(file)).or_default();
        extent.synced = extent.written;
        Ok(())
    }

    fn commit(&self, txn: RwTxn<'_>) -> heed::Result<()> {
        let _turn = self.data.lock();
        let planned = {
            let mut faults = self.faults.lock();
            (!faults.crashed)
                .then(|| faults.commit_plan.pop_front())
                .flatten()
        };
        match planned {
            Some(Some(code)) => return Err(heed_error(code)),
            Some(None) => return txn.commit(),
            None => {}
        }
        if let Some(Fault::Fails(code)) = self.fault(|f| f.commit) {
            // Dropping the transaction aborts it.
            return Err(heed_error(code));
        }
        if let Some(left) = self.faults.lock().commits_left.as_mut() {
            match left.checked_sub(1) {
                Some(fewer) => *left = fewer,
                None => return Err(heed_error(libc::EIO)),
            }
        }
        txn.commit()
    }

    fn sync_data(&self, env: &Env) -> heed::Result<()> {
        let slow = {
            let mut faults = self.faults.lock();
            faults.slow_data_sync_started |= faults.slow_data_syncs.is_some();
            faults.slow_data_syncs
        };
        if let Some(delay) = slow {
            std::thread::sleep(delay);
        }
        let _turn = self.data.lock();
        if let Some(Fault::Fails(code)) = self.fault(|f| f.sync_data) {
            return Err(heed_error(code));
        }
        env.force_sync()?;
        fs::copy(self.dir.join("data.mdb"), &self.durable_data)?;
        Ok(())
    }
}

impl FaultyIo {
    /// Whether every byte written to the log so far was fsynced.
    fn all_synced(&self) -> bool {
        self.extents
            .lock()
            .values()
            .all(|extent| extent.synced >= extent.written)
    }

    fn note_write(&self, file: &File, start: u64, end: u64) {
        let mut extents = self.extents.lock();
        let extent = extents.entry(inode(file)).or_default();
        if start == 0 {
            // A segment's first append: nothing of it is durable yet.
            *extent = Extent::default();
        }
        extent.written = extent.written.max(end);
    }
}

fn config(dir: &Path, sync: SyncPolicy, io: Arc<dyn Io>) -> DiskConfig {
    DiskConfig {
        map_size: 64 << 20,
        sync,
        reserve_bytes: 0,
        io,
        ..DiskConfig::new(dir)
    }
}

fn open(dir: &Path, sync: SyncPolicy, io: Arc<dyn Io>) -> DiskStore {
    DiskStore::open(config(dir, sync, io)).expect("opens")
}

/// Waits for the decision on the writes behind `fence`, as a worker does
/// before it sends their replies.
fn acknowledged(store: &DiskStore, fence: &AckFence) -> AckState {
    let Some(ticket) = fence.take() else {
        return AckState::Ready;
    };
    store.request_append();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.ack_state(ticket) {
            AckState::Waiting if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            state => return state,
        }
    }
}

/// A set and its acknowledgement: `Some(true)` acknowledged, `Some(false)`
/// stored but its commit failed (the connection would be closed), `None`
/// refused at once.
fn set(store: &DiskStore, key: &[u8], value: &[u8]) -> Option<bool> {
    set_expiring(store, key, value, 0)
}

fn set_expiring(store: &DiskStore, key: &[u8], value: &[u8], expiry: u32) -> Option<bool> {
    let fence = AckFence::default();
    match store_set(store, key, value, expiry, &fence) {
        StoreOutcome::Stored { .. } => Some(acknowledged(store, &fence) == AckState::Ready),
        StoreOutcome::Failed => None,
        other => panic!("unexpected {other:?}"),
    }
}

/// A plain set, its reply not waited for.
fn store_set(
    store: &DiskStore,
    key: &[u8],
    value: &[u8],
    expiry: u32,
    fence: &AckFence,
) -> StoreOutcome {
    let command = StoreCommand {
        mode: StoreMode::Set,
        key,
        value,
        flags: 3,
        expiry,
        compare_cas: None,
        stale_if_older: false,
    };
    store.store(&command, fence)
}

/// What was acknowledged: key → value.
type Kept = BTreeMap<Vec<u8>, Vec<u8>>;

/// A store under `batch` with `count` keys of `len` bytes, all durable.
fn synced_under_batch(
    count: usize,
    len: usize,
) -> (tempfile::TempDir, Arc<FaultyIo>, DiskStore, Kept) {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let kept = fill(&store, count, len);
    wait_until_synced(&io);
    (dir, io, store, kept)
}

/// Waits until a round has started a slowed fsync of a segment.
fn wait_for_a_slow_sync(io: &FaultyIo) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !io.faults.lock().slow_sync_started {
        assert!(Instant::now() < deadline, "no round fsynced a segment");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until the syncer has made everything appended durable.
fn wait_until_synced(io: &FaultyIo) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !io.all_synced() {
        assert!(Instant::now() < deadline, "the syncer never caught up");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn get(store: &dyn Store, key: &[u8]) -> Option<Vec<u8>> {
    let mut found = None;
    store.get(
        key,
        &GetOptions::default(),
        &AckFence::default(),
        &mut |item| found = Some(item.value.to_vec()),
    );
    found
}

fn engine_stat(store: &dyn Store, name: &str) -> String {
    store
        .engine_stats()
        .into_iter()
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value)
        .unwrap_or_else(|| panic!("no stat {name}"))
}

/// Reopens `dir` on the real disk and checks every acknowledged key.
fn recovers(dir: &Path, acknowledged: &BTreeMap<Vec<u8>, Vec<u8>>) -> DiskStore {
    let store = open(dir, SyncPolicy::Always, Arc::new(OsIo));
    for (key, value) in acknowledged {
        assert_eq!(
            get(&store, key).as_ref(),
            Some(value),
            "acknowledged {} lost",
            String::from_utf8_lossy(key)
        );
    }
    assert_eq!(engine_stat(&store, "disk_poisoned"), "0");
    store
}

/// A poisoned engine still serves what it acknowledged (`key5` and
/// `unsynced` among them); the process stops, the machine does not: the
/// page cache keeps what was appended, and a restart serves it all, without
/// the write refused as `after`.
fn serves_what_it_took_until_and_after_a_restart(
    store: DiskStore,
    dir: &Path,
    kept: &BTreeMap<Vec<u8>, Vec<u8>>,
) {
    assert_eq!(get(&store, b"key5").as_ref(), kept.get(&b"key5"[..]));
    assert_eq!(get(&store, b"unsynced").as_deref(), Some(&b"v"[..]));
    drop(store);
    let store = recovers(dir, kept);
    assert_eq!(get(&store, b"after"), None);
}

fn value_of(i: usize, len: usize) -> Vec<u8> {
    format!("{i:08}").into_bytes().repeat(len.div_ceil(8))[..len].to_vec()
}

/// Writes `count` keys, every one acknowledged.
fn fill(store: &DiskStore, count: usize, len: usize) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut written = BTreeMap::new();
    for i in 0..count {
        let (key, value) = (format!("key{i}").into_bytes(), value_of(i, len));
        assert_eq!(set(store, &key, &value), Some(true));
        written.insert(key, value);
    }
    written
}

/// `writers` threads set keys of their own (writer `w`'s values
/// `value_len(w)` bytes long) until a set is not acknowledged; once
/// `before` writes are acknowledged (or 10 s passed) `then` runs (the fault
/// to inject). Returns every write acknowledged.
fn write_until_refused(
    store: &DiskStore,
    writers: usize,
    value_len: impl Fn(usize) -> usize + Sync,
    before: usize,
    then: impl FnOnce(),
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let acknowledged = std::sync::Mutex::new(BTreeMap::new());
    std::thread::scope(|scope| {
        for writer in 0..writers {
            let (acknowledged, value_len) = (&acknowledged, &value_len);
            scope.spawn(move || {
                for i in 0.. {
                    let key = format!("w{writer}-{i}").into_bytes();
                    let value = value_of(i, value_len(writer));
                    match set(store, &key, &value) {
                        Some(true) => acknowledged.lock().unwrap().insert(key, value),
                        _ => return,
                    };
                }
            });
        }
        let started = Instant::now();
        while acknowledged.lock().unwrap().len() < before
            && started.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        then();
    });
    acknowledged.into_inner().unwrap()
}

/// Writes 40 keys to `dir`, acknowledged, and cuts the power before any
/// round: they are only in the log. Returns what was acknowledged.
fn only_in_the_log_after_a_power_cut(dir: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let io = FaultyIo::new(dir);
    let store = open(dir, SyncPolicy::Always, io.clone());
    let kept = fill(&store, 40, 1000);
    assert_eq!(
        engine_stat(&store, "disk_applied_writes"),
        "0",
        "nothing applied yet: the open must replay the log"
    );
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    kept
}

/// [`only_in_the_log_after_a_power_cut`], opened on a disk with `fault`:
/// the error the open fails with, and what was acknowledged.
fn failed_open_after_a_power_cut(
    dir: &Path,
    fault: fn(&mut Faults),
) -> (String, BTreeMap<Vec<u8>, Vec<u8>>) {
    let kept = only_in_the_log_after_a_power_cut(dir);
    let faulty = FaultyIo::new(dir);
    faulty.set(fault);
    let error = DiskStore::open(config(dir, SyncPolicy::Always, faulty))
        .err()
        .expect("the open fails")
        .to_string();
    (error, kept)
}

#[test]
fn a_failed_log_write_is_not_acknowledged_and_poisons_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let kept = fill(&store, 20, 100);
    io.set(|f| f.write_log = Some(Fault::Fails(libc::EIO)));
    assert_eq!(set(&store, b"lost", b"v"), Some(false), "its commit fails");
    assert_eq!(set(&store, b"after", b"v"), None, "refused once poisoned");
    assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
    assert_eq!(
        get(&store, b"lost"),
        None,
        "reads go back to what was there"
    );
    assert_eq!(
        get(&store, b"key3"),
        kept.get(&b"key3"[..]).cloned(),
        "reads go on"
    );
    // A read that must write (touch, vivify) fails as a write does; one
    // that finds nothing to write is a miss as ever.
    let expiry = store.clock().expiry(100);
    let fence = AckFence::default();
    assert_eq!(store.touch(b"key3", expiry, &fence), GetOutcome::Failed);
    assert_eq!(store.touch(b"missing", expiry, &fence), GetOutcome::Miss);
    let vivify = GetOptions {
        vivify: Some(expiry),
        ..GetOptions::default()
    };
    let mut shown = false;
    let outcome = store.get(b"missing", &vivify, &fence, &mut |_| shown = true);
    assert_eq!((outcome, shown), (GetOutcome::Failed, false));
    // A scan lists what LMDB holds and says it is not all; a scan in parts
    // (Tokyo Tyrant's iterator and vanish) fails.
    let mut listed = 0;
    assert!(!store.scan(&mut |_| listed += 1));
    assert!(listed <= kept.len(), "{listed}");
    let first = store.scan_part(&kura_store::ScanCursor::START, 10, &mut |_| {});
    assert_eq!(first, Err(kura_store::ScanFailed));
    drop(store);
    let store = recovers(dir.path(), &kept);
    assert_eq!(get(&store, b"lost"), None);
}

#[test]
fn a_flush_whose_append_fails_poisons_later_ones_are_refused_and_the_engine_still_stops() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    fill(&store, 5, 100);
    io.set(|f| f.write_log = Some(Fault::Fails(libc::EIO)));
    // Taken (nothing has failed yet); its append fails, and it stays
    // requested: the writer once retried it in a loop that never parked
    // and never saw the stop.
    let fence = AckFence::default();
    assert_eq!(store.flush_all(0, &fence), FlushOutcome::Done);
    assert_eq!(acknowledged(&store, &fence), AckState::Failed);
    assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
    // On the poisoned engine a flush, now or later, is refused at once.
    let fence = AckFence::default();
    assert_eq!(store.flush_all(0, &fence), FlushOutcome::Failed);
    assert_eq!(store.flush_all(10, &fence), FlushOutcome::Failed);
    assert!(fence.take().is_none(), "nothing to wait for");
    let (stopped, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(store);
        stopped.send(()).unwrap();
    });
    wait.recv_timeout(std::time::Duration::from_secs(30))
        .expect("the engine stops");
}

#[test]
fn a_short_log_write_is_cut_back_and_the_log_replays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let kept = fill(&store, 20, 3000);
    io.set(|f| f.write_log = Some(Fault::Short));
    assert_eq!(set(&store, b"torn", &value_of(7, 5000)), Some(false));
    assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
    assert_eq!(
        get(&store, b"key4").as_ref(),
        kept.get(&b"key4"[..]),
        "reads go on"
    );
    assert_eq!(get(&store, b"torn"), None);
    drop(store);
    // The half-written group was cut off: the log replays every
    // acknowledged write and nothing after it.
    let summary = kura_store::disk::history::read(
        dir.path(),
        kura_store::disk::history::Values::Skip,
        |_| std::ops::ControlFlow::Continue(()),
    )
    .expect("the log reads back whole");
    assert_eq!(summary.entries, 20);
    let store = recovers(dir.path(), &kept);
    assert_eq!(get(&store, b"torn"), None);
    assert_eq!(set(&store, b"next", b"v"), Some(true));
}

/// A read that shows a write not journalled yet waits for that write: when
/// its append fails, the read is not acknowledged either (the server closes
/// the connection instead of replying), so no client is shown a value a
/// power cut takes back.
#[test]
fn a_read_of_a_write_whose_append_fails_is_refused_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let read = |key: &[u8], fence: &AckFence| {
        let mut found = None;
        store.get(key, &GetOptions::default(), fence, &mut |item| {
            found = Some(item.value.to_vec())
        });
        found
    };
    // Journalled and acknowledged: read without waiting.
    assert_eq!(set(&store, b"k", b"old"), Some(true));
    let fence = AckFence::default();
    assert_eq!(read(b"k", &fence), Some(b"old".to_vec()));
    // Acknowledged already: nothing to wait for (the fence may name it while
    // the writer moves it out of `appending`, already decided).
    assert_eq!(acknowledged(&store, &fence), AckState::Ready);
    io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
    let written = AckFence::default();
    let command = StoreCommand {
        mode: StoreMode::Set,
        key: b"k",
        value: b"new",
        flags: 0,
        expiry: 0,
        compare_cas: None,
        stale_if_older: false,
    };
    assert!(matches!(
        store.store(&command, &written),
        StoreOutcome::Stored { .. }
    ));
    // Pending until the writer thread is asked to append (or its idle
    // tick): these reads see it, unless that tick came in between. `me`'s
    // metadata shows it too.
    let (shown, fence) = (AckFence::default(), AckFence::default());
    assert!(store.debug(b"k", &shown).is_some());
    if read(b"k", &fence) == Some(b"new".to_vec()) {
        assert_eq!(acknowledged(&store, &shown), AckState::Failed);
        assert_eq!(acknowledged(&store, &fence), AckState::Failed);
    }
    assert_eq!(acknowledged(&store, &written), AckState::Failed);
    assert_eq!(read(b"k", &AckFence::default()), Some(b"old".to_vec()));
}

/// The same for a table row read by its primary key.
#[test]
fn a_read_of_a_row_whose_append_fails_is_refused_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let tables = store.tables().unwrap();
    let put = |value: &[u8], fence: &AckFence| {
        let mut row = Record::new(&b"r"[..]);
        row.put(b"v", value);
        assert_eq!(
            tables.put_row(b"t", &row, RowMode::Put, fence),
            RowOutcome::Done
        );
    };
    let read = |fence: &AckFence| {
        let row = tables.get_row(b"t", b"r", fence).unwrap()?;
        row.get(b"v").map(<[u8]>::to_vec)
    };
    let written = AckFence::default();
    put(b"old", &written);
    assert_eq!(acknowledged(&store, &written), AckState::Ready);
    let fence = AckFence::default();
    assert_eq!(read(&fence), Some(b"old".to_vec()));
    // Acknowledged already: nothing to wait for (the fence may name it while
    // the writer moves it out of `appending`, already decided).
    assert_eq!(acknowledged(&store, &fence), AckState::Ready);
    io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
    put(b"new", &written);
    let fence = AckFence::default();
    if read(&fence) == Some(b"new".to_vec()) {
        assert_eq!(acknowledged(&store, &fence), AckState::Failed);
    }
    assert_eq!(acknowledged(&store, &written), AckState::Failed);
    assert_eq!(read(&AckFence::default()), Some(b"old".to_vec()));
}

/// Whatever its errno, ENOSPC included: after a failed fsync the kernel may
/// have dropped the group's pages, so nothing may be appended after them.
#[test]
fn a_failed_log_fsync_is_not_acknowledged_and_poisons_the_engine() {
    for errno in [libc::EIO, libc::ENOSPC] {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(dir.path());
        let store = open(dir.path(), SyncPolicy::Always, io.clone());
        let kept = fill(&store, 20, 100);
        io.set(|f| f.sync_log = Some(Fault::Fails(errno)));
        assert_eq!(set(&store, b"unsynced", b"v"), Some(false));
        assert_eq!(set(&store, b"after", b"v"), None, "errno {errno}");
        assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
        drop(store);
        recovers(dir.path(), &kept);
    }
}

/// A store whose log holds 40 live keys of 4 KB among 800 KB of garbage,
/// all applied, with segments that pass retention 3 s after their last
/// append, so that nothing is compacted while the writes go on; and the
/// keys with their values.
fn garbage_to_compact(dir: &Path, io: &Arc<FaultyIo>) -> (DiskStore, BTreeMap<Vec<u8>, Vec<u8>>) {
    let config = DiskConfig {
        // Compaction is due past 256 KiB of garbage.
        pending_limit: 1 << 20,
        // Segments pass retention 3 s after their last append: nothing is
        // compacted while the writes go on.
        log_retention: LogRetention {
            max_age: Some(Duration::from_secs(3)),
            max_bytes: None,
        },
        ..config(dir, SyncPolicy::Batch, io.clone())
    };
    let store = DiskStore::open(config).unwrap();
    // Every key once, then the odd ones again and again: the even keys stay
    // live among 800 KB of garbage.
    let mut kept = fill(&store, 40, 4096);
    for round in 1..=10 {
        for i in (1..40).step_by(2) {
            let (key, value) = (
                format!("key{i}").into_bytes(),
                value_of(100 * round + i, 4096),
            );
            assert_eq!(set(&store, &key, &value), Some(true));
            kept.insert(key, value);
        }
    }
    store.wait_until_all_applied();
    (store, kept)
}

/// The compactor fsyncs the log too: the values it moves must be on disk
/// before LMDB points to them. A failure there poisons the engine, as any
/// failed fsync of the log does: the kernel may have dropped the pages of
/// acknowledged writes in the same segment with it.
#[test]
fn a_failed_log_fsync_during_compaction_poisons_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let (store, kept) = garbage_to_compact(dir.path(), &io);
    // The syncer has caught up: no fsync of the log is due but the
    // compactor's.
    let mut fsyncs = engine_stat(&store, "disk_fsyncs");
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = engine_stat(&store, "disk_fsyncs");
        if now == fsyncs {
            break;
        }
        fsyncs = now;
    }
    let journal_bytes = || -> u64 { engine_stat(&store, "disk_journal_bytes").parse().unwrap() };
    let before = journal_bytes();
    io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine_stat(&store, "disk_poisoned") == "0" {
        assert!(
            Instant::now() < deadline,
            "the failed compaction left the engine writable"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(engine_stat(&store, "disk_compactions"), "0");
    // Nothing else appends: the bytes are the compactor's moves, whose
    // fsync failed.
    assert!(
        journal_bytes() >= before + 20 * 4096,
        "{} bytes appended",
        journal_bytes() - before
    );
    assert_eq!(set(&store, b"after", b"v"), None, "writes are refused");
    drop(store);
    recovers(dir.path(), &kept);
}

/// LMDB's file cut short (a bad copy): LMDB would read past its end and
/// the process die of SIGBUS; the open is refused with the reason, and a
/// file of pages that are no LMDB meta pages too.
#[test]
fn a_data_file_cut_short_is_refused_at_open_not_faulted_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::Always, Arc::new(OsIo));
    fill(&store, 200, 100);
    store.wait_until_all_applied();
    drop(store);
    let data = dir.path().join("data.mdb");
    let refused =
        |why: &str| match DiskStore::open(config(dir.path(), SyncPolicy::Always, Arc::new(OsIo))) {
            Ok(_) => panic!("opened a data file {why}"),
            Err(error) => error.to_string(),
        };
    let whole = fs::read(&data).unwrap();
    // Its two meta pages and nothing of the trees.
    fs::write(&data, &whole[..8192]).unwrap();
    let error = refused("cut short");
    assert!(
        error.contains("data.mdb is damaged") && error.contains("tree"),
        "{error}"
    );
    let mut garbled = whole.clone();
    garbled[16..20].copy_from_slice(b"junk");
    fs::write(&data, &garbled).unwrap();
    let error = refused("without its first meta page");
    assert!(error.contains("no LMDB meta page"), "{error}");
    fs::write(&data, &whole).unwrap();
    drop(open(dir.path(), SyncPolicy::Always, Arc::new(OsIo)));
}

/// A compaction whose LMDB commit finds no room is tried again once
/// `COMPACT_RETRY` (10 s) has passed, as a full disk's appends are: the
/// segment is not set aside as one that cannot be read.
#[test]
fn a_compaction_that_finds_no_room_is_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let (store, kept) = garbage_to_compact(dir.path(), &io);
    // Nothing else commits now: the next commit is the compaction's.
    io.set(|f| f.commit_plan = [Some(libc::ENOSPC)].into());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !io.faults.lock().commit_plan.is_empty() {
        assert!(Instant::now() < deadline, "no compaction was tried");
        std::thread::sleep(Duration::from_millis(20));
    }
    let failed = Instant::now();
    assert_eq!(engine_stat(&store, "disk_compactions"), "0");
    while engine_stat(&store, "disk_compactions") == "0" {
        assert!(
            Instant::now() < deadline,
            "the segment was not compacted again"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Tried again after the wait, not at once by some other way.
    assert!(
        failed.elapsed() >= Duration::from_secs(8),
        "{:?}",
        failed.elapsed()
    );
    assert_eq!(engine_stat(&store, "disk_poisoned"), "0");
    drop(store);
    recovers(dir.path(), &kept);
}

/// Writers racing the journal's appends when the log starts failing (its
/// fsync under `always`; its writes on a full disk or with EIO, under
/// `always` and under `batch`, where workers append their own rounds): a
/// write that lands in a group while it is drained fails with the group,
/// and no later round acknowledges it. After the crash (a power cut under
/// `always`, the process only under `batch`), every write acknowledged is
/// there.
#[test]
fn writes_racing_a_failing_log_are_acknowledged_only_if_durable() {
    const WRITERS: usize = 6;
    type Failure = fn(&mut Faults);
    let cases: [(SyncPolicy, Failure); 4] = [
        (SyncPolicy::Always, |f| {
            f.sync_log = Some(Fault::Fails(libc::EIO))
        }),
        (SyncPolicy::Always, |f| {
            f.write_log = Some(Fault::Fails(libc::ENOSPC))
        }),
        (SyncPolicy::Batch, |f| {
            f.write_log = Some(Fault::Fails(libc::ENOSPC))
        }),
        (SyncPolicy::Batch, |f| {
            f.write_log = Some(Fault::Fails(libc::EIO))
        }),
    ];
    for round in 0..40 {
        let (sync, failure) = cases[round % cases.len()];
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(dir.path());
        let store = open(dir.path(), sync, io.clone());
        // Some writes acknowledged first, however slow the disk.
        let acknowledged = write_until_refused(&store, WRITERS, |_| 50, 20, || io.set(failure));
        // A failed fsync or EIO poisons; a full disk does not.
        let full = io.faults.lock().write_log == Some(Fault::Fails(libc::ENOSPC));
        assert_eq!(
            engine_stat(&store, "disk_poisoned"),
            if full { "0" } else { "1" },
            "round {round}"
        );
        io.crash();
        drop(store);
        if sync == SyncPolicy::Always {
            io.cut_power(Torn::Nothing);
        }
        assert!(!acknowledged.is_empty(), "round {round}: nothing written");
        recovers(dir.path(), &acknowledged);
    }
}

/// A connection's held replies wait for every write it made since they
/// were last sent: one whose append failed is not hidden by a later one
/// whose append worked (a delete, which a full disk still takes).
#[test]
fn a_failed_write_is_not_hidden_by_a_later_write_of_the_same_connection() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    fill(&store, 5, 100);
    let wait = |span: AckSpan| loop {
        match store.ack_state(span) {
            AckState::Waiting => {
                store.request_append();
                std::thread::sleep(Duration::from_millis(1));
            }
            state => return state,
        }
    };
    let fence = AckFence::default();
    let set = StoreCommand {
        mode: StoreMode::Set,
        key: b"lost",
        value: b"v",
        flags: 0,
        expiry: 0,
        compare_cas: None,
        stale_if_older: false,
    };
    // Before the set: the appender may take it as soon as it is pending.
    io.set(|f| f.write_log = Some(Fault::Fails(libc::ENOSPC)));
    assert!(matches!(
        store.store(&set, &fence),
        StoreOutcome::Stored { .. }
    ));
    let failed = fence.take().unwrap();
    assert_eq!(wait(failed), AckState::Failed);
    io.set(|f| f.write_log = None);
    assert_eq!(
        store.delete(b"key0", &DeleteCommand::default(), &fence),
        DeleteOutcome::Deleted
    );
    let worked = fence.take().unwrap();
    assert_eq!(wait(worked), AckState::Ready);
    assert_eq!(store.ack_state(failed.join(worked)), AckState::Failed);
}

#[test]
fn a_full_disk_refuses_writes_keeps_deletes_and_writes_resume_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let mut kept = fill(&store, 20, 100);
    io.set(|f| f.write_log = Some(Fault::Fails(libc::ENOSPC)));
    assert_eq!(set(&store, b"no room", b"v"), Some(false));
    assert_eq!(engine_stat(&store, "disk_out_of_space"), "1");
    assert_eq!(
        engine_stat(&store, "disk_poisoned"),
        "0",
        "a full disk is not a broken one"
    );
    assert_eq!(set(&store, b"refused", b"v"), None);
    // Space comes back (a delete, an operator): the next check sees it.
    io.set(|f| f.write_log = None);
    let fence = AckFence::default();
    assert_eq!(
        store.delete(b"key0", &DeleteCommand::default(), &fence),
        DeleteOutcome::Deleted,
        "deletes go on while the disk is full"
    );
    assert_eq!(acknowledged(&store, &fence), AckState::Ready);
    kept.remove(&b"key0"[..]);
    store.maintain();
    assert_eq!(engine_stat(&store, "disk_out_of_space"), "0");
    assert_eq!(set(&store, b"later", b"v"), Some(true));
    kept.insert(b"later".to_vec(), b"v".to_vec());
    drop(store);
    let store = recovers(dir.path(), &kept);
    assert_eq!(get(&store, b"key0"), None);
    assert_eq!(get(&store, b"no room"), None);
}

/// `stats` counts every write acknowledged before it, however long the
/// applier takes to put them into LMDB: it once waited at most 200 ms, and
/// on a slow disk under load showed counts without the last writes.
#[test]
fn stats_count_every_acknowledged_write_however_slow_the_applier() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    fill(&store, 10, 100);
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    io.set(|f| f.slow_data_syncs = Some(Duration::from_millis(700)));
    // A round takes the first write, commits it and fsyncs LMDB slowly;
    // the writes made meanwhile wait for the round after it.
    assert_eq!(set(&store, b"first", b"v"), Some(true));
    std::thread::scope(|scope| {
        scope.spawn(|| store.wait_until_all_applied());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !io.faults.lock().slow_data_sync_started {
            assert!(Instant::now() < deadline, "no round fsynced LMDB");
            std::thread::sleep(Duration::from_millis(1));
        }
        for i in 0..9 {
            let key = format!("later{i}");
            assert_eq!(set(&store, key.as_bytes(), &value_of(i, 5000)), Some(true));
        }
        let stats = store.stats();
        assert_eq!(stats.curr_items, 20, "stats lacks acknowledged writes");
        let stored: u64 = stats.classes.iter().map(|class| class.items).sum();
        assert_eq!(stored, 20, "a class's count lacks acknowledged writes");
    });
}

/// A round that commits in parts and fails for space in a later part has
/// its flush in LMDB already. Its retry must not clear the tables again:
/// that would drop the writes its first part made after the flush (LMDB,
/// `curr_items` and scans would lack them while retries fail) and count
/// them as flushed.
#[test]
fn a_retried_round_keeps_the_writes_its_first_part_committed_after_its_flush() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    // Parts of a quarter of the pending memory: 1 MiB, about 200 of these writes.
    let store = DiskStore::open(DiskConfig {
        pending_limit: 4 << 20,
        ..config(dir.path(), SyncPolicy::Batch, io.clone())
    })
    .unwrap();
    fill(&store, 10, 100);
    // A round just ran: the next one comes when asked, not by the clock.
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    let started = Instant::now();
    let fence = AckFence::default();
    store.flush_all(0, &fence);
    assert_eq!(acknowledged(&store, &fence), AckState::Ready);
    let mut after_flush = BTreeMap::new();
    for i in 0..600 {
        let (key, value) = (format!("new{i}").into_bytes(), value_of(i, 900));
        assert_eq!(set(&store, &key, &value), Some(true));
        after_flush.insert(key, value);
    }
    // The round's first part commits and its second fails for space; the
    // retry's flush and removals commit, and the small commit after them;
    // every commit after that fails.
    io.set(|f| {
        f.commit_plan = [None, Some(libc::ENOSPC), None, None].into();
        f.commit = Some(Fault::Fails(libc::ENOSPC));
    });
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "too slow: the applier's clock may have taken the flush alone"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !io.faults.lock().commit_plan.is_empty() {
        assert!(Instant::now() < deadline, "the round was not retried");
        store.stats(); // asks for a round
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(engine_stat(&store, "disk_out_of_space"), "1");
    assert_eq!(
        engine_stat(&store, "disk_poisoned"),
        "0",
        "a commit short of space poisons nothing"
    );
    let stats = store.stats();
    assert!(
        (1..600).contains(&stats.curr_items),
        "LMDB keeps what the first part committed: {} items",
        stats.curr_items
    );
    assert_eq!(stats.reclaimed, 10, "only the flushed items");
    io.set(|f| f.commit = None);
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.stats().curr_items != 600 {
        assert!(Instant::now() < deadline, "the retry never committed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(store.stats().reclaimed, 10);
    drop(store);
    recovers(dir.path(), &after_flush);
}

/// The maintenance tick asks the applier for a round that removes expired
/// items, and waits for it. While the disk stays full every round fails:
/// the tick must go on (its space check, a delayed flush) rather than wait
/// for the disk, and the items go once a round commits.
#[test]
fn the_maintenance_tick_does_not_wait_for_a_round_that_keeps_failing() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let expiry = store.clock().expiry(10);
    for i in 0..100 {
        let key = format!("expiring{i}");
        assert_eq!(
            set_expiring(&store, key.as_bytes(), b"v", expiry),
            Some(true)
        );
    }
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    store.clock().advance(11);
    io.set(|f| f.commit = Some(Fault::Fails(libc::ENOSPC)));
    // Acknowledged (in the log); its round fails, and is retried.
    assert_eq!(set(&store, b"pending", b"write"), Some(true));
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine_stat(&store, "disk_failed_commits") == "0" {
        assert!(Instant::now() < deadline, "no round was tried");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(engine_stat(&store, "disk_out_of_space"), "1");
    assert_eq!(engine_stat(&store, "disk_poisoned"), "0");
    let (sender, tick) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let store = &store;
        scope.spawn(move || sender.send(store.maintain()));
        let removed = tick.recv_timeout(Duration::from_secs(6));
        // Lets a tick that waits for the disk go, whatever happened.
        io.set(|f| f.commit = None);
        assert_eq!(removed, Ok(0), "the tick waited for the full disk");
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut removed = 0;
    while removed < 100 {
        assert!(Instant::now() < deadline, "{removed} of 100 removed");
        removed += store.maintain();
    }
    assert_eq!(removed, 100);
    assert_eq!(store.stats().curr_items, 1);
    assert_eq!(get(&store, b"pending").as_deref(), Some(&b"write"[..]));
    drop(store);
    let store = recovers(
        dir.path(),
        &BTreeMap::from([(b"pending".to_vec(), b"write".to_vec())]),
    );
    assert_eq!(store.stats().curr_items, 1, "the expired items stay gone");
}

/// Five values of 4,000 bytes applied (LMDB points into the log for
/// them), no read cache, and every read of the log failing with EIO.
fn values_in_the_log_unreadable() -> (tempfile::TempDir, Arc<FaultyIo>, DiskStore, Kept) {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = DiskStore::open(DiskConfig {
        // No read cache: reads of large values go to the log.
        memory_budget: 0,
        ..config(dir.path(), SyncPolicy::Batch, io.clone())
    })
    .unwrap();
    let kept = fill(&store, 5, 4000);
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    io.set(|f| f.read_log = Some(Fault::Fails(libc::EIO)));
    (dir, io, store, kept)
}

#[test]
fn a_failed_read_of_a_logged_value_is_a_miss_and_the_value_reads_again_later() {
    let (_dir, io, store, kept) = values_in_the_log_unreadable();
    assert_eq!(get(&store, b"key1"), None);
    assert_eq!(
        engine_stat(&store, "disk_poisoned"),
        "0",
        "a read fault poisons nothing"
    );
    io.set(|f| f.read_log = None);
    assert_eq!(get(&store, b"key1").as_ref(), kept.get(&b"key1"[..]));
    assert_eq!(set(&store, b"still", b"writable"), Some(true));
}

/// A delete, an add, a replace or a compare of CAS decides on the item's
/// header, so a value the log cannot give does not keep its key from them;
/// an append, which writes to the value, fails.
#[test]
fn a_value_the_log_cannot_give_is_still_deleted_added_to_and_replaced() {
    let (_dir, io, store, kept) = values_in_the_log_unreadable();
    let fence = AckFence::default();
    let command = |mode, key, compare_cas| StoreCommand {
        mode,
        key,
        value: b"new",
        flags: 0,
        expiry: 0,
        compare_cas,
        stale_if_older: false,
    };
    assert_eq!(
        store.delete(b"key0", &DeleteCommand::default(), &fence),
        DeleteOutcome::Deleted
    );
    let add = store.store(&command(StoreMode::Add, b"key1", None), &fence);
    assert_eq!(add, StoreOutcome::NotStored);
    let replace = store.store(&command(StoreMode::Replace, b"key2", None), &fence);
    assert!(
        matches!(replace, StoreOutcome::Stored { .. }),
        "{replace:?}"
    );
    let cas = store.store(&command(StoreMode::Set, b"key3", Some(1)), &fence);
    assert_eq!(cas, StoreOutcome::Exists);
    let append = store.store(&command(StoreMode::Append, b"key4", None), &fence);
    assert_eq!(append, StoreOutcome::Failed);
    assert_eq!(acknowledged(&store, &fence), AckState::Ready);
    assert_eq!(engine_stat(&store, "disk_poisoned"), "0");
    io.set(|f| f.read_log = None);
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    assert_eq!(get(&store, b"key0"), None);
    assert_eq!(get(&store, b"key2").as_deref(), Some(&b"new"[..]));
    for key in ["key1", "key3", "key4"] {
        let key = key.as_bytes();
        assert_eq!(get(&store, key).as_ref(), kept.get(key));
    }
}

#[test]
fn a_failed_commit_to_the_data_file_poisons_and_the_log_restores_it_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let mut kept = fill(&store, 10, 100);
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    io.set(|f| f.commit = Some(Fault::Fails(libc::EIO)));
    // Acknowledged once in the log: the data file's failure comes later.
    kept.extend(fill(&store, 10, 200));
    kept.insert(b"in log".to_vec(), b"v".to_vec());
    assert_eq!(set(&store, b"in log", b"v"), Some(true));
    // The applier's round fails; the writes stay readable, pending.
    assert_eq!(
        store.wait_until_all_applied(),
        AckState::Failed,
        "acknowledged, but not in LMDB"
    );
    assert_eq!(get(&store, b"in log").as_deref(), Some(&b"v"[..]));
    assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
    assert_eq!(set(&store, b"after", b"v"), None);
    drop(store);
    recovers(dir.path(), &kept);
}

#[test]
fn a_failed_fsync_of_the_data_file_poisons_and_a_restart_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let kept = fill(&store, 30, 2000);
    io.set(|f| f.sync_data = Some(Fault::Fails(libc::EIO)));
    assert_ne!(
        store.wait_until_all_applied(),
        AckState::Failed,
        "the commit itself worked"
    );
    // The applier fsyncs the data file before it lets a segment go.
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine_stat(&store, "disk_poisoned") == "0" && Instant::now() < deadline {
        store.maintain();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
    assert_eq!(set(&store, b"after", b"v"), None, "writes are refused");
    assert_eq!(get(&store, b"key7").as_ref(), kept.get(&b"key7"[..]));
    // The data file's pages that were not fsynced go with the power: the
    // log the poison kept must restore them.
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    recovers(dir.path(), &kept);
}

#[test]
fn a_power_cut_keeps_every_write_acknowledged_under_always_despite_a_torn_page() {
    for torn in Torn::ALL {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(dir.path());
        let store = open(dir.path(), SyncPolicy::Always, io.clone());
        let kept = fill(&store, 200, 700);
        // A write appended but not fsynced when the power goes: never
        // acknowledged, and what is left of it is a torn page.
        io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
        assert_eq!(set(&store, b"in flight", &value_of(1, 3000)), Some(false));
        io.crash();
        drop(store);
        let left = io.cut_power(torn);
        assert_eq!(
            left > 0,
            torn != Torn::Nothing,
            "{torn:?} left {left} bytes"
        );
        if torn == Torn::Flipped {
            // The in-flight group whole, its head damaged: only the
            // checksum tells.
            assert!(left > 3000, "{left} bytes left");
        }
        let store = recovers(dir.path(), &kept);
        assert_eq!(get(&store, b"in flight"), None);
    }
}

#[test]
fn a_failed_fsync_by_the_batch_syncer_poisons_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let mut kept = fill(&store, 20, 100);
    io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
    // Under `batch` a write is acknowledged once appended; the syncer's
    // fsync comes after, fails, and poisons.
    assert_eq!(set(&store, b"unsynced", b"v"), Some(true));
    kept.insert(b"unsynced".to_vec(), b"v".to_vec());
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine_stat(&store, "disk_poisoned") == "0" {
        assert!(
            Instant::now() < deadline,
            "the syncer's failure went unseen"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let refused = || -> u64 { engine_stat(&store, "disk_writes_refused").parse().unwrap() };
    let before = refused();
    assert_eq!(set(&store, b"after", b"v"), None, "writes are refused");
    let fence = AckFence::default();
    assert_eq!(
        store.delete(b"key1", &DeleteCommand::default(), &fence),
        DeleteOutcome::Failed,
        "so are deletes"
    );
    assert_eq!(refused(), before + 2, "both counted refused");
    serves_what_it_took_until_and_after_a_restart(store, dir.path(), &kept);
}

/// `sync` (Tokyo Tyrant's) makes every write taken so far durable whatever
/// the policy: a power cut right after it keeps them all. On a poisoned
/// engine it fails.
#[test]
fn a_sync_makes_every_write_durable_under_none_and_fails_once_poisoned() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::None, io.clone());
    let kept = fill(&store, 50, 700);
    assert!(!io.all_synced(), "`none` fsyncs nothing by itself");
    assert!(store.sync());
    assert!(io.all_synced());
    io.crash();
    drop(store);
    assert_eq!(io.cut_power(Torn::HalfPage), 0, "nothing was left unsynced");
    let store = recovers(dir.path(), &kept);
    drop(store);

    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::None, io.clone());
    io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
    assert_eq!(set(&store, b"unsynced", b"v"), Some(true));
    assert!(!store.sync(), "its fsync failed");
    assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
    assert!(!store.sync(), "poisoned");
}

/// A snapshot's load clears LMDB, and retention may then let go of the
/// segments the cleared items' values lived in: the clearing is durable
/// before that, so a power cut during the load leaves a replica that knows
/// its load was cut, not one back at its old position with values in
/// segments that are gone.
#[test]
fn a_power_cut_during_a_snapshot_load_after_retention_leaves_no_position() {
    use kura_store::replication::Replication;
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = DiskStore::open(DiskConfig {
        log_retention: LogRetention::NOTHING,
        ..config(dir.path(), SyncPolicy::Batch, io.clone())
    })
    .unwrap();
    assert_eq!(set(&store, b"large", &value_of(1, 4096)), Some(true));
    store.wait_until_all_applied();
    let first = dir.path().join("journal-0000000000000001.log");
    assert!(first.exists(), "the large value lives in the first segment");
    let base = store.load_base().unwrap();
    // The applier looks at retention every 10 s (the load holds the
    // journal: no write, no round, meanwhile).
    let deadline = Instant::now() + Duration::from_secs(40);
    while first.exists() {
        assert!(
            Instant::now() < deadline,
            "retention kept the cleared segment"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    io.crash();
    drop(base);
    drop(store);
    io.cut_power(Torn::Nothing);
    let store = open(dir.path(), SyncPolicy::Batch, FaultyIo::new(dir.path()));
    assert_eq!(store.position(), None, "the cut load is known");
    assert_eq!(get(&store, b"large"), None);
}

/// A backup holds no entry a power cut can take back: under `none` the
/// log it copies is made durable first, so the server's history cannot
/// number the backup's LSNs again with other changes.
#[test]
fn a_backup_makes_the_log_it_copies_durable_under_none() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::None, io.clone());
    let kept = fill(&store, 50, 700);
    assert!(!io.all_synced(), "`none` fsyncs nothing by itself");
    let work = tempfile::tempdir().unwrap();
    store.backup(&work.path().join("full"), None).unwrap();
    assert!(io.all_synced(), "the backup left entries unsynced");
    io.crash();
    drop(store);
    assert_eq!(io.cut_power(Torn::HalfPage), 0, "nothing was left unsynced");
    drop(recovers(dir.path(), &kept));
}

/// A `sync` while the applier is still fsyncing the segment it just
/// switched away from (a segment never synced before takes long) does not
/// answer before that segment is durable too.
#[test]
fn a_sync_covers_a_segment_whose_fsync_after_a_switch_is_still_running() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::None, io.clone());
    fill(&store, 50, 700);
    io.set(|f| f.slow_next_sync = Some(Duration::from_secs(2)));
    std::thread::scope(|scope| {
        // The round switches segments, then fsyncs the old one: slowly.
        scope.spawn(|| store.wait_until_all_applied());
        wait_for_a_slow_sync(&io);
        assert!(store.sync());
        assert!(
            io.all_synced(),
            "sync answered before the retired segment was durable"
        );
    });
}

/// A CAS an acknowledged reply showed is never handed out again after a
/// crash, not even one whose write no log record kept: a set and a delete
/// of the same key before the next append leave only the delete in the log.
#[test]
fn a_cas_shown_before_a_power_cut_is_not_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let set_cas = |store: &DiskStore, key: &[u8], fence: &AckFence| match store_set(
        store, key, b"v", 0, fence,
    ) {
        StoreOutcome::Stored { cas } => cas,
        other => panic!("unexpected {other:?}"),
    };
    fill(&store, 3, 10);
    store.wait_until_all_applied();
    let mut shown = 0;
    for i in 0..20 {
        let key = format!("k{i}").into_bytes();
        let (set_fence, delete_fence) = (AckFence::default(), AckFence::default());
        shown = set_cas(&store, &key, &set_fence);
        let deleted = store.delete(&key, &DeleteCommand::default(), &delete_fence);
        assert_eq!(deleted, DeleteOutcome::Deleted);
        assert_eq!(acknowledged(&store, &set_fence), AckState::Ready);
        assert_eq!(acknowledged(&store, &delete_fence), AckState::Ready);
    }
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    let store = open(dir.path(), SyncPolicy::Always, Arc::new(OsIo));
    let again = set_cas(&store, b"k19", &AckFence::default());
    assert!(
        again > shown,
        "CAS {shown} was shown before the cut, {again} after"
    );
}

/// Under `batch` the syncer's fsync covers the segments the applier has
/// retired and not yet fsynced, not only the current one: a write it makes
/// durable never outlives an earlier one a power cut takes (a hole in the
/// log, which the replay would step over).
#[test]
fn a_power_cut_under_batch_never_keeps_a_write_after_a_segment_switch_and_loses_one_before() {
    for attempt in 0..3 {
        let (dir, io, store, kept) = synced_under_batch(5, 100);
        // The applier's fsync of the segment it retires is slow: the next
        // write lands in the new segment meanwhile, and the syncer runs.
        io.set(|f| f.slow_applier_syncs = Some(Duration::from_millis(500)));
        assert_eq!(set(&store, b"earlier", b"A"), Some(true));
        std::thread::scope(|scope| {
            scope.spawn(|| store.wait_until_all_applied());
            wait_for_a_slow_sync(&io);
            assert_eq!(set(&store, b"later", b"B"), Some(true));
            // Past a few of the syncer's 10 ms ticks.
            std::thread::sleep(Duration::from_millis(100));
            io.crash();
        });
        drop(store);
        io.cut_power(Torn::Nothing);
        let store = recovers(dir.path(), &kept);
        let (earlier, later) = (get(&store, b"earlier"), get(&store, b"later"));
        assert!(
            earlier.is_some() || later.is_none(),
            "attempt {attempt}: the later write stayed, the earlier one was lost"
        );
    }
}

/// `batch` promises what an fsync covered: a power cut may take the writes
/// acknowledged since the last one, newest first, never one before a write
/// that stays. The cut lands on a healthy engine in the middle of its
/// appends, during an fsync, so the writes after the last one leave a
/// torn page.
#[test]
fn a_power_cut_under_batch_keeps_writes_the_last_fsync_covered_and_no_hole() {
    const WRITES: usize = 300;
    let mut torn_cuts = 0;
    for attempt in 0..5 {
        let (dir, io, store, kept) = synced_under_batch(50, 700);
        let recent: Vec<(Vec<u8>, Vec<u8>)> = (0..WRITES)
            .map(|i| (format!("recent{i:03}").into_bytes(), value_of(i, 700)))
            .collect();
        // Spread over tens of the syncer's 10 ms intervals: most are
        // covered by an fsync when the power goes. The fsync after the
        // last but one is slow, and the power goes during it: a loaded
        // machine could otherwise let the syncer cover every write before
        // the cut, and leave nothing to tear.
        let mut acknowledged_at = Vec::new();
        for (i, (key, value)) in recent.iter().enumerate() {
            if i == WRITES - 2 {
                io.set(|f| f.slow_next_sync = Some(Duration::from_secs(1)));
            }
            assert_eq!(set(&store, key, value), Some(true));
            acknowledged_at.push(Instant::now());
            if i == WRITES - 2 {
                wait_for_a_slow_sync(&io);
            } else if i < WRITES - 2 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        io.crash();
        let crashed_at = Instant::now();
        drop(store);
        let torn = io.cut_power(Torn::ALL[1 + attempt % 3]);
        torn_cuts += usize::from(torn > 0);
        let store = recovers(dir.path(), &kept);
        let survived = recent
            .iter()
            .take_while(|(key, value)| get(&store, key).as_ref() == Some(value))
            .count();
        // The window is an fsync interval (10 ms) and an fsync; a loaded
        // machine (CI runs tests side by side) gets forty times that.
        let lost_since = crashed_at - acknowledged_at.get(survived).copied().unwrap_or(crashed_at);
        assert!(
            lost_since < Duration::from_millis(400),
            "attempt {attempt}: writes acknowledged {lost_since:?} before the cut were lost"
        );
        for (key, _) in &recent[survived..] {
            assert_eq!(
                get(&store, key),
                None,
                "attempt {attempt}: {} stayed after a write that was lost",
                String::from_utf8_lossy(key)
            );
        }
    }
    assert!(torn_cuts > 0, "no cut of five left a torn page");
}

/// The power goes while writers are appending, on an engine nothing was
/// failing: under `always` every write acknowledged is there after it.
#[test]
fn a_power_cut_amid_writers_under_always_keeps_every_acknowledged_write() {
    const WRITERS: usize = 4;
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(dir.path());
        let store = open(dir.path(), SyncPolicy::Always, io.clone());
        let lens = |writer| 300 + 500 * writer;
        let acknowledged =
            write_until_refused(&store, WRITERS, lens, 50 + 20 * round, || io.crash());
        drop(store);
        io.cut_power(Torn::ALL[round % Torn::ALL.len()]);
        assert!(!acknowledged.is_empty(), "round {round}: nothing written");
        recovers(dir.path(), &acknowledged);
    }
}

/// A read of the log that fails at open is not the end of the log: the
/// writes after it were acknowledged.
#[test]
fn a_failed_read_while_replaying_fails_the_open_instead_of_dropping_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (error, kept) =
        failed_open_after_a_power_cut(dir.path(), |f| f.read_log = Some(Fault::Fails(libc::EIO)));
    assert!(
        error.contains("reading journal segment") && error.contains("Input/output error"),
        "{error}"
    );
    recovers(dir.path(), &kept);
}

/// A record damaged in the middle of the log ends the replay there, as a
/// torn append does: the open goes on with what came before it and says
/// how much it dropped (`log_replay_dropped_bytes`), rather than hide it.
#[test]
fn a_damaged_record_ends_the_replay_and_the_bytes_dropped_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let written = only_in_the_log_after_a_power_cut(dir.path());
    // The segment the writes went to (the newest may be empty).
    let segment = (std::fs::read_dir(dir.path()).unwrap())
        .map(|entry| entry.unwrap().path())
        .filter(|path| is_segment(path))
        .max_by_key(|path| std::fs::metadata(path).unwrap().len())
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    // The record that holds the middle byte: flip a bit of its body.
    let middle = bytes.len() as u64 / 2;
    let mut start = 0u64;
    loop {
        let len = u32::from_le_bytes(bytes[start as usize..][..4].try_into().unwrap()) as u64;
        if start + 8 + len > middle {
            break;
        }
        start += 8 + len;
    }
    bytes[start as usize + 8] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let store = open(dir.path(), SyncPolicy::Always, Arc::new(OsIo));
    assert_eq!(
        engine_stat(&store, "log_replay_dropped_bytes"),
        (bytes.len() as u64 - start).to_string()
    );
    let kept: Vec<_> = (written.iter())
        .filter(|(key, value)| get(&store, key).as_ref() == Some(*value))
        .collect();
    assert!(
        !kept.is_empty() && kept.len() < written.len(),
        "{} of {} kept",
        kept.len(),
        written.len()
    );
    assert_eq!(engine_stat(&store, "disk_poisoned"), "0");
}

/// The log of [`only_in_the_log_after_a_power_cut`] (40 groups of one set
/// each, none applied) split in two segments, the second from group 30 on,
/// with `first` the first segment's bytes changed; the second's path.
fn split_in_two_segments(dir: &Path, first: impl FnOnce(&mut Vec<u8>, &[usize])) -> PathBuf {
    only_in_the_log_after_a_power_cut(dir);
    let segment = (std::fs::read_dir(dir).unwrap())
        .map(|entry| entry.unwrap().path())
        .filter(|path| is_segment(path))
        .max_by_key(|path| std::fs::metadata(path).unwrap().len())
        .expect("a segment");
    let name = segment.file_name().unwrap().to_str().unwrap();
    let number =
        u64::from_str_radix(&name["journal-".len()..name.len() - ".log".len()], 16).unwrap();
    let bytes = std::fs::read(&segment).unwrap();
    // Where each group starts (a record of kind 5).
    let mut groups = Vec::new();
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..][..4].try_into().unwrap()) as usize;
        if bytes[at + 8] == 5 {
            groups.push(at);
        }
        at += 8 + len;
    }
    assert_eq!(groups.len(), 40, "one group a set");
    let next = dir.join(format!("journal-{:016x}.log", number + 1));
    std::fs::write(&next, &bytes[groups[30]..]).unwrap();
    let mut kept = bytes[..groups[30]].to_vec();
    first(&mut kept, &groups);
    std::fs::write(&segment, &kept).unwrap();
    next
}

/// The keys of `present` are there with their values, the others of the
/// 40 are not, and the log reads back as entries 1 to `present.len()` and
/// one set after them: no hole, nothing twice.
fn holds_exactly(dir: &Path, sync: SyncPolicy, present: std::ops::Range<usize>) {
    let store = open(dir, sync, Arc::new(OsIo));
    for i in 0..40 {
        let key = format!("key{i}").into_bytes();
        assert_eq!(
            get(&store, &key),
            present.contains(&i).then(|| value_of(i, 1000)),
            "key{i}"
        );
    }
    assert_eq!(set(&store, b"after", b"v"), Some(true));
    drop(store);
    let mut lsns = Vec::new();
    kura_store::disk::history::read(dir, kura_store::disk::history::Values::Skip, |entry| {
        lsns.push(entry.lsn);
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let entries = present.len() as u64 + 1;
    assert_eq!(
        lsns,
        (1..=entries).collect::<Vec<u64>>(),
        "no hole, nothing twice"
    );
}

/// A segment whose first entry comes after the LSN the replay reached was
/// written after entries were lost: replayed, it would leave a hole in the
/// log's history. Under a policy that may lose the last writes (writeback
/// reached the newer segment before the older one's fsync, and the power
/// went) it is set aside; under `always` that is damage to what was
/// fsynced, and the open refuses and says what to move aside. Found by the
/// numbering, the older segment cut at a group boundary as well as torn.
#[test]
fn a_segment_written_after_lost_entries_is_set_aside_or_refused() {
    for torn in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let next = split_in_two_segments(dir.path(), |bytes, groups| match torn {
            // Group 10's head damaged.
            true => bytes[groups[10] + 8 + 3] ^= 0x40,
            // Cut after group 9, at a group's end.
            false => bytes.truncate(groups[10]),
        });
        let refused = DiskStore::open(config(dir.path(), SyncPolicy::Always, Arc::new(OsIo)));
        let error = refused.err().expect("refused under always").to_string();
        assert!(
            error.contains("lacks entries from LSN 11 on")
                && error.contains("move it and the segments after it"),
            "{error}"
        );
        holds_exactly(dir.path(), SyncPolicy::Batch, 0..10);
        let aside = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|entry| entry.unwrap().file_name().into_string().ok())
            .filter(|name| name.contains(".log.dropped-"))
            .count();
        assert_eq!(aside, 1, "torn: {torn}");
        assert!(!next.exists());
    }
}

/// A group torn at a segment's end (a kill mid-append) is dropped, and the
/// next segment numbers on from its first LSN: that is no hole, and is
/// replayed, as a restore replays such a segment of its chain again.
#[test]
fn a_segment_numbering_on_after_a_torn_group_is_replayed() {
    let dir = tempfile::tempdir().unwrap();
    split_in_two_segments(dir.path(), |bytes, groups| {
        let len = u32::from_le_bytes(bytes[groups[29]..][..4].try_into().unwrap()) as usize;
        let head_end = groups[29] + 8 + len;
        let mut copy = bytes[groups[29]..head_end].to_vec();
        // Group 29's head, numbered as group 30's (LSN 31), then cut.
        let lsn_at = 8 + 3;
        copy[lsn_at..lsn_at + 8].copy_from_slice(&31u64.to_le_bytes());
        let crc = crc32fast::hash(&copy[8..]);
        copy[4..8].copy_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&copy);
        bytes.extend_from_slice(&50u32.to_le_bytes());
    });
    holds_exactly(dir.path(), SyncPolicy::Always, 0..40);
}

/// An open that cannot commit for want of space names the full disk
/// (LMDB's own words would be an errno), and opens once there is room.
#[test]
fn an_open_on_a_full_disk_says_so_and_opens_once_there_is_room() {
    let dir = tempfile::tempdir().unwrap();
    let (error, kept) =
        failed_open_after_a_power_cut(dir.path(), |f| f.commit = Some(Fault::Fails(libc::ENOSPC)));
    assert!(
        error.contains("is full") && error.contains("free space and start again"),
        "{error}"
    );
    recovers(dir.path(), &kept);
}

/// The replay after a power cut stores a large value as a pointer into the
/// log, as the applier does: LMDB does not get a copy.
#[test]
fn large_values_replayed_after_a_power_cut_stay_in_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let kept = fill(&store, 40, 8 * 1024);
    assert_eq!(
        engine_stat(&store, "disk_journal_live_bytes"),
        "0",
        "nothing applied yet"
    );
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    let store = recovers(dir.path(), &kept);
    let live: u64 = engine_stat(&store, "disk_journal_live_bytes")
        .parse()
        .unwrap();
    assert!(live >= 40 * 8 * 1024, "{live} bytes of the log pointed to");
}

#[test]
fn a_power_cut_keeps_every_row_acknowledged_under_always() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let tables = store.tables().unwrap();
    let put_row = |key: &str, mode: RowMode| {
        let mut row = Record::new(key.as_bytes());
        row.put(b"n", key.as_bytes());
        let fence = AckFence::default();
        assert_eq!(tables.put_row(b"t", &row, mode, &fence), RowOutcome::Done);
        acknowledged(&store, &fence)
    };
    // Some rows in LMDB, more only in the log when the power goes.
    for k in 0..50 {
        assert_eq!(
            put_row(&format!("applied{k:02}"), RowMode::Put),
            AckState::Ready
        );
    }
    store.wait_until_all_applied();
    for k in 0..50 {
        assert_eq!(
            put_row(&format!("logged{k:02}"), RowMode::Keep),
            AckState::Ready
        );
    }
    let fence = AckFence::default();
    assert_eq!(
        tables.remove_row(b"t", b"applied00", &fence),
        RowOutcome::Done
    );
    assert_eq!(acknowledged(&store, &fence), AckState::Ready);
    // One appended but never fsynced: not acknowledged, and gone.
    io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
    assert_ne!(put_row("in flight", RowMode::Put), AckState::Ready);
    io.crash();
    drop(store);
    io.cut_power(Torn::Flipped);
    let store = open(dir.path(), SyncPolicy::Always, Arc::new(OsIo));
    let mut keys = Vec::new();
    store
        .tables()
        .unwrap()
        .visit_rows(b"t", &mut |row| {
            let row = row.to_record();
            assert_eq!(row.get(b"n"), Some(&row.key[..]));
            keys.push(String::from_utf8(row.key).unwrap());
            true
        })
        .unwrap();
    let expected: Vec<String> = (1..50)
        .map(|k| format!("applied{k:02}"))
        .chain((0..50).map(|k| format!("logged{k:02}")))
        .collect();
    assert_eq!(keys, expected);
}

/// Under `interval` an hour long, nothing but a round that keeps its
/// segment fsyncs the log within a test.
fn open_fsyncing_hourly(dir: &Path, io: Arc<FaultyIo>) -> DiskStore {
    open(dir, SyncPolicy::Interval(Duration::from_secs(3600)), io)
}

#[test]
fn a_failed_fsync_in_a_round_that_keeps_its_segment_poisons_the_engine() {
    // Under `interval` nothing else fsyncs the log before the hour is up:
    // the round's own fsync is the one that fails.
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open_fsyncing_hourly(dir.path(), io.clone());
    let mut kept = fill(&store, 20, 3000);
    io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
    assert_eq!(set(&store, b"unsynced", b"v"), Some(true));
    kept.insert(b"unsynced".to_vec(), b"v".to_vec());
    // Asks for a round only to catch LMDB up; its fsync fails.
    store.stats();
    assert_eq!(engine_stat(&store, "disk_poisoned"), "1");
    assert_eq!(set(&store, b"after", b"v"), None, "writes are refused");
    serves_what_it_took_until_and_after_a_restart(store, dir.path(), &kept);
}

#[test]
fn a_round_that_keeps_its_segment_fsyncs_it_before_lmdb_points_into_it() {
    // Under `interval` an acknowledgement does not wait for the fsync: only
    // the round's own fsync makes the log's values durable before LMDB,
    // whose commit is fsynced, points to them.
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open_fsyncing_hourly(dir.path(), io.clone());
    let mut applied = BTreeMap::new();
    for i in 0..20 {
        // Large enough to stay in the log, with a pointer in LMDB.
        let (key, value) = (format!("key{i}").into_bytes(), value_of(i, 3000));
        assert_eq!(set(&store, &key, &value), Some(true));
        applied.insert(key, value);
        // Asks for a round only to catch LMDB up: the segment goes on.
        store.stats();
    }
    assert!(
        engine_stat(&store, "disk_applies").parse::<u64>().unwrap() >= 20,
        "every stats had a round"
    );
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    drop(recovers(dir.path(), &applied));
    let segments = fs::read_dir(dir.path())
        .unwrap()
        .filter(|entry| is_segment(&entry.as_ref().unwrap().path()))
        .count();
    // The one the rounds kept, and the one the reopening started.
    assert!(segments <= 3, "{segments} segments");
}

/// Random writes and flushes against a `BTreeMap` model, the power cut at random points
/// (the engine's threads mid-round), a torn page, a restart: the engine
/// must equal the model. `KURA_MODEL_SECONDS` runs longer (default 4).
#[test]
fn random_writes_and_power_cuts_equal_a_model() {
    let seconds = std::env::var("KURA_MODEL_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4u64);
    let seed = std::env::var("KURA_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64);
    eprintln!("model test: {seconds} s, KURA_MODEL_SEED={seed}");
    let mut random = Random(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let started = Instant::now();
    let (mut cuts, mut operations, mut torn_bytes) = (0, 0, 0);
    while started.elapsed() < Duration::from_secs(seconds) {
        let io = FaultyIo::new(dir.path());
        let store = open(dir.path(), SyncPolicy::Always, io.clone());
        for k in 0..64 {
            let key = format!("k{k}").into_bytes();
            assert_eq!(
                get(&store, &key).as_ref(),
                model.get(&key),
                "after {cuts} cuts (seed {seed})"
            );
        }
        let burst = random.below(300) + 1;
        for _ in 0..burst {
            operations += 1;
            let key = format!("k{}", random.below(64)).into_bytes();
            if random.below(30) == 0 {
                // A round only to catch LMDB up: it keeps the segment, so
                // a cut finds LMDB holding part of the one the replay redoes.
                store.stats();
            }
            if random.below(100) == 0 {
                // Applied in the applier's next round, so a cut often
                // finds it only in the log.
                let fence = AckFence::default();
                store.flush_all(0, &fence);
                assert_eq!(acknowledged(&store, &fence), AckState::Ready);
                model.clear();
                assert_eq!(get(&store, &key), None, "flushed before its round");
            } else if random.below(5) == 0 {
                let fence = AckFence::default();
                let outcome = store.delete(&key, &DeleteCommand::default(), &fence);
                assert_eq!(acknowledged(&store, &fence), AckState::Ready);
                assert_eq!(
                    outcome == DeleteOutcome::Deleted,
                    model.remove(&key).is_some()
                );
            } else {
                // Small values in the data file, large ones in the log.
                let len = [10, 900, 3000][random.below(3) as usize];
                let value = value_of(random.below(1_000_000) as usize, len);
                assert_eq!(set(&store, &key, &value), Some(true));
                model.insert(key, value);
            }
        }
        if random.below(2) == 0 {
            // A write appended but not fsynced: lost with the power, or
            // left as a torn page.
            io.set(|f| f.sync_log = Some(Fault::Fails(libc::EIO)));
            assert_eq!(set(&store, b"k0", &value_of(7, 2000)), Some(false));
        }
        // Let the applier and syncer get part way into a round.
        std::thread::sleep(Duration::from_micros(random.below(3000)));
        io.crash();
        drop(store);
        torn_bytes += io.cut_power(Torn::ALL[random.below(4) as usize]);
        cuts += 1;
    }
    let store = recovers(dir.path(), &model);
    assert_eq!(store.stats().curr_items, model.len() as u64);
    eprintln!(
        "model test: {operations} operations, {cuts} power cuts, {torn_bytes} torn bytes left"
    );
    assert!(cuts >= 2, "too few cuts to show anything");
}

/// xorshift64: reproducible from its seed, no dependency.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn a_peers_flush_whose_append_fails_on_a_full_disk_is_taken_when_it_comes_again() {
    use kura_store::replication::{LogPosition, Replication};
    let peer = |dir: &Path, id: u32, io: Arc<dyn Io>| {
        DiskStore::open(DiskConfig {
            server_id: Some(id),
            multi_primary: Some(kura_store::MultiPrimary {
                tombstone_lifetime: Duration::from_secs(60),
            }),
            ..config(dir, SyncPolicy::Batch, io)
        })
        .expect("opens")
    };
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = peer(a_dir.path(), 1, Arc::new(OsIo));
    let io = FaultyIo::new(b_dir.path());
    let b = peer(b_dir.path(), 2, io.clone());
    // Every group of A's log after `after`, applied to B; the first error.
    let exchange = |after: LogPosition| -> Result<(), String> {
        let mut feed = a.feed(after).unwrap();
        while let Some(group) = feed.next_group(Duration::from_millis(50)).unwrap() {
            b.take_peer_group("a", &group.bytes, true)?;
        }
        b.wait_until_all_applied();
        Ok(())
    };
    assert_eq!(set(&a, b"old", b"v"), Some(true));
    exchange(LogPosition::default()).unwrap();
    assert_eq!(get(&b, b"old").as_deref(), Some(&b"v"[..]));
    let before_flush = a.position().unwrap();
    a.flush_all(0, &AckFence::default());
    a.wait_until_all_applied();

    io.set(|f| f.write_log = Some(Fault::Fails(libc::ENOSPC)));
    assert!(exchange(before_flush).is_err(), "the append fails");
    io.set(|f| f.write_log = None);
    b.maintain();
    exchange(before_flush).unwrap();
    assert_eq!(get(&b, b"old"), None, "flushed now");
    drop(b);
    let b = peer(b_dir.path(), 2, Arc::new(OsIo));
    assert_eq!(
        get(&b, b"old"),
        None,
        "and after a restart: the flush was journalled"
    );
}

/// A `setindex` whose commit fails between its batches answers with an
/// error, and its index is neither used nor left behind: what it had put
/// goes at the next open, and it can be built again.
#[test]
fn a_failed_commit_while_an_index_builds_leaves_no_index_behind() {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Batch, io.clone());
    let tables = store.tables().unwrap();
    // About 90 distinct grams a row: three of the build's batches.
    for n in 0..6_000 {
        let mut row = Record::new(format!("r{n:05}").as_bytes());
        let text = format!("row {n}: the quick brown fox jumps over the lazy dog, and sleeps on");
        row.put(b"text", text.as_bytes());
        let outcome = tables.put_row(b"t", &row, RowMode::Put, &AckFence::default());
        assert_eq!(outcome, RowOutcome::Done);
    }
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    let build = IndexCommand::Build {
        kind: IndexKind::QGram,
        keep: false,
    };
    // The definition and the first batch commit; the second fails.
    io.set(|f| f.commits_left = Some(2));
    assert!(tables.set_index(b"t", b"text", build).is_err());
    assert_eq!(tables.indexes(b"t"), Vec::new(), "not used");
    drop(store);
    io.set(|f| f.commits_left = None);
    {
        let store = open(dir.path(), SyncPolicy::Batch, Arc::new(OsIo));
        assert_eq!(store.tables().unwrap().indexes(b"t"), Vec::new());
    }
    let mut left = 0;
    common::edit_lmdb(dir.path(), |lmdb| {
        left = lmdb.indexes.len(&lmdb.txn).unwrap()
    });
    assert_eq!(left, 0, "no entry of the index is left");
    let store = open(dir.path(), SyncPolicy::Batch, Arc::new(OsIo));
    let tables = store.tables().unwrap();
    tables.set_index(b"t", b"text", build).unwrap();
    assert_eq!(tables.indexes(b"t"), [(b"text".to_vec(), IndexKind::QGram)]);
    assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
}

/// A power cut during the first open leaves a directory that opens: its
/// format is durable before its first segment (here the data file's fsync
/// fails, and the open with it).
#[test]
fn a_power_cut_during_the_first_open_leaves_a_directory_that_opens() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    io.set(|f| f.sync_data = Some(Fault::Fails(libc::EIO)));
    let opened = DiskStore::open(config(dir.path(), SyncPolicy::Always, io.clone()));
    assert!(opened.is_err());
    drop(opened);
    io.crash();
    io.cut_power(Torn::Nothing);
    let store = open(dir.path(), SyncPolicy::Always, Arc::new(OsIo));
    assert_eq!(set(&store, b"k", b"v"), Some(true));
    assert_eq!(get(&store, b"k"), Some(b"v".to_vec()));
}

/// Index definitions are not in the update log: a `setindex` that answered
/// is on disk, built or dropped, when the power goes on an idle server.
#[test]
fn an_index_built_or_dropped_survives_a_power_cut() {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let tables = store.tables().unwrap();
    for n in 0..100 {
        let mut row = Record::new(format!("r{n:03}").as_bytes());
        row.put(b"age", n.to_string().as_bytes());
        row.put(b"name", format!("n{n}").as_bytes());
        let outcome = tables.put_row(b"t", &row, RowMode::Put, &AckFence::default());
        assert_eq!(outcome, RowOutcome::Done);
    }
    assert_eq!(store.wait_until_all_applied(), AckState::Ready);
    let build = |kind| IndexCommand::Build { kind, keep: false };
    tables
        .set_index(b"t", b"name", build(IndexKind::Lexical))
        .unwrap();
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    let io = FaultyIo::new(dir.path());
    let store = open(dir.path(), SyncPolicy::Always, io.clone());
    let tables = store.tables().unwrap();
    assert_eq!(
        tables.indexes(b"t"),
        [(b"name".to_vec(), IndexKind::Lexical)]
    );
    tables
        .set_index(b"t", b"age", build(IndexKind::Decimal))
        .unwrap();
    tables.set_index(b"t", b"name", IndexCommand::Void).unwrap();
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    let store = open(dir.path(), SyncPolicy::Always, Arc::new(OsIo));
    let tables = store.tables().unwrap();
    assert_eq!(
        tables.indexes(b"t"),
        [(b"age".to_vec(), IndexKind::Decimal)]
    );
    assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
}

#[test]
fn a_segment_freed_by_removing_expired_items_goes_only_once_that_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(dir.path());
    let store = DiskStore::open(DiskConfig {
        log_retention: kura_store::LogRetention::NOTHING,
        log_values_from: 100,
        ..config(dir.path(), SyncPolicy::Always, io.clone())
    })
    .expect("opens");
    // Values in the log, expiring in a second, applied: LMDB points into
    // their segment.
    for n in 0..10 {
        let key = format!("e{n}");
        let command = StoreCommand {
            mode: StoreMode::Set,
            key: key.as_bytes(),
            value: &value_of(n, 2000),
            flags: 0,
            expiry: store.clock().expiry(1),
            compare_cas: None,
            stale_if_older: false,
        };
        let fence = AckFence::default();
        store.store(&command, &fence);
        assert_eq!(acknowledged(&store, &fence), AckState::Ready);
    }
    store.wait_until_all_applied();
    let segments = |dir: &Path| {
        fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|entry| is_segment(&entry.path()))
            .count()
    };
    let before = segments(dir.path());
    std::thread::sleep(Duration::from_millis(2100));
    // The crawl's round removes them: nothing points into their segment
    // any more, once that round is durable. Retention lets it go then.
    assert_eq!(store.crawl(&|_| true), 10);
    let deadline = Instant::now() + Duration::from_secs(20);
    while segments(dir.path()) >= before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(segments(dir.path()) < before, "the freed segment goes");
    io.crash();
    drop(store);
    io.cut_power(Torn::Nothing);
    // What the power cut kept must not point into the deleted segment.
    let store = recovers(dir.path(), &BTreeMap::new());
    for n in 0..10 {
        let key = format!("e{n}");
        assert_eq!(get(&store, key.as_bytes()), None);
        let command = StoreCommand {
            mode: StoreMode::Add,
            key: key.as_bytes(),
            value: b"again",
            flags: 0,
            expiry: 0,
            compare_cas: None,
            stale_if_older: false,
        };
        assert!(
            matches!(
                store.store(&command, &AckFence::default()),
                kura_store::StoreOutcome::Stored { .. }
            ),
            "{key}"
        );
    }
}

#[test]
fn a_failed_fsync_as_a_replica_finishes_a_snapshot_poisons_it_and_it_loads_again_after_a_restart() {
    use kura_store::replication::{Replication, SnapshotPart};
    let master_dir = tempfile::tempdir().unwrap();
    let master = open(master_dir.path(), SyncPolicy::Batch, Arc::new(OsIo));
    let kept = fill(&master, 20, 500);
    // A snapshot sends what the data file holds.
    assert_eq!(master.wait_until_all_applied(), AckState::Ready);
    let (at, _feed, parts) = common::snapshot_records(&master);
    let load = |replica: &DiskStore| {
        let mut base = replica.load_base()?;
        for part in &parts {
            base.add(SnapshotPart::Records(part)).unwrap();
        }
        base.finish(at)
    };
    // The log's fsync (the segment the snapshot retires), then the data
    // file's (that of the clearing that starts the load).
    type Failure = fn(&mut Faults);
    let failures: [Failure; 2] = [
        |f| f.sync_log = Some(Fault::Fails(libc::EIO)),
        |f| f.sync_data = Some(Fault::Fails(libc::EIO)),
    ];
    for failure in failures {
        let replica_dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(replica_dir.path());
        let replica = open(replica_dir.path(), SyncPolicy::Batch, io.clone());
        io.set(failure);
        assert!(load(&replica).is_err(), "the snapshot is not finished");
        assert_eq!(engine_stat(&replica, "disk_poisoned"), "1");
        assert_ne!(replica.position(), Some(at));
        io.crash();
        drop(replica);
        io.cut_power(Torn::Nothing);
        let replica = open(replica_dir.path(), SyncPolicy::Batch, Arc::new(OsIo));
        assert_ne!(replica.position(), Some(at), "no snapshot is claimed");
        load(&replica).expect("loads again");
        assert_eq!(replica.position(), Some(at));
        drop(replica);
        recovers(replica_dir.path(), &kept);
    }
}
