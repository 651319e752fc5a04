//! New primary keys for a table's rows: Tokyo Tyrant's `genuid` and a put
//! without a key, HandlerSocket's insert without `_key`. Each table keeps
//! its last id in memory, found once by a scan of its numeric primary
//! keys; an id that a client has since put as a key is seen when handed
//! out, and the scan runs again to step past every such key.

use std::collections::HashMap;

use kura_store::Tables;

use super::Context;

/// The last id handed out, by table.
pub type LastIds = HashMap<Vec<u8>, u64>;

/// `None` once the ids run out: the last id, or a numeric key it must
/// step past, is 2^64 - 1.
pub fn new_uid(tables: &dyn Tables, table: &[u8], ctx: &Context<'_>) -> Option<u64> {
    let mut last_ids = ctx.shared.tyrant_uid.lock();
    let last = match last_ids.get(table) {
        Some(last) => *last,
        None => largest_numeric_key(tables, table),
    };
    let mut next = last.checked_add(1)?;
    if let Ok(Some(_)) = tables.get_row(table, next.to_string().as_bytes(), &ctx.fence) {
        next = largest_numeric_key(tables, table)
            .max(next)
            .checked_add(1)?;
    }
    last_ids.insert(table.to_vec(), next);
    Some(next)
}

fn largest_numeric_key(tables: &dyn Tables, table: &[u8]) -> u64 {
    let mut largest = 0;
    let _ = tables.visit_rows(table, &mut |row| {
        let numeric = std::str::from_utf8(row.key())
            .ok()
            .and_then(|k| k.parse::<u64>().ok());
        largest = largest.max(numeric.unwrap_or(0));
        true
    });
    largest
}
