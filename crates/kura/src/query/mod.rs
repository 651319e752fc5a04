//! `kura query`: a command-line client for a table (or a B+ tree) that a
//! server serves on its tyrant port (`--tyrant-db table:NAME`). It speaks
//! Tokyo Tyrant's protocol (`misc` calls), so it works against ttserver as
//! well, `check` aside.
//!
//! ```text
//! kura query put k1 name=Bob age=30
//! kura query index age decimal
//! kura query search 'age NUMGE 20' 'name !STRBW B' --order age:NUMDESC --limit 10 --explain
//! ```

mod client;

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;
use clap::{Args, Subcommand};

use kura_store::disk::history::backup::{DATA_FILE, MANIFEST};

use crate::Failure;
use client::Tyrant;

#[derive(Args)]
pub struct QueryArgs {
    /// The server's tyrant port.
    #[arg(long, default_value = "127.0.0.1:1978")]
    server: String,
    /// Seconds to wait for an answer (building an index of a large table
    /// takes a while; 0: wait as long as it takes).
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Print JSON, one object per line, instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: QueryCommand,
}

#[derive(Subcommand)]
enum QueryCommand {
    /// Put a record: KEY then NAME=VALUE columns.
    Put {
        key: String,
        columns: Vec<String>,
        /// Only if there is no such record (putkeep).
        #[arg(long, conflicts_with = "cat")]
        keep: bool,
        /// Add the columns the record lacks (putcat).
        #[arg(long)]
        cat: bool,
    },
    /// Print records by key.
    Get { keys: Vec<String> },
    /// Remove records by key.
    Out { keys: Vec<String> },
    /// Set an index on a column: lexical, decimal, token, qgram, optimize or void.
    Index { column: String, kind: String },
    /// Run a query. Each condition is "COLUMN OPERATOR EXPRESSION" with Tokyo
    /// Cabinet's operators (STREQ … FTSEX; `!` negates, `+` forgoes an index);
    /// the column "" (two quotes) is the primary key.
    Search {
        conditions: Vec<String>,
        /// COLUMN:STRASC|STRDESC|NUMASC|NUMDESC
        #[arg(long)]
        order: Option<String>,
        #[arg(long)]
        limit: Option<i64>,
        #[arg(long, default_value_t = 0)]
        skip: i64,
        /// Only these columns, comma-separated.
        #[arg(long)]
        columns: Option<String>,
        /// Print how many records match instead of them.
        #[arg(long)]
        count: bool,
        /// Remove the records found.
        #[arg(long)]
        delete: bool,
        /// Also print the plan (which index, rows read, sort).
        #[arg(long)]
        explain: bool,
    },
    /// Check every index of the table against a full scan (kura only).
    Check,
}

/// `kura table check`: every index of a table against a full scan, on a
/// running server (`--server`, its tyrant port) or a stopped one's data
/// directory (`--dir` and `--table`).
#[derive(Args)]
pub struct TableArgs {
    #[command(subcommand)]
    command: TableCommand,
}

#[derive(Subcommand)]
enum TableCommand {
    /// Check that every index equals a full scan of its table.
    Check {
        /// A running server's tyrant port (serving `--tyrant-db table:NAME`).
        #[arg(long, conflicts_with = "dir")]
        server: Option<String>,
        /// A stopped server's data directory.
        #[arg(long, requires = "table")]
        dir: Option<std::path::PathBuf>,
        /// The table to check in `--dir`.
        #[arg(long)]
        table: Option<String>,
        /// Seconds to wait for a running server's answer (0: no limit).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
}

pub fn run_table(args: TableArgs) -> Result<(), Failure> {
    let TableCommand::Check {
        server,
        dir,
        table,
        timeout,
    } = args.command;
    let problems = match (server, dir, table) {
        (_, Some(dir), Some(table)) => {
            check_data_dir(&dir)?;
            let engine = kura_store::DiskStore::open(kura_store::DiskConfig::new(&dir))
                .map_err(|error| anyhow::anyhow!("{}: {error}", dir.display()))?;
            let tables = kura_store::Store::tables(&engine).expect("the disk engine keeps tables");
            if tables.indexes(table.as_bytes()).is_empty() {
                return Err(Failure::Runtime(anyhow::anyhow!(
                    "{} holds no index of table {table:?}: nothing to check",
                    dir.display()
                )));
            }
            tables
                .check_indexes(table.as_bytes())
                .map_err(|()| anyhow::anyhow!("cannot read {}", dir.display()))?
                .into_iter()
                .map(String::into_bytes)
                .collect()
        }
        (server, None, _) => {
            let address = server.unwrap_or_else(|| "127.0.0.1:1978".to_string());
            // A check reads every row and index entry: a long time limit.
            let timeout = (timeout > 0).then(|| std::time::Duration::from_secs(timeout));
            let mut server = Tyrant::connect(&address, timeout)
                .with_context(|| format!("connecting to {address}"))?;
            let (ok, problems) = server.misc(b"check", &[])?;
            if !ok {
                return Err(Failure::Runtime(anyhow::anyhow!(
                    "the server cannot check its indexes (not kura, or not a table)"
                )));
            }
            problems
        }
        (_, Some(_), None) => return Err(Failure::Usage("--dir needs --table".to_string())),
    };
    report_check(&mut std::io::stdout().lock(), &problems)
}

/// A stopped server's data directory, which a check may open (and so
/// replay its log into, as a restart would); never a backup, whose files
/// its manifest's checksums cover.
fn check_data_dir(dir: &Path) -> Result<(), Failure> {
    let refuse = |why: &str| {
        Err(Failure::Runtime(anyhow::anyhow!(
            "{}: {why}",
            dir.display()
        )))
    };
    if dir.join(MANIFEST).exists() {
        return refuse("a backup, which a check would change; restore it (`kura restore --from DIR --to NEW`) and check NEW");
    }
    if !dir.join(DATA_FILE).is_file() {
        return refuse(&format!("not a kura data directory (no {DATA_FILE})"));
    }
    Ok(())
}

/// Prints what disagrees between a table's indexes and its rows; an error
/// when anything does.
fn report_check(out: &mut impl Write, problems: &[Vec<u8>]) -> Result<(), Failure> {
    for problem in problems {
        writeln!(out, "{}", String::from_utf8_lossy(problem)).map_err(anyhow::Error::from)?;
    }
    if !problems.is_empty() {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "{} disagreements between the indexes and the table",
            problems.len()
        )));
    }
    writeln!(out, "every index agrees with the table").map_err(anyhow::Error::from)?;
    Ok(())
}

