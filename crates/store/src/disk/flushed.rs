//! What a flush removes from LMDB, and the boundary LMDB keeps of it.
//!
//! A flush is a boundary: every item whose CAS is at or before it is gone.
//! On a server without peers a counter's boundary (its own flush, or its
//! master's) is the newest CAS there was, so every item in LMDB is older
//! and the tables are cleared whole. A stamp's (a dual master's flush, on a
//! peer or a replica of either), and any flush on a dual master (a peer's
//! may come from before it had peers), may arrive after newer items were
//! stored: only the items at or before the boundary go, one by one. That
//! takes one transaction holding every covered key and the pages it
//! dirties: a dual master's `flush_all` costs memory in proportion to what
//! it removes. The newest boundary applied is kept in `meta`,
//! so that after a restart a late write of a peer's from before it is still
//! dead, and the flush, coming back, is not applied twice.

use heed::RwTxn;

use super::record::{Counts, Old};
use super::Inner;

/// `meta` key: the newest flush boundary LMDB reflects (u64 LE).
pub(super) const FLUSHED: &[u8] = b"flushed";

impl Inner {
    /// Removes every item the flush through `boundary` covers, if there
    /// is one; returns the newest boundary LMDB reflects now (0 for none).
    pub(super) fn clear_flushed(
        &self,
        txn: &mut RwTxn<'_>,
        counts: &mut Counts,
        boundary: Option<u64>,
    ) -> heed::Result<u64> {
        let applied = super::meta_u64(&self.meta, txn, FLUSHED)?;
        // Already applied (a round committed in parts and retried, or a
        // replay of what LMDB holds): a table cleared whole again would
        // lose the writes made after the flush.
        let Some(boundary) = boundary.filter(|&boundary| boundary > applied) else {
            return Ok(applied);
        };
        if self.stamps.is_none() && !crate::stamp::is_stamp(boundary) {
            self.items.clear(txn)?;
            self.expiry.clear(txn)?;
            // The flushed items' space goes back at once.
            let classes = std::mem::take(&mut counts.classes);
            for (index, (items, _)) in classes.0.into_iter().enumerate() {
                *counts.reclaims.reclaimed.entry(index + 1).or_default() += items;
            }
            counts.log.clear();
        } else {
            let mut covered: Vec<(Vec<u8>, Old)> = Vec::new();
            for entry in self.items.iter(txn)? {
                let (key, stored) = entry?;
                if let Some(old) = Old::of(stored).filter(|old| old.header.cas <= boundary) {
                    covered.push((key.to_vec(), old));
                }
            }
            for (key, old) in covered {
                let class = self.class_of(&key, old.value_len);
                self.forget_old(txn, &key, Some(old), counts, 0)?;
                self.items.delete(txn, &key)?;
                *counts.reclaims.reclaimed.entry(class).or_default() += 1;
            }
        }
        self.meta.put(txn, FLUSHED, &boundary.to_le_bytes())?;
        Ok(boundary)
    }
}
