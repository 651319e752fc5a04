//! Server counters, declared once with their meaning; `stats` (and later the
//! Prometheus endpoint) read them from here.
//!
//! Each worker thread owns one [`Counters`] and is its only writer, so a
//! count is a plain load and store, never a locked read-modify-write.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use parking_lot::Mutex;

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
}

macro_rules! counters {
    ($($name:ident: $meaning:literal,)*) => {
        /// Per-worker command counters, named as memcached names them.
        #[derive(Debug, Default)]
        pub struct Counters {
            $(#[doc = $meaning] pub $name: Counter,)*
            /// Per-prefix figures (`stats detail`).
            pub detail: Detail,
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

        }

        impl CounterTotals {
            /// The counts made since `baseline` was taken (`stats reset`).
            pub fn since(&self, baseline: &CounterTotals) -> CounterTotals {
                CounterTotals {
                    $($name: self.$name.wrapping_sub(baseline.$name),)*
                }
            }

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
    buffer_kicks: "Connections closed while holding bytes past --max-buffered",
    detail_untracked: "Requests stats detail did not count: their prefix came past --max-detail-prefixes",
    auth_cmds: "Authentication attempts (text login or SASL)",
    auth_errors: "Failed authentication attempts",
    response_obj_oom: "Requests refused, or connections closed, for lack of reply memory (-o read_buf_mem_limit)",
}

/// Connection figures shared by the acceptor and the workers.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    pub current: AtomicUsize,
    pub total: AtomicU64,
    pub rejected: AtomicU64,
    /// Set while the acceptor leaves new connections in the backlog (at the
    /// connection limit without `maxconns_fast`): `accepting_conns 0`.
    pub not_accepting: AtomicBool,
    /// Times the acceptor stopped accepting, memcached's `listen_disabled_num`.
    pub listen_disabled: AtomicU64,
    /// Microseconds spent not accepting, `time_in_listen_disabled_us`.
    pub listen_disabled_us: AtomicU64,
}

/// The counts as they were at the last `stats reset`.
#[derive(Debug, Default)]
pub struct ResetBaseline {
    pub counters: CounterTotals,
    pub store: kura_store::StoreStats,
    /// Events logged (`log_worker_written`; their count is also the next
    /// line's `gid`, which goes on).
    pub log_written: u64,
}

/// Figures of one key prefix (`stats detail dump`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrefixCounts {
    pub gets: u64,
    pub hits: u64,
    pub sets: u64,
    pub deletes: u64,
}

/// States of [`Detail`]'s switch.
const DETAIL_AS_CONFIGURED: u8 = 0;
const DETAIL_OFF: u8 = 1;
const DETAIL_ON: u8 = 2;

/// memcached's per-prefix statistics (`stats detail on|off|dump`) as one
/// worker counted them: the prefix is the key up to the first delimiter
/// (`:` unless `-D` says otherwise); a key without one is not counted.
///
/// `stats detail on|off` sets the switch of every worker's `Detail`, so a
/// request reads only its own worker's: when off, one relaxed load. When
/// on, it takes this worker's lock, which only `stats detail dump` and
/// `stats reset` contend for.
#[derive(Debug, Default)]
pub struct Detail {
    /// DETAIL_AS_CONFIGURED until `stats detail on|off`: on when `-D` was given.
    switch: AtomicU8,
    prefixes: Mutex<HashMap<Box<[u8]>, PrefixCounts>>,
}

impl Detail {
    /// Whether to count; `configured` is whether `-D` turned counting on at start.
    #[inline]
    pub fn enabled(&self, configured: bool) -> bool {
        match self.switch.load(Ordering::Relaxed) {
            DETAIL_AS_CONFIGURED => configured,
            state => state == DETAIL_ON,
        }
    }

    pub fn set_enabled(&self, on: bool) {
        let state = if on { DETAIL_ON } else { DETAIL_OFF };
        self.switch.store(state, Ordering::Relaxed);
    }

    /// Counts one request for `key`'s prefix; false when the prefix is
    /// new and this worker already counts `max_prefixes` (0: no limit),
    /// which bounds the memory a client's made-up prefixes take.
    pub fn record(
        &self,
        key: &[u8],
        delimiter: u8,
        max_prefixes: usize,
        count: impl FnOnce(&mut PrefixCounts),
    ) -> bool {
        // memcached stops at a NUL byte too: its keys are C strings there.
        let Some(end) = key.iter().position(|&b| b == delimiter || b == 0) else {
            return true;
        };
        if key[end] != delimiter {
            return true;
        }
        let prefix = &key[..end];
        let mut prefixes = self.prefixes.lock();
        let full = max_prefixes != 0 && prefixes.len() >= max_prefixes;
        match prefixes.get_mut(prefix) {
            Some(counts) => count(counts),
            None if full => return false,
            None => {
                let mut counts = PrefixCounts::default();
                count(&mut counts);
                prefixes.insert(prefix.into(), counts);
            }
        }
        true
    }

    /// Adds this worker's figures to `totals`.
    pub fn add_to(&self, totals: &mut HashMap<Box<[u8]>, PrefixCounts>) {
        for (prefix, counts) in self.prefixes.lock().iter() {
            let total = totals.entry(prefix.clone()).or_default();
            total.gets += counts.gets;
            total.hits += counts.hits;
            total.sets += counts.sets;
            total.deletes += counts.deletes;
        }
    }

    pub fn clear(&self) {
        self.prefixes.lock().clear();
    }
}
