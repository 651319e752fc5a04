//! The disk engine's update log read back, backed up and restored, in
//! process (the end-to-end test with a real server is `kura`'s
//! `tests/restore.rs`).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use kura_store::disk::history::backup;
use kura_store::disk::history::restore;
use kura_store::disk::history::{self, Change, Entry, LogPoint, Values};
use kura_store::{AckFence, DeleteCommand, DiskConfig, DiskStore, GetOptions, Store, StoreMode};

mod common;

use common::{command, edit_lmdb, open, store_alone as store};

fn get(store: &dyn Store, key: &[u8]) -> Option<(Vec<u8>, u32)> {
    let mut found = None;
    store.get(
        key,
        &GetOptions::default(),
        &AckFence::default(),
        &mut |item| found = Some((item.value.to_vec(), item.flags)),
    );
    found
}

fn entries(dir: &Path) -> Vec<Entry> {
    for _ in 0..100 {
        let mut entries = Vec::new();
        let read = history::read(dir, Values::Read, |entry| {
            entries.push(entry.clone());
            ControlFlow::Continue(())
        });
        match read {
            Ok(_) => return entries,
            // Retention let a segment go while it was read (a running
            // engine's log): read again, as the error says.
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => panic!("{error}"),
        }
    }
    panic!("segments went while the log was read, a hundred times");
}

fn set_value(entry: &Entry) -> Option<(&[u8], &[u8], u32)> {
    match &entry.change {
        Change::Set {
            key, value, flags, ..
        } => Some((key, value.as_deref()?, *flags)),
        _ => None,
    }
}

#[test]
fn every_change_is_an_entry_numbered_without_gaps_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let large = vec![b'L'; 4096];
    {
        let engine = open(dir.path());
        store(&engine, StoreMode::Set, b"small", b"v1", 1);
        store(&engine, StoreMode::Set, b"large", &large, 2);
        let expiry = engine.clock().from_unix(2_000_000_000);
        assert!(engine
            .touch(b"large", expiry, &AckFence::default())
            .is_hit());
        engine.wait_until_all_applied();
        store(&engine, StoreMode::Append, b"small", b"+a", 0);
    }
    {
        let engine = open(dir.path());
        engine.delete(b"small", &DeleteCommand::default(), &AckFence::default());
        engine.wait_until_all_applied();
        engine.flush_all(0, &AckFence::default());
        engine.wait_until_all_applied();
        store(&engine, StoreMode::Set, b"after", b"x", 3);
    }
    let server_id: u32 = std::fs::read_to_string(dir.path().join("server-id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let entries = entries(dir.path());
    let lsns: Vec<u64> = entries.iter().map(|e| e.lsn).collect();
    assert_eq!(lsns, (1..=7).collect::<Vec<_>>(), "{entries:#?}");
    assert!(entries.iter().all(|e| e.origin == server_id));
    assert!(entries.windows(2).all(|w| w[0].micros <= w[1].micros));
    assert_eq!(set_value(&entries[0]), Some((&b"small"[..], &b"v1"[..], 1)));
    assert_eq!(set_value(&entries[1]), Some((&b"large"[..], &large[..], 2)));
    // The touch logs the whole item, its value read where the log keeps it.
    assert_eq!(set_value(&entries[2]), Some((&b"large"[..], &large[..], 2)));
    assert!(matches!(
        entries[2].change,
        Change::Set {
            expiry_unix: 2_000_000_000,
            ..
        }
    ));
    assert_eq!(
        set_value(&entries[3]),
        Some((&b"small"[..], &b"v1+a"[..], 1))
    );
    assert_eq!(
        entries[4].change,
        Change::Remove {
            key: b"small".to_vec()
        }
    );
    assert!(matches!(entries[5].change, Change::Flush { .. }));
    assert_eq!(set_value(&entries[6]), Some((&b"after"[..], &b"x"[..], 3)));
}

/// The log's segments in `dir` (number and path), oldest first.
fn segments(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let hex = name.strip_prefix("journal-")?.strip_suffix(".log")?;
            Some((u64::from_str_radix(hex, 16).ok()?, path.clone()))
        })
        .collect();
    found.sort();
    found
}

/// Retention removes the oldest segments of a live server, perhaps
/// between a reader's listing and its read of them.
#[test]
fn a_segment_removed_before_the_read_reached_it_is_passed_over_and_after_is_named() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = open(dir.path());
        store(&engine, StoreMode::Set, b"a", b"1", 0);
        store(&engine, StoreMode::Set, b"b", b"2", 0);
    }
    let listed = segments(dir.path());
    assert!(!listed.is_empty());
    let whole = history::read(dir.path(), Values::Read, |_| ControlFlow::Continue(())).unwrap();
    assert_eq!(whole.entries, 2);

    let gone = |number: u64| {
        (
            number,
            dir.path().join(format!("journal-{number:016x}.log")),
        )
    };
    let mut removed_first = vec![gone(0)];
    removed_first.extend(listed.iter().cloned());
    let mut read = Vec::new();
    let summary = history::read_segments(&removed_first, Values::Read, |entry| {
        read.push(entry.lsn);
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(read, vec![1, 2]);
    assert_eq!(summary, whole);

    let mut removed_after = listed.clone();
    removed_after.push(gone(listed.last().unwrap().0 + 1));
    let error = history::read_segments(&removed_after, Values::Skip, |_| ControlFlow::Continue(()))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("was removed while the log was read"),
        "{error}"
    );
}

