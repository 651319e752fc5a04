//! The process's memory as the OS counts it, and giving the allocator's
//! free memory back: both engines keep kura's resident set near `-m`.
//!
//! glibc keeps an arena per thread that allocated, and memory freed by
//! another thread goes back to the arena it came from, where only that
//! thread reuses it. Items one worker stores and another evicts (or, on the
//! disk engine, pending writes a worker makes and the applier frees) thus
//! stay resident as free heap: four workers filling a `-m 64` memory engine
//! in turn held 269 MB. `malloc_trim` returns the free pages of every
//! arena.
//!
//! Giving memory back happens here only, past the budget: glibc's `free`
//! would also give back the top of a heap whenever more than 128 KiB is
//! free there, and a cache under steady sets faults those pages in again
//! at once.

/// Bytes resident in the process, from `/proc/self/statm`.
pub fn process_resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |size| size as u64)
}

/// Gives the allocator's free memory back to the OS if the process holds
/// more than `budget` bytes; returns whether it was over.
pub fn trim_if_over(budget: u64) -> bool {
    if process_resident_bytes().is_none_or(|resident| resident <= budget) {
        return false;
    }
    // SAFETY: malloc_trim only returns free memory of the allocator to the OS.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
    true
}

/// The largest block glibc hands out from its heaps rather than mapping on
/// its own: glibc's own ceiling for the threshold it would otherwise raise
/// as large blocks come and go (fixing the trim threshold fixes this one
/// too, at 128 KiB, and every larger value would be mapped, faulted in and
/// unmapped).
const MMAP_THRESHOLD: i32 = 32 << 20;

/// How much more than asked a heap grows by: a thread's heap (64 MiB at
/// most) otherwise grows page by page, one `mprotect` each, 37,000 a second
/// while 1–10 KB sets fill a memory engine.
const TOP_PAD: i32 = 64 << 20;

/// Makes glibc grow its heaps in large steps (`TOP_PAD`) and keep freed
/// memory until [`trim_if_over`] gives it back. Call once, before serving.
pub fn keep_freed_memory_until_trimmed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's thresholds.
    #[allow(unsafe_code)]
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, TOP_PAD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}
