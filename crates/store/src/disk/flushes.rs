//! The flushes a server was asked for, ahead of LMDB: the boundary that
//! reads and writes treat as flushed at once, the flush waiting for the
//! next append, and a delayed `flush_all`. What a flush removes
//! from LMDB once applied is `flushed.rs`.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::delayed_flush::DelayedFlush;

#[derive(Default)]
pub(super) struct Flushes {
    /// Items with a CAS up to this are flushed: the applier drops them
    /// from LMDB in its next round, and until then reads skip them.
    through: AtomicU64,
    /// A flush waiting for the appender. The appender drains the pending
    /// writes under this lock, so a flush falls wholly before or after a
    /// drain.
    requested: Mutex<Option<u64>>,
    /// A `flush_all` with a delay.
    pub(super) delayed: DelayedFlush,
}

impl Flushes {
    /// Whether an item of `cas` is flushed.
    pub(super) fn covers(&self, cas: u64) -> bool {
        cas <= self.through()
    }

    pub(super) fn through(&self) -> u64 {
        self.through.load(Ordering::Acquire)
    }

    /// A flush through `boundary` is in the log already (replayed, or in a
    /// master's snapshot): reads skip what it covers.
    pub(super) fn raise(&self, boundary: u64) {
        self.through.fetch_max(boundary, Ordering::AcqRel);
    }

    /// Forgets every boundary: a replica about to load its master's
    /// snapshot, which brings the master's.
    pub(super) fn reset(&self) {
        self.through.store(0, Ordering::Release);
    }

    /// Asks the next append to journal a flush through `boundary()`, which
    /// reads skip from now on. Both closures run under the request's lock:
    /// `boundary` so that no append takes writes it covers in between, and
    /// `then` to number the flush among the pending writes.
    pub(super) fn request<R>(&self, boundary: impl FnOnce() -> u64, then: impl FnOnce() -> R) -> R {
        let mut requested = self.requested.lock();
        let boundary = boundary();
        self.raise(boundary);
        // A later flush may be waiting already (a peer's or a master's).
        *requested = (*requested).max(Some(boundary));
        then()
    }

    /// Takes the flush waiting for an append, and runs `drain` (which takes
    /// the pending writes) under the same lock.
    pub(super) fn take_request<R>(&self, drain: impl FnOnce() -> R) -> (Option<u64>, R) {
        let mut requested = self.requested.lock();
        (requested.take(), drain())
    }

    pub(super) fn is_requested(&self) -> bool {
        self.requested.lock().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_raises_the_boundary_at_once_and_a_failed_append_keeps_the_later_flush() {
        let flushes = Flushes::default();
        flushes.raise(5);
        assert!(flushes.covers(5) && !flushes.covers(6));
        let numbered = flushes.request(|| 9, || "numbered");
        assert_eq!(numbered, "numbered");
        assert!(flushes.covers(9), "reads skip it before it is journalled");
        let (taken, drained) = flushes.take_request(|| "drained");
        assert_eq!((taken, drained), (Some(9), "drained"));
        assert!(!flushes.is_requested());
        flushes.request(|| 12, || ());
        flushes.request(|| 9, || ()); // an append of it failed
        assert_eq!(flushes.take_request(|| ()).0, Some(12));
        flushes.raise(3);
        assert_eq!(flushes.through(), 12, "a boundary never goes back");
        flushes.reset();
        assert_eq!(flushes.through(), 0);
    }
}
