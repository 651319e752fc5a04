//! Tokyo Tyrant's commands against a table (`--tyrant-db table:NAME`), as
//! ttserver serves a table database: a record's value is its columns as
//! `name\0value\0…`, and `misc` carries the table functions, queries
//! included (`search`, with `addcond`, `setorder`, `setlimit`, `get`,
//! `out`, `count`, `hint`, `mstype` and `next`).
//!
//! Where kura differs from ttserver: `count` after `next` (a meta-search)
//! is the number found, where ttserver answers "0"; a meta-search scans
//! the table (a single query uses an index as Tokyo Cabinet would); a
//! search combines at most 256 queries and holds at most 64 regular
//! expressions, and fails past them; `putshl`, `ext`, `restore`, `setmst`
//! and `repl` fail.

use std::ops::Bound;

use kura_proto::number::c_atoll;
use kura_proto::tyrant::{reply, PutMode, Request};
use kura_store::{Record, RowEdit, RowMode, RowOutcome, StoredRecord, Tables};
use kura_table::columns::{join_zero_separated, Columns};
use kura_table::{
    metasearch, number, plan, Condition, IndexCommand, Lookup, Operator, Order, OrderKind, Query,
    SetOperation,
};

use super::{
    found_within, key_value_list, next_key, start_iterator, stat_lines, Action, Context,
    KeyIterator,
};
use crate::exec::reply_limit::ReplyLimit;

pub fn execute(
    table: &[u8],
    request: &Request<'_>,
    ctx: &Context<'_>,
    out: &mut Vec<u8>,
) -> Action {
    let Some(tables) = ctx.shared.store.tables() else {
        // The server refuses to start so; answer failure all the same.
        reply::status(out, false);
        return Action::Continue;
    };
    let db = Db { table, tables, ctx };
    match request {
        Request::Put { mode, key, value } => {
            let row = Record::from_zero_separated(key, value);
            let done = db.put(row, row_mode(*mode));
            if *mode != PutMode::NoReply {
                reply::status(out, done);
            }
        }
        Request::Out { key } => reply::status(out, db.remove(key) == RowOutcome::Done),
        Request::Get { key } => match db.get(key) {
            Some(row) => reply::bytes(out, &row.zero_separated()),
            None => reply::status(out, false),
        },
        Request::Mget { keys } => {
            let limit = ctx.shared.config.max_reply_bytes;
            match found_within(keys, limit, |key| Some(db.get(key)?.zero_separated())) {
                Some(found) => reply::records(out, found.iter().map(|(k, v)| (*k, &v[..]))),
                None => reply::status(out, false),
            }
        }
        Request::Vsiz { key } => match db.get(key) {
            Some(row) => reply::value_size(out, row.dumped_len() as u32),
            None => reply::status(out, false),
        },
        Request::IterInit => {
            start_iterator(ctx, db.iterator(Bound::Unbounded));
            reply::status(out, true);
        }
        Request::IterNext => match next_key(ctx) {
            Some(key) => reply::bytes(out, &key),
            None => reply::status(out, false),
        },
        Request::Fwmkeys { prefix, max } => {
            let limit = ctx.shared.config.max_reply_bytes;
            match db.keys_with(prefix, usize::try_from(*max).ok(), limit) {
                Some(keys) => reply::list(out, true, keys.iter().map(|key| &key[..])),
                None => reply::status(out, false),
            }
        }
        // As on a hash database, a sum of `INT_MIN` (or out of `int`'s
        // range) answers failure; the row keeps it.
        Request::AddInt { key, delta } => match db.add_number(key, f64::from(*delta)).map(c_int) {
            Some(sum) if sum != i32::MIN => reply::int(out, sum),
            _ => reply::status(out, false),
        },
        Request::AddDouble { key, delta } => match db.add_number(key, *delta) {
            Some(sum) => reply::double(out, sum),
            None => reply::status(out, false),
        },
        Request::Sync => reply::status(out, ctx.shared.store.sync()),
        Request::Optimize { .. } => reply::status(out, true),
        Request::Vanish => reply::status(out, db.vanish()),
        Request::Rnum => reply::count(out, db.count_and_size().0),
        Request::Size => reply::count(out, db.count_and_size().1),
        Request::Stat => {
            let (count, size) = db.count_and_size();
            reply::stat(out, stat_lines(ctx, "table", count, size))
        }
        Request::Misc { name, args, .. } => match misc(&db, name, args) {
            Some(items) => reply::list(out, true, items.iter().map(|item| &item[..])),
            None => reply::list(out, false, std::iter::empty()),
        },
        Request::SetMaster { host, port, .. } => {
            reply::status(out, super::set_master(ctx, host, *port))
        }
        // `repl` and `copy` never come here (see `super::execute`).
        Request::PutShl { .. }
        | Request::Ext { .. }
        | Request::Restore { .. }
        | Request::Repl { .. }
        | Request::Copy { .. } => reply::status(out, false),
    }
    Action::Continue
}

