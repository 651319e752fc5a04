//! Table rows on the disk engine: Tokyo Cabinet's put modes, rows apart
//! from items and from other tables, primary-key order, and rows kept
//! across a reopen (their log replayed when LMDB does not hold them yet).

use kura_store::{
    AckFence, DiskConfig, DiskStore, GetOptions, Record, RowMode, RowOutcome, Store, StoreCommand,
    StoreMode, Tables,
};

mod common;

use common::{edit_lmdb, open};

fn row(key: &str, pairs: &[(&str, &str)]) -> Record {
    let mut record = Record::new(key.as_bytes());
    for (name, value) in pairs {
        record.put(name.as_bytes(), value.as_bytes());
    }
    record
}

fn put(tables: &dyn Tables, table: &str, record: &Record, mode: RowMode) -> RowOutcome {
    tables.put_row(table.as_bytes(), record, mode, &AckFence::default())
}

fn get(tables: &dyn Tables, table: &str, key: &str) -> Option<Record> {
    tables
        .get_row(table.as_bytes(), key.as_bytes(), &AckFence::default())
        .unwrap()
}

/// Builds an index of `kind` on `column` of table `t`.
fn index(tables: &dyn Tables, column: &str, kind: kura_store::IndexKind) {
    let build = kura_store::IndexCommand::Build { kind, keep: false };
    tables.set_index(b"t", column.as_bytes(), build).unwrap();
}

fn keys(tables: &dyn Tables, table: &str) -> Vec<String> {
    let mut keys = Vec::new();
    tables
        .visit_rows(table.as_bytes(), &mut |record| {
            keys.push(String::from_utf8(record.key().to_vec()).unwrap());
            true
        })
        .unwrap();
    keys
}

#[test]
fn rows_are_put_kept_catenated_and_removed_as_tokyo_cabinet_does() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().expect("the disk engine keeps tables");
    let bob = row("k1", &[("name", "Bob"), ("age", "30")]);
    assert_eq!(put(tables, "users", &bob, RowMode::Put), RowOutcome::Done);
    assert_eq!(get(tables, "users", "k1"), Some(bob.clone()));
    // putkeep leaves a row that is there.
    let other = row("k1", &[("name", "Eve")]);
    assert_eq!(
        put(tables, "users", &other, RowMode::Keep),
        RowOutcome::Kept
    );
    assert_eq!(get(tables, "users", "k1"), Some(bob));
    // putcat adds the columns the row lacks and keeps those it has.
    let more = row("k1", &[("name", "Eve"), ("city", "Kyoto")]);
    assert_eq!(put(tables, "users", &more, RowMode::Cat), RowOutcome::Done);
    let merged = row("k1", &[("name", "Bob"), ("age", "30"), ("city", "Kyoto")]);
    assert_eq!(get(tables, "users", "k1"), Some(merged));
    // put replaces every column.
    assert_eq!(put(tables, "users", &other, RowMode::Put), RowOutcome::Done);
    assert_eq!(get(tables, "users", "k1"), Some(other));
    let fence = AckFence::default();
    assert_eq!(tables.remove_row(b"users", b"k1", &fence), RowOutcome::Done);
    assert_eq!(
        tables.remove_row(b"users", b"k1", &fence),
        RowOutcome::Missing
    );
    assert_eq!(get(tables, "users", "k1"), None);
    // Keys LMDB cannot hold, or empty ones, are refused.
    let long = Record::new(vec![b'k'; 600]);
    assert_eq!(
        put(tables, "users", &long, RowMode::Put),
        RowOutcome::Invalid
    );
    assert_eq!(
        put(tables, "", &row("k", &[]), RowMode::Put),
        RowOutcome::Invalid
    );
}

