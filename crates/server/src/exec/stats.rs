//! `stats` and its groups, with memcached's names and meanings, for the text
//! and binary protocols alike.

use std::fmt::Display;
use std::sync::atomic::Ordering;

use kura_proto::number::parse_flags;
use kura_proto::text::Keys;
use kura_proto::ErrorReply;

use super::{Context, PROTOCOL_VERSION};
use crate::config::{ProtocolChoice, TlsSettings};
use crate::stats::{CounterTotals, PrefixCounts};

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
            match words.next() {
                Some(b"on") => set_detail(ctx, true, out),
                Some(b"off") => set_detail(ctx, false, out),
                Some(b"dump") => detail_dump(ctx, out),
                _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
            }
            return;
        }
        // memcached without external storage answers an empty group here
        // (and "not found" to the binary protocol's `stat extstore`).
        b"extstore" => {
            out.extend_from_slice(b"END\r\n");
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

/// `stats detail on|off` on a text connection.
fn set_detail(ctx: &Context<'_>, on: bool, out: &mut Vec<u8>) {
    switch_detail(ctx, on);
    out.extend_from_slice(b"OK\r\n");
}

/// `stats detail dump`: `PREFIX <prefix> get <n> hit <n> set <n> del <n>`
/// per prefix (sorted; memcached's order is its hash table's), then END.
pub fn detail_dump(ctx: &Context<'_>, out: &mut Vec<u8>) {
    use std::io::Write;
    let mut totals = std::collections::HashMap::new();
    for counters in ctx.shared.counters.iter() {
        counters.detail.add_to(&mut totals);
    }
    let mut prefixes: Vec<(Box<[u8]>, PrefixCounts)> = totals.into_iter().collect();
    prefixes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    for (prefix, counts) in prefixes {
        out.extend_from_slice(b"PREFIX ");
        out.extend_from_slice(&prefix);
        let _ = write!(
            out,
            " get {} hit {} set {} del {}\r\n",
            counts.gets, counts.hits, counts.sets, counts.deletes
        );
    }
    out.extend_from_slice(b"END\r\n");
}

/// Turns `stats detail` on or off: every worker's switch, so each request
/// checks only its own worker's.
pub fn switch_detail(ctx: &Context<'_>, on: bool) {
    for counters in ctx.shared.counters.iter() {
        counters.detail.set_enabled(on);
    }
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
        "kura" => Some(kura(ctx)),
        "replication" => Some(replication(ctx)),
        "reset" => {
            reset(ctx);
            Some(Vec::new())
        }
        _ => None,
    }
}

/// `stats reset`: memcached zeroes its counters and the per-prefix figures,
/// not the gauges (connections open, items).
fn reset(ctx: &Context<'_>) {
    let mut baseline = ctx.shared.stats_reset.lock();
    baseline.counters = raw_totals(ctx);
    baseline.store = ctx.shared.store.stats();
    let watchers = &ctx.shared.watchers;
    baseline.log_written = watchers.logged();
    watchers.sent.store(0, Ordering::Relaxed);
    watchers.skipped.store(0, Ordering::Relaxed);
    if let Some(tls) = &ctx.shared.tls {
        tls.counters.handshake_errors.store(0, Ordering::Relaxed);
        tls.counters.new_sessions.store(0, Ordering::Relaxed);
    }
    for counters in ctx.shared.counters.iter() {
        counters.detail.clear();
    }
    let connections = &ctx.shared.connections;
    connections.total.store(0, Ordering::Relaxed);
    connections.rejected.store(0, Ordering::Relaxed);
    connections.listen_disabled.store(0, Ordering::Relaxed);
    connections.listen_disabled_us.store(0, Ordering::Relaxed);
}

/// The counts since the last `stats reset`.
fn totals(ctx: &Context<'_>) -> CounterTotals {
    raw_totals(ctx).since(&ctx.shared.stats_reset.lock().counters)
}

/// The engine's figures, its counts since the last `stats reset`.
fn store_stats(ctx: &Context<'_>) -> kura_store::StoreStats {
    let stats = ctx.shared.store.stats();
    stats.since(&ctx.shared.stats_reset.lock().store)
}

