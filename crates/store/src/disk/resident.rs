//! Keeps kura's resident memory within its budget on the disk engine.
//!
//! Reads go through LMDB's memory map, so every page read stays mapped into
//! kura and counts in its resident set, however large the data. When the
//! process grows past the budget, the map's pages are dropped from kura's
//! page tables (`MADV_DONTNEED` on a shared file mapping): they stay in the
//! OS page cache, which the kernel shares and reclaims under pressure, and
//! the next read of one maps it again (a minor fault, no disk read).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The start and length of the address range where `file` is mapped, from
/// `/proc/self/maps`.
fn mapping_of(file: &Path) -> Option<(std::ptr::NonNull<std::ffi::c_void>, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let wanted = file.to_str()?;
    maps.lines()
        .filter(|line| line.ends_with(wanted))
        .filter_map(|line| {
            let (start, end) = line.split_whitespace().next()?.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let len = usize::from_str_radix(end, 16).ok()? - start;
            Some((std::ptr::NonNull::new(start as *mut _)?, len))
        })
        .max_by_key(|&(_, len)| len)
}

/// Drops the data file's mapped pages from the resident set when the
/// process is over `budget`, and gives freed heap memory back; counts
/// each trim in `trims`.
pub fn trim(data_file: &Path, budget: u64, trims: &AtomicU64) {
    // Workers allocate pending writes and the applier frees them a round
    // later (random overwrites under `-m 128` left 115 MB of free heap
    // resident).
    if !crate::heap::trim_if_over(budget) {
        return;
    }
    let Some((address, len)) = mapping_of(data_file) else {
        return;
    };
    // SAFETY: the range is LMDB's read-only shared mapping of the data file,
    // found in /proc/self/maps. MADV_DONTNEED on a shared file mapping only
    // drops page-table entries: the mapping stays, and the next access reads
    // the same bytes from the page cache, so readers holding pointers into
    // the map are unaffected.
    #[allow(unsafe_code)]
    let done =
        unsafe { nix::sys::mman::madvise(address, len, nix::sys::mman::MmapAdvise::MADV_DONTNEED) };
    if done.is_ok() {
        trims.fetch_add(1, Ordering::Relaxed);
    }
}
