//! Hot backups, taken while the server serves. A backup is a directory:
//!
//! ```text
//!  data.mdb           LMDB's compacting copy, at one LSN (full backups only)
//!  journal-<n>.log    update-log segments, byte for byte as the server has
//!                     them: the entries after that LSN, and the segments the
//!                     copy's large values live in
//!  manifest.json      written last: what the backup holds, with checksums
//! ```
//!
//! An incremental backup holds only the segments with entries after the
//! backup it continues (`since`), whose manifest it names. Segments are
//! copied whole, not re-framed, so LMDB's log pointers stay valid; a
//! segment copied again by a later backup has only grown. While a backup copies, no segment is removed ([`HistoryHold`]).
//!
//! [`HistoryHold`]: crate::disk::journal::HistoryHold

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use heed::types::Bytes;
use heed::{CompactionOption, Database, EnvOpenOptions};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::disk::history::{self, position, position::Place, target};
use crate::disk::io::Io;
use crate::disk::journal;
use crate::disk::{
    applied_position, data_file, identity, log_live, meta_u64, Inner, BASE_INCOMPLETE,
    JOURNAL_APPLIED, PARTIAL_ROUND,
};
use crate::log_position::LogPosition;

pub const MANIFEST: &str = "manifest.json";
pub const DATA_FILE: &str = "data.mdb";
/// The manifest's own format.
const MANIFEST_FORMAT: u32 = 1;
/// The largest manifest written or read: some 400,000 files. A server
/// with steady writes starts a segment every apply round (5 s), 17,280 a
/// day, and an incremental backup lists each one it copies.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BackupKind {
    Full,
    Incremental,
}

/// What a backup holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub kind: BackupKind,
    /// The server it was taken from.
    pub server_id: u32,
    /// When it was taken, µs since the Unix epoch.
    pub created_micros: u64,
    /// Full backups: the newest entry in the copy of LMDB.
    pub snapshot: Option<LogPosition>,
    /// Incremental backups: the backup this one continues, relative to
    /// this backup's directory (so that a chain moved whole still holds),
    /// or absolute (written so before, or where no relative path leads).
    /// Read it with [`Manifest::continues`].
    pub since: Option<PathBuf>,
    /// Incremental backups: the last entry of the backup in `since`, as
    /// it was continued (a chain whose link ends elsewhere, another backup
    /// put in its place, fails verification); absent in backups of
    /// earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_last: Option<LogPosition>,
    /// The first entry this backup adds (entries before it are in the
    /// snapshot or in `since`).
    pub first_lsn: u64,
    /// The newest entry it holds: a restore without `--until` reaches it.
    pub last: LogPosition,
    /// Full backups copied while a round was applied in parts: the copy
    /// holds some of that round's entries, so it is consistent from the
    /// round's last entry on, and a restore reaches that at the earliest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_from: Option<LogPosition>,
    /// The history of the server's log it holds (`identity.rs`); absent
    /// in backups of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<u64>,
    pub files: Vec<FileSum>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileSum {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0}")]
    Refused(String),
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("LMDB: {0}")]
    Lmdb(#[from] heed::Error),
}

pub(super) fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> BackupError {
    let context = context.into();
    move |source| BackupError::Io { context, source }
}

impl Inner {
    /// Writes a backup of this engine to `to` (a full one, or the log since
    /// the backup in `since`), while writes go on.
    pub(in crate::disk) fn backup(
        &self,
        to: &Path,
        since: Option<&Path>,
    ) -> Result<Manifest, BackupError> {
        let since = since.map(|dir| load(dir).map(|manifest| (dir, manifest)));
        let since = since.transpose()?;
        if let Some((dir, manifest)) = &since {
            if manifest.server_id != self.server_id {
                return Err(BackupError::Refused(format!(
                    "{} is a backup of server {}, this is server {}",
                    dir.display(),
                    manifest.server_id,
                    self.server_id
                )));
            }
        }
        if self.base_incomplete.load(Ordering::Acquire) {
            return Err(base_incomplete());
        }
        if target::inside(to, &self.config.dir) {
            return Err(BackupError::Refused(format!(
                "{} is inside this server's data directory {}: back up elsewhere",
                to.display(),
                self.config.dir.display()
            )));
        }
        // Every write taken before the backup is in it: a client's set
        // pipelined before its `backup` may not be appended yet.
        if !self.append_taken() {
            return Err(BackupError::Refused(
                "the writes taken before the backup could not be appended to the log".to_string(),
            ));
        }
        target::write_into(to, || self.write_backup(to, since))
    }

