//! `kura bench requests`: one kind of request, over a few blocking
//! connections, for the protocols `kura bench`'s event loop does not speak
//! (Tokyo Tyrant's table search and put, HandlerSocket's find and insert),
//! and memcached's `get`/`set` through the same loop so that a protocol's
//! rate can be set beside memcached's on the same data and client.
//!
//! Without `--duration` every input line (or every key) is sent once,
//! split among the connections: a load. With it, lines or keys are picked
//! at random until the time is up: a measurement.

use std::collections::VecDeque;
use std::fs;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};

use kura_proto::tyrant::{compose, PutMode, Request};

use super::{parse_duration, usage, BenchError};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum RequestKind {
    /// Tokyo Tyrant `misc search`; each input line is a JSON list of its
    /// arguments, e.g. ["addcond\u0000city\u0000STREQ\u0000c7"].
    TyrantSearch,
    /// Tokyo Tyrant `put` of a table row; each input line is a row as
    /// `tctmgr importtsv` reads it (primary key, then name and value pairs,
    /// tab-separated).
    TyrantPut,
    /// HandlerSocket find by primary key (`=`) of generated keys.
    HsFind,
    /// HandlerSocket insert of generated keys and values.
    HsInsert,
    /// memcached `get` of generated keys.
    McGet,
    /// memcached `set` of generated keys and values.
    McSet,
}

#[derive(Args, Debug, Clone)]
pub struct RequestsArgs {
    /// The server, host:port.
    #[arg(short = 's', long = "server", default_value = "127.0.0.1:11211")]
    pub server: String,
    #[arg(long = "kind", value_enum)]
    pub kind: RequestKind,
    /// The requests (tyrant-search, tyrant-put).
    #[arg(long = "input")]
    pub input: Option<PathBuf>,
    /// Generated keys are PREFIX0 … PREFIX(keys-1).
    #[arg(long = "keys", default_value_t = 1_000_000)]
    pub keys: u64,
    #[arg(long = "prefix", default_value = "key:")]
    pub prefix: String,
    /// Bytes of each generated value.
    #[arg(long = "value-size", default_value_t = 100)]
    pub value_size: usize,
    /// HandlerSocket's database and table (table only in kura).
    #[arg(long = "hs-table", default_value = "kv")]
    pub hs_table: String,
    /// HandlerSocket's value column.
    #[arg(long = "hs-column", default_value = "v")]
    pub hs_column: String,
    /// Connections, each in its own thread.
    #[arg(long = "conns", default_value_t = 1)]
    pub conns: usize,
    /// Requests in flight on each connection.
    #[arg(long = "pipeline", default_value_t = 1)]
    pub pipeline: usize,
    /// Pick requests at random for this long (e.g. 10s); without it,
    /// send each once.
    #[arg(long = "duration")]
    pub duration: Option<String>,
    #[arg(long = "seed", default_value_t = 1)]
    pub seed: u64,
    /// Print the figures as one JSON object.
    #[arg(long = "json")]
    pub json: bool,
}

/// What the connections measured together.
struct Tally {
    latency: Histogram<u64>,
    requests: u64,
    /// Rows found (search, find), or hits (get).
    rows: u64,
    errors: u64,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            latency: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds"),
            requests: 0,
            rows: 0,
            errors: 0,
        }
    }

    fn merge(&mut self, other: &Tally) {
        self.latency.add(&other.latency).expect("same bounds");
        self.requests += other.requests;
        self.rows += other.rows;
        self.errors += other.errors;
    }
}

/// The requests of a run, encoded once: the input's lines, or generated
/// keys and a value.
struct Requests {
    args: RequestsArgs,
    lines: Vec<Vec<u8>>,
    value: Vec<u8>,
}

impl Requests {
    fn count(&self) -> u64 {
        match self.args.kind {
            RequestKind::TyrantSearch | RequestKind::TyrantPut => self.lines.len() as u64,
            _ => self.args.keys,
        }
    }