/// Backs `engine` up into `to`, incrementally when `since` is given.
fn backup(engine: &DiskStore, to: &Path, since: Option<&Path>) -> backup::Manifest {
    let json = engine.backup(to, since).expect("backup");
    serde_json::from_str(&json).unwrap()
}

/// A write taken before a backup is in it, though nobody asked for its
/// append yet (a client's `set` pipelined before its `backup`: the worker
/// asks once it has served both).
#[test]
fn a_backup_holds_the_writes_taken_before_it() {
    let work = tempfile::tempdir().unwrap();
    let engine = open(&work.path().join("data"));
    store(&engine, StoreMode::Set, b"first", b"1", 0);
    for round in 0..20 {
        let key = format!("taken{round}");
        let taken = engine.store(
            &command(StoreMode::Set, key.as_bytes(), b"v", 0),
            &AckFence::default(),
        );
        assert!(matches!(taken, kura_store::StoreOutcome::Stored { .. }));
        let manifest = backup(&engine, &work.path().join(format!("backup{round}")), None);
        assert_eq!(manifest.last.lsn, round + 2, "round {round}");
    }
}

#[test]
fn restores_reach_exactly_the_entry_asked_and_a_chain_equals_a_full_backup() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let engine = open(&data);
    let large = vec![b'Z'; 3000];
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    store(&engine, StoreMode::Set, b"big", &large, 0);
    let full = work.path().join("full");
    let manifest = backup(&engine, &full, None);
    assert_eq!(
        manifest.snapshot.map(|s| s.lsn).unwrap() + 1,
        manifest.first_lsn
    );
    store(&engine, StoreMode::Set, b"a", b"2", 0); // 3
    engine.delete(b"big", &DeleteCommand::default(), &AckFence::default()); // 4
    engine.wait_until_all_applied();
    store(&engine, StoreMode::Set, b"a", b"3", 0); // 5
    let incremental = work.path().join("incremental");
    let manifest = backup(&engine, &incremental, Some(&full));
    assert_eq!((manifest.first_lsn, manifest.last.lsn), (3, 5));
    let whole = work.path().join("whole");
    backup(&engine, &whole, None);
    drop(engine);

    let expect = [
        (2, Some(&b"1"[..]), true),
        (3, Some(&b"2"[..]), true),
        (4, Some(&b"2"[..]), false),
        (5, Some(&b"3"[..]), false),
    ];
    for (lsn, a, big) in expect {
        let to = work.path().join(format!("at-{lsn}"));
        let report = restore::restore(&incremental, Some(LogPoint::Lsn(lsn)), &to).unwrap();
        assert_eq!(report.restored.lsn, lsn);
        let restored = open(&to);
        assert_eq!(
            get(&restored, b"a").map(|f| f.0),
            a.map(<[u8]>::to_vec),
            "at {lsn}"
        );
        assert_eq!(get(&restored, b"big").is_some(), big, "at {lsn}");
        drop(restored);
        assert!(
            entries(&to).is_empty(),
            "a restored directory starts a new history"
        );
    }
    let chained = work.path().join("chained");
    restore::restore(&incremental, None, &chained).unwrap();
    let single = work.path().join("single");
    restore::restore(&whole, None, &single).unwrap();
    let (chained, single) = (open(&chained), open(&single));
    for key in [&b"a"[..], b"big"] {
        assert_eq!(get(&chained, key), get(&single, key));
    }
    // A restored server numbers its own entries on from the point.
    store(&chained, StoreMode::Set, b"new", b"n", 0);
    drop(chained);
    let dir = work.path().join("chained");
    assert_eq!(
        entries(&dir).iter().map(|e| e.lsn).collect::<Vec<_>>(),
        vec![6]
    );
}

#[test]
fn a_chain_of_backups_moved_whole_still_verifies_and_restores() {
    let work = tempfile::tempdir().unwrap();
    let engine = open(&work.path().join("data"));
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    let backups = work.path().join("backups");
    std::fs::create_dir(&backups).unwrap();
    backup(&engine, &backups.join("full"), None);
    store(&engine, StoreMode::Set, b"a", b"2", 0);
    let manifest = backup(
        &engine,
        &backups.join("incremental"),
        Some(&backups.join("full")),
    );
    assert_eq!(manifest.since.as_deref(), Some(Path::new("../full")));
    drop(engine);

    let moved = work.path().join("moved");
    std::fs::rename(&backups, &moved).unwrap();
    let chain = backup::verify(&moved.join("incremental")).unwrap();
    assert_eq!(chain.backups.len(), 2);
    assert_eq!(
        chain.backups[0].0,
        std::fs::canonicalize(moved.join("full")).unwrap()
    );
    let restored = work.path().join("restored");
    restore::restore(&moved.join("incremental"), None, &restored).unwrap();
    assert_eq!(
        get(&open(&restored), b"a").map(|f| f.0),
        Some(b"2".to_vec())
    );
}

