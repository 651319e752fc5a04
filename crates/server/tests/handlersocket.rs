//! HandlerSocket's protocol over real sockets (`--hs-read-port`,
//! `--hs-write-port`) on the disk engine's tables: every request form and
//! error reply, escaping both ways, pipelining, the read-only port refusing
//! writes, and authentication.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use kura_server::ServerConfig;
use kura_store::{IndexCommand, IndexKind};
use support::TestServer;

fn server(secrets: Option<(&str, &str)>) -> TestServer {
    TestServer::disk_with(ServerConfig {
        hs_read_port: Some(0),
        hs_write_port: Some(0),
        hs_read_secret: secrets.map(|(read, _)| read.to_string()),
        hs_write_secret: secrets.map(|(_, write)| write.to_string()),
        ..ServerConfig::default()
    })
}

struct Hs {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Hs {
    fn connect(server: &TestServer, write: bool) -> Hs {
        let stream =
            TcpStream::connect(server.handle().handlersocket_addr(write).unwrap()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        Hs {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    fn send(&mut self, line: &[u8]) {
        self.writer.write_all(line).unwrap();
    }

    fn reply(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).unwrap();
        line
    }

    /// One request line (tokens joined by TAB) and its reply line.
    fn call(&mut self, tokens: &[&[u8]]) -> Vec<u8> {
        let mut line = tokens.join(&b'\t');
        line.push(b'\n');
        self.send(&line);
        self.reply()
    }
}

/// Builds an index of `kind` on `column` of `table`, as `setindex` does.
fn build_index(server: &TestServer, table: &[u8], column: &[u8], kind: IndexKind) {
    let build = IndexCommand::Build { kind, keep: false };
    let tables = server.store().tables().unwrap();
    tables.set_index(table, column, build).unwrap();
}

fn fill(hs: &mut Hs) {
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"users", b"PRIMARY", b"_key,name,age"]),
        b"0\t1\n"
    );
    for (key, name, age) in [
        ("k1", "Bob", "30"),
        ("k2", "Ann", "25"),
        ("k3", "Cy", "41"),
        ("k4", "Di", "25"),
    ] {
        let reply = hs.call(&[
            b"0",
            b"+",
            b"3",
            key.as_bytes(),
            name.as_bytes(),
            age.as_bytes(),
        ]);
        assert_eq!(reply, b"0\t1\t0\n", "{key}");
    }
}

#[test]
fn finds_walk_the_primary_key_with_every_operator_limit_offset_and_in() {
    let server = server(None);
    let mut hs = Hs::connect(&server, true);
    fill(&mut hs);
    assert_eq!(hs.call(&[b"0", b"=", b"1", b"k2"]), b"0\t3\tk2\tAnn\t25\n");
    assert_eq!(hs.call(&[b"0", b"=", b"1", b"zz"]), b"0\t3\n");
    assert_eq!(
        hs.call(&[b"0", b">=", b"1", b"k2", b"10"]),
        b"0\t3\tk2\tAnn\t25\tk3\tCy\t41\tk4\tDi\t25\n"
    );
    assert_eq!(
        hs.call(&[b"0", b">", b"1", b"k2", b"2"]),
        b"0\t3\tk3\tCy\t41\tk4\tDi\t25\n"
    );
    // `<` and `<=` walk down; the offset skips.
    assert_eq!(
        hs.call(&[b"0", b"<", b"1", b"k3", b"5"]),
        b"0\t3\tk2\tAnn\t25\tk1\tBob\t30\n"
    );
    assert_eq!(
        hs.call(&[b"0", b"<=", b"1", b"k3", b"2", b"1"]),
        b"0\t3\tk2\tAnn\t25\tk1\tBob\t30\n"
    );
    // IN: the first row each value finds, in the list's order.
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"", b"5", b"0", b"@", b"0", b"3", b"k3", b"nope", b"k1"]),
        b"0\t3\tk3\tCy\t41\tk1\tBob\t30\n"
    );
    // Filters: F skips, W stops.
    assert_eq!(
        hs.call(&[b"P", b"1", b"db", b"users", b"", b"_key", b"age"]),
        b"0\t1\n"
    );
    assert_eq!(
        hs.call(&[b"1", b">=", b"1", b"k1", b"10", b"0", b"F", b"=", b"0", b"25"]),
        b"0\t1\tk2\tk4\n"
    );
    assert_eq!(
        hs.call(&[b"1", b">=", b"1", b"k1", b"10", b"0", b"W", b">", b"0", b"26"]),
        b"0\t1\tk1\n"
    );
}

