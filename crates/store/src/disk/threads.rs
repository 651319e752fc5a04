//! The disk engine's threads and how they wake each other: the writer
//! (`appender.rs`), the applier (`applier.rs`, with `compactor.rs` and
//! `expiry.rs`) and the syncer (`syncer.rs`).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use super::Inner;

/// How long an idle writer sleeps before looking for writes of callers
/// that never ask for an append.
pub(super) const IDLE_TICK: Duration = Duration::from_millis(5);

/// How the threads are woken and stopped.
#[derive(Default)]
pub(super) struct Signals {
    pub(super) stopping: AtomicBool,
    /// The writer is done: the applier applies everything and ends.
    pub(super) finishing: AtomicBool,
    pub(super) writer: OnceLock<Thread>,
    pub(super) writer_idle: AtomicBool,
    pub(super) applier: OnceLock<Thread>,
    pub(super) apply_requested: AtomicBool,
    /// A round is asked for only to have LMDB hold what was written (for a
    /// read: `stats`, a table's query; or expired items' removal): the
    /// segment being appended to may go on.
    pub(super) apply_only_asked: AtomicBool,
    pub(super) syncer: OnceLock<Thread>,
    /// Expired items are due: the next round reclaims a batch.
    pub(super) reclaim: AtomicBool,
    /// `lru_crawler crawl`: the next round removes every expired item of
    /// the classes marked (index = class).
    pub(super) crawl: parking_lot::Mutex<Option<Vec<bool>>>,
    /// When the writer last checked the space left.
    pub(super) space_checked: parking_lot::Mutex<Option<Instant>>,
}

/// Wakes `thread` if it has started.
fn unpark(thread: &OnceLock<Thread>) {
    if let Some(thread) = thread.get() {
        thread.unpark();
    }
}

impl Signals {
    pub fn wake_writer(&self) {
        if self.writer_idle.load(Ordering::SeqCst) {
            unpark(&self.writer);
        }
    }

    /// Asks the applier for a round now.
    pub fn wake_applier(&self) {
        self.apply_requested.store(true, Ordering::SeqCst);
        unpark(&self.applier);
    }

    /// Asks the applier for a round now, only to have LMDB hold every
    /// write: the segment being appended to may go on.
    pub fn wake_applier_to_apply_only(&self) {
        self.apply_only_asked.store(true, Ordering::SeqCst);
        unpark(&self.applier);
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        unpark(&self.writer);
    }

    /// After the writer ended: the applier applies what is left and ends,
    /// then the syncer.
    pub fn finish(&self) {
        self.finishing.store(true, Ordering::SeqCst);
        unpark(&self.applier);
        unpark(&self.syncer);
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub(super) fn finishing(&self) -> bool {
        self.finishing.load(Ordering::SeqCst)
    }
}

/// Starts the writer, the applier, and the syncer when the policy has one,
/// in that order (the order they are stopped in).
pub(super) fn start(inner: &Arc<Inner>) -> io::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let mut spawn = |name: &str, run: fn(&Inner), slot: &OnceLock<Thread>| -> io::Result<()> {
        let inner = inner.clone();
        let handle = thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&inner))?;
        let _ = slot.set(handle.thread().clone());
        threads.push(handle);
        Ok(())
    };
    let signals = &inner.signals;
    spawn("kura-disk-writer", Inner::write_loop, &signals.writer)?;
    spawn("kura-disk-applier", Inner::apply_loop, &signals.applier)?;
    if inner.config.sync.background_period().is_some() {
        spawn("kura-disk-syncer", Inner::sync_loop, &signals.syncer)?;
    }
    Ok(threads)
}
