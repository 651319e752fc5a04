//! kura's replication stream (its own protocol, on the memcached port).
//!
//! A replica sends one text line, `replicate <replica id> <lsn> <µs>
//! <format>` (its newest entry and that entry's group time) or `replicate
//! <replica id> none <format>` (it has no position: an interrupted
//! snapshot); `<format>` is the data format it reads, which a master of
//! another format refuses with a `SERVER_ERROR`. The master answers
//! `STREAM <master id>` and sends its log's groups after that position, or
//! `SNAPSHOT <master id> <reason>` and sends its whole state first; then
//! the connection carries frames only:
//!
//! ```text
//! master ─▶ replica   kind u8 | length u32 BE | payload
//!   G  a group of the log: journal records (head, then entries) as the master's
//!      segment holds them
//!   I  a table's index: table length u8 | table | column length u8 | column | kind u8
//!   S  snapshot records (puts and row puts)
//!   D  every table's indexes, when they changed: I's payloads back to back
//!   E  end of the snapshot: LSN u64 BE | µs u64 BE (the feed goes on after it)
//!   H  heartbeat, when idle: the master's newest entry, LSN u64 BE | µs u64 BE
//! replica ─▶ master   A | LSN u64 BE: every entry up to it is applied
//! ```

/// Bytes before a frame's payload.
pub const FRAME_HEAD: usize = 5;
/// Bytes of an acknowledgement.
pub const ACK_LEN: usize = 9;

const GROUP: u8 = b'G';
const INDEX: u8 = b'I';
const SNAPSHOT: u8 = b'S';
const SNAPSHOT_END: u8 = b'E';
const INDEXES: u8 = b'D';
const HEARTBEAT: u8 = b'H';
const ACK: u8 = b'A';

/// One frame from a master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A group of the log's records.
    Group(&'a [u8]),
    Index {
        table: &'a [u8],
        column: &'a [u8],
        kind: u8,
    },
    Snapshot(&'a [u8]),
    /// Every index of every table (see [`indexes`]).
    Indexes(&'a [u8]),
    SnapshotEnd {
        lsn: u64,
        micros: u64,
    },
    Heartbeat {
        lsn: u64,
        micros: u64,
    },
}

/// A frame head's kind and payload length, or why it is not one.
pub fn frame_head(head: &[u8; FRAME_HEAD], max_len: usize) -> Result<(u8, usize), String> {
    let kind = head[0];
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if !matches!(
        kind,
        GROUP | INDEX | SNAPSHOT | INDEXES | SNAPSHOT_END | HEARTBEAT
    ) {
        return Err(format!("unknown frame kind {kind:#04x}"));
    }
    if len > max_len {
        return Err(format!(
            "a frame of {len} bytes, over the limit of {max_len}"
        ));
    }
    Ok((kind, len))
}

/// The frame of `kind` whose payload is `payload`.
pub fn frame(kind: u8, payload: &[u8]) -> Result<Frame<'_>, String> {
    let position = |payload: &[u8]| -> Result<(u64, u64), String> {
        let bytes: [u8; 16] = payload
            .try_into()
            .map_err(|_| "a position frame of the wrong length".to_string())?;
        Ok((
            u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes")),
            u64::from_be_bytes(bytes[8..].try_into().expect("8 bytes")),
        ))
    };
    Ok(match kind {
        GROUP => Frame::Group(payload),
        SNAPSHOT => Frame::Snapshot(payload),
        INDEX => match index_entry(payload)? {
            ((table, column, kind), []) => Frame::Index {
                table,
                column,
                kind,
            },
            _ => return Err("a damaged index frame".to_string()),
        },
        INDEXES => {
            indexes(payload)?;
            Frame::Indexes(payload)
        }
        SNAPSHOT_END => {
            let (lsn, micros) = position(payload)?;
            Frame::SnapshotEnd { lsn, micros }
        }
        HEARTBEAT => {
            let (lsn, micros) = position(payload)?;
            Frame::Heartbeat { lsn, micros }
        }
        other => return Err(format!("unknown frame kind {other:#04x}")),
    })
}

/// A table, a column and an index kind.
pub type IndexEntry<'a> = (&'a [u8], &'a [u8], u8);

/// The index at the start of `bytes`, and what follows it.
fn index_entry(bytes: &[u8]) -> Result<(IndexEntry<'_>, &[u8]), String> {
    let damaged = || "a damaged index frame".to_string();
    let (&table_len, rest) = bytes.split_first().ok_or_else(damaged)?;
    let table = rest.get(..table_len as usize).ok_or_else(damaged)?;
    let rest = &rest[table_len as usize..];
    let (&column_len, rest) = rest.split_first().ok_or_else(damaged)?;
    let column = rest.get(..column_len as usize).ok_or_else(damaged)?;
    let rest = &rest[column_len as usize..];
    let (&kind, rest) = rest.split_first().ok_or_else(damaged)?;
    Ok(((table, column, kind), rest))
}

fn push_index_entry(out: &mut Vec<u8>, (table, column, kind): IndexEntry<'_>) {
    out.push(table.len().min(255) as u8);
    out.extend_from_slice(&table[..table.len().min(255)]);
    out.push(column.len().min(255) as u8);
    out.extend_from_slice(&column[..column.len().min(255)]);
    out.push(kind);
}

/// The indexes a `D` frame's payload lists.
pub fn indexes(payload: &[u8]) -> Result<Vec<IndexEntry<'_>>, String> {
    let mut list = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let (entry, after) = index_entry(rest)?;
        list.push(entry);
        rest = after;
    }
    Ok(list)
}