#[test]
fn modifies_update_delete_count_and_return_the_rows_as_they_were() {
    let server = server(None);
    let mut hs = Hs::connect(&server, true);
    fill(&mut hs);
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"k1", b"1", b"0", b"U", b"k1", b"Bobby", b"31"]),
        b"0\t1\t1\n"
    );
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"k1"]),
        b"0\t3\tk1\tBobby\t31\n"
    );
    // `+` and `-` change every opened column: open only the counter.
    assert_eq!(
        hs.call(&[b"P", b"5", b"db", b"users", b"PRIMARY", b"age"]),
        b"0\t1\n"
    );
    assert_eq!(
        hs.call(&[b"5", b"=", b"1", b"k1", b"1", b"0", b"+?", b"4"]),
        b"0\t1\t31\n"
    );
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"k1"]),
        b"0\t3\tk1\tBobby\t35\n"
    );
    // `-` that would cross zero leaves the row.
    assert_eq!(
        hs.call(&[b"5", b"=", b"1", b"k1", b"1", b"0", b"-", b"99"]),
        b"0\t1\t0\n"
    );
    assert_eq!(
        hs.call(&[b"5", b"=", b"1", b"k1", b"1", b"0", b"-", b"5"]),
        b"0\t1\t1\n"
    );
    assert_eq!(
        hs.call(&[b"5", b"=", b"1", b"k1", b"1", b"0", b"+", b"5"]),
        b"0\t1\t1\n"
    );
    assert_eq!(
        hs.call(&[b"0", b">=", b"1", b"k3", b"5", b"0", b"D"]),
        b"0\t1\t2\n"
    );
    assert_eq!(
        hs.call(&[b"0", b">=", b"1", b"k", b"9"]),
        b"0\t3\tk1\tBobby\t35\tk2\tAnn\t25\n"
    );
    // NULL in a modify removes the column; it reads back as NULL.
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"k2", b"1", b"0", b"U", b"k2", b"\0", b"26"]),
        b"0\t1\t1\n"
    );
    assert_eq!(hs.call(&[b"0", b"=", b"1", b"k2"]), b"0\t3\tk2\t\0\t26\n");
    // Inserts: a new id when no key is given; a duplicate is MySQL's 121.
    assert_eq!(
        hs.call(&[b"P", b"2", b"db", b"users", b"PRIMARY", b"name"]),
        b"0\t1\n"
    );
    assert_eq!(hs.call(&[b"2", b"+", b"1", b"Eve"]), b"0\t1\t1\n");
    assert_eq!(hs.call(&[b"0", b"=", b"1", b"1"]), b"0\t3\t1\tEve\t\0\n");
    assert_eq!(hs.call(&[b"0", b"+", b"1", b"k2"]), b"1\t1\t121\n");
}

