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
    /// Keys reads (get, gets) asked for and got back; a multi-get counts each key.
    #[serde(default)]
    pub hits: u64,
    /// Keys reads asked for and did not get.
    #[serde(default)]
    pub misses: u64,
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
    /// TLS runs: the negotiated version and cipher suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<String>,
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
    /// Read hits of each target, over all rounds.
    #[serde(default)]
    pub hits: Vec<u64>,
    /// Read misses of each target, over all rounds.
    #[serde(default)]
    pub misses: Vec<u64>,
}

/// How far apart (in percentage points) two targets' hit ratios may be before
/// a comparison warns. A miss costs a server less than a hit (no value to
/// copy or send), so once the servers answered different reads the figures
/// stop comparing like with like; targets that both hold the data agree to
/// the key (both 100%), so 5 points is far above noise yet catches a server
/// that evicted a twentieth of the data.
pub const HIT_RATIO_WARN_POINTS: f64 = 5.0;

/// The share of read keys that hit, or `None` when nothing was read.
pub fn hit_ratio(hits: u64, misses: u64) -> Option<f64> {
    let reads = hits + misses;
    (reads > 0).then(|| hits as f64 / reads as f64)
}

impl RunReport {
    pub fn hit_ratio(&self) -> Option<f64> {
        hit_ratio(self.hits, self.misses)
    }
}

impl Comparison {
    /// Each target's hit ratio (`None` where it read nothing).
    pub fn hit_ratios(&self) -> Vec<Option<f64>> {
        (0..self.targets.len())
            .map(|t| {
                hit_ratio(
                    self.hits.get(t).copied().unwrap_or(0),
                    self.misses.get(t).copied().unwrap_or(0),
                )
            })
            .collect()
    }

    /// A warning when the targets' hit ratios differ by more than
    /// [`HIT_RATIO_WARN_POINTS`]: their figures measured different work.
    pub fn hit_ratio_warning(&self) -> Option<String> {
        let ratios = self.hit_ratios();
        let known: Vec<f64> = ratios.iter().flatten().copied().collect();
        let lowest = known.iter().copied().fold(f64::INFINITY, f64::min);
        let highest = known.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        // The epsilon keeps 95% against 100% (5.000000000000004 points) within.
        if known.len() < 2 || (highest - lowest) * 100.0 <= HIT_RATIO_WARN_POINTS + 1e-9 {
            return None;
        }
        let each = self
            .targets
            .iter()
            .zip(&ratios)
            .filter_map(|(name, ratio)| ratio.map(|r| format!("{name} {:.1}%", r * 100.0)))
            .collect::<Vec<_>>()
            .join(", ");
        Some(format!(
            "WARNING: {}: hit ratios differ ({each}), more than {HIT_RATIO_WARN_POINTS} points apart; \
             the servers did not answer the same reads, so these figures do not compare. \
             Give every server room for the data (memcached: -m).",
            self.workload
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comparison(hits: &[u64], misses: &[u64]) -> Comparison {
        Comparison {
            workload: "004 / read".into(),
            targets: vec!["kura".into(), "memcached".into()],
            hits: hits.to_vec(),
            misses: misses.to_vec(),
            ..Comparison::default()
        }
    }

    #[test]
    fn hit_ratios_more_than_five_points_apart_warn() {
        assert_eq!(hit_ratio(0, 0), None);
        assert_eq!(hit_ratio(3, 1), Some(0.75));
        // Seed 004 against memcached's default 64 MB: 1 GB written, most reads miss.
        let c = comparison(&[315_000, 32_481], &[0, 282_519]);
        let warning = c.hit_ratio_warning().expect("a warning");
        assert!(warning.starts_with("WARNING: 004 / read: hit ratios differ"));
        assert!(warning.contains("kura 100.0%, memcached 10.3%"));
        // 5.0 points apart is within the threshold; 5.1 is not.
        assert!(comparison(&[1000, 950], &[0, 50])
            .hit_ratio_warning()
            .is_none());
        assert!(comparison(&[1000, 949], &[0, 51])
            .hit_ratio_warning()
            .is_some());
        // Both servers miss alike: the figures compare.
        assert!(comparison(&[500, 510], &[500, 490])
            .hit_ratio_warning()
            .is_none());
        // Phases without reads (writes) never warn.
        assert!(comparison(&[0, 0], &[0, 0]).hit_ratio_warning().is_none());
        assert!(Comparison::default().hit_ratio_warning().is_none());
    }
}
