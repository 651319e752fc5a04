//! What the applier does to one key (a put, a move of its value in the log,
//! a removal), and what the key's record counted for before: the vocabulary
//! the applier, the compactor, expiry and the replay share.

use super::log_format::Location;
use super::pending::Pending;
use super::record::{self, Header, LogPointer, Space};

/// One change the applier makes to a key.
#[derive(Clone, Copy)]
pub(super) enum Write<'a> {
    /// The key's new record as LMDB stores it: a value that stays in the
    /// log is a pointer already (`record::pointer_for_put`).
    Put(&'a [u8]),
    /// The compactor copied the key's value to `to` (a record of
    /// `frame_len` bytes): point there if the record still points at `from`.
    Move {
        from: Location,
        to: Location,
        frame_len: usize,
    },
    Remove,
    /// A table row's new columns, as stored (`rows.rs`).
    RowPut {
        stored: &'a [u8],
    },
    RowRemove,
}

impl<'a> Write<'a> {
    /// A pending write's change.
    pub(super) fn of(space: Space, pending: Pending<'a>) -> Self {
        match (space, pending) {
            (Space::Item, Pending::Put(stored)) => Write::Put(stored),
            (Space::Item, Pending::Remove) => Write::Remove,
            (Space::Row, Pending::Put(stored)) => Write::RowPut { stored },
            (Space::Row, Pending::Remove) => Write::RowRemove,
        }
    }

    /// About what applying it copies into LMDB.
    pub(super) fn weight(&self) -> usize {
        match self {
            Write::Put(stored) | Write::RowPut { stored } => stored.len(),
            Write::Move { .. } | Write::Remove | Write::RowRemove => 0,
        }
    }
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
        Some(Old {
            header,
            value_len: record::stored_value_len(&header, value),
            pointer: LogPointer::of_stored(&header, value),
        })
    }
}
