//! Server time and memcached's expiry rule.
//!
//! Times inside kura are seconds since the server started, as in memcached
//! (`rel_time_t`), so an item needs only 32 bits for its expiry. The clock
//! can be advanced by tests instead of sleeping.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::time::{clock_gettime, ClockId};

/// Expiry values larger than this many seconds are absolute Unix times.
pub const MAX_RELATIVE_EXPTIME: i64 = 60 * 60 * 24 * 30;

/// Server time starts here, so that 1 can mean "already expired" and 0 "never".
const FIRST_TICK: u32 = 2;

/// An expiry time in server seconds: 0 never expires; anything at or before
/// the current time has expired.
pub type ExpiryTime = u32;

/// Microseconds since the Unix epoch, now (0 for a clock set before it).
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_micros() as u64)
}

/// The server's clock: seconds since start, plus a test-only offset.
#[derive(Debug)]
pub struct Clock {
    /// Nanoseconds of the coarse monotonic clock at the last whole Unix
    /// second before start, so server seconds tick with Unix seconds.
    started_nanos: i64,
    /// Unix time that corresponds to server time 0.
    epoch_unix: u64,
    /// Seconds added by tests to travel forward without sleeping.
    skipped: AtomicU32,
}

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE`: read from the vDSO page without
/// touching the TSC, about ten times cheaper than `Instant::now()` and
/// accurate to a few milliseconds, ample for whole seconds. Every get reads
/// the clock (memcached reads a global its timer updates).
fn monotonic_nanos() -> i64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC_COARSE)
        .map_or(0, |now| now.tv_sec() * 1_000_000_000 + now.tv_nsec())
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        // Counting from the Unix second's start keeps the server's Unix time
        // from running up to a second ahead of the real one (an absolute
        // exptime a few seconds away would expire early).
        // The coarse clock's tick of a few milliseconds is added as slack.
        const COARSE_SLACK_NANOS: i64 = 10_000_000;
        Clock {
            started_nanos: monotonic_nanos() - i64::from(unix.subsec_nanos()) + COARSE_SLACK_NANOS,
            epoch_unix: unix.as_secs().saturating_sub(u64::from(FIRST_TICK)),
            skipped: AtomicU32::new(0),
        }
    }

    /// Current server time in seconds.
    pub fn now(&self) -> u32 {
        let elapsed = ((monotonic_nanos() - self.started_nanos) / 1_000_000_000)
            .clamp(0, i64::from(u32::MAX / 2)) as u32;
        FIRST_TICK + elapsed + self.skipped.load(Ordering::Relaxed)
    }

    /// Current Unix time according to the server.
    pub fn unix_now(&self) -> u64 {
        self.epoch_unix + u64::from(self.now())
    }

    /// Seconds since start.
    pub fn uptime(&self) -> u32 {
        self.now() - FIRST_TICK
    }

    /// Moves the clock forward (tests, and `debugtime`-style tooling).
    pub fn advance(&self, seconds: u32) {
        self.skipped.fetch_add(seconds, Ordering::Relaxed);
    }

    /// memcached's rule for an exptime sent by a client: 0 is never; negative
    /// is already expired; up to 30 days is relative to now; beyond that it
    /// is an absolute Unix time.
    pub fn expiry(&self, exptime: i64) -> ExpiryTime {
        expiry_at(exptime, self.now(), self.epoch_unix)
    }

    /// When a `flush_all` with `delay` is due, as memcached with CAS sets it
    /// (`oldest_live = realtime(exptime) - 1`): `None` now (`flush_all 1`
    /// included), else a later second.
    pub fn flush_due(&self, delay: i64) -> Option<ExpiryTime> {
        // `expiry` of a positive delay is at least 1.
        (delay > 0)
            .then(|| self.expiry(delay) - 1)
            .filter(|&at| at > self.now())
    }

    /// Seconds left before `expiry`, or -1 for an item that never expires.
    pub fn ttl(&self, expiry: ExpiryTime) -> i64 {
        ttl_at(expiry, self.now())
    }

    /// The Unix time of server time `at`: how an expiry outlives the
    /// process (a warm restart's snapshot).
    pub fn to_unix(&self, at: ExpiryTime) -> u64 {
        self.epoch_unix + u64::from(at)
    }

    /// The server time of Unix time `unix`; a time before this server
    /// started is "already expired".
    pub fn from_unix(&self, unix: u64) -> ExpiryTime {
        match unix.checked_sub(self.epoch_unix) {
            Some(at) if at > 1 => at.min(u64::from(u32::MAX)) as u32,
            _ => 1,
        }
    }
}

/// The expiry rule as a pure function of the current server time.
pub fn expiry_at(exptime: i64, now: u32, epoch_unix: u64) -> ExpiryTime {
    const ALREADY_EXPIRED: ExpiryTime = 1;
    if exptime == 0 {
        0
    } else if exptime < 0 {
        ALREADY_EXPIRED
    } else if exptime > MAX_RELATIVE_EXPTIME {
        let unix = exptime as u64;
        if unix <= epoch_unix {
            ALREADY_EXPIRED
        } else {
            (unix - epoch_unix).min(u64::from(u32::MAX)) as u32
        }
    } else {
        now.saturating_add(exptime as u32)
    }
}

/// Seconds left, -1 for never.
pub fn ttl_at(expiry: ExpiryTime, now: u32) -> i64 {
    if expiry == 0 {
        -1
    } else {
        i64::from(expiry.saturating_sub(now))
    }
}

/// Whether an item with this expiry is dead at `now`.
pub fn is_expired(expiry: ExpiryTime, now: u32) -> bool {
    expiry != 0 && expiry <= now
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u32 = 1000;
    const EPOCH: u64 = 1_700_000_000;

    #[test]
    fn expiry_rule_table() {
        let cases: &[(i64, ExpiryTime, &str)] = &[
            (0, 0, "zero never expires"),
            (-1, 1, "negative is already expired"),
            (1, NOW + 1, "one second from now"),
            (
                MAX_RELATIVE_EXPTIME,
                NOW + 2_592_000,
                "30 days is still relative",
            ),
            (
                EPOCH as i64 + 5000,
                5000,
                "beyond 30 days is absolute unix time",
            ),
            (
                MAX_RELATIVE_EXPTIME + 1,
                1,
                "an absolute time in the past is expired",
            ),
        ];
        for &(exptime, expected, why) in cases {
            assert_eq!(expiry_at(exptime, NOW, EPOCH), expected, "{why}");
        }
    }

    #[test]
    fn expired_items() {
        assert!(!is_expired(0, NOW));
        assert!(is_expired(NOW, NOW));
        assert!(!is_expired(NOW + 1, NOW));
        assert!(is_expired(1, NOW));
        assert_eq!(ttl_at(0, NOW), -1);
        assert_eq!(ttl_at(NOW + 30, NOW), 30);
        assert_eq!(ttl_at(NOW - 5, NOW), 0);
    }

    #[test]
    fn unix_times_round_trip_through_server_time() {
        let clock = Clock::new();
        // Bracketed: a second may turn between two readings.
        let before = clock.unix_now();
        let at = clock.now() + 100;
        let after = clock.unix_now();
        assert_eq!(clock.from_unix(clock.to_unix(at)), at);
        assert!((before + 100..=after + 100).contains(&clock.to_unix(at)));
        assert_eq!(clock.from_unix(1), 1, "before the start is expired");
    }

    #[test]
    fn server_unix_time_never_runs_ahead_of_the_real_one() {
        for _ in 0..300 {
            let clock = Clock::new();
            std::thread::sleep(std::time::Duration::from_millis(3));
            let server = clock.unix_now();
            let real = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            assert!(server <= real.as_secs(), "{server} is ahead of {real:?}");
        }
    }

    #[test]
    fn clock_advances_for_tests() {
        let clock = Clock::new();
        let before = clock.now();
        clock.advance(60);
        assert!(clock.now() >= before + 60);
        assert!(is_expired(clock.expiry(-1), clock.now()));
    }
}
