//! Replication at the engine: a master's feed applied to a replica, the
//! refusals that send a replica to a snapshot (a position past the log, one
//! of another history, a segment gone), groups out of step, and a snapshot
//! load cut short. The end-to-end test with real servers is `kura`'s
//! `tests/replication.rs`.

use std::time::Duration;

use kura_store::replication::{FeedRefused, LogFeed, LogPosition, Replication, SnapshotPart};
use kura_store::{AckFence, DiskStore, Store, StoreMode};

mod common;

use common::{get, open, snapshot_records, store_alone};

fn set(store: &DiskStore, key: &[u8], value: &[u8], flags: u32) {
    let outcome = store_alone(store, StoreMode::Set, key, value, flags);
    assert!(matches!(outcome, kura_store::StoreOutcome::Stored { .. }));
}

/// Applies every group the feed has now to `replica`.
fn drain(feed: &mut dyn LogFeed, replica: &DiskStore) -> usize {
    let mut groups = 0;
    while let Some(group) = feed.next_group(Duration::from_millis(50)).unwrap() {
        let at = replica.take_group(&group.bytes).unwrap();
        assert_eq!(at.lsn, group.last_lsn);
        feed.acknowledged(at.lsn);
        groups += 1;
    }
    groups
}

/// The names of the journal segments in `dir` that hold anything, oldest
/// first.
fn written_segments(dir: &std::path::Path) -> Vec<String> {
    let mut segments: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().into_string().ok()?;
            let written = entry.metadata().ok()?.len() > 0;
            (name.starts_with("journal-") && written).then_some(name)
        })
        .collect();
    segments.sort();
    segments
}

#[test]
fn a_replica_holds_the_masters_log_with_its_lsns_and_can_be_fed_on_after_a_restart() {
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(master_dir.path());
    let large = vec![b'L'; 8192];
    set(&master, b"small", b"v1", 1);
    set(&master, b"large", &large, 2);
    {
        let replica = open(replica_dir.path());
        assert_eq!(replica.position(), Some(LogPosition::default()));
        let mut feed = master.feed(replica.position().unwrap()).unwrap();
        assert_eq!(drain(&mut *feed, &replica), 2);
        assert_eq!(
            replica.position(),
            master.position(),
            "the same LSN and time"
        );
        assert_eq!(get(&replica, b"large"), get(&master, b"large"));
        assert_eq!(
            get(&replica, b"small"),
            get(&master, b"small"),
            "CAS included"
        );
    }
    // A touch of a value the log keeps journals the item whole.
    assert!(master
        .touch(b"large", master.clock().expiry(1000), &AckFence::default())
        .is_hit());
    master.wait_until_all_applied();
    set(&master, b"small", b"v2", 3);
    let replica = open(replica_dir.path());
    let mut feed = master.feed(replica.position().unwrap()).unwrap();
    assert_eq!(drain(&mut *feed, &replica), 2, "from where it stopped");
    assert_eq!(get(&replica, b"small"), get(&master, b"small"));
    assert_eq!(get(&replica, b"large"), get(&master, b"large"));
    assert_eq!(replica.position(), master.position());
}

#[test]
fn positions_that_are_not_points_of_the_log_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let master = open(dir.path());
    set(&master, b"a", b"1", 0);
    set(&master, b"b", b"2", 0);
    let last = master.position().unwrap();
    let ahead = LogPosition {
        lsn: last.lsn + 5,
        micros: last.micros,
    };
    assert!(matches!(master.feed(ahead), Err(FeedRefused::Diverged(_))));
    let other_time = LogPosition {
        lsn: 1,
        micros: 12345,
    };
    assert!(matches!(
        master.feed(other_time),
        Err(FeedRefused::Diverged(_))
    ));
    assert!(master.feed(last).is_ok(), "its own end");
}

