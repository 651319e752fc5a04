//! First reads noted in memory (the fetched bit), committed later.
//!
//! A first read sets the item's fetched bit, which meta `h` and the
//! `*_unfetched` counters report. Committing it rewrites the record's page
//! as a set does: committed with the next group, marks were half of all
//! committed writes in a read-mostly load and doubled the applier's work. So
//! the worker only notes `(key, CAS)` here, reads consult the note, and the
//! applier commits notes in batches when it is idle, when too many wait, or
//! at shutdown (see `applier.rs`). A SIGKILL loses only notes: an item then
//! reads as not fetched before, a hint, never data.
//!
//! Notes are kept apart from the pending writes on purpose: a table holding
//! a note for every item read made each read's pending lookup miss cache.
//! A note is matched by a 64-bit hash of the key and the item's CAS value,
//! so a key stored again (new CAS) is not fetched until it is read.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;
use parking_lot::Mutex;

const SHARDS: usize = 64;

#[derive(Default)]
struct Shard {
    /// Key hash → CAS value of the item when it was first read.
    noted: HashMap<u64, u64, foldhash::fast::FixedState>,
    /// The notes' keys in the order they came, for the applier.
    keys: Vec<(Arc<[u8]>, u64)>,
}

pub struct FetchMarks {
    shards: Box<[Mutex<Shard>]>,
    hasher: foldhash::fast::FixedState,
    /// Notes not yet taken by the applier.
    waiting: AtomicUsize,
    /// Notes reads consult: waiting, or taken and not yet forgotten.
    held: AtomicUsize,
}

impl FetchMarks {
    pub fn new() -> Self {
        FetchMarks {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            // The pending table's hasher: callers pass the hash it computed.
            hasher: foldhash::fast::FixedState::default(),
            waiting: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
        }
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        &self.shards[(hash >> 58) as usize % SHARDS]
    }

    /// The hash that `note` and `noted` take for `key` (the pending table
    /// computes the same one).
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Notes the first read of the item `cas` under `key` (of `hash`);
    /// false if it was noted already.
    pub fn note(&self, hash: u64, key: &[u8], cas: u64) -> bool {
        debug_assert_eq!(self.hash(key), hash);
        let mut shard = self.shard(hash).lock();
        match shard.noted.insert(hash, cas) {
            Some(old) if old == cas => return false,
            Some(_) => {}
            None => {
                self.held.fetch_add(1, Ordering::Relaxed);
            }
        }
        shard.keys.push((Arc::from(key), cas));
        self.waiting.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether the item `cas` under the key of `hash` was read since its
    /// last commit.
    pub fn noted(&self, hash: u64, cas: u64) -> bool {
        if self.held.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.shard(hash).lock().noted.get(&hash) == Some(&cas)
    }

    /// Notes waiting for the applier.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Takes about `max` notes, oldest first in every shard, for a commit.
    /// Reads still see them until [`forget`](Self::forget), which the
    /// applier calls once the commit is over and the read cache agrees.
    pub fn take(&self, max: usize) -> Vec<(Arc<[u8]>, u64)> {
        let per_shard = max.div_ceil(SHARDS);
        let mut taken = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let count = per_shard.min(shard.keys.len());
            taken.extend(shard.keys.drain(..count));
            self.waiting.fetch_sub(count, Ordering::Relaxed);
        }
        taken
    }

    /// Gives back notes taken for a commit that could not set them yet (their
    /// items were still pending): a later commit takes them again.
    pub fn put_back(&self, notes: Vec<(Arc<[u8]>, u64)>) {
        for (key, cas) in notes {
            self.shard(self.hash(&key)).lock().keys.push((key, cas));
            self.waiting.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops the notes of items a flush through `boundary` removed: they
    /// would wait for a commit with nothing to set, and in a write-heavy
    /// load after a read-heavy one they were hundreds of thousands of small
    /// blocks left across the heap (`docs/decisions/allocator.md`).
    pub fn forget_through(&self, boundary: u64) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let waiting = shard.keys.len();
            shard.keys.retain(|&(_, cas)| cas > boundary);
            let held = shard.noted.len();
            shard.noted.retain(|_, cas| *cas > boundary);
            self.waiting
                .fetch_sub(waiting - shard.keys.len(), Ordering::Relaxed);
            self.held
                .fetch_sub(held - shard.noted.len(), Ordering::Relaxed);
            shard.keys.shrink_to_fit();
            shard.noted.shrink_to_fit();
        }
    }