/// A `D` frame's payload listing `entries`.
pub fn index_list<'a>(entries: impl IntoIterator<Item = IndexEntry<'a>>) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in entries {
        push_index_entry(&mut out, entry);
    }
    out
}

/// Appends `frame`, framed, to `out`. Tables and columns longer than 255
/// bytes do not exist (the engine refuses them).
pub fn encode(frame: Frame<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEAD]);
    let kind = match frame {
        Frame::Group(records) => {
            out.extend_from_slice(records);
            GROUP
        }
        Frame::Snapshot(bytes) => {
            out.extend_from_slice(bytes);
            SNAPSHOT
        }
        Frame::Index {
            table,
            column,
            kind,
        } => {
            push_index_entry(out, (table, column, kind));
            INDEX
        }
        Frame::Indexes(payload) => {
            out.extend_from_slice(payload);
            INDEXES
        }
        Frame::SnapshotEnd { lsn, micros } | Frame::Heartbeat { lsn, micros } => {
            out.extend_from_slice(&lsn.to_be_bytes());
            out.extend_from_slice(&micros.to_be_bytes());
            if matches!(frame, Frame::Heartbeat { .. }) {
                HEARTBEAT
            } else {
                SNAPSHOT_END
            }
        }
    };
    let len = (out.len() - start - FRAME_HEAD) as u32;
    out[start] = kind;
    out[start + 1..start + FRAME_HEAD].copy_from_slice(&len.to_be_bytes());
}

/// A replica's acknowledgement of every entry up to `lsn`.
pub fn ack(lsn: u64) -> [u8; ACK_LEN] {
    let mut out = [ACK; ACK_LEN];
    out[1..].copy_from_slice(&lsn.to_be_bytes());
    out
}

/// The LSN an acknowledgement carries; `None` if it is not one.
pub fn parse_ack(bytes: &[u8; ACK_LEN]) -> Option<u64> {
    (bytes[0] == ACK).then(|| u64::from_be_bytes(bytes[1..].try_into().expect("8 bytes")))
}

/// What a connection asked to become: a kura replica's link (`replicate`)
/// or a Tokyo Tyrant slave's (`repl`, `tyrant_repl.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRequest {
    Kura(ReplicaHello),
    Tyrant {
        /// The slave wants the messages from this time on (µs).
        since_micros: u64,
        /// The slave's server id: its own writes are not sent back.
        slave: u32,
    },
}

/// A replica's position in a `replicate` line: its newest entry's LSN and
/// group time, or none; and the data format it reads (the log's records
/// and the snapshot's travel as the disk engine keeps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaHello {
    pub replica: u32,
    pub after: Option<(u64, u64)>,
    pub format: u32,
}