#[test]
fn a_segment_gone_from_the_middle_of_the_log_sends_the_replica_to_a_snapshot() {
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let replica = open(replica_dir.path());
    let first_position;
    {
        let master = open(master_dir.path());
        set(&master, b"a", b"1", 0);
        first_position = master.position().unwrap();
        let mut feed = master.feed(LogPosition::default()).unwrap();
        drain(&mut *feed, &replica);
        // Each restart starts a new segment: the next writes land in others.
        drop(feed);
        drop(master);
        let master = open(master_dir.path());
        set(&master, b"b", b"2", 0);
        drop(master);
        let master = open(master_dir.path());
        set(&master, b"c", b"3", 0);
    }
    assert_eq!(replica.position(), Some(first_position));
    // A segment after the replica's goes (as retention lets a segment
    // nothing points into go before an older one that holds a value).
    let segments = written_segments(master_dir.path());
    assert!(segments.len() >= 3, "{segments:?}");
    std::fs::remove_file(master_dir.path().join(&segments[1])).unwrap();
    let master = open(master_dir.path());
    assert!(
        matches!(master.feed(first_position), Err(FeedRefused::Gone(_))),
        "the log has a gap after the replica's position"
    );
}

/// A touch journals the item whole, value included, never a pointer to
/// the put that holds the value: once the touch is applied, nothing needs
/// that put's segment, and retention may let it go while a replica has yet
/// to read the touch. The feed sends the log's records as they are.
#[test]
fn a_touch_carries_its_value_so_its_group_needs_no_older_segment() {
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let replica = open(replica_dir.path());
    let large = vec![b'L'; 8192];
    {
        let master = open(master_dir.path());
        set(&master, b"large", &large, 1);
        let mut feed = master.feed(LogPosition::default()).unwrap();
        drain(&mut *feed, &replica);
    }
    {
        // A restart starts a new segment: the replica's position and the
        // touch are in a later one than the put.
        let master = open(master_dir.path());
        set(&master, b"x", b"1", 0);
        let mut feed = master.feed(replica.position().unwrap()).unwrap();
        drain(&mut *feed, &replica);
        assert!(master
            .touch(b"large", master.clock().expiry(1000), &AckFence::default())
            .is_hit());
    }
    let segments = written_segments(master_dir.path());
    assert!(segments.len() >= 2, "{segments:?}");
    std::fs::remove_file(master_dir.path().join(&segments[0])).unwrap();
    let master = open(master_dir.path());
    assert_eq!(get(&master, b"large").map(|found| found.0), Some(large));
    let mut feed = master.feed(replica.position().unwrap()).unwrap();
    assert_eq!(drain(&mut *feed, &replica), 1, "the touch's group");
    assert_eq!(get(&replica, b"large"), get(&master, b"large"));
    assert_eq!(replica.position(), master.position());
}

#[test]
fn a_group_out_of_step_is_refused_and_changes_nothing() {
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(master_dir.path());
    set(&master, b"a", b"1", 0);
    set(&master, b"b", b"2", 0);
    let replica = open(replica_dir.path());
    let mut feed = master.feed(LogPosition::default()).unwrap();
    let _first = feed.next_group(Duration::from_secs(1)).unwrap().unwrap();
    let second = feed.next_group(Duration::from_secs(1)).unwrap().unwrap();
    let refused = replica.take_group(&second.bytes);
    assert!(refused.unwrap_err().contains("out of step"));
    assert_eq!(get(&replica, b"b"), None);
    let mut damaged = second.bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    assert!(replica.take_group(&damaged).is_err());
    assert_eq!(replica.position(), Some(LogPosition::default()));
}

