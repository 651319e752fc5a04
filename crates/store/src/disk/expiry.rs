//! Expired items removed from LMDB by the applier: a batch in the round
//! after the maintenance tick finds some due, oldest first by the expiry
//! index, and all of them at once for `lru_crawler crawl`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use heed::RwTxn;

use super::record::{self, Counts, Old};
use super::Inner;

/// Expired items removed per round, so one round never grows unbounded.
const RECLAIM_BATCH: usize = 10_000;

/// The longest a reclaim or a crawl waits for the round it asked for. A
/// round that keeps failing (a full disk) must not hold up the maintenance
/// tick; what the round removes counts once it commits.
const ROUND_WAIT: Duration = Duration::from_secs(2);

impl Inner {
    /// Removes expired items, oldest first by the expiry index: a batch of
    /// any class (`classes` `None`: an apply round's reclaim), or all of
    /// those of the classes marked (`lru_crawler crawl`, counted in
    /// `crawler_reclaimed`). The keys removed are added to `swept`.
    pub(super) fn remove_due(
        &self,
        txn: &mut RwTxn<'_>,
        counts: &mut Counts,
        classes: Option<&[bool]>,
        swept: &mut Vec<Vec<u8>>,
    ) -> heed::Result<()> {
        // One reading of the clock for the walk and the check: an item the
        // walk finds due (its index entry goes) must be found sweepable.
        let cutoff = self.sweep_cutoff();
        let limit = classes.map_or(RECLAIM_BATCH, |_| usize::MAX);
        let marked = |key: &[u8], old: &Old| {
            classes
                .is_none_or(|classes| classes.get(self.class_of(key, old.value_len)) == Some(&true))
        };
        for index_key in &self.due_expiry_keys(txn, cutoff, limit)? {
            let key = &index_key[4..];
            let found = self.stored_old(txn, key)?;
            if found.as_ref().is_some_and(|old| !marked(key, old)) {
                continue;
            }
            self.expiry.delete(txn, index_key)?;
            // Expiry 0: never.
            let Some(old) = found.filter(|old| (1..=cutoff).contains(&old.header.expiry_unix))
            else {
                continue;
            };
            if !self.fetched(self.pending.item_hash(key), &old.header) {
                counts.reclaims.unfetched += 1;
            }
            self.items.delete(txn, key)?;
            self.uncount(counts, key, &old);
            swept.push(key.to_vec());
            let tally = match classes {
                None => &mut counts.reclaims.reclaimed,
                Some(_) => &mut counts.reclaims.crawled,
            };
            *tally.entry(self.class_of(key, old.value_len)).or_default() += 1;
        }
        Ok(())
    }

    /// The expiry index's entries due by `cutoff` ([`Inner::sweep_cutoff`]),
    /// oldest first, at most `limit`.
    fn due_expiry_keys(
        &self,
        txn: &heed::RoTxn<'_>,
        cutoff: u32,
        limit: usize,
    ) -> heed::Result<Vec<Vec<u8>>> {
        Ok(self
            .expiry
            .iter(txn)?
            .filter_map(Result::ok)
            .take_while(|(index_key, _)| {
                record::expiry_of_index_key(index_key).is_some_and(|at| at <= cutoff)
            })
            .take(limit)
            .map(|(index_key, _)| index_key.to_vec())
            .collect())
    }

    /// Waits, at most [`ROUND_WAIT`], for the apply round that takes the
    /// next write: it saw a flag raised before.
    fn wait_for_next_round(&self) {
        let seq = self.pending.next_seq();
        self.wait_applied(seq, Some(Instant::now() + ROUND_WAIT), true);
    }

    /// Has the applier crawl the classes marked now; returns how many
    /// expired items it removed.
    pub(super) fn crawl_expired_now(&self, classes: Vec<bool>) -> usize {
        let crawled = || self.counters.reclaims.lock().crawled.values().sum::<u64>();
        let before = crawled();
        *self.signals.crawl.lock() = Some(classes);
        self.wait_for_next_round();
        (crawled() - before) as usize
    }

    /// Has the applier reclaim expired items now, if the background expiry
    /// is on (`DiskConfig::background_expiry`) and any are due; returns how
    /// many it removed.
    pub(super) fn reclaim_expired_now(&self) -> usize {
        let due = self.config.background_expiry
            && self.env.read_txn().ok().is_some_and(|txn| {
                self.due_expiry_keys(&txn, self.sweep_cutoff(), 1)
                    .is_ok_and(|due| !due.is_empty())
            });
        if !due {
            return 0;
        }
        let before = self.counters.swept.load(Ordering::Acquire);
        // Flag first, then number: the round that decides the number saw the flag.
        self.signals.reclaim.store(true, Ordering::Release);
        self.wait_for_next_round();
        (self.counters.swept.load(Ordering::Acquire) - before) as usize
    }
}
