//! How much of the update log stays in the OS page cache: the newest
//! appended bytes, up to a budget. Older bytes leave it once they are on
//! disk (`POSIX_FADV_DONTNEED`), so the next appends take the pages they
//! freed instead of memory the machine never touched. On a virtual machine
//! whose free memory the host takes back, a first write to such a page
//! costs 2–10 µs, about the whole cost of a 4 KiB set
//! (`docs/decisions/journal-page-cache.md`).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice::POSIX_FADV_DONTNEED};
use parking_lot::Mutex;

/// Pages leave the cache in runs of at least this many bytes: one call
/// per run, not per fsync.
const DROP_RUN: u64 = 4 << 20;

/// The page cache holds a file in folios of up to this many bytes (the
/// huge page of x86-64 with 4 KiB pages; more on other machines), each
/// aligned to its size, and drops only the folios wholly inside a range:
/// a run starts at the boundary before it, or the folio across the last
/// run's end would stay cached for good.
const LARGEST_FOLIO: u64 = 2 << 20;

/// Segments the window follows at most, each with its file open. Segments
/// of a few bytes (a write once a round, a server restarted often) would
/// wait by the thousand, with their descriptors, for the budget to reach
/// them; past this many, the oldest's pages leave the cache at once.
pub const TRACKED_SEGMENTS: usize = 64;

pub struct PageWindow {
    /// Bytes of the log kept cached past the newest fsync.
    budget: u64,
    segments: Mutex<BTreeMap<u64, Cached>>,
}

/// What of one segment is on disk and still cached.
struct Cached {
    file: Arc<File>,
    /// Pages before this offset have left the cache.
    dropped_to: u64,
    /// Bytes up to this offset are on disk.
    synced_to: u64,
}

impl PageWindow {
    pub fn new(budget: u64) -> PageWindow {
        PageWindow {
            budget,
            segments: Mutex::new(BTreeMap::new()),
        }
    }

    /// Segment `number` (in `file`) is on disk up to `len`; pages of the
    /// oldest segments leave the cache while more than the budget is on
    /// disk and cached.
    pub fn synced(&self, number: u64, file: &Arc<File>, len: u64) {
        let mut segments = self.segments.lock();
        let cached = segments.entry(number).or_insert_with(|| Cached {
            file: file.clone(),
            dropped_to: 0,
            synced_to: 0,
        });
        cached.synced_to = cached.synced_to.max(len);
        while segments.len() > TRACKED_SEGMENTS {
            let (_, mut oldest) = segments.pop_first().expect("more than one");
            oldest.drop_pages(oldest.synced_to - oldest.dropped_to);
        }
        let mut over = segments
            .values()
            .map(|cached| cached.synced_to - cached.dropped_to)
            .sum::<u64>()
            .saturating_sub(self.budget);
        if over < DROP_RUN {
            return;
        }
        let newest = *segments.keys().next_back().expect("just inserted");
        while let Some(mut oldest) = segments.first_entry().filter(|_| over > 0) {
            let cached = oldest.get_mut();
            let run = over.min(cached.synced_to - cached.dropped_to);
            if run == 0 {
                // Only the newest segment keeps an entry with nothing to
                // drop; a length of 0 would drop up to the file's end.
                break;
            }
            cached.drop_pages(run);
            over -= run;
            // The newest segment keeps its entry: more of it will be synced.
            if cached.dropped_to == cached.synced_to && *oldest.key() != newest {
                oldest.remove();
            }
        }
    }

    /// Segment `number` was deleted: nothing of it is left to drop.
    pub fn forget(&self, number: u64) {
        self.segments.lock().remove(&number);
    }
}