#[test]
fn a_snapshot_replaces_everything_and_one_cut_short_leaves_no_position() {
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(master_dir.path());
    set(&master, b"kept", &vec![b'K'; 4096], 7);
    {
        let replica = open(replica_dir.path());
        set(&replica, b"local", b"mine", 0);
        let mut base = replica.load_base().unwrap();
        base.add(SnapshotPart::Records(b"")).unwrap();
        // Dropped before `finish`: the replica is incomplete.
    }
    let replica = open(replica_dir.path());
    assert_eq!(
        replica.position(),
        None,
        "a cut snapshot leaves no position"
    );
    assert_eq!(get(&replica, b"local"), None, "cleared");
    let (at, mut feed, parts) = snapshot_records(&master);
    let mut base = replica.load_base().unwrap();
    for part in &parts {
        base.add(SnapshotPart::Records(part)).unwrap();
    }
    base.finish(at).unwrap();
    assert_eq!(replica.position(), Some(at));
    assert_eq!(get(&replica, b"kept"), get(&master, b"kept"));
    set(&master, b"after", b"1", 0);
    drain(&mut *feed, &replica);
    assert_eq!(get(&replica, b"after"), get(&master, b"after"));
    assert_eq!(replica.position(), master.position());
}

/// A replica's replica reads its log. When that log starts over from a
/// snapshot of another history whose position has the same LSN, the groups
/// after it would pass for the next ones: the feed ends instead.
#[test]
fn a_feed_ends_when_its_servers_log_starts_over_from_a_snapshot() {
    let dirs = [(); 3].map(|()| tempfile::tempdir().unwrap());
    let (master, replica, other) = (
        open(dirs[0].path()),
        open(dirs[1].path()),
        open(dirs[2].path()),
    );
    for key in [&b"a"[..], b"b", b"c"] {
        set(&master, key, b"m", 0);
        set(&other, key, b"o", 0);
    }
    let mut feed = master.feed(LogPosition::default()).unwrap();
    drain(&mut *feed, &replica);
    let at = replica.position().unwrap();
    let mut downstream = replica.feed(at).unwrap();

    let (snapshot_at, mut other_feed, parts) = snapshot_records(&other);
    assert_eq!(snapshot_at.lsn, at.lsn, "the same LSN, another history");
    let mut base = replica.load_base().unwrap();
    for part in &parts {
        base.add(SnapshotPart::Records(part)).unwrap();
    }
    base.finish(snapshot_at).unwrap();
    set(&other, b"d", b"o", 0);
    assert_eq!(drain(&mut *other_feed, &replica), 1);
    assert_eq!(replica.position(), other.position());

    let Err(error) = downstream.next_group(Duration::from_millis(200)) else {
        panic!("the feed reads on into another history");
    };
    assert!(error.to_string().contains("started over"), "{error}");
}

