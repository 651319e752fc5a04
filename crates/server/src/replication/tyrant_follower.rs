//! Following a Tokyo Tyrant master (a ttserver, or a kura speaking its
//! protocol): `repl` from the time after the last message taken, then
//! each update-log message redone as the request it was
//! (`exec::tyrant::execute`, on the database the tyrant port serves).
//!
//! ttserver's slave keeps its position in a file written after it applies
//! (`-rts`) and starts 30 s early, so it may redo a message twice (an
//! `addint` counts twice). Here the messages a read brings and the new
//! position are written as one group of the log (`Replication::one_append`):
//! both are kept, or neither. Messages may share a time (a kura master
//! sends a group's changes under the group's), and a read may end within
//! such a run, so the position is a time and how many messages of that
//! time were taken: the next `repl` asks from that time again and passes
//! over those. Messages that read a whole table or wait for
//! LMDB (`vanish`, and `misc` calls but `put`, `putkeep`, `putcat`, `out`)
//! go alone, each followed by its position.

use std::io::{self, BufReader, Write};
use std::sync::atomic::Ordering;

use kura_proto::tyrant::{self, Request};
use kura_proto::tyrant_repl::{self, Change};
use kura_store::{AckFence, Record, RowMode};

use super::upstream::{connect, read_full, read_grown, FOLLOWS_ITSELF};
use super::MasterLink;
use crate::exec::Context;
use crate::Shared;

/// The hidden table that keeps the time of the last message taken.
const POSITION_TABLE: &[u8] = b"\0kura-tyrant-master";
const POSITION_KEY: &[u8] = b"rts";
/// Messages taken in one group at most (and bytes): a group is held in
/// memory until appended.
const GROUP_MESSAGES: usize = 512;
const GROUP_BYTES: usize = 1 << 20;

/// Where the follower is: the time (µs) of the last message taken (0 for
/// none) and how many messages of that time were taken (`None`: all of
/// them, as positions kept before the count was are read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    micros: u64,
    taken_at_micros: Option<u64>,
}

impl Position {
    /// `micros` or `micros count`.
    fn parse(text: &str) -> Option<Position> {
        let mut fields = text.split(' ');
        let micros = fields.next()?.parse().ok()?;
        let taken_at_micros = fields.next().map(str::parse).transpose().ok()?;
        fields.next().is_none().then_some(Position {
            micros,
            taken_at_micros,
        })
    }

    fn text(&self) -> String {
        match self.taken_at_micros {
            Some(count) => format!("{} {count}", self.micros),
            None => self.micros.to_string(),
        }
    }

    /// The time `repl` asks from.
    fn since(&self) -> u64 {
        match self.taken_at_micros {
            Some(_) => self.micros,
            None => self.micros + 1,
        }
    }

    /// The position once `taken` (messages in order, times never going
    /// back) are taken after this one.
    fn after(self, taken: &[Message]) -> Position {
        let Some(last) = taken.last() else {
            return self;
        };
        let run = taken
            .iter()
            .rev()
            .take_while(|message| message.micros == last.micros)
            .count() as u64;
        let before = match self.taken_at_micros {
            Some(count) if run == taken.len() as u64 && self.micros == last.micros => count,
            _ => 0,
        };
        Position {
            micros: last.micros,
            taken_at_micros: Some(before + run),
        }
    }
}

/// The position kept here; none taken yet if there is none.
fn position(shared: &Shared) -> Position {
    shared
        .store
        .tables()
        .and_then(|tables| {
            tables
                .get_row(
                    POSITION_TABLE,
                    POSITION_KEY,
                    &kura_store::AckFence::default(),
                )
                .ok()
                .flatten()
        })
        .and_then(|row| {
            let (_, value) = row.columns.first()?;
            Position::parse(std::str::from_utf8(value).ok()?)
        })
        .unwrap_or(Position {
            micros: 0,
            taken_at_micros: None,
        })
}

fn keep_position(shared: &Shared, position: Position) {
    if let Some(tables) = shared.store.tables() {
        let mut row = Record::new(POSITION_KEY);
        row.put(POSITION_KEY, position.text().as_bytes());
        tables.put_row(POSITION_TABLE, &row, RowMode::Put, &AckFence::default());
    }
}

