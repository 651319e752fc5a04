//! The disk engine's own figures (`stats kura`).

use std::sync::atomic::Ordering;

use super::Inner;

impl Inner {
    pub(super) fn engine_stats(&self) -> Vec<(&'static str, String)> {
        let counters = &self.counters;
        let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        let appends = load(&counters.appends);
        let fsyncs = load(&counters.fsyncs);
        let (cache_bytes, cache_records) = self.pending.cache_usage();
        let info = self.env.info();
        vec![
            ("disk_path", self.env.path().display().to_string()),
            (
                "disk_file_bytes",
                self.env.real_disk_size().unwrap_or(0).to_string(),
            ),
            ("disk_map_bytes", info.map_size.to_string()),
            (
                "disk_used_bytes",
                self.env.non_free_pages_size().unwrap_or(0).to_string(),
            ),
            ("disk_used_pages", (info.last_page_number + 1).to_string()),
            ("disk_sync_policy", self.config.sync.name()),
            ("disk_appends", appends.to_string()),
            (
                "disk_appended_writes",
                load(&counters.appended_writes).to_string(),
            ),
            (
                "disk_avg_append_writes",
                (load(&counters.appended_writes) / appends.max(1)).to_string(),
            ),
            (
                "disk_largest_append",
                load(&counters.largest_append).to_string(),
            ),
            (
                "disk_failed_appends",
                load(&counters.failed_appends).to_string(),
            ),
            (
                "disk_failed_commits",
                load(&counters.failed_commits).to_string(),
            ),
            ("disk_applies", load(&counters.applies).to_string()),
            (
                "disk_applied_writes",
                load(&counters.applied_writes).to_string(),
            ),
            ("log_server_id", self.server_id.to_string()),
            ("log_last_lsn", self.journal.last_lsn().to_string()),
            ("disk_journal_bytes", self.journal.bytes().to_string()),
            (
                "disk_journal_live_bytes",
                self.applied_counts.lock().log.total().to_string(),
            ),
            (
                "disk_journal_segments",
                (self.journal.older_segments().len() + 1).to_string(),
            ),
            ("disk_compactions", load(&counters.compactions).to_string()),
            (
                "disk_compacted_bytes",
                load(&counters.compacted_bytes).to_string(),
            ),
            (
                "disk_journal_waiting_bytes",
                self.pending.logged_bytes().to_string(),
            ),
            ("disk_fsyncs", fsyncs.to_string()),
            (
                "disk_fsync_avg_us",
                (load(&counters.fsync_micros) / fsyncs.max(1)).to_string(),
            ),
            ("disk_pending_bytes", self.pending.bytes().to_string()),
            ("disk_pending_limit", self.config.pending_limit.to_string()),
            ("disk_fetch_marks_waiting", self.marks.waiting().to_string()),
            ("disk_read_cache_bytes", cache_bytes.to_string()),
            ("disk_read_cache_items", cache_records.to_string()),
            (
                "disk_read_cache_limit",
                self.config.read_cache_bytes().to_string(),
            ),
            ("disk_reserve_bytes", self.config.reserve_bytes.to_string()),
            (
                "disk_out_of_space",
                u8::from(self.health.is_out_of_space()).to_string(),
            ),
            (
                "disk_poisoned",
                u8::from(self.health.is_poisoned()).to_string(),
            ),
            (
                "disk_writes_refused",
                load(&counters.writes_refused).to_string(),
            ),
            ("disk_expired_reclaimed", load(&counters.swept).to_string()),
            ("disk_memory_budget", self.config.memory_budget.to_string()),
            (
                "disk_resident_bytes",
                super::resident::process_resident_bytes()
                    .unwrap_or(0)
                    .to_string(),
            ),
            (
                "disk_resident_trims",
                load(&counters.resident_trims).to_string(),
            ),
            (
                "disk_prefetched_rounds",
                load(&counters.prefetched_rounds).to_string(),
            ),
        ]
    }
}