#[test]
fn flushes_rows_and_index_definitions_reach_the_replica() {
    use kura_store::{IndexCommand, IndexKind, Record, RowMode, Tables};
    let (master_dir, replica_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(master_dir.path());
    let replica = open(replica_dir.path());
    set(&master, b"gone", b"1", 0);
    master.flush_all(0, &AckFence::default());
    master.wait_until_all_applied();
    set(&master, b"after", b"2", 0);
    let tables: &dyn Tables = &master;
    tables
        .set_index(
            b"users",
            b"age",
            IndexCommand::Build {
                kind: IndexKind::Decimal,
                keep: false,
            },
        )
        .unwrap();
    for (key, age) in [("u1", "31"), ("u2", "45")] {
        let mut row = Record::new(key.as_bytes());
        row.put(b"age", age.as_bytes());
        let outcome = tables.put_row(b"users", &row, RowMode::Put, &AckFence::default());
        assert_eq!(outcome, kura_store::RowOutcome::Done);
        master.wait_until_all_applied();
    }
    let mut feed = master.feed(LogPosition::default()).unwrap();
    drain(&mut *feed, &replica);
    // The feeder sends the definitions when they change (they are not log
    // entries); the replica makes its own match them.
    replica
        .adopt_indexes(&Replication::indexes(&master))
        .unwrap();
    assert_eq!(get(&replica, b"gone"), None, "flushed");
    assert_eq!(get(&replica, b"after"), get(&master, b"after"));
    let on_replica: &dyn Tables = &replica;
    assert_eq!(on_replica.indexes(b"users"), tables.indexes(b"users"));
    assert_eq!(
        on_replica.get_row(b"users", b"u2", &AckFence::default()),
        tables.get_row(b"users", b"u2", &AckFence::default())
    );
    assert_eq!(
        on_replica.check_indexes(b"users"),
        Ok(Vec::new()),
        "the index holds both rows"
    );
    // A dropped index goes on the replica too.
    tables
        .set_index(b"users", b"age", IndexCommand::Void)
        .unwrap();
    replica
        .adopt_indexes(&Replication::indexes(&master))
        .unwrap();
    assert!(on_replica.indexes(b"users").is_empty());
}

/// A dual master's engine (`--peer`): stamps as CAS, tombstones kept a
/// minute.
fn open_peer(dir: &std::path::Path, server_id: u32) -> DiskStore {
    DiskStore::open(kura_store::DiskConfig {
        map_size: 64 << 20,
        reserve_bytes: 0,
        server_id: Some(server_id),
        multi_primary: Some(kura_store::MultiPrimary {
            tombstone_lifetime: Duration::from_secs(60),
        }),
        ..kura_store::DiskConfig::new(dir)
    })
    .expect("opens")
}

/// Applies what `from`'s log holds after `after` to `to`, as a peer's;
/// returns the position reached.
fn exchange(from: &DiskStore, to: &DiskStore, after: LogPosition) -> LogPosition {
    exchange_until(from, to, after, u64::MAX)
}

/// [`exchange`] of the groups up to LSN `until`.
fn exchange_until(from: &DiskStore, to: &DiskStore, after: LogPosition, until: u64) -> LogPosition {
    let mut feed = from.feed(after).unwrap();
    let mut at = after;
    while let Some(group) = feed
        .next_group(Duration::from_millis(50))
        .unwrap()
        .filter(|group| group.last_lsn <= until)
    {
        at = to.take_peer_group("peer", &group.bytes, true).unwrap().at;
        assert_eq!(at.lsn, group.last_lsn);
    }
    to.wait_until_all_applied();
    at
}

/// Merges a snapshot of `from` into `into`, as `into`'s peer `peer`;
/// returns the snapshot's position.
fn merge_snapshot(from: &DiskStore, into: &DiskStore, peer: &str) -> LogPosition {
    let (at, _feed, parts) = snapshot_records(from);
    let mut merge = into.merge_base(peer);
    for part in &parts {
        merge.add(SnapshotPart::Records(part)).unwrap();
    }
    merge.finish(at).unwrap();
    into.wait_until_all_applied();
    at
}

fn delete(store: &DiskStore, key: &[u8]) -> kura_store::DeleteOutcome {
    let outcome = store.delete(
        key,
        &kura_store::DeleteCommand::default(),
        &AckFence::default(),
    );
    store.wait_until_all_applied();
    outcome
}

#[test]
fn peers_keep_the_last_write_and_a_delete_outlives_older_writes_for_its_lifetime() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open_peer(a_dir.path(), 1), open_peer(b_dir.path(), 2));
    set(&a, b"k", b"first", 1);
    let base = LogPosition::default();
    exchange(&a, &b, base);
    assert_eq!(
        get(&b, b"k"),
        get(&a, b"k"),
        "the same write, stamp and all"
    );

    // Concurrent: A sets, B deletes later. Each takes the other's.
    let before_set = a.position().unwrap();
    set(&a, b"k", b"from-a", 2);
    let a_write = get(&a, b"k").unwrap();
    let set_lsn = a.position().unwrap().lsn;
    let b_before = b.position().unwrap();
    assert_eq!(delete(&b, b"k"), kura_store::DeleteOutcome::Deleted);
    exchange(&b, &a, b_before);
    exchange(&a, &b, before_set);
    assert_eq!(get(&a, b"k"), None, "the later delete wins on A");
    assert_eq!(get(&b, b"k"), None, "and on B");
    assert_eq!(b.peer_tally().conflicts_resolved, 1, "A's set lost");

    // The tombstone outlives A's older write while it is kept: sweeps
    // within its lifetime leave it.
    b.clock().advance(30);
    b.crawl(&|_| true);
    exchange_until(&a, &b, before_set, set_lsn);
    assert_eq!(get(&b, b"k"), None, "an older write arriving late loses");
    assert_eq!(b.peer_tally().conflicts_resolved, 2);
    // Past its lifetime it is swept, and what comes later is news.
    b.clock().advance(31);
    b.crawl(&|_| true);
    exchange_until(&a, &b, before_set, set_lsn);
    assert_eq!(get(&b, b"k"), Some(a_write), "no tombstone left to win");

    // B's own write coming back from A after B wrote the key again is
    // an echo, not a conflict.
    let (from_a, from_b) = (a.position().unwrap(), b.position().unwrap());
    set(&b, b"echo", b"v1", 0);
    exchange(&b, &a, from_b);
    set(&b, b"echo", b"v2", 0);
    exchange(&a, &b, from_a);
    assert_eq!(get(&b, b"echo").unwrap().0, b"v2");
    assert_eq!(b.peer_tally().conflicts_resolved, 2, "no conflict counted");
}

