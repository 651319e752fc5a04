//! `kura bench`: a load generator for memcached-protocol servers (and Redis),
//! taking mcperf's options and printing mcperf's summary, plus HDR
//! percentiles, open-loop runs that cannot hide stalls, JSON and HTML
//! reports, scenarios and side-by-side comparisons, and TLS (`--tls`) for
//! servers started with memcached's `-Z`.

pub mod ctrl_c;
pub mod dist;
pub mod engine;
pub mod html;
pub mod ketama;
pub mod requests;
pub mod results;
pub mod scenario;
pub mod summary;
pub mod tls;

use std::io::IsTerminal;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

use kura_proto::client::{ClientProtocol, Op};

use dist::{KeyPattern, SizeDist};
use engine::{Progress, Workload};
use results::{Report, RunReport};

/// Errors a bench command reports: the user's options, or the run itself.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

fn usage(message: impl Into<String>) -> BenchError {
    BenchError::Usage(message.into())
}

#[derive(Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    #[command(flatten)]
    pub load: LoadArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Run a scenario against several targets in turn (A B A B …) and print
    /// the ratios round by round with their median.
    Compare(scenario::CompareArgs),
    /// One kind of request (Tokyo Tyrant search or put, HandlerSocket
    /// find or insert, memcached get or set) over blocking connections.
    Requests(requests::RequestsArgs),
}

/// One load: mcperf's options first, then kura's.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// Server host, or a comma-separated list of host[:port] (keys spread by ketama).
    #[arg(short = 's', long = "server", default_value = "127.0.0.1")]
    pub server: String,
    /// Port for servers given without one.
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    pub port: u16,
    /// SO_LINGER timeout in seconds for client sockets (0: reset on close).
    #[arg(long = "linger")]
    pub linger: Option<u32>,
    /// Seconds to wait for a response before the call counts as a timeout.
    #[arg(long = "timeout", default_value_t = 5.0)]
    pub timeout: f64,
    /// New connections per second (0: all at once).
    #[arg(long = "conn-rate", default_value_t = 0.0)]
    pub conn_rate: f64,
    /// Calls per second on each connection (0: closed loop, as fast as answers come).
    #[arg(long = "call-rate", default_value_t = 0.0)]
    pub call_rate: f64,
    /// Calls per connection (0: until --duration ends).
    #[arg(long = "num-calls", default_value_t = 0)]
    pub num_calls: u64,
    /// Connections (clients).
    #[arg(long = "num-conns", default_value_t = 1)]
    pub num_conns: u64,
    /// Value sizes: d<n>, u<min>,<max>, n<mean>,<sd>, e<mean>.
    #[arg(long = "sizes", default_value = "d100")]
    pub sizes: String,
    /// The operation (get, gets, set, add, replace, append, prepend, cas, delete, incr, decr, touch).
    #[arg(long = "method", default_value = "set")]
    pub method: String,
    /// Expiry of stored items, seconds.
    #[arg(long = "expiry", default_value_t = 0)]
    pub expiry: u32,
    /// Key prefix.
    #[arg(long = "prefix", default_value = "mcp:")]
    pub prefix: String,

    /// An operation mix instead of --method, e.g. set:get=1:10.
    #[arg(long = "ratio")]
    pub ratio: Option<String>,
    /// Number of distinct keys.
    #[arg(long = "keys", default_value_t = 100_000)]
    pub keys: u64,
    /// How keys are picked: sequential, uniform, zipf[:s], gaussian[:sd].
    #[arg(long = "key-pattern", default_value = "uniform")]
    pub key_pattern: String,
    /// Keys per get (multi-get).
    #[arg(long = "multiget", default_value_t = 1)]
    pub multiget: usize,
    /// Requests in flight per connection (closed loop).
    #[arg(long = "pipeline", default_value_t = 1)]
    pub pipeline: usize,
    /// Store every key once before measuring (with values of --sizes).
    #[arg(long = "load")]
    pub load: bool,
    /// Length of the measured phase, e.g. 30s, 2m, 500ms.
    #[arg(long = "duration")]
    pub duration: Option<String>,
    /// Open loop at this many requests per second in total (spread over connections).
    #[arg(long = "rate")]
    pub rate: Option<f64>,
    /// Check every value read back; corrupt values are counted as errors.
    #[arg(long = "verify")]
    pub verify: bool,
    /// Protocol: text, meta, binary or resp (Redis).
    #[arg(long = "protocol", default_value = "text")]
    pub protocol: String,
    /// Generator threads.
    #[arg(long = "threads", default_value_t = 1)]
    pub threads: usize,
    /// Largest value size (sizes are clamped to it).
    #[arg(long = "max-value", default_value_t = 1024 * 1024)]
    pub max_value: usize,
    /// Seed of every random choice.
    #[arg(long = "seed", default_value_t = 1)]
    pub seed: u64,
    /// Name of this run in reports.
    #[arg(long = "name")]
    pub name: Option<String>,
    /// Write every figure as JSON.
    #[arg(long = "json")]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report.
    #[arg(long = "html")]
    pub html: Option<PathBuf>,
    /// Run a scenario file (bench/scenarios/*.toml) against the server.
    #[arg(long = "scenario")]
    pub scenario: Option<PathBuf>,
    /// Override a scenario parameter, e.g. --param keys=5000000.
    #[arg(long = "param", requires = "scenario")]
    pub params: Vec<String>,
    /// No progress line, even on a terminal.
    #[arg(long = "quiet")]
    pub quiet: bool,
    /// Connect with TLS (servers started with memcached's -Z). Without
    /// --tls-ca the server's certificate is NOT verified: whoever answers is
    /// taken for the server. Connect times include the handshake.
    /// (Not with --scenario: a scenario's phases set their own options.)
    #[arg(long = "tls", conflicts_with = "scenario")]
    pub tls: bool,
    /// With --tls: verify the server's certificate against the CA
    /// certificates in this PEM file; a certificate they do not sign ends the
    /// run with the reason.
    #[arg(long = "tls-ca", value_name = "FILE", requires = "tls")]
    pub tls_ca: Option<PathBuf>,
    /// With --tls: the name the server's certificate must carry, also sent
    /// as SNI (default: each server's host as given with -s; an IP address
    /// is checked against the certificate's IP addresses).
    #[arg(long = "tls-server-name", value_name = "NAME", requires = "tls")]
    pub tls_server_name: Option<String>,
}

