//! One process per data directory.
//!
//! Two servers on one directory would each replay, apply and delete the
//! other's journal segments and lose acknowledged writes. The first to open
//! the directory takes an exclusive `flock` on `<dir>/lock` and writes its
//! pid there; a second open fails and names that pid. The kernel drops the
//! lock when the process dies, so a crash never leaves a stale lock behind.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

const LOCK_FILE: &str = "lock";

/// Why the directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("the data directory {} is in use by {}", .dir.display(),
        .holder.map_or_else(|| "another process".to_string(), |pid| format!("process {pid}")))]
    InUse { dir: PathBuf, holder: Option<u32> },
    #[error("cannot lock the data directory {}: {source}", .dir.display())]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// Held for as long as the engine is open; dropping it releases the lock.
pub type DirLock = Flock<File>;

/// Locks `dir` for this process, or names the process that holds it.
pub fn acquire(dir: &Path) -> Result<DirLock, LockError> {
    let io = |source| LockError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(LOCK_FILE))
        .map_err(io)?;
    let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => locked,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(LockError::InUse {
                dir: dir.to_path_buf(),
                holder: text.trim().parse().ok(),
            });
        }
        Err((_, errno)) => return Err(io(errno.into())),
    };
    // Just opened, so written from the start.
    file.set_len(0).map_err(io)?;
    writeln!(file, "{}", std::process::id()).map_err(io)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_same_directory_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path()).unwrap();
        let error = acquire(dir.path()).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&format!("by process {}", std::process::id())),
            "{message}"
        );
        assert!(message.contains(&dir.path().display().to_string()));
        drop(first);
        acquire(dir.path()).expect("free again once the holder is gone");
    }
}