/// A restored directory's log starts after its point, with no entry
/// before it: its own backups are continued all the same (before and after
/// its first write), and the backups of the server it was restored from
/// are not, being of another history, even under the same server id.
#[test]
fn a_restored_server_continues_its_own_backups_and_not_those_it_came_from() {
    let work = tempfile::tempdir().unwrap();
    let engine = open_as_seven(&work.path().join("data"));
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    store(&engine, StoreMode::Set, b"b", b"1", 0);
    let origin = work.path().join("origin");
    let origin_manifest = backup(&engine, &origin, None);
    drop(engine);
    let restored_dir = work.path().join("restored");
    restore::restore(&origin, None, &restored_dir).unwrap();
    let restored = open_as_seven(&restored_dir);

    let full = work.path().join("full");
    let full_manifest = backup(&restored, &full, None);
    assert_eq!(full_manifest.last, origin_manifest.last);
    assert_ne!(full_manifest.history, origin_manifest.history);
    let idle = work.path().join("idle");
    let idle_manifest = backup(&restored, &idle, Some(&full));
    assert_eq!(idle_manifest.first_lsn, full_manifest.last.lsn + 1);
    assert_eq!(idle_manifest.last, full_manifest.last);
    store(&restored, StoreMode::Set, b"a", b"2", 0);
    store(&restored, StoreMode::Set, b"c", b"1", 0);
    let written = work.path().join("written");
    let written_manifest = backup(&restored, &written, Some(&idle));
    assert_eq!(
        (written_manifest.first_lsn, written_manifest.last.lsn),
        (3, 4)
    );
    let error = restored
        .backup(&work.path().join("refused"), Some(&origin))
        .unwrap_err();
    assert!(error.contains("another history"), "{error}");
    let whole = work.path().join("whole");
    backup(&restored, &whole, None);
    drop(restored);

    let (chained, single) = (work.path().join("chained"), work.path().join("single"));
    restore::restore(&written, None, &chained).unwrap();
    restore::restore(&whole, None, &single).unwrap();
    let (chained, single) = (open(&chained), open(&single));
    for key in [&b"a"[..], b"b", b"c"] {
        assert!(get(&chained, key).is_some());
        assert_eq!(get(&chained, key), get(&single, key));
    }
}

/// Retention lets the segment of a backup's last entry go while the log
/// still holds every entry after it: the backup is continued, though an
/// older segment stays for a large value LMDB reads there.
#[test]
fn an_incremental_backup_continues_one_whose_last_entry_retention_let_go() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let engine = DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        reserve_bytes: 0,
        log_retention: kura_store::LogRetention::NOTHING,
        ..DiskConfig::new(&data)
    })
    .unwrap();
    let large = vec![b'L'; 4096];
    store(&engine, StoreMode::Set, b"large", &large, 0);
    engine.wait_until_all_applied();
    // Entry n + 1 stays in the current segment, unless an apply round
    // (every 5 s) takes it between its write and the backup: then it is
    // gone too, the backup is refused for that, and the test starts over.
    for n in (2..12).step_by(2) {
        store(&engine, StoreMode::Set, b"a", format!("{n}").as_bytes(), 0);
        let full = work.path().join(format!("full-{n}"));
        assert_eq!(backup(&engine, &full, None).last.lsn, n);
        engine.wait_until_all_applied();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while entries(&data).iter().any(|entry| entry.lsn == n) {
            assert!(std::time::Instant::now() < deadline, "LSN {n} is kept");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let kept: Vec<u64> = entries(&data).iter().map(|entry| entry.lsn).collect();
        assert_eq!(kept, [1], "the large value's segment stays");
        // Not waited for: a store that waits for LMDB ends the segment,
        // and retention lets it go as soon as LMDB's fsync is done.
        let written = format!("{}", n + 1);
        let set = command(StoreMode::Set, b"a", written.as_bytes(), 0);
        let taken = engine.store(&set, &AckFence::default());
        assert!(matches!(taken, kura_store::StoreOutcome::Stored { .. }));
        let incremental = work.path().join(format!("incremental-{n}"));
        match engine.backup(&incremental, Some(&full)) {
            Ok(json) => {
                let manifest: backup::Manifest = serde_json::from_str(&json).unwrap();
                assert_eq!((manifest.first_lsn, manifest.last.lsn), (n + 1, n + 1));
                drop(engine);
                let restored = work.path().join("restored");
                restore::restore(&incremental, None, &restored).unwrap();
                let restored = open(&restored);
                let value = get(&restored, b"a").map(|f| f.0);
                assert_eq!(value, Some(written.into_bytes()));
                assert_eq!(get(&restored, b"large").map(|f| f.0), Some(large));
                return;
            }
            Err(error) => {
                let wanted = format!("no longer holds entries {}", n + 1);
                assert!(error.contains(&wanted), "{error}");
            }
        }
    }
    panic!("an apply round took every write before its backup");
}

