//! The disk engine's own figures (`stats kura`).

use std::sync::atomic::Ordering;

use super::Inner;
use crate::heap::process_resident_bytes;

/// One figure as `stats kura` shows it.
fn stat(name: &'static str, value: impl ToString) -> (&'static str, String) {
    (name, value.to_string())
}

impl Inner {
    pub(super) fn engine_stats(&self) -> Vec<(&'static str, String)> {
        let counters = &self.counters;
        let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        let appends = load(&counters.appends);
        let appended_writes = load(&counters.appended_writes);
        let fsyncs = load(&counters.fsyncs);
        let fsync_micros = load(&counters.fsync_micros);
        let journal_live_bytes = self.applied_counts.lock().log.total();
        let (cache_bytes, cache_records) = self.pending.cache_usage();
        let env = &self.env;
        let journal = &self.journal;
        let info = env.info();
        vec![
            stat("disk_path", env.path().display()),
            stat("disk_file_bytes", env.real_disk_size().unwrap_or(0)),
            stat("disk_map_bytes", info.map_size),
            stat("disk_used_bytes", env.non_free_pages_size().unwrap_or(0)),
            stat("disk_used_pages", info.last_page_number + 1),
            stat("disk_sync_policy", self.config.sync.name()),
            stat("disk_appends", appends),
            stat("disk_appended_writes", appended_writes),
            stat("disk_avg_append_writes", appended_writes / appends.max(1)),
            stat("disk_largest_append", load(&counters.largest_append)),
            stat("disk_failed_appends", load(&counters.failed_appends)),
            stat("disk_failed_commits", load(&counters.failed_commits)),
            stat("disk_applies", load(&counters.applies)),
            stat("disk_applied_writes", load(&counters.applied_writes)),
            stat("log_server_id", self.server_id),
            stat("log_last_lsn", journal.last_lsn()),
            stat("disk_journal_bytes", journal.bytes()),
            stat("disk_journal_live_bytes", journal_live_bytes),
            stat("disk_journal_segments", journal.older_segments().len() + 1),
            stat("disk_compactions", load(&counters.compactions)),
            stat("disk_compacted_bytes", load(&counters.compacted_bytes)),
            stat("disk_journal_waiting_bytes", self.pending.logged_bytes()),
            stat("disk_fsyncs", fsyncs),
            stat("disk_fsync_avg_us", fsync_micros / fsyncs.max(1)),
            stat("disk_pending_bytes", self.pending.bytes()),
            stat("disk_pending_limit", self.config.pending_limit),
            stat("disk_read_cache_bytes", cache_bytes),
            stat("disk_read_cache_items", cache_records),
            stat("disk_read_cache_limit", self.config.read_cache_bytes()),
            stat("disk_reserve_bytes", self.config.reserve_bytes),
            stat("disk_out_of_space", u8::from(self.health.is_out_of_space())),
            stat("disk_poisoned", u8::from(self.health.is_poisoned())),
            stat("disk_writes_refused", self.health.refused()),
            stat("disk_expired_reclaimed", load(&counters.swept)),
            stat("disk_memory_budget", self.config.memory_budget),
            stat("disk_resident_bytes", process_resident_bytes().unwrap_or(0)),
            stat("disk_resident_trims", load(&counters.resident_trims)),
            stat("disk_prefetched_rounds", load(&counters.prefetched_rounds)),
            stat(
                "log_replay_dropped_bytes",
                load(&counters.replay_dropped_bytes),
            ),
        ]
    }
}