fn row_mode(mode: PutMode) -> RowMode {
    match mode {
        PutMode::Put | PutMode::NoReply => RowMode::Put,
        PutMode::Keep => RowMode::Keep,
        PutMode::Cat => RowMode::Cat,
    }
}

/// The table a connection serves, and what it needs to.
struct Db<'a> {
    table: &'a [u8],
    tables: &'a dyn Tables,
    ctx: &'a Context<'a>,
}

impl Db<'_> {
    /// Puts a row; an empty primary key takes a new unique id, as
    /// `tcadbput` gives one. A column named "" is refused (it is the
    /// primary key's name), as Tokyo Cabinet refuses it.
    fn put(&self, mut row: Record, mode: RowMode) -> bool {
        if row.columns.iter().any(|(name, _)| name.is_empty())
            || row.encode_columns().len() > self.ctx.shared.config.max_item_size
        {
            return false;
        }
        if row.key.is_empty() {
            match self.new_uid() {
                Some(id) => row.key = id.to_string().into_bytes(),
                None => return false,
            }
        }
        self.tables.put_row(self.table, &row, mode, &self.ctx.fence) == RowOutcome::Done
    }

    fn remove(&self, key: &[u8]) -> RowOutcome {
        self.tables.remove_row(self.table, key, &self.ctx.fence)
    }

    fn get(&self, key: &[u8]) -> Option<Record> {
        self.tables
            .get_row(self.table, key, &self.ctx.fence)
            .ok()
            .flatten()
    }

    /// What a meta-search's scan keeps: the sort key of every row any of
    /// `queries` matches, in primary-key order, and for each query which of
    /// those it matches. `None` if the table could not be read (writes not
    /// yet in LMDB that a full or failing disk keeps from it).
    fn matching(&self, queries: &[Query]) -> Option<(Vec<Record>, Vec<Members>)> {
        let mut rows = Vec::new();
        let mut members = vec![Members::default(); queries.len()];
        self.tables
            .visit_rows(self.table, &mut |row| {
                let mut kept = false;
                for (query, members) in queries.iter().zip(&mut members) {
                    if query.matches(&row) {
                        members.add(rows.len());
                        kept = true;
                    }
                }
                if kept {
                    rows.push(sort_key(&row, queries));
                }
                true
            })
            .ok()?;
        Some((rows, members))
    }

    /// An iterator over the table's keys within `from`.
    fn iterator(&self, from: Bound<Vec<u8>>) -> KeyIterator {
        KeyIterator::over_rows(self.table, from)
    }

    /// The primary keys that begin with `prefix`, in order, at most `max`;
    /// `None` if the table could not be read, or once the keys pass
    /// `within` bytes (the first always goes).
    fn keys_with(&self, prefix: &[u8], max: Option<usize>, within: usize) -> Option<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        if max == Some(0) {
            return Some(keys);
        }
        let mut budget = ReplyLimit::new(within);
        self.tables
            .walk_rows(
                self.table,
                None,
                Bound::Included(prefix),
                false,
                &mut |key, _| {
                    let more = key.starts_with(prefix) && budget.take(key.len());
                    if more {
                        keys.push(key.to_vec());
                    }
                    more && max.is_none_or(|max| keys.len() < max)
                },
            )
            .ok()?;
        budget.fits().then_some(keys)
    }

    /// Rows, and their keys' and columns' bytes (`rnum`, `size`).
    fn count_and_size(&self) -> (u64, u64) {
        let (mut count, mut size) = (0, 0);
        let _ = self.tables.visit_rows(self.table, &mut |row| {
            count += 1;
            size += (row.key().len() + row.columns_size()) as u64;
            true
        });
        (count, size)
    }

    /// The sort keys of the rows `query` matches, in primary-key order
    /// (only those its answer needs), the lookups that found them (none: a
    /// scan), and how many rows matched (for a hint). `None` if the table
    /// could not be read.
    fn found(&self, query: &Query) -> Option<Found> {
        let mut matches = Matches {
            query,
            rows: Vec::new(),
            count: 0,
        };
        if query.matches_needed() == Some(0) {
            return Some((Vec::new(), Vec::new(), 0));
        }
        let lookups = plan(&query.conditions, &self.tables.indexes(self.table));
        if !lookups.is_empty() {
            let lazily = query.matches_needed().is_some();
            let found = self
                .tables
                .lookup_rows(self.table, &lookups, lazily, &mut |row| matches.offer(row));
            if let Ok(Some(_)) = found {
                return Some((matches.rows, lookups, matches.count));
            }
            // An index dropped meanwhile or unreadable, or so many rows
            // that a scan reads them faster: scan instead.
            matches.rows.clear();
            matches.count = 0;
        }
        self.tables
            .visit_rows(self.table, &mut |row| matches.offer(row))
            .ok()?;
        Some((matches.rows, Vec::new(), matches.count))
    }

    /// Removes every row, walking the keys as `iternext` does (one held at
    /// a time).
    fn vanish(&self) -> bool {
        let keys = self.iterator(Bound::Unbounded);
        super::remove_each(keys, self.ctx, |key| self.remove(key))
    }

    /// A new unique primary key (`genuid`); `None` once they run out.
    fn new_uid(&self) -> Option<u64> {
        crate::exec::uid::new_uid(self.tables, self.table, self.ctx)
    }

    /// `addint`/`adddouble` on a table: the column `_num` of the row (made
    /// if missing) grows by `delta`, atomically. Both add as doubles and
    /// store `%f` without trailing zeros, as Tokyo Cabinet's
    /// `tctdbaddnumber` does (an `addint` to `2.5` makes `3.5`).
    fn add_number(&self, key: &[u8], delta: f64) -> Option<f64> {
        // Without a key, a new row (`tcadbaddint` on a table).
        let uid;
        let key = match key.is_empty() {
            true => {
                uid = self.new_uid()?.to_string().into_bytes();
                &uid[..]
            }
            false => key,
        };
        let mut sum = None;
        let outcome = self.tables.modify_row(
            self.table,
            key,
            &mut |current| {
                let mut row = current.unwrap_or_else(|| Record::new(key));
                let old = row.columns.iter().find(|(n, _)| n == b"_num");
                let new = old.map_or(0.0, |(_, value)| number::parse(value)) + delta;
                if new.is_nan() {
                    return RowEdit::Leave;
                }
                let text = trim_fraction(format!("{new:.6}"));
                row.put(b"_num", text.as_bytes());
                sum = Some(new);
                RowEdit::Put(row)
            },
            &self.ctx.fence,
        );
        sum.filter(|_| outcome == RowOutcome::Done)
    }
}

