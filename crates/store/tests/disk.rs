//! The disk engine through the `Store` trait: persistence, expiry, flush.

use kura_store::{
    AckFence, DeleteCommand, DeleteOutcome, DiskConfig, DiskStore, GetOptions, LogRetention, Store,
    StoreCommand, StoreMode, StoreOutcome, SyncPolicy,
};

mod common;

use common::{get, open_with as open};

fn set(store: &dyn Store, key: &[u8], value: &[u8], expiry: u32) -> StoreOutcome {
    store.store(
        &StoreCommand {
            mode: StoreMode::Set,
            key,
            value,
            flags: 9,
            expiry,
            compare_cas: None,
            stale_if_older: false,
        },
        &AckFence::default(),
    )
}

/// Whether a plain get (which counts as a read) finds the item read before.
fn fetched_before(store: &dyn Store, key: &[u8]) -> Option<bool> {
    let mut seen = None;
    store.get(
        key,
        &GetOptions::default(),
        &AckFence::default(),
        &mut |item| seen = Some(item.fetched_before),
    );
    seen
}

#[test]
fn items_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let cas = {
        let store = open(dir.path(), SyncPolicy::Always);
        set(&store, b"a", b"one", 0);
        set(&store, b"b", b"two", 0);
        assert_eq!(
            store.delete(b"b", &DeleteCommand::default(), &AckFence::default()),
            DeleteOutcome::Deleted
        );
        get(&store, b"a").unwrap().2
    };
    let store = open(dir.path(), SyncPolicy::Always);
    assert_eq!(get(&store, b"a"), Some((b"one".to_vec(), 9, cas)));
    assert_eq!(get(&store, b"b"), None);
    let StoreOutcome::Stored { cas: next } = set(&store, b"c", b"x", 0) else {
        panic!("not stored")
    };
    assert!(next > cas, "CAS values continue across reopening");
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    assert_eq!(store.stats().curr_items, 2);
}

#[test]
fn expired_items_are_reclaimed_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::None);
    let expiry = store.clock().expiry(10);
    for i in 0..500u32 {
        set(&store, format!("t{i}").as_bytes(), b"v", expiry);
    }
    set(&store, b"forever", b"v", 0);
    assert!(get(&store, b"t1").is_some());
    store.clock().advance(11);
    assert!(get(&store, b"t1").is_none());
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    let mut removed = 0;
    while let n @ 1.. = store.maintain() {
        removed += n;
    }
    assert_eq!(removed, 500, "every expired item, read after expiry or not");
    assert_eq!(store.stats().curr_items, 1);
    assert!(get(&store, b"forever").is_some());
    let stats = store.stats();
    assert_eq!(stats.get_expired, 1, "the read of t1 after expiry");
    // As memcached's LRU maintainer counts what it pulls.
    assert_eq!(stats.reclaimed, 500);
    assert_eq!(stats.classes.iter().map(|c| c.reclaimed).sum::<u64>(), 500);
}

#[test]
fn an_item_stored_already_expired_is_found_expired() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::None);
    set(&store, b"old", b"v", 0);
    // A past Unix time, as memcached's exptime over 30 days is read.
    set(&store, b"old", b"v", store.clock().from_unix(1_000_000));
    assert!(get(&store, b"old").is_none());
    let stats = store.stats();
    assert_eq!((stats.get_expired, stats.get_flushed), (1, 0));
}

#[test]
fn a_crawl_removes_the_expired_items_of_the_classes_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        sync: SyncPolicy::None,
        reserve_bytes: 0,
        background_expiry: false,
        ..DiskConfig::new(dir.path())
    })
    .unwrap();
    let expiry = store.clock().expiry(10);
    for i in 0..20u32 {
        set(&store, format!("s{i}").as_bytes(), b"v", expiry);
        set(&store, format!("l{i}").as_bytes(), &[b'v'; 2000], expiry);
    }
    set(&store, b"forever", b"v", 0);
    store.clock().advance(11);
    assert_eq!(store.maintain(), 0, "no background expiry");
    let small = store.stats().classes.first().unwrap().class;
    assert_eq!(store.crawl(&|class| class == small), 20);
    let stats = store.stats();
    assert_eq!(stats.crawler_reclaimed, 20);
    assert_eq!(stats.curr_items, 21, "the large ones wait for their crawl");
    let class = stats.classes.iter().find(|c| c.class == small).unwrap();
    assert_eq!((class.items, class.crawler_reclaimed), (1, 20));
    assert_eq!(store.crawl(&|_| true), 20);
    assert_eq!(store.stats().curr_items, 1);
}

