//! The directory a backup or a restore writes into. It must be empty or
//! missing (then it is made, with any missing parent), and one writer at a
//! time claims it with a file made before anything else is written. A
//! failure takes away what was written and the directories made for it,
//! nothing else: a parent made for it that someone else has written into
//! since stays.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::backup::{io_error, BackupError};

/// Held in a target while a backup or a restore writes into it: a second
/// one finds the directory not empty, and a writer that died leaves it so.
const CLAIM: &str = ".kura-writing";

/// Makes `to` an empty directory (refusing one that holds anything) and
/// runs `write` into it; if that fails, takes away what it wrote.
pub fn write_into<T>(
    to: &Path,
    write: impl FnOnce() -> Result<T, BackupError>,
) -> Result<T, BackupError> {
    let target = Target::prepare(to)?;
    let written = write();
    match written {
        Ok(_) => target.release(),
        Err(_) => target.discard(),
    }
    written
}

/// Whether `path`, which need not exist yet, is `dir` or lies within it,
/// links resolved (a backup written there would be taken for the server's
/// own files).
pub fn inside(path: &Path, dir: &Path) -> bool {
    let Ok(dir) = fs::canonicalize(dir) else {
        return false;
    };
    // The nearest part of `path` that exists, resolved, and the rest.
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        let looked_at = match existing.as_os_str().is_empty() {
            true => Path::new("."),
            false => existing,
        };
        if let Ok(resolved) = fs::canonicalize(looked_at) {
            let whole = rest
                .iter()
                .rev()
                .fold(resolved, |whole, part| whole.join(part));
            return whole.starts_with(&dir);
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = parent;
            }
            _ => return false,
        }
    }
}

struct Target {
    dir: PathBuf,
    /// The parents made for it, outermost first.
    parents: Vec<PathBuf>,
    /// Whether `dir` itself was made for it (else it was there, empty).
    made_dir: bool,
}

impl Target {
    /// Makes `to` an empty directory and claims it, refusing one that holds
    /// anything. Its last part is made here, not by `make_dirs`: a directory
    /// found there (another's, or one a `..` names) is taken only if empty.
    fn prepare(to: &Path) -> Result<Target, BackupError> {
        let mut parents = Vec::new();
        let parent = to.parent().filter(|parent| !parent.as_os_str().is_empty());
        let created = match parent {
            Some(parent) => make_dirs(parent, &mut parents),
            None => Ok(()),
        }
        .and_then(|()| match fs::create_dir(to) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(error) => Err(error),
        });
        let made_dir = match created {
            Ok(made_dir) => made_dir,
            Err(error) => {
                remove_empty(&parents);
                return Err(io_error(format!("creating {}", to.display()))(error));
            }
        };
        let mut made = parents.clone();
        made.extend(made_dir.then(|| to.to_path_buf()));
        let claimed = match fs::read_dir(to).map(|mut entries| entries.next().is_none()) {
            Ok(true) => fs::File::create_new(to.join(CLAIM)).map_err(|error| match error.kind() {
                io::ErrorKind::AlreadyExists => not_empty(to),
                _ => io_error(format!("claiming {}", to.display()))(error),
            }),
            Ok(false) => Err(not_empty(to)),
            Err(error) => Err(io_error(format!("reading {}", to.display()))(error)),
        };
        if let Err(error) = claimed {
            remove_empty(&made);
            return Err(error);
        }
        Ok(Target {
            dir: to.to_path_buf(),
            parents,
            made_dir,
        })
    }

    /// The backup or restore is whole: its claim goes. One left behind
    /// (the removal failed) harms nothing: no reader lists it, and the
    /// directory is not empty anyway.
    fn release(self) {
        let claim = self.dir.join(CLAIM);
        if let Err(error) = fs::remove_file(&claim) {
            tracing::warn!(claim = %claim.display(), %error, "cannot remove the claim of a finished backup or restore");
        }
    }

    /// Takes away what a failed backup or restore wrote, so nothing half
    /// written is left to be taken for a backup or started on, and the
    /// same command can be run again.
    fn discard(self) {
        if self.made_dir {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            // It was there, empty: it stays, emptied.
            for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let _ = match path.is_dir() {
                    true => fs::remove_dir_all(&path),
                    false => fs::remove_file(&path),
                };
            }
        }
        remove_empty(&self.parents);
    }
}

/// Makes `dir` and its missing parents, as `fs::create_dir_all` does,
/// noting each directory made (outermost first). A `..` after a missing
/// parent is made through it, as the kernel resolves it.
fn make_dirs(dir: &Path, made: &mut Vec<PathBuf>) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => {
            made.push(dir.to_path_buf());
            return Ok(());
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let parent = dir.parent().filter(|parent| !parent.as_os_str().is_empty());
            make_dirs(parent.ok_or(error)?, made)?;
        }
        Err(_) if dir.is_dir() => return Ok(()),
        Err(error) => return Err(error),
    }
    match fs::create_dir(dir) {
        Ok(()) => {
            made.push(dir.to_path_buf());
            Ok(())
        }
        Err(_) if dir.is_dir() => Ok(()),
        Err(error) => Err(error),
    }
}

