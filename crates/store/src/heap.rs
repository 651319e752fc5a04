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
