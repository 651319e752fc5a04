//! The seam under the disk engine's files: every write, read and fsync of
//! an update-log segment, and every commit and fsync of the data file, goes
//! through an [`Io`]. kura uses [`OsIo`], whose methods are the plain
//! system calls; the fault tests (`tests/faults.rs`) put an `Io` of their
//! own in its place to make them fail (EIO, ENOSPC, a failed fsync, a short
//! write) or to cut the power.
//!
//! Opening, creating and removing files stay outside: their failures stop
//! the engine from opening or are retried, and are not what poisoning is
//! about.

use std::fmt::Debug;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use heed::{Env, RwTxn};

/// The engine's file operations. Each default method is what kura does.
pub trait Io: Send + Sync + Debug {
    /// Writes all of `bytes` at `offset` of a log segment.
    fn write_log(&self, file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(bytes, offset)
    }

    /// Fills `buf` from `offset` of a log segment.
    fn read_log(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
        file.read_exact_at(buf, offset)
    }

    /// Makes a log segment's writes durable.
    fn sync_log(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    /// Commits a transaction of the data file (LMDB, with `MDB_NOSYNC`).
    fn commit(&self, txn: RwTxn<'_>) -> heed::Result<()> {
        txn.commit()
    }

    /// Makes the data file's commits durable.
    fn sync_data(&self, env: &Env) -> heed::Result<()> {
        env.force_sync()
    }
}

/// The system calls themselves.
#[derive(Debug, Default)]
pub struct OsIo;

impl Io for OsIo {}
