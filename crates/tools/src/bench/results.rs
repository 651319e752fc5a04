//! The figures of a benchmark run, as `kura bench` prints them, writes them to
//! JSON (`--json`) and draws them (`--html`). One shape for all three.

use serde::{Deserialize, Serialize};

/// Everything one invocation measured: one run per target (and per scenario
/// step), in the order they ran.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub title: String,
    /// The command line that produced it.
    pub command: String,
    /// Where it ran: host name, cores, kernel.
    pub machine: String,
    pub runs: Vec<RunReport>,
    /// For `kura bench compare`: ratios round by round, one per scenario phase.
    pub comparisons: Vec<Comparison>,
}

/// One measured phase against one target.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunReport {
    /// e.g. "kura", "memcached", "redis" — or "kura / 004 read".
    pub name: String,
    pub target: String,
    pub protocol: String,
    /// "closed" or "open".
    pub loop_kind: String,
    pub duration_secs: f64,
    pub connections: u64,
    pub requests: u64,
    pub responses: u64,
    /// Responses per second over the measured phase.
    pub throughput: f64,
    /// Response kinds: "stored", "not_stored", "exists", "not_found", "deleted",
    /// "value", "end", "num", "error", "client_error", "server_error", "touched".
    pub response_types: Vec<(String, u64)>,
    /// Failures by kind: "timeout", "connrefused", "connreset", "corrupt", "other".
    pub errors: Vec<(String, u64)>,
    /// Latency per operation ("get", "set", …), plus "all".
    pub ops: Vec<OpLatency>,
    /// One point per interval (default 1 s).
    pub timeline: Vec<TimelinePoint>,
    /// CPU the generator used: user and system seconds.
    pub cpu_user_secs: f64,
    pub cpu_system_secs: f64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

/// Latency of one operation, in microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpLatency {
    pub op: String,
    pub count: u64,
    pub mean_us: f64,
    pub stddev_us: f64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
    /// The distribution: (upper bound of the bucket in µs, responses in it),
    /// buckets growing logarithmically; empty buckets omitted.
    pub histogram: Vec<(f64, u64)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Seconds since the measured phase began (end of the interval).
    pub t_secs: f64,
    pub throughput: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// `kura bench compare`: targets run in turn, A B A B …
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Comparison {
    /// The scenario or workload compared.
    pub workload: String,
    /// Target names; the first is the baseline of the ratios.
    pub targets: Vec<String>,
    /// The figure compared, e.g. "throughput (ops/s)" or "µs per operation".
    pub metric: String,
    /// rounds[r][t] = the figure of target t in round r.
    pub rounds: Vec<Vec<f64>>,
    /// The median figure of each target.
    pub medians: Vec<f64>,
    /// The median over rounds of (target / baseline), per target.
    pub median_ratios: Vec<f64>,
}
