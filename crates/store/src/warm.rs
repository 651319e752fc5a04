//! Warm restart of the memory engine (memcached's `-e FILE`): on a graceful
//! shutdown every live item is written to one file, and the next start with
//! the same file serves them again, with their flags, CAS values and expiry
//! times (kept as Unix times, so time spent stopped counts).
//!
//! ```text
//! header   magic "KURAWARM" | version u32 | saved_at u64 | last_cas u64
//!          | hash_power u8                                                      (29 bytes)
//! item     key_len u8 (1..=255) | state u8 | flags u32 | cas u64 | expires u64
//!          | value_len u32 | key | value                                        (26 bytes + key + value)
//! ...
//! end      0 u8 | item_count u64 | crc32 u32                                    (13 bytes)
//! ```
//!
//! Integers are little-endian. `expires` is a Unix time, 0 for never;
//! `state` holds the fetched, stale and won bits ([`STATE_BITS`]). The CRC-32
//! covers every byte before it, and the file must end right after it, so a
//! torn or foreign file is refused rather than half-read.
//!
//! A save writes `FILE.tmp`, syncs it, renames it over `FILE` and syncs the
//! directory: `FILE` is either the whole snapshot or absent. A load checks the
//! whole file before it restores anything; the caller then [`remove`]s it,
//! so a server that crashes later cannot bring back items that changed
//! since (memcached invalidates its file the same way).

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::memory::{MemoryStore, SavedItem};
use crate::Store;

const MAGIC: &[u8; 8] = b"KURAWARM";
const VERSION: u32 = 2;
const END_LEN: u64 = 1 + 8 + 4;

/// `state` bits of an item record.
const FETCHED: u8 = 1;
const STALE: u8 = 2;
const WIN_SENT: u8 = 4;
/// Every bit a version-1 file may set.
pub const STATE_BITS: u8 = FETCHED | STALE | WIN_SENT;

/// Why a snapshot file was refused.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a kura warm-restart file")]
    Foreign,
    #[error(
        "memcached's restart metadata ({0}) is there; kura cannot read memcached's memory file"
    )]
    Memcached(PathBuf),
    #[error("warm-restart file version {0}; this kura reads version {VERSION}")]
    Version(u32),
    #[error("the file ends early (a torn write?)")]
    Truncated,
    #[error("the checksum does not match (a damaged file)")]
    Checksum,
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

/// What a save wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    pub items: u64,
    pub bytes: u64,
}

/// What a load found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    /// Items serving again.
    pub restored: u64,
    /// Items whose time ran out while the server was stopped.
    pub expired: u64,
    /// Items that did not fit the memory limit.
    pub dropped: u64,
    /// Unix time of the save.
    pub saved_at: u64,
}

/// Where a save writes before renaming over `path`.
fn temporary(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

/// memcached keeps its restart metadata next to its memory file.
fn memcached_metadata(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".meta");
    PathBuf::from(name)
}

