//! memcached's size-class geometry (`-n` smallest chunk, `-f` growth factor).
//!
//! kura does not carve memory into slabs, so no class can starve another;
//! the classes only group items for `stats slabs`, `stats items` and
//! `memcached-tool`, which operators read to see the size mix.

use std::sync::atomic::{AtomicU64, Ordering};

/// memcached's item header, which its first class adds to `-n`.
const ITEM_HEADER: usize = 48;
/// memcached aligns chunk sizes to 8 bytes.
const ALIGN: usize = 8;
/// memcached's largest number of classes.
pub const MAX_CLASSES: usize = 63;

#[derive(Debug, Clone)]
pub struct SizeClasses {
    /// Chunk size of class `i + 1` (classes are numbered from 1).
    chunk_sizes: Vec<usize>,
}

impl SizeClasses {
    /// The geometry for `-n chunk_size -f factor` and a page (slab) size of
    /// `page_size` (memcached uses the larger of 1 MiB and `-I`).
    pub fn new(chunk_size: usize, factor: f64, page_size: usize) -> Self {
        let largest = (page_size / 2).max(ITEM_HEADER + chunk_size);
        let factor = if factor > 1.0 { factor } else { 1.25 };
        let mut size = ITEM_HEADER + chunk_size;
        let mut chunk_sizes = Vec::new();
        while chunk_sizes.len() < MAX_CLASSES - 1 && (size as f64) <= largest as f64 / factor {
            size = size.div_ceil(ALIGN) * ALIGN;
            chunk_sizes.push(size);
            size = (size as f64 * factor) as usize;
        }
        chunk_sizes.push(largest);
        SizeClasses { chunk_sizes }
    }

    pub fn len(&self) -> usize {
        self.chunk_sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chunk_sizes.is_empty()
    }

    /// The class (numbered from 1) of an item of `size` bytes.
    pub fn class_of(&self, size: usize) -> usize {
        self.chunk_sizes
            .partition_point(|&chunk| chunk < size)
            .min(self.len() - 1)
            + 1
    }

    /// Chunk size of class `class` (numbered from 1).
    pub fn chunk_size(&self, class: usize) -> usize {
        self.chunk_sizes[class - 1]
    }
}

/// A command counted by the class of the item it found (memcached's
/// per-slab command counts in `stats slabs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassCommand {
    /// A retrieval that found the item (a get-and-touch is a `TouchHit`).
    GetHit,
    /// A storage command, by the class of the item it would store.
    Set,
    DeleteHit,
    IncrHit,
    DecrHit,
    /// A `cas` whose unique matched, by the class of the item it replaced.
    CasHit,
    /// A `cas` whose unique did not match.
    CasBadval,
    TouchHit,
}

/// The counts of one class, by [`ClassCommand`], named as memcached's
/// `stats slabs` names them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClassCommands {
    pub get_hits: u64,
    pub cmd_set: u64,
    pub delete_hits: u64,
    pub incr_hits: u64,
    pub decr_hits: u64,
    pub cas_hits: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
}

impl ClassCommands {
    pub fn count(&mut self, command: ClassCommand) {
        *self.counter(command) += 1;
    }

    fn counter(&mut self, command: ClassCommand) -> &mut u64 {
        match command {
            ClassCommand::GetHit => &mut self.get_hits,
            ClassCommand::Set => &mut self.cmd_set,
            ClassCommand::DeleteHit => &mut self.delete_hits,
            ClassCommand::IncrHit => &mut self.incr_hits,
            ClassCommand::DecrHit => &mut self.decr_hits,
            ClassCommand::CasHit => &mut self.cas_hits,
            ClassCommand::CasBadval => &mut self.cas_badval,
            ClassCommand::TouchHit => &mut self.touch_hits,
        }
    }

