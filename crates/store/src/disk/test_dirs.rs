//! Directories for tests that need a disk, where /tmp is a tmpfs on many
//! machines: how the log's pages leave the page cache (a tmpfs's pages are
//! its files and never leave), and space reserved a gibibyte at a time (a
//! tmpfs holds half the memory).

use nix::sys::statfs::{statfs, TMPFS_MAGIC};

/// A directory beside the test binary, on the file system it was built
/// on; refused on a tmpfs, where the test could not show what it claims.
pub fn on_disk() -> tempfile::TempDir {
    let binary = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir_in(binary.parent().unwrap()).unwrap();
    let kind = statfs(dir.path()).unwrap().filesystem_type();
    assert!(
        kind != TMPFS_MAGIC,
        "{} is on a tmpfs, whose pages never leave the page cache: build on a disk",
        dir.path().display()
    );
    dir
}
