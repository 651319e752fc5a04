//! Tokyo Tyrant's binary commands against the store, as ttserver serves a
//! hash database: the records are the memcached keyspace's items (flags 0,
//! no expiry), so both protocols see the same data, as on ttserver's port.
//!
//! Where kura differs from ttserver: a key must be 1 to 250 bytes and a
//! value at most the item size limit (`-I`), else the command fails (status
//! 1); `iterinit` takes a sorted snapshot of the keys, which `iternext` walks
//! (ttserver walks the hash file and sees later writes); `ext` (Lua),
//! `restore`, `setmst` and `repl` answer failure.

use std::os::unix::ffi::OsStrExt;

use kura_proto::tyrant::{reply, PutMode, Request};
use kura_proto::MAX_KEY_LEN;
use kura_store::{DeleteCommand, DeleteOutcome, GetOptions, StoreCommand, StoreMode, StoreOutcome};

use super::{Action, Context};
use crate::config::TyrantDatabase;

/// Read-modify-write commands retry this often when another write of the
/// key comes between their read and their write.
const CAS_RETRIES: usize = 16;

/// The protocol release kura answers `stat` with (clients check `type`).
const TYRANT_VERSION: &str = "1.1.41";

pub fn execute(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    if let TyrantDatabase::Table(table) = &ctx.shared.config.tyrant_db {
        return super::tyrant_table::execute(table.as_bytes(), request, ctx, out);
    }
    match request {
        Request::Put { mode, key, value } => {
            let stored = put(ctx, *mode, key, value);
            if *mode != PutMode::NoReply {
                reply::status(out, stored);
            }
        }
        Request::PutShl { key, value, width } => {
            let width = *width as usize;
            let stored = read_modify_write(ctx, key, |old| match old {
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
        Request::Out { key } => reply::status(out, delete(ctx, key)),
        Request::Get { key } => match get(ctx, key) {
            Some(value) => reply::bytes(out, &value),
            None => reply::status(out, false),
        },
        Request::Mget { keys } => {
            let found: Vec<(&[u8], Vec<u8>)> = keys
                .iter()
                .filter_map(|key| Some((*key, get(ctx, key)?)))
                .collect();
            reply::records(out, found.iter().map(|(k, v)| (*k, &v[..])));
        }
        Request::Vsiz { key } => match get(ctx, key) {
            Some(value) => reply::value_size(out, value.len() as u32),
            None => reply::status(out, false),
        },
        Request::IterInit => {
            *ctx.shared.tyrant_iterator.lock() = Some(sorted_keys(ctx, b"").into_iter());
            reply::status(out, true);
        }
        Request::IterNext => {
            let next = ctx
                .shared
                .tyrant_iterator
                .lock()
                .as_mut()
                .and_then(|keys| keys.next());
            match next {
                Some(key) => reply::bytes(out, &key),
                None => reply::status(out, false),
            }
        }
        Request::Fwmkeys { prefix, max } => {
            let mut keys = sorted_keys(ctx, prefix);
            if let Ok(max) = usize::try_from(*max) {
                keys.truncate(max);
            }
            reply::list(out, true, keys.iter().map(|key| &key[..]));
        }
        Request::AddInt { key, delta } => {
            let mut sum = 0;
            let stored = read_modify_write(ctx, key, |old| {
                let old = match old {
                    None => 0,
                    // A native int, as Tokyo Cabinet stores it (x86: little-endian).
                    Some(old) => i32::from_le_bytes(old.try_into().ok()?),
                };
                sum = old.wrapping_add(*delta);
                Some(sum.to_le_bytes().to_vec())
            });
            match stored {
                Some(_) => reply::int(out, sum),
                None => reply::status(out, false),
            }
        }
        Request::AddDouble { key, delta } => {
            let mut sum = 0.0;
            let stored = read_modify_write(ctx, key, |old| {
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
        Request::Sync | Request::Optimize { .. } => reply::status(out, true),
        Request::Vanish => {
            vanish(ctx);
            reply::status(out, true);
        }
        Request::Copy { path } => {
            let to = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
            reply::status(out, ctx.shared.store.backup(to, None).is_ok());
        }
        Request::Rnum => reply::count(out, ctx.shared.store.stats().curr_items),
        Request::Size => reply::count(out, ctx.shared.store.stats().bytes),
        Request::Stat => {
            let stats = ctx.shared.store.stats();
            reply::stat(out, stat_lines("hash", stats.curr_items, stats.bytes))
        }
        Request::Misc { name, args, .. } => misc(ctx, name, args, out),
        Request::Ext { .. }
        | Request::Restore { .. }
        | Request::SetMaster { .. }
        | Request::Repl { .. } => reply::status(out, false),
    }
    Action::Continue
}

fn valid_key(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

fn get(ctx: &Context<'_>, key: &[u8]) -> Option<Vec<u8>> {
    if !valid_key(key) {
        return None;
    }
    let mut found = None;
    ctx.shared
        .store
        .get(key, &GetOptions::default(), &ctx.fence, &mut |item| {
            found = Some(item.value.to_vec())
        });
    found
}

fn store(
    ctx: &Context<'_>,
    mode: StoreMode,
    key: &[u8],
    value: &[u8],
    cas: Option<u64>,
) -> StoreOutcome {
    if !valid_key(key) || value.len() > ctx.shared.config.max_item_size {
        return StoreOutcome::NotStored;
    }
    ctx.shared.store.store(
        &StoreCommand {
            mode,
            key,
            value,
            flags: 0,
            expiry: ctx.shared.store.clock().expiry(0),
            compare_cas: cas,
            stale_if_older: false,
        },
        &ctx.fence,
    )
}

fn stored(outcome: StoreOutcome) -> bool {
    matches!(outcome, StoreOutcome::Stored { .. })
}

fn put(ctx: &Context<'_>, mode: PutMode, key: &[u8], value: &[u8]) -> bool {
    match mode {
        PutMode::Put | PutMode::NoReply => stored(store(ctx, StoreMode::Set, key, value, None)),
        PutMode::Keep => stored(store(ctx, StoreMode::Add, key, value, None)),
        // Append, or create: memcached's append alone fails on a missing key.
        PutMode::Cat => (0..CAS_RETRIES).any(|_| {
            stored(store(ctx, StoreMode::Append, key, value, None))
                || stored(store(ctx, StoreMode::Add, key, value, None))
        }),
    }
}

/// Replaces the key's value by `change(old value)` (`None` when there is
/// none), retrying when another write comes between; `change` answering
/// `None` fails the command. Returns the value written.
fn read_modify_write(
    ctx: &Context<'_>,
    key: &[u8],
    mut change: impl FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    if !valid_key(key) {
        return None;
    }
    for _ in 0..CAS_RETRIES {
        let mut old: Option<(Vec<u8>, u64)> = None;
        ctx.shared
            .store
            .get(key, &GetOptions::default(), &ctx.fence, &mut |item| {
                old = Some((item.value.to_vec(), item.cas))
            });
        let new = change(old.as_ref().map(|(value, _)| &value[..]))?;
        if new.len() > ctx.shared.config.max_item_size {
            return None;
        }
        let outcome = match &old {
            Some((_, cas)) => store(ctx, StoreMode::Set, key, &new, Some(*cas)),
            None => store(ctx, StoreMode::Add, key, &new, None),
        };
        match outcome {
            StoreOutcome::Stored { .. } => return Some(new),
            // Changed, removed or created meanwhile: read again.
            StoreOutcome::Exists | StoreOutcome::NotFound | StoreOutcome::NotStored => {}
            StoreOutcome::OutOfMemory | StoreOutcome::Failed => return None,
        }
    }
    None
}

/// The live keys starting with `prefix`, in byte order.
fn sorted_keys(ctx: &Context<'_>, prefix: &[u8]) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    ctx.shared.store.scan(&mut |item| {
        if item.key.starts_with(prefix) {
            keys.push(item.key.to_vec());
        }
    });
    keys.sort_unstable();
    keys
}

/// Removes every record. memcached's `flush_all` would only hide them
/// (`rnum` must fall to 0, as ttserver's does).
fn vanish(ctx: &Context<'_>) {
    for key in sorted_keys(ctx, b"") {
        delete(ctx, &key);
    }
}

fn delete(ctx: &Context<'_>, key: &[u8]) -> bool {
    valid_key(key)
        && ctx
            .shared
            .store
            .delete(key, &DeleteCommand::default(), &ctx.fence)
            == DeleteOutcome::Deleted
}

fn misc(ctx: &Context<'_>, name: &[u8], args: &[&[u8]], out: &mut Vec<u8>) {
    let result: Option<Vec<Vec<u8>>> = match name {
        b"put" | b"putkeep" | b"putcat" => match args {
            [key, value, ..] => {
                let mode = match name {
                    b"put" => PutMode::Put,
                    b"putkeep" => PutMode::Keep,
                    _ => PutMode::Cat,
                };
                put(ctx, mode, key, value).then(Vec::new)
            }
            _ => None,
        },
        b"out" => match args {
            [key, ..] => delete(ctx, key).then(Vec::new),
            _ => None,
        },
        b"get" => match args {
            [key, ..] => get(ctx, key).map(|value| vec![value]),
            _ => None,
        },
        b"putlist" => args
            .chunks_exact(2)
            .all(|pair| put(ctx, PutMode::Put, pair[0], pair[1]))
            .then(Vec::new),
        b"outlist" => {
            for key in args {
                delete(ctx, key);
            }
            Some(Vec::new())
        }
        b"getlist" => Some(
            args.iter()
                .filter_map(|key| Some([key.to_vec(), get(ctx, key)?]))
                .flatten()
                .collect(),
        ),
        b"sync" | b"optimize" => Some(Vec::new()),
        b"vanish" => {
            vanish(ctx);
            Some(Vec::new())
        }
        _ => None,
    };
    // An unknown function, too few arguments or a failure: status 1 and
    // no elements, as ttserver answers.
    let ok = result.is_some();
    let items = result.unwrap_or_default();
    reply::list(out, ok, items.iter().map(|item| &item[..]));
}

/// `stat`'s lines, as ttserver's begin (`type`: `hash` or `table`).
pub(super) fn stat_lines(kind: &str, rnum: u64, size: u64) -> Vec<(&'static str, String)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
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