    fn write_backup(
        &self,
        to: &Path,
        since: Option<(&Path, Manifest)>,
    ) -> Result<Manifest, BackupError> {
        let _hold = self.journal.hold_history();
        let created_micros = crate::clock::unix_micros();
        let mut files = Vec::new();
        // The snapshot first: the log copied after it covers every entry
        // after the snapshot's LSN.
        let (kind, first_lsn, copied) = match &since {
            None => {
                let copied = self.copy_lmdb(to)?;
                files.push(DATA_FILE.to_string());
                (BackupKind::Full, copied.applied.lsn + 1, Some(copied))
            }
            Some((_, manifest)) => (BackupKind::Incremental, manifest.last.lsn + 1, None),
        };
        let snapshot = copied.as_ref().map(|copied| copied.applied);
        let history = match &copied {
            Some(copied) => copied.history,
            None => self.history()?,
        };
        let consistent_from = copied
            .as_ref()
            .and_then(|copied| copied.partial.filter(|partial| *partial > copied.applied));
        let (current, current_len, last) = self.journal.current_end();
        // What the backup copies of the log is durable here first: a power
        // cut must not take back entries a backup holds, whose LSNs this
        // history would then number again with other changes.
        if !self.fsync("journal fsync failed", || self.journal.sync_everything()) {
            return Err(BackupError::Refused(
                "the update log could not be fsynced".to_string(),
            ));
        }
        let segments: Vec<(u64, PathBuf)> = journal::segments(&self.config.dir)
            .map_err(io_error("listing the journal"))?
            .into_iter()
            .filter(|(number, _)| *number <= current)
            .collect();
        if let Some((dir, manifest)) = &since {
            self.check_continues(dir, manifest, &segments, history)?;
        }
        // A full backup needs the applied segment and those the snapshot
        // points into; an incremental one what holds entries since.
        let chosen = match copied {
            Some(copied) => segments
                .into_iter()
                .filter(|(number, _)| {
                    *number > copied.applied_segment || copied.pointed.contains(number)
                })
                .collect(),
            None => segments_after(&*self.config.io, &segments, first_lsn - 1)?,
        };
        for (number, path) in &chosen {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let limit = (*number == current).then_some(current_len);
            copy_file(path, &to.join(&name), limit)?;
            files.push(name);
        }
        let missing = history::missing(to, first_lsn, last.lsn)
            .map_err(io_error("reading the copied log"))?;
        if !missing.is_empty() {
            return Err(BackupError::Refused(format!(
                "the log no longer holds entries {} (retention let them go); take a full backup",
                history::describe_ranges(&missing)
            )));
        }
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            kind,
            server_id: self.server_id,
            created_micros,
            snapshot,
            since: since.as_ref().map(|(dir, _)| path_from(to, dir)),
            since_last: since.as_ref().map(|(_, manifest)| manifest.last),
            first_lsn,
            last: last.max(snapshot.unwrap_or_default()),
            consistent_from,
            history,
            files: files
                .iter()
                .map(|name| sum_file(&to.join(name), name))
                .collect::<Result<_, _>>()?,
        };
        write_manifest(to, &manifest)?;
        tracing::info!(to = %to.display(), kind = ?manifest.kind, last_lsn = manifest.last.lsn, "backup written");
        Ok(manifest)
    }

    /// Refuses to continue the backup in `dir` unless its last entry ends
    /// a group of this log, with its time, or, where the log no longer
    /// holds it, the backup is of this log's history: under the same
    /// server id, a data directory made again (or restored from an older
    /// backup) has another history, whose LSNs may reach past the
    /// backup's. The entries since are checked for gaps as they are copied.
    fn check_continues(
        &self,
        dir: &Path,
        manifest: &Manifest,
        segments: &[(u64, PathBuf)],
        history: Option<u64>,
    ) -> Result<(), BackupError> {
        if manifest.last.lsn == 0 {
            return Ok(());
        }
        if let (Some(theirs), Some(ours)) = (manifest.history, history) {
            if theirs != ours {
                return Err(BackupError::Refused(format!(
                    "{} is a backup of another history of server {} (this data directory was \
                     made again, restored, or loaded from its master's snapshot since); take a \
                     full backup",
                    dir.display(),
                    self.server_id
                )));
            }
        }
        let log_last = self.journal.last_lsn();
        let place = position::locate(&*self.config.io, segments, manifest.last, log_last)
            .map_err(io_error("reading the journal"))?;
        let within_the_log = manifest.last.lsn <= log_last;
        match place {
            Place::Found { .. } => Ok(()),
            Place::Gone if history.is_some() && manifest.history == history && within_the_log => {
                Ok(())
            }
            Place::Gone => Err(BackupError::Refused(format!(
                "the log no longer holds LSN {}, the last of {}, a backup that names no history (an earlier build's) or is past this log's end; take a full backup",
                manifest.last.lsn,
                dir.display()
            ))),
            Place::Diverged => Err(BackupError::Refused(format!(
                "{} ends at {}, which is not a point of this server's log: it is a backup of another history of server {}",
                dir.display(),
                manifest.last,
                self.server_id
            ))),
        }
    }

    /// The history of this server's log.
    fn history(&self) -> Result<Option<u64>, BackupError> {
        let txn = self.env.read_txn()?;
        Ok(identity::history(&self.meta, &txn)?)
    }

    /// Copies LMDB into `to` (compacting); returns what the copy's meta
    /// table says of the log. A copy taken while a replica loads its
    /// master's snapshot is refused.
    fn copy_lmdb(&self, to: &Path) -> Result<CopiedMeta, BackupError> {
        let path = to.join(DATA_FILE);
        let mut file = File::create(&path).map_err(io_error("creating the copy of LMDB"))?;
        self.env
            .copy_to_file(&mut file, CompactionOption::Enabled)?;
        file.sync_all()
            .map_err(io_error("syncing the copy of LMDB"))?;
        drop(file);
        let copied = read_meta(to)?;
        if copied.base_incomplete {
            return Err(base_incomplete());
        }
        Ok(copied)
    }
}