#[test]
fn a_flush_gives_back_the_space_of_the_items_it_covers() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::Batch);
    for key in [&b"a"[..], b"b", b"c"] {
        set(&store, key, b"1", 0);
    }
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    assert_eq!(store.stats().reclaimed, 0);
    store.flush_all(0, &AckFence::default());
    set(&store, b"a", b"2", 0);
    let stats = store.stats();
    assert_eq!(
        stats.reclaimed, 3,
        "as memcached counts a flushed item reused"
    );
    assert_eq!(stats.curr_items, 1);
}

/// LMDB reuses the pages transaction N frees from transaction N + 2 on. A
/// round that takes a flush and, after it, writes that fit in the map only
/// in the flushed items' pages fails once; its retry commits the flush
/// first, then one more small transaction, and the writes then go where
/// the flushed items were. Once the log holds more than the map has room
/// for, writes are refused until the round has freed it (a busy machine
/// checks the room among the writes), and the client sends them again.
#[test]
fn writes_after_a_flush_that_fit_only_in_its_room_are_applied_when_retried() {
    let dir = tempfile::tempdir().unwrap();
    let config = || DiskConfig {
        map_size: 4 << 20,
        sync: SyncPolicy::None,
        reserve_bytes: 0,
        ..DiskConfig::new(dir.path())
    };
    let store = DiskStore::open(config()).unwrap();
    // Below `log_values_from`: the values live in LMDB, about half its map.
    let value = [b'v'; 900];
    const EACH: usize = 2_200;
    for i in 0..EACH {
        set(&store, format!("old{i}").as_bytes(), &value, 0);
    }
    // A round just ran: the next one comes when asked, not by the clock.
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    store.flush_all(0, &AckFence::default());
    let refused_until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for i in 0..EACH {
        let key = format!("new{i}");
        while !matches!(
            set(&store, key.as_bytes(), &value, 0),
            StoreOutcome::Stored { .. }
        ) {
            assert!(
                std::time::Instant::now() < refused_until,
                "{key} refused for good"
            );
            store.maintain(); // the server's tick: checks the space left
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    // `stats` asks for the round.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.stats().curr_items != EACH as u64
        || engine_stat(&store, "disk_applied_writes") < 2 * EACH as u64
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the writes after the flush never reached LMDB ({} failed commits)",
            engine_stat(&store, "disk_failed_commits")
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        engine_stat(&store, "disk_failed_commits"),
        1,
        "the round fails once (else it fitted at once, and the test shows nothing); its retry does not"
    );
    assert_eq!(
        store.stats().reclaimed,
        EACH as u64,
        "each flushed item counts once, not once per try"
    );
    store.maintain(); // checks the space left
    assert_eq!(engine_stat(&store, "disk_out_of_space"), 0);
    assert!(matches!(
        set(&store, b"after", b"v", 0),
        StoreOutcome::Stored { .. }
    ));
    drop(store);
    let store = DiskStore::open(config()).unwrap();
    assert_eq!(
        get(&store, b"new0").map(|found| found.0),
        Some(value.to_vec())
    );
    assert_eq!(get(&store, b"old0"), None);
    assert_eq!(store.stats().curr_items, EACH as u64 + 1);
}

/// memcached clears a flushed item when it next meets it, and counts the
/// read that does in `get_flushed`. The disk engine clears a flush's items
/// in its next round, not as soon as the flush is in the log, so a read
/// right after an acknowledged `flush_all` counts the same way.
#[test]
fn a_read_after_an_acknowledged_flush_counts_in_get_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::Batch);
    set(&store, b"a", b"1", 0);
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    let fence = AckFence::default();
    store.flush_all(0, &fence);
    let ticket = fence.take().expect("a flush waits for the log");
    store.request_append();
    while store.ack_state(ticket) == kura_store::AckState::Waiting {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Time for a round, had the flush's append asked for one.
    std::thread::sleep(std::time::Duration::from_millis(100));
    // Read often enough that the read cache would admit the record.
    for _ in 0..3 {
        assert!(get(&store, b"a").is_none());
    }
    assert_eq!(store.stats().get_flushed, 3);
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    assert!(get(&store, b"a").is_none());
    assert_eq!(
        store.stats().get_flushed,
        3,
        "once the round cleared it, the key is a plain miss (no dead record was cached)"
    );
}