#[test]
fn tables_and_items_are_apart_and_rows_come_in_primary_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    for key in ["b", "a", "c", "aa"] {
        put(tables, "t1", &row(key, &[("v", key)]), RowMode::Put);
    }
    put(
        tables,
        "t2",
        &row("a", &[("v", "other table")]),
        RowMode::Put,
    );
    // An item with a row's bytes is another key.
    engine.store(
        &StoreCommand {
            mode: StoreMode::Set,
            key: b"\x02t1a",
            value: b"an item",
            flags: 0,
            expiry: 0,
            compare_cas: None,
            stale_if_older: false,
        },
        &AckFence::default(),
    );
    assert_eq!(keys(tables, "t1"), ["a", "aa", "b", "c"]);
    assert_eq!(keys(tables, "t2"), ["a"]);
    assert_eq!(keys(tables, "t"), Vec::<String>::new());
    assert_eq!(
        get(tables, "t2", "a"),
        Some(row("a", &[("v", "other table")]))
    );
    let mut item = None;
    engine.get(
        b"\x02t1a",
        &GetOptions::default(),
        &AckFence::default(),
        &mut |found| item = Some(found.value.to_vec()),
    );
    assert_eq!(item.as_deref(), Some(&b"an item"[..]));
    assert_eq!(get(tables, "t1", "a"), Some(row("a", &[("v", "a")])));
    // A visit stops when asked.
    let mut seen = 0;
    tables
        .visit_rows(b"t1", &mut |_| {
            seen += 1;
            seen < 2
        })
        .unwrap();
    assert_eq!(seen, 2);
}

/// A row read again is served from the read cache, and a write of it is
/// seen at once, before and after the applier, never the cached copy.
#[test]
fn a_row_read_again_comes_from_the_cache_and_a_write_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    let cached_rows = || {
        engine
            .engine_stats()
            .into_iter()
            .find(|(name, _)| *name == "disk_read_cache_items")
            .and_then(|(_, value)| value.parse::<u64>().ok())
            .unwrap()
    };
    put(tables, "t", &row("a", &[("n", "1")]), RowMode::Put);
    engine.wait_until_all_applied();
    assert_eq!(cached_rows(), 0);
    // Cached on the second read from LMDB, as an item is.
    for _ in 0..3 {
        assert_eq!(get(tables, "t", "a").unwrap().get(b"n"), Some(&b"1"[..]));
    }
    assert_eq!(cached_rows(), 1);
    put(tables, "t", &row("a", &[("n", "2")]), RowMode::Put);
    assert_eq!(cached_rows(), 0);
    assert_eq!(get(tables, "t", "a").unwrap().get(b"n"), Some(&b"2"[..]));
    engine.wait_until_all_applied();
    for _ in 0..3 {
        assert_eq!(get(tables, "t", "a").unwrap().get(b"n"), Some(&b"2"[..]));
    }
    assert_eq!(cached_rows(), 1);
    assert_eq!(
        tables.remove_row(b"t", b"a", &AckFence::default()),
        RowOutcome::Done
    );
    assert_eq!(get(tables, "t", "a"), None);
    engine.wait_until_all_applied();
    assert_eq!(get(tables, "t", "a"), None);
}

/// A replica's rows change only by its master's log: a client's put,
/// edit or removal is refused, as an item's write is.
#[test]
fn a_read_only_replica_refuses_every_row_write() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    put(tables, "t", &row("a", &[("n", "1")]), RowMode::Put);
    engine.replication().unwrap().set_read_only(true);
    assert_eq!(
        put(tables, "t", &row("b", &[("n", "2")]), RowMode::Put),
        RowOutcome::Failed
    );
    let edit = tables.modify_row(
        b"t",
        b"a",
        &mut |_| kura_store::RowEdit::Remove,
        &AckFence::default(),
    );
    assert_eq!(edit, RowOutcome::Failed);
    assert_eq!(
        tables.remove_row(b"t", b"a", &AckFence::default()),
        RowOutcome::Failed
    );
    assert_eq!(keys(tables, "t"), ["a"]);
    engine.replication().unwrap().set_read_only(false);
    assert_eq!(
        tables.remove_row(b"t", b"a", &AckFence::default()),
        RowOutcome::Done
    );
}

#[test]
fn rows_survive_reopening_whether_applied_or_only_logged() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        let tables = engine.tables().unwrap();
        put(tables, "t", &row("applied", &[("n", "1")]), RowMode::Put);
        engine.wait_until_all_applied();
        put(tables, "t", &row("logged", &[("n", "2")]), RowMode::Put);
        put(tables, "t", &row("applied", &[("n", "3")]), RowMode::Cat);
        tables.remove_row(b"t", b"gone", &AckFence::default());
    }
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    assert_eq!(keys(tables, "t"), ["applied", "logged"]);
    assert_eq!(
        get(tables, "t", "applied"),
        Some(row("applied", &[("n", "1")]))
    );
    assert_eq!(
        get(tables, "t", "logged"),
        Some(row("logged", &[("n", "2")]))
    );
}

