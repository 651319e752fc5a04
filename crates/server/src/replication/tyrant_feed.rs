//! The master side of a Tokyo Tyrant slave's link: after its `repl`
//! request (the time to start from and its server id) kura answers its own
//! id and streams its log from the first group at or after that time, each
//! change as the update-log message ttserver would have logged for the
//! database the tyrant port serves (`proto/tyrant_repl.rs`): on the hash
//! database memcached's items (`put`, `out`, `vanish` for a flush), on a
//! B+ tree or a table that table's rows (`put`/`out`, or `misc put`/`misc
//! out`). A no-operation goes out once a second when nothing else does, as
//! ttserver sends one. Changes of other keyspaces, and the slave's own
//! (its id as their origin), are not sent.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use kura_proto::tyrant_repl;
use kura_store::disk::history::{group_changes, Change};
use kura_store::replication::Replication;

use super::{LinkState, LinkStream, ReplicaLink};
use crate::config::TyrantDatabase;
use crate::exec::tyrant::ordered::VALUE_COLUMN;
use crate::Shared;

/// How often a no-operation goes out while nothing changes.
const NOP_EVERY: Duration = Duration::from_secs(1);

pub(super) fn feed(
    shared: &Shared,
    replication: &dyn Replication,
    stream: &mut LinkStream,
    (since_micros, slave): (u64, u32),
    link: &ReplicaLink,
) -> io::Result<()> {
    let own = replication.server_id();
    if slave == own {
        // Circular replication: ttserver closes without a word.
        return Ok(());
    }
    stream.write_all(&own.to_be_bytes())?;
    let mut feed = replication
        .feed_since(since_micros)
        .map_err(io::Error::other)?;
    link.set_state(LinkState::Streaming);
    let database = &shared.config.tyrant_db;
    let mut out = Vec::new();
    let mut nop_sent: Option<Instant> = None;
    while !shared.stopping() {
        out.clear();
        if let Some(group) = feed.next_group(NOP_EVERY)? {
            if group.origin != slave {
                for change in group_changes(&group.bytes)? {
                    if let Some(body) = body_of(database, &change) {
                        tyrant_repl::message(group.micros, group.origin, &body, &mut out);
                    }
                }
            }
            // A slave does not acknowledge: what went out counts as taken.
            link.sent_group(group.last_lsn, group.micros, out.len());
            link.acknowledge(group.last_lsn);
            feed.acknowledged(group.last_lsn);
        }
        if out.is_empty() && nop_sent.is_none_or(|at| at.elapsed() >= NOP_EVERY) {
            out.push(tyrant_repl::NOP);
            nop_sent = Some(Instant::now());
        }
        if !out.is_empty() {
            stream.write_all(&out)?;
        }
    }
    Ok(())
}

/// The update-log body ttserver would have logged for `change` on
/// `database`; `None` for a change of another keyspace.
fn body_of(database: &TyrantDatabase, change: &Change) -> Option<Vec<u8>> {
    let ours = |table: &[u8], name: &str| table == name.as_bytes();
    let now_unix = (kura_store::clock::unix_micros() / 1_000_000).min(u64::from(u32::MAX)) as u32;
    Some(match (database, change) {
        // Gone already (expired as stored, or a dual master's delete):
        // ttserver's records never expire, so a put would live for ever.
        (
            TyrantDatabase::Hash,
            Change::Set {
                key, expiry_unix, ..
            },
        ) if kura_store::clock::is_expired(*expiry_unix, now_unix) => tyrant_repl::out(key),
        (
            TyrantDatabase::Hash,
            Change::Set {
                key,
                value: Some(value),
                ..
            },
        ) => tyrant_repl::put(key, value),
        (TyrantDatabase::Hash, Change::Remove { key }) => tyrant_repl::out(key),
        (TyrantDatabase::Hash, Change::Flush { .. }) => tyrant_repl::vanish(),
        (
            TyrantDatabase::Btree(name),
            Change::RowPut {
                table,
                key,
                columns,
            },
        ) if ours(table, name) => {
            let value = columns
                .iter()
                .find(|(column, _)| column == VALUE_COLUMN)
                .map_or(&[][..], |(_, value)| value);
            tyrant_repl::put(key, value)
        }
        (TyrantDatabase::Btree(name), Change::RowRemove { table, key }) if ours(table, name) => {
            tyrant_repl::out(key)
        }
        (
            TyrantDatabase::Table(name),
            Change::RowPut {
                table,
                key,
                columns,
            },
        ) if ours(table, name) => {
            let mut args: Vec<&[u8]> = vec![key];
            for (column, value) in columns {
                args.push(column);
                args.push(value);
            }
            tyrant_repl::misc(b"put", &args)
        }
        (TyrantDatabase::Table(name), Change::RowRemove { table, key }) if ours(table, name) => {
            tyrant_repl::misc(b"out", &[key])
        }
        _ => return None,
    })
}