/// Parses `30s`, `2m`, `500ms`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, BenchError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| usage(format!("bad duration '{text}'")))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(usage(format!("bad duration '{text}' (use ms, s, m or h)"))),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| usage(format!("bad duration '{text}'")))
}

/// `set:get=1:10` → [(set, 1), (get, 10)].
pub fn parse_ratio(text: &str) -> Result<Vec<(Op, u32)>, BenchError> {
    let bad = || usage(format!("bad ratio '{text}' (e.g. set:get=1:10)"));
    let (ops, weights) = text.split_once('=').ok_or_else(bad)?;
    let ops: Vec<&str> = ops.split(':').collect();
    let weights: Vec<&str> = weights.split(':').collect();
    if ops.len() != weights.len() {
        return Err(bad());
    }
    ops.iter()
        .zip(weights)
        .map(|(op, weight)| {
            let op = Op::from_name(op).ok_or_else(|| usage(format!("unknown operation '{op}'")))?;
            let weight: u32 = weight.parse().map_err(|_| bad())?;
            Ok((op, weight))
        })
        .filter(|r| !matches!(r, Ok((_, 0))))
        .collect::<Result<Vec<_>, _>>()
        .and_then(|mix| {
            // Their sum is rolled in 32 bits.
            let total = mix.iter().try_fold(0u32, |sum, (_, w)| sum.checked_add(*w));
            total
                .map(|_| mix)
                .ok_or_else(|| usage(format!("the weights of '{text}' sum past {}", u32::MAX)))
        })
}

/// Each server's host as the user wrote it (`[::1]:11211` → `::1`): the
/// name its TLS certificate must carry.
fn server_hosts(list: &str) -> Vec<String> {
    list.split(',')
        .map(|entry| {
            let entry = entry.trim();
            let host = match entry.rsplit_once(':') {
                // host:port, [v6]:port; a bare IPv6 address has more colons.
                Some((host, port))
                    if port.parse::<u16>().is_ok()
                        && (host.ends_with(']') || !host.contains(':')) =>
                {
                    host
                }
                _ => entry,
            };
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        })
        .collect()
}