/// Syncs the directory holding `path`, so a rename or removal in it lasts.
fn sync_directory(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// At start: removes what an interrupted save left, and checks that a
/// snapshot can be written next to `path`, so a wrong path fails now rather
/// than at shutdown, when the items would be lost.
pub fn prepare(path: &Path) -> io::Result<()> {
    let tmp = temporary(path);
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    std::fs::remove_file(&tmp)
}

/// Writes every live item of `store` to `path` (see the module header).
pub fn save(path: &Path, store: &MemoryStore) -> io::Result<Saved> {
    let tmp = temporary(path);
    // Every cached value is in it: readable by the server's user alone, as
    // memcached's restart file.
    let _ = std::fs::remove_file(&tmp);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let mut out = Checksummed {
        inner: BufWriter::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
        bytes: 0,
    };
    let clock = store.clock();
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&clock.unix_now().to_le_bytes())?;
    out.write_all(&store.last_cas().to_le_bytes())?;
    out.write_all(&[store.hash_power() as u8])?;
    let mut items = 0u64;
    store.for_each_live(|item| {
        let expires = match item.expiry {
            0 => 0,
            at => clock.to_unix(at),
        };
        let state = [
            (item.fetched, FETCHED),
            (item.stale, STALE),
            (item.win_sent, WIN_SENT),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .fold(0, |bits, (_, bit)| bits | bit);
        let value_len =
            u32::try_from(item.value.len()).map_err(|_| io::Error::other("a value over 4 GiB"))?;
        out.write_all(&[item.key.len() as u8, state])?;
        out.write_all(&item.flags.to_le_bytes())?;
        out.write_all(&item.cas.to_le_bytes())?;
        out.write_all(&expires.to_le_bytes())?;
        out.write_all(&value_len.to_le_bytes())?;
        out.write_all(item.key)?;
        out.write_all(item.value)?;
        items += 1;
        Ok::<(), io::Error>(())
    })?;
    out.write_all(&[0])?;
    out.write_all(&items.to_le_bytes())?;
    let crc = out.crc.clone().finalize();
    let mut inner = out.inner;
    inner.write_all(&crc.to_le_bytes())?;
    let bytes = out.bytes + 4;
    let file = inner.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    sync_directory(path)?;
    Ok(Saved { items, bytes })
}

/// Restores the items saved in `path` into `store`; `None` when there is no
/// file. The whole file is checked before anything is restored. Items that
/// expired meanwhile are skipped. The file stays: [`remove`] it once the
/// items are in.
pub fn load(path: &Path, store: &MemoryStore) -> Result<Option<Loaded>, WarmError> {
    let meta = memcached_metadata(path);
    if meta.exists() {
        return Err(WarmError::Memcached(meta));
    }
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut file = file;
    let len = file.metadata()?.len();
    // First pass: the structure and the checksum, restoring nothing.
    read(&file, len, |_| {})?;
    io::Seek::rewind(&mut file)?;
    let clock = store.clock();
    let now = clock.unix_now();
    let mut loaded = Loaded {
        restored: 0,
        expired: 0,
        dropped: 0,
        saved_at: 0,
    };
    let header = read(&file, len, |item| {
        if item.expires != 0 && item.expires <= now {
            loaded.expired += 1;
            return;
        }
        let restored = store.restore(&SavedItem {
            key: item.key,
            value: item.value,
            flags: item.flags,
            cas: item.cas,
            expiry: match item.expires {
                0 => 0,
                unix => clock.from_unix(unix),
            },
            fetched: item.state & FETCHED != 0,
            stale: item.state & STALE != 0,
            win_sent: item.state & WIN_SENT != 0,
        });
        if restored {
            loaded.restored += 1;
        } else {
            loaded.dropped += 1;
        }
    })?;
    store.raise_cas(header.last_cas);
    store.raise_hash_power(u32::from(header.hash_power));
    loaded.saved_at = header.saved_at;
    Ok(Some(loaded))
}

/// Removes the snapshot once loaded, durably: after a crash the next start
/// must find nothing rather than items older than what was served since.
pub fn remove(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => sync_directory(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// An item record as read, borrowing the reader's buffers.
struct Record<'a> {
    key: &'a [u8],
    value: &'a [u8],
    state: u8,
    flags: u32,
    cas: u64,
    expires: u64,
}

struct Header {
    saved_at: u64,
    last_cas: u64,
    hash_power: u8,
}

/// Reads a whole snapshot of `len` bytes, handing each item to `each`, and
/// checks the count, the checksum and that nothing follows.
fn read(file: &File, len: u64, mut each: impl FnMut(&Record<'_>)) -> Result<Header, WarmError> {
    let mut input = Reader {
        inner: BufReader::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
        left: len,
    };
    let mut magic = [0u8; 8];
    if len < 8 {
        return Err(WarmError::Foreign);
    }
    input.fill(&mut magic)?;
    if &magic != MAGIC {
        return Err(WarmError::Foreign);
    }
    let version = input.u32()?;
    if version != VERSION {
        return Err(WarmError::Version(version));
    }
    let header = Header {
        saved_at: input.u64()?,
        last_cas: input.u64()?,
        hash_power: input.u8()?,
    };
    let mut key = [0u8; 255];
    let mut value = Vec::new();
    let mut items = 0u64;
    loop {
        let key_len = usize::from(input.u8()?);
        if key_len == 0 {
            break;
        }
        let state = input.u8()?;
        if state & !STATE_BITS != 0 {
            return Err(WarmError::Malformed("unknown item state bits"));
        }
        let flags = input.u32()?;
        let cas = input.u64()?;
        let expires = input.u64()?;
        let value_len = u64::from(input.u32()?);
        // A length past the end is a torn file, not an allocation to make.
        if value_len + key_len as u64 + END_LEN > input.left {
            return Err(WarmError::Truncated);
        }
        input.fill(&mut key[..key_len])?;
        value.resize(value_len as usize, 0);
        input.fill(&mut value)?;
        each(&Record {
            key: &key[..key_len],
            value: &value,
            state,
            flags,
            cas,
            expires,
        });
        items += 1;
    }
    let count = input.u64()?;
    let expected = input.crc.clone().finalize();
    let mut crc = [0u8; 4];
    input.fill(&mut crc)?;
    if u32::from_le_bytes(crc) != expected {
        return Err(WarmError::Checksum);
    }
    if count != items {
        return Err(WarmError::Malformed("the item count does not match"));
    }
    if input.left != 0 {
        return Err(WarmError::Malformed("bytes after the end"));
    }
    Ok(header)
}

/// Reads exact lengths, hashing what it reads; running out is `Truncated`.
struct Reader<R> {
    inner: R,
    crc: crc32fast::Hasher,
    /// Bytes of the file not read yet.
    left: u64,
}

impl<R: Read> Reader<R> {
    fn fill(&mut self, buf: &mut [u8]) -> Result<(), WarmError> {
        if (buf.len() as u64) > self.left {
            return Err(WarmError::Truncated);
        }
        self.inner.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => WarmError::Truncated,
            _ => WarmError::Io(e),
        })?;
        self.crc.update(buf);
        self.left -= buf.len() as u64;
        Ok(())
    }

    fn u8(&mut self) -> Result<u8, WarmError> {
        let mut b = [0u8; 1];
        self.fill(&mut b)?;
        Ok(b[0])
    }

    fn u32(&mut self) -> Result<u32, WarmError> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64, WarmError> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }
}

