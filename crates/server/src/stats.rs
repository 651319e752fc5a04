//! Server counters, declared once with their meaning; `stats` (and later the
//! Prometheus endpoint) read them from here.
//!
//! Each worker thread owns one [`Counters`] and is its only writer, so a
//! count is a plain load and store, never a locked read-modify-write.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A counter written by one thread and read by any.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    #[inline]
    pub fn add(&self, n: u64) {
        // Single writer: a load and a store are enough, and cheaper than fetch_add.
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

macro_rules! counters {
    ($($name:ident: $meaning:literal,)*) => {
        /// Per-worker command counters, named as memcached names them.
        #[derive(Debug, Default)]
        pub struct Counters {
            $(#[doc = $meaning] pub $name: Counter,)*
        }

        /// The sum of every worker's counters.
        #[derive(Debug, Default, Clone)]
        pub struct CounterTotals {
            $(pub $name: u64,)*
        }

        impl Counters {
            /// Every counter's name and meaning.
            pub const MEANINGS: &'static [(&'static str, &'static str)] = &[$((stringify!($name), $meaning),)*];

            pub fn add_to(&self, totals: &mut CounterTotals) {
                $(totals.$name += self.$name.get();)*
            }

            pub fn reset(&self) {
                $(self.$name.reset();)*
            }
        }

        impl CounterTotals {
            /// Visits each counter by name, in declaration order.
            pub fn each(&self, mut visit: impl FnMut(&'static str, u64)) {
                $(visit(stringify!($name), self.$name);)*
            }
        }
    };
}

counters! {
    cmd_get: "Keys requested by retrieval commands",
    cmd_set: "Storage commands",
    cmd_flush: "flush_all commands",
    cmd_touch: "Keys touched (touch, gat, gats)",
    cmd_meta: "Meta commands",
    get_hits: "Keys requested and found",
    get_misses: "Keys requested and not found",
    delete_misses: "Deletions of missing keys",
    delete_hits: "Deletions that removed an item",
    incr_misses: "incr of missing keys",
    incr_hits: "Successful incr",
    decr_misses: "decr of missing keys",
    decr_hits: "Successful decr",
    cas_misses: "CAS of missing keys",
    cas_hits: "Successful CAS",
    cas_badval: "CAS whose value did not match",
    touch_hits: "Keys touched",
    touch_misses: "Touches of missing keys",
    store_too_large: "Storage rejected as larger than the item size limit",
    store_no_memory: "Storage rejected for lack of memory",
    bytes_read: "Bytes read from clients",
    bytes_written: "Bytes written to clients",
    conn_yields: "Times a busy connection yielded to others (-R)",
    idle_kicks: "Connections closed for idling past the idle timeout",
    auth_cmds: "Authentication attempts (text login or SASL)",
    auth_errors: "Failed authentication attempts",
}

/// Connection figures shared by the acceptor and the workers.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    pub current: AtomicUsize,
    pub total: AtomicU64,
    pub rejected: AtomicU64,
}