/// A scan waits until LMDB holds every row written before it, although the
/// applier's rounds race the writes (a group journalled while a round
/// starts must not count as applied).
#[test]
fn a_scan_right_after_each_write_sees_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    std::thread::scope(|scope| {
        for thread in 0..8 {
            scope.spawn(move || {
                let table = format!("t{thread}");
                for i in 0..2000 {
                    let key = format!("r{i:04}");
                    assert_eq!(
                        put(tables, &table, &row(&key, &[("n", "1")]), RowMode::Put),
                        RowOutcome::Done
                    );
                    assert_eq!(keys(tables, &table).len(), i + 1, "after {key}");
                }
            });
        }
    });
}

#[test]
fn edits_of_a_row_from_many_threads_are_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                for _ in 0..250 {
                    let outcome = tables.modify_row(
                        b"t",
                        b"counter",
                        &mut |current| {
                            let mut row = current.unwrap_or_else(|| Record::new(&b"counter"[..]));
                            let n: u64 = row
                                .get(b"n")
                                .map_or(0, |v| std::str::from_utf8(v).unwrap().parse().unwrap());
                            row.put(b"n", (n + 1).to_string().as_bytes());
                            kura_store::RowEdit::Put(row)
                        },
                        &AckFence::default(),
                    );
                    assert_eq!(outcome, RowOutcome::Done);
                }
            });
        }
    });
    let row = get(tables, "t", "counter").unwrap();
    assert_eq!(row.get(b"n"), Some(&b"1000"[..]));
}

fn indexed_keys(
    tables: &dyn Tables,
    column: &str,
    kind: kura_store::IndexKind,
    condition: (&str, &str),
) -> Vec<String> {
    let (operator, flags) = kura_table::Operator::parse(condition.0).unwrap();
    let condition =
        kura_table::Condition::new(column.as_bytes(), operator, flags, condition.1.as_bytes());
    let lookup = kura_table::Lookup {
        condition: 0,
        column: column.as_bytes().to_vec(),
        kind,
        probes: kura_table::index::probes(&condition, kind).unwrap(),
    };
    let mut keys = Vec::new();
    for lazily in [false, true] {
        let mut found = Vec::new();
        tables
            .lookup_rows(b"t", std::slice::from_ref(&lookup), lazily, &mut |row| {
                found.push(String::from_utf8(row.key().to_vec()).unwrap());
                true
            })
            .unwrap()
            .expect("the index exists");
        keys.push(found);
    }
    assert_eq!(keys[0], keys[1], "found lazily or narrowed, the same rows");
    keys.pop().unwrap()
}

#[test]
fn indexes_follow_their_rows_through_writes_reopening_and_replay() {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let build = |kind| IndexCommand::Build { kind, keep: false };
    {
        let engine = open(dir.path());
        let tables = engine.tables().unwrap();
        put(
            tables,
            "t",
            &row("a", &[("age", "30"), ("tags", "red,blue")]),
            RowMode::Put,
        );
        put(tables, "t", &row("b", &[("age", "25")]), RowMode::Put);
        // Built over the rows there, then kept as rows change.
        tables
            .set_index(b"t", b"age", build(IndexKind::Decimal))
            .unwrap();
        tables
            .set_index(b"t", b"tags", build(IndexKind::Token))
            .unwrap();
        assert!(tables
            .set_index(
                b"t",
                b"age",
                IndexCommand::Build {
                    kind: IndexKind::Lexical,
                    keep: true
                }
            )
            .is_err());
        assert!(tables.set_index(b"t", b"none", IndexCommand::Void).is_err());
        put(
            tables,
            "t",
            &row("c", &[("age", "41"), ("tags", "red")]),
            RowMode::Put,
        );
        put(tables, "t", &row("a", &[("age", "31")]), RowMode::Put);
        tables.remove_row(b"t", b"b", &AckFence::default());
        assert_eq!(
            indexed_keys(tables, "age", IndexKind::Decimal, ("NUMGE", "30")),
            ["a", "c"]
        );
        assert_eq!(
            indexed_keys(tables, "tags", IndexKind::Token, ("STROR", "red blue")),
            ["c"]
        );
        assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
        // Applied at the close, with its index entries.
        put(
            tables,
            "t",
            &row("d", &[("age", "30"), ("tags", "blue")]),
            RowMode::Put,
        );
    }
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    assert_eq!(
        tables.indexes(b"t"),
        [
            (b"age".to_vec(), IndexKind::Decimal),
            (b"tags".to_vec(), IndexKind::Token)
        ]
    );
    assert_eq!(
        indexed_keys(tables, "age", IndexKind::Decimal, ("NUMBT", "29,31")),
        ["a", "d"]
    );
    assert_eq!(
        indexed_keys(tables, "tags", IndexKind::Token, ("STRAND", "blue")),
        ["d"]
    );
    assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
    // Dropped: no longer used, no longer kept.
    tables.set_index(b"t", b"tags", IndexCommand::Void).unwrap();
    assert_eq!(
        tables.indexes(b"t"),
        [(b"age".to_vec(), IndexKind::Decimal)]
    );
}

