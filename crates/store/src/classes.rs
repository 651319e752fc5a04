//! memcached's size-class geometry (`-n` smallest chunk, `-f` growth factor).
//!
//! kura does not carve memory into slabs, so no class can starve another;
//! the classes only group items for `stats slabs`, `stats items` and
//! `memcached-tool`, which operators read to see the size mix.

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
