//! Log replay of arbitrary bytes (proptest; `PROPTEST_CASES` for longer
//! runs): a damaged or hostile journal segment is read by `kura log`, by a
//! restore and by the engine's open without a panic or an allocation past
//! the file, and the engine then answers reads of every key it holds.

use std::ops::ControlFlow;
use std::path::Path;

use proptest::prelude::*;

use super::history::{self, Values};
use super::journal;
use super::log_format::{self, GroupHead, Location, Record};
use super::record::LogPointer;
use super::{DiskConfig, DiskStore};
use crate::{AckFence, GetOptions, Store};

/// One record to encode with a valid checksum: its kind decides the shape.
#[derive(Debug, Clone)]
enum Raw {
    Group(u64, u64, u32, u32),
    Put(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Flush(u64),
    Move(Vec<u8>, u64, u64, Vec<u8>),
    RowPut(Vec<u8>, Vec<u8>),
    RowRemove(Vec<u8>),
}

fn raw_record() -> impl Strategy<Value = Raw> {
    let key = proptest::collection::vec(any::<u8>(), 0..40);
    let rest = proptest::collection::vec(any::<u8>(), 0..120);
    prop_oneof![
        (0u64..50, any::<u64>(), any::<u32>(), 0u32..6)
            .prop_map(|(a, b, c, d)| Raw::Group(a, b, c, d)),
        (key.clone(), rest.clone()).prop_map(|(k, r)| Raw::Put(k, r)),
        key.clone().prop_map(Raw::Remove),
        any::<u64>().prop_map(Raw::Flush),
        (key.clone(), 0u64..4, 0u64..4096, rest.clone())
            .prop_map(|(k, s, o, r)| Raw::Move(k, s, o, r)),
        (key.clone(), rest).prop_map(|(k, r)| Raw::RowPut(k, r)),
        key.prop_map(Raw::RowRemove),
    ]
}

fn encode(records: &[Raw]) -> Vec<u8> {
    let mut out = Vec::new();
    for raw in records {
        let record = match raw {
            Raw::Group(first_lsn, micros, origin, entries) => Record::Group(GroupHead {
                first_lsn: *first_lsn,
                micros: *micros,
                origin: *origin,
                entries: *entries,
            }),
            Raw::Put(key, record) => Record::Put { key, record },
            Raw::Remove(key) => Record::Remove { key },
            Raw::Flush(boundary) => Record::Flush(*boundary),
            Raw::RowPut(key, record) => Record::RowPut { key, record },
            Raw::RowRemove(key) => Record::RowRemove { key },
            Raw::Move(key, segment, offset, record) => Record::Move {
                key,
                from: Location {
                    segment: *segment,
                    offset: *offset,
                },
                record,
            },
        };
        log_format::encode(&mut out, record);
    }
    out
}

/// 256 cases, or `PROPTEST_CASES`.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256)
}

/// A data directory whose next replay reads `encode(number)` as its newest
/// segment.
fn with_segment(encode: impl FnOnce(u64) -> Vec<u8>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    drop(DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap());
    let newest = journal::segments(dir.path())
        .unwrap()
        .last()
        .map_or(0, |s| s.0);
    let number = newest + 1;
    std::fs::write(journal::segment_path(dir.path(), number), encode(number)).unwrap();
    dir
}

/// Reads the log every way kura does; the engine must open (or refuse
/// with an error) and answer a read of each key.
fn read_every_way(dir: &Path, keys: &[Vec<u8>]) {
    let _ = history::read(dir, Values::Read, |_| ControlFlow::Continue(()));
    let _ = history::missing(dir, 1, 100);
    if let Ok(store) = DiskStore::open(DiskConfig::for_tests(dir)) {
        for key in keys {
            store.get(
                key,
                &GetOptions::default(),
                &AckFence::default(),
                &mut |_| {},
            );
        }
    }
}

/// Every put the log holds carries its value; one holding a pointer (which
/// kura never journals) is damage, reported as such rather than read as a
/// 24-byte value or followed.
#[test]
fn a_logged_put_holding_a_pointer_is_reported_as_damage() {
    use super::record::{self, Header};
    let header = Header {
        flags: 0,
        expiry_unix: 0,
        cas: 1,
        bits: 0,
    };
    let dir = with_segment(|number| {
        let at = Location {
            segment: number,
            offset: 0,
        };
        let pointer = pointer_to_put(at);
        let mut bytes = Vec::new();
        let head = GroupHead {
            first_lsn: 1,
            micros: 1,
            origin: 1,
            entries: 1,
        };
        log_format::encode(&mut bytes, Record::Group(head));
        let stored = record::pointer_record(&header, &pointer);
        let put = Record::Put {
            key: b"k",
            record: &stored,
        };
        log_format::encode(&mut bytes, put);
        bytes
    });
    let error = history::read(dir.path(), Values::Read, |_| ControlFlow::Continue(()))
        .expect_err("refused");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
    assert!(error.to_string().contains("damaged"), "{error}");
}