fn resolve_servers(list: &str, default_port: u16) -> Result<Vec<SocketAddr>, BenchError> {
    list.split(',')
        .map(|entry| {
            let entry = entry.trim();
            let with_port = if entry
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            {
                entry.to_string()
            } else {
                format!("{entry}:{default_port}")
            };
            with_port
                .to_socket_addrs()
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| usage(format!("cannot resolve server '{entry}'")))
        })
        .collect()
}

impl LoadArgs {
    /// The workload these options describe.
    pub fn workload(&self) -> Result<Workload, BenchError> {
        let protocol: ClientProtocol = self.protocol.parse().map_err(usage)?;
        let mix = match &self.ratio {
            Some(ratio) => parse_ratio(ratio)?,
            None => vec![(
                Op::from_name(&self.method)
                    .ok_or_else(|| usage(format!("unknown method '{}'", self.method)))?,
                1,
            )],
        };
        if mix.is_empty() {
            return Err(usage("the operation mix is empty"));
        }
        // A request's keys are counted in 16 bits.
        if self.multiget > usize::from(u16::MAX) {
            return Err(usage(format!("--multiget {} is over 65535", self.multiget)));
        }
        let sizes: SizeDist = self.sizes.parse().map_err(usage)?;
        let key_pattern: KeyPattern = self.key_pattern.parse().map_err(usage)?;
        let duration = self.duration.as_deref().map(parse_duration).transpose()?;
        if duration.is_none() && self.num_calls == 0 {
            return Err(usage(
                "give --num-calls or --duration, or the run never ends",
            ));
        }
        if self.num_conns == 0 || self.num_conns > MAX_CONNECTIONS {
            return Err(usage(format!(
                "--num-conns must be from 1 to {MAX_CONNECTIONS}"
            )));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return Err(usage(format!("--threads must be from 1 to {MAX_THREADS}")));
        }
        if self.pipeline > MAX_PIPELINE {
            return Err(usage(format!("--pipeline is at most {MAX_PIPELINE}")));
        }
        if self.max_value > MAX_VALUE_BYTES {
            return Err(usage(format!(
                "--max-value {} is over {} MiB",
                self.max_value,
                MAX_VALUE_BYTES >> 20
            )));
        }
        // NaN compares false both ways: a rate of NaN would be no rate
        // to one check and a rate to another.
        for (name, value) in [
            ("--call-rate", self.call_rate),
            ("--conn-rate", self.conn_rate),
            ("--timeout", self.timeout),
        ] {
            if !value.is_finite() || value < 0.0 {
                return Err(usage(format!("{name} must be a number, 0 or more")));
            }
        }
        let call_rate = match self.rate {
            Some(rate) if rate > 0.0 && rate.is_finite() => rate / self.num_conns as f64,
            Some(_) => return Err(usage("--rate must be a number above 0")),
            None => self.call_rate,
        };
        let tls = self
            .tls
            .then(|| {
                tls::TlsClient::new(
                    self.tls_ca.as_deref(),
                    self.tls_server_name.as_deref(),
                    &server_hosts(&self.server),
                )
            })
            .transpose()
            .map_err(usage)?;
        // No larger than the sizes asked for: each generator thread holds a
        // pattern this long.
        let max_value = self.max_value.clamp(1, sizes.upper_bound().max(1));
        Ok(Workload {
            servers: resolve_servers(&self.server, self.port)?,
            protocol,
            threads: self.threads,
            clients: self.num_conns,
            conn_rate: self.conn_rate,
            calls_per_client: self.num_calls,
            call_rate,
            pipeline: self.pipeline.max(1),
            duration,
            mix,
            multiget: self.multiget.max(1),
            key_count: self.keys.max(1),
            key_pattern,
            key_prefix: self.prefix.clone(),
            sizes,
            max_value,
            expiry: self.expiry,
            verify: self.verify,
            timeout: Duration::try_from_secs_f64(self.timeout.max(0.001))
                .map_err(|_| usage(format!("bad --timeout {}", self.timeout)))?,
            linger: self.linger,
            seed: self.seed,
            interval: Duration::from_secs(1),
            tls,
        })
    }
}