/// A flushed item an `add` writes over before the round that applies the
/// flush counts once in `reclaimed`: when that round clears it.
#[test]
fn an_item_flushed_and_written_over_counts_once_as_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::Batch);
    for key in [&b"a"[..], b"b", b"c"] {
        set(&store, key, b"1", 0);
    }
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    store.flush_all(0, &AckFence::default());
    let add = StoreCommand {
        mode: StoreMode::Add,
        key: b"a",
        value: b"2",
        flags: 0,
        expiry: 0,
        compare_cas: None,
        stale_if_older: false,
    };
    assert!(matches!(
        store.store(&add, &AckFence::default()),
        StoreOutcome::Stored { .. }
    ));
    let stats = store.stats();
    assert_eq!((stats.reclaimed, stats.curr_items), (3, 1));
}

/// A store whose item "c" is in LMDB and whose touch is pending: a record
/// that carries the fetched bit (a touch reads the item).
fn a_touch_pending(dir: &std::path::Path) -> DiskStore {
    let store = open(dir, SyncPolicy::Batch);
    set(&store, b"c", b"1", 0);
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    store.touch(b"c", 0, &AckFence::default());
    store
}

/// A pending record that carries the fetched bit (a touch's) and is read
/// before its round goes into the read cache when the round retires it,
/// as a record whose first read the access table holds does.
#[test]
fn a_pending_record_with_the_fetched_bit_read_before_its_round_is_cached() {
    let dir = tempfile::tempdir().unwrap();
    let store = a_touch_pending(dir.path());
    assert_eq!(fetched_before(&store, b"c"), Some(true));
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    assert_eq!(engine_stat(&store, "disk_read_cache_items"), 1);
}

/// The read cache holds no dead record: one a flush covered before its
/// round retired it stays out, whatever it carries.
#[test]
fn a_pending_record_a_flush_covers_is_not_cached_when_its_round_retires_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = a_touch_pending(dir.path());
    store.flush_all(0, &AckFence::default());
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    assert_eq!(engine_stat(&store, "disk_read_cache_items"), 0);
    assert_eq!(fetched_before(&store, b"c"), None);
}

/// The per-class tallies LMDB keeps are counted under the size classes of
/// the time: a restart under other classes (`-I`, `-f`, `-n` changed)
/// counts them again, so `stats` lists only classes that exist and
/// deletes bring the counts back to nothing.
#[test]
fn a_restart_under_other_size_classes_counts_the_items_again() {
    let dir = tempfile::tempdir().unwrap();
    let open_under = |classes: kura_store::SizeClasses| {
        DiskStore::open(DiskConfig {
            map_size: 64 << 20,
            reserve_bytes: 0,
            classes,
            ..DiskConfig::new(dir.path())
        })
        .expect("opens")
    };
    let sizes = [10, 300, 5_000, 200_000, 1_500_000];
    let store = open_under(kura_store::SizeClasses::new(48, 1.25, 2 << 20));
    for (n, &len) in sizes.iter().enumerate() {
        set(&store, format!("k{n}").as_bytes(), &vec![b'v'; len], 0);
    }
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    let before = store.stats();
    drop(store);

    let classes = kura_store::SizeClasses::new(48, 2.0, 1 << 20);
    let count = classes.len();
    let store = open_under(classes);
    let stats = store.stats();
    assert_eq!(
        (stats.curr_items, stats.bytes),
        (before.curr_items, before.bytes)
    );
    assert!(stats.classes.iter().all(|class| class.class <= count));
    assert_eq!(
        stats.classes.iter().map(|class| class.items).sum::<u64>(),
        sizes.len() as u64
    );
    for n in 0..sizes.len() {
        let key = format!("k{n}");
        let outcome = store.delete(
            key.as_bytes(),
            &DeleteCommand::default(),
            &AckFence::default(),
        );
        assert_eq!(outcome, DeleteOutcome::Deleted);
    }
    let stats = store.stats();
    assert_eq!((stats.curr_items, stats.bytes), (0, 0));
    // The classes stay listed for the deletes they counted, holding nothing.
    assert!(
        (stats.classes.iter()).all(|class| (class.items, class.bytes) == (0, 0)),
        "{:?}",
        stats.classes
    );
    let deletes: u64 = stats.classes.iter().map(|c| c.commands.delete_hits).sum();
    assert_eq!(deletes, sizes.len() as u64);
}

/// Tallies that cannot be read are counted again from the items, not taken
/// as none.
#[test]
fn damaged_class_tallies_are_counted_again_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::Batch);
    for key in [&b"a"[..], b"b", b"c"] {
        set(&store, key, b"1", 0);
    }
    drop(store);
    common::edit_lmdb(dir.path(), |edit| {
        edit.meta
            .put(&mut edit.txn, b"classes", b"damaged")
            .unwrap();
    });
    let store = open(dir.path(), SyncPolicy::Batch);
    let stats = store.stats();
    assert_eq!(stats.curr_items, 3);
    assert_eq!(
        stats.classes.iter().map(|class| class.items).sum::<u64>(),
        3
    );
}