/// The rows a find holds (for its reply, or to modify) are bounded by
/// `--max-reply`: past it the find is refused, and modifies nothing.
#[test]
fn a_find_holding_more_than_the_reply_limit_is_refused_whole() {
    let server = TestServer::disk_with(ServerConfig {
        hs_write_port: Some(0),
        max_reply_bytes: 1000,
        max_item_size: 4096,
        ..ServerConfig::default()
    });
    let mut hs = Hs::connect(&server, true);
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"t", b"PRIMARY", b"_key,v"]),
        b"0\t1\n"
    );
    let value = vec![b'v'; 300];
    for key in [b"k1", b"k2", b"k3", b"k4", b"k5"] {
        assert_eq!(hs.call(&[b"0", b"+", b"2", key, &value]), b"0\t1\t0\n");
    }
    let three = hs.call(&[b"0", b">=", b"1", b"k", b"3", b"0"]);
    assert!(
        three.starts_with(b"0\t2\tk1\t"),
        "{}",
        String::from_utf8_lossy(&three)
    );
    for request in [
        &[&b"0"[..], b">=", b"1", b"k", b"10", b"0"][..],
        &[&b"0"[..], b">=", b"1", b"k", b"10", b"0", b"D"][..],
    ] {
        assert_eq!(hs.call(request), b"1\t1\tmax_reply\n");
    }
    let rows = hs.call(&[b"0", b">=", b"1", b"k5", b"1", b"0"]);
    assert!(rows.starts_with(b"0\t2\tk5\t"), "nothing was deleted");
    // The first row always goes, however large.
    let large = vec![b'w'; 2000];
    assert_eq!(hs.call(&[b"0", b"+", b"2", b"k6", &large]), b"0\t1\t0\n");
    let one = hs.call(&[b"0", b"=", b"1", b"k6", b"5", b"0"]);
    assert!(
        one.starts_with(b"0\t2\tk6\t"),
        "{}",
        String::from_utf8_lossy(&one)
    );
    // What a reply writes counts, not only what the rows hold: a column
    // opened many times writes its value as many times.
    let many = vec![&b"v"[..]; 20].join(&b","[..]);
    assert_eq!(
        hs.call(&[b"P", b"1", b"db", b"t", b"PRIMARY", &many]),
        b"0\t1\n"
    );
    assert_eq!(
        hs.call(&[b"1", b">=", b"1", b"k", b"2", b"0"]),
        b"1\t1\tmax_reply\n"
    );
    // The first row's exemption covers a row written once, every byte
    // escaped (2 × -I), not one written 20 times over.
    assert_eq!(
        hs.call(&[b"1", b"=", b"1", b"k6", b"1", b"0"]),
        b"1\t1\tmax_reply\n"
    );
    // A delete that answers a count writes no rows: only what it holds counts.
    assert_eq!(
        hs.call(&[b"1", b">=", b"1", b"k", b"2", b"0", b"D"]),
        b"0\t1\t2\n"
    );
    // And a connection's indexes open at most 4,096 columns together, of
    // 64 KiB of names: one index alone, or the sum of them.
    let too_many = vec![&b"v"[..]; 4097].join(&b","[..]);
    let too_long = vec![b'c'; 65 << 10];
    for columns in [&too_many, &too_long] {
        assert_eq!(
            hs.call(&[b"P", b"2", b"db", b"t", b"PRIMARY", columns]),
            b"2\t1\tfld\n"
        );
    }
    let half = vec![&b"v"[..]; 2030].join(&b","[..]);
    for id in [b"2", b"3"] {
        assert_eq!(
            hs.call(&[b"P", id, b"db", b"t", b"PRIMARY", &half]),
            b"0\t1\n"
        );
    }
    assert_eq!(
        hs.call(&[b"P", b"4", b"db", b"t", b"PRIMARY", &half]),
        b"2\t1\tfld\n"
    );
    // An index opened again under its id gives its columns back.
    assert_eq!(
        hs.call(&[b"P", b"3", b"db", b"t", b"PRIMARY", &half]),
        b"0\t1\n"
    );
    let mut other = Hs::connect(&server, true);
    assert_eq!(
        other.call(&[b"P", b"4", b"db", b"t", b"PRIMARY", &half]),
        b"0\t1\n"
    );
}