#[test]
fn a_check_finds_an_index_that_disagrees_with_its_table() {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        let tables = engine.tables().unwrap();
        for (key, name) in [("a", "Ann"), ("b", "Ben")] {
            put(tables, "t", &row(key, &[("name", name)]), RowMode::Put);
        }
        let build = IndexCommand::Build {
            kind: IndexKind::Lexical,
            keep: false,
        };
        tables.set_index(b"t", b"name", build).unwrap();
    }
    // Damage the index behind the engine's back: one entry gone, one wrong.
    edit_lmdb(dir.path(), |lmdb| {
        let id = 1u32.to_be_bytes();
        let (indexes, txn) = (lmdb.indexes, &mut lmdb.txn);
        indexes
            .delete_one_duplicate(txn, &[&id[..], b"Ann"].concat(), b"a")
            .unwrap();
        indexes.put(txn, &[&id[..], b"Zed"].concat(), b"b").unwrap();
    });
    let engine = open(dir.path());
    let problems = engine.tables().unwrap().check_indexes(b"t").unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("lacks \"Ann\" for row a"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("has \"Zed\" for row b"),
        "{problems:?}"
    );
}

/// `setindex` builds in many transactions while the applier goes on
/// between them: rows written, changed and removed during the build, on
/// either side of where it has reached, end up indexed as they are.
#[test]
fn an_index_built_while_rows_change_holds_every_row_as_it_is() {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    let text = |n: usize, round: usize| {
        format!(
            "row {n} of round {round}: the quick brown fox jumps over the lazy dog, \
             and the dog, not quick at all, sleeps on"
        )
    };
    // About 90 distinct grams a row: three of the build's batches.
    const ROWS: usize = 6_000;
    for n in 0..ROWS {
        let record = row(&format!("r{n:05}"), &[("text", &text(n, 0))]);
        put(tables, "t", &record, RowMode::Put);
    }
    engine.wait_until_all_applied();
    let built = std::sync::atomic::AtomicBool::new(false);
    let writes = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut writes = 0;
            let mut n = 0;
            // Enough to interleave with every batch, not so many that the
            // build waits on them.
            while !built.load(std::sync::atomic::Ordering::Acquire) && writes < 20_000 {
                // Spread over the table: before and after the build's cursor.
                n = (n + 7_919) % (ROWS + 500);
                let key = format!("r{n:05}");
                if n % 5 == 0 {
                    tables.remove_row(b"t", key.as_bytes(), &AckFence::default());
                } else {
                    let record = row(&key, &[("text", &text(n, writes + 1))]);
                    put(tables, "t", &record, RowMode::Put);
                }
                writes += 1;
            }
            writes
        });
        index(tables, "text", IndexKind::QGram);
        built.store(true, std::sync::atomic::Ordering::Release);
        writer.join().unwrap()
    });
    assert!(writes > 0, "rows were written during the build");
    assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
    // Rows 11 and 110-119 and 1100-1199, as they are now.
    let scanned: Vec<String> = keys(tables, "t")
        .into_iter()
        .filter(|key| {
            get(tables, "t", key)
                .is_some_and(|record| record.get(b"text").unwrap().starts_with(b"row 11"))
        })
        .collect();
    assert!(scanned.len() > 50, "{}", scanned.len());
    assert_eq!(
        indexed_keys(tables, "text", IndexKind::QGram, ("STRINC", "row 11")),
        scanned
    );
    // Built again: the old entries go a batch at a time, the new come.
    let build = IndexCommand::Build {
        kind: IndexKind::QGram,
        keep: false,
    };
    tables.set_index(b"t", b"text", build).unwrap();
    assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
    assert_eq!(
        indexed_keys(tables, "text", IndexKind::QGram, ("STRINC", "row 11")),
        scanned
    );
    drop(engine);
    let mut ids = std::collections::BTreeSet::new();
    edit_lmdb(dir.path(), |lmdb| {
        for entry in lmdb.indexes.iter(&lmdb.txn).unwrap() {
            ids.insert(entry.unwrap().0[..4].to_vec());
        }
    });
    assert_eq!(
        ids,
        [2u32.to_be_bytes().to_vec()].into(),
        "only the new index's entries"
    );
}

