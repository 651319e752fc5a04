//! The pace of the memory engine's background expiry sweep.
//!
//! A sweep walks every item once, removing the expired and flushed ones.
//! Sweeping a calm cache over and over costs CPU and finds nothing, and
//! memcached's users expect an expired item to stay where it is until memory
//! is needed or its LRU crawler comes by (its `reclaimed` counts stores that
//! reuse an expired item). So the pace follows the payoff, as memcached's
//! crawler scheduler does: after a sweep that found nothing the next waits a
//! minute longer (up to an hour); one that found over 1 % of the items dead
//! shortens the wait by a minute. The first sweep runs at once, and a
//! `flush_all` makes the next one due at once. Between sweeps, a store or an
//! eviction that meets an expired item reclaims it anyway.

use parking_lot::Mutex;

/// Added to the wait after a sweep that found nothing, and taken off after
/// one that found more than 1 % dead (seconds).
const STEP: u32 = 60;
/// The longest wait between sweeps (seconds).
const MAX_WAIT: u32 = 60 * 60;

pub struct SweepPace {
    state: Mutex<State>,
}

struct State {
    /// When the next sweep may start, in the store's clock seconds.
    next_at: u32,
    /// Seconds between the end of one sweep and the start of the next.
    wait: u32,
    /// Whether a sweep is under way, and what it has found so far.
    sweeping: bool,
    to_check: u64,
    checked: u64,
    removed: u64,
}

impl Default for SweepPace {
    fn default() -> Self {
        SweepPace {
            state: Mutex::new(State {
                next_at: 0,
                wait: 0,
                sweeping: false,
                to_check: 0,
                checked: 0,
                removed: 0,
            }),
        }
    }
}

impl SweepPace {
    /// Whether to sweep a step now. `items` is the number of items held,
    /// which a sweep starting now will have to check.
    pub fn due(&self, now: u32, items: u64) -> bool {
        let mut state = self.state.lock();
        if state.sweeping {
            return true;
        }
        if now < state.next_at {
            return false;
        }
        state.sweeping = true;
        state.to_check = items;
        state.checked = 0;
        state.removed = 0;
        true
    }

    /// Records one step of the sweep; the sweep ends once it has checked as
    /// many items as there were when it started, and sets the next one's time.
    pub fn record(&self, now: u32, checked: u64, removed: u64) {
        let mut state = self.state.lock();
        if !state.sweeping {
            return;
        }
        state.checked += checked;
        state.removed += removed;
        if state.checked < state.to_check {
            return;
        }
        state.wait = if state.removed == 0 {
            (state.wait + STEP).min(MAX_WAIT)
        } else if state.removed > state.checked / 100 + 1 {
            state.wait.saturating_sub(STEP)
        } else {
            state.wait
        };
        state.sweeping = false;
        state.next_at = now.saturating_add(state.wait);
    }

    /// Makes the next sweep due at once (after a flush_all).
    pub fn hurry(&self) {
        let mut state = self.state.lock();
        state.next_at = 0;
    }

    /// Seconds between sweeps now.
    #[cfg(test)]
    fn wait(&self) -> u32 {
        self.state.lock().wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep(pace: &SweepPace, now: u32, items: u64, removed: u64) {
        assert!(pace.due(now, items));
        pace.record(now, items, removed);
    }

    #[test]
    fn the_first_sweep_is_at_once_and_fruitless_ones_slow_down() {
        let pace = SweepPace::default();
        sweep(&pace, 0, 0, 0);
        assert_eq!(pace.wait(), 60);
        assert!(!pace.due(59, 10));
        sweep(&pace, 60, 10, 0);
        assert_eq!(pace.wait(), 120);
        for _ in 0..100 {
            pace.hurry();
            sweep(&pace, 100, 10, 0);
        }
        assert_eq!(pace.wait(), MAX_WAIT);
    }

    #[test]
    fn a_sweep_spans_steps_until_it_has_checked_what_was_there() {
        let pace = SweepPace::default();
        assert!(pace.due(0, 3000));
        pace.record(0, 1024, 0);
        assert!(pace.due(0, 0), "still sweeping");
        pace.record(1, 1024, 0);
        pace.record(2, 952, 0);
        assert!(!pace.due(3, 3000));
        assert_eq!(pace.wait(), 60);
    }

    #[test]
    fn a_fruitful_sweep_hurries_the_next_and_a_flush_makes_it_due() {
        let pace = SweepPace::default();
        sweep(&pace, 0, 0, 0);
        sweep(&pace, 60, 0, 0);
        assert_eq!(pace.wait(), 120);
        sweep(&pace, 200, 1000, 50);
        assert_eq!(pace.wait(), 60);
        sweep(&pace, 300, 1000, 5);
        assert_eq!(pace.wait(), 60, "a 0.5 % payoff keeps the pace");
        assert!(!pace.due(301, 1000));
        pace.hurry();
        assert!(pace.due(301, 1000));
    }
}