#[test]
fn sync_policies_parse() {
    assert_eq!("always".parse(), Ok(SyncPolicy::Always));
    assert_eq!("batch".parse(), Ok(SyncPolicy::Batch));
    assert_eq!("none".parse(), Ok(SyncPolicy::None));
    assert_eq!(
        "interval=1s".parse(),
        Ok(SyncPolicy::Interval(std::time::Duration::from_secs(1)))
    );
    assert_eq!(
        "interval=250ms".parse(),
        Ok(SyncPolicy::Interval(std::time::Duration::from_millis(250)))
    );
    assert!("interval=".parse::<SyncPolicy>().is_err());
    assert!("sometimes".parse::<SyncPolicy>().is_err());
}

/// A read shows at once that its item was read (`accesses.rs`, in memory).
/// The fetched bit reaches LMDB only with a record applied after its read
/// (here: at the clean shutdown), so only such an item is still known as
/// read after reopening; a key stored again is a new item, unread.
#[test]
fn first_reads_show_at_once_and_persist_with_the_record_applied_after_them() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path(), SyncPolicy::Batch);
        set(&store, b"applied", b"1", 0);
        set(&store, b"unread", b"2", 0);
        set(&store, b"again", b"1", 0);
        assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
        assert_eq!(fetched_before(&store, b"applied"), Some(false));
        assert_eq!(fetched_before(&store, b"applied"), Some(true));
        assert_eq!(fetched_before(&store, b"again"), Some(false));
        set(&store, b"again", b"2", 0);
        assert_eq!(fetched_before(&store, b"again"), Some(false));
        assert_eq!(fetched_before(&store, b"again"), Some(true));
    }
    let store = open(dir.path(), SyncPolicy::Batch);
    let no_bump = GetOptions {
        no_bump: true,
        ..GetOptions::default()
    };
    for (key, expected) in [
        (&b"applied"[..], false),
        (b"unread", false),
        (b"again", true),
    ] {
        let mut seen = None;
        store.get(key, &no_bump, &AckFence::default(), &mut |item| {
            seen = Some(item.fetched_before)
        });
        assert_eq!(seen, Some(expected), "{}", String::from_utf8_lossy(key));
    }
}

/// Reads `k{i}` for each `i`, checking whether each was read before.
fn read_each(store: &DiskStore, keys: std::ops::Range<usize>, read_before: bool) {
    for i in keys {
        let key = format!("k{i}");
        assert_eq!(
            fetched_before(store, key.as_bytes()),
            Some(read_before),
            "{key}"
        );
    }
}

/// A read served from the read cache knows the item was read before, and
/// a round of writes in between changes nothing.
#[test]
fn a_cached_record_shows_its_first_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::None);
    set(&store, b"k", b"v", 0);
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    assert_eq!(fetched_before(&store, b"k"), Some(false), "the first read");
    assert_eq!(fetched_before(&store, b"k"), Some(true), "it caches it");
    set(&store, b"other", b"w", 0);
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    assert_eq!(
        fetched_before(&store, b"k"),
        Some(true),
        "read from the cache after a round"
    );
}

/// After a flush, the items stored again under the same keys are unread.
#[test]
fn items_stored_after_a_flush_are_unread() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::None);
    for i in 0..30 {
        set(&store, format!("k{i}").as_bytes(), b"v", 0);
    }
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    read_each(&store, 0..30, false);
    read_each(&store, 0..30, true);
    store.flush_all(0, &AckFence::default());
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    for i in 0..30 {
        set(&store, format!("k{i}").as_bytes(), b"v", 0);
    }
    read_each(&store, 0..30, false);
}

/// A first read counts in a scan (`lru_crawler metadump`'s `fetch=`) and
/// when its item expires (`expired_unfetched`), though LMDB's record does
/// not have the bit.
#[test]
fn a_first_read_counts_in_scans_and_at_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        reserve_bytes: 0,
        background_expiry: false,
        ..DiskConfig::new(dir.path())
    })
    .expect("opens");
    let expiry = store.clock().expiry(10);
    for i in 0..4 {
        set(&store, format!("k{i}").as_bytes(), b"v", expiry);
    }
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    read_each(&store, 0..2, false);
    let mut fetched = std::collections::BTreeMap::new();
    store.scan(&mut |item| {
        fetched.insert(String::from_utf8_lossy(item.key).into_owned(), item.fetched);
    });
    let read: Vec<&str> = fetched
        .iter()
        .filter(|(_, &was_read)| was_read)
        .map(|(key, _)| key.as_str())
        .collect();
    assert_eq!(read, ["k0", "k1"]);
    store.clock().advance(11);
    assert_eq!(store.crawl(&|_| true), 4);
    assert_eq!(store.stats().expired_unfetched, 2, "k2 and k3 only");
}