/// A single query's search: the rows it matched, what it read, how many.
type Found = (Vec<Record>, Vec<Lookup>, usize);

/// The rows a meta-search's scan kept that one of its queries matches: a
/// bit for each (a list of positions took 8 bytes a row and query).
#[derive(Clone, Default)]
struct Members {
    bits: Vec<u64>,
    count: usize,
}

impl Members {
    fn add(&mut self, at: usize) {
        let word = at / 64;
        if self.bits.len() <= word {
            self.bits.resize(word + 1, 0);
        }
        self.bits[word] |= 1 << (at % 64);
        self.count += 1;
    }

    fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        (self.bits.iter().enumerate()).flat_map(|(word, &bits)| {
            (0..64)
                .filter(move |bit| bits >> bit & 1 == 1)
                .map(move |bit| word * 64 + bit)
        })
    }
}

/// A search may combine at most this many queries (`next`): each costs a
/// test of every row the scan reads.
const MAX_QUERIES: usize = 256;

/// A search may hold at most this many regular expressions (`STRRX`):
/// each is compiled before the search, into up to [`kura_table::condition::REGEX_BYTES`].
const MAX_REGEXES: usize = 64;

/// What a search keeps of the rows its query matches: their sort keys,
/// only as many as its answer needs (the first few, or the best few by its
/// order), and how many matched.
struct Matches<'q> {
    query: &'q Query,
    rows: Vec<Record>,
    count: usize,
}

