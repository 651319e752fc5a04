//! When the memory engine's background sweep for expired items runs.
//!
//! A sweep walks every item once and removes the expired and flushed ones.
//! Walking a cache in which nothing can have expired costs CPU and finds
//! nothing, so the engine keeps one hint: the earliest expiry time of any
//! item stored, touched or passed over by a sweep since the last sweep
//! began. A sweep starts once that time has come (or at once after a
//! `flush_all`), and re-arms the hint with the expiry times of the items it
//! keeps. A cache whose items never expire is never swept; expired items
//! are freed within a maintenance tick of the first of them expiring.
//!
//! Noting an expiry is one relaxed load, plus a `fetch_min` only when it is
//! earlier than the hint, so stores do not contend on the hint's cache line.

use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use crate::clock::ExpiryTime;

/// No item known to expire.
const NEVER: u32 = u32::MAX;

pub struct SweepPace {
    /// The earliest expiry noted since the current or last sweep began, in
    /// the store's clock; 0 makes a sweep due at once.
    earliest: AtomicU32,
    sweep: Mutex<Sweep>,
}

/// The sweep under way, if any.
struct Sweep {
    running: bool,
    /// Items there were when it began: it ends once it has checked as many.
    to_check: u64,
    checked: u64,
}

impl Default for SweepPace {
    fn default() -> Self {
        SweepPace {
            earliest: AtomicU32::new(NEVER),
            sweep: Mutex::new(Sweep {
                running: false,
                to_check: 0,
                checked: 0,
            }),
        }
    }
}

impl SweepPace {
    /// An item will expire at `expiry` (0: never).
    #[inline]
    pub fn note(&self, expiry: ExpiryTime) {
        if expiry != 0 && expiry < self.earliest.load(Ordering::Relaxed) {
            self.earliest.fetch_min(expiry, Ordering::Relaxed);
        }
    }

    /// Makes a sweep due at once (after a flush_all).
    pub fn hurry(&self) {
        self.earliest.store(0, Ordering::Relaxed);
    }

    /// Whether to sweep a step now. `items` is the number of items held,
    /// which a sweep starting now has to check.
    pub fn due(&self, now: u32, items: u64) -> bool {
        let mut sweep = self.sweep.lock();
        if sweep.running {
            return true;
        }
        if now < self.earliest.load(Ordering::Relaxed) {
            return false;
        }
        // Items kept by this sweep, and those stored while it runs, note
        // their expiry again.
        self.earliest.store(NEVER, Ordering::Relaxed);
        *sweep = Sweep {
            running: true,
            to_check: items,
            checked: 0,
        };
        true
    }

    /// Records one step of the sweep, which ends once it has checked as
    /// many items as there were when it began.
    pub fn record(&self, checked: u64) {
        let mut sweep = self.sweep.lock();
        sweep.checked += checked;
        if sweep.checked >= sweep.to_check {
            sweep.running = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_expire_means_no_sweep() {
        let pace = SweepPace::default();
        assert!(!pace.due(0, 1000));
        assert!(!pace.due(1_000_000, 1000));
        pace.note(0);
        assert!(!pace.due(1_000_000, 1000), "expiry 0 is never");
    }

    #[test]
    fn a_sweep_is_due_once_the_earliest_noted_expiry_has_come() {
        let pace = SweepPace::default();
        pace.note(50);
        pace.note(20);
        pace.note(30);
        assert!(!pace.due(19, 10));
        assert!(pace.due(20, 10));
        // The sweep keeps the item expiring at 50 and notes it again.
        pace.note(50);
        pace.record(10);
        assert!(!pace.due(49, 10));
        assert!(pace.due(50, 10));
    }

    #[test]
    fn a_sweep_spans_steps_until_it_has_checked_what_was_there() {
        let pace = SweepPace::default();
        pace.hurry();
        assert!(pace.due(0, 3000));
        pace.record(1024);
        assert!(pace.due(0, 0), "still sweeping");
        pace.record(1024);
        pace.record(952);
        assert!(!pace.due(3, 3000));
    }

    #[test]
    fn a_flush_makes_a_sweep_due_at_once() {
        let pace = SweepPace::default();
        assert!(!pace.due(5, 10));
        pace.hurry();
        assert!(pace.due(5, 10));
    }
}