pub fn run(args: QueryArgs) -> Result<(), Failure> {
    let timeout = (args.timeout > 0).then(|| std::time::Duration::from_secs(args.timeout));
    let mut server = Tyrant::connect(&args.server, timeout)
        .with_context(|| format!("connecting to {}", args.server))?;
    let mut out = std::io::stdout().lock();
    let json = args.json;
    match args.command {
        QueryCommand::Put {
            key,
            columns,
            keep,
            cat,
        } => {
            let mut call = vec![key.into_bytes()];
            for column in &columns {
                let (name, value) = column
                    .split_once('=')
                    .ok_or_else(|| Failure::Usage(format!("{column}: expected NAME=VALUE")))?;
                call.push(name.as_bytes().to_vec());
                call.push(value.as_bytes().to_vec());
            }
            let name: &[u8] = if keep {
                b"putkeep"
            } else if cat {
                b"putcat"
            } else {
                b"put"
            };
            server.expect(
                name,
                &call,
                "the record was not stored (putkeep: it exists)",
            )?;
        }
        QueryCommand::Get { keys } => {
            let mut records = Vec::new();
            for key in keys {
                let (ok, items) = server.misc(b"get", &[key.as_bytes().to_vec()])?;
                if ok {
                    let columns = items
                        .chunks_exact(2)
                        .map(|pair| (pair[0].clone(), pair[1].clone()))
                        .collect();
                    records.push((key.into_bytes(), columns));
                }
            }
            print_records(&mut out, &records, json)?;
        }
        QueryCommand::Out { keys } => {
            for key in keys {
                server.expect(
                    b"out",
                    &[key.clone().into_bytes()],
                    &format!("no record {key}"),
                )?;
            }
        }
        QueryCommand::Index { column, kind } => {
            let call = [column.into_bytes(), kind.into_bytes()];
            server.expect(b"setindex", &call, "the index was refused")?;
        }
        QueryCommand::Search {
            conditions,
            order,
            limit,
            skip,
            columns,
            count,
            delete,
            explain,
        } => {
            let mut call = Vec::new();
            for condition in &conditions {
                call.push(addcond(condition).map_err(Failure::Usage)?);
            }
            if let Some(order) = order {
                let (column, kind) = order.rsplit_once(':').ok_or_else(|| {
                    Failure::Usage(format!("--order {order}: expected COLUMN:TYPE"))
                })?;
                call.push(format!("setorder\0{}\0{kind}", unquote(column)).into_bytes());
            }
            call.push(format!("setlimit\0{}\0{skip}", limit.unwrap_or(-1)).into_bytes());
            let mut get = b"get".to_vec();
            if let Some(columns) = &columns {
                // The key first, then the columns asked.
                get.extend_from_slice(b"\0");
                for column in columns.split(',') {
                    get.push(0);
                    get.extend_from_slice(column.as_bytes());
                }
            }
            call.push(get);
            if delete {
                call.push(b"out".to_vec());
            }
            if count {
                call.push(b"count".to_vec());
            }
            if explain {
                call.push(b"hint".to_vec());
            }
            let (ok, mut items) = server.misc(b"search", &call)?;
            if !ok {
                return Err(Failure::Runtime(anyhow::anyhow!("the search failed")));
            }
            let hint = items
                .last()
                .filter(|item| item.starts_with(b"\0\0[[HINT]]\n"))
                .cloned();
            if hint.is_some() {
                items.pop();
            }
            if count {
                let found = items
                    .first()
                    .map(|n| String::from_utf8_lossy(n).into_owned());
                writeln!(out, "{}", found.unwrap_or_default()).map_err(anyhow::Error::from)?;
            } else {
                let records: Vec<Record> = items.iter().map(|item| split_record(item)).collect();
                print_records(&mut out, &records, json)?;
            }
            if let Some(hint) = hint {
                let text = String::from_utf8_lossy(&hint[b"\0\0[[HINT]]\n".len()..]).into_owned();
                if json {
                    let lines: Vec<&str> = text.lines().collect();
                    writeln!(out, "{}", serde_json::json!({ "explain": lines }))
                        .map_err(anyhow::Error::from)?;
                } else {
                    for line in text.lines() {
                        writeln!(out, "-- {line}").map_err(anyhow::Error::from)?;
                    }
                }
            }
        }
        QueryCommand::Check => {
            let (ok, problems) = server.misc(b"check", &[])?;
            if !ok {
                return Err(Failure::Runtime(anyhow::anyhow!(
                    "the server cannot check its indexes (not kura, or not a table)"
                )));
            }
            report_check(&mut out, &problems)?;
        }
    }
    Ok(())
}

