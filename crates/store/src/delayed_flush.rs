//! `flush_all N`: a flush due N seconds from now, run once when its time
//! comes by whichever thread looks first. Both engines keep one.

use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

#[derive(Default)]
pub(crate) struct DelayedFlush {
    /// Server time at which the flush is due; 0 when none.
    deadline: AtomicU32,
    /// Held while the due flush runs.
    running: Mutex<()>,
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

    /// Runs `flush` if the flush is due at `now`, once per deadline. The
    /// deadline is cleared only once `flush` has run, and a thread that
    /// finds it due meanwhile waits for that: a write that looks first is
    /// numbered after the flush's boundary, never under it and lost.
    pub(crate) fn run_if_due(&self, now: u32, flush: impl FnOnce()) -> bool {
        let due = |deadline: u32| deadline != 0 && now >= deadline;
        if !due(self.deadline.load(Ordering::Acquire)) {
            return false;
        }
        let _running = self.running.lock();
        // Run by another meanwhile, or cancelled.
        let deadline = self.deadline.load(Ordering::Acquire);
        if !due(deadline) {
            return false;
        }
        flush();
        // One scheduled while it ran stays.
        let _ = (self.deadline).compare_exchange(deadline, 0, Ordering::AcqRel, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delayed_flush_is_due_once_and_can_be_cancelled() {
        let delayed = DelayedFlush::default();
        let take_due = |now| delayed.run_if_due(now, || {});
        delayed.schedule(100);
        assert!(!take_due(99));
        assert!(take_due(100));
        assert!(!take_due(101), "taken once");
        delayed.schedule(200);
        delayed.cancel();
        assert!(!take_due(300));
        delayed.schedule(0);
        assert!(take_due(1), "due at the start: due at once");
    }

    /// A thread that finds the flush due while another runs it returns
    /// only once the flush has run: its write comes after the boundary.
    #[test]
    fn a_thread_finding_the_flush_due_waits_for_it_to_have_run() {
        use std::sync::atomic::AtomicBool;
        let delayed = DelayedFlush::default();
        delayed.schedule(10);
        let flushed = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                delayed.run_if_due(10, || {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    flushed.store(true, Ordering::Release);
                });
            });
            // Until the other holds it (or, on a slow machine, is done).
            while delayed.running.try_lock().is_some() && !flushed.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            assert!(!delayed.run_if_due(11, || panic!("run twice")));
            assert!(
                flushed.load(Ordering::Acquire),
                "returned before the flush ran"
            );
        });
    }
}