#[test]
fn a_peers_snapshot_is_merged_by_last_writer_and_leaves_its_position() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open_peer(a_dir.path(), 1), open_peer(b_dir.path(), 2));
    set(&a, b"both", b"a-older", 1);
    set(&a, b"only-a", b"a", 1);
    set(&b, b"both", b"b-newer", 2);
    set(&b, b"only-b", b"b", 2);
    assert_eq!(delete(&b, b"only-b"), kura_store::DeleteOutcome::Deleted);
    // Writes that did not see each other are ordered by wall clock (to the
    // millisecond; a tie goes to the higher rank, B's): A's write is later.
    std::thread::sleep(Duration::from_millis(2));
    set(&a, b"only-b", b"a-newest", 1);
    let at = merge_snapshot(&a, &b, "peer");
    assert_eq!(
        get(&b, b"both").unwrap().0,
        b"b-newer",
        "B's own later write stays"
    );
    assert_eq!(get(&b, b"only-a"), get(&a, b"only-a"), "A's write arrives");
    assert_eq!(
        get(&b, b"only-b").unwrap().0,
        b"a-newest",
        "a write later than B's delete wins over its tombstone"
    );
    assert_eq!(b.peer_position("peer"), Some(at));
    assert_eq!(b.peer_tally().conflicts_resolved, 1);
}

#[test]
fn a_peers_flush_drops_only_what_came_before_it_and_stays_applied_after_a_restart() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let a = open_peer(dirs[0].path(), 1);
    let mut b = open_peer(dirs[1].path(), 2);
    let c = open_peer(dirs[2].path(), 3);
    set(&a, b"old", b"before the flush", 0);
    exchange(&a, &b, LogPosition::default());
    // C writes before A's flush, and hears of neither for now.
    set(&c, b"stale", b"before the flush too", 0);
    std::thread::sleep(Duration::from_millis(5));
    let from_a = a.position().unwrap();
    a.flush_all(0, &AckFence::default());
    a.wait_until_all_applied();
    std::thread::sleep(Duration::from_millis(5));
    // B writes after the flush, before it reaches B.
    set(&b, b"new", b"after it", 0);
    exchange(&a, &b, from_a);
    assert_eq!(get(&b, b"old"), None, "flushed on B too");
    assert_eq!(
        get(&b, b"new").unwrap().0,
        b"after it",
        "B's later write stays"
    );

    drop(b);
    b = open_peer(dirs[1].path(), 2);
    assert_eq!(get(&b, b"new").unwrap().0, b"after it");
    // A's whole log again, as after a lost position: the old write is
    // still dead, and the flush is not applied a second time.
    exchange(&a, &b, LogPosition::default());
    assert_eq!(get(&b, b"old"), None, "dead after the restart");
    assert_eq!(get(&b, b"new").unwrap().0, b"after it", "not flushed again");

    // A snapshot carries the flush: C, merging it, drops what it wrote
    // before the flush, and keeps B's later write once it has it.
    exchange(&b, &c, LogPosition::default());
    merge_snapshot(&a, &c, "a");
    assert_eq!(get(&c, b"stale"), None, "older than A's flush");
    assert_eq!(get(&c, b"new").unwrap().0, b"after it");
}