/// Reads served from the read cache never go back in time: counters that
/// only grow are read concurrently with their increments and commits, and
/// no reader ever sees one shrink.
#[test]
fn cached_reads_never_go_back_while_writes_commit() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), SyncPolicy::None);
    const KEYS: usize = 8;
    const INCREMENTS: u64 = 3000;
    let keys: Vec<Vec<u8>> = (0..KEYS).map(|i| format!("c{i}").into_bytes()).collect();
    for key in &keys {
        set(&store, key, b"0", 0);
    }
    let read = |key: &[u8]| -> u64 {
        let (value, _, _) = get(&store, key).expect("the counter exists");
        std::str::from_utf8(&value).unwrap().trim().parse().unwrap()
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for key in &keys {
            let store = &store;
            scope.spawn(move || {
                for _ in 0..INCREMENTS {
                    let outcome = store.arith(
                        key,
                        &kura_store::ArithCommand {
                            decrement: false,
                            delta: 1,
                            compare_cas: None,
                            vivify: None,
                            touch: None,
                        },
                        &AckFence::default(),
                    );
                    assert!(matches!(outcome, kura_store::ArithOutcome::Value { .. }));
                }
            });
        }
        for _ in 0..2 {
            scope.spawn(|| {
                let mut seen = [0u64; KEYS];
                let mut reads = 0u64;
                while !done.load(Ordering::Relaxed) || reads < 1000 {
                    for (i, key) in keys.iter().enumerate() {
                        let now = read(key);
                        assert!(now >= seen[i], "{} went from {} to {now}", i, seen[i]);
                        seen[i] = now;
                        reads += 1;
                    }
                }
            });
        }
        // Ends the readers once every increment is in.
        scope.spawn(|| {
            while keys.iter().any(|key| read(key) < INCREMENTS) {
                std::thread::yield_now();
            }
            done.store(true, Ordering::Relaxed);
        });
    });
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    for key in &keys {
        assert_eq!(read(key), INCREMENTS);
    }
}

/// The journal's segment files in `dir`.
fn segment_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    files.sort();
    files
}

/// A segment's age runs from its last append, across restarts: history
/// last written an hour ago, kept by a 2-hour retention through a restart,
/// goes under a 30-minute one once the server is back, rather than being
/// kept another 30 minutes from a restart (opening the journal gave back
/// the segments' reserved blocks, which marked every one modified).
#[test]
fn retention_by_age_counts_from_the_last_append_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let retention = |minutes: u64| DiskConfig {
        map_size: 64 << 20,
        sync: SyncPolicy::Batch,
        reserve_bytes: 0,
        log_retention: LogRetention {
            max_age: Some(std::time::Duration::from_secs(minutes * 60)),
            max_bytes: None,
        },
        ..DiskConfig::new(dir.path())
    };
    let config = retention(30);
    let store = DiskStore::open(config.clone()).unwrap();
    for key in 0..100 {
        set(&store, format!("k{key}").as_bytes(), b"small", 0);
    }
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    drop(store);
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let old = segment_files(dir.path());
    assert!(!old.is_empty(), "the writes left journal segments");
    for path in &old {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(an_hour_ago).unwrap();
    }

    // A restart that keeps the history (and the segment it appends to
    // is left holding its reserved blocks, as after a crash).
    let store = DiskStore::open(retention(120)).unwrap();
    set(&store, b"between", b"restarts", 0);
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    drop(store);
    assert!(
        old.iter().all(|path| path.exists()),
        "a 2-hour retention keeps them"
    );

    let store = DiskStore::open(config).unwrap();
    // A round after the restart lets go of the history past retention.
    set(&store, b"after", b"restart", 0);
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while segment_files(dir.path())
        .iter()
        .any(|path| old.contains(path))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "segments last written an hour ago are still kept: {:?}",
            segment_files(dir.path())
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for key in 0..100 {
        assert_eq!(
            get(&store, format!("k{key}").as_bytes()).unwrap().0,
            b"small"
        );
    }
    assert_eq!(get(&store, b"after").unwrap().0, b"restart");
}

fn engine_stat(store: &dyn Store, name: &str) -> u64 {
    store
        .engine_stats()
        .into_iter()
        .find(|(stat, _)| *stat == name)
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or_else(|| panic!("no engine stat {name}"))
}

