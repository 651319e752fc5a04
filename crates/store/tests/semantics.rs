//! memcached's semantics, one suite run against both engines: store modes,
//! CAS, append/prepend, incr/decr, touch, flush, vivify, recache and stale
//! items. Whatever an engine adds (eviction, persistence) is tested in its
//! own file; here both must answer alike.

use kura_store::{
    AckFence, ArithCommand, ArithOutcome, DeleteCommand, DeleteOutcome, DiskConfig, DiskStore,
    GetOptions, GetOutcome, MemoryConfig, MemoryStore, Recache, ScanCursor, Store, StoreCommand,
    StoreMode, StoreOutcome, SyncPolicy,
};

/// Runs `test` against a fresh memory engine and a fresh disk engine.
fn on_each_engine(test: impl Fn(&dyn Store)) {
    let memory = MemoryStore::new(MemoryConfig {
        limit_bytes: 1 << 20,
        ..MemoryConfig::default()
    });
    test(&memory);
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        sync: SyncPolicy::None,
        reserve_bytes: 0,
        ..DiskConfig::new(dir.path())
    })
    .expect("opens");
    test(&disk);
}

fn command<'a>(mode: StoreMode, key: &'a [u8], value: &'a [u8]) -> StoreCommand<'a> {
    StoreCommand {
        mode,
        key,
        value,
        flags: 0,
        expiry: 0,
        compare_cas: None,
        stale_if_older: false,
    }
}

fn set(store: &dyn Store, key: &[u8], value: &[u8]) -> StoreOutcome {
    store.store(&command(StoreMode::Set, key, value), &AckFence::default())
}

/// What a plain read sees: value, flags, CAS and seconds left.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    value: Vec<u8>,
    flags: u32,
    cas: u64,
    ttl: i64,
}

fn read(store: &dyn Store, key: &[u8], options: &GetOptions) -> Option<Seen> {
    let mut seen = None;
    store.get(key, options, &AckFence::default(), &mut |item| {
        seen = Some(Seen {
            value: item.value.to_vec(),
            flags: item.flags,
            cas: item.cas,
            ttl: item.ttl,
        })
    });
    seen
}

fn get(store: &dyn Store, key: &[u8]) -> Option<Seen> {
    read(store, key, &GetOptions::default())
}

fn value(store: &dyn Store, key: &[u8]) -> Option<Vec<u8>> {
    get(store, key).map(|seen| seen.value)
}

fn arith(decrement: bool, delta: u64) -> ArithCommand {
    ArithCommand {
        decrement,
        delta,
        ..ArithCommand::default()
    }
}

