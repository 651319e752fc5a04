//! What only the memory engine does: eviction, LRU, the sweep, memory
//! limits. memcached's semantics, shared with the disk engine, are tested in
//! `semantics.rs`.

use kura_store::memory::ITEM_OVERHEAD;
use kura_store::{
    AckFence, GetOptions, MemoryConfig, MemoryStore, ScanCursor, Store, StoreCommand, StoreMode,
    StoreOutcome,
};

fn store_with_limit(limit_bytes: usize) -> MemoryStore {
    MemoryStore::new(MemoryConfig {
        limit_bytes,
        ..MemoryConfig::default()
    })
}

/// Room for `items` values of 1,000 bytes under 4-byte keys, in a single
/// shard so the LRU order is exact.
fn one_shard_store_for(items: usize) -> MemoryStore {
    MemoryStore::new(MemoryConfig {
        limit_bytes: (1000 + 4 + ITEM_OVERHEAD) * items,
        shards: 1,
        ..MemoryConfig::default()
    })
}

fn set(store: &dyn Store, key: &[u8], value: &[u8]) -> StoreOutcome {
    store.store(
        &StoreCommand {
            mode: StoreMode::Set,
            key,
            value,
            flags: 0,
            expiry: 0,
            compare_cas: None,
            stale_if_older: false,
        },
        &AckFence::default(),
    )
}

fn get(store: &dyn Store, key: &[u8]) -> Option<Vec<u8>> {
    let mut value = None;
    store.get(
        key,
        &GetOptions::default(),
        &AckFence::default(),
        &mut |item| value = Some(item.value.to_vec()),
    );
    value
}

#[test]
fn least_recently_used_items_are_evicted_first() {
    let value = [b'v'; 1000];
    let store = one_shard_store_for(100);
    for i in 0..100u32 {
        set(&store, format!("k{i:03}").as_bytes(), &value);
    }
    // Touch the oldest ten so they become the newest.
    for i in 0..10u32 {
        assert!(get(&store, format!("k{i:03}").as_bytes()).is_some());
    }
    for i in 100..110u32 {
        set(&store, format!("k{i:03}").as_bytes(), &value);
    }
    for i in 0..10u32 {
        assert!(
            get(&store, format!("k{i:03}").as_bytes()).is_some(),
            "k{i:03} was recently used"
        );
    }
    for i in 10..20u32 {
        assert!(
            get(&store, format!("k{i:03}").as_bytes()).is_none(),
            "k{i:03} was least recently used"
        );
    }
    let stats = store.stats();
    assert_eq!(stats.evictions, 10);
    assert!(stats.bytes <= stats.limit_maxbytes);
}

/// A read does not move its item; eviction gives a read tail one more trip
/// down the list, and it goes on the next trip unless it was read again.
#[test]
fn a_read_item_gets_a_second_chance_and_only_one() {
    let value = [b'v'; 1000];
    let store = one_shard_store_for(100);
    let key = |i: u32| format!("k{i:03}").into_bytes();
    for i in 0..100 {
        set(&store, &key(i), &value);
    }
    assert!(get(&store, &key(0)).is_some());
    assert!(get(&store, &key(1)).is_some());
    // k000 and k001 go round once; k002..k091 are evicted.
    for i in 100..190 {
        set(&store, &key(i), &value);
    }
    assert_eq!(store.stats().evictions, 90);
    // Read again, k001 goes round a second time; k000 was not and goes.
    assert!(get(&store, &key(1)).is_some());
    for i in 190..200 {
        set(&store, &key(i), &value);
    }
    assert_eq!(store.stats().evictions, 100);
    assert!(get(&store, &key(1)).is_some(), "read again, so kept");
    assert!(
        get(&store, &key(0)).is_none(),
        "not read since its second chance"
    );
    assert!(
        get(&store, &key(100)).is_none(),
        "older than the second chances"
    );
    assert!(get(&store, &key(101)).is_some());
}

