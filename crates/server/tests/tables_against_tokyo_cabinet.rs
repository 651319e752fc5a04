//! kura's table queries against Tokyo Cabinet's own: Debian's `tctmgr`
//! (package tokyocabinet-bin, which scripts/test installs) loads a generated
//! table into a `.tct` file, a kura server (disk engine, `--tyrant-db
//! table:t`) loads the same rows over Tokyo Tyrant's protocol, and thousands
//! of random queries (every operator, negation, orders, limits and skips,
//! meta-search) sent as `misc search` must find the same records, in the
//! same order, as `tctmgr search`: the first half on kura's table without
//! indexes, the second with an index of each kind (which narrow what a
//! query reads, never what it finds).
//!
//! The records are imported in primary-key order into a fresh file, so
//! Tokyo Cabinet's natural order (the hash file's) is kura's (primary
//! keys). One difference is allowed, and checked as far as it goes: when a
//! limit is small beside the matches (`max + skip <= matches / 16`) Tokyo
//! Cabinet sorts with an unstable heap sort, so among records the order
//! ties it may pick others; then the order's values must agree, and every
//! record Tokyo Cabinet returns must match.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kura_proto::tyrant::{compose, Request};
use kura_server::{ServerConfig, TyrantDatabase};
use kura_table::{Condition, Operator, Order, OrderKind, Query, Record, SetOperation};
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

const RECORDS: usize = 400;
const QUERIES: usize = 3000;

const WORDS: &[&str] = &[
    "red", "green", "blue", "gre", "Bob", "bob", "Smith", "ruby", "Ruby", "rails", "perl", "Hello",
    "world", "WORLD", "Émile", "zoë", "Åsa", "café", "naïve", "x1", "abc", "on",
];
const COLUMNS: &[&str] = &["name", "age", "tags", "text", "score"];

