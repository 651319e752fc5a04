//! What the applier does to one key (a put, a move of its value in the log,
//! a removal), and what the key's record counted for before: the vocabulary
//! the applier, the compactor, expiry and the replay share.

use super::log_format::Location;
use super::pending::Pending;
use super::record::{Header, LogPointer, Space};

/// One change the applier makes to a key.
#[derive(Clone, Copy)]
pub(super) enum Write<'a> {
    /// An item's or a row's new record as LMDB stores it (an item's value
    /// that stays in the log is a pointer already, `record::pointer_for_put`;
    /// a row's, its columns, `rows.rs`), or its removal.
    Change(Space, Pending<'a>),
    /// The compactor copied the key's value to `to` (a record of
    /// `frame_len` bytes): point there if the record still points at `from`.
    Move {
        from: Location,
        to: Location,
        frame_len: usize,
    },
}

/// A stored record as the counts see it (the one a write replaces, or
/// the write itself).
pub(super) struct Old {
    pub(super) header: Header,
    pub(super) value_len: usize,
    pub(super) pointer: Option<LogPointer>,
}

impl Old {
    pub(super) fn of(stored: &[u8]) -> Option<Old> {
        let (header, value) = Header::decode(stored)?;
        let pointer = LogPointer::of_stored(&header, value);
        Some(Old {
            header,
            value_len: pointer.map_or(value.len(), |pointer| pointer.value_len as usize),
            pointer,
        })
    }
}