#[test]
fn a_flush_from_before_a_server_had_peers_covers_nothing_of_its_peers() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    {
        let alone = open(a_dir.path());
        set(&alone, b"gone", b"flushed", 0);
        alone.flush_all(0, &AckFence::default());
        alone.wait_until_all_applied();
        set(&alone, b"kept", b"after the flush", 0);
    }
    let a = open_peer(a_dir.path(), 1);
    let b = open_peer(b_dir.path(), 2);
    set(&b, b"mine", b"B's own", 0);
    // A's snapshot starts with its counter flush; its log holds it too.
    merge_snapshot(&a, &b, "a");
    exchange(&a, &b, LogPosition::default());
    assert_eq!(get(&b, b"mine").unwrap().0, b"B's own", "not flushed");
    assert_eq!(get(&b, b"kept").unwrap().0, b"after the flush");
    assert_eq!(get(&b, b"gone"), None);
}

#[test]
fn a_delayed_flush_does_not_fire_once_the_server_is_a_replica() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    set(&engine, b"k", b"v", 0);
    // Due a second later (`flush_all 1` would be at once, as memcached's).
    engine.flush_all(2, &AckFence::default());
    // It becomes a replica before the flush is due: its flushes are its
    // master's from now on.
    engine.replication().unwrap().set_read_only(true);
    std::thread::sleep(Duration::from_millis(2100));
    engine.maintain();
    assert_eq!(get(&engine, b"k").map(|found| found.0), Some(b"v".to_vec()));
}

/// A snapshot sent to a replica that reads slowly holds the log; once
/// what was appended meanwhile passes `--log-retention-max`, the snapshot
/// fails (the replica asks again) rather than keep the log for ever.
#[test]
fn a_snapshot_read_too_slowly_lets_the_log_go_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let master = DiskStore::open(kura_store::DiskConfig {
        map_size: 256 << 20,
        reserve_bytes: 0,
        log_retention_max: 1 << 20,
        ..kura_store::DiskConfig::new(dir.path())
    })
    .unwrap();
    let value = vec![b'v'; 1000];
    // Many writes, then one wait for them all.
    let write = |prefix: &str, count: usize| {
        for n in 0..count {
            let key = format!("{prefix}:{n}");
            let command = kura_store::StoreCommand {
                mode: StoreMode::Set,
                key: key.as_bytes(),
                value: &value,
                flags: 0,
                expiry: 0,
                compare_cas: None,
                stale_if_older: false,
            };
            master.store(&command, &AckFence::default());
        }
        master.wait_until_all_applied();
    };
    write("before", 3000);
    let mut parts = 0;
    let sent = master.snapshot(&mut |part| {
        if matches!(part, SnapshotPart::Records(_)) {
            parts += 1;
            // Clients write while the replica is slow to read.
            write(&format!("during:{parts}"), 2000);
        }
        Ok(())
    });
    let error = sent.err().expect("the snapshot fails");
    assert!(error.to_string().contains("--log-retention-max"), "{error}");
    assert!((1..3).contains(&parts), "{parts} parts sent");
}