fn raw_totals(ctx: &Context<'_>) -> CounterTotals {
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

/// `stats`: exactly the figures memcached 1.6.18 prints, in its order, so a
/// tool that counts or compares them sees memcached. kura's own figures
/// (its version, the engine's) are in `stats kura`.
fn general(ctx: &Context<'_>) -> Lines {
    let shared = ctx.shared;
    let config = &shared.config;
    let clock = shared.store.clock();
    let store = store_stats(ctx);
    let c = totals(ctx);
    let conns = &shared.connections;
    let (user, system) = rusage();
    let mut lines = Vec::with_capacity(90);
    let l = &mut lines;
    line(l, "pid", std::process::id());
    line(l, "uptime", clock.uptime());
    line(l, "time", clock.unix_now());
    line(l, "version", PROTOCOL_VERSION);
    // memcached names its event library here; kura's is mio.
    line(l, "libevent", "mio");
    line(l, "pointer_size", usize::BITS);
    line(l, "rusage_user", user);
    line(l, "rusage_system", system);
    line(l, "max_connections", config.max_connections);
    let current = conns.current.load(Ordering::Relaxed);
    line(l, "curr_connections", current);
    line(l, "total_connections", conns.total.load(Ordering::Relaxed));
    if config.maxconns_fast {
        line(
            l,
            "rejected_connections",
            conns.rejected.load(Ordering::Relaxed),
        );
    }
    line(l, "connection_structures", current);
    // memcached's response objects and pooled read buffers: kura keeps a
    // reply buffer per worker and a read buffer only for a partial request.
    line(l, "response_obj_oom", c.response_obj_oom);
    for name in [
        "response_obj_count",
        "response_obj_bytes",
        "read_buf_count",
        "read_buf_bytes",
        "read_buf_bytes_free",
        "read_buf_oom",
        "reserved_fds",
    ] {
        line(l, name, 0);
    }
    line(l, "cmd_get", c.cmd_get);
    line(l, "cmd_set", c.cmd_set);
    line(l, "cmd_flush", c.cmd_flush);
    line(l, "cmd_touch", c.cmd_touch);
    line(l, "cmd_meta", c.cmd_meta);
    line(l, "get_hits", c.get_hits);
    line(l, "get_misses", c.get_misses);
    line(l, "get_expired", store.get_expired);
    line(l, "get_flushed", store.get_flushed);
    line(l, "delete_misses", c.delete_misses);
    line(l, "delete_hits", c.delete_hits);
    line(l, "incr_misses", c.incr_misses);
    line(l, "incr_hits", c.incr_hits);
    line(l, "decr_misses", c.decr_misses);
    line(l, "decr_hits", c.decr_hits);
    line(l, "cas_misses", c.cas_misses);
    line(l, "cas_hits", c.cas_hits);
    line(l, "cas_badval", c.cas_badval);
    line(l, "touch_hits", c.touch_hits);
    line(l, "touch_misses", c.touch_misses);
    line(l, "store_too_large", c.store_too_large);
    line(l, "store_no_memory", c.store_no_memory);
    line(l, "auth_cmds", c.auth_cmds);
    line(l, "auth_errors", c.auth_errors);
    if config.idle_timeout.is_some() {
        line(l, "idle_kicks", c.idle_kicks);
    }
    line(l, "bytes_read", c.bytes_read);
    line(l, "bytes_written", c.bytes_written);
    line(l, "limit_maxbytes", store.limit_maxbytes);
    let accepting = !conns.not_accepting.load(Ordering::Relaxed);
    line(l, "accepting_conns", u8::from(accepting));
    line(
        l,
        "listen_disabled_num",
        conns.listen_disabled.load(Ordering::Relaxed),
    );
    line(
        l,
        "time_in_listen_disabled_us",
        conns.listen_disabled_us.load(Ordering::Relaxed),
    );
    line(l, "threads", config.threads);
    line(l, "conn_yields", c.conn_yields);
    line(l, "hash_power_level", store.hash_power_level);
    line(l, "hash_bytes", store.hash_bytes);
    line(l, "hash_is_expanding", 0);
    // kura has no slab pages to move between size classes.
    for name in [
        "slab_reassign_rescues",
        "slab_reassign_chunk_rescues",
        "slab_reassign_evictions_nomem",
        "slab_reassign_inline_reclaim",
        "slab_reassign_busy_items",
        "slab_reassign_busy_deletes",
        "slab_reassign_running",
        "slabs_moved",
    ] {
        line(l, name, 0);
    }
    // As memcached: while the crawler is on (`lru_crawler enable|disable`).
    if shared.lru_crawler.load(Ordering::Relaxed) {
        line(l, "lru_crawler_running", 0);
        line(l, "lru_crawler_starts", 0);
    }
    // No `lru_maintainer_juggles`: kura has no LRU maintainer thread.
    line(l, "malloc_fails", 0);
    // Events go straight to the watchers' queues: none is dropped before
    // that, as memcached's per-worker buffers can.
    let watchers = &shared.watchers;
    line(l, "log_worker_dropped", 0);
    let log_written = (watchers.logged()).saturating_sub(shared.stats_reset.lock().log_written);
    line(l, "log_worker_written", log_written);
    line(
        l,
        "log_watcher_skipped",
        watchers.skipped.load(Ordering::Relaxed),
    );
    line(l, "log_watcher_sent", watchers.sent.load(Ordering::Relaxed));
    line(l, "log_watchers", watchers.count());
    if let (Some(tls), Some(settings)) = (&shared.tls, &config.tls) {
        let counters = &tls.counters;
        if settings.session_cache {
            line(
                l,
                "ssl_new_sessions",
                counters.new_sessions.load(Ordering::Relaxed),
            );
        }
        line(
            l,
            "ssl_handshake_errors",
            counters.handshake_errors.load(Ordering::Relaxed),
        );
        line(
            l,
            "time_since_server_cert_refresh",
            clock
                .uptime()
                .saturating_sub(tls.certificates.refreshed_at()),
        );
    }
    line(l, "unexpected_napi_ids", 0);
    line(l, "round_robin_fallback", 0);
    line(l, "bytes", store.bytes);
    line(l, "curr_items", store.curr_items);
    line(l, "total_items", store.total_items);
    line(l, "slab_global_page_pool", 0);
    line(l, "expired_unfetched", store.expired_unfetched);
    line(l, "evicted_unfetched", store.evicted_unfetched);
    line(l, "evictions", store.evictions);
    line(l, "reclaimed", store.reclaimed);
    line(l, "crawler_reclaimed", store.crawler_reclaimed);
    line(l, "crawler_items_checked", store.crawler_items_checked);
    // memcached counts items its LRU tail search found in use; kura's
    // eviction does not skip items that way.
    line(l, "lrutail_reflocked", 0);
    lines
}

/// `stats kura`: what kura adds to memcached's figures: its own version,
/// the engine, what connections hold, and the engine's figures (the disk
/// engine's `disk_*`).
fn kura(ctx: &Context<'_>) -> Lines {
    let mut lines = Vec::new();
    line(&mut lines, "kura_version", env!("CARGO_PKG_VERSION"));
    line(&mut lines, "engine", &ctx.shared.config.engine);
    // What connections hold past their free share, under --max-buffered.
    line(
        &mut lines,
        "conn_held_bytes",
        ctx.shared.held_buffers.held(),
    );
    let totals = totals(ctx);
    line(&mut lines, "conn_buffer_kicks", totals.buffer_kicks);
    line(&mut lines, "detail_untracked", totals.detail_untracked);
    for (name, value) in ctx.shared.store.engine_stats() {
        line(&mut lines, name, value);
    }
    lines.extend(replication(ctx));
    lines
}

/// `stats replication` (also in `stats kura`): the role, the link to the
/// master, each attached replica's LSN, lag and state.
fn replication(ctx: &Context<'_>) -> Lines {
    let mut lines = Vec::new();
    for (name, value) in ctx.shared.replication.stats(ctx.shared) {
        line(&mut lines, &name, value);
    }
    lines
}

/// `stats settings`: memcached's settings, in its order, from kura's
/// configuration; those kura has no counterpart for show memcached's
/// defaults (or, for the slab mover and LRU segments, that they are off).
fn settings(ctx: &Context<'_>) -> Lines {
    let config = &ctx.shared.config;
    let store = ctx.shared.store.stats();
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let path_or = |p: &Option<std::path::PathBuf>, none: &str| {
        p.as_ref()
            .map_or(none.to_string(), |p| p.display().to_string())
    };
    let mut lines = Vec::new();
    let l = &mut lines;
    line(l, "maxbytes", store.limit_maxbytes);
    line(l, "maxconns", config.max_connections);
    line(l, "tcpport", config.port);
    line(l, "udpport", config.udp_port.unwrap_or(0));
    let listen: Vec<String> = config.listen.iter().map(|a| a.to_string()).collect();
    line(
        l,
        "inter",
        if listen.is_empty() {
            "NULL".to_string()
        } else {
            listen.join(",")
        },
    );
    line(l, "verbosity", config.verbosity);
    line(l, "oldest", 0);
    line(
        l,
        "evictions",
        if ctx.shared.evictions_enabled {
            "on"
        } else {
            "off"
        },
    );
    line(l, "domain_socket", path_or(&config.unix_socket, "NULL"));
    line(l, "umask", format!("{:o}", config.unix_mask));
    line(l, "shutdown_command", yes_no(config.shutdown_command));
    line(l, "growth_factor", format!("{:.2}", config.growth_factor));
    line(l, "chunk_size", config.chunk_size);
    line(l, "num_threads", config.threads);
    line(l, "num_threads_per_udp", config.threads);
    let delimiter = config.detail_delimiter.unwrap_or(b':');
    line(l, "stat_key_prefix", char::from(delimiter));
    let detail = ctx
        .counters
        .detail
        .enabled(config.detail_delimiter.is_some());
    line(l, "detail_enabled", yes_no(detail));
    line(l, "reqs_per_event", config.requests_per_event);
    line(l, "cas_enabled", yes_no(config.cas_enabled));
    line(l, "tcp_backlog", config.backlog);
    // Text logins make every connection a text one (`worker.rs`).
    let binding = match (config.protocol, &config.auth_file, config.sasl) {
        (ProtocolChoice::Auto, Some(_), false) => ProtocolChoice::Ascii,
        (protocol, ..) => protocol,
    };
    line(l, "binding_protocol", binding.binding_name());
    line(l, "auth_enabled_sasl", yes_no(config.sasl));
    line(l, "auth_enabled_ascii", path_or(&config.auth_file, "no"));
    line(l, "item_size_max", config.max_item_size);
    line(l, "maxconns_fast", yes_no(config.maxconns_fast));
    line(l, "hashpower_init", config.hash_power_init);
    // memcached's defaults: kura has no slab pages to move, and `stats`
    // shows the slab mover's figures as memcached does with these on.
    line(l, "slab_reassign", "yes");
    line(l, "slab_automove", 1);
    line(l, "slab_automove_ratio", "0.80");
    line(l, "slab_automove_window", 30);
    line(l, "slab_chunk_max", config.max_item_size / 2);
    let crawler = ctx.shared.lru_crawler.load(Ordering::Relaxed);
    line(l, "lru_crawler", yes_no(crawler));
    line(l, "lru_crawler_sleep", 100);
    line(l, "lru_crawler_tocrawl", 0);
    line(l, "tail_repair_time", 0);
    line(l, "flush_enabled", yes_no(config.flush_enabled));
    line(l, "dump_enabled", yes_no(config.dumping_enabled));
    line(l, "hash_algorithm", "murmur3");
    // The memory engine's expiry sweep does the maintainer's reclaiming.
    line(l, "lru_maintainer_thread", yes_no(config.lru_maintainer));
    line(l, "lru_segmented", "no");
    line(l, "hot_lru_pct", 20);
    line(l, "warm_lru_pct", 40);
    line(l, "hot_max_factor", "0.20");
    line(l, "warm_max_factor", "2.00");
    line(l, "temp_lru", yes_no(config.temporary_ttl.is_some()));
    line(l, "temporary_ttl", config.temporary_ttl.unwrap_or(61));
    line(
        l,
        "idle_timeout",
        config.idle_timeout.map_or(0, |d| d.as_secs()),
    );
    line(l, "watcher_logbuf_size", config.watcher_buffer_bytes);
    line(l, "worker_logbuf_size", 65536);
    line(l, "read_buf_mem_limit", config.read_buffer_limit);
    line(l, "track_sizes", "no");
    line(l, "inline_ascii_response", "no");
    tls_settings(config.tls.as_ref(), l);
    line(l, "num_napi_ids", "(null)");
    line(l, "memory_file", path_or(&config.memory_file, "(null)"));
    lines
}

/// memcached's `ssl_*` settings; without `-Z`, its defaults (an unset file
/// is "(null)" there, as C's printf shows a null string).
fn tls_settings(tls: Option<&TlsSettings>, l: &mut Lines) {
    let defaults = TlsSettings {
        key_format: 1,
        min_version: 2,
        wbuf_kib: 16,
        ..TlsSettings::default()
    };
    let settings = tls.unwrap_or(&defaults);
    let path_or = |p: &Option<std::path::PathBuf>, none: &str| {
        p.as_ref()
            .map_or(none.to_string(), |p| p.display().to_string())
    };
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    line(l, "ssl_enabled", yes_no(tls.is_some()));
    line(l, "ssl_chain_cert", path_or(&settings.chain_cert, "(null)"));
    line(l, "ssl_key", path_or(&settings.key, "(null)"));
    line(l, "ssl_verify_mode", settings.verify_mode);
    line(l, "ssl_keyformat", settings.key_format);
    line(
        l,
        "ssl_ciphers",
        settings.ciphers.as_deref().unwrap_or("NULL"),
    );
    line(l, "ssl_ca_cert", path_or(&settings.ca_cert, "NULL"));
    line(l, "ssl_wbuf_size", settings.wbuf_kib * 1024);
    line(l, "ssl_session_cache", yes_no(settings.session_cache));
    // rustls encrypts in user space.
    line(l, "ssl_kernel_tls", "no");
    let min_version = match settings.min_version {
        0 => "tlsv1.0",
        1 => "tlsv1.1",
        2 => "tlsv1.2",
        _ => "tlsv1.3",
    };
    line(l, "ssl_min_version", min_version);
}

fn items(ctx: &Context<'_>) -> Lines {
    let store = store_stats(ctx);
    let config = &ctx.shared.config;
    let mut lines = Vec::new();
    // As memcached's `item_stats`: a class that holds no item is left out,
    // whatever it counted before.
    for class in store.classes.iter().filter(|class| class.items > 0) {
        let mut add = |field: &str, value: u64| {
            line(&mut lines, format!("items:{}:{field}", class.class), value)
        };
        add("number", class.items);
        // memcached shows its LRU segments while its maintainer runs. kura's
        // one list of evictable items takes new items, as memcached's HOT
        // LRU does; it has no warm or cold segment.
        if config.lru_maintainer {
            add("number_hot", class.items - class.temp_items);
            add("number_warm", 0);
            add("number_cold", 0);
            if config.temporary_ttl.is_some() {
                add("number_temp", class.temp_items);
            }
            add("age_hot", u64::from(class.age));
            add("age_warm", 0);
        }
        add("age", u64::from(class.age));
        add("mem_requested", class.bytes);
        add("evicted", class.evicted);
        add("evicted_nonzero", class.evicted_nonzero);
        add("evicted_time", u64::from(class.evicted_time));
        add("outofmemory", class.outofmemory);
        add("tailrepairs", 0);
        add("reclaimed", class.reclaimed);
        add("expired_unfetched", class.expired_unfetched);
        add("evicted_unfetched", class.evicted_unfetched);
        if config.lru_maintainer {
            add("evicted_active", 0);
        }
        add("crawler_reclaimed", class.crawler_reclaimed);
    }
    lines
}

/// kura has no slab pages; it reports the pages memcached would need for the
/// same items, so `memcached-tool` shows the size mix it was built to show.
fn slabs(ctx: &Context<'_>) -> Lines {
    let store = store_stats(ctx);
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
        // memcached 1.6 names a class's bytes only in `stats items`;
        // Prometheus's memcached exporter refuses the name twice.
        for (name, count) in class.commands.named() {
            add(name, count);
        }
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

/// `stats conns`: the listening sockets first, then one block per open
/// connection, numbered as memcached numbers them by file descriptor. The
/// connection asking is in `conn_parse_cmd`; one waiting for the rest of a
/// value in `conn_nread`; the others wait for a command (`conn_read`).
fn conns(ctx: &Context<'_>) -> Lines {
    let now = ctx.shared.store.clock().now();
    let mut lines = Vec::new();
    for (i, name) in ctx.shared.listening.iter().enumerate() {
        let id = i + 1;
        line(&mut lines, format!("{id}:addr"), name);
        // memcached reads a UDP socket as it reads a connection.
        let state = if name.starts_with("udp:") {
            "conn_read"
        } else {
            "conn_listening"
        };
        line(&mut lines, format!("{id}:state"), state);
    }
    for info in ctx.shared.connections_registry.lock().values() {
        let id = info.id;
        line(&mut lines, format!("{id}:addr"), &info.peer);
        line(&mut lines, format!("{id}:listen_addr"), &info.listen);
        let state = if id == ctx.conn_id {
            "conn_parse_cmd"
        } else if info.reading_value.load(Ordering::Relaxed) {
            "conn_nread"
        } else {
            "conn_read"
        };
        line(&mut lines, format!("{id}:state"), state);
        let last = info.last_active.load(Ordering::Relaxed);
        line(
            &mut lines,
            format!("{id}:secs_since_last_cmd"),
            now.saturating_sub(last),
        );
    }
    lines
}