fn base_incomplete() -> BackupError {
    BackupError::Refused(
        "this replica holds only part of its master's snapshot (loading, or cut off): back up \
         the master, or this server once its snapshot is whole"
            .to_string(),
    )
}

/// What a copy of LMDB's meta table says of the log.
#[derive(Default)]
pub(super) struct CopiedMeta {
    pub(super) applied: LogPosition,
    /// The last entry of a round the copy holds part of.
    pub(super) partial: Option<LogPosition>,
    applied_segment: u64,
    pointed: Vec<u64>,
    /// The copy holds part of a replica's snapshot of its master.
    base_incomplete: bool,
    history: Option<u64>,
}

/// Reads the meta table of the LMDB file in `dir` (a backup's copy),
/// leaving no lock file behind.
pub(super) fn read_meta(dir: &Path) -> Result<CopiedMeta, BackupError> {
    data_file::check(&dir.join(DATA_FILE)).map_err(BackupError::Refused)?;
    let mut options = EnvOpenOptions::new();
    options.max_dbs(4);
    // SAFETY: a copy no other environment has open, read and closed here.
    #[allow(unsafe_code)]
    let env = unsafe { options.open(dir)? };
    let txn = env.read_txn()?;
    let meta: Option<Database<Bytes, Bytes>> = env.open_database(&txn, Some("meta"))?;
    let mut found = CopiedMeta::default();
    if let Some(meta) = meta {
        found.applied = applied_position(&meta, &txn)?;
        found.partial = meta.get(&txn, PARTIAL_ROUND)?.and_then(LogPosition::decode);
        found.applied_segment = meta_u64(&meta, &txn, JOURNAL_APPLIED)?;
        found.base_incomplete = meta.get(&txn, BASE_INCOMPLETE)?.is_some();
        found.history = identity::history(&meta, &txn)?;
        let live = log_live(&meta, &txn)?.into_iter();
        found.pointed = live
            .filter(|&(_, bytes)| bytes > 0)
            .map(|(segment, _)| segment)
            .collect();
    }
    drop(txn);
    env.prepare_for_closing().wait();
    let _ = fs::remove_file(dir.join("lock.mdb"));
    Ok(found)
}

