//! The meta commands `mg ms md ma mn me`.
//!
//! Reply codes: `VA` (value follows), `HD` (done), `EN` (miss), `NF` (not
//! found), `NS` (not stored), `EX` (CAS mismatch), `MN`, `ME`. Requested
//! return flags follow in request order; `q` hides the ordinary answer.

use kura_proto::meta::{MetaCommand, MetaFlags, MetaKey, MetaRequest, SetMode};
use kura_proto::reply::{push_i64, push_u64};
use kura_proto::ErrorReply;
use kura_store::{
    ArithCommand, ArithOutcome, DeleteCommand, DeleteOutcome, GetOptions, GetOutcome, ItemView,
    Recache, StoreCommand, StoreMode, StoreOutcome,
};

use super::{watch_lines, Context};

pub fn execute(request: MetaRequest<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    match request {
        MetaRequest::Get(command) => get(&command, ctx, out),
        MetaRequest::Set { command, data } => set(&command, data, ctx, out),
        MetaRequest::Delete(command) => delete(&command, ctx, out),
        MetaRequest::Arith(command) => arith(&command, ctx, out),
        MetaRequest::Noop => out.extend_from_slice(b"MN\r\n"),
        // memcached counts `me` alone in `cmd_meta`; the others count as
        // the classic commands they are.
        MetaRequest::Debug { key } => {
            ctx.counters.cmd_meta.incr();
            debug(&key, ctx, out)
        }
    }
}

fn get(command: &MetaCommand<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let flags = &command.flags;
    let clock = ctx.shared.store.clock();
    let options = GetOptions {
        touch: flags.ttl.map(|t| clock.expiry(t)),
        no_bump: flags.no_bump,
        vivify: flags.vivify.map(|t| clock.expiry(t)),
        // An exptime as any other (over 30 days: a Unix time), as seconds
        // left; 0 asks nothing.
        recache: Recache::Meta {
            below: (flags.recache)
                .filter(|&r| r != 0)
                .map(|r| clock.ttl(clock.expiry(r))),
        },
    };
    let mut found = None;
    let outcome = ctx
        .shared
        .store
        .get(&command.key.bytes, &options, &ctx.fence, &mut |item| {
            found = Some(item.value.len());
            compose_hit(command, item, ctx, out);
        });
    // A miss is a get miss, with `T` or not: memcached counts a touch only
    // for an item it found.
    ctx.count_read(
        outcome,
        options.touch.is_some() && outcome != GetOutcome::Miss,
    );
    watch_lines::fetched(ctx, &command.key.bytes, found);
    match outcome {
        GetOutcome::Hit => {}
        GetOutcome::Miss if flags.quiet => {}
        GetOutcome::Miss => compose_status(b"EN", command, None, ctx, out),
        // A touch, vivify or recache win the storage could not write.
        GetOutcome::Failed => out.extend_from_slice(ctx.write_failed_line()),
    }
}