/// A restore puts the values the log kept into LMDB in batches (64 MiB
/// a transaction): more than one batch of them all comes back.
#[test]
fn a_restore_of_more_large_values_than_one_batch_holds_them_all() {
    let work = tempfile::tempdir().unwrap();
    let engine = DiskStore::open(DiskConfig {
        map_size: 512 << 20,
        reserve_bytes: 0,
        ..DiskConfig::new(work.path().join("data"))
    })
    .unwrap();
    let value = |n: usize| vec![b'a' + (n % 26) as u8; 1 << 20];
    for n in 0..80 {
        store(
            &engine,
            StoreMode::Set,
            format!("large:{n:02}").as_bytes(),
            &value(n),
            0,
        );
    }
    let full = work.path().join("full");
    backup(&engine, &full, None);
    drop(engine);
    let restored = work.path().join("restored");
    restore::restore(&full, None, &restored).unwrap();
    assert!(entries(&restored).is_empty(), "the log is let go");
    let restored = open(&restored);
    for n in 0..80 {
        let found = get(&restored, format!("large:{n:02}").as_bytes()).map(|f| f.0);
        assert!(found == Some(value(n)), "large:{n:02}");
    }
}

#[test]
fn a_restore_that_lacks_part_of_the_log_names_the_missing_lsns() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let engine = open(&data);
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    let full = work.path().join("full");
    let manifest = backup(&engine, &full, None);
    let snapshot = manifest.snapshot.unwrap().lsn;
    for n in 0..3 {
        store(&engine, StoreMode::Set, b"a", format!("v{n}").as_bytes(), 0);
    }
    let incremental = work.path().join("incremental");
    let manifest = backup(&engine, &incremental, Some(&full));
    drop(engine);

    // Past the end of the chain.
    let beyond = manifest.last.lsn + 2;
    let error = restore::restore(
        &incremental,
        Some(LogPoint::Lsn(beyond)),
        &work.path().join("r1"),
    )
    .unwrap_err()
    .to_string();
    let wanted = format!("lack entries {}-{beyond}", manifest.last.lsn + 1);
    assert!(error.contains(&wanted), "{error}");
    assert!(!work.path().join("r1").exists());

    // Before the snapshot: the refusal names where the backup starts, as
    // an LSN and a time an operator can pass to --until.
    let before = LogPoint::Micros(manifest.last.micros - 60_000_000);
    let error = restore::restore(&full, Some(before), &work.path().join("r0"))
        .unwrap_err()
        .to_string();
    let starts = format!("consistent from LSN {snapshot} (");
    assert!(error.contains(&starts) && error.contains("Z)"), "{error}");

    // The full backup the incremental one continues, gone: the refusal
    // names the entries it held.
    let moved = work.path().join("moved");
    std::fs::rename(&full, &moved).unwrap();
    let error = restore::restore(&incremental, None, &work.path().join("r3"))
        .unwrap_err()
        .to_string();
    let wanted = format!(
        "holds the chain's entries up to LSN {}",
        manifest.first_lsn - 1
    );
    assert!(error.contains(&wanted), "{error}");
    std::fs::rename(&moved, &full).unwrap();

    // A segment lost from the incremental backup, its manifest still
    // listing it: the entries it held are named, not only the file.
    let lost = manifest
        .files
        .iter()
        .find(|f| f.name.starts_with("journal-"))
        .unwrap()
        .name
        .clone();
    std::fs::remove_file(incremental.join(&lost)).unwrap();
    let error = restore::restore(&incremental, None, &work.path().join("r4"))
        .unwrap_err()
        .to_string();
    let wanted = format!("the log lacks entries {}", snapshot + 1);
    assert!(error.contains(&wanted), "{error}");
    // And with its manifest agreeing.
    let mut edited = manifest.clone();
    edited.files.retain(|f| f.name != lost);
    std::fs::write(
        incremental.join(backup::MANIFEST),
        serde_json::to_string(&edited).unwrap(),
    )
    .unwrap();
    let error = restore::restore(&incremental, None, &work.path().join("r2"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("lacks entries"), "{error}");
    assert!(error.contains(&format!("{}", snapshot + 1)), "{error}");
}

/// A manifest is not checksummed itself: one whose snapshot says less than
/// its copy of LMDB holds would have the restore serve the copy's state as
/// an earlier one.
#[test]
fn a_restore_refuses_a_manifest_that_disagrees_with_its_copy_of_lmdb() {
    let work = tempfile::tempdir().unwrap();
    let engine = open(&work.path().join("data"));
    // The last value is kept in the log: the full backup copies the
    // segment that holds its entry.
    store(&engine, StoreMode::Set, b"big", &[b'Z'; 3000], 0);
    store(&engine, StoreMode::Set, b"m", b"before", 0);
    store(&engine, StoreMode::Set, b"m", &[b'A'; 3000], 0);
    let full = work.path().join("full");
    let manifest = backup(&engine, &full, None);
    drop(engine);
    let snapshot = manifest.snapshot.unwrap();
    assert_eq!(snapshot.lsn, 3);

    let mut lowered = manifest.clone();
    lowered.snapshot = Some(kura_store::disk::LogPosition::new(2, snapshot.micros));
    lowered.first_lsn = 3;
    let text = serde_json::to_string(&lowered).unwrap();
    std::fs::write(full.join(backup::MANIFEST), text).unwrap();
    backup::verify(&full).unwrap();
    let to = work.path().join("r");
    let error = restore::restore(&full, Some(LogPoint::Lsn(2)), &to)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("its copy of LMDB holds the log up to LSN 3"),
        "{error}"
    );
    assert!(!to.exists(), "a refused restore leaves nothing");
}