/// Seed 001: large values took every slab page and small ones then found no
/// memory. With one budget across sizes, small values displace old large ones.
#[test]
fn the_legacy_lru_evicts_in_write_order_whatever_was_read_recently() {
    let store = MemoryStore::new(MemoryConfig {
        limit_bytes: (1000 + 4 + ITEM_OVERHEAD) * 10,
        strict_lru: true,
        ..MemoryConfig::default()
    });
    let value = [b'v'; 1000];
    for i in 0..10 {
        set(&store, format!("k{i:03}").as_bytes(), &value);
    }
    // Read within the minute: memcached's legacy LRU does not move it.
    assert!(get(&store, b"k000").is_some());
    for i in 10..15 {
        set(&store, format!("k{i:03}").as_bytes(), &value);
    }
    for i in 0..5 {
        assert_eq!(get(&store, format!("k{i:03}").as_bytes()), None, "k{i:03}");
    }
    for i in 5..15 {
        assert!(
            get(&store, format!("k{i:03}").as_bytes()).is_some(),
            "k{i:03}"
        );
    }
    // Read over a minute after its last move, an item goes to the head.
    store.clock().advance(61);
    assert!(get(&store, b"k005").is_some());
    set(&store, b"k015", &value);
    assert!(get(&store, b"k005").is_some());
    assert_eq!(get(&store, b"k006"), None);
    assert_eq!(store.stats().evictions, 6);
}

fn set_with_ttl(store: &MemoryStore, key: &[u8], value: &[u8], seconds: i64) -> StoreOutcome {
    store.store(
        &StoreCommand {
            mode: StoreMode::Set,
            key,
            value,
            flags: 0,
            expiry: store.clock().expiry(seconds),
            compare_cas: None,
            stale_if_older: false,
        },
        &AckFence::default(),
    )
}

#[test]
fn temporary_items_are_left_to_expire_while_anything_else_can_be_evicted() {
    let store = MemoryStore::new(MemoryConfig {
        limit_bytes: (1000 + 4 + ITEM_OVERHEAD) * 10,
        shards: 1,
        temporary_ttl: Some(61),
        ..MemoryConfig::default()
    });
    let value = [b'v'; 1000];
    set_with_ttl(&store, b"temp", &value, 30);
    for i in 0..30 {
        set_with_ttl(&store, format!("k{i:03}").as_bytes(), &value, 3600);
    }
    assert!(get(&store, b"temp").is_some(), "oldest, unread, and kept");
    let stats = store.stats();
    assert_eq!(stats.evictions, 21);
    let class = stats.classes.iter().find(|c| c.items > 0).unwrap();
    assert_eq!(class.temp_items, 1);
    // Nothing but temporary items left: they are evicted rather than the
    // budget exceeded.
    for i in 0..20 {
        set_with_ttl(&store, format!("t{i:03}").as_bytes(), &value, 10);
    }
    assert_eq!(get(&store, b"temp"), None);
    assert_eq!(get(&store, b"k029"), None);
    assert!(store.stats().bytes <= ((1000 + 4 + ITEM_OVERHEAD) * 10) as u64);
}

#[test]
fn a_write_never_evicts_what_it_stored_even_with_few_items_per_shard() {
    // 256 shards, room for 20 values: most shards hold one item or none.
    let store = store_with_limit((10_000 + 4 + ITEM_OVERHEAD) * 20);
    let value = [b'v'; 10_000];
    for i in 0..200u32 {
        let key = format!("k{i:03}");
        set(&store, key.as_bytes(), &value);
        assert!(
            get(&store, key.as_bytes()).is_some(),
            "{key} was evicted at once"
        );
    }
    // Not an exact LRU across shards: what a write evicts is the oldest of a
    // few shards' tails, so the item stored just before survives it too.
    assert!(get(&store, b"k198").is_some());
}

#[test]
fn small_values_are_stored_after_large_ones_filled_the_cache() {
    let store = store_with_limit(8 << 20);
    let mut size = 5 * 1024;
    for i in 0..4000u32 {
        size = 5 * 1024 + (i as usize * 7919) % (5 * 1024);
        set(&store, format!("large:{i}").as_bytes(), &vec![b'L'; size]);
    }
    assert!(size > 5 * 1024);
    let filled = store.stats();
    assert!(
        filled.evictions > 0,
        "the large values must have filled the cache"
    );
    let small = vec![b's'; 1024];
    for i in 0..5000u32 {
        assert!(matches!(
            set(&store, format!("small:{i}").as_bytes(), &small),
            StoreOutcome::Stored { .. }
        ));
    }
    // The most recent small values must all be there.
    let recent_hits = (4000..5000u32)
        .filter(|i| get(&store, format!("small:{i}").as_bytes()).is_some())
        .count();
    assert_eq!(recent_hits, 1000);
    // And the small values overall hit far better than memcached's ~5% after calcification.
    let hits = (0..5000u32)
        .filter(|i| get(&store, format!("small:{i}").as_bytes()).is_some())
        .count();
    assert!(hits > 4000, "only {hits} of 5000 small values survived");
    let stats = store.stats();
    assert!(stats.bytes <= stats.limit_maxbytes);
}

