//! The server's id, which every update-log entry carries as its origin
//! (`--server-id`): chosen at random the first time a data directory is
//! used, then kept in `<dir>/server-id`, so entries keep one origin across
//! restarts and replicas can tell whose write they hold. And the id of the
//! directory's history: which run of the log it holds.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;

use heed::{RoTxn, RwTxn};

use crate::disk::{meta_u64, Db};

const FILE: &str = "server-id";

/// The id for `dir`: `requested` if given (and kept from now on), else the
/// one kept there, else a new random one (never 0).
pub fn server_id(dir: &Path, requested: Option<u32>) -> io::Result<u32> {
    let path = dir.join(FILE);
    let kept = match fs::read_to_string(&path) {
        Ok(text) => Some(text.trim().parse::<u32>().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} does not hold a server id", path.display()),
            )
        })?),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    let id = requested.or(kept).map_or_else(random_id, Ok)?;
    if kept != Some(id) {
        let temporary = dir.join(format!("{FILE}.new"));
        let mut file = File::create(&temporary)?;
        writeln!(file, "{id}")?;
        file.sync_all()?;
        fs::rename(&temporary, &path)?;
        File::open(dir)?.sync_all()?;
    }
    Ok(id)
}

fn random_id() -> io::Result<u32> {
    Ok((random_u64()? as u32).max(1))
}

fn random_u64() -> io::Result<u64> {
    let mut bytes = [0; 8];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// `meta` key: the id of the log's history (a random u64), made anew
/// wherever the log goes on from a point that is not its own last entry: a
/// new directory, a restore, a replica's snapshot of its master. Within one
/// history the log is one gapless run, so an incremental backup may
/// continue a backup whose last entry retention let go, but only of the
/// same history: another one may reach the same LSNs with other changes.
const HISTORY: &[u8] = b"history";

/// The directory's history, if one was started (directories of earlier
/// builds have none until they are opened).
pub(in crate::disk) fn history(meta: &Db, txn: &RoTxn<'_>) -> heed::Result<Option<u64>> {
    Ok(Some(meta_u64(meta, txn, HISTORY)?).filter(|&id| id != 0))
}

/// Starts a new history in `txn`.
pub(in crate::disk) fn start_history(meta: &Db, txn: &mut RwTxn<'_>) -> heed::Result<()> {
    // Never 0, which `meta_u64` reads as none.
    let id = random_u64().map_err(heed::Error::Io)?.max(1);
    meta.put(txn, HISTORY, &id.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_chosen_once_and_kept_unless_one_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let first = server_id(dir.path(), None).unwrap();
        assert_ne!(first, 0);
        assert_eq!(server_id(dir.path(), None).unwrap(), first);
        assert_eq!(server_id(dir.path(), Some(7)).unwrap(), 7);
        assert_eq!(server_id(dir.path(), None).unwrap(), 7);
        fs::write(dir.path().join(FILE), "seven\n").unwrap();
        let error = server_id(dir.path(), None).unwrap_err();
        assert!(error.to_string().contains("server-id"), "{error}");
    }
}