/// A backup into the server's own data directory would be taken for its
/// files (a directory named like a segment, say).
#[test]
fn a_backup_into_the_data_directory_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let engine = open(&data);
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    let to = data.join("journal-00000000000000ff.log");
    let error = engine.backup(&to, None).unwrap_err().to_string();
    assert!(
        error.contains("inside this server's data directory"),
        "{error}"
    );
    assert!(!to.exists());
}

/// A directory named like a segment (a backup written into the data
/// directory) or a FIFO (whose open waits for a writer) is no segment.
#[test]
fn only_regular_files_are_segments_or_backed_up_files() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let engine = open(&data);
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    drop(engine);
    std::fs::create_dir(data.join("journal-00000000000000ff.log")).unwrap();
    let fifo = data.join("journal-00000000000000fe.log");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let engine = open(&data);
    assert_eq!(get(&engine, b"a"), Some((b"1".to_vec(), 0)));
    drop(engine);
    assert!(history::read(&data, Values::Skip, |_| ControlFlow::Continue(())).is_ok());

    let (full, _) = one_item_backed_up(&work.path().join("other"));
    let copy = full.join(backup::DATA_FILE);
    std::fs::remove_file(&copy).unwrap();
    assert!(std::process::Command::new("mkfifo")
        .arg(&copy)
        .status()
        .unwrap()
        .success());
    let started = std::time::Instant::now();
    let error = backup::verify(&full).unwrap_err().to_string();
    assert!(error.contains("is not a regular file"), "{error}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// A data directory in `work` with one item, backed up in full into
/// `work/full`.
fn one_item_backed_up(work: &Path) -> (PathBuf, backup::Manifest) {
    let engine = open(&work.join("data"));
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    let full = work.join("full");
    let manifest = backup(&engine, &full, None);
    (full, manifest)
}

/// A day of steady writes leaves some 17,000 segments (one per apply
/// round), and an incremental backup lists each: a manifest of ten
/// thousand segments verifies as one of a few does.
#[test]
fn a_backup_listing_ten_thousand_segments_verifies() {
    let work = tempfile::tempdir().unwrap();
    let (full, mut manifest) = one_item_backed_up(work.path());
    let newest = (manifest.files.iter())
        .filter_map(|file| file.name.strip_prefix("journal-")?.strip_suffix(".log"))
        .filter_map(|hex| u64::from_str_radix(hex, 16).ok())
        .max()
        .unwrap();
    // Segments that hold no entries: nothing in the chain changes.
    for number in newest + 1..=newest + 10_000 {
        let name = format!("journal-{number:016x}.log");
        std::fs::write(full.join(&name), b"").unwrap();
        manifest.files.push(backup::FileSum {
            name,
            bytes: 0,
            sha256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
        });
    }
    let text = serde_json::to_string_pretty(&manifest).unwrap();
    assert!(text.len() > 1 << 20);
    std::fs::write(full.join(backup::MANIFEST), text).unwrap();
    let chain = backup::verify(&full).unwrap();
    assert_eq!(chain.backups[0].1.files.len(), manifest.files.len());
}

#[test]
fn a_damaged_backup_fails_verification() {
    let work = tempfile::tempdir().unwrap();
    let (full, _) = one_item_backed_up(work.path());
    backup::verify(&full).unwrap();
    let data = full.join(backup::DATA_FILE);
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&data, bytes).unwrap();
    let error = backup::verify(&full).unwrap_err().to_string();
    assert!(error.contains("does not match its checksum"), "{error}");
}

/// A manifest is checked against its log: its last entry must be the
/// log's (one bit of its LSN would restore less and say nothing), and a
/// file's size is compared before it is read (one grown sparse to a
/// gibibyte is refused at once).
#[test]
fn a_manifest_that_disagrees_with_its_log_fails_verification() {
    let work = tempfile::tempdir().unwrap();
    let engine = open(&work.path().join("data"));
    let first = work.path().join("first");
    backup(&engine, &first, None);
    for n in 0..5 {
        store(&engine, StoreMode::Set, format!("k{n}").as_bytes(), b"v", 0);
    }
    // An incremental backup: entries past its start.
    let full = work.path().join("full");
    let manifest = backup(&engine, &full, Some(&first));
    drop(engine);
    assert!(manifest.first_lsn < manifest.last.lsn, "{manifest:?}");
    backup::verify(&full).unwrap();
    let edited = |edit: &dyn Fn(&mut backup::Manifest)| {
        let mut edited = manifest.clone();
        edit(&mut edited);
        let text = serde_json::to_string(&edited).unwrap();
        std::fs::write(full.join(backup::MANIFEST), text).unwrap();
        backup::verify(&full).map(drop).unwrap_err().to_string()
    };
    let error = edited(&|m| m.last.lsn -= 1);
    assert!(error.contains("past its manifest's last"), "{error}");
    let error = edited(&|m| m.last.micros += 1);
    assert!(error.contains("its manifest says"), "{error}");
    std::fs::write(
        full.join(backup::MANIFEST),
        serde_json::to_string(&manifest).unwrap(),
    )
    .unwrap();
    backup::verify(&full).unwrap();
    let segment = (manifest.files.iter())
        .find(|file| file.name.starts_with("journal-"))
        .unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(full.join(&segment.name))
        .unwrap();
    file.set_len(1 << 30).unwrap();
    let error = backup::verify(&full).map(drop).unwrap_err().to_string();
    assert!(
        error.contains(&format!("holds {} bytes, its manifest says", 1u64 << 30)),
        "{error}"
    );
}