/// The id this server gives a Tokyo Tyrant master: ttserver keeps server
/// ids in 16 bits (1 to 65535) in its update log, and kura's are 32.
fn tyrant_sid(own: u32) -> u32 {
    own % 65_535 + 1
}

/// One message from the master: its time and its body.
struct Message {
    micros: u64,
    body: Vec<u8>,
}

impl Message {
    /// Whether it may share a group (it neither reads a table whole nor
    /// waits for LMDB).
    fn groups(&self) -> bool {
        match tyrant_repl::parse(&self.body) {
            Some(Change::Put { .. } | Change::Out { .. }) => true,
            Some(Change::Misc { name, .. }) => {
                matches!(name, b"put" | b"putkeep" | b"putcat" | b"out")
            }
            // addint, adddouble, putkeep, putcat, putshl: read-modify-writes of one key.
            None => {
                self.body.len() >= 2 && matches!(self.body[1], 0x11 | 0x12 | 0x13 | 0x60 | 0x61)
            }
            Some(Change::Vanish) => false,
        }
    }
}

/// The request a message was, as bytes `tyrant::parse` reads; `None` if
/// it is not one.
fn request_bytes(body: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let request = body.get(..body.len().checked_sub(1)?)?;
    // A logged `misc` lacks the request's options field.
    Some(match tyrant_repl::parse(body) {
        Some(Change::Misc { name, args }) => {
            let mut out = Vec::new();
            tyrant::compose(
                &mut out,
                &Request::Misc {
                    name,
                    opts: 0,
                    args,
                },
            );
            std::borrow::Cow::Owned(out)
        }
        _ => std::borrow::Cow::Borrowed(request),
    })
}

/// Whether a request is one an update log holds: a change of the
/// database. Others (`copy`, `restore`, `setmst`, `ext`, reads) are not
/// redone whatever a master sends.
fn is_change(request: &Request<'_>) -> bool {
    matches!(
        request,
        Request::Put { .. }
            | Request::PutShl { .. }
            | Request::Out { .. }
            | Request::AddInt { .. }
            | Request::AddDouble { .. }
            | Request::Vanish
            | Request::Misc { .. }
    )
}

/// Whether a message is a change this server can redo (a value larger
/// than `-I` is not).
fn redoable(ctx: &Context<'_>, body: &[u8]) -> bool {
    request_bytes(body).is_some_and(|request| {
        matches!(
            tyrant::parse(&request, ctx.shared.config.max_item_size),
            tyrant::Parse::Done { request, .. } if is_change(&request)
        )
    })
}

/// Redoes a message as the request it was; false if it is not one.
fn redo(ctx: &Context<'_>, body: &[u8], scratch: &mut Vec<u8>) -> bool {
    let Some(request) = request_bytes(body) else {
        return false;
    };
    match tyrant::parse(&request, ctx.shared.config.max_item_size) {
        tyrant::Parse::Done { request, .. } if is_change(&request) => {
            scratch.clear();
            crate::exec::tyrant::execute(&request, ctx, scratch);
            true
        }
        _ => false,
    }
}