fn not_empty(dir: &Path) -> BackupError {
    BackupError::Refused(format!("{} is not empty", dir.display()))
}

/// Removes `dirs` innermost first while they are empty.
fn remove_empty(dirs: &[PathBuf]) {
    for dir in dirs.iter().rev() {
        if fs::remove_dir(dir).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_discarded_target_takes_only_what_was_made_for_it() {
        let work = tempfile::tempdir().unwrap();
        let outer = work.path().join("a");
        let target = Target::prepare(&outer.join("b/c")).unwrap();
        fs::write(outer.join("b/c/data"), b"half").unwrap();
        // Another writer's file in a parent made for the target.
        fs::write(outer.join("other"), b"theirs").unwrap();
        target.discard();
        assert!(!outer.join("b").exists());
        assert_eq!(fs::read(outer.join("other")).unwrap(), b"theirs");

        // A `..` after a missing parent: the directory it names goes, and
        // the missing parent made on the way.
        let through = work.path().join("p/new/../t");
        let target = Target::prepare(&through).unwrap();
        fs::write(through.join("data"), b"half").unwrap();
        target.discard();
        assert!(!work.path().join("p").exists());

        // An empty folder that was there stays, emptied.
        let there = work.path().join("there");
        fs::create_dir(&there).unwrap();
        let target = Target::prepare(&there).unwrap();
        fs::write(there.join("data"), b"half").unwrap();
        target.discard();
        assert_eq!(fs::read_dir(&there).unwrap().count(), 0);
    }

    #[test]
    fn a_directory_a_dot_dot_names_is_taken_only_if_empty_and_never_removed() {
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        fs::create_dir(&data).unwrap();
        fs::write(data.join("data.mdb"), b"live").unwrap();
        // `tmp` is missing: the directory was not read before it was made.
        let through = work.path().join("tmp/../data");
        let error = Target::prepare(&through).err();
        assert!(matches!(error, Some(BackupError::Refused(_))), "{error:?}");
        assert_eq!(fs::read(data.join("data.mdb")).unwrap(), b"live");
        assert!(!work.path().join("tmp").exists());
        // Empty, it is taken; a failure empties it, and takes away only the
        // parent made on the way.
        let empty = work.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let target = Target::prepare(&work.path().join("tmp/../empty")).unwrap();
        fs::write(empty.join("data.mdb"), b"half").unwrap();
        target.discard();
        assert_eq!(fs::read_dir(&empty).unwrap().count(), 0);
        assert!(!work.path().join("tmp").exists());
        // A trailing `..` names the parent, which holds what was made.
        let error = Target::prepare(&work.path().join("new/..")).err();
        assert!(matches!(error, Some(BackupError::Refused(_))), "{error:?}");
        assert!(!work.path().join("new").exists());
    }

    #[test]
    fn one_writer_at_a_time_and_its_claim_goes_once_it_is_done() {
        let work = tempfile::tempdir().unwrap();
        let to = work.path().join("backup");
        let first = Target::prepare(&to).unwrap();
        let second = Target::prepare(&to).err();
        assert!(
            matches!(second, Some(BackupError::Refused(_))),
            "{second:?}"
        );
        first.discard();
        assert!(!to.exists());
        let written = write_into(&to, || {
            fs::write(to.join("manifest.json"), b"{}").unwrap();
            Ok(())
        });
        assert!(written.is_ok());
        let names: Vec<_> = fs::read_dir(&to)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, ["manifest.json"]);
    }

    #[test]
    fn a_target_that_cannot_be_made_leaves_no_parent_behind() {
        let work = tempfile::tempdir().unwrap();
        let long = "x".repeat(300);
        let error = Target::prepare(&work.path().join("m1/m2").join(long)).err();
        assert!(matches!(error, Some(BackupError::Io { .. })), "{error:?}");
        assert!(!work.path().join("m1").exists());
        fs::write(work.path().join("full"), b"x").unwrap();
        let error = Target::prepare(&work.path().join("full")).err();
        assert!(matches!(error, Some(BackupError::Io { .. })), "{error:?}");
    }

    #[test]
    fn a_path_inside_a_directory_is_found_through_links_and_missing_parts() {
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        fs::create_dir(&data).unwrap();
        let link = work.path().join("link");
        std::os::unix::fs::symlink(&data, &link).unwrap();
        for within in [
            data.clone(),
            data.join("a/b"),
            link.join("journal-00ff.log"),
        ] {
            assert!(inside(&within, &data), "{}", within.display());
        }
        for outside in [
            work.path().join("database"),
            work.path().join("x/data"),
            work.path().to_path_buf(),
        ] {
            assert!(!inside(&outside, &data), "{}", outside.display());
        }
        assert!(!inside(&data, &work.path().join("missing")));
    }
}