/// A backup opened as a data directory would be written into, and fail
/// its checksums after: it is refused, and stays as it was.
#[test]
fn a_backup_is_not_opened_as_a_data_directory() {
    let work = tempfile::tempdir().unwrap();
    let (full, _) = one_item_backed_up(work.path());
    let error = match DiskStore::open(DiskConfig::new(&full)) {
        Ok(_) => panic!("a backup opened as a data directory"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("is a backup"), "{error}");
    assert!(!full.join("lock").exists(), "nothing written into it");
    backup::verify(&full).unwrap();
}

fn open_as_seven(dir: &Path) -> DiskStore {
    DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        reserve_bytes: 0,
        server_id: Some(7),
        ..DiskConfig::new(dir)
    })
    .unwrap()
}

/// A full backup, in `work/full`, of `writes` sets on a data directory of
/// server 7 (`work/first`), closed since.
fn backed_up_as_seven(work: &Path, writes: usize) -> (PathBuf, backup::Manifest) {
    let first = open_as_seven(&work.join("first"));
    for n in 0..writes {
        store(&first, StoreMode::Set, b"a", format!("v{n}").as_bytes(), 0);
    }
    let full = work.join("full");
    let manifest = backup(&first, &full, None);
    (full, manifest)
}

/// A backup that is not of the server's own history: a data directory made
/// again under the same `--server-id`, whose log is behind the backup.
#[test]
fn an_incremental_backup_of_another_history_is_refused_and_leaves_nothing() {
    let work = tempfile::tempdir().unwrap();
    let (full, manifest) = backed_up_as_seven(work.path(), 10);
    let again = open_as_seven(&work.path().join("again"));
    store(&again, StoreMode::Set, b"b", b"1", 0);

    let absent = work.path().join("absent");
    let error = (again.backup(&absent.join("deeper/backup"), Some(&full))).unwrap_err();
    assert!(error.contains("is a backup of another history"), "{error}");
    assert!(manifest.history.is_some());
    assert!(
        !absent.exists(),
        "a failed backup leaves no folder, nor the folders it made for it"
    );

    // A folder made empty beforehand stays, empty: the command can be run
    // again as it was.
    let made = work.path().join("made");
    std::fs::create_dir(&made).unwrap();
    again.backup(&made, Some(&full)).unwrap_err();
    assert_eq!(std::fs::read_dir(&made).unwrap().count(), 0);
    backup(&again, &made, None);
}

/// The same, but the data directory made again has gone past the backup's
/// last LSN: LSNs alone would take it for a continuation, and a restore
/// of the chain would lack the entries between.
#[test]
fn an_incremental_backup_of_another_history_that_went_further_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let (full, mut manifest) = backed_up_as_seven(work.path(), 3);
    // Written by an earlier build, without the history's id: the log's
    // own positions tell.
    manifest.history = None;
    let text = serde_json::to_string(&manifest).unwrap();
    std::fs::write(full.join(backup::MANIFEST), text).unwrap();
    let again = open_as_seven(&work.path().join("again"));
    for n in 0..manifest.last.lsn + 2 {
        store(&again, StoreMode::Set, b"b", format!("w{n}").as_bytes(), 0);
    }
    again.wait_until_all_applied();

    let absent = work.path().join("absent");
    let error = again.backup(&absent, Some(&full)).unwrap_err();
    assert!(
        error.contains("not a point of this server's log"),
        "{error}"
    );
    assert!(error.contains("another history"), "{error}");
    assert!(!absent.exists(), "a failed backup leaves no folder");

    // Its own full backup is continued, however many writes came since.
    let own = work.path().join("own");
    backup(&again, &own, None);
    store(&again, StoreMode::Set, b"c", b"1", 0);
    again.backup(&work.path().join("next"), Some(&own)).unwrap();
}

