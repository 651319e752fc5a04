//! What connections hold beyond their sockets: requests received and not
//! yet whole (a value still coming), and replies the client has not read.
//! memcached copies neither (it reads a value into its item and sends items
//! by reference); kura copies both, so without a bound a few hundred
//! clients that stall could make it hold gigabytes: a `get` of 63 keys of
//! 1 MB each, never read, is 63 MB.
//!
//! Each connection's first [`FREE_PER_CONNECTION`] bytes are its own; what
//! it holds past them counts against one limit for the server
//! (`--max-buffered`). Past the limit, every connection holding such bytes
//! is closed, as Redis closes a client past its output buffer's hard
//! limit: the memory goes back at once, and a client that reads its
//! replies and sends whole requests never holds much for long.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What a connection may hold without counting: a request line, a small
/// value, a few replies.
pub const FREE_PER_CONNECTION: usize = 64 << 10;

#[derive(Debug)]
pub struct HeldBuffers {
    held: AtomicUsize,
    limit: usize,
    /// Set when the total passed the limit; the workers close what counts
    /// and clear it.
    over: AtomicBool,
}

impl HeldBuffers {
    /// `limit` bytes past every connection's free share; 0: no limit.
    pub fn new(limit: usize) -> Self {
        HeldBuffers {
            held: AtomicUsize::new(0),
            limit: if limit == 0 { usize::MAX } else { limit },
            over: AtomicBool::new(false),
        }
    }

    /// A connection holds `bytes` now; `counted` is what it counted before,
    /// and becomes what it counts now. Returns true when the total is past
    /// the limit and this connection holds part of it (it must close); the
    /// caller then wakes the workers (see [`over_limit`](Self::over_limit)).
    pub fn update(&self, counted: &mut usize, bytes: usize) -> bool {
        let now = bytes.saturating_sub(FREE_PER_CONNECTION);
        if now == *counted {
            return now > 0 && self.over_limit();
        }
        if now > *counted {
            let total = self.held.fetch_add(now - *counted, Ordering::Relaxed) + now - *counted;
            if total > self.limit {
                self.over.store(true, Ordering::Release);
            }
        } else {
            self.held.fetch_sub(*counted - now, Ordering::Relaxed);
        }
        *counted = now;
        now > 0 && self.over_limit()
    }

    /// A connection goes: what it counted no longer counts.
    pub fn release(&self, counted: &mut usize) {
        self.held
            .fetch_sub(std::mem::take(counted), Ordering::Relaxed);
    }

    /// Whether the total passed the limit and is not back under it.
    pub fn over_limit(&self) -> bool {
        if !self.over.load(Ordering::Acquire) {
            return false;
        }
        if self.held.load(Ordering::Relaxed) <= self.limit {
            self.over.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// Bytes counted now (`stats kura`: `conn_held_bytes`).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_passes_the_free_share_counts_and_past_the_limit_its_holders_go() {
        let buffers = HeldBuffers::new(100 << 10);
        let (mut a, mut b) = (0, 0);
        assert!(!buffers.update(&mut a, FREE_PER_CONNECTION));
        assert_eq!(buffers.held(), 0);
        assert!(!buffers.update(&mut a, FREE_PER_CONNECTION + (60 << 10)));
        assert!(!buffers.update(&mut b, 10));
        assert!(
            buffers.update(&mut b, FREE_PER_CONNECTION + (60 << 10)),
            "past the limit"
        );
        assert!(
            buffers.update(&mut a, FREE_PER_CONNECTION + (60 << 10)),
            "a holds part of it"
        );
        assert!(!buffers.update(&mut b, 0), "b holds nothing now");
        assert_eq!(buffers.held(), 60 << 10);
        assert!(!buffers.over_limit(), "back under the limit");
        buffers.release(&mut a);
        assert_eq!((buffers.held(), a), (0, 0));
        let unbounded = HeldBuffers::new(0);
        assert!(!unbounded.update(&mut b, 1 << 40));
    }
}
