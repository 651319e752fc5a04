//! `stats` and its groups, with memcached's names and meanings, for the text
//! and binary protocols alike.

use std::fmt::Display;
use std::sync::atomic::Ordering;

use kura_proto::number::parse_flags;
use kura_proto::text::Keys;
use kura_proto::ErrorReply;

use super::{Context, PROTOCOL_VERSION};
use crate::stats::CounterTotals;

type Lines = Vec<(String, String)>;

fn line(lines: &mut Lines, name: impl Into<String>, value: impl Display) {
    lines.push((name.into(), value.to_string()));
}

/// Answers `stats [group …]` on a text connection.
pub fn text(args: Keys<'_>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    let mut words = args.iter();
    let group = words.next().unwrap_or_default();
    match group {
        b"reset" => {
            reset(ctx);
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        b"detail" => {
            let reply: &[u8] = match words.next() {
                Some(b"on" | b"off" | b"dump") => b"SERVER_ERROR stats detail is not supported\r\n",
                _ => b"CLIENT_ERROR usage: stats detail on|off|dump\r\n",
            };
            out.extend_from_slice(reply);
            return;
        }
        b"cachedump" => {
            match (words.next(), words.next()) {
                (Some(class), Some(limit)) => {
                    cachedump(parse_flags(class), parse_flags(limit), ctx, out)
                }
                _ => out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n"),
            }
            return;
        }
        _ => {}
    }
    let Some(lines) = std::str::from_utf8(group)
        .ok()
        .and_then(|g| self::group(g, ctx))
    else {
        out.extend_from_slice(b"ERROR\r\n");
        return;
    };
    for (name, value) in lines {
        out.extend_from_slice(b"STAT ");
        out.extend_from_slice(name.as_bytes());
        out.push(b' ');
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"END\r\n");
}

/// memcached's largest size class number plus one.
const MAX_CLASSES: u32 = 64;

/// `stats cachedump <class> <limit>`: one line per item of a size class,
/// `ITEM <key> [<value bytes> b; <expiry as Unix time, 0 for never> s]`, at
/// most `limit` of them (0: all), at most 2 MB as in memcached.
fn cachedump(class: Option<u32>, limit: Option<u32>, ctx: &Context<'_>, out: &mut Vec<u8>) {
    use std::io::Write;
    const MAX_REPLY: usize = 2 * 1024 * 1024;
    if !ctx.shared.config.dumping_enabled {
        out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
        return;
    }
    let (Some(class), Some(limit)) = (class, limit) else {
        ErrorReply::BadCommandLine.compose(out);
        return;
    };
    if class >= MAX_CLASSES {
        out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
        return;
    }
    let unix_now = ctx.shared.store.clock().unix_now() as i64;
    let start = out.len();
    let mut shown = 0u32;
    ctx.shared.store.scan(&mut |item| {
        let full = limit != 0 && shown >= limit;
        if full || item.class != class as usize || out.len() - start >= MAX_REPLY {
            return;
        }
        let expiry = if item.ttl < 0 { 0 } else { unix_now + item.ttl };
        out.extend_from_slice(b"ITEM ");
        out.extend_from_slice(item.key);
        let _ = write!(out, " [{} b; {expiry} s]\r\n", item.value_len);
        shown += 1;
    });
    out.extend_from_slice(b"END\r\n");
}

/// The figures of one group ("" for the general one); None for an unknown group.
pub fn group(name: &str, ctx: &Context<'_>) -> Option<Lines> {
    match name {
        "" => Some(general(ctx)),
        "settings" => Some(settings(ctx)),
        "items" => Some(items(ctx)),
        "slabs" => Some(slabs(ctx)),
        "sizes" => Some(sizes(ctx)),
        "conns" => Some(conns(ctx)),
        "reset" => {
            reset(ctx);
            Some(Vec::new())
        }
        _ => None,
    }
}

fn reset(ctx: &Context<'_>) {
    for counters in ctx.shared.counters.iter() {
        counters.reset();
    }
    ctx.shared.connections.total.store(0, Ordering::Relaxed);
    ctx.shared.connections.rejected.store(0, Ordering::Relaxed);
}

fn totals(ctx: &Context<'_>) -> CounterTotals {
    let mut totals = CounterTotals::default();
    for counters in ctx.shared.counters.iter() {
        counters.add_to(&mut totals);
    }
    totals
}

/// Process CPU time as memcached prints it: seconds.microseconds.
fn rusage() -> (String, String) {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    match usage {
        Ok(u) => {
            let fmt = |t: nix::sys::time::TimeVal| format!("{}.{:06}", t.tv_sec(), t.tv_usec());
            (fmt(u.user_time()), fmt(u.system_time()))
        }
        Err(_) => ("0.000000".into(), "0.000000".into()),
    }
}

fn general(ctx: &Context<'_>) -> Lines {
    let shared = ctx.shared;
    let clock = shared.store.clock();
    let store = shared.store.stats();
    let counters = totals(ctx);
    let (user, system) = rusage();
    let mut lines = Vec::with_capacity(80);
    line(&mut lines, "pid", std::process::id());
    line(&mut lines, "uptime", clock.uptime());
    line(&mut lines, "time", clock.unix_now());
    line(&mut lines, "version", PROTOCOL_VERSION);
    line(&mut lines, "kura_version", env!("CARGO_PKG_VERSION"));
    line(&mut lines, "pointer_size", usize::BITS);
    line(&mut lines, "rusage_user", user);
    line(&mut lines, "rusage_system", system);
    line(&mut lines, "max_connections", shared.config.max_connections);
    line(
        &mut lines,
        "curr_connections",
        shared.connections.current.load(Ordering::Relaxed),
    );
    line(
        &mut lines,
        "total_connections",
        shared.connections.total.load(Ordering::Relaxed),
    );
    line(
        &mut lines,
        "rejected_connections",
        shared.connections.rejected.load(Ordering::Relaxed),
    );
    line(
        &mut lines,
        "connection_structures",
        shared.connections.current.load(Ordering::Relaxed),
    );
    counters.each(|name, value| line(&mut lines, name, value));
    line(&mut lines, "limit_maxbytes", store.limit_maxbytes);
    line(&mut lines, "accepting_conns", 1);
    line(&mut lines, "threads", shared.config.threads);
    line(&mut lines, "hash_power_level", store.hash_power_level);
    line(&mut lines, "hash_bytes", store.hash_bytes);
    line(&mut lines, "hash_is_expanding", 0);
    line(&mut lines, "expired_unfetched", store.expired_unfetched);
    line(&mut lines, "evicted_unfetched", store.evicted_unfetched);
    line(&mut lines, "evictions", store.evictions);
    line(&mut lines, "reclaimed", store.reclaimed);
    line(&mut lines, "crawler_reclaimed", store.crawler_reclaimed);
    line(
        &mut lines,
        "crawler_items_checked",
        store.crawler_items_checked,
    );
    line(&mut lines, "bytes", store.bytes);
    line(&mut lines, "curr_items", store.curr_items);
    line(&mut lines, "total_items", store.total_items);
    for (name, value) in shared.store.engine_stats() {
        line(&mut lines, name, value);
    }
    lines
}

fn settings(ctx: &Context<'_>) -> Lines {
    let config = &ctx.shared.config;
    let store = ctx.shared.store.stats();
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut lines = Vec::new();
    line(&mut lines, "maxbytes", store.limit_maxbytes);
    line(&mut lines, "maxconns", config.max_connections);
    line(&mut lines, "tcpport", config.port);
    line(&mut lines, "udpport", 0);
    let listen: Vec<String> = config.listen.iter().map(|a| a.to_string()).collect();
    line(
        &mut lines,
        "inter",
        if listen.is_empty() {
            "NULL".to_string()
        } else {
            listen.join(",")
        },
    );
    line(&mut lines, "verbosity", config.verbosity);
    line(&mut lines, "oldest", 0);
    line(
        &mut lines,
        "evictions",
        if ctx.shared.evictions_enabled {
            "on"
        } else {
            "off"
        },
    );
    line(
        &mut lines,
        "domain_socket",
        config
            .unix_socket
            .as_ref()
            .map_or("NULL".to_string(), |p| p.display().to_string()),
    );
    line(&mut lines, "umask", format!("{:o}", config.unix_mask));
    line(
        &mut lines,
        "growth_factor",
        format!("{:.2}", config.growth_factor),
    );
    line(&mut lines, "chunk_size", config.chunk_size);
    line(&mut lines, "num_threads", config.threads);
    line(&mut lines, "num_threads_per_udp", config.threads);
    line(&mut lines, "stat_key_prefix", ":");
    line(&mut lines, "detail_enabled", "no");
    line(&mut lines, "reqs_per_event", config.requests_per_event);
    line(&mut lines, "cas_enabled", yes_no(config.cas_enabled));
    line(&mut lines, "tcp_backlog", config.backlog);
    line(
        &mut lines,
        "binding_protocol",
        config.protocol.binding_name(),
    );
    line(&mut lines, "auth_enabled_sasl", "no");
    line(&mut lines, "item_size_max", config.max_item_size);
    line(&mut lines, "maxconns_fast", "yes");
    line(&mut lines, "flush_enabled", yes_no(config.flush_enabled));
    line(
        &mut lines,
        "idle_timeout",
        config.idle_timeout.map_or(0, |d| d.as_secs()),
    );
    line(
        &mut lines,
        "shutdown_command",
        yes_no(config.shutdown_command),
    );
    line(&mut lines, "engine", &config.engine);
    lines
}

fn items(ctx: &Context<'_>) -> Lines {
    let store = ctx.shared.store.stats();
    let mut lines = Vec::new();
    for class in &store.classes {
        let mut add = |field: &str, value: u64| {
            line(&mut lines, format!("items:{}:{field}", class.class), value)
        };
        add("number", class.items);
        add("age", u64::from(class.age));
        add("mem_requested", class.bytes);
        add("evicted", class.evicted);
        add("evicted_nonzero", class.evicted_nonzero);
        add("evicted_time", u64::from(class.evicted_time));
        add("outofmemory", class.outofmemory);
        add("reclaimed", class.reclaimed);
        add("expired_unfetched", class.expired_unfetched);
        add("evicted_unfetched", class.evicted_unfetched);
    }
    lines
}

/// kura has no slab pages; it reports the pages memcached would need for the
/// same items, so `memcached-tool` shows the size mix it was built to show.
fn slabs(ctx: &Context<'_>) -> Lines {
    let store = ctx.shared.store.stats();
    let page_size = ctx.shared.config.max_item_size.max(1 << 20) as u64;
    let mut lines = Vec::new();
    let mut total_pages = 0;
    for class in &store.classes {
        let chunk = class.chunk_size as u64;
        let per_page = (page_size / chunk).max(1);
        let pages = class.items.div_ceil(per_page);
        total_pages += pages;
        let mut add =
            |field: &str, value: u64| line(&mut lines, format!("{}:{field}", class.class), value);
        add("chunk_size", chunk);
        add("chunks_per_page", per_page);
        add("total_pages", pages);
        add("total_chunks", pages * per_page);
        add("used_chunks", class.items);
        add("free_chunks", pages * per_page - class.items);
        add("free_chunks_end", 0);
        add("mem_requested", class.bytes);
    }
    line(&mut lines, "active_slabs", store.classes.len());
    line(&mut lines, "total_malloced", total_pages * page_size);
    lines
}

fn sizes(ctx: &Context<'_>) -> Lines {
    let mut lines = Vec::new();
    for (size, count) in ctx.shared.store.size_histogram() {
        line(&mut lines, size.to_string(), count);
    }
    lines
}

fn conns(ctx: &Context<'_>) -> Lines {
    let now = ctx.shared.store.clock().now();
    let mut lines = Vec::new();
    for info in ctx.shared.connections_registry.lock().values() {
        let id = info.id;
        line(&mut lines, format!("{id}:addr"), &info.peer);
        line(&mut lines, format!("{id}:listen_addr"), &info.listen);
        line(&mut lines, format!("{id}:state"), "conn_parse_cmd");
        let last = info.last_active.load(Ordering::Relaxed);
        line(
            &mut lines,
            format!("{id}:secs_since_last_cmd"),
            now.saturating_sub(last),
        );
    }
    lines
}