/// A writer that hashes and counts what passes through it.
struct Checksummed<W> {
    inner: W,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AckFence, GetOptions, MemoryConfig, StoreCommand, StoreMode};

    /// Magic, version, saved_at, last_cas.
    const HEADER_LEN: usize = 8 + 4 + 8 + 8;

    fn store() -> MemoryStore {
        MemoryStore::new(MemoryConfig::default())
    }

    fn set(store: &MemoryStore, key: &str, value: &str, flags: u32, exptime: i64) -> u64 {
        let outcome = store.store(
            &StoreCommand {
                key: key.as_bytes(),
                value: value.as_bytes(),
                flags,
                expiry: store.clock().expiry(exptime),
                mode: StoreMode::Set,
                compare_cas: None,
                stale_if_older: false,
            },
            &AckFence::default(),
        );
        match outcome {
            crate::StoreOutcome::Stored { cas } => cas,
            other => panic!("not stored: {other:?}"),
        }
    }

    /// (value, flags, cas, ttl) of a key, if present.
    fn get(store: &MemoryStore, key: &str) -> Option<(Vec<u8>, u32, u64, i64)> {
        let mut found = None;
        store.get(
            key.as_bytes(),
            &GetOptions::default(),
            &AckFence::default(),
            &mut |item| {
                found = Some((item.value.to_vec(), item.flags, item.cas, item.ttl));
            },
        );
        found
    }

    /// A saved snapshot of a few items, in a fresh directory.
    fn saved() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        let from = store();
        set(&from, "a", "apple", 7, 0);
        set(&from, "b", "banana", 0, 100);
        set(&from, "c", "", u32::MAX, 0);
        let saved = save(&path, &from).unwrap();
        assert_eq!(saved.items, 3);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, saved.bytes);
        (dir, path, bytes)
    }

    /// The file holds every value: its owner alone reads it. A server with
    /// a smaller -I than the one that saved leaves out what it would not
    /// take.
    #[test]
    fn a_snapshot_is_private_and_loads_within_this_servers_item_size() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        let from = store();
        set(&from, "small", "s", 0, 0);
        set(&from, "big", &"v".repeat(600_000), 0, 0);
        save(&path, &from).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let to = MemoryStore::new(MemoryConfig {
            max_value_bytes: 512 * 1024,
            ..MemoryConfig::default()
        });
        let loaded = load(&path, &to).unwrap().unwrap();
        assert_eq!((loaded.restored, loaded.dropped), (1, 1));
        assert_eq!(get(&to, "big"), None);
        assert_eq!(get(&to, "small").unwrap().0, b"s");
    }

    #[test]
    fn a_snapshot_round_trips_values_flags_cas_and_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        let from = store();
        let cas_a = set(&from, "a", "apple", 7, 0);
        let cas_b = set(&from, "b", "banana", 3, 100);
        set(&from, "gone", "x", 0, 0);
        from.delete(
            b"gone",
            &crate::DeleteCommand::default(),
            &AckFence::default(),
        );
        set(&from, "short", "x", 0, 2);
        let big = "v".repeat(300_000);
        set(&from, "big", &big, 1, 0);
        let saved = save(&path, &from).unwrap();
        assert_eq!(saved.items, 4);
        assert!(!temporary(&path).exists());

        let to = store();
        // Three seconds stopped: "short" ran out, "b" has 97 s left.
        to.clock().advance(3);
        let loaded = load(&path, &to).unwrap().unwrap();
        assert_eq!((loaded.restored, loaded.expired, loaded.dropped), (3, 1, 0));
        assert_eq!(get(&to, "a"), Some((b"apple".to_vec(), 7, cas_a, -1)));
        let (value, flags, cas, ttl) = get(&to, "b").unwrap();
        assert_eq!((value, flags, cas), (b"banana".to_vec(), 3, cas_b));
        assert!((96..=97).contains(&ttl), "ttl {ttl}");
        assert_eq!(get(&to, "big").unwrap().0, big.as_bytes());
        assert_eq!(get(&to, "short"), None);
        assert_eq!(get(&to, "gone"), None);
        // New writes take CAS values above every restored one.
        assert!(set(&to, "new", "n", 0, 0) > from.last_cas());
        remove(&path).unwrap();
        assert!(!path.exists());
        assert!(load(&path, &to).unwrap().is_none());
    }

    #[test]
    fn a_stale_item_stays_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        let from = store();
        set(&from, "k", "old", 0, 0);
        from.delete(
            b"k",
            &crate::DeleteCommand {
                invalidate: Some(None),
                ..crate::DeleteCommand::default()
            },
            &AckFence::default(),
        );
        save(&path, &from).unwrap();
        let to = store();
        load(&path, &to).unwrap().unwrap();
        let mut stale = None;
        to.get(
            b"k",
            &GetOptions::default(),
            &AckFence::default(),
            &mut |item| stale = Some(item.stale),
        );
        assert_eq!(stale, Some(true));
    }

    #[test]
    fn a_truncated_file_is_refused_and_restores_nothing() {
        let (_dir, path, bytes) = saved();
        for cut in [0, 5, 8, HEADER_LEN + 3, bytes.len() - 10, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let to = store();
            let error = load(&path, &to).unwrap_err();
            let expected = if cut < 8 {
                matches!(error, WarmError::Foreign)
            } else {
                matches!(error, WarmError::Truncated)
            };
            assert!(expected, "cut at {cut}: {error}");
            assert_eq!(get(&to, "a"), None, "cut at {cut}");
        }
    }

    #[test]
    fn a_bad_checksum_is_refused_and_restores_nothing() {
        let (_dir, path, bytes) = saved();
        // A flipped bit in a value, then in the checksum itself.
        let value_at = bytes.windows(5).position(|w| w == b"apple").unwrap();
        for at in [value_at, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            std::fs::write(&path, &damaged).unwrap();
            let to = store();
            assert!(
                matches!(load(&path, &to), Err(WarmError::Checksum)),
                "flipped byte {at}"
            );
            assert_eq!(get(&to, "a"), None);
        }
    }

    #[test]
    fn the_hash_power_level_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        let from = store();
        from.raise_hash_power(19);
        save(&path, &from).unwrap();
        let to = store();
        assert_eq!(to.hash_power(), 16);
        load(&path, &to).unwrap();
        assert_eq!(to.hash_power(), 19);
    }

    #[test]
    fn foreign_files_are_refused() {
        let (_dir, path, bytes) = saved();
        let mut newer = bytes.clone();
        newer[8] = 3;
        std::fs::write(&path, &newer).unwrap();
        assert!(matches!(load(&path, &store()), Err(WarmError::Version(3))));
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        assert!(matches!(load(&path, &store()), Err(WarmError::Foreign)));
        let mut longer = bytes.clone();
        longer.push(0);
        std::fs::write(&path, &longer).unwrap();
        assert!(matches!(
            load(&path, &store()),
            Err(WarmError::Malformed(_))
        ));
        std::fs::write(&path, &bytes).unwrap();
        std::fs::write(memcached_metadata(&path), b"").unwrap();
        assert!(matches!(
            load(&path, &store()),
            Err(WarmError::Memcached(_))
        ));
    }
}