/// The segments from the one that holds entry `lsn + 1` on: an entry's
/// group head says where its segment's numbering starts.
fn segments_after(
    io: &dyn Io,
    segments: &[(u64, PathBuf)],
    lsn: u64,
) -> Result<Vec<(u64, PathBuf)>, BackupError> {
    let firsts = segments
        .iter()
        .map(|(number, path)| position::first_lsn(io, path, *number))
        .collect::<io::Result<Vec<_>>>()
        .map_err(io_error("reading the journal"))?;
    let start = firsts
        .iter()
        .rposition(|first| first.is_some_and(|first| first <= lsn + 1));
    match (start, firsts.iter().flatten().next()) {
        (Some(mut k), _) => {
            // Segments of moves only, just before, go too: the replay
            // applies their moves, so LMDB points where the server's did.
            while k > 0 && firsts[k - 1].is_none() {
                k -= 1;
            }
            Ok(segments[k..].to_vec())
        }
        (None, Some(first)) => Err(BackupError::Refused(format!(
            "the log no longer holds entries {} (retention let them go); take a full backup",
            history::describe_ranges(&[(lsn + 1, first - 1)])
        ))),
        // No entry since: only segments without entries, if any.
        (None, None) => Ok(segments.to_vec()),
    }
}

/// Copies `from` to `to` (up to `limit` bytes), durably.
fn copy_file(from: &Path, to: &Path, limit: Option<u64>) -> Result<(), BackupError> {
    let context = || format!("copying {} to {}", from.display(), to.display());
    let source = File::open(from).map_err(io_error(context()))?;
    let mut out = File::create(to).map_err(io_error(context()))?;
    let mut source = source.take(limit.unwrap_or(u64::MAX));
    io::copy(&mut source, &mut out).map_err(io_error(context()))?;
    out.sync_all().map_err(io_error(context()))
}