    pub fn add(&mut self, other: &ClassCommands) {
        self.get_hits += other.get_hits;
        self.cmd_set += other.cmd_set;
        self.delete_hits += other.delete_hits;
        self.incr_hits += other.incr_hits;
        self.decr_hits += other.decr_hits;
        self.cas_hits += other.cas_hits;
        self.cas_badval += other.cas_badval;
        self.touch_hits += other.touch_hits;
    }

    /// The counts made since `baseline` was taken (`stats reset`).
    pub fn since(&self, baseline: &ClassCommands) -> ClassCommands {
        ClassCommands {
            get_hits: self.get_hits.saturating_sub(baseline.get_hits),
            cmd_set: self.cmd_set.saturating_sub(baseline.cmd_set),
            delete_hits: self.delete_hits.saturating_sub(baseline.delete_hits),
            incr_hits: self.incr_hits.saturating_sub(baseline.incr_hits),
            decr_hits: self.decr_hits.saturating_sub(baseline.decr_hits),
            cas_hits: self.cas_hits.saturating_sub(baseline.cas_hits),
            cas_badval: self.cas_badval.saturating_sub(baseline.cas_badval),
            touch_hits: self.touch_hits.saturating_sub(baseline.touch_hits),
        }
    }

    /// Each count with memcached's name, in `stats slabs` order.
    pub fn named(&self) -> [(&'static str, u64); 8] {
        [
            ("get_hits", self.get_hits),
            ("cmd_set", self.cmd_set),
            ("delete_hits", self.delete_hits),
            ("incr_hits", self.incr_hits),
            ("decr_hits", self.decr_hits),
            ("cas_hits", self.cas_hits),
            ("cas_badval", self.cas_badval),
            ("touch_hits", self.touch_hits),
        ]
    }
}

/// [`ClassCommands`] counted from any thread without a lock (the disk
/// engine's; the memory engine keeps its counts under its shard locks).
/// Each class's counters fill one cache line.
pub struct ClassCommandCounts(Box<[ClassLine]>);

#[derive(Default)]
#[repr(align(64))]
struct ClassLine([AtomicU64; 8]);

impl ClassCommandCounts {
    pub fn count(&self, class: usize, command: ClassCommand) {
        if let Some(line) = self.0.get(class) {
            line.0[command as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn of(&self, class: usize) -> ClassCommands {
        let Some(line) = self.0.get(class) else {
            return ClassCommands::default();
        };
        let count = |command: ClassCommand| line.0[command as usize].load(Ordering::Relaxed);
        ClassCommands {
            get_hits: count(ClassCommand::GetHit),
            cmd_set: count(ClassCommand::Set),
            delete_hits: count(ClassCommand::DeleteHit),
            incr_hits: count(ClassCommand::IncrHit),
            decr_hits: count(ClassCommand::DecrHit),
            cas_hits: count(ClassCommand::CasHit),
            cas_badval: count(ClassCommand::CasBadval),
            touch_hits: count(ClassCommand::TouchHit),
        }
    }
}

impl Default for ClassCommandCounts {
    /// Room for every class (numbered from 1).
    fn default() -> Self {
        ClassCommandCounts((0..=MAX_CLASSES).map(|_| ClassLine::default()).collect())
    }
}

impl Default for SizeClasses {
    fn default() -> Self {
        SizeClasses::new(48, 1.25, 1024 * 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_geometry_matches_memcached() {
        let classes = SizeClasses::default();
        // memcached 1.6 with -n 48 -f 1.25: 96, 120, 152, 192, 240, 304, ...
        assert_eq!(classes.chunk_size(1), 96);
        assert_eq!(classes.chunk_size(2), 120);
        assert_eq!(classes.chunk_size(3), 152);
        assert_eq!(classes.chunk_size(classes.len()), 512 * 1024);
    }

    #[test]
    fn items_fall_in_the_smallest_class_that_holds_them() {
        let classes = SizeClasses::default();
        assert_eq!(classes.class_of(1), 1);
        assert_eq!(classes.class_of(96), 1);
        assert_eq!(classes.class_of(97), 2);
        assert_eq!(classes.class_of(10 << 20), classes.len());
    }
}
