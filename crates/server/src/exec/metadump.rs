//! `lru_crawler metadump`: every item's metadata, one line each, in
//! memcached's format, written in parts as the socket takes them. memcached's
//! crawler writes the dump to the client's socket and waits while it is
//! full; so here a dump of millions of items holds one part in memory, and
//! its worker serves its other connections between parts.

use std::io::Write;

use kura_store::ScanCursor;

use super::Context;
use crate::watch;

/// Items per part: some 100 KiB of lines.
const PART_ITEMS: usize = 1024;

/// Which size classes a crawl or a dump visits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrawlClasses {
    All,
    /// Bit n: class n.
    Some(u64),
}

impl CrawlClasses {
    /// `all` or `1,2,…` (memcached's class ids, 1 to 63).
    pub fn parse(classes: &[u8]) -> Option<CrawlClasses> {
        if classes == b"all" {
            return Some(CrawlClasses::All);
        }
        let mut bits = 0u64;
        for id in classes.split(|&b| b == b',') {
            let id = kura_proto::number::parse_flags(id).filter(|id| (1..64).contains(id))?;
            bits |= 1 << id;
        }
        Some(CrawlClasses::Some(bits))
    }

    pub fn includes(&self, class: usize) -> bool {
        match self {
            CrawlClasses::All => true,
            CrawlClasses::Some(bits) => class < 64 && bits & (1 << class) != 0,
        }
    }
}

/// A dump under way on a connection: where it goes on.
#[derive(Debug)]
pub struct Metadump {
    classes: CrawlClasses,
    /// `None` once `END` is written.
    cursor: Option<ScanCursor>,
}

impl Metadump {
    pub fn new(classes: CrawlClasses) -> Metadump {
        Metadump {
            classes,
            cursor: Some(ScanCursor::START),
        }
    }

    /// Appends the next part's lines to `out`, and `END` after the last;
    /// false when there was no part left to write.
    pub fn write_part(&mut self, ctx: &Context<'_>, out: &mut Vec<u8>) -> bool {
        let Some(from) = self.cursor.take() else {
            return false;
        };
        let unix_now = ctx.shared.store.clock().unix_now() as i64;
        let store = &ctx.shared.store;
        // Items that cannot be read (a failing disk) end the dump.
        self.cursor = store
            .scan_part(&from, PART_ITEMS, &mut |item| {
                if !self.classes.includes(item.class) {
                    return;
                }
                out.extend_from_slice(b"key=");
                watch::uri_encode(item.key, out);
                // `exp` and `la` as Unix times (`exp=-1` never expires).
                let exp = if item.ttl < 0 {
                    -1
                } else {
                    unix_now + item.ttl
                };
                let _ = writeln!(
                    out,
                    " exp={exp} la={} cas={} fetch={} cls={} size={}",
                    unix_now - i64::from(item.idle_seconds),
                    ctx.visible_cas(item.cas),
                    if item.fetched { "yes" } else { "no" },
                    item.class,
                    item.size
                );
            })
            .unwrap_or(None);
        if self.cursor.is_none() {
            out.extend_from_slice(b"END\r\n");
        }
        true
    }
}
