//! memcached's `-o key[=value]` options.
//!
//! Every key memcached 1.6.18 accepts is accepted, with its value checked as
//! memcached checks it, so an existing unit file starts kura unchanged. Keys
//! that change what a client sees are honoured; those that tune memcached's
//! slab allocator, LRU segments or extstore have nothing to tune in kura and
//! are only checked.

use std::path::PathBuf;
use std::time::Duration;

use kura_server::{ServerConfig, TlsSettings};

/// Applies one `key[=value]` option.
pub fn apply(option: &str, server: &mut ServerConfig) -> Result<(), String> {
    if option.is_empty() {
        return Ok(());
    }
    let (key, value) = option.split_once('=').unwrap_or((option, ""));
    let number = |what: &str| -> Result<u64, String> {
        value
            .parse::<u64>()
            .map_err(|_| format!("-o {key}: '{value}' is not {what}"))
    };
    match key {
        "idle_timeout" => {
            let seconds = number("a number of seconds")?;
            server.idle_timeout = (seconds > 0).then(|| Duration::from_secs(seconds));
        }
        "maxconns_fast" => server.maxconns_fast = true,
        "no_maxconns_fast" => server.maxconns_fast = false,
        "lru_crawler" => server.lru_crawler = true,
        "no_lru_crawler" => server.lru_crawler = false,
        "watcher_logbuf_size" => {
            server.watcher_buffer_bytes = kib(number("a size in kilobytes")?, key)?;
        }
        "read_buf_mem_limit" => {
            server.read_buffer_limit = mib(number("a size in megabytes")?, key)?;
        }
        "ssl_chain_cert" => tls(server).chain_cert = Some(path(key, value)?),
        "ssl_key" => tls(server).key = Some(path(key, value)?),
        "ssl_ca_cert" => tls(server).ca_cert = Some(path(key, value)?),
        "ssl_ciphers" => tls(server).ciphers = Some(value.to_string()),
        "ssl_session_cache" => tls(server).session_cache = true,
        "ssl_kernel_tls" => {}
        "ssl_keyformat" => {
            let format = bounded(number("1 (PEM) or 2 (DER)")?, 2, key)?;
            if format == 0 {
                return Err("-o ssl_keyformat: 1 is PEM, 2 is DER".to_string());
            }
            tls(server).key_format = format;
        }
        "ssl_verify_mode" => {
            tls(server).verify_mode = bounded(number("a verify mode from 0 to 3")?, 3, key)?
        }
        "ssl_min_version" => {
            tls(server).min_version = bounded(number("a version from 0 to 3")?, 3, key)?
        }
        "ssl_wbuf_size" => tls(server).wbuf_kib = number("a size in kilobytes")? as usize,
        // The allocator, hashing and LRU segments kura does not have:
        // checked as memcached checks them, then nothing to do.
        "hashpower" => {
            let power = number("a number")?;
            if !(12..=64).contains(&power) {
                return Err("-o hashpower: must be between 12 and 64".to_string());
            }
            server.hash_power_init = power as u32;
        }
        "hash_algorithm" => {
            if !matches!(value, "jenkins" | "murmur3" | "xxh3") {
                return Err(format!(
                    "-o hash_algorithm: '{value}' is not jenkins, murmur3 or xxh3"
                ));
            }
        }
        "slab_automove" => {
            bounded(number("0, 1 or 2")?, 2, key)?;
        }
        "slab_automove_ratio"
        | "hot_max_factor"
        | "warm_max_factor"
        | "ext_max_frag"
        | "slab_automove_freeratio" => {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| *v >= 0.0)
                .ok_or_else(|| format!("-o {key}: '{value}' is not a number"))?;
        }
        "hot_lru_pct" | "warm_lru_pct" => {
            bounded(number("a percentage")?, 80, key)?;
        }
        "slab_automove_window"
        | "tail_repair_time"
        | "lru_crawler_sleep"
        | "lru_crawler_tocrawl"
        | "slab_chunk_max"
        | "worker_logbuf_size"
        | "resp_obj_mem_limit"
        | "sock_cookie_id"
        | "ext_page_size"
        | "ext_wbuf_size"
        | "ext_threads"
        | "ext_io_depth"
        | "ext_item_size"
        | "ext_item_age"
        | "ext_low_ttl"
        | "ext_recache_rate"
        | "ext_compact_under"
        | "ext_drop_under"
        | "ext_max_sleep" => {
            number("a number")?;
        }
        "slab_sizes" => {
            value
                .split('-')
                .all(|size| size.parse::<u64>().is_ok())
                .then_some(())
                .ok_or_else(|| format!("-o slab_sizes: '{value}' is not sizes joined by '-'"))?;
        }
        // memcached's presets: what they switch that kura has.
        "modern" => {
            server.maxconns_fast = true;
            server.lru_crawler = true;
            server.lru_maintainer = true;
            server.legacy_lru = false;
        }
        "no_modern" => {
            server.maxconns_fast = false;
            server.lru_crawler = false;
            server.lru_maintainer = false;
            server.legacy_lru = true;
        }
        // memcached's TEMP LRU: items with at most this time to live are
        // left to expire rather than evicted.
        "temporary_ttl" => server.temporary_ttl = Some(number("a number of seconds")? as u32),
        "lru_maintainer" => server.lru_maintainer = true,
        "no_lru_maintainer" => server.lru_maintainer = false,
        "ext_path" => {
            path(key, value)?;
        }
        "slab_reassign"
        | "no_slab_reassign"
        | "no_slab_automove"
        | "track_sizes"
        | "inline_ascii_resp"
        | "no_inline_ascii_resp"
        | "no_chunked_items"
        | "no_hashexpand"
        | "drop_privileges"
        | "no_drop_privileges"
        | "relaxed_privileges"
        | "ext_drop_unread" => {}
        _ => return Err(format!("-o: unknown option '{key}'")),
    }
    Ok(())
}

