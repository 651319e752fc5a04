//! Hybrid logical clock stamps: the CAS of an item on a server that takes
//! writes alongside peers (dual master), and the order by which their
//! concurrent writes of one key converge (last writer wins).
//!
//! A stamp is one u64, compared as a number:
//!
//! ```text
//! | milliseconds since 2020-01-01 (40 bits) | counter (12) | origin rank (12) |
//! ```
//!
//! The time and counter part is the larger of the wall clock and one past
//! the newest stamp this server has made or received, so a write is always
//! stamped after every write it could have seen (causality holds however
//! the clocks drift); writes that did not see each other are ordered by
//! wall clock, and equal times by the origin's rank (its server id modulo
//! 4096), so no two servers ever make the same stamp.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

const RANK_BITS: u32 = 12;
const COUNTER_BITS: u32 = 12;
/// 2020-01-01T00:00:00Z in milliseconds since the Unix epoch.
const EPOCH_MILLIS: u64 = 1_577_836_800_000;

/// The rank of a server's stamps: peers must have different ranks.
pub fn rank_of(server_id: u32) -> u16 {
    (server_id % (1 << RANK_BITS)) as u16
}

/// The rank of the server that made `stamp`.
pub fn origin_rank(stamp: u64) -> u16 {
    (stamp & ((1 << RANK_BITS) - 1)) as u16
}

/// The smallest stamp (2021-01-01): a CAS below it is a counter's, from
/// before the server had peers.
const FIRST_STAMP: u64 = (31_622_400_000 << COUNTER_BITS) << RANK_BITS;

/// Whether `cas` is a stamp (not a counter's).
pub fn is_stamp(cas: u64) -> bool {
    cas >= FIRST_STAMP
}

/// Whether `cas` is a stamp made by the server of `rank`.
pub fn made_by(cas: u64, rank: u16) -> bool {
    is_stamp(cas) && origin_rank(cas) == rank
}

/// The stamp after `last` (the newest this server knows of) made at
/// `now_millis` (since the Unix epoch) by the server of `rank`.
pub fn next_stamp(last: u64, now_millis: u64, rank: u16) -> u64 {
    let logical = (last >> RANK_BITS) + 1;
    let physical = now_millis.saturating_sub(EPOCH_MILLIS) << COUNTER_BITS;
    (logical.max(physical) << RANK_BITS) | u64::from(rank)
}

/// The wall-clock time of a stamp, in milliseconds since the Unix epoch
/// (what `kura` shows of a write's time).
pub fn stamp_millis(stamp: u64) -> u64 {
    (stamp >> (RANK_BITS + COUNTER_BITS)) + EPOCH_MILLIS
}

/// Makes the stamps of one server.
#[derive(Debug, Clone, Copy)]
pub struct StampClock {
    rank: u16,
}

impl StampClock {
    pub fn new(server_id: u32) -> StampClock {
        StampClock {
            rank: rank_of(server_id),
        }
    }

    pub fn rank(&self) -> u16 {
        self.rank
    }

    /// A new stamp, after every one in `last` (which it becomes).
    pub fn next(&self, last: &AtomicU64) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        let mut current = last.load(Ordering::Acquire);
        loop {
            let next = next_stamp(current, now, self.rank);
            match last.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return next,
                Err(seen) => current = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_115_200_000; // 2025-11-26

    #[test]
    fn a_stamp_follows_the_wall_clock_and_keeps_its_rank() {
        let stamp = next_stamp(0, NOW, 7);
        assert_eq!(origin_rank(stamp), 7);
        assert_eq!(stamp_millis(stamp), NOW);
    }

    #[test]
    fn a_stamp_is_after_every_stamp_seen_even_from_a_clock_ahead() {
        let ahead = next_stamp(0, NOW + 60_000, 1);
        let here = next_stamp(ahead, NOW, 2);
        assert!(here > ahead);
        assert_eq!(origin_rank(here), 2);
        // The same millisecond again: the counter moves on.
        let again = next_stamp(here, NOW, 2);
        assert!(again > here);
        assert_eq!(stamp_millis(again), NOW + 60_000);
    }

    #[test]
    fn equal_times_are_ordered_by_rank() {
        let low = next_stamp(0, NOW, 3);
        let high = next_stamp(0, NOW, 4);
        assert!(high > low);
        assert_ne!(low, high);
    }

    #[test]
    fn a_stamp_tells_its_maker_and_a_counter_none() {
        let stamp = next_stamp(0, NOW, 300);
        assert!(made_by(stamp, 300));
        assert!(!made_by(stamp, 301));
        // A counter CAS from before peers: not anyone's stamp.
        assert!(!made_by(300, 300));
        assert!(!made_by(4096 * 1_000_000 + 300, 300));
    }

    #[test]
    fn ranks_come_from_server_ids() {
        assert_eq!(rank_of(1), 1);
        assert_eq!(rank_of(4096 + 5), 5);
        assert_eq!(rank_of(u32::MAX), 4095);
    }

    #[test]
    fn the_clock_makes_increasing_stamps() {
        let clock = StampClock::new(9);
        let last = AtomicU64::new(0);
        let mut previous = 0;
        for _ in 0..10_000 {
            let stamp = clock.next(&last);
            assert!(stamp > previous);
            assert_eq!(origin_rank(stamp), 9);
            previous = stamp;
        }
    }
}
