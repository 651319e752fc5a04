//! What a flush removes from LMDB, and the boundary LMDB keeps of it.
//!
//! A flush is a boundary: every item whose CAS is at or before it is gone.
//! A counter's boundary (a server without peers, or its replica) is the
//! newest CAS there was, so every item in LMDB is older and the tables are
//! cleared whole. A stamp's (a dual master's flush, on a peer or a replica
//! of either) may arrive after newer items were stored: only the items at
//! or before the boundary go, one by one. The newest boundary applied is kept in `meta`,
//! so that after a restart a late write of a peer's from before it is still
//! dead, and the flush, coming back, is not applied twice.

use heed::RwTxn;

use super::change::Old;
use super::record::{self, Counts};
use super::Inner;

/// `meta` key: the newest flush boundary LMDB reflects (u64 LE).
pub(super) const FLUSHED: &[u8] = b"flushed";

impl Inner {
    /// Removes every item the flush through `boundary` covers.
    pub(super) fn clear_flushed(
        &self,
        txn: &mut RwTxn<'_>,
        counts: &mut Counts,
        boundary: u64,
    ) -> heed::Result<()> {
        if !crate::stamp::is_stamp(boundary) {
            self.items.clear(txn)?;
            self.expiry.clear(txn)?;
            // The flushed items' space goes back at once.
            for (index, &(items, _)) in counts.classes.0.iter().enumerate() {
                if items > 0 {
                    self.note_reclaimed(index + 1, items);
                }
            }
            counts.clear();
        } else {
            let covered: Vec<(Vec<u8>, Old)> = self
                .items
                .iter(txn)?
                .filter_map(Result::ok)
                .filter_map(|(key, stored)| Some((key.to_vec(), Old::of(stored)?)))
                .filter(|(_, old)| old.header.cas <= boundary)
                .collect();
            for (key, old) in covered {
                if old.header.expiry_unix != 0 {
                    self.expiry
                        .delete(txn, &record::expiry_key(old.header.expiry_unix, &key))?;
                }
                self.items.delete(txn, &key)?;
                self.uncount(counts, &key, &old);
                self.note_reclaimed(self.class_of(&key, old.value_len), 1);
            }
        }
        let kept = self.flushed_boundary(txn)?;
        self.meta
            .put(txn, FLUSHED, &kept.max(boundary).to_le_bytes())
    }

    /// The newest flush boundary LMDB reflects; 0 for none.
    pub(super) fn flushed_boundary(&self, txn: &heed::RoTxn<'_>) -> heed::Result<u64> {
        Ok(self
            .meta
            .get(txn, FLUSHED)?
            .and_then(|bytes| bytes.try_into().ok())
            .map_or(0, u64::from_le_bytes))
    }
}
