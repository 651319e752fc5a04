//! The lines retrieval and storage commands give log watchers (`watch
//! fetchers`, `watch mutations`), whichever protocol carried them (text,
//! meta or binary): memcached logs them in its item functions, which every
//! protocol goes through.

use kura_store::{AckFence, StoreMode, StoreOutcome};

use super::Context;
use crate::watch::kind;

/// `type=item_get` for a lookup of `key` that found a value of `found`
/// bytes (`None`: nothing).
pub fn fetched(ctx: &Context<'_>, key: &[u8], found: Option<usize>) {
    let watchers = &ctx.shared.watchers;
    if !watchers.wants(kind::FETCHERS) {
        return;
    }
    // For a log line, not a reply: nothing waits on the fence.
    let class = found
        .and_then(|_| ctx.shared.store.debug(key, &AckFence::default()))
        .map_or(0, |item| item.class);
    watchers.item_get(key, found.is_some(), class, ctx.conn_id, found.unwrap_or(0));
}

/// memcached looks a key up before it stores it, and logs that lookup. It
/// is made without bumping or counting the item.
pub fn looked_up_to_store(ctx: &Context<'_>, key: &[u8]) {
    let watchers = &ctx.shared.watchers;
    if !watchers.wants(kind::FETCHERS) {
        return;
    }
    let found = ctx.shared.store.debug(key, &AckFence::default());
    watchers.item_get(
        key,
        found.is_some(),
        found.as_ref().map_or(0, |item| item.class),
        ctx.conn_id,
        found.map_or(0, |item| item.value_len),
    );
}

/// What a storage command was, as memcached names it in `cmd=`.
pub fn command_name(mode: StoreMode, compare_and_set: bool) -> &'static str {
    match mode {
        _ if compare_and_set => "cas",
        StoreMode::Set => "set",
        StoreMode::Add => "add",
        StoreMode::Replace => "replace",
        StoreMode::Append => "append",
        StoreMode::Prepend => "prepend",
    }
}

/// `type=item_store`: a storage command's outcome. `exptime` as the client
/// gave it; `size` the value's length.
pub fn stored(
    ctx: &Context<'_>,
    key: &[u8],
    command: &str,
    outcome: StoreOutcome,
    exptime: i64,
    size: usize,
) {
    let watchers = &ctx.shared.watchers;
    if !watchers.wants(kind::MUTATIONS) {
        return;
    }
    let status = match outcome {
        StoreOutcome::Stored { .. } => "stored",
        StoreOutcome::NotStored | StoreOutcome::Failed => "not_stored",
        StoreOutcome::Exists => "exists",
        StoreOutcome::NotFound => "not_found",
        StoreOutcome::OutOfMemory => "no_memory",
    };
    let clock = ctx.shared.store.clock();
    let expiry = clock.expiry(exptime);
    let ttl = match expiry {
        0 => 0,
        _ => kura_store::clock::ttl_at(expiry, clock.now()),
    };
    let class = ctx
        .shared
        .store
        .debug(key, &AckFence::default())
        .map_or(0, |item| item.class);
    watchers.item_store(key, status, command, ttl, class, ctx.conn_id, size);
}
