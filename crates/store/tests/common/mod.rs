//! What the disk engine's integration tests share: a small engine in a
//! directory, and an item as a read finds it.

use std::path::Path;

use kura_store::replication::{LogFeed, LogPosition, Replication, SnapshotPart};
use kura_store::{
    AckFence, DiskConfig, DiskStore, GetOptions, Store, StoreCommand, StoreMode, StoreOutcome,
    SyncPolicy,
};

/// `from`'s snapshot: its position, the feed from there, and its record
/// parts as a replica loads them.
#[allow(dead_code)]
pub fn snapshot_records(from: &DiskStore) -> (LogPosition, Box<dyn LogFeed>, Vec<Vec<u8>>) {
    let mut parts = Vec::new();
    let (at, feed) = from
        .snapshot(&mut |part| {
            if let SnapshotPart::Records(bytes) = part {
                parts.push(bytes.to_vec());
            }
            Ok(())
        })
        .unwrap();
    (at, feed, parts)
}

/// A disk engine in `dir` with a 64 MiB map and no space reserve.
#[allow(dead_code)]
pub fn open_with(dir: &Path, sync: SyncPolicy) -> DiskStore {
    DiskStore::open(DiskConfig {
        map_size: 64 << 20,
        sync,
        reserve_bytes: 0,
        ..DiskConfig::new(dir)
    })
    .expect("opens")
}

/// [`open_with`] the default sync policy.
#[allow(dead_code)]
pub fn open(dir: &Path) -> DiskStore {
    open_with(dir, SyncPolicy::Batch)
}

/// The value, flags and CAS a plain get finds under `key`.
#[allow(dead_code)]
pub fn get(store: &dyn Store, key: &[u8]) -> Option<(Vec<u8>, u32, u64)> {
    let mut found = None;
    store.get(
        key,
        &GetOptions::default(),
        &AckFence::default(),
        &mut |item| found = Some((item.value.to_vec(), item.flags, item.cas)),
    );
    found
}

/// Stores `value` under `key` (no expiry) and waits until it is applied,
/// so every change is a group (an entry of the log) of its own.
#[allow(dead_code)]
pub fn store_alone(
    store: &DiskStore,
    mode: StoreMode,
    key: &[u8],
    value: &[u8],
    flags: u32,
) -> StoreOutcome {
    let outcome = store.store(&command(mode, key, value, flags), &AckFence::default());
    store.wait_until_all_applied();
    outcome
}

/// A storage command of `value` under `key`: no expiry, no CAS.
#[allow(dead_code)]
pub fn command<'a>(
    mode: StoreMode,
    key: &'a [u8],
    value: &'a [u8],
    flags: u32,
) -> StoreCommand<'a> {
    StoreCommand {
        mode,
        key,
        value,
        flags,
        expiry: 0,
        compare_cas: None,
        stale_if_older: false,
    }
}

/// A database of LMDB's file, as the engine names them (`indexes` with
/// sorted duplicates).
pub type Lmdb = heed::Database<heed::types::Bytes, heed::types::Bytes>;

/// The databases a test edits behind the engine's back.
#[allow(dead_code)]
pub struct LmdbEdit<'e> {
    pub meta: Lmdb,
    pub indexes: Lmdb,
    pub txn: heed::RwTxn<'e>,
}

/// Changes the LMDB file of a closed engine directly (damage, or what an
/// older format wrote), in one transaction.
#[allow(dead_code)]
pub fn edit_lmdb(dir: &Path, change: impl FnOnce(&mut LmdbEdit<'_>)) {
    let mut options = heed::EnvOpenOptions::new();
    options.max_dbs(8).map_size(64 << 20);
    // SAFETY: the engine that had it open is closed.
    #[allow(unsafe_code)]
    let env = unsafe { options.open(dir).unwrap() };
    {
        let mut txn = env.write_txn().unwrap();
        let meta = env.create_database(&mut txn, Some("meta")).unwrap();
        let indexes = env
            .database_options()
            .types()
            .name("indexes")
            .flags(heed::DatabaseFlags::DUP_SORT)
            .create(&mut txn)
            .unwrap();
        let mut edit = LmdbEdit { meta, indexes, txn };
        change(&mut edit);
        edit.txn.commit().unwrap();
    }
    env.prepare_for_closing().wait();
}
