//! The server's id, which every update-log entry carries as its origin
//! (`--server-id`): chosen at random the first time a data directory is
//! used, then kept in `<dir>/server-id`, so entries keep one origin across
//! restarts and replicas can tell whose write they hold.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;

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
    let mut bytes = [0; 4];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(u32::from_le_bytes(bytes).max(1))
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
