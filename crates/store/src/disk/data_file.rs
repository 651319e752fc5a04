//! LMDB's data file, checked before it is mapped. LMDB trusts the file: one
//! cut short (a bad copy, a backup's file rewritten) would have it read
//! past the end of the file, and the process die of SIGBUS without a word.
//! The newest meta page says where the trees start, and those pages are
//! always written: a file that ends before them is refused with a message.
//! (Nothing less is refused: a file may end before its last page number,
//! whose page a transaction freed before writing it; and LMDB keeps no
//! checksums of its other pages, so damage inside the file is not found.)

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A meta page's fields, at their offsets in LMDB 0.9's layout (a 16-byte
/// page header, then `MDB_meta`).
const FLAGS_AT: usize = 10;
const MAGIC_AT: usize = 16;
const VERSION_AT: usize = 20;
/// The free-page tree's `md_pad`, which holds the page size.
const PAGE_SIZE_AT: usize = 40;
const FREE_ROOT_AT: usize = 80;
const MAIN_ROOT_AT: usize = 128;
const LAST_PAGE_AT: usize = 136;
const TXNID_AT: usize = 144;
const META_LEN: usize = 152;

const P_META: u16 = 0x08;
const MAGIC: u32 = 0xBEEF_C0DE;
const VERSION: u32 = 1;
/// An empty tree's root.
const NO_PAGE: u64 = u64::MAX;

struct Meta {
    page_size: u64,
    last_page: u64,
    txnid: u64,
    roots: [u64; 2],
}

/// The meta page at `offset`, if it is one.
fn meta(file: &File, offset: u64) -> io::Result<Option<Meta>> {
    let mut page = [0u8; META_LEN];
    match file.read_exact_at(&mut page, offset) {
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        other => other?,
    }
    let u16_at = |at: usize| u16::from_le_bytes([page[at], page[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"));
    let page_size = u64::from(u32_at(PAGE_SIZE_AT));
    let is_meta = u16_at(FLAGS_AT) & P_META != 0
        && u32_at(MAGIC_AT) == MAGIC
        && u32_at(VERSION_AT) == VERSION
        && page_size.is_power_of_two()
        && (512..=65536).contains(&page_size);
    Ok(is_meta.then(|| Meta {
        page_size,
        last_page: u64_at(LAST_PAGE_AT),
        txnid: u64_at(TXNID_AT),
        roots: [u64_at(FREE_ROOT_AT), u64_at(MAIN_ROOT_AT)],
    }))
}

/// Refuses a data file LMDB would fault on: meta pages that are none, or
/// trees that start past the file's end. A file that does not exist or is
/// empty is new (LMDB writes it).
pub fn check(path: &Path) -> Result<(), String> {
    let damaged = |why: String| format!("{} is damaged: {why}", path.display());
    let file = match File::open(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        other => other.map_err(|error| format!("cannot read {}: {error}", path.display()))?,
    };
    let reading = |error: io::Error| format!("cannot read {}: {error}", path.display());
    let len = file.metadata().map_err(reading)?.len();
    if len == 0 {
        return Ok(());
    }
    let first = meta(&file, 0).map_err(reading)?;
    let first = first.ok_or_else(|| damaged("its first page is no LMDB meta page".into()))?;
    let second = meta(&file, first.page_size).map_err(reading)?;
    let second = second.ok_or_else(|| damaged("its second page is no LMDB meta page".into()))?;
    let newest = match first.txnid >= second.txnid {
        true => first,
        false => second,
    };
    let pages = len / newest.page_size;
    let past_end = |root: u64| root != NO_PAGE && (root >= pages || root > newest.last_page);
    match newest.roots.into_iter().find(|&root| past_end(root)) {
        Some(root) => Err(damaged(format!(
            "{len} bytes ({pages} pages of {}), and its newest transaction ({}) has a tree \
             start at page {root}",
            newest.page_size, newest.txnid
        ))),
        None => Ok(()),
    }
}