/// Filters on a row of many columns read it through a map: the same
/// answers as a search per filter.
#[test]
fn many_filters_on_a_wide_row_pass_and_fail_as_each_alone() {
    let server = server(None);
    let mut hs = Hs::connect(&server, true);
    let names: Vec<String> = (0..30).map(|n| format!("c{n}")).collect();
    let listed = format!("_key,{}", names.join(","));
    assert_eq!(
        hs.call(&[
            b"P",
            b"0",
            b"db",
            b"wide",
            b"PRIMARY",
            listed.as_bytes(),
            names.join(",").as_bytes()
        ]),
        b"0\t1\n"
    );
    let values: Vec<String> = (0..30).map(|n| (n * 10).to_string()).collect();
    let mut insert: Vec<&[u8]> = vec![b"0", b"+", b"31", b"row"];
    insert.extend(values.iter().map(|v| v.as_bytes()));
    assert_eq!(hs.call(&insert), b"0\t1\t0\n");
    let find = |hs: &mut Hs, filters: &[(&str, &str, &str)]| {
        let mut request: Vec<&[u8]> = vec![b"0", b"=", b"1", b"row", b"1", b"0"];
        for (op, column, value) in filters {
            request.extend([
                &b"F"[..],
                op.as_bytes(),
                column.as_bytes(),
                value.as_bytes(),
            ]);
        }
        hs.call(&request)
    };
    let passing = [
        ("=", "0", "0"),
        ("=", "29", "290"),
        (">", "15", "100"),
        ("<=", "3", "30"),
    ];
    let reply = find(&mut hs, &passing);
    assert!(
        reply.starts_with(b"0\t31\trow\t0\t10\t"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    for failing in [("=", "7", "71"), ("<", "20", "200"), ("!=", "1", "10")] {
        let mut filters = passing.to_vec();
        filters.push(failing);
        assert_eq!(find(&mut hs, &filters), b"0\t31\n", "{failing:?}");
    }
}

#[test]
fn secondary_indexes_order_finds_by_their_values() {
    let server = server(None);
    let mut hs = Hs::connect(&server, true);
    fill(&mut hs);
    build_index(&server, b"users", b"age", IndexKind::Decimal);
    assert_eq!(
        hs.call(&[b"P", b"3", b"db", b"users", b"age", b"_key,age"]),
        b"0\t1\n"
    );
    assert_eq!(
        hs.call(&[b"3", b"=", b"1", b"25", b"10"]),
        b"0\t2\tk2\t25\tk4\t25\n"
    );
    assert_eq!(
        hs.call(&[b"3", b">", b"1", b"25", b"10"]),
        b"0\t2\tk1\t30\tk3\t41\n"
    );
    assert_eq!(hs.call(&[b"3", b"<", b"1", b"41", b"1"]), b"0\t2\tk1\t30\n");
    // Down from a value several rows share: all of them, last key first.
    assert_eq!(
        hs.call(&[b"3", b"<=", b"1", b"25", b"10"]),
        b"0\t2\tk4\t25\tk2\t25\n"
    );
    assert_eq!(
        hs.call(&[b"3", b"<=", b"1", b"29", b"10"]),
        b"0\t2\tk4\t25\tk2\t25\n"
    );
    // `=` compares the numbers: 25.0 is 25.
    assert_eq!(
        hs.call(&[b"3", b"=", b"1", b"25.0", b"10"]),
        b"0\t2\tk2\t25\tk4\t25\n"
    );
    // Any id, not a vector's worth of them.
    assert_eq!(
        hs.call(&[b"P", b"4000000000", b"db", b"users", b"age", b"_key"]),
        b"0\t1\n"
    );
    assert_eq!(hs.call(&[b"4000000000", b"=", b"1", b"41"]), b"0\t1\tk3\n");
    // By number: 0 is PRIMARY, 1 the first index.
    assert_eq!(
        hs.call(&[b"P", b"4", b"db", b"users", b"1", b"_key"]),
        b"0\t1\n"
    );
    assert_eq!(hs.call(&[b"4", b">=", b"1", b"0", b"1"]), b"0\t1\tk2\n");
}

#[test]
fn every_error_reply_and_escaping_both_ways() {
    let server = server(None);
    let mut hs = Hs::connect(&server, true);
    assert_eq!(hs.call(&[b""]), b"2\t1\tcmd\n");
    assert_eq!(hs.call(&[b"X", b"1"]), b"2\t1\tcmd\n");
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"users", b"nosuch", b"_key"]),
        b"2\t1\tidxnum\n"
    );
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"users", b"PRIMARY", b"a,,b"]),
        b"2\t1\tfld\n"
    );
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"", b"PRIMARY", b"a"]),
        b"1\t1\topen_table\n"
    );
    // kura's own tables (named from a NUL byte on) are no client's.
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"\0last-uid", b"PRIMARY", b"_key"]),
        b"1\t1\topen_table\n"
    );
    assert_eq!(hs.call(&[b"7", b"=", b"1", b"1"]), b"2\t1\tstmtnum\n");
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"users", b"PRIMARY", b"_key,v", b"v"]),
        b"0\t1\n"
    );
    assert_eq!(hs.call(&[b"0", b"~", b"1", b"1"]), b"2\t1\top\n");
    assert_eq!(hs.call(&[b"0", b"=", b"0"]), b"2\t1\tklen\n");
    assert_eq!(hs.call(&[b"0", b"=", b"2", b"a", b"b"]), b"2\t1\tkpnum\n");
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"a", b"1", b"0", b"@", b"0", b"0"]),
        b"2\t1\tinvalueslen\n"
    );
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"a", b"1", b"0", b"Fx", b"=", b"0", b"1"]),
        b"2\t1\tfiltertype\n"
    );
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"a", b"1", b"0", b"F", b"=", b"3", b"1"]),
        b"2\t1\tfilterfld\n"
    );
    assert_eq!(
        hs.call(&[b"0", b"=", b"1", b"a", b"1", b"0", b"X"]),
        b"2\t1\tmodop\n"
    );
    assert_eq!(hs.call(&[b"A", b"2", b"x"]), b"3\t1\tauthtype\n");
    // Every byte below 0x10 goes out escaped and comes back the same.
    let value: Vec<u8> = (0u8..0x20).collect();
    let mut escaped = Vec::new();
    kura_proto::handlersocket::escape(&mut escaped, &value);
    assert_eq!(hs.call(&[b"0", b"+", b"2", b"k", &escaped]), b"0\t1\t0\n");
    let mut expected = b"0\t2\tk\t".to_vec();
    expected.extend_from_slice(&escaped);
    expected.push(b'\n');
    assert_eq!(hs.call(&[b"0", b"=", b"1", b"k"]), expected);
    let stored = server
        .store()
        .tables()
        .unwrap()
        .get_row(b"users", b"k", &kura_store::AckFence::default())
        .unwrap()
        .unwrap();
    assert_eq!(stored.get(b"v"), Some(&value[..]));
}

