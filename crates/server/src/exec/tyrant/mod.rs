//! Tokyo Tyrant's binary commands, against the one database the tyrant
//! port serves (`--tyrant-db`), as ttserver serves one:
//! - `hash` (`items.rs`): memcached's items, so both protocols see the same
//!   records, as on ttserver's port;
//! - `btree:NAME` (`ordered.rs`): keys in byte order, kept as the rows of a
//!   table whose one column is `value`;
//! - `table:NAME` (`table.rs`): a table's rows of columns, and queries.
//!
//! The key-value commands of the first two are here, over [`KeyValues`];
//! `http.rs` serves Tokyo Tyrant's HTTP interface on the same port.
//! Where kura differs from ttserver: `ext` (Lua), `restore`, `setmst` and
//! `repl` answer failure.

pub mod http;
mod items;
pub(crate) mod ordered;
pub mod table;

use std::collections::VecDeque;
use std::ops::Bound;

use kura_proto::tyrant::{reply, PutMode, Request};
use kura_store::{RowOutcome, ScanCursor, ScanFailed};

use super::backup::BackupRequest;
use super::reply_limit::ReplyLimit;
use super::{Action, Context};
use crate::config::TyrantDatabase;

/// The protocol release kura answers `stat` with (clients check `type`).
const TYRANT_VERSION: &str = "1.1.41";

/// A change of a value: the old one (`None`: none) to the new one, or
/// `None` to fail.
type ValueChange<'c> = dyn FnMut(Option<&[u8]>) -> Option<Vec<u8>> + 'c;