/// A master's first group (LSN 1): its head, then a put of each (key,
/// stored record).
fn master_group(puts: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut group = Vec::new();
    let head = GroupHead {
        first_lsn: 1,
        micros: 1,
        origin: 7,
        entries: puts.len() as u32,
    };
    log_format::encode(&mut group, Record::Group(head));
    for &(key, record) in puts {
        log_format::encode(&mut group, Record::Put { key, record });
    }
    group
}

const HEADER: super::record::Header = super::record::Header {
    flags: 0,
    expiry_unix: 0,
    cas: 1,
    bits: 0,
};

/// A master's group with a key LMDB cannot hold (empty, or past its 511
/// bytes) is refused whole: journalled, LMDB's refusal would poison the
/// engine, and again at every replay.
#[test]
fn a_replica_refuses_a_group_with_a_key_lmdb_cannot_hold() {
    use super::record::Keyed;
    use crate::replication::{LogPosition, Replication};
    let dir = tempfile::tempdir().unwrap();
    let replica = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
    let long = vec![b'k'; 600];
    for key in [&b""[..], &long[..]] {
        let item = Keyed::encode(key, &HEADER, &[b"v"]);
        let group = master_group(&[(key, item.record())]);
        let error = replica.take_group(&group).unwrap_err();
        assert!(error.contains("no protocol takes"), "{error}");
    }
    // Nothing was journalled, nothing poisoned: a good group follows.
    assert_eq!(replica.position(), Some(LogPosition::default()));
    let item = Keyed::encode(b"fine", &HEADER, &[b"v"]);
    let group = master_group(&[(b"fine", item.record())]);
    replica.take_group(&group).unwrap();
    replica.wait_until_all_applied();
    drop(replica);
    let reopened = DiskStore::open(DiskConfig::for_tests(dir.path())).expect("the log replays");
    assert_eq!(reopened.position().map(|at| at.lsn), Some(1));
}

/// A master's group holding a put with a pointer (which would lead into
/// this server's log at the master's offsets) is refused whole: nothing of
/// it is pending, to be journalled later as this server's own.
#[test]
fn a_replica_refuses_a_group_whose_put_holds_a_pointer() {
    use super::record::{self, Keyed};
    use crate::replication::{LogPosition, Replication};
    let dir = tempfile::tempdir().unwrap();
    let replica = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
    let plain = Keyed::encode(b"fine", &HEADER, &[b"v"]);
    let at = Location {
        segment: 1,
        offset: 0,
    };
    let pointer = record::pointer_record(&HEADER, &pointer_to_put(at));
    let group = master_group(&[(b"fine", plain.record()), (b"k", &pointer)]);
    let error = replica.take_group(&group).unwrap_err();
    assert!(error.contains("value in place"), "{error}");
    assert_eq!(replica.position(), Some(LogPosition::default()));
    let mut found = false;
    replica.get(
        b"fine",
        &GetOptions::default(),
        &AckFence::default(),
        &mut |_| found = true,
    );
    assert!(!found, "the refused group's first put is pending");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn arbitrary_bytes_replay_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let dir = with_segment(|_| bytes);
        read_every_way(dir.path(), &[]);
    }

    #[test]
    fn well_framed_records_of_any_content_replay_without_panic(
        records in proptest::collection::vec(raw_record(), 0..40),
        cut in any::<prop::sample::Index>(),
        flip in any::<Option<(prop::sample::Index, u8)>>(),
    ) {
        let dir = with_segment(|_| {
            let mut bytes = encode(&records);
            // A torn tail, and maybe a damaged byte.
            let len = cut.index(bytes.len() + 1);
            bytes.truncate(len);
            if let (Some((at, mask)), false) = (flip, bytes.is_empty()) {
                let at = at.index(bytes.len());
                bytes[at] ^= mask;
            }
            bytes
        });
        let keys: Vec<Vec<u8>> = records
            .iter()
            .filter_map(|raw| match raw {
                Raw::Put(key, _) | Raw::Remove(key) | Raw::Move(key, ..) => Some(key.clone()),
                _ => None,
            })
            .collect();
        read_every_way(dir.path(), &keys);
    }
}

#[test]
fn a_snapshot_load_is_not_held_up_by_a_number_taken_without_a_write() {
    use crate::replication::{BaseLoad, SnapshotPart};
    let dir = tempfile::tempdir().unwrap();
    let store = DiskStore::open(DiskConfig::for_tests(dir.path())).unwrap();
    let inner = store.inner.clone();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // A reclaim or a crawl numbers the round it waits for without a
        // write: no drain covers it while the loader keeps the journal.
        inner.pending.next_seq();
        let mut loader = inner.load_base().unwrap();
        inner.pending.next_seq();
        let index = SnapshotPart::Index {
            table: b"t",
            column: b"c",
            kind: kura_table::IndexKind::Lexical,
        };
        let added = loader.add(index);
        drop(loader);
        done.send(added).unwrap();
    });
    let added = finished
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the load goes on");
    assert_eq!(added, Ok(()));
}

/// A pointer to a put of key `k` whose stored record (header and value) is 100 bytes.
fn pointer_to_put(at: Location) -> LogPointer {
    LogPointer {
        at,
        frame_len: log_format::put_len(b"k", 100) as u32,
        value_len: 83,
    }
}
