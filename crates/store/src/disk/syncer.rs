//! The syncer thread: fsyncs the journal as the sync policy says.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::Instant;

use super::Inner;

impl Inner {
    /// fsyncs the journal as the policy says (the applier fsyncs the data
    /// file itself before it deletes journal segments).
    pub(super) fn sync_loop(&self) {
        let period = (self.config.sync.background_period())
            .expect("the syncer runs only under a policy with a period");
        let mut synced_groups = 0;
        loop {
            let finishing = self.signals.finishing();
            let groups = self.counters.appends.load(Ordering::Acquire);
            if groups > synced_groups {
                // Every segment, not only the current one: a retired one the
                // applier has not fsynced yet holds older writes, which must
                // not be lost while a newer one stays.
                self.fsync("journal fsync failed", || self.journal.sync_everything());
                synced_groups = groups;
            }
            if finishing {
                return;
            }
            thread::park_timeout(period);
        }
    }

    /// Runs `sync` and counts it; a failure poisons the engine. Returns
    /// whether it succeeded.
    pub(super) fn fsync<E: std::fmt::Display>(
        &self,
        what: &str,
        sync: impl FnOnce() -> Result<(), E>,
    ) -> bool {
        let started = Instant::now();
        if let Err(error) = sync() {
            self.poison(what, error);
            return false;
        }
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .fsync_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        true
    }

    /// Refuses writes from now on, saying why.
    pub(super) fn poison(&self, what: &str, error: impl std::fmt::Display) {
        tracing::error!(%error, "{what}: refusing writes from now on");
        self.health.poison();
    }
}