#[test]
fn no_eviction_mode_answers_out_of_memory() {
    let store = MemoryStore::new(MemoryConfig {
        limit_bytes: 64 * 1024,
        evict: false,
        ..MemoryConfig::default()
    });
    let value = [b'v'; 1000];
    let outcomes: Vec<_> = (0..100u32)
        .map(|i| set(&store, format!("k{i}").as_bytes(), &value))
        .collect();
    assert!(outcomes.contains(&StoreOutcome::OutOfMemory));
    assert_eq!(store.stats().evictions, 0);
    assert!(
        get(&store, b"k0").is_some(),
        "nothing may be evicted under -M"
    );
}

/// Under -M a lowered limit evicts nothing either (memcached only lowers
/// its limit): the cache stays over it, and writes answer out of memory.
#[test]
fn no_eviction_mode_keeps_every_item_when_the_limit_is_lowered() {
    let store = MemoryStore::new(MemoryConfig {
        limit_bytes: 256 * 1024,
        evict: false,
        ..MemoryConfig::default()
    });
    let value = [b'v'; 1000];
    for i in 0..100u32 {
        assert!(matches!(
            set(&store, format!("k{i}").as_bytes(), &value),
            StoreOutcome::Stored { .. }
        ));
    }
    store.set_memory_limit(64 * 1024);
    assert_eq!(store.stats().evictions, 0);
    assert_eq!(store.stats().curr_items, 100);
    assert_eq!(set(&store, b"more", &value), StoreOutcome::OutOfMemory);
}

