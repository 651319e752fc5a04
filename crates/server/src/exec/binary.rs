//! The binary protocol's commands. Quiet variants (`…Q`) send nothing on
//! success (getq: nothing on a miss); errors are always sent. The parser
//! has checked each request's lengths against its opcode (`well_framed`).

use kura_proto::binary::{
    compose, compose_error, compose_header, opcode as op, Header, Request, Status,
};
use kura_store::{
    ArithCommand, ArithOutcome, DeleteCommand, DeleteOutcome, FlushOutcome, GetOptions, GetOutcome,
    StoreCommand, StoreMode, StoreOutcome,
};

use super::{stats, watch_lines, Action, Context, PROTOCOL_VERSION};

/// An incr/decr whose expiration is this must not create a missing counter.
const NO_AUTO_CREATE: u32 = 0xffff_ffff;

pub fn execute(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    let code = request.header.opcode;
    let opaque = request.header.opaque;
    let result = match code {
        op::GET | op::GETQ | op::GETK | op::GETKQ => get(request, None, ctx, out),
        op::GAT | op::GATQ | op::GATK | op::GATKQ | op::TOUCH => {
            get(request, Some(be_u32(request.extras).unwrap_or(0)), ctx, out)
        }
        code if is_store(code) => store(request, ctx, out),
        op::DELETE | op::DELETEQ => delete(request, ctx, out),
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => arith(request, ctx, out),
        op::QUIT => {
            compose(out, code, Status::NoError, opaque, 0, &[], &[], &[]);
            return Action::Close;
        }
        op::QUITQ => return Action::Close,
        op::FLUSH | op::FLUSHQ => flush(request, ctx, out),
        op::NOOP => no_body(request, ctx, out),
        op::VERSION => {
            compose(
                out,
                code,
                Status::NoError,
                opaque,
                0,
                &[],
                &[],
                PROTOCOL_VERSION.as_bytes(),
            );
            Ok(())
        }
        op::VERBOSITY => match request.extras.len() {
            4 => no_body(request, ctx, out),
            _ => Err(Status::InvalidArguments),
        },
        op::STAT => stat(request, ctx, out),
        _ => Err(Status::UnknownCommand),
    };
    if let Err(status) = result {
        compose_error(out, code, status, opaque);
    }
    Action::Continue
}

fn is_quiet(code: u8) -> bool {
    matches!(
        code,
        op::GETQ
            | op::GETKQ
            | op::SETQ
            | op::ADDQ
            | op::REPLACEQ
            | op::DELETEQ
            | op::INCREMENTQ
            | op::DECREMENTQ
            | op::QUITQ
            | op::FLUSHQ
            | op::APPENDQ
            | op::PREPENDQ
            | op::GATQ
            | op::GATKQ
    )
}

fn be_u32(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?))
}

fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