/// The most connections a run opens.
const MAX_CONNECTIONS: u64 = 1_000_000;
/// Generator threads: past a few per core they only take turns.
const MAX_THREADS: usize = 1024;
/// The most requests a connection sends before it reads.
const MAX_PIPELINE: usize = 100_000;
/// The largest value a run sends (memcached's `-I` goes to 1 GiB).
pub const MAX_VALUE_BYTES: usize = 1 << 30;

/// Raises the open-file limit so tens of thousands of connections fit.
/// Each generator thread has its own descriptor table (see `engine::run`), and
/// the limit bounds descriptor numbers per table: it must fit one thread's share.
pub fn raise_open_files(wanted: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < wanted {
            // Root may raise the hard limit too; others get what the hard limit allows.
            if setrlimit(Resource::RLIMIT_NOFILE, wanted, hard.max(wanted)).is_err() {
                let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(wanted).max(soft), hard);
            }
        }
    }
}

/// Stores every key once (the load phase): closed loop, pipelined, not reported.
pub fn load_phase(workload: &Workload) -> Result<(), BenchError> {
    // Over TLS, at most about 12 KiB of sets at a time: memcached 1.6.18
    // with -Z leaves the last requests of a burst of more than about 17 KB
    // unanswered until more bytes arrive (BENCHMARKS.md, "TLS").
    let pipeline = match workload.tls {
        Some(_) => {
            (12 * 1024 / (workload.sizes.upper_bound().min(workload.max_value) + 100)).clamp(1, 32)
        }
        None => 32,
    };
    let load = Workload {
        // One thread: its clients share one sequential picker from key 0,
        // so they store every key (threads start theirs a share apart, and
        // their clients seldom split the keys evenly).
        threads: 1,
        clients: workload.clients.clamp(1, 16),
        conn_rate: 0.0,
        calls_per_client: workload.key_count.div_ceil(workload.clients.clamp(1, 16)),
        call_rate: 0.0,
        pipeline,
        duration: None,
        mix: vec![(Op::Set, 1)],
        multiget: 1,
        key_pattern: KeyPattern::Sequential,
        verify: false,
        ..workload.clone()
    };
    let measured = engine::run(&load, &Arc::new(Progress::default()))?;
    if let Some(failure) = &measured.tls_failure {
        return Err(std::io::Error::other(format!("the load phase failed: {failure}")).into());
    }
    // A failure of the server or the network, not of the command line.
    if measured.error_total() > 0 {
        return Err(
            std::io::Error::other(format!("the load phase failed: {:?}", measured.errors)).into(),
        );
    }
    Ok(())
}

/// Runs one measured phase and returns its report, with a progress line on a terminal.
/// A run the server answered nothing in is a failure, with the errors seen.
pub fn answered_some(server: &str, measured: &engine::Measured) -> Result<(), BenchError> {
    if measured.responses > 0 {
        return Ok(());
    }
    let errors: Vec<String> = (measured.errors.iter())
        .map(|(kind, count)| format!("{count} {kind}"))
        .collect();
    Err(BenchError::Io(std::io::Error::other(format!(
        "{server} answered no request ({})",
        match errors.is_empty() {
            true => "no error seen".to_string(),
            false => errors.join(", "),
        }
    ))))
}

pub fn measure(
    name: &str,
    workload: &Workload,
    quiet: bool,
) -> Result<(RunReport, engine::Measured), BenchError> {
    let clients_per_thread = workload.clients.div_ceil(workload.threads.max(1) as u64);
    raise_open_files(clients_per_thread * workload.servers.len() as u64 + 256);
    let progress = Arc::new(Progress::default());
    ctrl_c::catch();
    let show = !quiet && std::io::stderr().is_terminal();
    let ticker = show.then(|| {
        let progress = progress.clone();
        let total = workload.duration;
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut last = 0;
            while !progress.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let responses = progress.responses.load(Ordering::Relaxed);
                let rate = (responses - last) * 2;
                last = responses;
                let elapsed = started.elapsed().as_secs_f64();
                let bar = total.map_or(String::new(), |t| {
                    let done = (elapsed / t.as_secs_f64()).min(1.0);
                    let filled = (done * 30.0) as usize;
                    format!("[{}{}] ", "=".repeat(filled), " ".repeat(30 - filled))
                });
                eprint!("\r{bar}{elapsed:6.1}s {responses:>12} responses {rate:>10} rsp/s ");
            }
            eprint!("\r{:100}\r", "");
        })
    });
    let measured = engine::run(workload, &progress);
    progress.stop.store(true, Ordering::Relaxed);
    if let Some(ticker) = ticker {
        let _ = ticker.join();
    }
    let measured = measured?;
    if ctrl_c::pressed() {
        eprintln!(
            "kura bench: interrupted; the figures cover the {:.1} s it ran",
            measured.elapsed.as_secs_f64()
        );
    }
    // A run in which no TLS session got through measured nothing: say why
    // rather than print a summary of zeros.
    if let (0, Some(failure)) = (measured.responses, &measured.tls_failure) {
        return Err(std::io::Error::other(failure.clone()).into());
    }
    let report = summary::run_report(name, workload, &measured);
    Ok((report, measured))
}