/// What a hash or B+ tree database does with keys and values.
trait KeyValues {
    /// `stat`'s `type`.
    fn kind(&self) -> &'static str;
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// `Done`, `Kept` (putkeep found the record), `Invalid`, `TooLarge`,
    /// or `Failed` (the storage refused it).
    fn put(&self, mode: PutMode, key: &[u8], value: &[u8]) -> RowOutcome;
    /// `Done`, `Missing`, `Invalid`, or `Failed` (the storage refused it).
    fn out(&self, key: &[u8]) -> RowOutcome;
    /// Replaces the value by `change(old value)` (`None`: there is none)
    /// with no other write of the key between; `change` answering `None`
    /// fails it. Returns the value written.
    fn modify(&self, key: &[u8], change: &mut ValueChange<'_>) -> Option<Vec<u8>>;
    /// The keys starting with `prefix`, in byte order, at most `max`;
    /// `None` if they could not be read, or once they pass `within` bytes
    /// (the first always goes).
    fn keys(&self, prefix: &[u8], max: Option<usize>, within: usize) -> Option<Vec<Vec<u8>>>;
    /// Records and bytes.
    fn count_and_size(&self) -> (u64, u64);
    /// A new iterator over every key (`iterinit`).
    fn iterator(&self) -> KeyIterator;
    /// `misc range` (B+ tree only): `[key, value]…` from `begin` (inclusive)
    /// to `end` (exclusive), at most `max` records; `None` (a failure) also
    /// when they would hold more than `limit` bytes (`--max-reply`; the
    /// first record always goes), as `getlist`.
    fn range(
        &self,
        _begin: &[u8],
        _end: Option<&[u8]>,
        _max: Option<usize>,
        _limit: usize,
    ) -> Option<Vec<Vec<u8>>> {
        None
    }
}

pub fn execute(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    if let Request::Repl { micros, server_id } = request {
        return repl(*micros, *server_id, ctx, out);
    }
    if let Request::Copy { path } = request {
        // Made on a thread of its own (`exec/backup.rs`), whatever the database.
        return match BackupRequest::tyrant(path, ctx, out) {
            Some(request) => Action::Backup(request),
            None => Action::Continue,
        };
    }
    match &ctx.shared.config.tyrant_db {
        TyrantDatabase::Hash => serve(&items::Items { ctx }, request, ctx, out),
        TyrantDatabase::Btree(name) => match ctx.shared.store.tables() {
            Some(tables) => {
                let keys = ordered::OrderedKeys {
                    name: name.as_bytes(),
                    tables,
                    ctx,
                };
                serve(&keys, request, ctx, out)
            }
            None => reply::status(out, false),
        },
        TyrantDatabase::Table(name) => return table::execute(name.as_bytes(), request, ctx, out),
    }
    Action::Continue
}

fn serve(db: &dyn KeyValues, request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    match request {
        Request::Put { mode, key, value } => {
            let stored = db.put(*mode, key, value);
            if *mode != PutMode::NoReply {
                reply::status(out, stored == RowOutcome::Done);
            }
        }
        Request::PutShl { key, value, width } => {
            let width = *width as usize;
            let stored = db.modify(key, &mut |old| match old {
                // ttserver keeps the tail of old ‖ new; a new record is the
                // value as sent.
                Some(old) => {
                    let joined = [old, value].concat();
                    Some(joined[joined.len().saturating_sub(width)..].to_vec())
                }
                None => Some(value.to_vec()),
            });
            reply::status(out, stored.is_some());
        }
        Request::Out { key } => reply::status(out, db.out(key) == RowOutcome::Done),
        Request::Get { key } => match db.get(key) {
            Some(value) => reply::bytes(out, &value),
            None => reply::status(out, false),
        },
        Request::Mget { keys } => {
            match found_within(keys, ctx.shared.config.max_reply_bytes, |key| db.get(key)) {
                Some(found) => reply::records(out, found.iter().map(|(k, v)| (*k, &v[..]))),
                None => reply::status(out, false),
            }
        }
        Request::Vsiz { key } => match db.get(key) {
            Some(value) => reply::value_size(out, value.len() as u32),
            None => reply::status(out, false),
        },
        Request::IterInit => {
            start_iterator(ctx, db.iterator());
            reply::status(out, true);
        }
        Request::IterNext => match next_key(ctx) {
            Some(key) => reply::bytes(out, &key),
            None => reply::status(out, false),
        },
        Request::Fwmkeys { prefix, max } => match db.keys(
            prefix,
            usize::try_from(*max).ok(),
            ctx.shared.config.max_reply_bytes,
        ) {
            Some(keys) => reply::list(out, true, keys.iter().map(|key| &key[..])),
            None => reply::status(out, false),
        },
        Request::AddInt { key, delta } => {
            let mut sum = 0;
            let stored = db.modify(key, &mut |old| {
                let old = match old {
                    None => 0,
                    // A native int, as Tokyo Cabinet stores it (x86: little-endian).
                    Some(old) => i32::from_le_bytes(old.try_into().ok()?),
                };
                sum = old.wrapping_add(*delta);
                Some(sum.to_le_bytes().to_vec())
            });
            match stored {
                // `INT_MIN` is Tokyo Cabinet's failure: ttserver answers
                // failure for a sum of it too (and keeps the record).
                Some(_) if sum != i32::MIN => reply::int(out, sum),
                _ => reply::status(out, false),
            }
        }
        Request::AddDouble { key, delta } => {
            let mut sum = 0.0;
            let stored = db.modify(key, &mut |old| {
                let old = match old {
                    None => 0.0,
                    Some(old) => f64::from_le_bytes(old.try_into().ok()?),
                };
                sum = old + delta;
                (!sum.is_nan()).then(|| sum.to_le_bytes().to_vec())
            });
            match stored {
                Some(_) => reply::double(out, sum),
                None => reply::status(out, false),
            }
        }
        Request::Sync => reply::status(out, ctx.shared.store.sync()),
        Request::Optimize { .. } => reply::status(out, true),
        Request::Vanish => reply::status(out, vanish(db, ctx)),
        Request::Rnum => reply::count(out, db.count_and_size().0),
        Request::Size => reply::count(out, db.count_and_size().1),
        Request::Stat => {
            let (count, size) = db.count_and_size();
            reply::stat(out, stat_lines(ctx, db.kind(), count, size))
        }
        Request::SetMaster { host, port, .. } => reply::status(out, set_master(ctx, host, *port)),
        Request::Misc { name, args, .. } => match misc(db, name, args, ctx) {
            Some(items) => reply::list(out, true, items.iter().map(|item| &item[..])),
            // An unknown function, too few arguments or a failure: status
            // 1 and no elements, as ttserver answers.
            None => reply::list(out, false, std::iter::empty()),
        },
        // `repl` and `copy` never come here (see `execute`).
        Request::Ext { .. }
        | Request::Restore { .. }
        | Request::Repl { .. }
        | Request::Copy { .. } => reply::status(out, false),
    }
}

/// `repl`: a Tokyo Tyrant slave asks for the update log from `micros` on;
/// the connection is its link from now on (`replication/tyrant_feed.rs`).
/// Without an update log (the memory engine) it is status 1.
fn repl(micros: u64, slave: u32, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    if ctx.shared.store.replication().is_none() || !out.is_empty() {
        reply::status(out, false);
        return Action::Continue;
    }
    Action::Replicate(kura_proto::replication::LinkRequest::Tyrant {
        since_micros: micros,
        slave,
    })
}

/// `setmst`: follow the master whose tyrant port is `host:port` (it
/// answers kura's `replicate` there too), or, with an empty host or port
/// 0, follow none and take writes. ttserver's replication timestamp and
/// options are not needed: the replica's log says where it stands.
fn set_master(ctx: &Context<'_>, host: &[u8], port: u32) -> bool {
    let Some(shared) = ctx.shared.this() else {
        return false;
    };
    // No host, or port 0: stop following. A port past 65535 fails.
    let master = match u16::try_from(port) {
        Ok(port) if !host.is_empty() && port != 0 => Some(port),
        Ok(_) => None,
        Err(_) => return false,
    };
    let master = match master {
        Some(port) => match crate::replication::master_address(host, port) {
            Some(address) => Some((address, crate::MasterProtocol::Either)),
            None => return false,
        },
        None => None,
    };
    ctx.shared
        .replication
        .follow(&shared, master, false)
        .is_ok()
}

/// Keys an iterator over memcached's items reads at a time, and `vanish`
/// removes between two reads.
const KEYS_PART: usize = 256;

/// Tokyo Tyrant's iterator (`iterinit`, `iternext`): one per server,
/// shared by every connection, as ttserver's is. Either kind holds a few
/// keys, not the database's.
pub enum KeyIterator {
    /// memcached's items, a part at a time in the engine's order (as a
    /// metadump reads them; ttserver's hash database has no order either):
    /// where the next part starts, or why it could not be read.
    Items {
        cursor: Result<Option<ScanCursor>, ScanFailed>,
        part: VecDeque<Vec<u8>>,
    },
    /// A table's rows in primary-key order: the next key is the first
    /// within `from`, read when it is asked for, so a key written ahead of
    /// the iterator is seen, as ttserver's walk of its file sees it.
    Rows {
        table: Vec<u8>,
        from: Bound<Vec<u8>>,
    },
}

impl KeyIterator {
    /// Reads the first part at once: on the disk engine it waits for the
    /// writes taken so far to be applied, which must not happen under the
    /// shared iterator's lock.
    fn over_items(ctx: &Context<'_>) -> KeyIterator {
        let mut part = VecDeque::new();
        let store = &ctx.shared.store;
        let cursor = store.scan_part(&ScanCursor::START, KEYS_PART, &mut |item| {
            part.push_back(item.key.to_vec())
        });
        KeyIterator::Items { cursor, part }
    }

