//! New primary keys for a table's rows: Tokyo Tyrant's `genuid` and a put
//! without a key, HandlerSocket's insert without `_key`. Each table's last
//! id is kept as a row of a table of kura's own, written (and so logged,
//! replicated and backed up) before the id is handed out, so that no id
//! comes back after a restart or once its row is removed (Tokyo Cabinet
//! keeps its counter in its database file for the same). In memory the last id
//! is cached by table, so that the table's numeric primary keys are scanned
//! only at the first use; each id steps past the larger of the cached and
//! the kept one, and an id that a client has since put as a key is seen
//! when handed out, and the scan runs again to step past every such key.

use std::collections::HashMap;

use kura_store::{Record, RowEdit, RowOutcome, Tables};

use super::Context;

/// The last id handed out, by table.
pub type LastIds = HashMap<Vec<u8>, u64>;

/// The table whose rows hold each table's last id, keyed by its name. It
/// starts with a NUL byte, which kura's protocols do not put in the tables
/// clients name.
const LAST_IDS_TABLE: &[u8] = b"\0last-uid";
const LAST_ID_COLUMN: &[u8] = b"last";

/// `None` once the ids run out (the last id, or a numeric key it must step
/// past, is 2^64 - 1), or when the last id cannot be read or written.
pub fn new_uid(tables: &dyn Tables, table: &[u8], ctx: &Context<'_>) -> Option<u64> {
    // Nothing that waits for the log's appends runs under the lock: a
    // follower redoing a Tokyo Tyrant master's writes holds them while it
    // asks for an id here. So the scans and the write run outside it.
    let cached = ctx.shared.tyrant_uid.lock().contains_key(table);
    let mut floor = if cached {
        0
    } else {
        largest_numeric_key(tables, table)
    };
    let next = loop {
        let mut last_ids = ctx.shared.tyrant_uid.lock();
        // Read each time: a server that followed a master since holds the
        // master's, which may be past the one cached here.
        let kept = kept_last_id(tables, table, ctx)?;
        let cached = last_ids.get(table).copied().unwrap_or(0);
        let next = kept.max(cached).max(floor).checked_add(1)?;
        if let Ok(Some(_)) = tables.get_row(table, next.to_string().as_bytes(), &ctx.fence) {
            // A client put that key since: past every numeric key.
            drop(last_ids);
            floor = largest_numeric_key(tables, table).max(next);
            continue;
        }
        last_ids.insert(table.to_vec(), next);
        break next;
    };
    // Kept before the id is answered (the reply waits for the write, or for
    // a larger id's that another thread wrote first: the fence), and never
    // lowered by a thread that took a smaller id.
    let mut keep = |row: Option<Record>| {
        if row
            .as_ref()
            .and_then(last_id_of)
            .is_some_and(|kept| kept >= next)
        {
            return RowEdit::Leave;
        }
        let mut kept = Record::new(table);
        kept.put(LAST_ID_COLUMN, next.to_string().as_bytes());
        RowEdit::Put(kept)
    };
    match tables.modify_row(LAST_IDS_TABLE, table, &mut keep, &ctx.fence) {
        RowOutcome::Done | RowOutcome::Kept => Some(next),
        _ => None,
    }
}

/// The last id written for `table`, 0 if none was; `None` when it cannot
/// be read (an id handed out before might come back).
fn kept_last_id(tables: &dyn Tables, table: &[u8], ctx: &Context<'_>) -> Option<u64> {
    let row = tables.get_row(LAST_IDS_TABLE, table, &ctx.fence).ok()?;
    Some(row.as_ref().and_then(last_id_of).unwrap_or(0))
}

/// The last id a row of [`LAST_IDS_TABLE`] keeps.
fn last_id_of(row: &Record) -> Option<u64> {
    std::str::from_utf8(row.get(LAST_ID_COLUMN)?)
        .ok()?
        .parse()
        .ok()
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