fn machine() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{} ({cores} cores, Linux {})", host.trim(), kernel.trim())
}

/// Writes the JSON and HTML reports when asked.
pub fn write_reports(
    report: &Report,
    json: Option<&PathBuf>,
    html: Option<&PathBuf>,
) -> Result<(), BenchError> {
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
        std::fs::write(path, text)?;
    }
    if let Some(path) = html {
        std::fs::write(path, html::render(report))?;
    }
    Ok(())
}

/// Refuses, before anything runs, a report to be written where no file
/// can be (in a folder that does not exist, or over a folder): a run of
/// minutes would otherwise end in that error.
pub fn check_report_paths(paths: [Option<&PathBuf>; 2]) -> Result<(), BenchError> {
    for path in paths.into_iter().flatten() {
        let folder = match path.parent() {
            Some(folder) if !folder.as_os_str().is_empty() => folder,
            _ => std::path::Path::new("."),
        };
        if path.is_dir() {
            return Err(usage(format!(
                "cannot write {}: it is a folder",
                path.display()
            )));
        }
        if !folder.is_dir() {
            let (path, folder) = (path.display(), folder.display());
            return Err(usage(format!("cannot write {path}: {folder} is no folder")));
        }
    }
    Ok(())
}

/// The `kura bench` command.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    match args.command {
        Some(BenchCommand::Compare(compare)) => return scenario::compare(&compare),
        Some(BenchCommand::Requests(requests)) => return requests::run(requests),
        None => {}
    }
    let load = args.load;
    check_report_paths([load.json.as_ref(), load.html.as_ref()])?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    if let Some(path) = &load.scenario {
        let scenario = scenario::Scenario::load(path, &load.params)?;
        let target = scenario::Target {
            name: load.name.clone().unwrap_or_else(|| "target".into()),
            server: load.server.clone(),
            port: load.port,
            protocol: load.protocol.clone(),
        };
        let runs = scenario.run(&target, load.quiet)?;
        for run in &runs {
            crate::output::print(&format!("{}\n", summary::scenario_line(run)))?;
        }
        let report = Report {
            title: format!("kura bench: {}", scenario.name),
            command,
            machine: machine(),
            runs,
            comparisons: Vec::new(),
        };
        return write_reports(&report, load.json.as_ref(), load.html.as_ref());
    }
    let workload = load.workload()?;
    if load.load {
        load_phase(&workload)?;
    }
    let name = load.name.clone().unwrap_or_else(|| load.server.clone());
    let (run, measured) = measure(&name, &workload, load.quiet)?;
    crate::output::print(&summary::mcperf_summary(&workload, &measured))?;
    answered_some(&load.server, &measured)?;
    let report = Report {
        title: format!("kura bench against {}", load.server),
        command,
        machine: machine(),
        runs: vec![run],
        comparisons: Vec::new(),
    };
    write_reports(&report, load.json.as_ref(), load.html.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ratios() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("soon").is_err());
        assert_eq!(
            parse_ratio("set:get=1:10").unwrap(),
            vec![(Op::Set, 1), (Op::Get, 10)]
        );
        assert!(parse_ratio("set:get=1").is_err());
        assert!(parse_ratio("fly=1").is_err());
    }

    #[test]
    fn tls_names_are_the_hosts_as_given() {
        assert_eq!(
            server_hosts("cache.example:11211, 127.0.0.1,[::1]:11212,::1"),
            vec!["cache.example", "127.0.0.1", "::1", "::1"]
        );
    }
}