impl Matches<'_> {
    /// Takes a row if it matches; false once no more are needed.
    fn offer(&mut self, row: StoredRecord<'_>) -> bool {
        if self.query.matches(&row) {
            self.count += 1;
            self.rows
                .push(sort_key(&row, std::slice::from_ref(self.query)));
            self.query.trim(&mut self.rows);
        }
        self.query
            .matches_needed()
            .is_none_or(|needed| self.rows.len() < needed)
    }
}

/// What a search keeps of a row it matched, as Tokyo Cabinet keeps it: the
/// primary key, and the columns the queries order by. The columns an answer
/// returns are read by key once the answer is known, so a search holds no
/// more than its answer's rows whole.
fn sort_key(row: &StoredRecord<'_>, queries: &[Query]) -> Record {
    let mut kept = Record::new(row.key());
    for order in queries.iter().filter_map(|query| query.order.as_ref()) {
        if let Some(value) = row.get(&order.column) {
            if kept.get(&order.column).is_none() {
                kept.put(&order.column, value);
            }
        }
    }
    kept
}

/// A sum as `addint` answers it: C's `(int)` of the double, which x86
/// makes `INT_MIN` when the sum is out of `int`'s range.
fn c_int(sum: f64) -> i32 {
    if sum > -2_147_483_649.0 && sum < 2_147_483_648.0 {
        sum as i32
    } else {
        i32::MIN
    }
}

