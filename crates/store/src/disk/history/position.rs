//! Where a position of the update log is in a data directory's segments:
//! the group a [`LogPosition`] ends. A replica's feed starts after it; an
//! incremental backup checks there that the backup it continues is of
//! this log's history, not of another under the same server id.

use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use super::Ended;
use crate::disk::io::Io;
use crate::disk::journal;
use crate::disk::log_format::{GroupHead, Numbering, Record};
use crate::log_position::LogPosition;

/// A group of a segment: its head, where it starts, its entries and
/// where the record after its last entry starts.
#[derive(Debug, Clone, Copy)]
pub(in crate::disk) struct GroupSpan {
    pub head: GroupHead,
    pub offset: u64,
    pub entries: u64,
    pub end: u64,
}

/// Hands `visit` the groups of segment `number`, in order, each once its
/// entries are read, until it breaks. One group at a time: a segment can
/// hold millions.
pub(in crate::disk) fn visit_groups(
    io: &dyn Io,
    path: &Path,
    number: u64,
    mut visit: impl FnMut(&GroupSpan) -> ControlFlow<()>,
) -> io::Result<()> {
    let mut open: Option<GroupSpan> = None;
    let replayed = journal::replay(io, path, number, |record, at, framed| {
        let end = at.offset + framed as u64;
        match record {
            Record::Group(head) => {
                let next = GroupSpan {
                    head,
                    offset: at.offset,
                    entries: 0,
                    end,
                };
                if let Some(done) = open.replace(next) {
                    if visit(&done).is_break() {
                        return Err(Ended::Early(()));
                    }
                }
            }
            _ if record.is_entry() => {
                if let Some(group) = open.as_mut() {
                    group.entries += 1;
                    group.end = end;
                }
            }
            _ => {}
        }
        Ok(())
    });
    match replayed {
        Ok(_) => {
            if let Some(last) = open {
                let _ = visit(&last);
            }
            Ok(())
        }
        Err(Ended::Early(())) => Ok(()),
        Err(Ended::Failed(error)) => Err(error),
    }
}

/// The first group of segment `number` that `wanted` picks.
pub(in crate::disk) fn find_group(
    io: &dyn Io,
    path: &Path,
    number: u64,
    mut wanted: impl FnMut(&GroupSpan) -> bool,
) -> io::Result<Option<GroupSpan>> {
    let mut found = None;
    visit_groups(io, path, number, |group| {
        if wanted(group) {
            found = Some(*group);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    Ok(found)
}

/// The LSN of the first entry in segment `number`, if it has any. Stops
/// reading at that entry: a segment can be gigabytes long.
pub(in crate::disk) fn first_lsn(io: &dyn Io, path: &Path, number: u64) -> io::Result<Option<u64>> {
    let mut numbering = Numbering::default();
    let scanned = journal::replay(io, path, number, |record, _, _| {
        match numbering.number(&record) {
            Some((lsn, _)) => Err(Ended::Early(lsn)),
            None => Ok(()),
        }
    });
    match scanned {
        Ok(_) => Ok(None),
        Err(Ended::Early(lsn)) => Ok(Some(lsn)),
        Err(Ended::Failed(error)) => Err(error),
    }
}

/// Where the log has a position.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::disk) enum Place {
    /// It ends a group of `segment` (LSN 0: it comes before the group of
    /// LSN 1), and the next record starts at `next`.
    Found { segment: u64, next: u64 },
    /// No segment holds its LSN any more.
    Gone,
    /// Its LSN is not the end of a group with its time: it is a point of
    /// another history, or past this log's end.
    Diverged,
}

/// Where the log in `segments` (number and path, oldest first), whose
/// newest entry is `log_last`, has `at`. Reads the first entry of each
/// segment from the newest back, then the one segment that may hold `at`.
pub(in crate::disk) fn locate(
    io: &dyn Io,
    segments: &[(u64, PathBuf)],
    at: LogPosition,
    log_last: u64,
) -> io::Result<Place> {
    let mut holding = None;
    for (number, path) in segments.iter().rev() {
        let first = first_lsn(io, path, *number)?;
        if first.is_some_and(|first| first <= at.lsn || (at.lsn == 0 && first == 1)) {
            holding = Some((*number, path));
            break;
        }
    }
    let Some((segment, path)) = holding else {
        return Ok(Place::Gone);
    };
    if at.lsn == 0 {
        let first = find_group(io, path, segment, |_| true)?;
        let next = first.map_or(0, |group| group.offset);
        return Ok(Place::Found { segment, next });
    }
    let group_last = |group: &GroupSpan| group.head.first_lsn + group.entries - 1;
    // The group that ends at `at`, and the segment's last entry.
    let mut ending = None;
    let mut last_lsn = 0;
    visit_groups(io, path, segment, |group| {
        if group.entries == 0 {
            return ControlFlow::Continue(());
        }
        last_lsn = group_last(group);
        if last_lsn == at.lsn && group.head.micros == at.micros {
            ending = Some(group.end);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    Ok(match ending {
        Some(next) => Place::Found { segment, next },
        // Past this segment's entries, not past the log's: the segments
        // that held it are gone, this one kept for the values LMDB reads
        // in it.
        None if at.lsn > last_lsn && at.lsn <= log_last => Place::Gone,
        None => Place::Diverged,
    })
}
