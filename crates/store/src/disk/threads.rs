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
    pub(super) syncer: OnceLock<Thread>,
    /// Expired items are due: the next round reclaims a batch.
    pub(super) reclaim: AtomicBool,
    /// `lru_crawler crawl`: the next round removes every expired item of
    /// the classes marked (index = class).
    pub(super) crawl: parking_lot::Mutex<Option<Vec<bool>>>,
    /// When the writer last checked the space left.
    pub(super) space_checked: parking_lot::Mutex<Option<Instant>>,
}

impl Signals {
    pub fn wake_writer(&self) {
        if self.writer_idle.load(Ordering::SeqCst) {
            if let Some(writer) = self.writer.get() {
                writer.unpark();
            }
        }
    }

    /// Asks the applier for a round now.
    pub fn wake_applier(&self) {
        self.apply_requested.store(true, Ordering::SeqCst);
        if let Some(applier) = self.applier.get() {
            applier.unpark();
        }
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        if let Some(thread) = self.writer.get() {
            thread.unpark();
        }
    }

    /// After the writer ended: the applier applies what is left and ends,
    /// then the syncer.
    pub fn finish(&self) {
        self.finishing.store(true, Ordering::SeqCst);
        for thread in [&self.applier, &self.syncer] {
            if let Some(thread) = thread.get() {
                thread.unpark();
            }
        }
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
    let spawn = |name: &str, run: fn(&Inner)| {
        let inner = inner.clone();
        thread::Builder::new()
            .name(name.into())
            .spawn(move || run(&inner))
    };
    let writer = spawn("kura-disk-writer", Inner::write_loop)?;
    let _ = inner.signals.writer.set(writer.thread().clone());
    threads.push(writer);
    let applier = spawn("kura-disk-applier", Inner::apply_loop)?;
    let _ = inner.signals.applier.set(applier.thread().clone());
    threads.push(applier);
    if inner.config.sync.background_period().is_some() {
        let syncer = spawn("kura-disk-syncer", Inner::sync_loop)?;
        let _ = inner.signals.syncer.set(syncer.thread().clone());
        threads.push(syncer);
    }
    Ok(threads)
}