/// `%f` without trailing zeros or a trailing point.
fn trim_fraction(text: String) -> String {
    if !text.contains('.') {
        return text;
    }
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A table `misc` function: `None` is failure (status 1, no elements).
fn misc(db: &Db<'_>, name: &[u8], args: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
    let mode = match name {
        b"put" => Some(RowMode::Put),
        b"putkeep" => Some(RowMode::Keep),
        b"putcat" => Some(RowMode::Cat),
        _ => None,
    };
    if let Some(mode) = mode {
        let (key, fields) = args.split_first()?;
        let row = Record::from_pairs(key, fields.iter().copied());
        return db.put(row, mode).then(Vec::new);
    }
    match name {
        b"out" => (db.remove(args.first()?) == RowOutcome::Done).then(Vec::new),
        b"get" => {
            let row = db.get(args.first()?)?;
            Some(
                row.columns
                    .into_iter()
                    .flat_map(|(name, value)| [name, value])
                    .collect(),
            )
        }
        b"putlist" => {
            for pair in args.chunks_exact(2) {
                if !db.put(Record::from_zero_separated(pair[0], pair[1]), RowMode::Put) {
                    return None;
                }
            }
            Some(Vec::new())
        }
        // As Tokyo Cabinet's: a key with no record is no failure, a
        // refused removal is.
        b"outlist" => args
            .iter()
            .all(|key| db.remove(key) != RowOutcome::Failed)
            .then(Vec::new),
        b"getlist" => {
            let limit = db.ctx.shared.config.max_reply_bytes;
            let found = found_within(args, limit, |key| Some(db.get(key)?.zero_separated()))?;
            Some(key_value_list(found))
        }
        b"iterinit" => {
            // From a row's key, which must be there (`tctdbiterinit2`).
            let start = match args.first() {
                Some(key) => Bound::Included(db.get(key).map(|_| key.to_vec())?),
                None => Bound::Unbounded,
            };
            start_iterator(db.ctx, db.iterator(start));
            Some(Vec::new())
        }
        b"iternext" => {
            let key = next_key(db.ctx)?;
            // A row removed since its key was read: the key alone, as
            // ttserver answers.
            match db.get(&key) {
                Some(row) => Some(vec![key, row.zero_separated()]),
                None => Some(vec![key]),
            }
        }
        // As ttserver: every pair is tried, one that fails fails the call,
        // an odd argument left over is ignored.
        b"setindex" => {
            let mut failed = false;
            for pair in args.chunks_exact(2) {
                let command = std::str::from_utf8(pair[1])
                    .ok()
                    .and_then(IndexCommand::parse);
                // The primary key's (column ""): rows are kept in its
                // order already, so there is nothing to build.
                let set = command.is_some_and(|command| {
                    pair[0].is_empty() || db.tables.set_index(db.table, pair[0], command).is_ok()
                });
                failed |= !set;
            }
            (!failed).then(Vec::new)
        }
        b"genuid" => Some(vec![db.new_uid()?.to_string().into_bytes()]),
        // kura's own: what disagrees between the indexes and the table.
        b"check" => {
            let problems = db.tables.check_indexes(db.table).ok()?;
            Some(problems.into_iter().map(String::into_bytes).collect())
        }
        b"search" | b"metasearch" => search(db, args),
        b"sync" => db.ctx.shared.store.sync().then(Vec::new),
        b"optimize" => Some(Vec::new()),
        b"vanish" => db.vanish().then(Vec::new),
        _ => None,
    }
}

/// A `search` as `misc` carries it: each argument is a command and its
/// fields, NUL-separated.
#[derive(Debug, Default)]
pub struct SearchRequest {
    pub queries: Vec<Query>,
    pub operation: Option<SetOperation>,
    /// Columns to return (`get`); `Some(empty)`: every column.
    pub columns: Option<Vec<Vec<u8>>>,
    pub remove: bool,
    pub count: bool,
    pub hint: bool,
}

impl SearchRequest {
    /// Reads the arguments as `tcadbmisc` does: unknown commands and
    /// conditions with an unknown operator are ignored. `None` past
    /// [`MAX_QUERIES`] or [`MAX_REGEXES`] (kura's limits; the search fails).
    pub fn parse(args: &[&[u8]]) -> Option<SearchRequest> {
        let mut request = SearchRequest {
            queries: vec![Query::default()],
            ..SearchRequest::default()
        };
        let mut regexes = 0;
        for arg in args {
            let fields: Vec<&[u8]> = arg.split(|&b| b == 0).collect();
            let text = |i: usize| fields.get(i).map(|f| String::from_utf8_lossy(f));
            let query = request.queries.last_mut().expect("one query at least");
            match fields[0] {
                b"addcond" | b"cond" if fields.len() > 3 => {
                    if let Some((operator, flags)) = Operator::parse(&text(2).unwrap_or_default()) {
                        if operator == Operator::StrRx {
                            regexes += 1;
                            if regexes > MAX_REGEXES {
                                return None;
                            }
                        }
                        query
                            .conditions
                            .push(Condition::new(fields[1], operator, flags, fields[3]));
                    }
                }
                b"setorder" | b"order" if fields.len() > 2 => {
                    if let Some(kind) = OrderKind::parse(&text(2).unwrap_or_default()) {
                        query.order = Some(Order {
                            column: fields[1].to_vec(),
                            kind,
                        });
                    }
                }
                b"setlimit" | b"limit" | b"setmax" | b"max" if fields.len() > 1 => {
                    let number = |i: usize| fields.get(i).map_or(0, |f| c_atoll(f));
                    query.set_limit(number(1), number(2));
                }
                b"get" | b"columns" => {
                    let columns = request.columns.get_or_insert_with(Vec::new);
                    columns.extend(fields[1..].iter().map(|name| name.to_vec()));
                }
                b"next" if request.queries.len() == MAX_QUERIES => return None,
                b"next" => request.queries.push(Query::default()),
                b"mstype" => {
                    request.operation = Some(
                        text(1)
                            .and_then(|t| SetOperation::parse(&t))
                            .unwrap_or(SetOperation::Union),
                    )
                }
                b"out" | b"remove" => request.remove = true,
                b"count" => request.count = true,
                b"hint" => request.hint = true,
                _ => {}
            }
        }
        Some(request)
    }
}

fn search(db: &Db<'_>, args: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
    let request = SearchRequest::parse(args)?;
    // Columns to answer with are read by key once the answer is known: a
    // row removed meanwhile is left out, as ttserver leaves it out.
    let projected = |key: &[u8]| {
        let columns = request.columns.as_ref()?;
        Some(project(&db.get(key)?, columns))
    };
    if request.remove {
        // ttserver removes what the last query finds, whatever `next` said.
        let query = request.queries.last().expect("one query at least");
        let (rows, lookups, _) = db.found(query)?;
        let arranged = query.arrange(&rows);
        // The columns answered are read before any row goes, bounded as
        // `getlist`'s answer is (`--max-reply`): past it nothing is removed.
        let mut answers = Vec::new();
        if request.columns.is_some() && !request.count {
            let mut budget = ReplyLimit::new(db.ctx.shared.config.max_reply_bytes);
            for row in &arranged {
                let item = projected(&row.key);
                if !budget.take(item.as_ref().map_or(0, Vec::len)) {
                    return None;
                }
                answers.push(item);
            }
        }
        let mut items = Vec::new();
        let mut removed = 0;
        for (at, row) in arranged.iter().enumerate() {
            match db.remove(&row.key) {
                RowOutcome::Done => {
                    items.extend(answers.get_mut(at).and_then(Option::take));
                    removed += 1;
                }
                RowOutcome::Failed => return None,
                _ => {}
            }
        }
        // As ttserver: `count` answers how many were removed, `hint` adds
        // the plan.
        if request.count {
            items = vec![removed.to_string().into_bytes()];
        }
        if request.hint {
            let queries = std::slice::from_ref(query);
            items.push(hint(explain(queries, &[removed], &lookups)));
        }
        return Some(items);
    }
    // One query may use its indexes; a meta-search scans, keeping the rows
    // any of its queries matches.
    let (rows, members, lookups, counts) = match &request.queries[..] {
        [query] => {
            let (rows, lookups, count) = db.found(query)?;
            (rows, None, lookups, vec![count])
        }
        queries => {
            let (rows, members) = db.matching(queries)?;
            let counts = members.iter().map(|members| members.count).collect();
            (rows, Some(members), Vec::new(), counts)
        }
    };
    let matched = |i: usize| -> Vec<&Record> {
        match &members {
            Some(members) => members[i].positions().map(|at| &rows[at]).collect(),
            None => rows.iter().collect(),
        }
    };
    let operation = request.operation.unwrap_or(SetOperation::Union);
    let found = metasearch(&request.queries, operation, &matched);
    let mut items = Vec::new();
    if request.count {
        items.push(found.len().to_string().into_bytes());
    } else {
        // Bounded as `getlist`'s answer is (`--max-reply`).
        let mut budget = ReplyLimit::new(db.ctx.shared.config.max_reply_bytes);
        for row in &found {
            let item = match &request.columns {
                Some(_) => projected(&row.key),
                None => Some(row.key.clone()),
            };
            let Some(item) = item else { continue };
            if !budget.take(item.len()) {
                return None;
            }
            items.push(item);
        }
    }
    if request.hint {
        items.push(hint(explain(&request.queries, &counts, &lookups)));
    }
    Some(items)
}

/// The last item of an answer with `hint`.
fn hint(plan: String) -> Vec<u8> {
    let mut hint = b"\0\0[[HINT]]\n".to_vec();
    hint.extend_from_slice(plan.as_bytes());
    hint
}

/// A found row as `get` asks: every column with the primary key first
/// (named ""), or only the columns named, in that order.
fn project(row: &Record, columns: &[Vec<u8>]) -> Vec<u8> {
    let mut all: Vec<(&[u8], &[u8])> = vec![(b"", &row.key)];
    all.extend(row.columns.iter().map(|(n, v)| (&n[..], &v[..])));
    if columns.is_empty() {
        return join_zero_separated(all);
    }
    // Many names on a wide row are looked up in a map: a search of the row
    // per name would cost their product (19 s for 125,000 names against a
    // 70,000-column row). The first of a name wins, as a search finds it.
    let by_name: Option<std::collections::HashMap<&[u8], &[u8]>> =
        (columns.len() > 4 && all.len() > 16).then(|| all.iter().rev().copied().collect());
    let find = |name: &[u8]| match &by_name {
        Some(by_name) => by_name.get(name).copied(),
        None => all
            .iter()
            .find(|(have, _)| *have == name)
            .map(|(_, value)| *value),
    };
    // A column named twice is answered once, where first named (ttserver
    // puts the chosen columns in a map).
    let mut named = std::collections::HashSet::new();
    join_zero_separated(columns.iter().filter_map(|name| {
        let name = &name[..];
        let value = find(name).filter(|_| named.insert(name))?;
        Some((name, value))
    }))
}

/// The plan in Tokyo Cabinet's hint format: the indexes a single query
/// looked up (the first is the main one, the others auxiliary), or a scan
/// of the whole table; `counts` are how many rows each query matched.
pub fn explain(queries: &[Query], counts: &[usize], lookups: &[Lookup]) -> String {
    let one = |query: &Query, matches: usize| {
        let hint = |lookup: &Lookup, main| lookup.hint(&query.conditions[lookup.condition], main);
        let mut lines: Vec<String> = lookups.iter().skip(1).map(|l| hint(l, false)).collect();
        lines.push(match lookups.first() {
            Some(lookup) => hint(lookup, true),
            None => "scanning the whole table".to_string(),
        });
        let mut size = matches;
        if let Some(fetch) = query.matches_needed() {
            lines.push(format!("limited matching: {fetch}"));
            size = size.min(fetch);
        }
        lines.push(format!("result set size: {size}"));
        lines.push(match &query.order {
            Some(order) => format!(
                "sorting the result set: \"{}\"",
                String::from_utf8_lossy(&order.column)
            ),
            None => "leaving the natural order".to_string(),
        });
        lines
    };
    let mut text = String::new();
    let count = |i: usize| counts.get(i).copied().unwrap_or(0);
    match queries {
        [query] => {
            for line in one(query, count(0)) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        _ => {
            for (i, query) in queries.iter().enumerate() {
                for line in one(query, count(i)) {
                    text.push_str(&format!("[{i}] {line}\n"));
                }
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_arguments_read_as_ttserver_reads_them() {
        let args: Vec<&[u8]> = vec![
            b"addcond\0age\0NUMGE\x0020",
            b"addcond\0name\0BOGUS\0x",
            b"setorder\0age\0NUMDESC",
            b"setlimit\x0010\x002",
            b"get\0name",
            b"get\0",
            b"next",
            b"addcond\0name\0!STRBW\0a",
            b"mstype\0ISECT",
            b"count",
            b"hint",
        ];
        let request = SearchRequest::parse(&args).unwrap();
        assert_eq!(request.queries.len(), 2);
        let first = &request.queries[0];
        assert_eq!(first.conditions.len(), 1);
        assert_eq!(first.conditions[0].operator, Operator::NumGe);
        assert_eq!(first.order.as_ref().unwrap().kind, OrderKind::NumDesc);
        assert_eq!((first.limit, first.skip), (Some(10), 2));
        assert!(request.queries[1].conditions[0].negated);
        assert_eq!(request.operation, Some(SetOperation::Intersection));
        assert_eq!(request.columns, Some(vec![b"name".to_vec(), b"".to_vec()]));
        assert!(request.count && request.hint && !request.remove);
    }

    #[test]
    fn found_rows_are_projected_with_the_primary_key_named_empty() {
        let row = Record::from_pairs(b"k3", [&b"name"[..], b"Bob", b"age", b"30"]);
        assert_eq!(project(&row, &[]), b"\0k3\0name\0Bob\0age\x0030");
        assert_eq!(
            project(&row, &[b"age".to_vec(), b"none".to_vec(), b"".to_vec()]),
            b"age\x0030\0\0k3"
        );
    }

    #[test]
    fn a_search_keeps_of_a_row_its_key_and_the_columns_the_queries_order_by() {
        let row = Record::from_pairs(
            b"k",
            [&b"name"[..], b"Bob", b"bio", b"long text", b"age", b"30"],
        );
        let stored = row.encode_columns();
        let stored = StoredRecord::new(b"k", &stored).unwrap();
        let ordered = |column: &[u8]| Query {
            order: Some(Order {
                column: column.to_vec(),
                kind: OrderKind::NumAsc,
            }),
            ..Query::default()
        };
        assert_eq!(
            sort_key(&stored, &[Query::default()]),
            Record::new(&b"k"[..])
        );
        let both = [
            ordered(b"age"),
            ordered(b"name"),
            ordered(b"age"),
            ordered(b""),
        ];
        assert_eq!(
            sort_key(&stored, &both),
            Record::from_pairs(b"k", [&b"age"[..], b"30", b"name", b"Bob"])
        );
    }

    #[test]
    fn the_hint_says_the_table_is_scanned_in_tokyo_cabinets_words() {
        let mut query = Query::default();
        assert_eq!(
            explain(std::slice::from_ref(&query), &[2], &[]),
            "scanning the whole table\nresult set size: 2\nleaving the natural order\n"
        );
        query.set_limit(1, 0);
        assert_eq!(
            explain(&[query.clone(), Query::default()], &[2, 2], &[]),
            "[0] scanning the whole table\n[0] limited matching: 1\n[0] result set size: 1\n[0] leaving the natural order\n\
             [1] scanning the whole table\n[1] result set size: 2\n[1] leaving the natural order\n"
        );
    }
}
