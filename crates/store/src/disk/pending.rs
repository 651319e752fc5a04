//! Writes applied but not yet committed to LMDB.
//!
//! Workers never wait for LMDB's single writer: a write lands here (under
//! its key's shard lock, which also makes read-modify-writes such as incr
//! and append atomic) and the writer thread commits everything pending in
//! one transaction. Reads look here first, so a write is visible at once.
//! An entry leaves only after the commit that carried it, and only if no
//! newer write replaced it meanwhile.
//!
//! First-read marks (the fetched bit) wait in a list of their own, and the
//! writer takes them only when it has nothing else to do, when too many
//! wait, or at shutdown (see `writer.rs`): a mark rewrites its record's page
//! as a set does, and committed as they came they doubled the writer's work
//! in a read-mostly load.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::{Mutex, MutexGuard};

const SHARDS: usize = 64;
/// Bookkeeping charged per entry on top of key and record.
const ENTRY_OVERHEAD: usize = 64;

/// What a pending write does to its key.
#[derive(Debug, Clone)]
pub enum Change {
    /// The key's new record (header and value, as stored).
    Put(Arc<Vec<u8>>),
    Remove,
    /// Sets the fetched bit of the record already committed: a first read
    /// costs no copy of the value.
    MarkFetched,
}

#[derive(Debug, Clone)]
pub struct Pending {
    pub change: Change,
    /// Order of the write; the writer acknowledges by sequence.
    pub seq: u64,
    /// Changed since the writer last drained: listed in the shard's queue.
    queued: bool,
    /// Listed in the shard's marks (a key may be listed in both).
    marked: bool,
}

impl Pending {
    fn charge(&self, key: &[u8]) -> usize {
        let record = match &self.change {
            Change::Put(record) => record.len(),
            Change::Remove | Change::MarkFetched => 0,
        };
        key.len() + record + ENTRY_OVERHEAD
    }
}

/// One pending write taken by the writer for a commit.
pub struct Drained {
    pub key: Arc<[u8]>,
    pub pending: Pending,
}

type Entries = HashMap<Arc<[u8]>, Pending, foldhash::fast::FixedState>;

/// One shard: its pending writes, and the keys changed since the last
/// drain (so a drain does not walk a table that is mostly committed):
/// writes in `queue`, first-read marks in `marks`.
#[derive(Default)]
struct ShardState {
    entries: Entries,
    queue: Vec<Arc<[u8]>>,
    marks: Vec<Arc<[u8]>>,
}

pub struct PendingWrites {
    shards: Box<[Mutex<ShardState>]>,
    hasher: foldhash::fast::FixedState,
    last_seq: AtomicU64,
    /// Set by every write (not by marks), cleared by the writer when it drains.
    dirty: AtomicBool,
    bytes: AtomicUsize,
    /// Keys listed in the shards' marks.
    marks: AtomicUsize,
}

/// A locked shard, for reading and writing the keys that hash to it.
pub struct Shard<'a> {
    state: MutexGuard<'a, ShardState>,
    owner: &'a PendingWrites,
}

impl Shard<'_> {
    pub fn get(&self, key: &[u8]) -> Option<&Pending> {
        self.state.entries.get(key)
    }

    /// Records a write; returns its sequence number.
    pub fn put(&mut self, key: &[u8], change: Change) -> u64 {
        let seq = self.owner.last_seq.fetch_add(1, Ordering::AcqRel) + 1;
        let is_mark = matches!(change, Change::MarkFetched);
        let state = &mut *self.state;
        let (stored_key, entry, removed) = match state.entries.get_key_value_mut(key) {
            Some((stored_key, entry)) => {
                let removed = entry.charge(key);
                entry.change = change;
                entry.seq = seq;
                (stored_key.clone(), entry, removed)
            }
            None => {
                let stored_key: Arc<[u8]> = Arc::from(key);
                let entry = state.entries.entry(stored_key.clone()).or_insert(Pending {
                    change,
                    seq,
                    queued: false,
                    marked: false,
                });
                (stored_key, entry, 0)
            }
        };
        let added = entry.charge(key);
        if is_mark {
            if !entry.marked {
                entry.marked = true;
                state.marks.push(stored_key);
                self.owner.marks.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            if !entry.queued {
                entry.queued = true;
                state.queue.push(stored_key);
            }
            self.owner.dirty.store(true, Ordering::Release);
        }
        self.owner.bytes.fetch_add(added, Ordering::Relaxed);
        self.owner.bytes.fetch_sub(removed, Ordering::Relaxed);
        seq
    }
}