#[test]
fn a_manifest_naming_a_path_or_missing_a_segment_fails_verification() {
    let work = tempfile::tempdir().unwrap();
    let (full, manifest) = one_item_backed_up(work.path());

    // A name with a path in it: a restore would copy it from, and write it
    // to, outside the two directories.
    let mut edited = manifest.clone();
    edited.files[0].name = format!("../{}", edited.files[0].name);
    std::fs::write(
        full.join(backup::MANIFEST),
        serde_json::to_string(&edited).unwrap(),
    )
    .unwrap();
    let error = backup::verify(&full).unwrap_err().to_string();
    assert!(error.contains("is not a file name"), "{error}");
    let target = work.path().join("target");
    let error = restore::restore(&full, None, &target)
        .unwrap_err()
        .to_string();
    assert!(error.contains("is not a file name"), "{error}");
    assert!(!target.exists());

    // A file of the data directory's other than LMDB's: a restore would
    // put it into the new one (another server's id, a lock).
    for name in ["server-id", "lock.mdb", "restore-unfinished"] {
        let mut edited = manifest.clone();
        edited.files[0].name = name.to_string();
        let text = serde_json::to_string(&edited).unwrap();
        std::fs::write(full.join(backup::MANIFEST), text).unwrap();
        let error = backup::verify(&full).unwrap_err().to_string();
        assert!(
            error.contains("is not a file a full backup holds"),
            "{error}"
        );
    }

    // A segment the manifest does not list: its checksum is nobody's.
    std::fs::write(
        full.join(backup::MANIFEST),
        serde_json::to_string(&manifest).unwrap(),
    )
    .unwrap();
    backup::verify(&full).unwrap();
    let stray = "journal-0000000000000099.log";
    std::fs::write(full.join(stray), b"").unwrap();
    let error = backup::verify(&full).unwrap_err().to_string();
    assert!(
        error.contains(&format!("{stray} is not in the manifest")),
        "{error}"
    );
}

/// An incremental backup names the last entry of the one it continued: a
/// full backup put in that one's place, however its LSNs line up, breaks
/// the chain.
#[test]
fn a_chain_whose_earlier_backup_was_replaced_fails_verification() {
    let work = tempfile::tempdir().unwrap();
    let engine = open(&work.path().join("data"));
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    let full = work.path().join("full");
    let mut replaced = backup(&engine, &full, None);
    store(&engine, StoreMode::Set, b"a", b"2", 0);
    let incremental = work.path().join("incremental");
    let manifest = backup(&engine, &incremental, Some(&full));
    assert_eq!(manifest.since_last, Some(replaced.last));
    backup::verify(&incremental).unwrap();
    // Another history's backup ending at the same LSN, at another time.
    replaced.last.micros -= 1;
    std::fs::write(
        full.join(backup::MANIFEST),
        serde_json::to_string(&replaced).unwrap(),
    )
    .unwrap();
    backup::verify(&full).unwrap();
    let error = backup::verify(&incremental).unwrap_err().to_string();
    assert!(error.contains("does not continue"), "{error}");
}

/// A backup's log ends at its manifest's `last`, as it was copied: a
/// manifest that names an earlier last entry is damaged (it would restore
/// less and say nothing), and the restore is refused before it writes.
#[test]
fn a_restore_refuses_a_manifest_whose_last_entry_is_not_its_logs() {
    let work = tempfile::tempdir().unwrap();
    let engine = open(&work.path().join("data"));
    store(&engine, StoreMode::Set, b"a", b"1", 0);
    let full = work.path().join("full");
    backup(&engine, &full, None);
    for n in 0..3 {
        store(
            &engine,
            StoreMode::Set,
            b"a",
            format!("{}", n + 2).as_bytes(),
            0,
        );
    }
    let incremental = work.path().join("incremental");
    let mut manifest = backup(&engine, &incremental, Some(&full));
    let written = manifest.last.lsn;
    manifest.last.lsn -= 1;
    std::fs::write(
        incremental.join(backup::MANIFEST),
        serde_json::to_string(&manifest).unwrap(),
    )
    .unwrap();
    let to = work.path().join("restored");
    let error = restore::restore(&incremental, None, &to)
        .map(drop)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("up to LSN {written}, past its manifest's last")),
        "{error}"
    );
    assert!(!to.exists(), "the refused restore wrote {}", to.display());
}

/// A chain larger than the default map restores into a map that holds it.
#[test]
fn a_restore_maps_room_for_twice_the_chain() {
    let manifest = |bytes: u64| backup::Manifest {
        format: 1,
        kind: backup::BackupKind::Full,
        server_id: 1,
        created_micros: 0,
        snapshot: None,
        since: None,
        since_last: None,
        first_lsn: 1,
        last: Default::default(),
        consistent_from: None,
        history: None,
        files: vec![backup::FileSum {
            name: backup::DATA_FILE.into(),
            bytes,
            sha256: String::new(),
        }],
    };
    let chain = |bytes: u64| backup::Chain {
        backups: vec![("b".into(), manifest(bytes))],
    };
    let default = DiskConfig::new(Path::new("d")).map_size;
    assert_eq!(restore::map_size_for(&chain(1 << 20)), default);
    assert_eq!(restore::map_size_for(&chain(100 << 30)), 200 << 30);
}

/// Another format is refused in one line: a newer one, or one only
/// development builds wrote (1 to 4), which no release reads.
#[test]
fn a_data_directory_of_another_format_is_refused() {
    for format in [99u32, 4, 3, 1] {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path()));
        edit_lmdb(dir.path(), |lmdb| {
            let format = format.to_le_bytes();
            lmdb.meta.put(&mut lmdb.txn, b"format", &format).unwrap();
        });
        let error = DiskStore::open(DiskConfig::new(dir.path()))
            .err()
            .expect("refused")
            .to_string();
        assert!(error.contains(&format!("format {format};")), "{error}");
        assert_eq!(error.lines().count(), 1);
    }
}