/// Under -M a write that does not fit takes the room of dead items (as
/// memcached reclaims expired ones when it allocates), so a cache full of
/// expired or flushed items takes writes again without the background
/// sweep.
#[test]
fn no_eviction_mode_reclaims_expired_and_flushed_items_for_a_write() {
    let store = MemoryStore::new(MemoryConfig {
        limit_bytes: 64 * 1024,
        evict: false,
        background_sweep: false,
        ..MemoryConfig::default()
    });
    let value = [b'v'; 1000];
    let expiry = store.clock().expiry(2);
    let mut stored = 0;
    for i in 0..200u32 {
        let outcome = store.store(
            &StoreCommand {
                mode: StoreMode::Set,
                key: format!("e{i}").as_bytes(),
                value: &value,
                flags: 0,
                expiry,
                compare_cas: None,
                stale_if_older: false,
            },
            &AckFence::default(),
        );
        stored += usize::from(matches!(outcome, StoreOutcome::Stored { .. }));
    }
    assert!(stored > 0 && stored < 200, "full after {stored}");
    assert_eq!(set(&store, b"new", &value), StoreOutcome::OutOfMemory);
    store.clock().advance(3);
    assert!(matches!(
        set(&store, b"new", &value),
        StoreOutcome::Stored { .. }
    ));
    // Full of live items again, then flushed.
    let refused = (0..200u32)
        .map(|i| set(&store, format!("l{i}").as_bytes(), &value))
        .any(|outcome| outcome == StoreOutcome::OutOfMemory);
    assert!(refused, "filled again");
    store.flush_all(0, &AckFence::default());
    assert!(matches!(
        set(&store, b"after", &value),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(store.stats().evictions, 0);
}

#[test]
fn items_expire_and_are_reclaimed_in_the_background() {
    let store = store_with_limit(1 << 20);
    let expiry = store.clock().expiry(10);
    for i in 0..100u32 {
        store.store(
            &StoreCommand {
                mode: StoreMode::Set,
                key: format!("t{i}").as_bytes(),
                value: b"v",
                flags: 0,
                expiry,
                compare_cas: None,
                stale_if_older: false,
            },
            &AckFence::default(),
        );
    }
    set(&store, b"forever", b"v");
    assert!(get(&store, b"t1").is_some());
    store.clock().advance(11);
    assert!(get(&store, b"t1").is_none());
    // The other 99 were never read again: maintenance must free them.
    let mut removed = 0;
    for _ in 0..10 {
        removed += store.maintain();
    }
    assert_eq!(removed, 99);
    let stats = store.stats();
    assert_eq!(stats.curr_items, 1);
    assert_eq!(stats.expired_unfetched, 99);
    assert_eq!(stats.reclaimed, 99, "as memcached's LRU maintainer counts");
    assert_eq!(stats.get_expired, 1, "the read of t1 found it expired");
    assert!(get(&store, b"forever").is_some());
}

#[test]
fn the_sweep_runs_only_once_something_can_have_expired() {
    let store = store_with_limit(1 << 20);
    for i in 0..100u32 {
        set(&store, format!("k{i}").as_bytes(), b"v");
    }
    store.maintain();
    assert_eq!(store.stats().crawler_items_checked, 0, "nothing expires");
    let expiry = store.clock().expiry(5);
    store.store(
        &StoreCommand {
            mode: StoreMode::Set,
            key: b"short",
            value: b"v",
            flags: 0,
            expiry,
            compare_cas: None,
            stale_if_older: false,
        },
        &AckFence::default(),
    );
    store.maintain();
    assert_eq!(store.stats().crawler_items_checked, 0, "not expired yet");
    store.clock().advance(6);
    assert_eq!(store.maintain(), 1);
    assert_eq!(store.stats().crawler_items_checked, 101);
    store.maintain();
    assert_eq!(
        store.stats().crawler_items_checked,
        101,
        "nothing left to expire"
    );
}

#[test]
fn hash_power_level_grows_as_memcached_grows_its_table_and_never_shrinks() {
    let store = store_with_limit(64 << 20);
    assert_eq!(store.stats().hash_power_level, 16);
    // memcached expands once the items pass 1.5 per bucket.
    let threshold = (1usize << 16) * 3 / 2;
    for i in 0..threshold {
        set(&store, format!("k{i}").as_bytes(), b"");
    }
    assert_eq!(store.stats().hash_power_level, 16);
    set(&store, b"one more", b"");
    assert_eq!(store.stats().hash_power_level, 17);
    store.flush_all(0, &AckFence::default());
    store.maintain();
    assert_eq!(store.stats().hash_power_level, 17);
}

#[test]
fn memory_limit_can_shrink_at_run_time() {
    let store = store_with_limit(4 << 20);
    for i in 0..2000u32 {
        set(&store, format!("k{i}").as_bytes(), &[b'v'; 1000]);
    }
    store.set_memory_limit(1 << 20);
    let stats = store.stats();
    assert!(stats.bytes <= 1 << 20);
    assert!(stats.evictions > 0);
}

/// A flush leaves the hash tables full of tombstones that every miss would
/// probe through; maintenance must rehash them smaller.
#[test]
fn maintenance_shrinks_tables_emptied_by_a_flush() {
    let store = store_with_limit(64 << 20);
    for i in 0..50_000u32 {
        set(&store, format!("k{i}").as_bytes(), b"v");
    }
    let full = store.stats().hash_bytes;
    store.flush_all(0, &AckFence::default());
    while store.maintain() > 0 {}
    let stats = store.stats();
    assert_eq!(stats.curr_items, 0);
    assert!(
        stats.hash_bytes * 4 < full,
        "tables kept {} of {full} bytes",
        stats.hash_bytes
    );
}

/// A scan in parts looks at a bounded number of entries a part: after a
/// flush left every slot dead, each part of one item looks at 16 slots and
/// finds nothing, and the walk still ends.
#[test]
fn a_part_of_a_scan_looks_at_a_bounded_number_of_dead_slots() {
    let store = one_shard_store_for(200);
    for i in 0..160 {
        assert!(matches!(
            set(&store, format!("k{i:03}").as_bytes(), b"v"),
            StoreOutcome::Stored { .. }
        ));
    }
    store.flush_all(0, &AckFence::default());
    let (mut parts, mut seen) = (0, 0);
    let mut at = Some(ScanCursor::START);
    while let Some(from) = at {
        at = store.scan_part(&from, 1, &mut |_| seen += 1).expect("read");
        parts += 1;
    }
    assert_eq!(seen, 0);
    assert_eq!(parts, 160usize.div_ceil(kura_store::scan_examined(1)));
}
