//! Directories for tests that need a disk, where /tmp is a tmpfs on many
//! machines: how the log's pages leave the page cache (a tmpfs's pages are
//! its files and never leave), and space reserved a gibibyte at a time (a
//! tmpfs holds half the memory).

use nix::sys::statfs::{statfs, FsType, TMPFS_MAGIC};

/// ramfs's `f_type` (linux/magic.h), which nix does not name.
const RAMFS_MAGIC: FsType = FsType(0x8584_58f6);

/// A directory beside the test binary, on the file system it was built
/// on; refused in memory (tmpfs, ramfs), where the test could not show
/// what it claims.
pub fn on_disk() -> tempfile::TempDir {
    let binary = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir_in(binary.parent().unwrap()).unwrap();
    let kind = statfs(dir.path()).unwrap().filesystem_type();
    assert!(
        kind != TMPFS_MAGIC && kind != RAMFS_MAGIC,
        "{} is in memory (tmpfs or ramfs): this test needs a disk; build on one",
        dir.path().display()
    );
    dir
}