#[test]
fn requests_pipeline_and_the_read_port_refuses_writes() {
    let server = server(None);
    let mut writer = Hs::connect(&server, true);
    fill(&mut writer);
    let mut reader = Hs::connect(&server, false);
    // Three requests in one write, three replies in order.
    reader.send(b"P\t0\tdb\tusers\tPRIMARY\t_key\n0\t=\t1\tk1\n0\t=\t1\tk3\n");
    assert_eq!(reader.reply(), b"0\t1\n");
    assert_eq!(reader.reply(), b"0\t1\tk1\n");
    assert_eq!(reader.reply(), b"0\t1\tk3\n");
    assert_eq!(reader.call(&[b"0", b"+", b"1", b"k9"]), b"2\t1\treadonly\n");
    assert_eq!(
        reader.call(&[b"0", b"=", b"1", b"k1", b"1", b"0", b"D"]),
        b"2\t1\treadonly\n"
    );
    assert_eq!(
        reader.call(&[b"0", b"=", b"1", b"k1", b"1", b"0", b"U?", b"x"]),
        b"2\t1\treadonly\n"
    );
    assert_eq!(reader.call(&[b"0", b"=", b"1", b"k1"]), b"0\t1\tk1\n");
}

#[test]
fn authentication_guards_each_port_with_its_own_secret() {
    let server = server(Some(("r-secret", "w-secret")));
    let mut reader = Hs::connect(&server, false);
    assert_eq!(
        reader.call(&[b"P", b"0", b"db", b"t", b"PRIMARY", b"_key"]),
        b"3\t1\tunauth\n"
    );
    assert_eq!(reader.call(&[b"A", b"1", b"w-secret"]), b"3\t1\tunauth\n");
    assert_eq!(reader.call(&[b"A", b"1", b"r-secret"]), b"0\t1\n");
    assert_eq!(
        reader.call(&[b"P", b"0", b"db", b"t", b"PRIMARY", b"_key"]),
        b"0\t1\n"
    );
    // A failed attempt takes the authentication back.
    assert_eq!(reader.call(&[b"A", b"1", b"wrong"]), b"3\t1\tunauth\n");
    assert_eq!(reader.call(&[b"0", b"=", b"1", b"k"]), b"3\t1\tunauth\n");
    let mut writer = Hs::connect(&server, true);
    assert_eq!(writer.call(&[b"A", b"1", b"r-secret"]), b"3\t1\tunauth\n");
    assert_eq!(writer.call(&[b"A", b"1", b"w-secret"]), b"0\t1\n");
    assert_eq!(
        writer.call(&[b"P", b"0", b"db", b"t", b"PRIMARY", b"_key"]),
        b"0\t1\n"
    );
}