fn compose_hit(
    command: &MetaCommand<'_>,
    item: &ItemView<'_>,
    ctx: &Context<'_>,
    out: &mut Vec<u8>,
) {
    let flags = &command.flags;
    if flags.value {
        out.extend_from_slice(b"VA ");
        push_u64(out, item.value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    for flag in flags.returns.iter() {
        out.push(b' ');
        out.push(flag);
        match flag {
            b'c' => push_u64(out, ctx.visible_cas(item.cas)),
            b'f' => push_u64(out, u64::from(item.flags)),
            b'h' => out.push(if item.fetched_before { b'1' } else { b'0' }),
            b'k' => push_key(&command.key, out),
            b'l' => push_u64(out, u64::from(item.idle_seconds)),
            b'O' => out.extend_from_slice(flags.opaque.unwrap_or_default()),
            b's' => push_u64(out, item.value.len() as u64),
            b't' => push_i64(out, item.ttl),
            _ => {}
        }
    }
    if item.win_taken {
        out.extend_from_slice(b" Z");
    }
    if item.stale {
        out.extend_from_slice(b" X");
    }
    if item.won {
        out.extend_from_slice(b" W");
    }
    out.extend_from_slice(b"\r\n");
    if flags.value {
        out.extend_from_slice(item.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// The key as sent; a base64 key is marked with ` b`, as memcached does.
fn push_key(key: &MetaKey<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(key.wire);
    if key.base64 {
        out.extend_from_slice(b" b");
    }
}

/// Appends a reply code and the flags it echoes in request order: `k`, `O`,
/// and `c` when `cas` is given (ms answers `c0` when nothing was stored).
fn compose_status(
    code: &[u8],
    command: &MetaCommand<'_>,
    cas: Option<u64>,
    ctx: &Context<'_>,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(code);
    for flag in command.flags.returns.iter() {
        match flag {
            b'k' => {
                out.extend_from_slice(b" k");
                push_key(&command.key, out);
            }
            b'O' => {
                out.extend_from_slice(b" O");
                out.extend_from_slice(command.flags.opaque.unwrap_or_default());
            }
            b'c' => {
                if let Some(cas) = cas {
                    out.extend_from_slice(b" c");
                    push_u64(out, ctx.visible_cas(cas));
                }
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

fn set(command: &MetaCommand<'_>, data: &[u8], ctx: &Context<'_>, out: &mut Vec<u8>) {
    let flags: &MetaFlags<'_> = &command.flags;
    ctx.counters.cmd_set.incr();
    let mode = match flags.set_mode {
        SetMode::Set => StoreMode::Set,
        SetMode::Add => StoreMode::Add,
        SetMode::Replace => StoreMode::Replace,
        SetMode::Append => StoreMode::Append,
        SetMode::Prepend => StoreMode::Prepend,
    };
    let store = StoreCommand {
        mode,
        key: &command.key.bytes,
        value: data,
        flags: flags.client_flags.unwrap_or(0),
        expiry: ctx.shared.store.clock().expiry(flags.ttl.unwrap_or(0)),
        compare_cas: ctx.store_compare(mode, flags.compare_cas),
        stale_if_older: flags.invalidate,
    };
    let compare_and_set = store.is_compare_and_set();
    watch_lines::looked_up_to_store(ctx, store.key);
    let outcome = ctx.shared.store.store(&store, &ctx.fence);
    let name = watch_lines::command_name(mode, compare_and_set);
    let exptime = flags.ttl.unwrap_or(0);
    watch_lines::stored(ctx, store.key, name, outcome, exptime, data.len());
    match outcome {
        StoreOutcome::Stored { cas } => {
            if compare_and_set {
                ctx.counters.cas_hits.incr();
            }
            if !flags.quiet {
                compose_status(b"HD", command, Some(cas), ctx, out);
            }
        }
        StoreOutcome::NotStored => compose_status(b"NS", command, Some(0), ctx, out),
        StoreOutcome::Exists => {
            if compare_and_set {
                ctx.counters.cas_badval.incr();
            }
            compose_status(b"EX", command, Some(0), ctx, out);
        }
        StoreOutcome::NotFound => {
            ctx.counters.cas_misses.incr();
            compose_status(b"NF", command, Some(0), ctx, out);
        }
        StoreOutcome::OutOfMemory => {
            ctx.counters.store_no_memory.incr();
            // memcached removes the old item whatever the mode.
            ctx.remove_stale(&command.key.bytes);
            ErrorReply::OutOfMemory.compose(out);
        }
        StoreOutcome::Failed => out.extend_from_slice(ctx.write_failed_line()),
    }
}

fn delete(command: &MetaCommand<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let flags = &command.flags;
    let clock = ctx.shared.store.clock();
    let outcome = ctx.shared.store.delete(
        &command.key.bytes,
        &DeleteCommand {
            compare_cas: ctx.compare_token(flags.compare_cas),
            invalidate: flags.invalidate.then(|| flags.ttl.map(|t| clock.expiry(t))),
        },
        &ctx.fence,
    );
    match outcome {
        DeleteOutcome::Deleted => {
            // An invalidation is no delete hit (memcached counts the removal).
            if !flags.invalidate {
                ctx.counters.delete_hits.incr();
            }
            if !flags.quiet {
                compose_status(b"HD", command, None, ctx, out);
            }
        }
        DeleteOutcome::NotFound => {
            ctx.counters.delete_misses.incr();
            compose_status(b"NF", command, None, ctx, out);
        }
        DeleteOutcome::Exists => {
            ctx.counters.delete_misses.incr();
            compose_status(b"EX", command, None, ctx, out)
        }
        DeleteOutcome::Failed => out.extend_from_slice(ctx.write_failed_line()),
    }
}

fn arith(command: &MetaCommand<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let flags = &command.flags;
    let clock = ctx.shared.store.clock();
    let outcome = ctx.shared.store.arith(
        &command.key.bytes,
        &ArithCommand {
            decrement: flags.decrement,
            delta: flags.delta.unwrap_or(1),
            // As memcached's incr/decr: a CAS of 0 is no comparison.
            compare_cas: ctx.compare_token(flags.compare_cas.filter(|&cas| cas != 0)),
            vivify: flags
                .vivify
                .map(|t| (flags.initial.unwrap_or(0), clock.expiry(t))),
            touch: flags.ttl.map(|t| clock.expiry(t)),
        },
        &ctx.fence,
    );
    let (hits, misses) = if flags.decrement {
        (&ctx.counters.decr_hits, &ctx.counters.decr_misses)
    } else {
        (&ctx.counters.incr_hits, &ctx.counters.incr_misses)
    };
    match outcome {
        ArithOutcome::Value {
            value,
            cas,
            ttl,
            created,
        } => {
            // memcached counts a counter it creates neither a hit nor a miss.
            if !created {
                hits.incr();
            }
            // memcached answers a vivified counter even under `q`.
            if flags.quiet && !created {
                return;
            }
            let mut digits = Vec::with_capacity(20);
            push_u64(&mut digits, value);
            if flags.value {
                out.extend_from_slice(b"VA ");
                push_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            // ma returns these only; others it takes are ignored.
            for flag in flags.returns.iter().filter(|flag| b"ctkO".contains(flag)) {
                out.push(b' ');
                out.push(flag);
                match flag {
                    b'c' => push_u64(out, ctx.visible_cas(cas)),
                    b't' => push_i64(out, ttl),
                    b'k' => push_key(&command.key, out),
                    _ => out.extend_from_slice(flags.opaque.unwrap_or_default()),
                }
            }
            out.extend_from_slice(b"\r\n");
            if flags.value {
                out.extend_from_slice(&digits);
                out.extend_from_slice(b"\r\n");
            }
        }
        ArithOutcome::NotFound => {
            misses.incr();
            compose_status(b"NF", command, None, ctx, out);
        }
        ArithOutcome::Exists => compose_status(b"EX", command, None, ctx, out),
        ArithOutcome::NonNumeric => ErrorReply::NonNumeric.compose(out),
        ArithOutcome::OutOfMemory => ErrorReply::OutOfMemory.compose(out),
        ArithOutcome::Failed => out.extend_from_slice(ctx.write_failed_line()),
    }
}

fn debug(key: &MetaKey<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let Some(item) = ctx.shared.store.debug(&key.bytes, &ctx.fence) else {
        out.extend_from_slice(b"EN\r\n");
        return;
    };
    out.extend_from_slice(b"ME ");
    out.extend_from_slice(key.wire);
    out.extend_from_slice(b" exp=");
    push_i64(out, item.ttl);
    out.extend_from_slice(b" la=");
    push_u64(out, u64::from(item.idle_seconds));
    out.extend_from_slice(b" cas=");
    push_u64(out, ctx.visible_cas(item.cas));
    out.extend_from_slice(if item.fetched {
        b" fetch=yes"
    } else {
        b" fetch=no"
    });
    out.extend_from_slice(b" cls=");
    push_u64(out, item.class as u64);
    out.extend_from_slice(b" size=");
    push_u64(out, item.size as u64);
    out.extend_from_slice(b"\r\n");
}