    /// Appends request `index` to `out`.
    fn encode(&self, index: u64, out: &mut Vec<u8>) {
        let key = || format!("{}{index}", self.args.prefix);
        match self.args.kind {
            RequestKind::TyrantSearch | RequestKind::TyrantPut => {
                out.extend_from_slice(&self.lines[index as usize])
            }
            RequestKind::HsFind => {
                out.extend_from_slice(format!("1\t=\t1\t{}\n", key()).as_bytes())
            }
            RequestKind::HsInsert => {
                out.extend_from_slice(format!("1\t+\t2\t{}\t", key()).as_bytes());
                out.extend_from_slice(&self.value);
                out.push(b'\n');
            }
            RequestKind::McGet => out.extend_from_slice(format!("get {}\r\n", key()).as_bytes()),
            RequestKind::McSet => {
                let head = format!("set {} 0 0 {}\r\n", key(), self.value.len());
                out.extend_from_slice(head.as_bytes());
                out.extend_from_slice(&self.value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// Encodes an input line as its request; `None` when it is not one.
fn encode_line(kind: RequestKind, line: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    match kind {
        RequestKind::TyrantSearch => {
            let args: Vec<String> = serde_json::from_str(line).ok()?;
            let request = Request::Misc {
                name: b"search",
                opts: 0,
                args: args.iter().map(|arg| arg.as_bytes()).collect(),
            };
            compose(&mut out, &request);
        }
        RequestKind::TyrantPut => {
            let (key, columns) = line.split_once('\t')?;
            let value = columns.replace('\t', "\0");
            let request = Request::Put {
                mode: PutMode::Put,
                key: key.as_bytes(),
                value: value.as_bytes(),
            };
            compose(&mut out, &request);
        }
        _ => return None,
    }
    Some(out)
}

/// The most bytes of requests `--input` may hold.
const MAX_INPUT_BYTES: u64 = 1 << 30;

pub fn run(args: RequestsArgs) -> Result<(), BenchError> {
    let mut lines = Vec::new();
    if matches!(
        args.kind,
        RequestKind::TyrantSearch | RequestKind::TyrantPut
    ) {
        let path = args
            .input
            .as_ref()
            .ok_or_else(|| usage("this kind of request reads --input"))?;
        // Bounded: `--input /dev/zero` would read until memory runs out.
        let mut text = String::new();
        fs::File::open(path)
            .and_then(|file| file.take(MAX_INPUT_BYTES + 1).read_to_string(&mut text))
            .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
        if text.len() as u64 > MAX_INPUT_BYTES {
            return Err(usage(format!(
                "{} is over {} MiB of requests",
                path.display(),
                MAX_INPUT_BYTES >> 20
            )));
        }
        for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
            lines.push(encode_line(args.kind, line).ok_or_else(|| {
                usage(format!("{}:{}: not a request", path.display(), number + 1))
            })?);
        }
        if lines.is_empty() {
            return Err(usage(format!("{}: no requests", path.display())));
        }
    }
    if args.conns == 0 || args.pipeline == 0 || args.keys == 0 {
        return Err(usage("--conns, --pipeline and --keys must be at least 1"));
    }
    if args.value_size > super::MAX_VALUE_BYTES {
        return Err(usage(format!(
            "--value-size {} is over {} MiB",
            args.value_size,
            super::MAX_VALUE_BYTES >> 20
        )));
    }
    let duration = args.duration.as_deref().map(parse_duration).transpose()?;
    let value = (0..args.value_size)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let requests = Arc::new(Requests {
        args: args.clone(),
        lines,
        value,
    });
    let started = Instant::now();
    let threads = (0..args.conns)
        .map(|conn| {
            let requests = Arc::clone(&requests);
            std::thread::Builder::new()
                .spawn(move || connection(&requests, conn, duration))
                .map_err(|e| {
                    usage(format!(
                        "cannot start connection {}'s thread: {e}",
                        conn + 1
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut tally = Tally::new();
    for thread in threads {
        let one = thread
            .join()
            .map_err(|_| std::io::Error::other("a connection's thread panicked"))??;
        tally.merge(&one);
    }
    report(&args, &tally, started.elapsed())?;
    if tally.requests > 0 && tally.errors == tally.requests {
        return Err(std::io::Error::other(format!(
            "every one of {} requests failed",
            tally.requests
        ))
        .into());
    }
    Ok(())
}

fn report(args: &RequestsArgs, tally: &Tally, elapsed: Duration) -> std::io::Result<()> {
    let seconds = elapsed.as_secs_f64();
    let micros = |q: f64| tally.latency.value_at_quantile(q) as f64 / 1000.0;
    let rate = tally.requests as f64 / seconds;
    let rows = tally.rows as f64 / tally.requests.max(1) as f64;
    if args.json {
        let figures = serde_json::json!({
            "kind": format!("{:?}", args.kind),
            "conns": args.conns,
            "pipeline": args.pipeline,
            "requests": tally.requests,
            "errors": tally.errors,
            "seconds": seconds,
            "per_second": rate,
            "rows_per_request": rows,
            "mean_us": tally.latency.mean() / 1000.0,
            "p50_us": micros(0.5),
            "p99_us": micros(0.99),
            "p999_us": micros(0.999),
        });
        crate::output::print(&format!("{figures}\n"))?;
    } else {
        crate::output::print(&format!(
            "{:?}: {} requests in {seconds:.2} s = {rate:.0}/s over {} connections; \
             latency mean {:.1} us, p50 {:.1}, p99 {:.1}, p99.9 {:.1}; \
             {rows:.2} rows per request; {} errors\n",
            args.kind,
            tally.requests,
            args.conns,
            tally.latency.mean() / 1000.0,
            micros(0.5),
            micros(0.99),
            micros(0.999),
            tally.errors
        ))?;
    }
    Ok(())
}

/// One connection: sends its share of the requests (or random ones until
/// `duration` is over), keeping `pipeline` in flight, and times each.
fn connection(
    requests: &Requests,
    conn: usize,
    duration: Option<Duration>,
) -> Result<Tally, BenchError> {
    let args = &requests.args;
    let stream = TcpStream::connect(&args.server)
        .map_err(|e| std::io::Error::other(format!("cannot connect to {}: {e}", args.server)))?;
    stream.set_nodelay(true)?;
    let mut reader = BufReader::with_capacity(1 << 16, stream.try_clone()?);
    let mut writer = BufWriter::with_capacity(1 << 16, stream);
    if matches!(args.kind, RequestKind::HsFind | RequestKind::HsInsert) {
        let open = format!(
            "P\t1\t{0}\t{0}\tPRIMARY\t_key,{1}\n",
            args.hs_table, args.hs_column
        );
        writer.write_all(open.as_bytes())?;
        writer.flush()?;
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line)?;
        if !line.starts_with(b"0\t1") {
            return Err(usage(format!(
                "HandlerSocket refused to open the index: {}",
                String::from_utf8_lossy(&line).trim_end()
            )));
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed.wrapping_add(conn as u64));
    let total = requests.count();
    let mut next_in_turn = conn as u64;
    let deadline = duration.map(|d| Instant::now() + d);
    let mut pick = |rng: &mut rand::rngs::StdRng| -> Option<u64> {
        match deadline {
            Some(deadline) => (Instant::now() < deadline).then(|| rng.random_range(0..total)),
            None => {
                let index = next_in_turn;
                next_in_turn += args.conns as u64;
                (index < total).then_some(index)
            }
        }
    };
    let mut tally = Tally::new();
    let mut in_flight = VecDeque::new();
    let mut out = Vec::new();
    let mut done = false;
    loop {
        while !done && in_flight.len() < args.pipeline {
            match pick(&mut rng) {
                Some(index) => {
                    requests.encode(index, &mut out);
                    writer.write_all(&out)?;
                    out.clear();
                    in_flight.push_back(Instant::now());
                }
                None => done = true,
            }
        }
        writer.flush()?;
        let Some(sent) = in_flight.pop_front() else {
            break;
        };
        match read_reply(args.kind, &mut reader)? {
            Some(rows) => tally.rows += rows,
            None => tally.errors += 1,
        }
        tally.requests += 1;
        let nanos = sent.elapsed().as_nanos().max(1) as u64;
        tally.latency.saturating_record(nanos);
    }
    Ok(tally)
}

/// Reads one reply: the rows it carries (`Some(0)` for a write that
/// succeeded), or `None` for an error reply.
fn read_reply(kind: RequestKind, reader: &mut impl BufRead) -> io::Result<Option<u64>> {
    let mut line = Vec::new();
    match kind {
        RequestKind::TyrantSearch => {
            let code = read_u8(reader)?;
            let count = read_u32(reader)?;
            let mut hits = 0;
            for _ in 0..count {
                let len = read_u32(reader)?;
                io::copy(&mut reader.take(u64::from(len)), &mut io::sink())?;
                hits += 1;
            }
            Ok((code == 0).then_some(hits))
        }
        RequestKind::TyrantPut => Ok((read_u8(reader)? == 0).then_some(0)),
        RequestKind::HsFind | RequestKind::HsInsert => {
            reader.read_until(b'\n', &mut line)?;
            let mut fields = line.trim_ascii_end().split(|&b| b == b'\t');
            if fields.next() != Some(b"0") {
                return Ok(None);
            }
            let columns = fields.next().map_or(1, |n| {
                std::str::from_utf8(n)
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1)
            });
            Ok(Some(fields.count() as u64 / u64::max(columns, 1)))
        }
        RequestKind::McGet => {
            let mut hits = 0;
            loop {
                line.clear();
                reader.read_until(b'\n', &mut line)?;
                if line.starts_with(b"END") {
                    return Ok(Some(hits));
                }
                let Some(len) = line
                    .trim_ascii_end()
                    .rsplit(|&b| b == b' ')
                    .next()
                    .and_then(|n| std::str::from_utf8(n).ok()?.parse::<u64>().ok())
                    .filter(|_| line.starts_with(b"VALUE "))
                else {
                    return Ok(None);
                };
                io::copy(&mut reader.take(len + 2), &mut io::sink())?;
                hits += 1;
            }
        }
        RequestKind::McSet => {
            reader.read_until(b'\n', &mut line)?;
            Ok((line == b"STORED\r\n").then_some(0))
        }
    }
}

fn read_u8(reader: &mut impl Read) -> io::Result<u8> {
    let mut byte = [0];
    reader.read_exact(&mut byte)?;
    Ok(byte[0])
}

fn read_u32(reader: &mut impl Read) -> io::Result<u32> {
    let mut bytes = [0; 4];
    reader.read_exact(&mut bytes)?;
    Ok(u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_lines_become_tyrant_requests() {
        let search = encode_line(
            RequestKind::TyrantSearch,
            r#"["addcond\u0000a\u0000STREQ\u0000x"]"#,
        )
        .unwrap();
        let mut expected = vec![0xC8, 0x90];
        expected.extend_from_slice(&6u32.to_be_bytes());
        expected.extend_from_slice(&0u32.to_be_bytes());
        expected.extend_from_slice(&1u32.to_be_bytes());
        expected.extend_from_slice(b"search");
        expected.extend_from_slice(&17u32.to_be_bytes());
        expected.extend_from_slice(b"addcond\0a\0STREQ\0x");
        assert_eq!(search, expected);

        let put = encode_line(RequestKind::TyrantPut, "k1\tname\tann\tage\t30").unwrap();
        let mut expected = vec![0xC8, 0x10];
        expected.extend_from_slice(&2u32.to_be_bytes());
        expected.extend_from_slice(&15u32.to_be_bytes());
        expected.extend_from_slice(b"k1name\0ann\0age\x0030");
        assert_eq!(put, expected);

        assert_eq!(encode_line(RequestKind::TyrantSearch, "not json"), None);
        assert_eq!(encode_line(RequestKind::TyrantPut, "no-columns"), None);
    }

    #[test]
    fn bad_options_are_usage_errors_before_any_connection() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: RequestsArgs,
        }
        let parse = |line: &str| {
            let words = std::iter::once("requests").chain(line.split_whitespace());
            <Cli as clap::Parser>::parse_from(words).args
        };
        for line in [
            "--kind mc-get --keys 0 --duration 1s",
            "--kind mc-get --conns 0",
            "--kind hs-find --pipeline 0",
            "--kind tyrant-search",
            "--kind tyrant-put --input /nonexistent/rows.tsv",
            "--kind mc-get --duration 10q",
            "--kind mc-set --value-size 18446744073709551615",
        ] {
            let outcome = run(parse(line));
            assert!(matches!(outcome, Err(BenchError::Usage(_))), "{line}");
        }
    }

    #[test]
    fn replies_are_read_as_rows_or_errors() {
        let mut hs = &b"0\t2\tk1\tv1\n"[..];
        assert_eq!(read_reply(RequestKind::HsFind, &mut hs).unwrap(), Some(1));
        let mut hs = &b"1\t1\tstmtnum\n"[..];
        assert_eq!(read_reply(RequestKind::HsFind, &mut hs).unwrap(), None);
        let mut mc = &b"VALUE k 0 3\r\nabc\r\nEND\r\n"[..];
        assert_eq!(read_reply(RequestKind::McGet, &mut mc).unwrap(), Some(1));
        let mut mc = &b"END\r\n"[..];
        assert_eq!(read_reply(RequestKind::McGet, &mut mc).unwrap(), Some(0));
        let mut tt = &[0u8, 0, 0, 0, 2, 0, 0, 0, 1, b'a', 0, 0, 0, 1, b'b'][..];
        assert_eq!(
            read_reply(RequestKind::TyrantSearch, &mut tt).unwrap(),
            Some(2)
        );
    }
}
