//! The classic text commands.

use kura_proto::reply::push_u64;
use kura_proto::text::{
    GetMode, Keys, Lru, LruCrawler, Request, ShutdownMode, StoreRequest, StoreVerb, TooLarge,
};
use kura_proto::ErrorReply;
use kura_store::{
    ArithCommand, ArithOutcome, DeleteCommand, DeleteOutcome, FlushOutcome, GetOptions, GetOutcome,
    StoreCommand, StoreMode, StoreOutcome,
};

use super::backup::BackupRequest;
use super::metadump::CrawlClasses;
use super::{meta, stats, watch_lines, Action, Context, PROTOCOL_VERSION};
use crate::watch;

/// memcached refuses to shrink below 8 MB.
const MIN_MEMLIMIT_MB: u64 = 8;
/// memcached takes a larger `cache_memlimit` for a number of bytes sent by
/// mistake and refuses it.
const MAX_MEMLIMIT_MB: u64 = 1_000_000_000;

pub fn execute(request: Request<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    match request {
        Request::Get { mode, keys } => {
            let start = out.len();
            for (index, key) in keys.iter().enumerate() {
                if get(key, mode, ctx, out) == GetOutcome::Failed {
                    // A gat whose touch the storage could not write: as
                    // memcached's failed get, the error replaces the reply.
                    out.truncate(start);
                    out.extend_from_slice(ctx.write_failed_line());
                    return Action::Continue;
                }
                // The first value always goes (an item of -I and its line).
                if index > 0 && out.len() - start > ctx.shared.config.max_reply_bytes {
                    // As memcached when it cannot allocate a reply: none of
                    // it goes.
                    out.truncate(start);
                    ErrorReply::Server("out of memory writing get response").compose(out);
                    return Action::Continue;
                }
            }
            out.extend_from_slice(b"END\r\n");
        }
        Request::Store(request) => store(&request, ctx, out),
        Request::Delete { key, noreply } => {
            ctx.detail(key, |counts| counts.deletes += 1);
            let reply: &[u8] =
                match ctx
                    .shared
                    .store
                    .delete(key, &DeleteCommand::default(), &ctx.fence)
                {
                    DeleteOutcome::Deleted => {
                        ctx.counters.delete_hits.incr();
                        b"DELETED\r\n"
                    }
                    DeleteOutcome::Failed => ctx.write_failed_line(),
                    _ => {
                        ctx.counters.delete_misses.incr();
                        b"NOT_FOUND\r\n"
                    }
                };
            reply_unless(noreply, reply, out);
        }
        Request::Arith {
            key,
            incr,
            delta,
            noreply,
        } => arith(key, incr, delta, noreply, ctx, out),
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            let expiry = ctx.shared.store.clock().expiry(exptime);
            let outcome = ctx.shared.store.touch(key, expiry, &ctx.fence);
            ctx.count_touch(outcome);
            let reply: &[u8] = match outcome {
                GetOutcome::Hit => b"TOUCHED\r\n",
                GetOutcome::Miss => b"NOT_FOUND\r\n",
                GetOutcome::Failed => ctx.write_failed_line(),
            };
            reply_unless(noreply, reply, out);
        }
        Request::FlushAll { delay, noreply } => {
            // memcached counts a refused flush_all too.
            ctx.counters.cmd_flush.incr();
            if !ctx.shared.config.flush_enabled {
                error_unless(noreply, ErrorReply::FlushDisabled, out);
                return Action::Continue;
            }
            if ctx.read_only() {
                reply_unless(noreply, ctx.write_failed_line(), out);
                return Action::Continue;
            }
            let reply: &[u8] = match ctx.shared.store.flush_all(delay, &ctx.fence) {
                FlushOutcome::Done => b"OK\r\n",
                FlushOutcome::Failed => ctx.write_failed_line(),
            };
            reply_unless(noreply, reply, out);
        }
        Request::Version => {
            out.extend_from_slice(b"VERSION ");
            out.extend_from_slice(PROTOCOL_VERSION.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        Request::Verbosity { noreply } => reply_unless(noreply, b"OK\r\n", out),
        Request::Quit => return Action::Close,
        Request::Shutdown { mode } => {
            if !ctx.shared.config.shutdown_command {
                ErrorReply::ShutdownDisabled.compose(out);
                return Action::Continue;
            }
            match mode {
                ShutdownMode::Immediate => return Action::Shutdown,
                ShutdownMode::Graceful => return Action::GracefulShutdown,
                ShutdownMode::Unknown => ErrorReply::ShutdownInvalidMode.compose(out),
            }
        }
        Request::SlabsAutomove { noreply } => reply_unless(noreply, b"OK\r\n", out),
        Request::Lru { command, noreply } => reply_unless(noreply, lru(command), out),
        Request::DebugTime { seconds } => debug_time(seconds, ctx, out),
        Request::TooLarge(request) => too_large(&request, ctx, out),
        Request::CacheMemlimit { megabytes, noreply } => {
            if megabytes < MIN_MEMLIMIT_MB {
                error_unless(noreply, ErrorReply::MemlimitTooSmall, out);
            } else if megabytes > MAX_MEMLIMIT_MB {
                error_unless(noreply, ErrorReply::MemlimitNotMegabytes, out);
            } else {
                let bytes = megabytes.saturating_mul(1024 * 1024);
                ctx.shared
                    .store
                    .set_memory_limit(usize::try_from(bytes).unwrap_or(usize::MAX));
                reply_unless(noreply, b"OK\r\n", out);
            }
        }
        Request::Stats { args } => stats::text(args, ctx, out),
        Request::RefreshCerts { noreply } => refresh_certs(noreply, ctx, out),
        Request::Backup { to, since } => return backup(to, since, ctx, out),
        Request::LruCrawler(command) => return lru_crawler(command, ctx, out),
        Request::Watch { kinds } => return start_watch(kinds, ctx, out),
        Request::Replicate(hello) => return start_replicate(hello, ctx, out),
        Request::ReplicaOf { master, force } => replica_of(master, force, ctx, out),
        Request::Replicas => ctx.shared.replication.report(ctx.shared, out),
        Request::Meta(request) => meta::execute(request, ctx, out),
    }
    Action::Continue
}

fn reply_unless(noreply: bool, reply: &[u8], out: &mut Vec<u8>) {
    if !noreply {
        out.extend_from_slice(reply);
    }
}

fn error_unless(noreply: bool, error: ErrorReply, out: &mut Vec<u8>) {
    if !noreply {
        error.compose(out);
    }
}

/// A storage command refused for its size (its data block is discarded by
/// the session). Like memcached, a refused `set` (or `ms`) also removes the
/// key's current item: a client whose write failed must not go on reading
/// the value it meant to replace.
fn too_large(request: &TooLarge<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    ctx.counters.store_too_large.incr();
    if request.removes_old_item {
        ctx.remove_stale(&request.key);
    }
    error_unless(request.noreply, ErrorReply::TooLarge, out);
}

/// `refresh_certs`: loads the certificate chain and key files again; new
/// TLS connections get the new certificate, open ones keep theirs. A
/// failure is told in memcached's words (even under `noreply`, as there)
/// and the certificate in use stays.
fn refresh_certs(noreply: bool, ctx: &Context<'_>, out: &mut Vec<u8>) {
    use crate::tls::TlsError;
    let (Some(tls), Some(settings)) = (&ctx.shared.tls, &ctx.shared.config.tls) else {
        out.extend_from_slice(b"Error TLS not enabled\r\n");
        return;
    };
    let uptime = ctx.shared.store.clock().uptime();
    let error = match tls.certificates.reload(uptime) {
        Ok(()) => return reply_unless(noreply, b"OK\r\n", out),
        Err(error) => error,
    };
    let chain = settings
        .chain_cert
        .as_deref()
        .unwrap_or(std::path::Path::new(""));
    let key = settings.key.as_deref().unwrap_or(chain);
    let message = match error {
        TlsError::File { path, reason } if std::path::Path::new(&path) == chain => {
            format!("Error loading the certificate chain: {path} : {reason}")
        }
        TlsError::File { path, reason } => format!("Error loading the key: {path} : {reason}"),
        other => format!("Error loading the key: {} : {other}", key.display()),
    };
    // One line, whatever the reason says, so the reply stream stays in step.
    out.extend_from_slice(message.replace(['\r', '\n'], " ").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The answer to `lru …`: memcached's, where kura's LRU (one list, no
/// segments) has nothing to change; a setting it cannot take is refused
/// with the reason, not acknowledged.
fn lru(command: Lru) -> &'static [u8] {
    match command {
        // Percentages and age factors of segments kura does not have, as
        // `-o hot_lru_pct` and the like: checked, then nothing to tune.
        Lru::Tune | Lru::Mode { segmented: false } => b"OK\r\n",
        Lru::TuneOverEighty => b"ERROR hot and warm pcts must not exceed 80\r\n",
        Lru::TuneFactorNotPositive => b"ERROR hot/warm age factors must be greater than 0\r\n",
        Lru::Mode { segmented: true } => b"ERROR kura's LRU has no segments\r\n",
        Lru::TempTtl => b"ERROR temp_ttl is set at start (-o temporary_ttl)\r\n",
        Lru::Invalid => b"ERROR\r\n",
    }
}

/// `backup <dir> [since <dir>]`: `OK <manifest as JSON>` once the backup is
/// complete on the server's disk (`super::backup`). Not over UDP: a
/// datagram has no connection to wait on, and the UDP thread serves every
/// datagram client.
fn backup(to: &[u8], since: Option<&[u8]>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    if ctx.datagram {
        out.extend_from_slice(b"SERVER_ERROR backups are taken over TCP only\r\n");
        return Action::Continue;
    }
    match BackupRequest::text(to, since, ctx, out) {
        Some(request) => Action::Backup(request),
        None => Action::Continue,
    }
}

/// `debugtime <seconds>`: memcached's debug build moves its clock with it,
/// and so do kura's debug builds; a release build does not know the command.
fn debug_time(seconds: i64, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let forward = u32::try_from(seconds).ok();
    match forward {
        Some(seconds) if cfg!(debug_assertions) => {
            ctx.shared.store.clock().advance(seconds);
            out.extend_from_slice(b"OK\r\n");
        }
        // The clock only moves forward.
        _ => ErrorReply::UnknownCommand.compose(out),
    }
}

fn get(key: &[u8], mode: GetMode, ctx: &Context<'_>, out: &mut Vec<u8>) -> GetOutcome {
    let options = GetOptions {
        touch: mode
            .touch()
            .map(|exptime| ctx.shared.store.clock().expiry(exptime)),
        ..GetOptions::default()
    };
    let with_cas = mode.returns_cas();
    let mut found = None;
    let outcome = ctx
        .shared
        .store
        .get(key, &options, &ctx.fence, &mut |item| {
            found = Some(item.value.len());
            out.extend_from_slice(b"VALUE ");
            out.extend_from_slice(key);
            out.push(b' ');
            push_u64(out, u64::from(item.flags));
            out.push(b' ');
            push_u64(out, item.value.len() as u64);
            if with_cas {
                out.push(b' ');
                push_u64(out, ctx.visible_cas(item.cas));
            }
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(item.value);
            out.extend_from_slice(b"\r\n");
        });
    let hit = outcome.is_hit();
    ctx.count_read(outcome, options.touch.is_some());
    ctx.detail(key, |counts| {
        counts.gets += 1;
        counts.hits += u64::from(hit);
    });
    watch_lines::fetched(ctx, key, found);
    outcome
}

fn store(request: &StoreRequest<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    ctx.counters.cmd_set.incr();
    ctx.detail(request.key, |counts| counts.sets += 1);
    let mode = match request.verb {
        StoreVerb::Set | StoreVerb::Cas => StoreMode::Set,
        StoreVerb::Add => StoreMode::Add,
        StoreVerb::Replace => StoreMode::Replace,
        StoreVerb::Append => StoreMode::Append,
        StoreVerb::Prepend => StoreMode::Prepend,
    };
    let is_cas = request.verb == StoreVerb::Cas;
    watch_lines::looked_up_to_store(ctx, request.key);
    let outcome = ctx.shared.store.store(
        &StoreCommand {
            mode,
            key: request.key,
            value: request.data,
            flags: request.flags,
            expiry: ctx.shared.store.clock().expiry(request.exptime),
            compare_cas: ctx.store_compare(mode, is_cas.then_some(request.cas_unique)),
            stale_if_older: false,
        },
        &ctx.fence,
    );
    let reply: &[u8] = match outcome {
        StoreOutcome::Stored { .. } => {
            if is_cas {
                ctx.counters.cas_hits.incr();
            }
            b"STORED\r\n"
        }
        StoreOutcome::NotStored => b"NOT_STORED\r\n",
        StoreOutcome::Exists => {
            ctx.counters.cas_badval.incr();
            b"EXISTS\r\n"
        }
        StoreOutcome::NotFound => {
            ctx.counters.cas_misses.incr();
            b"NOT_FOUND\r\n"
        }
        StoreOutcome::OutOfMemory => {
            ctx.counters.store_no_memory.incr();
            // As for a value too large: a failed set leaves no stale value.
            if request.verb == StoreVerb::Set {
                ctx.remove_stale(request.key);
            }
            b"SERVER_ERROR out of memory storing object\r\n"
        }
        StoreOutcome::Failed => ctx.write_failed_line(),
    };
    let command = watch_lines::command_name(mode, is_cas);
    let data = request.data;
    watch_lines::stored(
        ctx,
        request.key,
        command,
        outcome,
        request.exptime,
        data.len(),
    );
    reply_unless(request.noreply, reply, out);
}

/// `watch [kinds]`: refused under `-W`, or after other requests in the same
/// batch (their replies would mix with the log), as memcached refuses them.
fn start_watch(kinds: Keys<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    if !ctx.shared.config.watch_enabled {
        out.extend_from_slice(b"CLIENT_ERROR watch commands not allowed\r\n");
        return Action::Continue;
    }
    if !out.is_empty() {
        out.extend_from_slice(b"ERROR cannot pipeline other commands before watch\r\n");
        return Action::Continue;
    }
    match watch::parse_kinds(kinds.iter()) {
        Some(kinds) => Action::Watch { kinds },
        None => {
            ErrorReply::UnknownCommand.compose(out);
            Action::Continue
        }
    }
}

/// `replicate …`: a replica asks for this server's log. The connection
/// then belongs to the replication link (`replication/feeder.rs`).
fn start_replicate(
    hello: kura_proto::replication::ReplicaHello,
    ctx: &Context<'_>,
    out: &mut Vec<u8>,
) -> Action {
    if ctx.shared.store.replication().is_none() {
        out.extend_from_slice(b"SERVER_ERROR replication needs the disk engine\r\n");
        return Action::Continue;
    }
    if !out.is_empty() {
        out.extend_from_slice(b"ERROR cannot pipeline other commands before replicate\r\n");
        return Action::Continue;
    }
    Action::Replicate(kura_proto::replication::LinkRequest::Kura(hello))
}

/// `replicaof <host> <port>` / `replicaof no one [force]`.
fn replica_of(master: Option<(&[u8], u16)>, force: bool, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let Some(shared) = ctx.shared.this() else {
        out.extend_from_slice(b"SERVER_ERROR the server is stopping\r\n");
        return;
    };
    let master = match master {
        Some((host, port)) => match crate::replication::master_address(host, port) {
            Some(address) => Some((address, crate::MasterProtocol::Kura)),
            None => return out.extend_from_slice(b"CLIENT_ERROR bad host name\r\n"),
        },
        None => None,
    };
    match ctx.shared.replication.follow(&shared, master, force) {
        Ok(()) => out.extend_from_slice(b"OK\r\n"),
        Err(reason) => {
            out.extend_from_slice(b"SERVER_ERROR ");
            out.extend_from_slice(reason.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// `lru_crawler …` with memcached's replies. kura's crawler is the engine's
/// background reclaimer, always running; `enable`/`disable` switch the
/// commands, `crawl` reclaims the expired items of the classes at once.
fn lru_crawler(command: LruCrawler<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    use std::sync::atomic::Ordering;
    let enabled = &ctx.shared.lru_crawler;
    let reply: &[u8] = match command {
        LruCrawler::Enable => {
            enabled.store(true, Ordering::Relaxed);
            b"OK\r\n"
        }
        LruCrawler::Disable => {
            enabled.store(false, Ordering::Relaxed);
            b"OK\r\n"
        }
        LruCrawler::Tune { value: None, .. } => b"CLIENT_ERROR bad command line format\r\n",
        LruCrawler::Tune {
            sleep: true,
            value: Some(micros),
        } if micros > 1_000_000 => b"CLIENT_ERROR sleep must be one second or less\r\n",
        LruCrawler::Tune { .. } => b"OK\r\n",
        LruCrawler::Crawl(_) | LruCrawler::Metadump(_) if !enabled.load(Ordering::Relaxed) => {
            b"CLIENT_ERROR lru crawler disabled\r\n"
        }
        LruCrawler::Crawl(classes) => match CrawlClasses::parse(classes) {
            Some(which) => {
                ctx.shared.store.crawl(&|class| which.includes(class));
                b"OK\r\n"
            }
            None => b"BADCLASS invalid class id\r\n",
        },
        LruCrawler::Metadump(_) if !ctx.shared.config.dumping_enabled => {
            b"ERROR metadump not allowed\r\n"
        }
        LruCrawler::Metadump(_) if !out.is_empty() => {
            b"ERROR cannot pipeline other commands before metadump\r\n"
        }
        // memcached's crawler writes the dump to the connection's socket,
        // which for UDP has no peer: nothing goes back (and a datagram of
        // 34 bytes cannot ask for megabytes).
        LruCrawler::Metadump(_) if ctx.datagram => return Action::Continue,
        LruCrawler::Metadump(classes) => {
            let which = match classes {
                b"hash" => Some(CrawlClasses::All),
                _ => CrawlClasses::parse(classes),
            };
            match which {
                // Written in parts by the connection (`metadump.rs`).
                Some(classes) => return Action::Metadump(classes),
                None => b"BADCLASS invalid class id\r\n",
            }
        }
    };
    out.extend_from_slice(reply);
    Action::Continue
}

fn arith(key: &[u8], incr: bool, delta: u64, noreply: bool, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let outcome = ctx.shared.store.arith(
        key,
        &ArithCommand {
            decrement: !incr,
            delta,
            ..ArithCommand::default()
        },
        &ctx.fence,
    );
    let (hits, misses) = if incr {
        (&ctx.counters.incr_hits, &ctx.counters.incr_misses)
    } else {
        (&ctx.counters.decr_hits, &ctx.counters.decr_misses)
    };
    if noreply {
        match outcome {
            ArithOutcome::Value { .. } => hits.incr(),
            ArithOutcome::NotFound => misses.incr(),
            _ => {}
        }
        return;
    }
    match outcome {
        ArithOutcome::Value { value, .. } => {
            hits.incr();
            push_u64(out, value);
            out.extend_from_slice(b"\r\n");
        }
        ArithOutcome::NotFound | ArithOutcome::Exists => {
            misses.incr();
            out.extend_from_slice(b"NOT_FOUND\r\n");
        }
        ArithOutcome::NonNumeric => ErrorReply::NonNumeric.compose(out),
        ArithOutcome::OutOfMemory => ErrorReply::OutOfMemory.compose(out),
        ArithOutcome::Failed => out.extend_from_slice(ctx.write_failed_line()),
    }
}