#[test]
fn ranges_over_values_cut_in_a_lexical_index_compare_the_values_whole() {
    let server = server(None);
    let mut hs = Hs::connect(&server, true);
    assert_eq!(
        hs.call(&[b"P", b"0", b"db", b"long", b"PRIMARY", b"_key,text"]),
        b"0\t1\n"
    );
    // Three values the index cuts to the same 480 bytes.
    let text = |last: u8| [vec![b'x'; 480], vec![last]].concat();
    for (key, last) in [(&b"ka"[..], b'a'), (b"kc", b'c'), (b"ke", b'e')] {
        assert_eq!(hs.call(&[b"0", b"+", b"2", key, &text(last)]), b"0\t1\t0\n");
    }
    build_index(&server, b"long", b"text", IndexKind::Lexical);
    assert_eq!(
        hs.call(&[b"P", b"1", b"db", b"long", b"text", b"_key"]),
        b"0\t1\n"
    );
    let find = |hs: &mut Hs, op: &[u8], last: u8| hs.call(&[b"1", op, b"1", &text(last), b"10"]);
    assert_eq!(find(&mut hs, b">", b'c'), b"0\t1\tke\n");
    assert_eq!(find(&mut hs, b">=", b'b'), b"0\t1\tkc\tke\n");
    assert_eq!(find(&mut hs, b"<", b'c'), b"0\t1\tka\n");
    assert_eq!(find(&mut hs, b"<=", b'd'), b"0\t1\tkc\tka\n");
    assert_eq!(find(&mut hs, b"=", b'c'), b"0\t1\tkc\n");
    // A search value of exactly 480 bytes is not cut, but the longer values
    // under its key are greater than it.
    let whole = vec![b'x'; 480];
    assert_eq!(hs.call(&[b"0", b"+", b"2", b"kx", &whole]), b"0\t1\t0\n");
    let find = |hs: &mut Hs, op: &[u8]| hs.call(&[b"1", op, b"1", &whole, b"10"]);
    assert_eq!(find(&mut hs, b">"), b"0\t1\tka\tkc\tke\n");
    assert_eq!(find(&mut hs, b"<="), b"0\t1\tkx\n");
    assert_eq!(find(&mut hs, b"<"), b"0\t1\n");
    assert_eq!(find(&mut hs, b"="), b"0\t1\tkx\n");
}