fn tctmgr(args: &[&str]) -> String {
    let output = Command::new("tctmgr")
        .args(args)
        .output()
        .expect("tctmgr (Debian's tokyocabinet-bin) is installed: scripts/test installs it");
    assert!(
        output.status.success(),
        "tctmgr {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

fn word(rng: &mut SmallRng) -> &'static str {
    WORDS.choose(rng).unwrap()
}

fn number_text(rng: &mut SmallRng) -> String {
    match rng.random_range(0..12) {
        0 => "30.0".into(),
        1 => "+7".into(),
        2 => " 12".into(),
        3 => "abc".into(),
        4 => "1e3".into(),
        5 => format!("-{}", rng.random_range(0..20)),
        6 => format!("{}.{}", rng.random_range(0..50), rng.random_range(0..100)),
        7 => "inf".into(),
        _ => rng.random_range(0..60).to_string(),
    }
}

fn value(rng: &mut SmallRng, column: &str) -> String {
    let count = rng.random_range(1..5);
    match column {
        "age" | "score" => number_text(rng),
        "tags" => {
            let separators = [",", " ", ", ", ",,"];
            let mut text = String::new();
            for i in 0..count {
                if i > 0 {
                    text.push_str(separators.choose(rng).unwrap());
                }
                text.push_str(["red", "green", "blue", "gre", "x1"].choose(rng).unwrap());
            }
            text
        }
        "text" => (0..count + 2)
            .map(|_| word(rng))
            .collect::<Vec<_>>()
            .join(" "),
        _ => match rng.random_range(0..10) {
            0 => String::new(),
            1 => "Bob Smith".into(),
            _ => word(rng).into(),
        },
    }
}

fn generate(rng: &mut SmallRng) -> Vec<Record> {
    let mut records: Vec<Record> = (0..RECORDS)
        .map(|i| {
            let key = match i % 10 {
                0 => (i / 10).to_string(),
                _ => format!("k{i:04}"),
            };
            let mut record = Record::new(key.into_bytes());
            let mut columns = COLUMNS.to_vec();
            columns.sort_by_key(|_| rng.random::<u32>());
            for column in columns {
                if rng.random_bool(0.85) {
                    let text = value(rng, column);
                    record.put(column.as_bytes(), text.as_bytes());
                }
            }
            // tctmgr importtsv skips a line without columns.
            if record.columns.is_empty() {
                record.put(b"name", b"x1");
            }
            record
        })
        .collect();
    records.sort_by(|a, b| a.key.cmp(&b.key));
    records
}

fn import(records: &[Record], dir: &Path) -> String {
    let path = dir.join("t.tct");
    let path = path.to_str().unwrap().to_string();
    let mut tsv = Vec::new();
    for record in records {
        tsv.extend_from_slice(&record.key);
        for (name, value) in &record.columns {
            tsv.push(b'\t');
            tsv.extend_from_slice(name);
            tsv.push(b'\t');
            tsv.extend_from_slice(value);
        }
        tsv.push(b'\n');
    }
    let tsv_path = dir.join("t.tsv");
    std::fs::write(&tsv_path, tsv).unwrap();
    tctmgr(&["create", &path]);
    tctmgr(&["importtsv", &path, tsv_path.to_str().unwrap()]);
    path
}

fn expression(rng: &mut SmallRng, operator: Operator) -> String {
    use Operator::*;
    match operator {
        StrEq | StrInc | StrBw | StrEw => match rng.random_range(0..6) {
            0 => String::new(),
            1 => "Bob Smith".into(),
            2 => word(rng)[..2].to_string(),
            3 => "k00".into(),
            _ => word(rng).into(),
        },
        StrAnd | StrOr | StrOrEq => {
            let count = rng.random_range(0..4);
            let words: Vec<&str> = (0..count)
                .map(|_| {
                    *["red", "green", "blue", "gre", "x1", "Bob", "Smith", "bob"]
                        .choose(rng)
                        .unwrap()
                })
                .collect();
            words.join([",", " ", " , "].choose(rng).unwrap())
        }
        StrRx => [
            "^b",
            "*^b",
            "o$",
            "[0-9]+",
            "a.c",
            "(red|blue)",
            "^$",
            "é",
            "^k0+1",
            "(",
            "*WORLD",
            // glibc's syntax where the regex crate's differs.
            r"\d",
            r"[\d]",
            r"[a\]]",
            "a{,2}",
            "(?i)abc",
            "^*",
            r"\n",
            r"\x41",
            "[[.a.]]",
            r"\z",
            "[[:upper:]]",
            "e**",
            "(ab)+?c",
            "r)",
            r"\<r",
        ]
        .choose(rng)
        .unwrap()
        .to_string(),
        NumEq | NumGt | NumGe | NumLt | NumLe => number_text(rng),
        NumBt => format!(
            "{}{}{}",
            rng.random_range(-5..50),
            [",", " ", " , "].choose(rng).unwrap(),
            rng.random_range(-5..50)
        ),
        NumOrEq => (0..rng.random_range(1..4))
            .map(|_| number_text(rng).trim().to_string())
            .collect::<Vec<_>>()
            .join(","),
        FtsPh => match rng.random_range(0..5) {
            0 => "lo wo".into(),
            1 => "ZOË".into(),
            2 => format!("{} {}", word(rng), word(rng)),
            _ => word(rng).into(),
        },
        FtsAnd | FtsOr => (0..rng.random_range(0..3))
            .map(|_| word(rng))
            .collect::<Vec<_>>()
            .join([",", " "].choose(rng).unwrap()),
        FtsEx => {
            let mut parts = vec![word(rng).to_string()];
            for _ in 0..rng.random_range(0..3) {
                parts.push(["&&", "||", "!!", ""].choose(rng).unwrap().to_string());
                parts.push(word(rng).to_string());
            }
            if rng.random_bool(0.1) {
                parts.insert(0, "!!".into());
            }
            parts.join(" ")
        }
        Unknown => word(rng).into(),
    }
}

/// One random query as tctmgr's arguments, as `misc search`'s arguments,
/// and as the queries they make (one per condition under meta-search, as
/// tctmgr makes them).
struct Case {
    arguments: Vec<String>,
    search: Vec<Vec<u8>>,
    queries: Vec<Query>,
    operation: Option<SetOperation>,
}

fn random_case(rng: &mut SmallRng, path: &str) -> Case {
    let mut arguments = vec!["search".to_string()];
    let order = rng.random_bool(0.5).then(|| {
        let column = *["", "name", "age", "tags", "text", "score", "missing"]
            .choose(rng)
            .unwrap();
        let kind = *[
            OrderKind::StrAsc,
            OrderKind::StrDesc,
            OrderKind::NumAsc,
            OrderKind::NumDesc,
        ]
        .choose(rng)
        .unwrap();
        arguments.extend([
            "-ord".to_string(),
            column.to_string(),
            kind.name().to_string(),
        ]);
        Order {
            column: column.as_bytes().to_vec(),
            kind,
        }
    });
    let (mut max, mut skip) = (-1, 0);
    if rng.random_bool(0.5) {
        max = rng.random_range(0..25);
        arguments.extend(["-m".to_string(), max.to_string()]);
    }
    if rng.random_bool(0.3) {
        skip = rng.random_range(0..6);
        arguments.extend(["-sk".to_string(), skip.to_string()]);
    }
    let mut set_operation = "";
    let operation = rng.random_bool(0.2).then(|| {
        let (name, operation) = *[
            ("UNION", SetOperation::Union),
            ("ISECT", SetOperation::Intersection),
            ("DIFF", SetOperation::Difference),
        ]
        .choose(rng)
        .unwrap();
        arguments.extend(["-ms".to_string(), name.to_string()]);
        set_operation = name;
        operation
    });
    arguments.push(path.to_string());
    let count = match operation {
        Some(_) => rng.random_range(2..4),
        None => rng.random_range(1..4),
    };
    let mut conditions = Vec::new();
    let mut addconds = Vec::new();
    for _ in 0..count {
        let column = *["", "name", "age", "tags", "text", "score", "missing"]
            .choose(rng)
            .unwrap();
        let operator = *Operator::ALL.choose(rng).unwrap();
        let mut name = operator.name().to_string();
        if rng.random_bool(0.05) {
            name = "BOGUS".into();
        } else if rng.random_bool(0.05) {
            name = (operator as i64).to_string();
        } else if rng.random_bool(0.03) {
            // A code Tokyo Cabinet does not know, negated or not.
            name = (19 + rng.random_range(0..2) * 16777216).to_string();
        } else if rng.random_bool(0.2) {
            name = format!("{}{name}", ["~", "!", "!+", "+"].choose(rng).unwrap());
        }
        let text = expression(rng, operator);
        arguments.extend([column.to_string(), name.clone(), text.clone()]);
        addconds.push(format!("addcond\0{column}\0{name}\0{text}").into_bytes());
        // What the server does with a condition: an unknown operator drops it.
        conditions.push(
            Operator::parse(&name)
                .map(|(op, flags)| Condition::new(column.as_bytes(), op, flags, text.as_bytes())),
        );
    }
    let query = |conditions: Vec<Condition>| {
        let mut query = Query {
            conditions,
            order: order.clone(),
            ..Query::default()
        };
        query.set_limit(max, skip);
        query
    };
    let mut shape = Vec::new();
    if let Some(order) = &order {
        let column = String::from_utf8_lossy(&order.column).into_owned();
        shape.push(format!("setorder\0{column}\0{}", order.kind.name()).into_bytes());
    }
    shape.push(format!("setlimit\0{max}\0{skip}").into_bytes());
    let (queries, search) = match operation {
        // tctmgr -ms: every condition is a query of its own (one with an
        // unknown operator is none); `misc` separates them with `next`.
        Some(_) => {
            let mut search = Vec::new();
            let mut queries = Vec::new();
            for (condition, addcond) in conditions.into_iter().zip(addconds) {
                let Some(condition) = condition else { continue };
                if !queries.is_empty() {
                    search.push(b"next".to_vec());
                }
                search.push(addcond);
                search.extend(shape.iter().cloned());
                queries.push(query(vec![condition]));
            }
            search.push(format!("mstype\0{set_operation}").into_bytes());
            (queries, search)
        }
        None => {
            let mut search = addconds;
            search.extend(shape);
            (
                vec![query(conditions.into_iter().flatten().collect())],
                search,
            )
        }
    };
    Case {
        arguments,
        search,
        queries,
        operation,
    }
}

/// A `misc` call with owned arguments.
fn misc(stream: &mut TcpStream, name: &'static [u8], args: &[Vec<u8>]) -> (u8, Vec<Vec<u8>>) {
    let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    support::tyrant::misc(stream, name, &args)
}

/// `misc search`: the primary keys found.
fn search(stream: &mut TcpStream, args: &[Vec<u8>]) -> Vec<String> {
    let (status, keys) = misc(stream, b"search", args);
    assert_eq!(status, 0, "search failed");
    keys.into_iter()
        .map(|key| String::from_utf8(key).unwrap())
        .collect()
}

/// A kura server serving table `t`, loaded with `records` over Tokyo
/// Tyrant's protocol (`misc putlist`).
fn kura_with(records: &[Record]) -> (support::TestServer, TcpStream) {
    let server = support::TestServer::disk_with(ServerConfig {
        tyrant_port: Some(0),
        tyrant_db: TyrantDatabase::Table("t".into()),
        ..ServerConfig::default()
    });
    let mut stream = TcpStream::connect(server.handle().tyrant_addr().unwrap()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut args: Vec<Vec<u8>> = Vec::new();
    for record in records {
        args.push(record.key.clone());
        args.push(record.zero_separated());
    }
    let mut bytes = Vec::new();
    compose(
        &mut bytes,
        &Request::Misc {
            name: b"putlist",
            opts: 0,
            args: args.iter().map(Vec::as_slice).collect(),
        },
    );
    stream.write_all(&bytes).unwrap();
    let mut reply = [0; 5];
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(reply, [0; 5], "putlist");
    (server, stream)
}

#[test]
fn random_queries_find_what_tokyo_cabinet_finds_in_its_order() {
    // KURA_TABLE_SEED explores other tables and queries.
    let seed = std::env::var("KURA_TABLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6b757261);
    let mut rng = SmallRng::seed_from_u64(seed);
    let records = generate(&mut rng);
    let dir = tempfile::tempdir().unwrap();
    let path = import(&records, dir.path());
    if let Ok(keep) = std::env::var("KURA_KEEP_TCT") {
        std::fs::copy(&path, keep).unwrap();
    }
    let (_server, mut kura) = kura_with(&records);
    let by_key = |key: &str| records.iter().find(|r| r.key == key.as_bytes()).unwrap();
    let (mut exact, mut tie_tolerant, mut nonempty) = (0, 0, 0);
    let mut operators_that_found = std::collections::HashSet::new();
    let indexes: Vec<(Vec<u8>, kura_table::IndexKind)> = [
        ("name", kura_table::IndexKind::Lexical),
        ("age", kura_table::IndexKind::Decimal),
        ("tags", kura_table::IndexKind::Token),
        ("text", kura_table::IndexKind::QGram),
        ("score", kura_table::IndexKind::Decimal),
    ]
    .iter()
    .map(|(column, kind)| (column.as_bytes().to_vec(), *kind))
    .collect();
    let (mut indexed, mut intersected) = (0, 0);
    for at in 0..QUERIES {
        if at == QUERIES / 2 {
            let args: Vec<Vec<u8>> = [
                "name", "LEXICAL", "age", "DECIMAL", "tags", "TOKEN", "text", "QGRAM", "score",
                "DECIMAL",
            ]
            .iter()
            .map(|word| word.as_bytes().to_vec())
            .collect();
            assert_eq!(misc(&mut kura, b"setindex", &args), (0, vec![]));
        }
        let case = random_case(&mut rng, &path);
        if at >= QUERIES / 2 && case.queries.len() == 1 {
            let lookups = kura_table::plan(&case.queries[0].conditions, &indexes).len();
            indexed += usize::from(lookups > 0);
            intersected += usize::from(lookups > 1);
        }
        let arguments: Vec<&str> = case.arguments.iter().map(String::as_str).collect();
        let theirs: Vec<String> = tctmgr(&arguments).lines().map(str::to_string).collect();
        if case.queries.is_empty() {
            // Meta-search of unknown operators only: tctmgr finds nothing,
            // and `misc` has no query to run.
            assert!(theirs.is_empty());
            continue;
        }
        let ours = search(&mut kura, &case.search);
        nonempty += usize::from(!theirs.is_empty());
        if !theirs.is_empty() && theirs.len() < records.len() {
            for query in &case.queries {
                operators_that_found.extend(query.conditions.iter().map(|c| c.operator));
            }
        }
        let first = &case.queries[0];
        let most_matches = case
            .queries
            .iter()
            .map(|q| records.iter().filter(|r| q.matches(r)).count())
            .max()
            .unwrap_or(0);
        let heap_sorted = first.order.is_some()
            && first
                .limit
                .is_some_and(|max| max + first.skip <= most_matches / 16);
        if !heap_sorted {
            assert_eq!(ours, theirs, "tctmgr {}", case.arguments.join(" | "));
            exact += 1;
            continue;
        }
        // Ties may be broken otherwise: compare what the order compares.
        let order = first.order.as_ref().unwrap();
        let numeric = matches!(order.kind, OrderKind::NumAsc | OrderKind::NumDesc);
        let values = |keys: &[String]| -> Vec<Option<String>> {
            keys.iter()
                .map(|k| {
                    let value = by_key(k).get(&order.column)?;
                    Some(match numeric && !order.column.is_empty() {
                        true => kura_table::number::parse(value).to_string(),
                        false => String::from_utf8_lossy(value).into_owned(),
                    })
                })
                .collect()
        };
        assert_eq!(
            values(&ours),
            values(&theirs),
            "tctmgr {}",
            case.arguments.join(" | ")
        );
        if case.operation.is_none() {
            for key in &theirs {
                assert!(
                    first.matches(by_key(key)),
                    "{key}: tctmgr {}",
                    case.arguments.join(" | ")
                );
            }
        }
        tie_tolerant += 1;
    }
    eprintln!(
        "{exact} queries compared exactly, {tie_tolerant} by order values; {nonempty} found records; {indexed} used an index, {intersected} several"
    );
    assert!(
        intersected > QUERIES / 200,
        "the indexed half must intersect several indexes"
    );
    assert!(
        indexed > QUERIES / 20,
        "the indexed half must use its indexes"
    );
    assert!(
        nonempty > QUERIES / 4,
        "the generated queries must find records"
    );
    let unseen: Vec<_> = Operator::ALL
        .iter()
        .filter(|op| !operators_that_found.contains(op))
        .collect();
    assert!(unseen.is_empty(), "no query with {unseen:?} found a record");
}
