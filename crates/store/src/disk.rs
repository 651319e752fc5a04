//! The disk engine: every item in LMDB (through `heed`), so data survives
//! restarts and crashes, and reads of data larger than RAM cost about one
//! page-cache miss.
//!
//! ```text
//!  <dir>/data.mdb
//!    items   key ─▶ [flags u32 LE | expiry u32 LE (Unix s, 0 = never) | cas u64 LE | bits u8 | value …]
//!    expiry  [expiry u32 BE | key] ─▶ ()      (background reclaim walks this in time order)
//!    meta    "cas" ─▶ u64 LE                  (the last CAS handed out: unique across restarts)
//! ```
//!
//! Reads are read transactions and write nothing unless the item's state
//! changes (first fetch, touch, a recache win, expiry). Writes commit one
//! transaction each; LMDB serialises them. Durability follows
//! [`SyncPolicy`]: the environment is opened without LMDB's own fsync, and
//! kura syncs as the policy says. A failed sync poisons the engine: it
//! refuses writes rather than pretend they are safe.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RoTxn, RwTxn};
use parking_lot::Mutex;

use crate::classes::SizeClasses;
use crate::clock::{Clock, ExpiryTime};
use crate::{
    ArithCommand, ArithOutcome, ClassStats, DebugView, DeleteCommand, DeleteOutcome, GetOptions,
    ItemInfo, ItemView, Store, StoreCommand, StoreMode, StoreOutcome, StoreStats,
};

const HEADER_LEN: usize = 17;
const FETCHED: u8 = 1;
const STALE: u8 = 2;
const WIN_SENT: u8 = 4;
/// Expired items removed per maintenance call (one write transaction).
const MAINTAIN_BATCH: usize = 10_000;

/// When an acknowledged write reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Acknowledge only after the write is on disk; writers that commit at
    /// the same time share one fsync.
    Always,
    /// Acknowledge after the commit (the data is in the OS page cache, safe
    /// from a crash of kura itself); fsync in the background at once.
    Batch,
    /// Acknowledge after the commit; fsync every interval. A power loss may
    /// lose at most that window.
    Interval(Duration),
    /// Never fsync explicitly: the OS writes back when it likes.
    None,
}

impl std::str::FromStr for SyncPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "always" => Ok(SyncPolicy::Always),
            "batch" => Ok(SyncPolicy::Batch),
            "none" => Ok(SyncPolicy::None),
            _ => {
                let interval = text.strip_prefix("interval=").ok_or_else(|| {
                    format!(
                        "unknown sync policy '{text}' (always, batch, interval=<duration>, none)"
                    )
                })?;
                let (number, scale) = if let Some(ms) = interval.strip_suffix("ms") {
                    (ms, 0.001)
                } else if let Some(s) = interval.strip_suffix('s') {
                    (s, 1.0)
                } else {
                    (interval, 1.0)
                };
                let seconds: f64 = number
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("bad sync interval '{interval}' (e.g. 1s, 200ms)"))?;
                Ok(SyncPolicy::Interval(Duration::from_secs_f64(
                    seconds * scale,
                )))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct DiskConfig {
    pub dir: PathBuf,
    /// The largest the data file may grow (LMDB's map size).
    pub map_size: usize,
    pub sync: SyncPolicy,
    pub classes: SizeClasses,
}

/// Why the disk engine could not open.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create {0}: {1}")]
    Dir(PathBuf, std::io::Error),
    #[error("cannot open the LMDB environment: {0}")]
    Lmdb(#[from] heed::Error),
}

pub struct DiskStore {
    env: Env,
    items: Database<Bytes, Bytes>,
    expiry: Database<Bytes, Bytes>,
    meta: Database<Bytes, Bytes>,
    clock: Clock,
    classes: SizeClasses,
    sync: SyncPolicy,
    last_cas: AtomicU64,
    /// Commits made / commits known to be on disk, for shared fsyncs.
    committed: AtomicU64,
    synced: Mutex<u64>,
    /// Set when an fsync failed: writes are refused from then on.
    poisoned: AtomicBool,
    /// Server time of a pending delayed `flush_all`; 0 when none.
    flush_deadline: AtomicU32,
    counters: Counters,
    last_sync: Mutex<Instant>,
}