/// A segment with a damaged record cannot be compacted: it is left, and
/// the others are compacted meanwhile (it was chosen again and again, and
/// no other segment was ever compacted).
#[test]
fn a_segment_that_cannot_be_compacted_does_not_stop_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        sync: SyncPolicy::Batch,
        reserve_bytes: 0,
        pending_limit: 1 << 20,
        log_retention: LogRetention::NOTHING,
        ..DiskConfig::new(dir.path())
    })
    .unwrap();
    let large = |tag: &str| tag.bytes().cycle().take(4096).collect::<Vec<u8>>();
    let newest_segment = || {
        let mut numbers: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|entry| entry.file_name().into_string().unwrap())
            .filter(|name| name.starts_with("journal-"))
            .collect();
        numbers.sort();
        // The current segment is the last; the one just applied before it.
        dir.path().join(&numbers[numbers.len() - 2])
    };
    // Two segments of 100 large values each, most of each then overwritten
    // with small values (which LMDB holds): mostly garbage. The first is
    // damaged throughout before (its records fail their checksums), and is
    // the emptier, so it is the first chosen.
    let mut segments = Vec::new();
    for (batch, overwritten) in [("a", 90), ("b", 80)] {
        for n in 0..100 {
            set(&store, format!("{batch}{n}").as_bytes(), &large(batch), 0);
        }
        store.wait_until_all_applied();
        let segment = newest_segment();
        if batch == "a" {
            let mut bytes = std::fs::read(&segment).unwrap();
            for at in (100..bytes.len()).step_by(512) {
                bytes[at] ^= 0xff;
            }
            std::fs::write(&segment, &bytes).unwrap();
        }
        segments.push(segment);
        for n in 0..overwritten {
            set(&store, format!("{batch}{n}").as_bytes(), b"small", 0);
        }
        store.wait_until_all_applied();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while segments[1].exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the intact segment was never compacted ({} compactions)",
            engine_stat(&store, "disk_compactions")
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(segments[0].exists(), "the damaged segment is left");
    for n in 80..100 {
        let found = get(&store, format!("b{n}").as_bytes()).map(|f| f.0);
        assert_eq!(found, Some(large("b")), "b{n}");
    }
    assert_eq!(engine_stat(&store, "disk_poisoned"), 0);
}