fn sum_file(path: &Path, name: &str) -> Result<FileSum, BackupError> {
    let reading = || io_error(format!("reading {}", path.display()));
    // Opening a FIFO would wait for a writer.
    if !fs::metadata(path).map_err(reading())?.is_file() {
        return Err(BackupError::Refused(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let file = File::open(path).map_err(reading())?;
    let mut hasher = Sha256::new();
    let bytes = io::copy(
        &mut io::BufReader::with_capacity(1 << 20, file),
        &mut hasher,
    )
    .map_err(reading())?;
    Ok(FileSum {
        name: name.to_string(),
        bytes,
        sha256: format!("{:x}", hasher.finalize()),
    })
}

fn write_manifest(to: &Path, manifest: &Manifest) -> Result<(), BackupError> {
    let text = serde_json::to_string_pretty(manifest).expect("a manifest serializes");
    if text.len() as u64 >= MAX_MANIFEST_BYTES {
        return Err(BackupError::Refused(format!(
            "{} files are more than one manifest lists (at most {MAX_MANIFEST_BYTES} bytes)",
            manifest.files.len()
        )));
    }
    let path = to.join(MANIFEST);
    let mut file = File::create(&path).map_err(io_error("writing the manifest"))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.sync_all())
        .and_then(|()| File::open(to)?.sync_all())
        .map_err(io_error("writing the manifest"))
}

/// Reads the manifest of the backup in `dir`.
pub fn load(dir: &Path) -> Result<Manifest, BackupError> {
    let path = dir.join(MANIFEST);
    let text = read_manifest_file(&path).map_err(|error| {
        BackupError::Refused(format!(
            "{} is not a complete backup: cannot read {}: {error}",
            dir.display(),
            path.display()
        ))
    })?;
    let manifest: Manifest = serde_json::from_str(&text)
        .map_err(|error| BackupError::Refused(format!("{}: {error}", path.display())))?;
    if manifest.format != MANIFEST_FORMAT {
        return Err(BackupError::Refused(format!(
            "{}: manifest format {}, this kura reads format {MANIFEST_FORMAT}",
            path.display(),
            manifest.format
        )));
    }
    // LSNs are added to and subtracted from further on.
    let last = manifest.last.lsn;
    let beyond_last = |position: Option<LogPosition>| position.is_some_and(|at| at.lsn > last);
    if last == u64::MAX
        || manifest.first_lsn == 0
        || beyond_last(manifest.snapshot)
        || beyond_last(manifest.consistent_from)
    {
        return Err(BackupError::Refused(format!(
            "{}: its LSNs do not fit together (first {}, last {last})",
            path.display(),
            manifest.first_lsn
        )));
    }
    // A restore copies these names out of `dir` and into its target.
    if let Some(file) = manifest
        .files
        .iter()
        .find(|file| Path::new(&file.name).file_name() != Some(file.name.as_ref()))
    {
        return Err(BackupError::Refused(format!(
            "{}: {:?} is not a file name",
            path.display(),
            file.name
        )));
    }
    // Only segments, and a full backup's copy of LMDB.
    let held = |name: &str| {
        journal::segment_number(name).is_some()
            || (manifest.kind == BackupKind::Full && name == DATA_FILE)
    };
    if let Some(file) = manifest.files.iter().find(|file| !held(&file.name)) {
        return Err(BackupError::Refused(format!(
            "{}: {:?} is not a file a {} backup holds",
            path.display(),
            file.name,
            if manifest.kind == BackupKind::Full {
                "full"
            } else {
                "incremental"
            }
        )));
    }
    Ok(manifest)
}

/// A manifest's text: a regular file of a size a manifest can have.
fn read_manifest_file(path: &Path) -> io::Result<String> {
    // Looked at before it is opened: opening a FIFO would wait for a writer.
    let meta = fs::metadata(path)?;
    if !meta.is_file() || meta.len() > MAX_MANIFEST_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a regular file of at most {MAX_MANIFEST_BYTES} bytes"),
        ));
    }
    let mut text = String::new();
    File::open(path)?
        .take(MAX_MANIFEST_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// A backup and the ones it continues, full backup first.
#[derive(Debug, Clone)]
pub struct Chain {
    pub backups: Vec<(PathBuf, Manifest)>,
}

impl Chain {
    /// The full backup's snapshot.
    pub fn snapshot(&self) -> LogPosition {
        self.backups[0].1.snapshot.unwrap_or_default()
    }

    /// The earliest point a restore may reach: the snapshot, or the end of
    /// a round its copy caught in parts.
    pub fn earliest(&self) -> LogPosition {
        self.snapshot()
            .max(self.backups[0].1.consistent_from.unwrap_or_default())
    }

    /// The newest entry the chain holds.
    pub fn last(&self) -> LogPosition {
        self.backups.last().map(|(_, m)| m.last).unwrap_or_default()
    }
}

impl Manifest {
    /// The directory of the backup this one continues, where this
    /// manifest is in `dir`.
    pub fn continues(&self, dir: &Path) -> Option<PathBuf> {
        let since = dir.join(self.since.as_ref()?);
        Some(fs::canonicalize(&since).unwrap_or(since))
    }
}

/// `to` as a path relative to the directory `from`, where both exist;
/// `to` made absolute otherwise.
fn path_from(from: &Path, to: &Path) -> PathBuf {
    let to = fs::canonicalize(to).unwrap_or_else(|_| to.to_path_buf());
    fs::canonicalize(from)
        .ok()
        .and_then(|from| pathdiff::diff_paths(&to, from))
        .unwrap_or(to)
}

/// Checks the backup in `dir` and every backup it continues: files and
/// checksums, one server, the log contiguous from the snapshot on.
pub fn verify(dir: &Path) -> Result<Chain, BackupError> {
    let mut backups: Vec<(PathBuf, Manifest)> = Vec::new();
    let mut next = Some(dir.to_path_buf());
    while let Some(dir) = next.take() {
        if backups.len() > 10_000 || backups.iter().any(|(seen, _)| *seen == dir) {
            return Err(BackupError::Refused(format!(
                "{}: the chain of backups loops",
                dir.display()
            )));
        }
        let manifest = match (load(&dir), backups.last()) {
            (Ok(manifest), _) => manifest,
            // A link the newer backup names: what the chain lacks is the
            // log up to where the newer one starts.
            (Err(error), Some((_, newer))) => {
                return Err(BackupError::Refused(format!(
                    "{error}; that backup holds the chain's entries up to LSN {}",
                    newer.first_lsn - 1
                )))
            }
            (Err(error), None) => return Err(error),
        };
        // The log's check below reads every segment in `dir`.
        let unlisted = journal::segments(&dir)
            .map_err(io_error(format!("listing {}", dir.display())))?
            .into_iter()
            .filter_map(|(_, path)| Some(path.file_name()?.to_string_lossy().into_owned()))
            .find(|name| !manifest.files.iter().any(|file| file.name == *name));
        if let Some(name) = unlisted {
            return Err(BackupError::Refused(format!(
                "{}: {name} is not in the manifest",
                dir.display()
            )));
        }
        if manifest.first_lsn > manifest.last.lsn + 1 {
            return Err(BackupError::Refused(format!(
                "{}: it starts at LSN {}, after its last entry (LSN {})",
                dir.display(),
                manifest.first_lsn,
                manifest.last.lsn
            )));
        }
        let missing = || history::missing(&dir, manifest.first_lsn, manifest.last.lsn);
        for file in &manifest.files {
            let path = dir.join(&file.name);
            // Its size first: a file grown sparse to terabytes would be read
            // whole before its sum told.
            let summed = match fs::metadata(&path) {
                Ok(found) if found.is_file() && found.len() != file.bytes => {
                    Err(BackupError::Refused(format!(
                        "{}: {} holds {} bytes, its manifest says {}",
                        dir.display(),
                        file.name,
                        found.len(),
                        file.bytes
                    )))
                }
                _ => sum_file(&path, &file.name),
            };
            let refusal = match summed {
                Ok(sum) if sum == *file => continue,
                Ok(_) => format!(
                    "{}: {} does not match its checksum",
                    dir.display(),
                    file.name
                ),
                Err(error) => error.to_string(),
            };
            // A segment removed or damaged: the entries a restore lacks.
            let lacks = match missing() {
                Ok(missing) if !missing.is_empty() => history::describe_ranges(&missing),
                _ => return Err(BackupError::Refused(refusal)),
            };
            return Err(BackupError::Refused(format!(
                "{refusal}; the log lacks entries {lacks}"
            )));
        }
        let (first, last) = (manifest.first_lsn, manifest.last);
        let span = history::span(&dir, first, last.lsn, false)
            .map_err(io_error(format!("reading the log in {}", dir.display())))?;
        if !span.missing.is_empty() {
            return Err(BackupError::Refused(format!(
                "{}: the log lacks entries {}",
                dir.display(),
                history::describe_ranges(&span.missing)
            )));
        }
        // The log ends at the manifest's last entry, as it was copied: a
        // manifest that says otherwise (one bit of an LSN) would restore
        // less than the backup holds, and say nothing.
        if let Some(newest) = span.newest.filter(|&newest| newest > last.lsn) {
            return Err(BackupError::Refused(format!(
                "{}: the log holds entries up to LSN {newest}, past its manifest's last (LSN {}): the manifest is damaged",
                dir.display(),
                last.lsn
            )));
        }
        if first <= last.lsn && span.last_micros != Some(last.micros) {
            return Err(BackupError::Refused(format!(
                "{}: the log's entry LSN {} was appended at {} µs, its manifest says {}: the manifest is damaged",
                dir.display(),
                last.lsn,
                span.last_micros.unwrap_or(0),
                last.micros
            )));
        }
        match (&manifest.kind, manifest.continues(&dir)) {
            (BackupKind::Full, _) if !manifest.files.iter().any(|f| f.name == DATA_FILE) => {
                return Err(BackupError::Refused(format!(
                    "{}: a full backup without {DATA_FILE}",
                    dir.display()
                )));
            }
            (BackupKind::Incremental, Some(since)) => next = Some(since),
            (BackupKind::Incremental, None) => {
                return Err(BackupError::Refused(format!(
                    "{}: an incremental backup that names no earlier one",
                    dir.display()
                )));
            }
            // Its copy of LMDB is one LMDB can map (a restore opens it).
            (BackupKind::Full, _) => {
                data_file::check(&dir.join(DATA_FILE)).map_err(BackupError::Refused)?;
            }
        }
        backups.push((dir, manifest));
    }
    backups.reverse();
    for pair in backups.windows(2) {
        let ((older_dir, older), (newer_dir, newer)) = (&pair[0], &pair[1]);
        if newer.since_last.is_some_and(|last| last != older.last) {
            return Err(BackupError::Refused(format!(
                "{} does not continue {}: it continued a backup ending at {}, and that one ends at {}",
                newer_dir.display(),
                older_dir.display(),
                newer.since_last.unwrap_or_default(),
                older.last
            )));
        }
        if older.server_id != newer.server_id || newer.first_lsn != older.last.lsn + 1 {
            return Err(BackupError::Refused(format!(
                "{} does not continue {}: it starts at LSN {} of server {}, which ends at LSN {} of server {}",
                newer_dir.display(),
                older_dir.display(),
                newer.first_lsn,
                newer.server_id,
                older.last.lsn,
                older.server_id
            )));
        }
    }
    Ok(Chain { backups })
}
