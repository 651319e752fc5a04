//! `kura bench compare` must show what each server answered: read hits and
//! misses per target, and a warning when the hit ratios differ. Before, a
//! memcached left at its default 64 MB under 1 GB of values answered most
//! reads with a miss, and the table compared its read times as if it had
//! served the values. Here two real memcached processes stand in: one with
//! room for the data, one too small to keep most of it.

use std::net::TcpStream;
use std::path::PathBuf;

use clap::Parser as _;
use kura_tools::bench::scenario::{compare_to, CompareArgs, Scenario, Target};

mod common;

use common::Memcached;

/// memcached with `megabytes` of memory, on a free port of 127.0.0.1.
fn start(megabytes: u32) -> Memcached {
    Memcached::start(&["-m", &megabytes.to_string()])
}

/// A `NAME=HOST:PORT` target of `kura bench compare`.
fn named_target(server: &Memcached, name: &str) -> String {
    format!("{name}=127.0.0.1:{}", server.port)
}

fn scenario_file(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Seed 004's shape, smaller: 2,000 values of 10 KB (20 MB) written in
/// order, then read back in order.
const WRITE_THEN_READ: &str = r#"
name = "write then read 2,000 values of 10 KB"
metric = "us_per_op"

[params]
count = 2000

[[phase]]
name = "write"
options = { method = "set", sizes = "d10240", num-conns = 1, pipeline = 16, num-calls = "{count}", keys = "{count}", key-pattern = "sequential", prefix = "hits:" }

[[phase]]
name = "read"
options = { method = "get", num-conns = 1, pipeline = 16, num-calls = "{count}", keys = "{count}", key-pattern = "sequential", prefix = "hits:", verify = true }
"#;

fn compare(
    targets: Vec<String>,
    scenario: PathBuf,
) -> (String, kura_tools::bench::results::Report) {
    let args = CompareArgs {
        targets,
        rounds: 1,
        params: Vec::new(),
        json: None,
        html: None,
        scenario,
    };
    let mut out = Vec::new();
    let report = compare_to(&args, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    eprintln!("{out}");
    (out, report)
}

#[test]
fn compare_shows_hits_and_warns_when_a_server_misses_most_reads() {
    let roomy = start(64);
    let small = start(4);
    let scenario = scenario_file("compare-hits.toml", WRITE_THEN_READ);
    let (out, report) = compare(
        vec![named_target(&roomy, "roomy"), named_target(&small, "small")],
        scenario,
    );

    let read = &report.comparisons[1];
    assert_eq!(read.hits[0], 2000, "the roomy server keeps every value");
    assert_eq!(read.misses[0], 0);
    let small_ratio = read.hit_ratios()[1].unwrap();
    assert!(small_ratio < 0.5, "4 MB holds most of 20 MB? {small_ratio}");
    assert_eq!(read.hits[1] + read.misses[1], 2000);

    assert!(out.contains("reads: hits / misses (hit ratio)"), "{out}");
    assert!(out.contains("roomy 2000 / 0 (100.0%)"), "{out}");
    assert!(
        out.contains(&format!(
            "small {} / {} ({:.1}%)",
            read.hits[1],
            read.misses[1],
            small_ratio * 100.0
        )),
        "{out}"
    );
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("WARNING:")).collect();
    assert_eq!(warnings.len(), 1, "{out}");
    assert!(warnings[0].contains("/ read: hit ratios differ (roomy 100.0%, small "));
    // The writes read nothing: no hit figures for them.
    assert_eq!(report.comparisons[0].hit_ratios(), vec![None, None]);
}

#[test]
fn compare_stays_quiet_when_both_servers_hold_the_data() {
    let a = start(64);
    let b = start(64);
    let scenario = scenario_file("compare-hits-quiet.toml", WRITE_THEN_READ);
    let (out, report) = compare(vec![named_target(&a, "a"), named_target(&b, "b")], scenario);
    assert_eq!(report.comparisons[1].hits, vec![2000, 2000]);
    assert!(
        out.contains("a 2000 / 0 (100.0%)   b 2000 / 0 (100.0%)"),
        "{out}"
    );
    assert!(!out.contains("WARNING"), "{out}");
}

/// Hits and misses count keys, not responses: a multi-get of 4 keys of which
/// 2 exist is 2 hits and 2 misses. Keys 0..99 are stored; reads ask 0..199.
#[test]
fn a_multiget_counts_each_key() {
    let server = start(64);
    let path = scenario_file(
        "multiget-hits.toml",
        r#"
name = "half the keys exist"
[[phase]]
name = "write"
options = { method = "set", sizes = "d100", num-calls = 100, keys = 100, key-pattern = "sequential", prefix = "mg:" }
[[phase]]
name = "read"
options = { method = "get", multiget = 4, num-calls = 50, keys = 200, key-pattern = "sequential", prefix = "mg:" }
"#,
    );
    let scenario = Scenario::load(&path, &[]).unwrap();
    let target: Target = named_target(&server, "memcached").parse().unwrap();
    for protocol in ["text", "meta", "binary"] {
        let target = Target {
            protocol: protocol.into(),
            ..target.clone()
        };
        let runs = scenario.run(&target, true).unwrap();
        assert_eq!((runs[0].hits, runs[0].misses), (0, 0), "{protocol}: sets");
        assert_eq!(runs[1].responses, 50, "{protocol}");
        assert_eq!((runs[1].hits, runs[1].misses), (100, 100), "{protocol}");
        assert_eq!(runs[1].hit_ratio(), Some(0.5), "{protocol}");
    }
}

/// `--load` stores every key once, whatever the threads and connections
/// (threads' shares of the keys once left some unstored when connections
/// did not split evenly over threads).
#[test]
fn a_load_stores_every_key_whatever_the_threads_and_connections() {
    use std::io::{BufRead, BufReader, Write};
    let server = start(64);
    let curr_items = || {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream.write_all(b"stats\r\n").unwrap();
        let reader = BufReader::new(stream);
        for line in reader.lines() {
            let line = line.unwrap();
            if let Some(count) = line.strip_prefix("STAT curr_items ") {
                return count.parse::<u64>().unwrap();
            }
            assert_ne!(line, "END", "no curr_items");
        }
        unreachable!("the stats ended early")
    };
    for shape in ["--threads 4 --num-conns 2", "--threads 3 --num-conns 16"] {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream.write_all(b"flush_all\r\n").unwrap();
        let mut reply = String::new();
        BufReader::new(stream).read_line(&mut reply).unwrap();
        assert_eq!(reply, "OK\r\n");
        let port = server.port.to_string();
        let mut argv = vec!["kura-bench", "-s", "127.0.0.1", "-p", &port];
        argv.extend(shape.split_whitespace());
        argv.extend([
            "--keys",
            "1003",
            "--sizes",
            "d10",
            "--method",
            "get",
            "--num-calls",
            "1",
        ]);
        let load = LoadCommandLine::try_parse_from(&argv).unwrap().load;
        kura_tools::bench::load_phase(&load.workload().unwrap()).unwrap();
        assert_eq!(curr_items(), 1003, "{shape}");
    }
}

#[derive(clap::Parser)]
struct LoadCommandLine {
    #[command(flatten)]
    load: kura_tools::bench::LoadArgs,
}
