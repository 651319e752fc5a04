//! Table rows on the disk engine: Tokyo Cabinet's put modes, rows apart
//! from items and from other tables, primary-key order, and rows kept
//! across a reopen (their log replayed when LMDB does not hold them yet).

use std::path::Path;

use kura_store::{
    AckFence, DiskConfig, DiskStore, GetOptions, Record, RowMode, RowOutcome, Store, StoreCommand,
    StoreMode, SyncPolicy, Tables,
};

fn open(dir: &Path) -> DiskStore {
    DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        sync: SyncPolicy::Batch,
        reserve_bytes: 0,
        ..DiskConfig::new(dir)
    })
    .expect("opens")
}

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
    tables.get_row(table.as_bytes(), key.as_bytes()).unwrap()
}

fn keys(tables: &dyn Tables, table: &str) -> Vec<String> {
    let mut keys = Vec::new();
    tables
        .visit_rows(table.as_bytes(), &mut |record| {
            keys.push(String::from_utf8(record.key).unwrap());
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
