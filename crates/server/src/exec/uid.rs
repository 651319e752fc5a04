//! New primary keys for a table's rows: Tokyo Tyrant's `genuid` and a put
//! without a key, HandlerSocket's insert without `_key`. One more than
//! every id handed out since the start and every numeric primary key.

use kura_store::Tables;

use super::Context;

/// `None` once the ids run out (a key of 2^64 - 1 exists).
pub fn new_uid(tables: &dyn Tables, table: &[u8], ctx: &Context<'_>) -> Option<u64> {
    let mut last = ctx.shared.tyrant_uid.lock();
    let mut largest = 0;
    let _ = tables.visit_rows(table, &mut |row| {
        let numeric = std::str::from_utf8(&row.key)
            .ok()
            .and_then(|k| k.parse::<u64>().ok());
        largest = largest.max(numeric.unwrap_or(0));
        true
    });
    *last = (*last).max(largest).checked_add(1)?;
    Some(*last)
}