    fn over_rows(table: &[u8], from: Bound<Vec<u8>>) -> KeyIterator {
        KeyIterator::Rows {
            table: table.to_vec(),
            from,
        }
    }

    /// The next key; `Err` when the keys could not be read.
    fn next(&mut self, ctx: &Context<'_>) -> Result<Option<Vec<u8>>, ()> {
        Ok(self.take(ctx, 1)?.pop())
    }

    /// Up to `max` next keys (none: every key was given); `Err` when they
    /// could not be read.
    fn take(&mut self, ctx: &Context<'_>, max: usize) -> Result<Vec<Vec<u8>>, ()> {
        match self {
            KeyIterator::Items { cursor, part } => {
                // A part may hold no key and not be the last (it looked at
                // dead items only).
                while part.is_empty() {
                    let from = match std::mem::replace(cursor, Ok(None)) {
                        Ok(Some(from)) => from,
                        Ok(None) => return Ok(Vec::new()),
                        Err(ScanFailed) => return Err(()),
                    };
                    let store = &ctx.shared.store;
                    *cursor = store.scan_part(&from, KEYS_PART, &mut |item| {
                        part.push_back(item.key.to_vec())
                    });
                }
                Ok(part.drain(..max.min(part.len())).collect())
            }
            KeyIterator::Rows { table, from } => {
                let tables = ctx.shared.store.tables().ok_or(())?;
                let mut keys = Vec::new();
                let start = from.as_ref().map(Vec::as_slice);
                let mut walk = |key: &[u8], _| {
                    keys.push(key.to_vec());
                    keys.len() < max
                };
                (tables.walk_rows(table, None, start, false, &mut walk)).map_err(|_| ())?;
                if let Some(last) = keys.last() {
                    *from = Bound::Excluded(last.clone());
                }
                Ok(keys)
            }
        }
    }
}

fn start_iterator(ctx: &Context<'_>, iterator: KeyIterator) {
    *ctx.shared.tyrant_iterator.lock() = Some(iterator);
}

fn next_key(ctx: &Context<'_>) -> Option<Vec<u8>> {
    ctx.shared.tyrant_iterator.lock().as_mut()?.next(ctx).ok()?
}

/// Removes every record (`rnum` falls to 0, as ttserver's does), walking
/// the keys as `iternext` does; false if the storage refused.
fn vanish(db: &dyn KeyValues, ctx: &Context<'_>) -> bool {
    remove_each(db.iterator(), ctx, |key| db.out(key))
}

/// Removes each key `keys` gives, reading them a part at a time (a table
/// applies the writes taken before each read); false if one could not be
/// read or removed.
fn remove_each(
    mut keys: KeyIterator,
    ctx: &Context<'_>,
    remove: impl Fn(&[u8]) -> RowOutcome,
) -> bool {
    loop {
        match keys.take(ctx, KEYS_PART) {
            Ok(part) if part.is_empty() => return true,
            Ok(part) => {
                if part.iter().any(|key| remove(key) == RowOutcome::Failed) {
                    return false;
                }
            }
            Err(()) => return false,
        }
    }
}

/// The values `get` finds for `keys`, in order, or `None` once together
/// they pass `limit` (`--max-reply`: the reply would hold too much).
fn found_within<'k>(
    keys: &[&'k [u8]],
    limit: usize,
    mut get: impl FnMut(&[u8]) -> Option<Vec<u8>>,
) -> Option<Vec<(&'k [u8], Vec<u8>)>> {
    let mut found = Vec::new();
    let mut budget = ReplyLimit::new(limit);
    for &key in keys {
        if let Some(value) = get(key) {
            if !budget.take(key.len() + value.len()) {
                return None;
            }
            found.push((key, value));
        }
    }
    Some(found)
}

/// A `getlist`'s answer: each key found, then its value.
fn key_value_list(found: Vec<(&[u8], Vec<u8>)>) -> Vec<Vec<u8>> {
    found
        .into_iter()
        .flat_map(|(key, value)| [key.to_vec(), value])
        .collect()
}

fn misc(
    db: &dyn KeyValues,
    name: &[u8],
    args: &[&[u8]],
    ctx: &Context<'_>,
) -> Option<Vec<Vec<u8>>> {
    let mode = match name {
        b"put" => Some(PutMode::Put),
        b"putkeep" => Some(PutMode::Keep),
        b"putcat" => Some(PutMode::Cat),
        _ => None,
    };
    if let Some(mode) = mode {
        let [key, value, ..] = args else { return None };
        return (db.put(mode, key, value) == RowOutcome::Done).then(Vec::new);
    }
    match name {
        b"out" => (db.out(args.first()?) == RowOutcome::Done).then(Vec::new),
        b"get" => db.get(args.first()?).map(|value| vec![value]),
        b"putlist" => args
            .chunks_exact(2)
            .all(|pair| db.put(PutMode::Put, pair[0], pair[1]) == RowOutcome::Done)
            .then(Vec::new),
        // As Tokyo Cabinet's: a key with no record is no failure, a refused
        // removal is.
        b"outlist" => args
            .iter()
            .all(|key| db.out(key) != RowOutcome::Failed)
            .then(Vec::new),
        b"getlist" => {
            let found = found_within(args, ctx.shared.config.max_reply_bytes, |key| db.get(key))?;
            Some(key_value_list(found))
        }
        // `[begin [max [end]]]`, as tcadbmisc reads them.
        b"range" => {
            let begin = args.first().copied().unwrap_or_default();
            // `tcatoi`: "5x" is 5, "x" is 0; below 1 is no limit.
            let max = args
                .get(1)
                .map(|max| kura_proto::number::c_atoll(max))
                .filter(|&max| max >= 1)
                .and_then(|max| usize::try_from(max).ok());
            let end = args.get(2).copied();
            db.range(begin, end, max, ctx.shared.config.max_reply_bytes)
        }
        b"sync" => ctx.shared.store.sync().then(Vec::new),
        b"optimize" => Some(Vec::new()),
        b"vanish" => vanish(db, ctx).then(Vec::new),
        _ => None,
    }
}

/// `stat`'s lines, as ttserver's begin (`type`: `hash`, `B+ tree` or `table`).
/// A replica adds its master (`mhost`, `mport`), the time of the newest
/// entry it holds from it (`rts`, µs) and how far behind that is (`delay`,
/// seconds; 0 when it holds all the master has), as ttserver does.
fn stat_lines(ctx: &Context<'_>, kind: &str, rnum: u64, size: u64) -> Vec<(&'static str, String)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let mut lines = base_stat_lines(now, kind, rnum, size);
    if let Some(replication) = ctx.shared.store.replication() {
        lines.push(("sid", replication.server_id().to_string()));
    }
    if let Some(master) = ctx.shared.replication.master() {
        let (host, port) = master.host_and_port();
        let (_, taken_micros) = master.taken();
        let lag = master.lag();
        let delay = match lag.entries {
            0 => 0.0,
            _ => (now - taken_micros as f64 / 1e6).max(0.0),
        };
        lines.push(("mhost", host.to_string()));
        lines.push(("mport", port.to_string()));
        lines.push(("rts", taken_micros.to_string()));
        lines.push(("delay", format!("{delay:.6}")));
    }
    lines
}

fn base_stat_lines(now: f64, kind: &str, rnum: u64, size: u64) -> Vec<(&'static str, String)> {
    vec![
        ("version", TYRANT_VERSION.to_string()),
        ("protver", "0.91".to_string()),
        ("os", "Linux".to_string()),
        ("time", format!("{now:.6}")),
        ("pid", std::process::id().to_string()),
        ("type", kind.to_string()),
        ("rnum", rnum.to_string()),
        ("size", size.to_string()),
        ("bigend", "0".to_string()),
        ("kura_version", env!("CARGO_PKG_VERSION").to_string()),
    ]
}