/// Large values stay in the journal, and LMDB points to them: they read
/// back before and after their round, and across reopening; overwriting
/// them makes garbage that compaction moves the live ones out of, so the
/// journal stays near what is live.
#[test]
fn large_values_live_in_the_journal_which_compaction_keeps_small() {
    let dir = tempfile::tempdir().unwrap();
    let config = DiskConfig {
        map_size: 64 << 20,
        sync: SyncPolicy::Batch,
        reserve_bytes: 0,
        // Rounds of 64 KiB: compaction starts past 256 KiB of garbage.
        pending_limit: 1 << 20,
        // Compaction works on history past retention: keep none.
        log_retention: LogRetention::NOTHING,
        ..DiskConfig::new(dir.path())
    };
    const KEYS: usize = 100;
    const VALUE_LEN: usize = 4096;
    let value = |key: usize, round: usize| {
        let tag = format!("{key}:{round};");
        tag.bytes().cycle().take(VALUE_LEN).collect::<Vec<u8>>()
    };
    let store = DiskStore::open(config.clone()).unwrap();
    const ROUNDS: usize = 30;
    // Key 0 is written once, odd keys every third round: old segments keep
    // a few live values, which compaction moves.
    let mut newest = vec![0; KEYS];
    let written = std::sync::atomic::AtomicBool::new(false);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        // Reads race with rounds, compaction and segment removal: every
        // key, once written, reads back as one of its versions.
        scope.spawn(|| {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                if !written.load(std::sync::atomic::Ordering::Acquire) {
                    std::thread::yield_now();
                    continue;
                }
                for key in 0..KEYS {
                    let found = get(&store, format!("k{key}").as_bytes()).map(|f| f.0);
                    let found = found.unwrap_or_else(|| panic!("k{key} missing"));
                    let version = (0..ROUNDS).find(|&round| found == value(key, round));
                    assert!(version.is_some(), "k{key} read as no version of it");
                    reads += 1;
                }
            }
            assert!(reads > 0);
        });
        // A failed assertion below must end the test, not leave the reader
        // spinning while the scope waits for it.
        struct StopReader<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopReader<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Release);
            }
        }
        let _stop_reader = StopReader(&done);
        for round in 0..ROUNDS {
            for (key, newest) in newest.iter_mut().enumerate() {
                if round == 0 || (key > 0 && (key % 2 == 0 || round % 3 == 0)) {
                    set(&store, format!("k{key}").as_bytes(), &value(key, round), 0);
                    *newest = round;
                }
            }
            written.store(true, std::sync::atomic::Ordering::Release);
            // A small value stays in LMDB.
            set(&store, b"small", format!("{round}").as_bytes(), 0);
            assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
            for key in [0, KEYS / 2, KEYS - 1] {
                let found = get(&store, format!("k{key}").as_bytes()).map(|f| f.0);
                assert_eq!(
                    found,
                    Some(value(key, newest[key])),
                    "k{key} after round {round}"
                );
            }
        }
        // Let the reader see compaction at work too.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while engine_stat(&store, "disk_compactions") == 0 {
            assert!(std::time::Instant::now() < deadline, "no compaction");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        done.store(true, std::sync::atomic::Ordering::Release);
    });
    // Compaction runs between rounds; garbage may stay up to what is live
    // (or 256 KiB), plus the segment being written. (A move makes a record
    // 16 bytes longer, so what is live grows a little as it goes.)
    let bound = 3 * engine_stat(&store, "disk_journal_live_bytes") + (256 << 10);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while engine_stat(&store, "disk_compactions") == 0
        || engine_stat(&store, "disk_journal_bytes") > bound
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the journal holds {} bytes (bound {bound}) after {} compactions",
            engine_stat(&store, "disk_journal_bytes"),
            engine_stat(&store, "disk_compactions"),
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let written = (ROUNDS * KEYS * VALUE_LEN) as u64;
    assert!(bound < written / 4);
    // Compaction stops once the garbage left is less than what is live:
    // the live bytes settle (a slow machine may still be moving some).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut live = engine_stat(&store, "disk_journal_live_bytes");
    loop {
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let now = engine_stat(&store, "disk_journal_live_bytes");
        if now == live {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "compaction never settles"
        );
        live = now;
    }
    assert!(
        live >= (KEYS * VALUE_LEN) as u64 && live < 2 * (KEYS * VALUE_LEN) as u64,
        "live {live}"
    );
    for (key, &newest) in newest.iter().enumerate() {
        let found = get(&store, format!("k{key}").as_bytes()).map(|f| f.0);
        assert_eq!(found, Some(value(key, newest)), "k{key}");
    }
    drop(store);
    let store = DiskStore::open(config).unwrap();
    for (key, &newest) in newest.iter().enumerate() {
        let found = get(&store, format!("k{key}").as_bytes()).map(|f| f.0);
        assert_eq!(found, Some(value(key, newest)), "k{key} after reopening");
    }
    assert_eq!(get(&store, b"small").map(|f| f.0), Some(b"29".to_vec()));
    assert_eq!(engine_stat(&store, "disk_journal_live_bytes"), live);
    assert_eq!(store.stats().curr_items, KEYS as u64 + 1);
    assert_eq!(
        store.delete(b"k0", &DeleteCommand::default(), &AckFence::default()),
        DeleteOutcome::Deleted
    );
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    let k0 = journal_frame_len(b"k0", VALUE_LEN);
    let after = engine_stat(&store, "disk_journal_live_bytes");
    assert!(
        after == live - k0 || after == live - k0 - 16,
        "deleting k0 ({k0} bytes, or 16 more if it was moved) took live from {live} to {after}"
    );
}

/// The bytes of a journal put of a `value_len` value under `key`: frame
/// (8), kind and key length (3), key, header (17), value.
fn journal_frame_len(key: &[u8], value_len: usize) -> u64 {
    (8 + 3 + key.len() + 17 + value_len) as u64
}

/// Bytes of the files in `dir` named `journal-*.log`, and how many of
/// them are in the page cache (`mincore` over a read-only mapping).
fn journal_bytes_cached(dir: &std::path::Path) -> (u64, u64) {
    use std::os::fd::AsRawFd;
    let (mut total, mut cached) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if !entry.file_name().to_string_lossy().starts_with("journal-") {
            continue;
        }
        let file = std::fs::File::open(entry.path()).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        if len == 0 {
            continue;
        }
        let mut resident = vec![0u8; len.div_ceil(4096)];
        // SAFETY: a read-only mapping of the whole file, only passed to
        // mincore (which reads no page) and unmapped before returning.
        #[allow(unsafe_code)]
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            assert_eq!(libc::mincore(map, len, resident.as_mut_ptr()), 0);
            libc::munmap(map, len);
        }
        total += len as u64;
        cached += 4096 * resident.iter().filter(|page| **page & 1 == 1).count() as u64;
    }
    (total, cached)
}