#[test]
fn set_get_replace_delete() {
    on_each_engine(|store| {
        assert!(matches!(
            set(store, b"k", b"one"),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(value(store, b"k").as_deref(), Some(&b"one"[..]));
        set(store, b"k", b"two");
        assert_eq!(value(store, b"k").as_deref(), Some(&b"two"[..]));
        assert_eq!(
            store.delete(b"k", &DeleteCommand::default(), &AckFence::default()),
            DeleteOutcome::Deleted
        );
        assert_eq!(
            store.delete(b"k", &DeleteCommand::default(), &AckFence::default()),
            DeleteOutcome::NotFound
        );
        assert_eq!(value(store, b"k"), None);
        assert_eq!(store.stats().curr_items, 0);
    });
}

#[test]
fn cas_values_are_unique_and_checked() {
    on_each_engine(|store| {
        let StoreOutcome::Stored { cas: a } = set(store, b"a", b"1") else {
            panic!("stored")
        };
        let StoreOutcome::Stored { cas: b } = set(store, b"b", b"1") else {
            panic!("stored")
        };
        assert_ne!(a, b);
        assert_eq!(
            get(store, b"a").unwrap().cas,
            a,
            "a read sees the CAS the store returned"
        );
        let with_cas = |cas| StoreCommand {
            compare_cas: Some(cas),
            ..command(StoreMode::Set, b"a", b"2")
        };
        assert_eq!(
            store.store(&with_cas(a + 100), &AckFence::default()),
            StoreOutcome::Exists
        );
        assert!(
            matches!(store.store(&with_cas(a), &AckFence::default()), StoreOutcome::Stored { cas } if cas > b)
        );
        assert_eq!(
            store.store(&with_cas(a), &AckFence::default()),
            StoreOutcome::Exists
        );
        assert_eq!(value(store, b"a").as_deref(), Some(&b"2"[..]));
        let missing = StoreCommand {
            key: b"zz",
            ..with_cas(1)
        };
        assert_eq!(
            store.store(&missing, &AckFence::default()),
            StoreOutcome::NotFound
        );
        assert_eq!(value(store, b"zz"), None);
    });
}

#[test]
fn add_replace_append_prepend() {
    on_each_engine(|store| {
        let with_flags = |mode, value: &'static [u8]| StoreCommand {
            flags: 7,
            ..command(mode, b"k", value)
        };
        assert_eq!(
            store.store(&with_flags(StoreMode::Replace, b"x"), &AckFence::default()),
            StoreOutcome::NotStored
        );
        assert_eq!(
            store.store(&with_flags(StoreMode::Append, b"x"), &AckFence::default()),
            StoreOutcome::NotStored
        );
        assert_eq!(
            store.store(&with_flags(StoreMode::Prepend, b"x"), &AckFence::default()),
            StoreOutcome::NotStored
        );
        assert!(matches!(
            store.store(&with_flags(StoreMode::Add, b"mid"), &AckFence::default()),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(
            store.store(&with_flags(StoreMode::Add, b"x"), &AckFence::default()),
            StoreOutcome::NotStored
        );
        // Append and prepend keep the item's flags and expiry, whatever
        // theirs are.
        let other_flags = |mode, value| StoreCommand {
            flags: 99,
            expiry: store.clock().expiry(100),
            ..command(mode, b"k", value)
        };
        store.store(&other_flags(StoreMode::Append, b">"), &AckFence::default());
        store.store(&other_flags(StoreMode::Prepend, b"<"), &AckFence::default());
        let seen = get(store, b"k").unwrap();
        assert_eq!(seen.value, b"<mid>");
        assert_eq!((seen.flags, seen.ttl), (7, -1));
        assert!(matches!(
            store.store(
                &with_flags(StoreMode::Replace, b"new"),
                &AckFence::default()
            ),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(value(store, b"k").as_deref(), Some(&b"new"[..]));
    });
}

#[test]
fn an_append_or_prepend_past_the_item_size_limit_is_not_stored() {
    on_each_engine(|store| {
        // Both engines' limit is the default -I, 1 MiB.
        let half = vec![b'a'; 600 << 10];
        assert!(matches!(
            set(store, b"k", &half),
            StoreOutcome::Stored { .. }
        ));
        for mode in [StoreMode::Append, StoreMode::Prepend] {
            assert_eq!(
                store.store(&command(mode, b"k", &half), &AckFence::default()),
                StoreOutcome::NotStored
            );
        }
        assert_eq!(value(store, b"k").map(|v| v.len()), Some(600 << 10));
        assert!(matches!(
            store.store(
                &command(StoreMode::Append, b"k", b"b"),
                &AckFence::default()
            ),
            StoreOutcome::Stored { .. }
        ));
    });
}

#[test]
fn append_with_a_stale_cas_is_refused() {
    on_each_engine(|store| {
        let StoreOutcome::Stored { cas } = set(store, b"k", b"a") else {
            panic!("stored")
        };
        let append = |compare| StoreCommand {
            compare_cas: Some(compare),
            ..command(StoreMode::Append, b"k", b"b")
        };
        assert_eq!(
            store.store(&append(cas + 1), &AckFence::default()),
            StoreOutcome::Exists
        );
        assert!(matches!(
            store.store(&append(cas), &AckFence::default()),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(value(store, b"k").as_deref(), Some(&b"ab"[..]));
        // A CAS of 0 is none: an append compares nothing, a set finds it differs.
        assert!(matches!(
            store.store(&append(0), &AckFence::default()),
            StoreOutcome::Stored { .. }
        ));
        assert_eq!(value(store, b"k").as_deref(), Some(&b"abb"[..]));
        let set_with_zero = StoreCommand {
            compare_cas: Some(0),
            ..command(StoreMode::Set, b"k", b"c")
        };
        assert_eq!(
            store.store(&set_with_zero, &AckFence::default()),
            StoreOutcome::Exists
        );
    });
}

#[test]
fn expiry_ttl_touch_and_an_item_stored_already_expired() {
    on_each_engine(|store| {
        let clock = store.clock();
        store.store(
            &StoreCommand {
                expiry: clock.expiry(100),
                ..command(StoreMode::Set, b"k", b"v")
            },
            &AckFence::default(),
        );
        assert_eq!(get(store, b"k").unwrap().ttl, 100);
        assert!(store
            .touch(b"k", clock.expiry(10), &AckFence::default())
            .is_hit());
        assert_eq!(get(store, b"k").unwrap().ttl, 10);
        assert_eq!(
            store.touch(b"missing", clock.expiry(10), &AckFence::default()),
            GetOutcome::Miss
        );
        // get-and-touch: the read sees the new expiry.
        let gat = GetOptions {
            touch: Some(clock.expiry(50)),
            ..GetOptions::default()
        };
        assert_eq!(read(store, b"k", &gat).unwrap().ttl, 50);
        clock.advance(51);
        assert_eq!(get(store, b"k"), None);
        assert_eq!(
            store.touch(b"k", 0, &AckFence::default()),
            GetOutcome::Miss,
            "an expired item cannot be touched"
        );
        // A negative exptime stores an item that is already gone.
        store.store(
            &StoreCommand {
                expiry: clock.expiry(-1),
                ..command(StoreMode::Set, b"gone", b"v")
            },
            &AckFence::default(),
        );
        assert_eq!(get(store, b"gone"), None);
        assert_eq!(
            store.store(
                &command(StoreMode::Append, b"gone", b"x"),
                &AckFence::default()
            ),
            StoreOutcome::NotStored,
            "an expired item is not there to append to"
        );
        assert!(matches!(
            store.store(
                &command(StoreMode::Add, b"gone", b"x"),
                &AckFence::default()
            ),
            StoreOutcome::Stored { .. }
        ));
        let stats = store.stats();
        assert!(stats.get_expired >= 2, "{stats:?}");
        assert_eq!(stats.get_flushed, 0);
    });
}

#[test]
fn flush_now_and_later() {
    on_each_engine(|store| {
        set(store, b"a", b"1");
        store.flush_all(0, &AckFence::default());
        assert!(get(store, b"a").is_none());
        set(store, b"b", b"1");
        assert!(
            get(store, b"b").is_some(),
            "items stored after a flush live"
        );
        store.flush_all(5, &AckFence::default());
        assert!(get(store, b"b").is_some(), "a delayed flush waits");
        store.clock().advance(6);
        assert!(get(store, b"b").is_none());
        set(store, b"c", b"1");
        assert!(get(store, b"c").is_some());
        let stats = store.stats();
        assert_eq!(stats.get_flushed, 2, "reads of a and b found them flushed");
        assert_eq!(stats.get_expired, 0);
    });
}

/// As memcached with CAS: a delayed flush is due at the second before the
/// one asked for, so `flush_all 1` flushes at once.
#[test]
fn a_delayed_flush_is_due_a_second_early() {
    on_each_engine(|store| {
        set(store, b"a", b"1");
        store.flush_all(1, &AckFence::default());
        assert!(get(store, b"a").is_none(), "flush_all 1 is at once");
        set(store, b"b", b"1");
        store.flush_all(3, &AckFence::default());
        store.clock().advance(1);
        assert!(get(store, b"b").is_some());
        store.clock().advance(1);
        assert!(get(store, b"b").is_none(), "flush_all 3 is due 2 s later");
    });
}

#[test]
fn the_first_write_after_a_delayed_flush_is_due_lives() {
    on_each_engine(|store| {
        set(store, b"old", b"1");
        store.flush_all(5, &AckFence::default());
        store.clock().advance(6);
        // The first thing after the flush's time is a write of a new key:
        // made after the flush, it is not flushed.
        set(store, b"new", b"1");
        assert!(get(store, b"new").is_some());
        assert!(get(store, b"old").is_none());
    });
}

#[test]
fn incr_wraps_decr_floors_and_shorter_numbers_are_padded() {
    on_each_engine(|store| {
        assert_eq!(
            store.arith(b"n", &arith(false, 1), &AckFence::default()),
            ArithOutcome::NotFound
        );
        store.store(
            &StoreCommand {
                flags: 5,
                ..command(StoreMode::Set, b"n", b"100")
            },
            &AckFence::default(),
        );
        assert!(matches!(
            store.arith(b"n", &arith(true, 1), &AckFence::default()),
            ArithOutcome::Value {
                value: 99,
                created: false,
                ..
            }
        ));
        let seen = get(store, b"n").unwrap();
        assert_eq!((seen.value.as_slice(), seen.flags), (&b"99 "[..], 5));
        assert!(matches!(
            store.arith(b"n", &arith(true, 1000), &AckFence::default()),
            ArithOutcome::Value { value: 0, .. }
        ));
        set(store, b"n", b"18446744073709551615");
        assert!(matches!(
            store.arith(b"n", &arith(false, 2), &AckFence::default()),
            ArithOutcome::Value { value: 1, .. }
        ));
        set(store, b"n", b"9");
        assert!(matches!(
            store.arith(b"n", &arith(false, 1), &AckFence::default()),
            ArithOutcome::Value { value: 10, .. }
        ));
        assert_eq!(value(store, b"n").as_deref(), Some(&b"10"[..]));
        set(store, b"s", b"abc");
        assert_eq!(
            store.arith(b"s", &arith(false, 1), &AckFence::default()),
            ArithOutcome::NonNumeric
        );
        assert_eq!(value(store, b"s").as_deref(), Some(&b"abc"[..]));
    });
}

#[test]
fn arith_checks_cas_vivifies_and_touches() {
    on_each_engine(|store| {
        let clock = store.clock();
        let vivify = ArithCommand {
            vivify: Some((10, clock.expiry(30))),
            ..arith(false, 1)
        };
        let ArithOutcome::Value {
            value: 10,
            cas,
            ttl: 30,
            created: true,
        } = store.arith(b"new", &vivify, &AckFence::default())
        else {
            panic!("vivified")
        };
        assert_eq!(get(store, b"new").unwrap().cas, cas);
        let with_cas = |compare| ArithCommand {
            compare_cas: Some(compare),
            touch: Some(clock.expiry(90)),
            ..arith(false, 5)
        };
        assert_eq!(
            store.arith(b"new", &with_cas(cas + 1), &AckFence::default()),
            ArithOutcome::Exists
        );
        let ArithOutcome::Value {
            value: 15,
            cas: after,
            ttl: 90,
            created: false,
        } = store.arith(b"new", &with_cas(cas), &AckFence::default())
        else {
            panic!("incremented")
        };
        assert!(after > cas);
        let seen = get(store, b"new").unwrap();
        assert_eq!(
            (seen.value.as_slice(), seen.cas, seen.ttl),
            (&b"15"[..], after, 90)
        );
    });
}

#[test]
fn counters_read_as_memcached_reads_them_and_an_empty_value_fails_before_the_cas() {
    on_each_engine(|store| {
        let fence = AckFence::default();
        // A value stored with its own "\r\n", as memcached's strtoull reads it.
        set(store, b"crlf", b"9\r\n");
        assert!(matches!(
            store.arith(b"crlf", &arith(false, 1), &fence),
            ArithOutcome::Value { value: 10, .. }
        ));
        set(store, b"empty", b"");
        let with_wrong_cas = ArithCommand {
            compare_cas: Some(u64::MAX),
            ..arith(false, 1)
        };
        assert_eq!(
            store.arith(b"empty", &with_wrong_cas, &fence),
            ArithOutcome::NonNumeric
        );
    });
}

#[test]
fn an_add_over_an_item_is_not_stored_whatever_its_cas_and_only_a_set_with_an_older_cas_may_store_stale(
) {
    on_each_engine(|store| {
        let fence = AckFence::default();
        // Twice: its CAS is past 1, so an older one is not 0 (which is none).
        set(store, b"k", b"v");
        let StoreOutcome::Stored { cas } = set(store, b"k", b"v") else {
            panic!("stored")
        };
        // memcached's do_store_item: an add over an item is NOT_STORED
        // before any CAS comparison.
        let add = StoreCommand {
            compare_cas: Some(cas + 100),
            ..command(StoreMode::Add, b"k", b"w")
        };
        assert_eq!(store.store(&add, &fence), StoreOutcome::NotStored);
        // An append with meta's I and an older CAS: CAS_STALE is for sets
        // only, so it is refused rather than appended and marked stale.
        let append = StoreCommand {
            compare_cas: Some(cas - 1),
            stale_if_older: true,
            ..command(StoreMode::Append, b"k", b"w")
        };
        assert_eq!(store.store(&append, &fence), StoreOutcome::Exists);
        // A CAS of 0 is none, not an older one: a set with it is refused.
        let set_zero = StoreCommand {
            compare_cas: Some(0),
            stale_if_older: true,
            ..command(StoreMode::Set, b"k", b"w")
        };
        assert_eq!(store.store(&set_zero, &fence), StoreOutcome::Exists);
        assert_eq!(value(store, b"k").as_deref(), Some(&b"v"[..]));
    });
}

#[test]
fn a_replace_with_a_cas_of_a_missing_item_is_not_found() {
    on_each_engine(|store| {
        let replace = StoreCommand {
            compare_cas: Some(5),
            ..command(StoreMode::Replace, b"missing", b"x")
        };
        assert_eq!(
            store.store(&replace, &AckFence::default()),
            StoreOutcome::NotFound
        );
        assert_eq!(value(store, b"missing"), None);
    });
}

#[test]
fn delete_checks_cas() {
    on_each_engine(|store| {
        let StoreOutcome::Stored { cas } = set(store, b"k", b"v") else {
            panic!("stored")
        };
        let with_cas = |compare| DeleteCommand {
            compare_cas: Some(compare),
            ..DeleteCommand::default()
        };
        assert_eq!(
            store.delete(b"k", &with_cas(cas + 1), &AckFence::default()),
            DeleteOutcome::Exists
        );
        assert!(get(store, b"k").is_some());
        assert_eq!(
            store.delete(b"k", &with_cas(cas), &AckFence::default()),
            DeleteOutcome::Deleted
        );
        assert!(get(store, b"k").is_none());
    });
}

#[test]
fn vivify_on_miss_and_recache_wins_once() {
    on_each_engine(|store| {
        let vivify = GetOptions {
            vivify: Some(store.clock().expiry(30)),
            ..GetOptions::default()
        };
        let mut seen = Vec::new();
        for _ in 0..2 {
            store.get(b"k", &vivify, &AckFence::default(), &mut |item| {
                seen.push((item.won, item.win_taken, item.value.len(), item.ttl))
            });
        }
        assert_eq!(seen, [(true, false, 0, 30), (false, true, 0, 30)]);
        // The item a read creates was accessed then, not when the server
        // started.
        store.clock().advance(5);
        let mut idle = None;
        store.get(b"new", &vivify, &AckFence::default(), &mut |item| {
            idle = Some(item.idle_seconds)
        });
        assert_eq!(idle, Some(0));

        store.store(
            &StoreCommand {
                expiry: store.clock().expiry(20),
                ..command(StoreMode::Set, b"r", b"hi")
            },
            &AckFence::default(),
        );
        let recache = GetOptions {
            recache: Recache::Meta { below: Some(30) },
            ..GetOptions::default()
        };
        let mut wins = Vec::new();
        for _ in 0..2 {
            store.get(b"r", &recache, &AckFence::default(), &mut |item| {
                wins.push((item.won, item.win_taken))
            });
        }
        assert_eq!(wins, [(true, false), (false, true)]);
        // Far from expiring: nobody wins.
        set(store, b"far", b"hi");
        assert!(store
            .get(b"far", &recache, &AckFence::default(), &mut |item| {
                assert!(!item.won && !item.win_taken)
            })
            .is_hit());
    });
}

#[test]
fn invalidated_items_are_stale_until_replaced() {
    on_each_engine(|store| {
        set(store, b"k", b"hi");
        let before = get(store, b"k").unwrap().cas;
        let invalidate = DeleteCommand {
            invalidate: Some(None),
            ..DeleteCommand::default()
        };
        assert_eq!(
            store.delete(b"k", &invalidate, &AckFence::default()),
            DeleteOutcome::Deleted
        );
        // memcached hands the recache token (`W`) to meta gets only: a
        // classic read or a touch leaves it for the next meta get.
        let touch = GetOptions {
            touch: Some(store.clock().expiry(100)),
            ..GetOptions::default()
        };
        let meta = GetOptions {
            recache: Recache::Meta { below: None },
            ..GetOptions::default()
        };
        let mut seen = Vec::new();
        for options in [GetOptions::default(), touch, meta, meta] {
            store.get(b"k", &options, &AckFence::default(), &mut |item| {
                seen.push((item.stale, item.won, item.win_taken, item.cas > before))
            });
        }
        let (unwon, won, taken) = (
            (true, false, false, true),
            (true, true, false, true),
            (true, false, true, true),
        );
        assert_eq!(seen, [unwon, unwon, won, taken]);
        set(store, b"k", b"fresh");
        assert!(store
            .get(
                b"k",
                &GetOptions::default(),
                &AckFence::default(),
                &mut |item| assert!(!item.stale && !item.win_taken),
            )
            .is_hit());
    });
}

#[test]
fn an_older_cas_with_stale_if_older_stores_but_stays_stale() {
    on_each_engine(|store| {
        let clock = store.clock();
        store.store(
            &StoreCommand {
                expiry: clock.expiry(60),
                ..command(StoreMode::Set, b"k", b"v1")
            },
            &AckFence::default(),
        );
        let old = get(store, b"k").unwrap().cas;
        let invalidate = DeleteCommand {
            invalidate: Some(None),
            ..DeleteCommand::default()
        };
        store.delete(b"k", &invalidate, &AckFence::default());
        // The first meta get wins the recache and hands the token out.
        let meta = GetOptions {
            recache: Recache::Meta { below: None },
            ..GetOptions::default()
        };
        assert!(store
            .get(b"k", &meta, &AckFence::default(), &mut |item| assert!(
                item.won
            ),)
            .is_hit());
        // A write with the CAS it read before the invalidation: stored, but
        // still stale, its expiry kept and the token still taken.
        let stale_write = StoreCommand {
            compare_cas: Some(old),
            stale_if_older: true,
            expiry: clock.expiry(500),
            ..command(StoreMode::Set, b"k", b"v2")
        };
        assert!(matches!(
            store.store(&stale_write, &AckFence::default()),
            StoreOutcome::Stored { .. }
        ));
        let mut seen = None;
        store.get(
            b"k",
            &GetOptions::default(),
            &AckFence::default(),
            &mut |item| {
                seen = Some((
                    item.value.to_vec(),
                    item.stale,
                    item.won,
                    item.win_taken,
                    item.ttl,
                ))
            },
        );
        assert_eq!(seen, Some((b"v2".to_vec(), true, false, true, 60)));
        // Without stale_if_older the same CAS is refused.
        let refused = StoreCommand {
            stale_if_older: false,
            ..stale_write
        };
        assert_eq!(
            store.store(&refused, &AckFence::default()),
            StoreOutcome::Exists
        );
    });
}

#[test]
fn first_reads_are_told_apart_and_no_bump_leaves_them_alone() {
    on_each_engine(|store| {
        set(store, b"k", b"v");
        let fetched = |options: &GetOptions| {
            let mut seen = None;
            store.get(b"k", options, &AckFence::default(), &mut |item| {
                seen = Some(item.fetched_before)
            });
            seen.unwrap()
        };
        let no_bump = GetOptions {
            no_bump: true,
            ..GetOptions::default()
        };
        assert!(!fetched(&no_bump));
        assert!(
            !fetched(&GetOptions::default()),
            "no_bump did not count as a read"
        );
        assert!(fetched(&GetOptions::default()));
        set(store, b"k", b"w");
        assert!(!fetched(&GetOptions::default()), "a new value is unread");
    });
}

/// As memcached's: `touch` reads the item; an incr rewrites a counter of
/// the same length in place (read or unread as it was) and makes a new,
/// unread item of a longer one.
#[test]
fn touch_counts_as_a_read_and_an_incr_keeps_the_read_only_in_place() {
    on_each_engine(|store| {
        let fence = AckFence::default();
        let no_bump = GetOptions {
            no_bump: true,
            ..GetOptions::default()
        };
        let fetched = |key: &[u8]| {
            let mut seen = None;
            store.get(key, &no_bump, &fence, &mut |item| {
                seen = Some(item.fetched_before)
            });
            seen.unwrap()
        };
        set(store, b"t", b"v");
        assert_eq!(store.touch(b"t", 0, &fence), GetOutcome::Hit);
        assert!(fetched(b"t"), "touched");
        set(store, b"n", b"1");
        store.arith(b"n", &arith(false, 1), &fence);
        assert!(!fetched(b"n"), "an incr is no read");
        value(store, b"n");
        store.arith(b"n", &arith(false, 1), &fence);
        assert!(fetched(b"n"), "3 rewrote 2 in place, read");
        store.arith(b"n", &arith(false, 7), &fence);
        assert!(!fetched(b"n"), "10 is a new item");
    });
}

/// A counter rewritten in place keeps its stale mark; one that grows is a
/// new item, not stale (memcached's `do_add_delta` allocates it afresh).
#[test]
fn a_counter_keeps_its_stale_mark_only_in_place() {
    on_each_engine(|store| {
        let invalidate = DeleteCommand {
            invalidate: Some(None),
            ..DeleteCommand::default()
        };
        for (key, start) in [(&b"same"[..], &b"10"[..]), (b"grows", b"99")] {
            set(store, key, start);
            store.delete(key, &invalidate, &AckFence::default());
            assert!(matches!(
                store.arith(key, &arith(false, 1), &AckFence::default()),
                ArithOutcome::Value { .. }
            ));
            let mut stale = None;
            store.get(
                key,
                &GetOptions::default(),
                &AckFence::default(),
                &mut |item| stale = Some(item.stale),
            );
            assert_eq!(
                stale,
                Some(key == b"same"),
                "{}",
                String::from_utf8_lossy(key)
            );
        }
    });
}

/// A scan in parts (`lru_crawler metadump`) sees every live item once, in
/// parts as large as asked.
#[test]
fn a_scan_in_parts_sees_each_live_item_once() {
    on_each_engine(|store| {
        for i in 0..50 {
            set(store, format!("k{i:02}").as_bytes(), b"v");
        }
        let mut seen = Vec::new();
        let mut parts = Vec::new();
        let mut at = Some(ScanCursor::START);
        while let Some(from) = at {
            let before = seen.len();
            at = (store.scan_part(&from, 7, &mut |item| seen.push(item.key.to_vec())))
                .expect("read");
            parts.push(seen.len() - before);
        }
        seen.sort();
        let expected: Vec<Vec<u8>> = (0..50).map(|i| format!("k{i:02}").into_bytes()).collect();
        assert_eq!(seen, expected, "each item once");
        assert_eq!(parts.len(), 8, "{parts:?}");
        assert!(parts[..7].iter().all(|&part| part == 7), "{parts:?}");
        // All at once, as `scan` sees them.
        let mut all = 0;
        assert_eq!(
            store.scan_part(&ScanCursor::START, usize::MAX, &mut |_| all += 1),
            Ok(None)
        );
        assert_eq!(all, 50);
    });
}