#[derive(Default)]
struct Counters {
    total_items: AtomicU64,
    commits: AtomicU64,
    fsyncs: AtomicU64,
    fsync_micros: AtomicU64,
    expired_unfetched: AtomicU64,
    reclaimed: AtomicU64,
    crawler_reclaimed: AtomicU64,
}

/// An item's header, decoded.
#[derive(Debug, Clone, Copy)]
struct Header {
    flags: u32,
    /// Unix seconds; 0 never expires.
    expiry_unix: u32,
    cas: u64,
    bits: u8,
}

impl Header {
    fn decode(bytes: &[u8]) -> Option<(Header, &[u8])> {
        if bytes.len() < HEADER_LEN {
            return None;
        }
        Some((
            Header {
                flags: u32::from_le_bytes(bytes[0..4].try_into().ok()?),
                expiry_unix: u32::from_le_bytes(bytes[4..8].try_into().ok()?),
                cas: u64::from_le_bytes(bytes[8..16].try_into().ok()?),
                bits: bytes[16],
            },
            &bytes[HEADER_LEN..],
        ))
    }

    fn encode(&self, value_parts: &[&[u8]]) -> Vec<u8> {
        let len = HEADER_LEN + value_parts.iter().map(|p| p.len()).sum::<usize>();
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&self.expiry_unix.to_le_bytes());
        out.extend_from_slice(&self.cas.to_le_bytes());
        out.push(self.bits);
        for part in value_parts {
            out.extend_from_slice(part);
        }
        out
    }
}