#[test]
fn an_index_on_a_column_few_rows_have_is_built_over_batches_of_the_rows_that_have_it() {
    use kura_store::IndexKind;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    // A third of the rows have the column, about 60 grams each: some
    // 300,000 entries, two of the build's batches, and the rows without the
    // column stand between theirs.
    const ROWS: usize = 15_000;
    for n in 0..ROWS {
        let key = format!("r{n:05}");
        let text = format!("row {n}: the quick brown fox jumps over the lazy dog and sleeps on");
        let record = if n % 3 == 0 {
            row(&key, &[("text", &text)])
        } else {
            row(&key, &[("other", &text)])
        };
        put(tables, "t", &record, RowMode::Put);
    }
    engine.wait_until_all_applied();
    index(tables, "text", IndexKind::QGram);
    assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
    // "row 3" begins rows 3, 30-39, 300-399 and 3000-3999; a third have the column.
    let expected: Vec<String> = (0..ROWS)
        .filter(|n| n % 3 == 0 && n.to_string().starts_with('3'))
        .map(|n| format!("r{n:05}"))
        .collect();
    assert_eq!(expected.len(), 1 + 4 + 34 + 334);
    assert_eq!(
        indexed_keys(tables, "text", IndexKind::QGram, ("STRINC", "row 3")),
        expected
    );
}

/// A build or a drop cut short (the process stopped before its last
/// batch) leaves a definition marked building (1) or dropping (2); the
/// next open drops it and its entries, and `setindex` can build it again.
#[test]
fn an_index_whose_build_or_drop_was_cut_short_is_dropped_at_open() {
    for mark in [1, 2] {
        cut_short_and_reopened(mark);
    }
}

fn cut_short_and_reopened(mark: u8) {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let build = IndexCommand::Build {
        kind: IndexKind::Lexical,
        keep: false,
    };
    {
        let engine = open(dir.path());
        let tables = engine.tables().unwrap();
        for (key, name) in [("a", "Ann"), ("b", "Ben")] {
            put(tables, "t", &row(key, &[("name", name)]), RowMode::Put);
        }
        tables.set_index(b"t", b"name", build).unwrap();
    }
    // What a build or drop stopped halfway leaves: the mark, some entries.
    edit_lmdb(dir.path(), |lmdb| {
        let (meta, txn) = (lmdb.meta, &mut lmdb.txn);
        let defs: Vec<(Vec<u8>, Vec<u8>)> = meta
            .prefix_iter(txn, b"idx:")
            .unwrap()
            .map(|entry| entry.unwrap())
            .map(|(key, value)| (key.to_vec(), value.to_vec()))
            .collect();
        assert_eq!(defs.len(), 1);
        let (key, mut value) = defs.into_iter().next().unwrap();
        value.push(mark);
        meta.put(txn, &key, &value).unwrap();
        let id = 1u32.to_be_bytes();
        lmdb.indexes
            .delete_one_duplicate(txn, &[&id[..], b"Ben"].concat(), b"b")
            .unwrap();
    });
    {
        let engine = open(dir.path());
        let tables = engine.tables().unwrap();
        assert_eq!(tables.indexes(b"t"), Vec::new());
        assert_eq!(tables.check_indexes(b"t").unwrap(), Vec::<String>::new());
    }
    let mut left = Vec::new();
    edit_lmdb(dir.path(), |lmdb| {
        let (meta, indexes, txn) = (lmdb.meta, lmdb.indexes, &lmdb.txn);
        left.extend(
            meta.prefix_iter(txn, b"idx:")
                .unwrap()
                .map(|_| "a definition"),
        );
        left.extend(indexes.iter(txn).unwrap().map(|_| "an entry"));
    });
    assert_eq!(left, Vec::<&str>::new(), "nothing of the index is left");
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    tables.set_index(b"t", b"name", build).unwrap();
    assert_eq!(
        indexed_keys(tables, "name", IndexKind::Lexical, ("STRBW", "B")),
        ["b"]
    );
}