    /// Drops notes taken for a commit that is over.
    pub fn forget<'a>(&self, taken: impl IntoIterator<Item = &'a (Arc<[u8]>, u64)>) {
        for (key, cas) in taken {
            let hash = self.hash(key);
            let mut shard = self.shard(hash).lock();
            // A newer note of the same key (its item was stored again and
            // read) stays for a later batch.
            if shard.noted.get(&hash) == Some(cas) {
                shard.noted.remove(&hash);
                self.held.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_matches_its_item_until_forgotten() {
        let marks = FetchMarks::new();
        assert!(!marks.noted(marks.hash(b"k"), 7));
        assert!(marks.note(marks.hash(b"k"), b"k", 7));
        assert!(!marks.note(marks.hash(b"k"), b"k", 7), "noted once");
        assert!(marks.noted(marks.hash(b"k"), 7));
        assert!(
            !marks.noted(marks.hash(b"k"), 8),
            "the key stored again is another item"
        );
        assert!(!marks.noted(marks.hash(b"other"), 7));
        assert_eq!(marks.waiting(), 1);
        let taken = marks.take(usize::MAX);
        assert_eq!(taken.len(), 1);
        assert_eq!((&taken[0].0[..], taken[0].1), (&b"k"[..], 7));
        assert_eq!(marks.waiting(), 0);
        assert!(
            marks.noted(marks.hash(b"k"), 7),
            "seen until its commit is over"
        );
        marks.put_back(taken);
        assert_eq!(marks.waiting(), 1);
        let taken = marks.take(usize::MAX);
        assert!(marks.noted(marks.hash(b"k"), 7), "put back, still seen");
        marks.forget(&taken);
        assert!(!marks.noted(marks.hash(b"k"), 7));
    }

    #[test]
    fn a_flush_forgets_the_notes_of_the_items_it_covers_only() {
        let marks = FetchMarks::new();
        for cas in 1..=100u64 {
            let key = format!("k{cas}");
            marks.note(marks.hash(key.as_bytes()), key.as_bytes(), cas);
        }
        // Some are with the applier when the flush comes.
        let taken = marks.take(10);
        marks.forget_through(60);
        let taken_newer = taken.iter().filter(|&&(_, cas)| cas > 60).count();
        assert_eq!(marks.waiting(), 40 - taken_newer);
        assert!(!marks.noted(marks.hash(b"k60"), 60));
        assert!(marks.noted(marks.hash(b"k61"), 61));
        // The commit of the taken notes ends without counting any twice.
        marks.forget(&taken);
        let rest = marks.take(usize::MAX);
        assert!(rest.iter().all(|&(_, cas)| cas > 60));
        marks.forget(&rest);
        assert_eq!(marks.held.load(Ordering::Relaxed), 0);
        assert_eq!(marks.waiting(), 0);
    }

    #[test]
    fn a_limited_take_leaves_the_rest_and_newer_items_are_noted_again() {
        let marks = FetchMarks::new();
        for i in 0..10_000u64 {
            let key = format!("n{i}");
            marks.note(marks.hash(key.as_bytes()), key.as_bytes(), i);
        }
        let taken = marks.take(640);
        assert!((500..=640).contains(&taken.len()), "{}", taken.len());
        assert_eq!(marks.waiting(), 10_000 - taken.len());
        // The same key read again as a newer item: both notes reach the applier.
        marks.note(marks.hash(b"x"), b"x", 1);
        marks.note(marks.hash(b"x"), b"x", 2);
        assert!(marks.noted(marks.hash(b"x"), 2));
        let cas_of_x: Vec<u64> = marks
            .take(usize::MAX)
            .into_iter()
            .filter(|(key, _)| &key[..] == b"x")
            .map(|(_, cas)| cas)
            .collect();
        assert_eq!(cas_of_x, [1, 2]);
        assert_eq!(marks.waiting(), 0);
    }
}
