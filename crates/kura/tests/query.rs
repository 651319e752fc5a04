//! `kura query` against a real server (`kura serve --engine disk
//! --tyrant-port P --tyrant-db table:users`): put, index, search with
//! conditions, order, limit, columns, count, explain and JSON, get, out,
//! and the index check.

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use support::{free_port, wait_until_ready, Running};

const KURA: &str = env!("CARGO_BIN_EXE_kura");

/// Runs `kura query --server … ARGS`; returns its exit success and stdout.
fn query(tyrant: u16, args: &[&str]) -> (bool, String) {
    let output = Command::new(KURA)
        .args(["query", "--server", &format!("127.0.0.1:{tyrant}")])
        .args(args)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
    )
}

#[test]
fn a_table_is_filled_indexed_and_queried_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (port, tyrant) = (free_port(), free_port());
    let child = Command::new(KURA)
        .args([
            "serve",
            "--engine",
            "disk",
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .args([
            "--tyrant-port",
            &tyrant.to_string(),
            "--tyrant-db",
            "table:users",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Running(child);
    wait_until_ready(&mut server.0, SocketAddr::from(([127, 0, 0, 1], port)));
    for row in [
        ["k1", "name=Bob Smith", "age=30"],
        ["k2", "name=ann", "age=25"],
        ["k3", "name=Bob", "age=41"],
    ] {
        assert!(query(tyrant, &["put", row[0], row[1], row[2]]).0);
    }
    assert!(!query(tyrant, &["put", "--keep", "k1", "name=Eve"]).0);
    assert!(query(tyrant, &["index", "age", "decimal"]).0);
    let (ok, table) = query(
        tyrant,
        &[
            "search",
            "age NUMGE 26",
            "--order",
            "age:NUMDESC",
            "--explain",
        ],
    );
    assert!(ok);
    assert_eq!(
        table,
        "key  name       age\n\
         k3   Bob        41\n\
         k1   Bob Smith  30\n\
         (2 records)\n\
         -- using an index: \"age\" asc (NUMGT/NUMGE)\n\
         -- result set size: 2\n\
         -- sorting the result set: \"age\"\n"
    );
    let (_, json) = query(
        tyrant,
        &[
            "--json",
            "search",
            "name STRBW Bob",
            "--columns",
            "age",
            "--limit",
            "1",
        ],
    );
    assert_eq!(json, "{\"columns\":{\"age\":\"30\"},\"key\":\"k1\"}\n");
    let (_, count) = query(tyrant, &["search", "\"\" STRBW k", "--count"]);
    assert_eq!(count, "3\n");
    let (ok, check) = query(tyrant, &["check"]);
    assert!(ok, "{check}");
    assert_eq!(check, "every index agrees with the table\n");
    assert!(query(tyrant, &["search", "name STREQ ann", "--delete"]).0);
    assert!(query(tyrant, &["out", "k3"]).0);
    assert!(!query(tyrant, &["out", "k3"]).0);
    let (_, rest) = query(tyrant, &["get", "k1", "k2", "k3"]);
    assert_eq!(
        rest,
        "key  name       age\nk1   Bob Smith  30\n(1 record)\n"
    );
    // A condition that is not one is refused before anything is sent.
    let output = Command::new(KURA)
        .args([
            "query",
            "--server",
            &format!("127.0.0.1:{tyrant}"),
            "search",
            "age BOGUS 1",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
}