/// Lookups that hold more than a quarter of the rows leave them to a scan
/// (a row read by its key costs several read in order); rarer ones read
/// their rows by key.
#[test]
fn a_lookup_holding_most_rows_asks_for_a_scan_and_a_rare_one_does_not() {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    for n in 0..3000 {
        let text = if n % 1000 == 7 {
            "the rare word"
        } else {
            "the common word"
        };
        put(
            tables,
            "t",
            &row(&format!("r{n:04}"), &[("text", text)]),
            RowMode::Put,
        );
    }
    let build = IndexCommand::Build {
        kind: IndexKind::QGram,
        keep: false,
    };
    tables.set_index(b"t", b"text", build).unwrap();
    let lookup = |expression: &str| {
        let condition = kura_table::Condition::new(
            b"text",
            kura_table::Operator::StrInc,
            0,
            expression.as_bytes(),
        );
        let lookup = kura_table::Lookup {
            condition: 0,
            column: b"text".to_vec(),
            kind: IndexKind::QGram,
            probes: kura_table::index::probes(&condition, IndexKind::QGram).unwrap(),
        };
        let mut found = 0;
        let read = tables
            .lookup_rows(b"t", &[lookup], false, &mut |_| {
                found += 1;
                true
            })
            .unwrap();
        read.map(|_| found)
    };
    assert_eq!(lookup("common"), None, "2,997 of 3,000 rows: a scan");
    assert_eq!(lookup("rare"), Some(3));
}

#[test]
fn a_rare_equality_and_a_wide_range_together_find_the_rare_row() {
    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(open(dir.path()));
    for n in 0..2000 {
        let colour = if n == 3 { "red" } else { "blue" };
        let pairs = [("colour", colour), ("n", &n.to_string())];
        let tables = engine.tables().unwrap();
        put(tables, "t", &row(&format!("r{n:04}"), &pairs), RowMode::Put);
    }
    for (column, kind) in [("colour", IndexKind::Lexical), ("n", IndexKind::Decimal)] {
        let build = IndexCommand::Build { kind, keep: false };
        let tables = engine.tables().unwrap();
        tables.set_index(b"t", column.as_bytes(), build).unwrap();
    }
    let lookup = |column: &str, operator: &str, expression: &str, kind| {
        let (operator, flags) = kura_table::Operator::parse(operator).unwrap();
        let condition =
            kura_table::Condition::new(column.as_bytes(), operator, flags, expression.as_bytes());
        kura_table::Lookup {
            condition: 0,
            column: column.as_bytes().to_vec(),
            kind,
            probes: kura_table::index::probes(&condition, kind).unwrap(),
        }
    };
    // One row is red; every row's number is at least 0, under two thousand
    // distinct index keys: the range is walked unsorted, far denser than
    // the equality, and is cut short (the race once lost the equality's
    // candidates there and spun for ever).
    let lookups = [
        lookup("colour", "STREQ", "red", IndexKind::Lexical),
        lookup("n", "NUMGE", "0", IndexKind::Decimal),
    ];
    let (sender, receiver) = std::sync::mpsc::channel();
    let searcher = engine.clone();
    std::thread::spawn(move || {
        let mut found = Vec::new();
        let tables = searcher.tables().unwrap();
        tables
            .lookup_rows(b"t", &lookups, false, &mut |row| {
                found.push(String::from_utf8(row.key().to_vec()).unwrap());
                true
            })
            .unwrap();
        sender.send(found).unwrap();
    });
    let found = receiver
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the lookup ends");
    assert!(found.contains(&"r0003".to_string()), "{found:?}");
    assert!(
        found.len() <= 8,
        "the candidates are the red row's: {found:?}"
    );
}