fn tls(server: &mut ServerConfig) -> &mut TlsSettings {
    server.tls.get_or_insert_with(|| TlsSettings {
        wbuf_kib: 16,
        min_version: 2,
        key_format: 1,
        ..TlsSettings::default()
    })
}

fn path(key: &str, value: &str) -> Result<PathBuf, String> {
    if value.is_empty() {
        return Err(format!("-o {key}: needs a file name"));
    }
    Ok(PathBuf::from(value))
}

fn bounded(value: u64, most: u64, key: &str) -> Result<u8, String> {
    if value > most {
        return Err(format!("-o {key}: {value} is above {most}"));
    }
    Ok(value as u8)
}

fn kib(value: u64, key: &str) -> Result<usize, String> {
    value
        .checked_mul(1024)
        .map(|b| b as usize)
        .ok_or_else(|| format!("-o {key}: too large"))
}

fn mib(value: u64, key: &str) -> Result<usize, String> {
    value
        .checked_mul(1024 * 1024)
        .map(|b| b as usize)
        .ok_or_else(|| format!("-o {key}: too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_memcached_documents_is_accepted() {
        for option in [
            "maxconns_fast",
            "no_maxconns_fast",
            "hashpower=16",
            "tail_repair_time=0",
            "hash_algorithm=xxh3",
            "no_lru_crawler",
            "lru_crawler_sleep=100",
            "lru_crawler_tocrawl=0",
            "read_buf_mem_limit=4",
            "no_lru_maintainer",
            "hot_lru_pct=20",
            "warm_lru_pct=40",
            "hot_max_factor=0.2",
            "warm_max_factor=2.0",
            "temporary_ttl=61",
            "idle_timeout=10",
            "slab_chunk_max=512",
            "watcher_logbuf_size=256",
            "worker_logbuf_size=64",
            "track_sizes",
            "no_hashexpand",
            "modern",
            "no_modern",
            "sock_cookie_id=3",
            "slab_automove=1",
            "slab_automove_window=30",
            "slab_automove_ratio=0.8",
            "slab_automove_freeratio=0.01",
            "slab_reassign",
            "slab_sizes=100-200-300",
            "ext_path=/tmp/x:1G",
            "ext_item_size=512",
            "ssl_chain_cert=/tmp/c.pem",
            "ssl_key=/tmp/k.pem",
            "ssl_keyformat=1",
            "ssl_verify_mode=2",
            "ssl_ciphers=HIGH",
            "ssl_ca_cert=/tmp/ca.pem",
            "ssl_wbuf_size=16",
            "ssl_session_cache",
            "ssl_kernel_tls",
            "ssl_min_version=3",
            "relaxed_privileges",
            "no_drop_privileges",
        ] {
            let mut server = ServerConfig::default();
            assert_eq!(apply(option, &mut server), Ok(()), "{option}");
        }
    }

    #[test]
    fn presets_and_hash_power_reach_the_config() {
        let mut server = ServerConfig::default();
        apply("no_modern", &mut server).unwrap();
        assert!(!server.maxconns_fast);
        assert!(!server.lru_crawler);
        assert!(!server.lru_maintainer);
        assert!(server.legacy_lru);
        apply("modern", &mut server).unwrap();
        assert!(!server.legacy_lru);
        assert!(server.maxconns_fast);
        assert!(server.lru_crawler);
        assert!(server.lru_maintainer);
        apply("hashpower=20", &mut server).unwrap();
        assert_eq!(server.hash_power_init, 20);
        assert_eq!(server.temporary_ttl, None);
        apply("temporary_ttl=61", &mut server).unwrap();
        assert_eq!(server.temporary_ttl, Some(61));
    }

    #[test]
    fn bad_values_are_refused_with_the_key_named() {
        for option in [
            "idle_timeout=soon",
            "hashpower=4",
            "hash_algorithm=md5",
            "ssl_verify_mode=7",
            "slab_automove=3",
            "no_such_thing",
            "ssl_chain_cert",
        ] {
            let mut server = ServerConfig::default();
            let error = apply(option, &mut server).unwrap_err();
            let key = option.split('=').next().unwrap();
            assert!(error.contains(key), "{option}: {error}");
        }
    }

    #[test]
    fn options_that_clients_see_are_honoured() {
        let mut server = ServerConfig::default();
        for option in [
            "idle_timeout=30",
            "no_maxconns_fast",
            "no_lru_crawler",
            "watcher_logbuf_size=8",
            "ssl_verify_mode=2",
        ] {
            apply(option, &mut server).unwrap();
        }
        assert_eq!(server.idle_timeout, Some(Duration::from_secs(30)));
        assert!(!server.maxconns_fast);
        assert!(!server.lru_crawler);
        assert_eq!(server.watcher_buffer_bytes, 8 * 1024);
        assert_eq!(server.tls.unwrap().verify_mode, 2);
    }
}