/// A success with no body (unless quiet).
fn no_body(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Result<(), Status> {
    success(request, 0, ctx, out);
    Ok(())
}

fn success(request: &Request<'_>, cas: u64, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let code = request.header.opcode;
    if !is_quiet(code) {
        compose(
            out,
            code,
            Status::NoError,
            request.header.opaque,
            ctx.visible_cas(cas),
            &[],
            &[],
            &[],
        );
    }
}

/// get/getq/getk/getkq, gat variants and touch.
fn get(
    request: &Request<'_>,
    touch: Option<u32>,
    ctx: &Context<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Status> {
    let code = request.header.opcode;
    let with_key = matches!(code, op::GETK | op::GETKQ | op::GATK | op::GATKQ);
    let with_value = code != op::TOUCH;
    let options = GetOptions {
        touch: touch.map(|exptime| ctx.shared.store.clock().expiry(i64::from(exptime))),
        ..GetOptions::default()
    };
    let mut found = None;
    let outcome = ctx
        .shared
        .store
        .get(request.key, &options, &ctx.fence, &mut |item| {
            found = Some(item.value.len());
            let key: &[u8] = if with_key { request.key } else { &[] };
            let value: &[u8] = if with_value { item.value } else { &[] };
            compose(
                out,
                code,
                Status::NoError,
                request.header.opaque,
                ctx.visible_cas(item.cas),
                &item.flags.to_be_bytes(),
                key,
                value,
            );
        });
    let hit = outcome.is_hit();
    ctx.detail(request.key, |counts| {
        counts.gets += 1;
        counts.hits += u64::from(hit);
    });
    ctx.count_read(outcome, touch.is_some());
    watch_lines::fetched(ctx, request.key, found);
    if outcome == GetOutcome::Failed {
        // The touch (or gat) could not be written: memcached's answer to a
        // failed storage write.
        return Err(Status::InternalError);
    }
    if hit {
        return Ok(());
    }
    if is_quiet(code) {
        return Ok(());
    }
    if with_key {
        // getk answers a miss with the key instead of a message.
        compose(
            out,
            code,
            Status::KeyNotFound,
            request.header.opaque,
            0,
            &[],
            request.key,
            &[],
        );
        return Ok(());
    }
    Err(Status::KeyNotFound)
}

/// A request whose value is over `-I` (the session swallows the value).
/// As memcached does, a refused set also removes the key's item: a client
/// whose write failed must not go on reading the value it meant to replace.
pub fn too_large(header: &Header, key: &[u8], ctx: &Context<'_>, out: &mut Vec<u8>) {
    ctx.counters.store_too_large.incr();
    if is_store(header.opcode) {
        // memcached counts the prefix's set before it tries the item.
        ctx.detail(key, |counts| counts.sets += 1);
    }
    if matches!(header.opcode, op::SET | op::SETQ) {
        ctx.remove_stale(key);
    }
    compose_error(out, header.opcode, Status::ValueTooLarge, header.opaque);
}

/// Set, add, replace, append and prepend, quiet or not.
fn is_store(code: u8) -> bool {
    matches!(
        code,
        op::SET
            | op::SETQ
            | op::ADD
            | op::ADDQ
            | op::REPLACE
            | op::REPLACEQ
            | op::APPEND
            | op::APPENDQ
            | op::PREPEND
            | op::PREPENDQ
    )
}

fn store(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Result<(), Status> {
    let code = request.header.opcode;
    let (mode, wants_extras) = match code {
        op::SET | op::SETQ => (StoreMode::Set, true),
        op::ADD | op::ADDQ => (StoreMode::Add, true),
        op::REPLACE | op::REPLACEQ => (StoreMode::Replace, true),
        op::APPEND | op::APPENDQ => (StoreMode::Append, false),
        _ => (StoreMode::Prepend, false),
    };
    let (flags, exptime) = if wants_extras {
        (
            be_u32(request.extras).unwrap_or(0),
            be_u32(request.extras.get(4..).unwrap_or_default()).unwrap_or(0),
        )
    } else {
        (0, 0)
    };
    ctx.counters.cmd_set.incr();
    ctx.detail(request.key, |counts| counts.sets += 1);
    // Under `-C` the stored item has no room for a CAS: memcached's store
    // compares nothing.
    let cas = ctx.visible_cas(request.header.cas);
    // As memcached does, any store with a CAS is a compare-and-set: an
    // add or replace with one stores only over the item of that CAS.
    let mode = match mode {
        StoreMode::Add | StoreMode::Replace if cas != 0 => StoreMode::Set,
        mode => mode,
    };
    let command = StoreCommand {
        mode,
        key: request.key,
        value: request.value,
        flags,
        expiry: ctx.shared.store.clock().expiry(i64::from(exptime)),
        compare_cas: (cas != 0).then_some(cas),
        stale_if_older: false,
    };
    let compare_and_set = command.is_compare_and_set();
    watch_lines::looked_up_to_store(ctx, request.key);
    let outcome = ctx.shared.store.store(&command, &ctx.fence);
    let name = watch_lines::command_name(mode, compare_and_set);
    let exptime = i64::from(exptime);
    watch_lines::stored(
        ctx,
        request.key,
        name,
        outcome,
        exptime,
        request.value.len(),
    );
    match outcome {
        StoreOutcome::Stored { cas: new_cas } => {
            if compare_and_set {
                ctx.counters.cas_hits.incr();
            }
            success(request, new_cas, ctx, out);
            Ok(())
        }
        StoreOutcome::Exists => {
            if compare_and_set {
                ctx.counters.cas_badval.incr();
            }
            Err(Status::KeyExists)
        }
        StoreOutcome::NotFound => {
            ctx.counters.cas_misses.incr();
            Err(Status::KeyNotFound)
        }
        // memcached's mapping of "not stored" per command.
        StoreOutcome::NotStored => Err(match mode {
            StoreMode::Add => Status::KeyExists,
            StoreMode::Replace => Status::KeyNotFound,
            _ => Status::ItemNotStored,
        }),
        StoreOutcome::OutOfMemory => {
            ctx.counters.store_no_memory.incr();
            Err(Status::OutOfMemory)
        }
        StoreOutcome::Failed => Err(Status::InternalError),
    }
}

fn delete(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Result<(), Status> {
    ctx.detail(request.key, |counts| counts.deletes += 1);
    let cas = request.header.cas;
    let outcome = ctx.shared.store.delete(
        request.key,
        &DeleteCommand {
            compare_cas: ctx.compare_token((cas != 0).then_some(cas)),
            invalidate: None,
        },
        &ctx.fence,
    );
    match outcome {
        DeleteOutcome::Deleted => {
            ctx.counters.delete_hits.incr();
            success(request, 0, ctx, out);
            Ok(())
        }
        DeleteOutcome::NotFound => {
            ctx.counters.delete_misses.incr();
            Err(Status::KeyNotFound)
        }
        DeleteOutcome::Exists => Err(Status::KeyExists),
        DeleteOutcome::Failed => Err(Status::InternalError),
    }
}

fn arith(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Result<(), Status> {
    let code = request.header.opcode;
    let delta = be_u64(request.extras).unwrap_or(0);
    let initial = be_u64(request.extras.get(8..).unwrap_or_default()).unwrap_or(0);
    let exptime = be_u32(request.extras.get(16..).unwrap_or_default()).unwrap_or(0);
    let decrement = matches!(code, op::DECREMENT | op::DECREMENTQ);
    let cas = request.header.cas;
    let clock = ctx.shared.store.clock();
    let outcome = ctx.shared.store.arith(
        request.key,
        &ArithCommand {
            decrement,
            delta,
            compare_cas: ctx.compare_token((cas != 0).then_some(cas)),
            vivify: (exptime != NO_AUTO_CREATE)
                .then(|| (initial, clock.expiry(i64::from(exptime)))),
            touch: None,
        },
        &ctx.fence,
    );
    let (hits, misses) = if decrement {
        (&ctx.counters.decr_hits, &ctx.counters.decr_misses)
    } else {
        (&ctx.counters.incr_hits, &ctx.counters.incr_misses)
    };
    match outcome {
        ArithOutcome::Value {
            value,
            cas,
            created,
            ..
        } => {
            // memcached counts a counter it creates neither a hit nor a miss.
            if !created {
                hits.incr();
            }
            if !is_quiet(code) {
                compose_header(
                    out,
                    code,
                    Status::NoError,
                    request.header.opaque,
                    ctx.visible_cas(cas),
                    0,
                    0,
                    8,
                );
                out.extend_from_slice(&value.to_be_bytes());
            }
            Ok(())
        }
        ArithOutcome::NotFound => {
            misses.incr();
            Err(Status::KeyNotFound)
        }
        ArithOutcome::Exists => Err(Status::KeyExists),
        ArithOutcome::NonNumeric => Err(Status::NonNumeric),
        ArithOutcome::OutOfMemory => Err(Status::OutOfMemory),
        ArithOutcome::Failed => Err(Status::InternalError),
    }
}

fn flush(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Result<(), Status> {
    let delay = be_u32(request.extras).unwrap_or(0);
    if !ctx.shared.config.flush_enabled {
        // memcached's answer to a flush it does not allow (`-F`).
        return Err(Status::AuthError);
    }
    ctx.counters.cmd_flush.incr();
    if ctx.read_only() {
        return Err(Status::InternalError);
    }
    if ctx.shared.store.flush_all(i64::from(delay), &ctx.fence) == FlushOutcome::Failed {
        return Err(Status::InternalError);
    }
    success(request, 0, ctx, out);
    Ok(())
}

/// `stat [group]`: one response per figure, then an empty one.
fn stat(request: &Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Result<(), Status> {
    let (code, opaque) = (request.header.opcode, request.header.opaque);
    // memcached matches these by prefix: "detail on" or "detail onward".
    if let Some(sub) = request.key.strip_prefix(b"detail") {
        if sub.starts_with(b" dump") {
            // The whole dump is the value of one figure named "detailed".
            let mut dump = Vec::new();
            stats::detail_dump(ctx, &mut dump);
            compose(
                out,
                code,
                Status::NoError,
                opaque,
                0,
                &[],
                b"detailed",
                &dump,
            );
        } else if sub.starts_with(b" on") {
            stats::switch_detail(ctx, true);
        } else if sub.starts_with(b" off") {
            stats::switch_detail(ctx, false);
        } else {
            return Err(Status::KeyNotFound);
        }
        compose(out, code, Status::NoError, opaque, 0, &[], &[], &[]);
        return Ok(());
    }
    // memcached's binary stat matches these two by prefix too.
    let group = match request.key {
        key if key.starts_with(b"reset") => "reset",
        key if key.starts_with(b"settings") => "settings",
        key => std::str::from_utf8(key).map_err(|_| Status::KeyNotFound)?,
    };
    let Some(lines) = stats::group(group, ctx) else {
        return Err(Status::KeyNotFound);
    };
    for (name, value) in &lines {
        compose(
            out,
            code,
            Status::NoError,
            opaque,
            0,
            &[],
            name.as_bytes(),
            value.as_bytes(),
        );
    }
    compose(out, code, Status::NoError, opaque, 0, &[], &[], &[]);
    Ok(())
}
