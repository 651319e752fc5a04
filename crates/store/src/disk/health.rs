//! Whether the engine takes writes, and why not. A failed fsync or commit
//! poisons it for good (what it acknowledged may not be on disk: it must
//! not acknowledge more); a disk short of room refuses writes until space
//! is freed, but takes deletes, which free it; a replica takes only its
//! master's log, never a client's write.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Default)]
pub struct Health {
    poisoned: AtomicBool,
    out_of_space: AtomicBool,
    read_only: AtomicBool,
    /// Clients' writes and deletes refused.
    refused: AtomicU64,
}

impl Health {
    /// An fsync or commit failed for a reason other than space.
    pub fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Notes whether less room is left than the reserve; true when that
    /// changed.
    pub fn set_out_of_space(&self, short: bool) -> bool {
        self.out_of_space.swap(short, Ordering::AcqRel) != short
    }

    pub fn is_out_of_space(&self) -> bool {
        self.out_of_space.load(Ordering::Acquire)
    }

    pub fn set_read_only(&self, read_only: bool) {
        self.read_only.store(read_only, Ordering::Release);
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    /// Whether a client's write may be taken; a refusal is counted (ask
    /// once per request).
    pub fn takes_write(&self) -> bool {
        self.counted(!self.is_poisoned() && !self.is_out_of_space() && !self.is_read_only())
    }

    /// Whether a client's delete may be taken (deletes go on while the
    /// disk is full: they free space); a refusal is counted.
    pub fn takes_delete(&self) -> bool {
        self.counted(!self.is_poisoned() && !self.is_read_only())
    }

    fn counted(&self, taken: bool) -> bool {
        if !taken {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Clients' writes and deletes refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The applier can put what is pending into LMDB, so whoever waits for
    /// that may wait.
    pub fn applies(&self) -> bool {
        !self.is_poisoned() && !self.is_out_of_space()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_takes_deletes_and_a_poisoned_or_replica_engine_neither() {
        let health = Health::default();
        assert!(health.takes_write() && health.takes_delete() && health.applies());
        assert!(health.set_out_of_space(true));
        assert!(!health.set_out_of_space(true), "no change");
        assert!(!health.takes_write() && health.takes_delete() && !health.applies());
        assert!(health.set_out_of_space(false));
        health.set_read_only(true);
        assert!(!health.takes_write() && !health.takes_delete() && health.applies());
        health.set_read_only(false);
        health.poison();
        assert!(!health.takes_write() && !health.takes_delete() && !health.applies());
        // The full disk's write; the replica's and the poisoned engine's
        // write and delete.
        assert_eq!(health.refused(), 5);
    }
}