impl ReplicaHello {
    /// The request line (with its CRLF).
    pub fn line(&self) -> String {
        match self.after {
            Some((lsn, micros)) => {
                format!(
                    "replicate {} {lsn} {micros} {}\r\n",
                    self.replica, self.format
                )
            }
            None => format!("replicate {} none {}\r\n", self.replica, self.format),
        }
    }
}

/// What a master answered a `replicate` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterAnswer {
    Stream { master: u32 },
    Snapshot { master: u32, reason: String },
    Refused(String),
}

/// Reads a master's answer line (without its CRLF).
pub fn parse_answer(line: &str) -> MasterAnswer {
    let mut words = line.splitn(3, ' ');
    let verb = words.next().unwrap_or_default();
    let master = words.next().and_then(|id| id.parse().ok());
    match (verb, master) {
        ("STREAM", Some(master)) => MasterAnswer::Stream { master },
        ("SNAPSHOT", Some(master)) => MasterAnswer::Snapshot {
            master,
            reason: words.next().unwrap_or_default().to_string(),
        },
        _ => MasterAnswer::Refused(line.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(frame: Frame<'_>) {
        let mut out = Vec::new();
        encode(frame, &mut out);
        let head: [u8; FRAME_HEAD] = out[..FRAME_HEAD].try_into().unwrap();
        let (kind, len) = frame_head(&head, 1 << 20).unwrap();
        assert_eq!(len, out.len() - FRAME_HEAD);
        assert_eq!(self::frame(kind, &out[FRAME_HEAD..]).unwrap(), frame);
    }

    #[test]
    fn frames_round_trip() {
        round_trip(Frame::Group(b"records"));
        round_trip(Frame::Snapshot(b""));
        round_trip(Frame::Index {
            table: b"users",
            column: b"age",
            kind: 1,
        });
        let list = index_list([(&b"t"[..], &b"a"[..], 0), (&b"t"[..], &b"b"[..], 3)]);
        round_trip(Frame::Indexes(&list));
        assert_eq!(indexes(&list).unwrap()[1], (&b"t"[..], &b"b"[..], 3));
        round_trip(Frame::Indexes(&[]));
        round_trip(Frame::SnapshotEnd {
            lsn: 7,
            micros: 1_700_000_000_000_000,
        });
        round_trip(Frame::Heartbeat {
            lsn: u64::MAX,
            micros: 0,
        });
    }

    #[test]
    fn bad_frames_are_refused_not_trusted() {
        assert!(frame_head(&[b'Z', 0, 0, 0, 1], 10).is_err());
        assert!(
            frame_head(&[b'G', 0, 0, 1, 0], 10).is_err(),
            "over the limit"
        );
        assert!(frame(b'E', &[0; 15]).is_err());
        assert!(frame(b'I', &[5, b'a']).is_err());
        assert!(frame(b'I', &[1, b'a', 1, b'b']).is_err(), "no kind");
        assert!(
            frame(b'D', &[1, b'a', 1, b'b', 0, 9]).is_err(),
            "a cut entry"
        );
    }

    #[test]
    fn acks_and_hellos_and_answers() {
        assert_eq!(parse_ack(&ack(42)), Some(42));
        assert_eq!(parse_ack(&[b'X'; ACK_LEN]), None);
        let hello = ReplicaHello {
            replica: 3,
            after: Some((10, 20)),
            format: 6,
        };
        assert_eq!(hello.line(), "replicate 3 10 20 6\r\n");
        assert_eq!(
            ReplicaHello {
                replica: 3,
                after: None,
                format: 6
            }
            .line(),
            "replicate 3 none 6\r\n"
        );
        assert_eq!(parse_answer("STREAM 9"), MasterAnswer::Stream { master: 9 });
        assert_eq!(
            parse_answer("SNAPSHOT 9 the log no longer holds LSN 5"),
            MasterAnswer::Snapshot {
                master: 9,
                reason: "the log no longer holds LSN 5".to_string()
            }
        );
        assert!(matches!(
            parse_answer("SERVER_ERROR no"),
            MasterAnswer::Refused(_)
        ));
    }
}