impl PendingWrites {
    pub fn new() -> Self {
        PendingWrites {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(ShardState::default()))
                .collect(),
            hasher: foldhash::fast::FixedState::default(),
            last_seq: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            bytes: AtomicUsize::new(0),
            marks: AtomicUsize::new(0),
        }
    }

    pub fn lock(&self, key: &[u8]) -> Shard<'_> {
        let index = (self.hasher.hash_one(key) as usize) % SHARDS;
        Shard {
            state: self.shards[index].lock(),
            owner: self,
        }
    }

    /// The newest sequence number handed out.
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Acquire)
    }

    /// A sequence number for an event that is not a key's write (a flush).
    pub fn next_seq(&self) -> u64 {
        self.last_seq.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    /// Bytes held by pending writes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// First-read marks waiting for a batch.
    pub fn marks_waiting(&self) -> usize {
        self.marks.load(Ordering::Relaxed)
    }

    /// Takes a copy of every pending write, and of up to `marks` first-read
    /// marks. Returns the sequence number up to which every write is among
    /// them: a write takes its number under its shard's lock, so one numbered
    /// before this call is visible once that shard is locked here. Marks left
    /// behind are not writes anybody waits for.
    pub fn drain(&self, marks: usize) -> (u64, Vec<Drained>) {
        self.dirty.store(false, Ordering::Release);
        let through = self.last_seq();
        let mut drained = Vec::new();
        // Spread over the shards, so no shard's marks wait for ever.
        let marks_per_shard = marks.div_ceil(SHARDS);
        for shard in self.shards.iter() {
            let mut state = shard.lock();
            let state = &mut *state;
            for key in state.queue.drain(..) {
                if let Some(pending) = state.entries.get_mut(&key) {
                    pending.queued = false;
                    drained.push(Drained {
                        key,
                        pending: pending.clone(),
                    });
                }
            }
            let take = marks_per_shard.min(state.marks.len());
            self.marks.fetch_sub(take, Ordering::Relaxed);
            for key in state.marks.drain(..take) {
                let Some(pending) = state.entries.get_mut(&key) else {
                    continue;
                };
                // A key listed twice, or written since its mark (then it
                // was queued and taken above), is taken once.
                let is_mark = pending.marked && matches!(pending.change, Change::MarkFetched);
                pending.marked = false;
                if is_mark {
                    drained.push(Drained {
                        key,
                        pending: pending.clone(),
                    });
                }
            }
        }
        (through, drained)
    }

    /// Forgets the writes a commit carried, unless a newer write replaced one.
    pub fn retire(&self, committed: &[Drained]) {
        for done in committed {
            let mut shard = self.lock(&done.key);
            let entries = &mut shard.state.entries;
            if entries
                .get(&done.key[..])
                .is_some_and(|p| p.seq == done.pending.seq)
            {
                if let Some(pending) = entries.remove(&done.key[..]) {
                    self.bytes
                        .fetch_sub(pending.charge(&done.key), Ordering::Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_sees_every_numbered_write_and_retire_keeps_newer_ones() {
        let pending = PendingWrites::new();
        pending.lock(b"a").put(b"a", Change::Remove);
        pending
            .lock(b"b")
            .put(b"b", Change::Put(Arc::new(vec![0; 20])));
        let (through, drained) = pending.drain(0);
        assert_eq!(through, 2);
        assert_eq!(drained.len(), 2);
        assert!(!pending.is_dirty());
        // "b" is written again before the commit lands: it must stay pending.
        pending.lock(b"b").put(b"b", Change::MarkFetched);
        pending.retire(&drained);
        assert!(pending.lock(b"a").get(b"a").is_none());
        assert_eq!(pending.lock(b"b").get(b"b").map(|p| p.seq), Some(3));
        assert_eq!(pending.bytes(), 1 + ENTRY_OVERHEAD);
    }

    #[test]
    fn first_read_marks_leave_only_when_asked_for() {
        let pending = PendingWrites::new();
        pending.lock(b"m").put(b"m", Change::MarkFetched);
        assert!(!pending.is_dirty(), "a mark does not wake the writer");
        assert_eq!(pending.marks_waiting(), 1);
        pending.lock(b"w").put(b"w", Change::Remove);
        let (_, drained) = pending.drain(0);
        assert_eq!(drained.len(), 1, "the write goes, the mark waits");
        assert_eq!(&*drained[0].key, b"w");
        pending.retire(&drained);
        let (_, drained) = pending.drain(usize::MAX);
        assert_eq!(drained.len(), 1);
        assert_eq!(&*drained[0].key, b"m");
        pending.retire(&drained);
        assert_eq!(pending.bytes(), 0);
        assert_eq!(pending.marks_waiting(), 0);

        // A marked key written again leaves once, as the write.
        for i in 0..1000 {
            let key = format!("k{i}");
            pending
                .lock(key.as_bytes())
                .put(key.as_bytes(), Change::MarkFetched);
        }
        pending.lock(b"k0").put(b"k0", Change::Remove);
        let (_, drained) = pending.drain(usize::MAX);
        assert_eq!(drained.len(), 1000);
        let k0: Vec<_> = drained.iter().filter(|d| &*d.key == b"k0").collect();
        assert_eq!(k0.len(), 1);
        assert!(matches!(k0[0].pending.change, Change::Remove));
        pending.retire(&drained);
        assert_eq!(pending.bytes(), 0);

        // A mark listed again after its entry left is taken once.
        pending.lock(b"k1").put(b"k1", Change::MarkFetched);
        pending
            .lock(b"k1")
            .put(b"k1", Change::Put(Arc::new(vec![1])));
        let (_, drained) = pending.drain(0);
        pending.retire(&drained);
        pending.lock(b"k1").put(b"k1", Change::MarkFetched);
        let (_, drained) = pending.drain(usize::MAX);
        assert_eq!(drained.len(), 1);

        // A limited drain takes about that many, from every shard.
        for i in 0..10_000 {
            let key = format!("n{i}");
            pending
                .lock(key.as_bytes())
                .put(key.as_bytes(), Change::MarkFetched);
        }
        let (_, drained) = pending.drain(640);
        assert!((500..=640).contains(&drained.len()), "{}", drained.len());
        assert_eq!(pending.marks_waiting(), 10_000 - drained.len());
    }
}
