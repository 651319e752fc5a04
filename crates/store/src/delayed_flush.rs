//! `flush_all N`: a flush due N seconds from now, taken once when its time
//! comes by whichever thread looks first. Both engines keep one.

use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Default)]
pub(crate) struct DelayedFlush {
    /// Server time at which the flush is due; 0 when none.
    deadline: AtomicU32,
}

impl DelayedFlush {
    /// A flush is due at server time `at` (replacing one scheduled before).
    pub(crate) fn schedule(&self, at: u32) {
        // 0 stands for none: a flush due at the start is due at once.
        self.deadline.store(at.max(1), Ordering::Relaxed);
    }

    /// No flush is due any more (an immediate one came first).
    pub(crate) fn cancel(&self) {
        self.deadline.store(0, Ordering::Relaxed);
    }

    /// Whether the flush is due at `now`; true once per deadline.
    pub(crate) fn take_due(&self, now: u32) -> bool {
        let deadline = self.deadline.load(Ordering::Relaxed);
        deadline != 0
            && now >= deadline
            && self
                .deadline
                .compare_exchange(deadline, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delayed_flush_is_due_once_and_can_be_cancelled() {
        let delayed = DelayedFlush::default();
        delayed.schedule(100);
        assert!(!delayed.take_due(99));
        assert!(delayed.take_due(100));
        assert!(!delayed.take_due(101), "taken once");
        delayed.schedule(200);
        delayed.cancel();
        assert!(!delayed.take_due(300));
        delayed.schedule(0);
        assert!(delayed.take_due(1), "due at the start: due at once");
    }
}
