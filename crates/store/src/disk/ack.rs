//! Which writes may be acknowledged: the thread that appends a group (the
//! writer, or a worker leading the append) decides its writes in sequence
//! order, and replies wait for the decision (see `AckState`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::{AckSpan, AckState};

/// Failed ranges remembered; a waiter older than these was told long ago.
const FAILED_RANGES_KEPT: usize = 1024;

type Listener = Box<dyn Fn(u64) + Send + Sync>;

#[derive(Default)]
pub struct Acks {
    /// Every write numbered up to this is decided: appended, or failed.
    decided: AtomicU64,
    /// Inclusive ranges of writes whose append failed.
    failed: Mutex<VecDeque<(u64, u64)>>,
    listeners: Mutex<Vec<Listener>>,
    progress: Mutex<()>,
    advanced: Condvar,
}

impl Acks {
    pub fn decided(&self) -> u64 {
        self.decided.load(Ordering::Acquire)
    }

    pub fn state(&self, seq: u64) -> AckState {
        self.state_of(AckSpan::of(seq))
    }

    /// Waiting until every write of `span` is decided; then failed if any
    /// write in it failed.
    pub fn state_of(&self, span: AckSpan) -> AckState {
        if span.last > self.decided() {
            return AckState::Waiting;
        }
        let overlaps = |&(from, to): &(u64, u64)| from <= span.last && span.first <= to;
        if self.failed.lock().iter().any(overlaps) {
            AckState::Failed
        } else {
            AckState::Ready
        }
    }

    /// Records that writes up to `through` are decided; `failed` when the
    /// append carrying those after the previous decision failed.
    pub fn advance(&self, through: u64, failed: bool) {
        let previous = self.decided();
        if through <= previous {
            return;
        }
        if failed {
            let mut ranges = self.failed.lock();
            match ranges.back_mut() {
                // Appends failing one after another (a full disk) make one
                // range, so a slow waiter's is not pushed out.
                Some(last) if last.1 == previous => last.1 = through,
                _ => {
                    if ranges.len() == FAILED_RANGES_KEPT {
                        ranges.pop_front();
                    }
                    ranges.push_back((previous + 1, through));
                }
            }
        }
        {
            let _guard = self.progress.lock();
            self.decided.store(through, Ordering::Release);
            self.advanced.notify_all();
        }
        for listener in self.listeners.lock().iter() {
            listener(through);
        }
    }

    pub fn listen(&self, listener: Listener) {
        self.listeners.lock().push(listener);
    }

    /// Blocks until `seq` is decided or `timeout` passes.
    pub fn wait(&self, seq: u64, timeout: Duration) -> AckState {
        let mut guard = self.progress.lock();
        if self.decided() < seq {
            self.advanced.wait_for(&mut guard, timeout);
        }
        drop(guard);
        self.state(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_in_a_failed_append_are_reported_failed() {
        let acks = Acks::default();
        acks.advance(5, false);
        acks.advance(9, true);
        assert_eq!(acks.state(5), AckState::Ready);
        assert_eq!(acks.state(6), AckState::Failed);
        assert_eq!(acks.state(9), AckState::Failed);
        assert_eq!(acks.state(10), AckState::Waiting);
        acks.advance(12, false);
        assert_eq!(acks.state(11), AckState::Ready);
        // A connection whose first write failed and whose next worked.
        let span = AckSpan { first: 7, last: 11 };
        assert_eq!(acks.state_of(span), AckState::Failed);
        assert_eq!(
            acks.state_of(AckSpan {
                first: 10,
                last: 12
            }),
            AckState::Ready
        );
        assert_eq!(
            acks.state_of(AckSpan {
                first: 10,
                last: 13
            }),
            AckState::Waiting
        );
    }

    #[test]
    fn failures_one_after_another_are_one_range_and_none_is_forgotten() {
        let acks = Acks::default();
        acks.advance(1, false);
        for through in 2..(FAILED_RANGES_KEPT as u64 * 3) {
            acks.advance(through, true);
        }
        assert_eq!(acks.failed.lock().len(), 1);
        assert_eq!(acks.state(1), AckState::Ready);
        assert_eq!(acks.state(2), AckState::Failed);
        assert_eq!(
            acks.state(FAILED_RANGES_KEPT as u64 * 3 - 1),
            AckState::Failed
        );
    }
}
