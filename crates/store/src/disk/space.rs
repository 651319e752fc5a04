//! The room left on the file system and in LMDB's map: below the reserve,
//! writes are refused (deletes go on) until space comes back.

use std::io;
use std::time::{Duration, Instant};

use super::Inner;

/// How often a busy writer checks the space left, so a fast writer refuses
/// writes before the file system is full, not after.
const SPACE_CHECK_EVERY: Duration = Duration::from_millis(10);

pub(super) fn is_enospc(error: &io::Error) -> bool {
    error.raw_os_error() == Some(nix::errno::Errno::ENOSPC as i32)
}

/// Whether an LMDB failure means "no room" (writes may resume later) rather
/// than a broken disk.
pub(super) fn is_out_of_space(error: &heed::Error) -> bool {
    match error {
        heed::Error::Mdb(heed::MdbError::MapFull) => true,
        heed::Error::Io(error) => is_enospc(error),
        _ => false,
    }
}

impl Inner {
    /// A write to the log failed: for want of room (no block, no inode),
    /// writes wait until space is freed; for any other reason the engine
    /// is poisoned.
    pub(super) fn log_write_failed(&self, what: &str, error: io::Error) {
        if is_enospc(&error) {
            tracing::error!(%error, "{what}: disk full, refusing writes until space is freed");
            self.health.set_out_of_space(true);
        } else {
            self.poison(what, error);
        }
    }

    /// Room left for data: in the map, and on the file system (pages freed
    /// inside the file are reused before it grows), less what the current
    /// journal segment holds for LMDB (at most that much room when applied).
    pub(super) fn space_left(&self) -> Option<u64> {
        let (used, file) = (*self.lmdb_usage.lock())?;
        // A file system that tells no free space (ramfs) bounds nothing
        // here: the map still does.
        let fs_free = super::journal::free_space(self.env.path()).unwrap_or(u64::MAX);
        let map_left = (self.config.map_size as u64).saturating_sub(used);
        let room = map_left.min(fs_free.saturating_add(file.saturating_sub(used)));
        Some(room.saturating_sub(self.journal.current_end().1))
    }

    /// Measures the pages LMDB uses and its file's size: the file changes
    /// only in a commit, and counting the used pages walks the free list,
    /// too slow for every space check.
    pub(super) fn measure_lmdb_usage(&self) {
        *self.lmdb_usage.lock() = self
            .env
            .non_free_pages_size()
            .ok()
            .zip(self.env.real_disk_size().ok());
    }

    /// A flush waits for the applier's next round, as memcached's is lazy:
    /// until then a read of an item it covers counts in `get_flushed`. On a
    /// disk short of room it is applied at once, whichever came first, so
    /// the room it frees shows. `flush_logged`: a flush is in the log and
    /// not yet applied (`Logged::flush`).
    pub(super) fn apply_flush_if_short(&self, flush_logged: bool) {
        if flush_logged && self.health.is_out_of_space() {
            self.signals.wake_applier();
        }
    }

    pub(super) fn check_space_if_due(&self) {
        let mut checked = self.signals.space_checked.lock();
        if checked.is_none_or(|at| at.elapsed() >= SPACE_CHECK_EVERY) {
            *checked = Some(Instant::now());
            drop(checked);
            self.check_space();
        }
    }

    /// Whether `left` (from [`space_left`](Self::space_left)) is short:
    /// below the reserve, or nothing at all, so that even with no reserve
    /// LMDB keeps the room to apply what the log holds (a restart replays
    /// it there too).
    pub(super) fn is_short(&self, left: u64) -> bool {
        left < self.config.reserve_bytes.max(1)
    }

    /// Refuses writes while less than the reserve is left; resumes when
    /// space was freed.
    pub(super) fn check_space(&self) {
        let Some(left) = self.space_left() else {
            return;
        };
        let short = self.is_short(left);
        if self.health.set_out_of_space(short) {
            if short {
                self.apply_flush_if_short(self.logged.lock().flush.is_some());
                tracing::warn!(left, "disk nearly full: refusing writes");
            } else {
                tracing::info!(left, "disk space freed: accepting writes again");
            }
        }
    }
}
