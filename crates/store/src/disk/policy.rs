//! When an acknowledged write reaches the disk (`--sync`).

use std::time::Duration;

/// The least time between two fsyncs under `batch`.
pub const BATCH_SYNC_GAP: Duration = Duration::from_millis(10);

/// When an acknowledged write reaches the disk. Under every policy a reply
/// goes out only after the write's group is appended to the journal, so a
/// crash of kura itself (the OS page cache survives) loses nothing
/// acknowledged; the policies differ in what a power loss or kernel crash
/// may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Each journal group is fsynced before its writes are acknowledged
    /// (concurrent writers share the fsync): nothing acknowledged is lost on
    /// power loss.
    Always,
    /// A background thread fsyncs the journal, at most every
    /// [`BATCH_SYNC_GAP`] so that fsyncs do not eat the CPU under load; a
    /// power loss may lose about that much (plus one fsync's duration).
    Batch,
    /// fsync every interval; a power loss may lose at most that window.
    Interval(Duration),
    /// Never fsync explicitly: the OS writes back when it likes.
    None,
}

impl SyncPolicy {
    /// How often the background thread fsyncs; `None` when it does not run.
    pub fn background_period(&self) -> Option<Duration> {
        match self {
            SyncPolicy::Batch => Some(BATCH_SYNC_GAP),
            SyncPolicy::Interval(every) => Some(*every),
            SyncPolicy::Always | SyncPolicy::None => None,
        }
    }

    pub fn name(&self) -> String {
        match self {
            SyncPolicy::Always => "always".into(),
            SyncPolicy::Batch => "batch".into(),
            SyncPolicy::Interval(every) => format!("interval={}ms", every.as_millis()),
            SyncPolicy::None => "none".into(),
        }
    }
}

impl std::str::FromStr for SyncPolicy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let interval = match text {
            "always" => return Ok(SyncPolicy::Always),
            "batch" => return Ok(SyncPolicy::Batch),
            "none" => return Ok(SyncPolicy::None),
            _ => text.strip_prefix("interval=").ok_or_else(|| {
                format!("unknown sync policy '{text}' (always, batch, interval=<duration>, none)")
            })?,
        };
        let (number, scale) = match interval.strip_suffix("ms") {
            Some(ms) => (ms, 0.001),
            None => (interval.strip_suffix('s').unwrap_or(interval), 1.0),
        };
        number
            .parse()
            .ok()
            .filter(|s: &f64| s.is_finite() && *s > 0.0)
            .map(|seconds| SyncPolicy::Interval(Duration::from_secs_f64(seconds * scale)))
            .ok_or_else(|| format!("bad sync interval '{interval}' (e.g. 1s, 200ms)"))
    }
}
