//! Tokyo Tyrant's HTTP interface on the tyrant port: `GET`/`HEAD` read a
//! record, `PUT` writes one (`X-TT-PDMODE` 1 keeps, 2 concatenates),
//! `DELETE` removes it, in the database the port serves (a table's record
//! is its columns as `name\0value\0…`, as the binary `get` sends it).
//! `POST` (ttserver's Lua extensions) is not supported.

use kura_proto::tyrant::PutMode;
use kura_proto::tyrant_http::{reply, reply_options, Method, PutMode as HttpMode, Request};
use kura_store::{Record, RowMode, RowOutcome};

use super::{items, ordered, KeyValues};
use crate::config::TyrantDatabase;
use crate::exec::{Action, Context};

pub fn serve(request: &Request, ctx: &Context<'_>, out: &mut Vec<u8>) -> Action {
    let (status, body) = match &ctx.shared.config.tyrant_db {
        TyrantDatabase::Hash => key_value(&items::Items { ctx }, request),
        TyrantDatabase::Btree(name) => match ctx.shared.store.tables() {
            Some(tables) => {
                let keys = ordered::OrderedKeys {
                    name: name.as_bytes(),
                    tables,
                    ctx,
                };
                key_value(&keys, request)
            }
            None => (500, Vec::new()),
        },
        TyrantDatabase::Table(name) => table(name.as_bytes(), request, ctx),
    };
    match request.method {
        Method::Options => reply_options(out, request.keep_alive),
        method => reply(
            out,
            status,
            &body,
            method != Method::Head,
            request.keep_alive,
        ),
    }
    if request.keep_alive {
        Action::Continue
    } else {
        Action::Close
    }
}

fn key_value(db: &dyn KeyValues, request: &Request) -> (u16, Vec<u8>) {
    let key = &request.key[..];
    match request.method {
        Method::Get | Method::Head => match db.get(key) {
            Some(value) => (200, value),
            None => (404, Vec::new()),
        },
        Method::Put => {
            let mode = match request.mode {
                HttpMode::Overwrite => PutMode::Put,
                HttpMode::Keep => PutMode::Keep,
                HttpMode::Cat => PutMode::Cat,
            };
            match db.put(mode, key, &request.body) {
                RowOutcome::Done => (201, Vec::new()),
                RowOutcome::Kept => (409, Vec::new()),
                RowOutcome::Invalid => (400, Vec::new()),
                RowOutcome::TooLarge => (413, Vec::new()),
                RowOutcome::Missing | RowOutcome::Failed => (500, Vec::new()),
            }
        }
        Method::Delete => match db.out(key) {
            RowOutcome::Done => (200, Vec::new()),
            RowOutcome::Missing | RowOutcome::Invalid => (404, Vec::new()),
            _ => (500, Vec::new()),
        },
        Method::Options => (200, Vec::new()),
        Method::Post => (501, Vec::new()),
    }
}

fn table(name: &[u8], request: &Request, ctx: &Context<'_>) -> (u16, Vec<u8>) {
    let Some(tables) = ctx.shared.store.tables() else {
        return (500, Vec::new());
    };
    let key = &request.key[..];
    match request.method {
        Method::Get | Method::Head => match tables.get_row(name, key, &ctx.fence) {
            Ok(Some(row)) => (200, row.zero_separated()),
            Ok(None) => (404, Vec::new()),
            Err(()) => (500, Vec::new()),
        },
        Method::Put => {
            let mut row = Record::from_zero_separated(key, &request.body);
            // Without a key, a new one (ttserver's put on a table).
            if key.is_empty() {
                match crate::exec::uid::new_uid(tables, name, ctx) {
                    Some(id) => row.key = id.to_string().into_bytes(),
                    None => return (500, Vec::new()),
                }
            }
            let mode = match request.mode {
                HttpMode::Overwrite => RowMode::Put,
                HttpMode::Keep => RowMode::Keep,
                HttpMode::Cat => RowMode::Cat,
            };
            if row.columns.iter().any(|(column, _)| column.is_empty()) {
                return (400, Vec::new());
            }
            match tables.put_row(name, &row, mode, &ctx.fence) {
                RowOutcome::Done => (201, Vec::new()),
                RowOutcome::Kept => (409, Vec::new()),
                RowOutcome::Invalid => (400, Vec::new()),
                RowOutcome::TooLarge => (413, Vec::new()),
                RowOutcome::Missing | RowOutcome::Failed => (500, Vec::new()),
            }
        }
        Method::Delete => match tables.remove_row(name, key, &ctx.fence) {
            RowOutcome::Done => (200, Vec::new()),
            RowOutcome::Missing | RowOutcome::Invalid => (404, Vec::new()),
            _ => (500, Vec::new()),
        },
        Method::Options => (200, Vec::new()),
        Method::Post => (501, Vec::new()),
    }
}