#[test]
fn a_condition_of_many_and_repeated_words_still_finds_its_rows() {
    use kura_store::IndexKind;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    let words: Vec<String> = (0..40).map(|n| format!("w{n}")).collect();
    put(
        tables,
        "t",
        &row("all", &[("tags", &words.join(" "))]),
        RowMode::Put,
    );
    put(
        tables,
        "t",
        &row("most", &[("tags", &words[..39].join(" "))]),
        RowMode::Put,
    );
    put(tables, "t", &row("none", &[("tags", "x")]), RowMode::Put);
    index(tables, "tags", IndexKind::Token);
    // Forty distinct words, then one of them fifty thousand times more:
    // each distinct range is one stream, and only the first few are raced
    // (the caller checks the condition on every row it is handed).
    let mut expression = words.join(" ");
    expression.push_str(&" w0".repeat(50_000));
    let found = indexed_keys(tables, "tags", IndexKind::Token, ("STRAND", &expression));
    assert!(found.contains(&"all".to_string()), "{found:?}");
    assert!(!found.contains(&"none".to_string()), "{found:?}");
}

#[test]
fn rows_are_walked_in_key_or_index_order_either_way() {
    use std::ops::Bound;

    use kura_store::{IndexCommand, IndexKind};
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let tables = engine.tables().unwrap();
    for (key, age) in [("a", "30"), ("b", "4"), ("c", "30"), ("d", "12")] {
        put(tables, "t", &row(key, &[("age", age)]), RowMode::Put);
    }
    put(tables, "u", &row("a", &[("age", "1")]), RowMode::Put);
    let build = IndexCommand::Build {
        kind: IndexKind::Decimal,
        keep: false,
    };
    tables.set_index(b"t", b"age", build).unwrap();
    let walk = |index, start: Bound<&[u8]>, descending| {
        let mut keys = Vec::new();
        let exists = tables
            .walk_rows(b"t", index, start, descending, &mut |_, row| {
                keys.push(String::from_utf8(row.key).unwrap());
                true
            })
            .unwrap();
        assert!(exists);
        keys
    };
    assert_eq!(walk(None, Bound::Included(b"b"), false), ["b", "c", "d"]);
    assert_eq!(walk(None, Bound::Excluded(b"b"), false), ["c", "d"]);
    assert_eq!(walk(None, Bound::Included(b"b"), true), ["b", "a"]);
    assert_eq!(walk(None, Bound::Excluded(b"b"), true), ["a"]);
    assert_eq!(walk(None, Bound::Unbounded, true), ["d", "c", "b", "a"]);
    let age = Some((&b"age"[..], IndexKind::Decimal));
    let twelve = kura_table::index::decimal_key(12.0);
    assert_eq!(walk(age, Bound::Included(&twelve), false), ["d", "a", "c"]);
    assert_eq!(walk(age, Bound::Excluded(&twelve), true), ["b"]);
    assert_eq!(walk(age, Bound::Unbounded, false), ["b", "d", "a", "c"]);
    let lexical = Some((&b"age"[..], IndexKind::Lexical));
    assert!(!tables
        .walk_rows(b"t", lexical, Bound::Unbounded, false, &mut |_, _| true)
        .unwrap());
}

#[test]
fn a_row_may_not_grow_past_the_limit_by_any_write() {
    let dir = tempfile::tempdir().unwrap();
    let engine = DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        reserve_bytes: 0,
        max_value_bytes: 100,
        ..DiskConfig::new(dir.path())
    })
    .unwrap();
    let tables = engine.tables().unwrap();
    let long = "x".repeat(60);
    let first = row("k", &[("a", &long)]);
    assert_eq!(put(tables, "t", &first, RowMode::Put), RowOutcome::Done);
    // Each column alone fits; merged, they would not.
    let more = row("k", &[("b", &long)]);
    assert_eq!(put(tables, "t", &more, RowMode::Cat), RowOutcome::TooLarge);
    let too_long = row("j", &[("a", &"y".repeat(200))]);
    assert_eq!(
        put(tables, "t", &too_long, RowMode::Put),
        RowOutcome::TooLarge
    );
    assert_eq!(get(tables, "t", "k"), Some(first));
    assert_eq!(get(tables, "t", "j"), None);
}