/// The log keeps only its newest bytes (a quarter of `-m`) in the page
/// cache once they are on disk; values behind them read back from disk.
#[test]
fn the_log_keeps_only_its_newest_bytes_in_the_page_cache() {
    const VALUE_LEN: usize = 4000;
    const KEYS: usize = 12_000;
    // On disk: /tmp may be a tmpfs, whose pages never leave.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let kind = nix::sys::statfs::statfs(dir.path())
        .unwrap()
        .filesystem_type();
    assert!(
        kind != nix::sys::statfs::TMPFS_MAGIC,
        "the target directory is a tmpfs"
    );
    let store = DiskStore::open(DiskConfig {
        map_size: 256 << 20,
        reserve_bytes: 0,
        memory_budget: 32 << 20,
        ..DiskConfig::new(dir.path())
    })
    .unwrap();
    let value = |key: usize| vec![b'a' + (key % 26) as u8; VALUE_LEN];
    for key in 0..KEYS {
        set(&store, format!("k{key}").as_bytes(), &value(key), 0);
    }
    assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    // The syncer fsyncs every 10 ms under `batch`; the pages leave after
    // the fsync that covered them. Bound: the window (8 MiB), a run of
    // drops not yet due (4 MiB), the folio across the last run's end (up
    // to 2 MiB), and what the last fsync has not covered.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (total, cached) = loop {
        let (total, cached) = journal_bytes_cached(dir.path());
        if cached <= 16 << 20 || std::time::Instant::now() > deadline {
            break (total, cached);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(total > 45 << 20, "the log holds {total} bytes");
    assert!(
        cached <= 16 << 20,
        "{cached} of the log's {total} bytes are cached"
    );
    for key in (0..KEYS).step_by(7) {
        let found = get(&store, format!("k{key}").as_bytes()).map(|f| f.0);
        assert_eq!(found, Some(value(key)), "k{key}");
    }
}

/// The applier reads a round's pages ahead (with several threads) only once
/// LMDB itself outgrew `-m`: values kept in the log do not count, since
/// their pages are not LMDB's.
#[test]
fn rounds_read_ahead_only_once_lmdb_outgrows_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(DiskConfig {
        map_size: 256 << 20,
        reserve_bytes: 0,
        memory_budget: 2 << 20,
        ..DiskConfig::new(dir.path())
    })
    .unwrap();
    let round_after_a_tick = |store: &DiskStore| {
        assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
        store.maintain();
        set(store, b"next", b"round", 0);
        assert_eq!(store.wait_until_all_applied(), kura_store::AckState::Ready);
    };
    // 8 MB of values, all in the log: LMDB holds pointers.
    for key in 0..2_000 {
        set(&store, format!("large{key}").as_bytes(), &[b'v'; 4_000], 0);
    }
    round_after_a_tick(&store);
    assert_eq!(engine_stat(&store, "disk_prefetched_rounds"), 0);
    // 8 MB of small values, in LMDB itself.
    for key in 0..40_000 {
        set(&store, format!("small{key}").as_bytes(), &[b'v'; 200], 0);
    }
    round_after_a_tick(&store);
    assert!(engine_stat(&store, "disk_prefetched_rounds") > 0);
}

#[test]
fn a_read_tells_the_seconds_since_the_items_last_access() {
    let idle = |store: &kura_store::DiskStore| {
        let mut idle = None;
        store.get(
            b"k",
            &kura_store::GetOptions::default(),
            &kura_store::AckFence::default(),
            &mut |item| idle = Some(item.idle_seconds),
        );
        idle.expect("a hit")
    };
    // The clock's seconds also pass for real: a run that a real second
    // crossed is done again.
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let store = common::open(dir.path());
        let started = store.clock().now();
        common::store_alone(&store, kura_store::StoreMode::Set, b"k", b"v", 0);
        store.clock().advance(5);
        let since_the_store = idle(&store);
        store.clock().advance(2);
        let since_the_read = idle(&store);
        let again = idle(&store);
        let shown = (kura_store::Store::debug(&store, b"k", &AckFence::default()))
            .unwrap()
            .idle_seconds;
        if store.clock().now() != started + 7 {
            continue;
        }
        assert_eq!(since_the_store, 5, "since the store");
        assert_eq!(since_the_read, 2, "since the read before");
        assert_eq!(again, 0);
        assert_eq!(shown, 0, "me shows it too");
        return;
    }
    panic!("a real second passed in each of five runs");
}