/// `""` on the command line is the primary key's column.
fn unquote(column: &str) -> &str {
    if column == "\"\"" || column == "''" {
        ""
    } else {
        column
    }
}

/// "COLUMN OPERATOR EXPRESSION" as `misc search`'s `addcond`.
fn addcond(condition: &str) -> Result<Vec<u8>, String> {
    let mut parts = condition.trim_start().splitn(3, char::is_whitespace);
    let (Some(column), Some(operator)) = (parts.next(), parts.next()) else {
        return Err(format!(
            "{condition:?}: expected \"COLUMN OPERATOR EXPRESSION\""
        ));
    };
    if kura_table::Operator::parse(operator).is_none() {
        return Err(format!("{operator}: not one of Tokyo Cabinet's operators"));
    }
    let expression = parts.next().unwrap_or("");
    Ok(format!("addcond\0{}\0{operator}\0{expression}", unquote(column)).into_bytes())
}

type Record = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>);

/// A found record as `get` sends it: `\0key\0name\0value…` (the primary
/// key is the column named "").
fn split_record(item: &[u8]) -> Record {
    let fields: Vec<&[u8]> = item.split(|&b| b == 0).collect();
    let mut key = Vec::new();
    let mut columns = Vec::new();
    for pair in fields.chunks(2) {
        let (name, value) = (pair[0], pair.get(1).copied().unwrap_or_default());
        if name.is_empty() {
            key = value.to_vec();
        } else {
            columns.push((name.to_vec(), value.to_vec()));
        }
    }
    (key, columns)
}

fn print_records(out: &mut impl Write, records: &[Record], json: bool) -> Result<(), Failure> {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    if json {
        for (key, columns) in records {
            let columns: serde_json::Map<String, serde_json::Value> = columns
                .iter()
                .map(|(name, value)| (text(name), text(value).into()))
                .collect();
            writeln!(
                out,
                "{}",
                serde_json::json!({ "key": text(key), "columns": columns })
            )
            .map_err(anyhow::Error::from)?;
        }
        return Ok(());
    }
    // A table: the key, then every column in first-seen order.
    let mut names: Vec<Vec<u8>> = Vec::new();
    for (_, columns) in records {
        for (name, _) in columns {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    let mut rows = vec![std::iter::once("key".to_string())
        .chain(names.iter().map(|name| text(name)))
        .collect::<Vec<_>>()];
    for (key, columns) in records {
        let mut row = vec![text(key)];
        for name in &names {
            let value = columns
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| text(v));
            row.push(value.unwrap_or_default());
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..=names.len())
        .map(|i| {
            rows.iter()
                .map(|row| row[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end()).map_err(anyhow::Error::from)?;
    }
    let plural = if records.len() == 1 { "" } else { "s" };
    writeln!(out, "({} record{plural})", records.len()).map_err(anyhow::Error::from)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_read_column_operator_and_the_rest_as_the_expression() {
        assert_eq!(
            addcond("name STREQ Bob Smith").unwrap(),
            b"addcond\0name\0STREQ\0Bob Smith"
        );
        assert_eq!(addcond("\"\" STRBW k").unwrap(), b"addcond\0\0STRBW\0k");
        assert_eq!(addcond("tags STRAND").unwrap(), b"addcond\0tags\0STRAND\0");
        assert!(addcond("age").is_err());
        assert!(addcond("age BOGUS 1").is_err());
    }

    #[test]
    fn found_records_split_into_key_and_columns() {
        assert_eq!(
            split_record(b"\0k1\0name\0Bob\0age\x0030"),
            (
                b"k1".to_vec(),
                vec![
                    (b"name".to_vec(), b"Bob".to_vec()),
                    (b"age".to_vec(), b"30".to_vec())
                ]
            )
        );
    }
}