impl Cached {
    /// The next `run` bytes on disk leave the page cache.
    fn drop_pages(&mut self, run: u64) {
        if run == 0 {
            return;
        }
        let from = self.dropped_to & !(LARGEST_FOLIO - 1);
        let len = self.dropped_to + run - from;
        let fd = self.file.as_raw_fd();
        if let Err(error) = posix_fadvise(fd, from as i64, len as i64, POSIX_FADV_DONTNEED) {
            tracing::debug!(%error, "cannot drop journal pages from the page cache");
        }
        self.dropped_to += run;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Pages of `file` in the page cache.
    fn cached_pages(file: &File) -> usize {
        resident_pages(file)
            .iter()
            .filter(|page| **page & 1 == 1)
            .count()
    }

    /// `mincore`'s vector over a mapping of `file`: bit 0 of each byte
    /// tells whether its page is cached.
    fn resident_pages(file: &File) -> Vec<u8> {
        let len = file.metadata().unwrap().len() as usize;
        let mut resident = vec![0u8; len.div_ceil(4096)];
        // SAFETY: a read-only mapping of the whole file, only passed to
        // mincore (which reads no page) and unmapped before returning.
        #[allow(unsafe_code)]
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(map, libc::MAP_FAILED);
            assert_eq!(libc::mincore(map, len, resident.as_mut_ptr()), 0);
            libc::munmap(map, len);
        }
        resident
    }

    #[test]
    fn tiny_segments_do_not_hold_their_files_open_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let window = PageWindow::new(256 << 20);
        let files: Vec<Arc<File>> = (0..3 * TRACKED_SEGMENTS as u64)
            .map(|number| {
                let path = dir.path().join(format!("{number}"));
                let mut file = File::create(&path).unwrap();
                file.write_all(b"one small round").unwrap();
                let file = Arc::new(file);
                window.synced(number, &file, 15);
                file
            })
            .collect();
        let held: Vec<bool> = files.iter().map(|f| Arc::strong_count(f) > 1).collect();
        let newest = files.len() - TRACKED_SEGMENTS;
        assert!(held[newest..].iter().all(|&h| h), "the newest are followed");
        assert!(held[..newest].iter().all(|&h| !h), "older ones are let go");
    }

    #[test]
    fn synced_bytes_past_the_budget_leave_the_page_cache_oldest_first() {
        let dir = crate::disk::test_dirs::on_disk();
        let window = PageWindow::new(8 << 20);
        let mut files = Vec::new();
        for number in 0..3u64 {
            let mut file = File::create(dir.path().join(format!("{number}"))).unwrap();
            file.write_all(&vec![7u8; 8 << 20]).unwrap();
            file.sync_all().unwrap();
            let file = Arc::new(File::open(dir.path().join(format!("{number}"))).unwrap());
            window.synced(number, &file, 8 << 20);
            files.push(file);
        }
        // 24 MiB synced against an 8 MiB budget: the two oldest left.
        assert_eq!(cached_pages(&files[0]), 0);
        assert_eq!(cached_pages(&files[1]), 0);
        assert_eq!(cached_pages(&files[2]), (8 << 20) / 4096);
    }

    /// Appends of sizes that are no multiple of a page end the runs inside
    /// the kernel's large folios (Linux 6.16 and later on ext4): none of
    /// those may stay cached past the run that follows.
    #[test]
    fn no_page_stays_cached_across_the_end_of_a_run() {
        use std::os::unix::fs::FileExt;
        let dir = crate::disk::test_dirs::on_disk();
        let path = dir.path().join("segment");
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path);
        let file = Arc::new(file.unwrap());
        let window = PageWindow::new(1 << 20);
        let append = vec![7u8; 1_004_040];
        let mut len = 0;
        for _ in 0..64 {
            file.write_all_at(&append, len).unwrap();
            len += append.len() as u64;
            file.sync_data().unwrap();
            window.synced(0, &file, len);
        }
        // Only the folio across the last run's end may be left before it.
        let dropped_to = window.segments.lock()[&0].dropped_to;
        let resident = resident_pages(&file);
        let before = (dropped_to & !(LARGEST_FOLIO - 1)) as usize / 4096;
        let left = resident[..before]
            .iter()
            .filter(|page| **page & 1 == 1)
            .count();
        assert_eq!(left, 0, "pages before {dropped_to} stayed cached");
    }
}