fn expiry_key(expiry_unix: u32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + key.len());
    out.extend_from_slice(&expiry_unix.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// A live item read in a write transaction: its header and a copy of its value.
type LiveItem = (Header, Vec<u8>);

/// Any LMDB failure on the write path: the write is not acknowledged.
#[derive(Debug)]
struct WriteFailed;

impl From<heed::Error> for WriteFailed {
    fn from(error: heed::Error) -> Self {
        report_write_failure(&error);
        WriteFailed
    }
}

fn report_write_failure(error: &heed::Error) {
    eprintln!("kura: disk engine write failed: {error}");
}

impl DiskStore {
    pub fn open(config: DiskConfig) -> Result<Self, OpenError> {
        std::fs::create_dir_all(&config.dir).map_err(|e| OpenError::Dir(config.dir.clone(), e))?;
        let mut options = EnvOpenOptions::new();
        options.map_size(config.map_size).max_dbs(4);
        // kura decides when to fsync (SyncPolicy), so LMDB's own commit sync is off.
        // SAFETY: the environment is opened once per process and directory; kura
        // never opens the same data file twice, and does not modify it outside LMDB.
        #[allow(unsafe_code)]
        let env = unsafe {
            options
                .flags(EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC)
                .open(&config.dir)?
        };
        let mut txn = env.write_txn()?;
        let items = env.create_database(&mut txn, Some("items"))?;
        let expiry = env.create_database(&mut txn, Some("expiry"))?;
        let meta: Database<Bytes, Bytes> = env.create_database(&mut txn, Some("meta"))?;
        let last_cas = meta
            .get(&txn, b"cas")?
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .unwrap_or(0);
        txn.commit()?;
        Ok(DiskStore {
            env,
            items,
            expiry,
            meta,
            clock: Clock::new(),
            classes: config.classes,
            sync: config.sync,
            last_cas: AtomicU64::new(last_cas),
            committed: AtomicU64::new(0),
            synced: Mutex::new(0),
            poisoned: AtomicBool::new(false),
            flush_deadline: AtomicU32::new(0),
            counters: Counters::default(),
            last_sync: Mutex::new(Instant::now()),
        })
    }

    pub fn path(&self) -> &Path {
        self.env.path()
    }

    fn now_unix(&self) -> u32 {
        self.clock.unix_now().min(u64::from(u32::MAX)) as u32
    }

    /// Server time → Unix time, for storing (0 stays "never").
    fn to_unix(&self, expiry: ExpiryTime) -> u32 {
        if expiry == 0 {
            0
        } else {
            let offset = i64::from(expiry) - i64::from(self.clock.now());
            (i64::from(self.now_unix()) + offset).clamp(1, i64::from(u32::MAX)) as u32
        }
    }

    fn ttl(&self, expiry_unix: u32) -> i64 {
        if expiry_unix == 0 {
            -1
        } else {
            i64::from(expiry_unix)
                .saturating_sub(i64::from(self.now_unix()))
                .max(0)
        }
    }

    fn expired(&self, header: &Header) -> bool {
        header.expiry_unix != 0 && header.expiry_unix <= self.now_unix()
    }

    fn next_cas(&self) -> u64 {
        self.last_cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Applies a delayed flush whose time has come.
    fn apply_due_flush(&self) {
        let deadline = self.flush_deadline.load(Ordering::Relaxed);
        if deadline != 0
            && self.clock.now() >= deadline
            && self
                .flush_deadline
                .compare_exchange(deadline, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            let _ = self.clear();
        }
    }

    fn clear(&self) -> Result<(), WriteFailed> {
        let mut txn = self.env.write_txn()?;
        self.items.clear(&mut txn)?;
        self.expiry.clear(&mut txn)?;
        self.commit(txn)
    }

    /// Commits and makes the write as durable as the policy promises.
    fn commit(&self, mut txn: RwTxn<'_>) -> Result<(), WriteFailed> {
        self.meta.put(
            &mut txn,
            b"cas",
            &self.last_cas.load(Ordering::Relaxed).to_le_bytes(),
        )?;
        txn.commit()?;
        let generation = self.committed.fetch_add(1, Ordering::AcqRel) + 1;
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        if self.sync == SyncPolicy::Always {
            self.sync_through(generation)?;
        }
        Ok(())
    }

    /// fsyncs unless another writer's fsync already covered `generation`:
    /// writers that commit together share one fsync.
    fn sync_through(&self, generation: u64) -> Result<(), WriteFailed> {
        let mut synced = self.synced.lock();
        if *synced >= generation {
            return Ok(());
        }
        let covering = self.committed.load(Ordering::Acquire);
        self.fsync()?;
        *synced = covering;
        Ok(())
    }

    fn fsync(&self) -> Result<(), WriteFailed> {
        let started = Instant::now();
        if let Err(error) = self.env.force_sync() {
            self.poisoned.store(true, Ordering::SeqCst);
            report_write_failure(&error);
            return Err(WriteFailed);
        }
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .fsync_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Syncs in the background as `batch` and `interval` promise.
    fn background_sync(&self) {
        let due = match self.sync {
            SyncPolicy::Batch => Duration::ZERO,
            SyncPolicy::Interval(every) => every,
            SyncPolicy::Always | SyncPolicy::None => return,
        };
        let mut last = self.last_sync.lock();
        if last.elapsed() < due {
            return;
        }
        let generation = self.committed.load(Ordering::Acquire);
        if *self.synced.lock() >= generation {
            return;
        }
        *last = Instant::now();
        drop(last);
        let _ = self.sync_through(generation);
    }

    fn writable(&self) -> bool {
        !self.poisoned.load(Ordering::SeqCst)
    }

    /// Reads an item in a read transaction; `None` for missing or dead.
    fn read<'t>(&self, txn: &'t RoTxn<'_>, key: &[u8]) -> Option<(Header, &'t [u8])> {
        let bytes = self.items.get(txn, key).ok()??;
        let (header, value) = Header::decode(bytes)?;
        (!self.expired(&header)).then_some((header, value))
    }

    /// Removes `key` and its expiry entry inside `txn`.
    fn remove(&self, txn: &mut RwTxn<'_>, key: &[u8], header: &Header) -> Result<(), WriteFailed> {
        self.items.delete(txn, key)?;
        if header.expiry_unix != 0 {
            self.expiry
                .delete(txn, &expiry_key(header.expiry_unix, key))?;
        }
        Ok(())
    }

    /// Writes `key` with `header` and value, keeping the expiry index right.
    fn write(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
        old: Option<&Header>,
        header: &Header,
        parts: &[&[u8]],
    ) -> Result<(), WriteFailed> {
        if let Some(old) = old {
            if old.expiry_unix != 0 && old.expiry_unix != header.expiry_unix {
                self.expiry.delete(txn, &expiry_key(old.expiry_unix, key))?;
            }
        }
        self.items.put(txn, key, &header.encode(parts))?;
        if header.expiry_unix != 0 {
            self.expiry
                .put(txn, &expiry_key(header.expiry_unix, key), &[])?;
        }
        Ok(())
    }

    /// Looks a key up in a write transaction, removing it if it has expired.
    /// Returns the live header and value (copied) if any, and whether a dead
    /// item was removed.
    fn read_for_write(
        &self,
        txn: &mut RwTxn<'_>,
        key: &[u8],
    ) -> Result<(Option<LiveItem>, bool), WriteFailed> {
        let found = match self.items.get(txn, key)? {
            Some(bytes) => Header::decode(bytes).map(|(h, v)| (h, v.to_vec())),
            None => None,
        };
        match found {
            Some((header, _)) if self.expired(&header) => {
                if header.bits & FETCHED == 0 {
                    self.counters
                        .expired_unfetched
                        .fetch_add(1, Ordering::Relaxed);
                }
                self.remove(txn, key, &header)?;
                Ok((None, true))
            }
            other => Ok((other, false)),
        }
    }

    fn view<'a>(&self, key: &'a [u8], header: &Header, value: &'a [u8], won: bool) -> ItemView<'a> {
        ItemView {
            key,
            value,
            flags: header.flags,
            cas: header.cas,
            ttl: self.ttl(header.expiry_unix),
            fetched_before: header.bits & FETCHED != 0,
            idle_seconds: 0,
            stale: header.bits & STALE != 0,
            won,
            win_taken: header.bits & WIN_SENT != 0 && !won,
        }
    }

    fn get_inner(
        &self,
        key: &[u8],
        options: &GetOptions,
        visit: &mut dyn FnMut(&ItemView<'_>),
    ) -> Result<bool, WriteFailed> {
        self.apply_due_flush();
        // The common case reads without writing.
        {
            let txn = self.env.read_txn()?;
            match self.read(&txn, key) {
                Some((header, value)) => {
                    let changes_state = options.touch.is_some()
                        || (!options.no_bump && header.bits & FETCHED == 0)
                        || (header.bits & WIN_SENT == 0
                            && (header.bits & STALE != 0 || options.recache_below.is_some()));
                    if !changes_state {
                        visit(&self.view(key, &header, value, false));
                        return Ok(true);
                    }
                }
                None if options.vivify.is_none() && self.items.get(&txn, key)?.is_none() => {
                    return Ok(false)
                }
                None => {}
            }
        }
        if !self.writable() {
            return Err(WriteFailed);
        }
        let mut txn = self.env.write_txn()?;
        let (found, _) = self.read_for_write(&mut txn, key)?;
        let Some((old, value)) = found else {
            let Some(expiry) = options.vivify else {
                self.commit(txn)?;
                return Ok(false);
            };
            let header = Header {
                flags: 0,
                expiry_unix: self.to_unix(expiry),
                cas: self.next_cas(),
                bits: WIN_SENT,
            };
            self.write(&mut txn, key, None, &header, &[])?;
            self.commit(txn)?;
            self.counters.total_items.fetch_add(1, Ordering::Relaxed);
            visit(&self.view(key, &header, &[], true));
            return Ok(true);
        };
        let mut header = old;
        if let Some(expiry) = options.touch {
            header.expiry_unix = self.to_unix(expiry);
        }
        let mut won = false;
        if header.bits & WIN_SENT == 0 {
            let ttl = self.ttl(header.expiry_unix);
            let recache = options
                .recache_below
                .is_some_and(|below| ttl != -1 && ttl < below);
            if header.bits & STALE != 0 || recache {
                header.bits |= WIN_SENT;
                won = true;
            }
        }
        visit(&self.view(key, &old_with_expiry(&old, header.expiry_unix), &value, won));
        if !options.no_bump {
            header.bits |= FETCHED;
        }
        self.write(&mut txn, key, Some(&old), &header, &[&value])?;
        self.commit(txn)?;
        Ok(true)
    }

    fn store_inner(&self, command: &StoreCommand<'_>) -> Result<StoreOutcome, WriteFailed> {
        self.apply_due_flush();
        let mut txn = self.env.write_txn()?;
        let (existing, reused) = self.read_for_write(&mut txn, command.key)?;
        let mut stale = false;
        if let (Some((old, _)), Some(cas)) = (&existing, command.compare_cas) {
            if cas != old.cas {
                if command.stale_if_older && cas < old.cas {
                    stale = true;
                } else {
                    self.commit(txn)?;
                    return Ok(StoreOutcome::Exists);
                }
            }
        }
        let outcome = match (command.mode, &existing) {
            (StoreMode::Add, Some(_)) => Some(StoreOutcome::NotStored),
            (StoreMode::Set, None) if command.compare_cas.is_some() => Some(StoreOutcome::NotFound),
            (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                Some(StoreOutcome::NotStored)
            }
            _ => None,
        };
        if let Some(outcome) = outcome {
            self.commit(txn)?;
            return Ok(outcome);
        }
        let cas = self.next_cas();
        let old = existing.as_ref().map(|(h, _)| *h);
        match (command.mode, &existing) {
            (StoreMode::Append | StoreMode::Prepend, Some((old, value))) => {
                let parts: [&[u8]; 2] = if command.mode == StoreMode::Append {
                    [value, command.value]
                } else {
                    [command.value, value]
                };
                let header = Header {
                    flags: old.flags,
                    expiry_unix: old.expiry_unix,
                    cas,
                    bits: if stale { STALE } else { 0 },
                };
                self.write(&mut txn, command.key, Some(old), &header, &parts)?;
            }
            _ => {
                let header = Header {
                    flags: command.flags,
                    expiry_unix: self.to_unix(command.expiry),
                    cas,
                    bits: if stale { STALE } else { 0 },
                };
                if crate::clock::is_expired(command.expiry, self.clock.now()) {
                    // Stored already expired (negative exptime): nothing to keep.
                    if let Some(old) = &old {
                        self.remove(&mut txn, command.key, old)?;
                    }
                } else {
                    self.write(
                        &mut txn,
                        command.key,
                        old.as_ref(),
                        &header,
                        &[command.value],
                    )?;
                }
            }
        }
        self.commit(txn)?;
        self.counters.total_items.fetch_add(1, Ordering::Relaxed);
        if reused {
            self.counters.reclaimed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(StoreOutcome::Stored { cas })
    }

    fn delete_inner(
        &self,
        key: &[u8],
        command: &DeleteCommand,
    ) -> Result<DeleteOutcome, WriteFailed> {
        self.apply_due_flush();
        let mut txn = self.env.write_txn()?;
        let (existing, _) = self.read_for_write(&mut txn, key)?;
        let Some((old, value)) = existing else {
            self.commit(txn)?;
            return Ok(DeleteOutcome::NotFound);
        };
        if command.compare_cas.is_some_and(|cas| cas != old.cas) {
            self.commit(txn)?;
            return Ok(DeleteOutcome::Exists);
        }
        match command.invalidate {
            Some(new_expiry) => {
                let header = Header {
                    cas: self.next_cas(),
                    bits: (old.bits | STALE) & !WIN_SENT,
                    expiry_unix: new_expiry.map_or(old.expiry_unix, |e| self.to_unix(e)),
                    ..old
                };
                self.write(&mut txn, key, Some(&old), &header, &[&value])?;
            }
            None => self.remove(&mut txn, key, &old)?,
        }
        self.commit(txn)?;
        Ok(DeleteOutcome::Deleted)
    }

    fn arith_inner(&self, key: &[u8], command: &ArithCommand) -> Result<ArithOutcome, WriteFailed> {
        self.apply_due_flush();
        let mut txn = self.env.write_txn()?;
        let (existing, _) = self.read_for_write(&mut txn, key)?;
        let Some((old, value)) = existing else {
            let Some((initial, expiry)) = command.vivify else {
                self.commit(txn)?;
                return Ok(ArithOutcome::NotFound);
            };
            let mut digits = Vec::with_capacity(20);
            crate::counter::push(&mut digits, initial);
            let header = Header {
                flags: 0,
                expiry_unix: self.to_unix(expiry),
                cas: self.next_cas(),
                bits: 0,
            };
            self.write(&mut txn, key, None, &header, &[&digits])?;
            self.commit(txn)?;
            self.counters.total_items.fetch_add(1, Ordering::Relaxed);
            return Ok(ArithOutcome::Value {
                value: initial,
                cas: header.cas,
                ttl: self.ttl(header.expiry_unix),
                created: true,
            });
        };
        if command.compare_cas.is_some_and(|cas| cas != old.cas) {
            self.commit(txn)?;
            return Ok(ArithOutcome::Exists);
        }
        let Some(current) = crate::counter::parse(&value) else {
            self.commit(txn)?;
            return Ok(ArithOutcome::NonNumeric);
        };
        let number = if command.decrement {
            current.saturating_sub(command.delta)
        } else {
            current.wrapping_add(command.delta)
        };
        let mut digits = Vec::with_capacity(20);
        crate::counter::push(&mut digits, number);
        if digits.len() < value.len() {
            // memcached pads a shorter number with spaces, keeping the length.
            digits.resize(value.len(), b' ');
        }
        let header = Header {
            cas: self.next_cas(),
            bits: old.bits | FETCHED,
            expiry_unix: command.touch.map_or(old.expiry_unix, |e| self.to_unix(e)),
            ..old
        };
        self.write(&mut txn, key, Some(&old), &header, &[&digits])?;
        self.commit(txn)?;
        Ok(ArithOutcome::Value {
            value: number,
            cas: header.cas,
            ttl: self.ttl(header.expiry_unix),
            created: false,
        })
    }

    fn class_of(&self, key: &[u8], value_len: usize) -> usize {
        self.classes.class_of(key.len() + value_len + HEADER_LEN)
    }
}

/// The header as the reader should see it: the old state with the new expiry.
fn old_with_expiry(old: &Header, expiry_unix: u32) -> Header {
    Header {
        expiry_unix,
        ..*old
    }
}

impl Store for DiskStore {
    fn get(&self, key: &[u8], options: &GetOptions, visit: &mut dyn FnMut(&ItemView<'_>)) -> bool {
        self.get_inner(key, options, visit).unwrap_or(false)
    }

    fn store(&self, command: &StoreCommand<'_>) -> StoreOutcome {
        if !self.writable() {
            return StoreOutcome::Failed;
        }
        self.store_inner(command).unwrap_or(StoreOutcome::Failed)
    }

    fn delete(&self, key: &[u8], command: &DeleteCommand) -> DeleteOutcome {
        if !self.writable() {
            return DeleteOutcome::NotFound;
        }
        self.delete_inner(key, command)
            .unwrap_or(DeleteOutcome::NotFound)
    }

    fn arith(&self, key: &[u8], command: &ArithCommand) -> ArithOutcome {
        if !self.writable() {
            return ArithOutcome::OutOfMemory;
        }
        self.arith_inner(key, command)
            .unwrap_or(ArithOutcome::OutOfMemory)
    }

    fn touch(&self, key: &[u8], expiry: ExpiryTime) -> bool {
        let options = GetOptions {
            touch: Some(expiry),
            no_bump: true,
            ..GetOptions::default()
        };
        self.get(key, &options, &mut |_| {})
    }

    fn flush_all(&self, delay: i64) {
        if delay <= 0 {
            self.flush_deadline.store(0, Ordering::Relaxed);
            let _ = self.clear();
        } else {
            self.flush_deadline
                .store(self.clock.expiry(delay).max(1), Ordering::Relaxed);
        }
    }

    fn debug(&self, key: &[u8]) -> Option<DebugView> {
        let txn = self.env.read_txn().ok()?;
        let (header, value) = self.read(&txn, key)?;
        Some(DebugView {
            ttl: self.ttl(header.expiry_unix),
            idle_seconds: 0,
            cas: header.cas,
            fetched: header.bits & FETCHED != 0,
            class: self.class_of(key, value.len()),
            size: key.len() + value.len() + HEADER_LEN,
        })
    }

    fn maintain(&self) -> usize {
        self.apply_due_flush();
        self.background_sync();
        if !self.writable() {
            return 0;
        }
        let now = self.now_unix();
        let Ok(mut txn) = self.env.write_txn() else {
            return 0;
        };
        // Expired index entries, oldest first, up to now.
        let due: Vec<Vec<u8>> = match self.expiry.iter(&txn) {
            Ok(iter) => iter
                .filter_map(Result::ok)
                .take_while(|(k, _)| {
                    k.len() >= 4 && u32::from_be_bytes([k[0], k[1], k[2], k[3]]) <= now
                })
                .take(MAINTAIN_BATCH)
                .map(|(k, _)| k.to_vec())
                .collect(),
            Err(_) => return 0,
        };
        if due.is_empty() {
            return 0;
        }
        let mut removed = 0;
        for entry in &due {
            let key = &entry[4..];
            let _ = self.expiry.delete(&mut txn, entry);
            let header = match self.items.get(&txn, key) {
                Ok(Some(bytes)) => Header::decode(bytes).map(|(h, _)| h),
                _ => None,
            };
            if let Some(header) = header.filter(|h| self.expired(h)) {
                if header.bits & FETCHED == 0 {
                    self.counters
                        .expired_unfetched
                        .fetch_add(1, Ordering::Relaxed);
                }
                if self.items.delete(&mut txn, key).is_ok() {
                    removed += 1;
                }
            }
        }
        if self.commit(txn).is_err() {
            return 0;
        }
        self.counters
            .crawler_reclaimed
            .fetch_add(removed as u64, Ordering::Relaxed);
        removed
    }

    fn set_memory_limit(&self, _bytes: usize) {
        // The disk engine keeps everything; its memory is the OS page cache.
    }

    fn stats(&self) -> StoreStats {
        let mut stats = StoreStats {
            total_items: self.counters.total_items.load(Ordering::Relaxed),
            reclaimed: self.counters.reclaimed.load(Ordering::Relaxed),
            expired_unfetched: self.counters.expired_unfetched.load(Ordering::Relaxed),
            crawler_reclaimed: self.counters.crawler_reclaimed.load(Ordering::Relaxed),
            ..StoreStats::default()
        };
        if let Ok(txn) = self.env.read_txn() {
            stats.curr_items = self.items.len(&txn).unwrap_or(0);
        }
        let info = self.env.info();
        stats.limit_maxbytes = info.map_size as u64;
        stats.bytes = self.env.real_disk_size().unwrap_or(0);
        let mut classes: Vec<ClassStats> = Vec::new();
        self.scan(&mut |item| {
            let class = item.class;
            if classes.len() < class {
                classes.resize_with(class, ClassStats::default);
            }
            let entry = &mut classes[class - 1];
            entry.items += 1;
            entry.bytes += item.size as u64;
        });
        stats.classes = classes
            .into_iter()
            .enumerate()
            .filter(|(_, c)| c.items > 0)
            .map(|(i, c)| ClassStats {
                class: i + 1,
                chunk_size: self.classes.chunk_size(i + 1),
                ..c
            })
            .collect();
        stats
    }

    fn scan(&self, visit: &mut dyn FnMut(&ItemInfo<'_>)) {
        let Ok(txn) = self.env.read_txn() else {
            return;
        };
        let Ok(iter) = self.items.iter(&txn) else {
            return;
        };
        for (key, bytes) in iter.filter_map(Result::ok) {
            let Some((header, value)) = Header::decode(bytes) else {
                continue;
            };
            if self.expired(&header) {
                continue;
            }
            visit(&ItemInfo {
                key,
                ttl: self.ttl(header.expiry_unix),
                idle_seconds: 0,
                cas: header.cas,
                fetched: header.bits & FETCHED != 0,
                class: self.class_of(key, value.len()),
                size: key.len() + value.len() + HEADER_LEN,
            });
        }
    }

    fn size_histogram(&self) -> Vec<(usize, u64)> {
        let mut buckets = std::collections::BTreeMap::new();
        self.scan(&mut |item| *buckets.entry(item.size.div_ceil(32) * 32).or_insert(0u64) += 1);
        buckets.into_iter().collect()
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    fn engine_stats(&self) -> Vec<(&'static str, String)> {
        let info = self.env.info();
        let fsyncs = self.counters.fsyncs.load(Ordering::Relaxed);
        vec![
            ("disk_path", self.env.path().display().to_string()),
            (
                "disk_file_bytes",
                self.env.real_disk_size().unwrap_or(0).to_string(),
            ),
            ("disk_map_bytes", info.map_size.to_string()),
            ("disk_used_pages", info.last_page_number.to_string()),
            (
                "disk_sync_policy",
                format!("{:?}", self.sync).to_lowercase(),
            ),
            (
                "disk_commits",
                self.counters.commits.load(Ordering::Relaxed).to_string(),
            ),
            ("disk_fsyncs", fsyncs.to_string()),
            (
                "disk_fsync_avg_us",
                (self.counters.fsync_micros.load(Ordering::Relaxed) / fsyncs.max(1)).to_string(),
            ),
            ("disk_write_refused", u8::from(!self.writable()).to_string()),
        ]
    }
}