/// Follows the Tokyo Tyrant master of `link` until the link fails.
pub(super) fn follow_once(
    shared: &Shared,
    link: &MasterLink,
    stopped: &dyn Fn() -> bool,
) -> Result<(), String> {
    let (replication, stream) = connect(shared, link)?;
    let io_error = |error: io::Error| format!("talking to the master: {error}");
    let own = replication.server_id();
    let mut kept = position(shared);
    let since = kept.since();
    // Messages of the kept time taken before: sent again, passed over.
    let mut taken_before = kept.taken_at_micros.unwrap_or(0);
    let mut request = vec![tyrant::MAGIC, 0xA0];
    request.extend_from_slice(&since.to_be_bytes());
    request.extend_from_slice(&tyrant_sid(own).to_be_bytes());
    (&stream).write_all(&request).map_err(io_error)?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut id = [0; 4];
    read_full(&mut reader, &mut id, stopped)?;
    let master = u32::from_be_bytes(id);
    link.master_id.store(master, Ordering::Relaxed);
    if master == own {
        return Err(FOLLOWS_ITSELF.to_string());
    }
    link.streaming();
    let counters = shared.counters.last().expect("a counter set");
    let ctx = Context {
        shared,
        counters,
        conn_id: 0,
        fence: AckFence::default(),
        datagram: false,
    };
    let mut scratch = Vec::new();
    let mut group: Vec<Message> = Vec::new();
    loop {
        let mut kind = [0];
        read_full(&mut reader, &mut kind, stopped)?;
        match kind[0] {
            tyrant_repl::NOP => {}
            tyrant_repl::MESSAGE => {
                let mut head = [0; 16];
                read_full(&mut reader, &mut head, stopped)?;
                let micros = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
                let size = u32::from_be_bytes(head[12..].try_into().expect("4 bytes")) as usize;
                if size > shared.config.max_item_size.saturating_mul(4).max(1 << 20) {
                    return Err(format!("a message of {size} bytes from the master"));
                }
                let mut body = Vec::new();
                read_grown(&mut reader, &mut body, size, stopped)?;
                link.heard(0, micros);
                if micros == kept.micros && taken_before > 0 {
                    taken_before -= 1;
                } else {
                    taken_before = 0;
                    group.push(Message { micros, body });
                }
            }
            other => {
                return Err(format!(
                    "an unknown message kind {other:#04x} from the master"
                ))
            }
        }
        let bytes: usize = group.iter().map(|message| message.body.len()).sum();
        let more_waiting = !reader.buffer().is_empty();
        if group.is_empty() || (more_waiting && group.len() < GROUP_MESSAGES && bytes < GROUP_BYTES)
        {
            continue;
        }
        take(
            shared,
            replication,
            &ctx,
            &mut group,
            &mut kept,
            &mut scratch,
        )?;
        link.taken_to(0, kept.micros);
    }
}

/// Takes `group` (emptied), keeping the position with the messages;
/// `kept` follows it.
fn take(
    shared: &Shared,
    replication: &dyn kura_store::replication::Replication,
    ctx: &Context<'_>,
    group: &mut Vec<Message>,
    kept: &mut Position,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    let mut start = 0;
    while start < group.len() {
        if !group[start].groups() {
            // Alone: it may wait for LMDB, which a held journal never lets
            // catch up.
            let message = &group[start];
            if !redo(ctx, &message.body, scratch) {
                return Err("a message from the master cannot be redone here (not a change of the database, or a value past -I)".to_string());
            }
            let after = kept.after(std::slice::from_ref(message));
            if !replication.one_append(&mut || keep_position(shared, after)) {
                return Err("cannot append to the update log".to_string());
            }
            *kept = after;
            start += 1;
            continue;
        }
        let end = group[start..]
            .iter()
            .position(|message| !message.groups())
            .map_or(group.len(), |at| start + at);
        // All or none of the run: a position kept past a message not redone
        // would skip it for good.
        if !group[start..end]
            .iter()
            .all(|message| redoable(ctx, &message.body))
        {
            return Err("a message from the master cannot be redone here (not a change of the database, or a value past -I)".to_string());
        }
        let after = kept.after(&group[start..end]);
        let appended = replication.one_append(&mut || {
            for message in &group[start..end] {
                redo(ctx, &message.body, scratch);
            }
            keep_position(shared, after);
        });
        if !appended {
            return Err("cannot append to the update log".to_string());
        }
        *kept = after;
        start = end;
    }
    group.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{tyrant_sid, Message, Position};

    #[test]
    fn a_position_counts_the_messages_taken_of_its_time() {
        let at = |micros| Message {
            micros,
            body: Vec::new(),
        };
        let none = Position::parse("0").unwrap();
        assert_eq!(none.since(), 1);
        let first = none.after(&[at(5), at(7), at(7)]);
        assert_eq!(first.text(), "7 2");
        assert_eq!(first.since(), 7, "asked from its time again");
        assert_eq!(first.after(&[at(7)]).text(), "7 3");
        assert_eq!(first.after(&[at(7), at(9)]).text(), "9 1");
        assert_eq!(first.after(&[]), first);
        assert_eq!(Position::parse("7 2"), Some(first));
        // Kept before the count was: every message of its time taken.
        assert_eq!(Position::parse("7").unwrap().since(), 8);
        for bad in ["", "x", "7 x", "7 2 1", "-1"] {
            assert_eq!(Position::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_id_a_tokyo_tyrant_master_gets_fits_in_16_bits() {
        for own in [1, 65_534, 65_535, 65_536, i32::MAX as u32 + 7, u32::MAX] {
            assert!((1..=65_535).contains(&tyrant_sid(own)), "{own}");
        }
    }
}