fn put_row(engine: &DiskStore, key: &[u8], value: &[u8]) {
    let mut row = kura_store::Record::new(key);
    row.put(b"v", value);
    let tables = engine.tables().unwrap();
    tables.put_row(b"t", &row, kura_store::RowMode::Put, &AckFence::default());
    engine.wait_until_all_applied();
}

fn row_value(engine: &DiskStore, key: &[u8]) -> Option<Vec<u8>> {
    let row = engine
        .tables()
        .unwrap()
        .get_row(b"t", key, &kura_store::AckFence::default())
        .unwrap()?;
    row.get(b"v").map(<[u8]>::to_vec)
}

#[test]
fn row_changes_are_entries_and_restores_reach_them_exactly() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let engine = open(&data);
    put_row(&engine, b"r", b"1"); // 1
    store(&engine, StoreMode::Set, b"item", b"i", 0); // 2
    let full = work.path().join("full");
    backup(&engine, &full, None);
    put_row(&engine, b"r", b"2"); // 3
    let tables = engine.tables().unwrap();
    tables.remove_row(b"t", b"r", &AckFence::default()); // 4
    engine.wait_until_all_applied();
    let incremental = work.path().join("incremental");
    backup(&engine, &incremental, Some(&full));
    drop(engine);
    let changes: Vec<(u64, Change)> = entries(&data)
        .into_iter()
        .map(|entry| (entry.lsn, entry.change))
        .collect();
    let row_put = |value: &[u8]| Change::RowPut {
        table: b"t".to_vec(),
        key: b"r".to_vec(),
        columns: vec![(b"v".to_vec(), value.to_vec())],
    };
    assert_eq!(changes[0], (1, row_put(b"1")));
    assert_eq!(changes[2], (3, row_put(b"2")));
    assert_eq!(
        changes[3],
        (
            4,
            Change::RowRemove {
                table: b"t".to_vec(),
                key: b"r".to_vec()
            }
        )
    );
    for (lsn, expected) in [(2, Some(&b"1"[..])), (3, Some(b"2")), (4, None)] {
        let to = work.path().join(format!("at-{lsn}"));
        restore::restore(&incremental, Some(LogPoint::Lsn(lsn)), &to).unwrap();
        let restored = open(&to);
        assert_eq!(row_value(&restored, b"r").as_deref(), expected, "at {lsn}");
        assert_eq!(get(&restored, b"item").map(|f| f.0), Some(b"i".to_vec()));
    }
}

/// Commits that take their time, so that a backup comes while a round is
/// committed in parts.
#[derive(Debug)]
struct SlowCommits;

impl kura_store::disk::io::Io for SlowCommits {
    fn commit(&self, txn: heed::RwTxn<'_>) -> heed::Result<()> {
        txn.commit()?;
        std::thread::sleep(std::time::Duration::from_millis(30));
        Ok(())
    }
}

#[test]
fn a_backup_taken_while_a_round_commits_in_parts_restores_from_the_rounds_end() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    // Rounds commit every 64 or so writes (a quarter of the pending memory
    // in dirtied pages), and start only when asked (600 small writes stay
    // under a quarter of it in bytes).
    let engine = std::sync::Arc::new(
        DiskStore::open(DiskConfig {
            map_size: 64 << 20,
            pending_limit: 1 << 20,
            reserve_bytes: 0,
            io: std::sync::Arc::new(SlowCommits),
            ..DiskConfig::new(&data)
        })
        .unwrap(),
    );
    for n in 0..600 {
        let key = format!("k{n:03}");
        engine.store(
            &command(StoreMode::Set, key.as_bytes(), b"v", 0),
            &AckFence::default(),
        );
    }
    let applier = engine.clone();
    let round = std::thread::spawn(move || applier.wait_until_all_applied());
    std::thread::sleep(std::time::Duration::from_millis(100));
    let full = work.path().join("full");
    let manifest = backup(&engine, &full, None);
    round.join().unwrap();
    drop(engine);
    let snapshot = manifest.snapshot.unwrap().lsn;
    // Copied in the middle of the round (30 ms a part, some ten parts): the
    // copy holds part of it, so it is consistent only from its last entry,
    // and an earlier point is refused. (A copy between rounds, on a slow
    // machine, is consistent at its snapshot.)
    let earliest = manifest.consistent_from.map_or(snapshot, |at| at.lsn);
    if earliest > snapshot {
        let refused =
            restore::restore(&full, Some(LogPoint::Lsn(snapshot)), &work.path().join("x"));
        let Err(error) = refused else {
            panic!("a restore before the copy's round was refused")
        };
        let error = error.to_string();
        assert!(
            error.contains(&format!("consistent from LSN {earliest}")),
            "{error}"
        );
    }
    // Restored to that point: the keys of the entries up to it, no more.
    let to = work.path().join("restored");
    restore::restore(&full, Some(LogPoint::Lsn(earliest)), &to).unwrap();
    let restored = open(&to);
    let mut checked = 0;
    for entry in entries(&data) {
        let Change::Set { key, .. } = &entry.change else {
            continue;
        };
        assert_eq!(
            get(&restored, key).is_some(),
            entry.lsn <= earliest,
            "{} (LSN {}), restored to {earliest}",
            String::from_utf8_lossy(key),
            entry.lsn
        );
        checked += 1;
    }
    assert_eq!(checked, 600);
}
