//! What a run prints: mcperf's summary, line for line where mcperf has the
//! figure, then HDR percentiles; and the conversion into the report shape.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::engine::{Measured, Workload};
use super::results::{OpLatency, RunReport, TimelinePoint};

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

/// avg/min/max/stddev of a histogram in milliseconds, mcperf's way.
fn stats_ms(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "avg 0.0 min 0.0 max 0.0 stddev 0.00".into();
    }
    format!(
        "avg {:.1} min {:.1} max {:.1} stddev {:.2}",
        ms(h.mean()),
        ms(h.min() as f64),
        ms(h.max() as f64),
        ms(h.stdev())
    )
}

fn stats_bytes(h: &Histogram<u64>) -> String {
    if h.is_empty() {
        return "avg 0.0 min 0.0 max 0.0 stddev 0.00".into();
    }
    format!(
        "avg {:.1} min {:.1} max {:.1} stddev {:.2}",
        h.mean(),
        h.min() as f64,
        h.max() as f64,
        h.stdev()
    )
}

/// All operations' latencies in one histogram.
pub fn combined(measured: &Measured) -> Histogram<u64> {
    let mut all = super::engine::latency_histogram();
    for histogram in measured.latency.values() {
        let _ = all.add(histogram);
    }
    all
}

/// mcperf's summary, followed by percentiles from the HDR histograms.
pub fn mcperf_summary(workload: &Workload, m: &Measured) -> String {
    let secs = m.elapsed.as_secs_f64().max(1e-9);
    let all = combined(m);
    let kind = |name: &str| {
        m.kinds
            .iter()
            .filter(|(k, _)| k.name() == name)
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    let error = |name: &str| m.errors.get(name).copied().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Total: connections {} requests {} responses {} test-duration {:.3} s\n",
        m.connections_opened, m.requests, m.responses, secs
    );
    let conn_rate = m.connections_opened as f64 / secs;
    let _ = writeln!(
        out,
        "Connection rate: {:.1} conn/s ({:.1} ms/conn <= {} concurrent)",
        conn_rate,
        if conn_rate > 0.0 {
            1000.0 / conn_rate
        } else {
            0.0
        },
        workload.clients * workload.servers.len() as u64
    );
    let _ = writeln!(
        out,
        "Connection time [ms]: {}",
        stats_ms(&m.connection_times)
    );
    let _ = writeln!(out, "Connect time [ms]: {}\n", stats_ms(&m.connect_times));
    let request_rate = m.requests as f64 / secs;
    let _ = writeln!(
        out,
        "Request rate: {:.1} req/s ({:.4} ms/req)",
        request_rate,
        if request_rate > 0.0 {
            1000.0 / request_rate
        } else {
            0.0
        }
    );
    let _ = writeln!(out, "Request size [B]: {}\n", stats_bytes(&m.request_sizes));
    let response_rate = m.responses as f64 / secs;
    let _ = writeln!(
        out,
        "Response rate: {:.1} rsp/s ({:.4} ms/rsp)",
        response_rate,
        if response_rate > 0.0 {
            1000.0 / response_rate
        } else {
            0.0
        }
    );
    let _ = writeln!(out, "Response size [B]: {}", stats_bytes(&m.response_sizes));
    let _ = writeln!(out, "Response time [ms]: {}", stats_ms(&all));
    let q = |p: f64| {
        if all.is_empty() {
            0.0
        } else {
            ms(all.value_at_quantile(p) as f64)
        }
    };
    let _ = writeln!(
        out,
        "Response time [ms]: p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} p99.99 {:.3} max {:.3}",
        q(0.50),
        q(0.90),
        q(0.99),
        q(0.999),
        q(0.9999),
        if all.is_empty() {
            0.0
        } else {
            ms(all.max() as f64)
        }
    );
    let _ = writeln!(
        out,
        "Response type: stored {} not_stored {} exists {} not_found {}",
        kind("stored"),
        kind("not_stored"),
        kind("exists"),
        kind("not_found")
    );
    let _ = writeln!(
        out,
        "Response type: num {} deleted {} end {} value {} touched {}",
        kind("num"),
        kind("deleted"),
        kind("end"),
        kind("value"),
        kind("touched")
    );
    let _ = writeln!(
        out,
        "Response type: error {} client_error {} server_error {}\n",
        kind("error"),
        kind("client_error"),
        kind("server_error")
    );
    let _ = writeln!(
        out,
        "Errors: total {} client-timo {} socket-timo 0 connrefused {} connreset {}",
        m.error_total(),
        error("timeout"),
        error("connrefused"),
        error("connreset")
    );
    let _ = writeln!(
        out,
        "Errors: fd-unavail {} ftab-full 0 addrunavail {} corrupt {} protocol {} other {}\n",
        error("fd-unavail"),
        error("addrunavail"),
        error("corrupt"),
        error("protocol"),
        error("other") + error("unsupported")
    );
    let (user, system) = (m.cpu_user_secs, m.cpu_system_secs);
    let _ = writeln!(
        out,
        "CPU time [s]: user {:.2} system {:.2} (user {:.1}% system {:.1}% total {:.1}%)",
        user,
        system,
        100.0 * user / secs,
        100.0 * system / secs,
        100.0 * (user + system) / secs
    );
    let bytes = (m.bytes_sent + m.bytes_received) as f64;
    let _ = writeln!(
        out,
        "Net I/O: bytes {:.1} MB rate {:.1} MB/s ({:.1} Mbps)",
        bytes / 1e6,
        bytes / 1e6 / secs,
        bytes * 8.0 / 1e6 / secs
    );
    if let Some(ratio) = super::results::hit_ratio(m.hits, m.misses) {
        let _ = writeln!(out, "Reads: {}", hits_text(m.hits, m.misses, ratio));
    }
    if let Some(tls) = &workload.tls {
        let session = m.tls_session.as_deref().unwrap_or("no session");
        let _ = writeln!(out, "TLS: {session}, {}", tls.verification());
    }
    if let Some(failure) = &m.tls_failure {
        let _ = writeln!(out, "TLS failure: {failure}");
    }
    if m.latency.len() > 1 {
        out.push('\n');
        for (op, h) in &m.latency {
            let q = |p: f64| ms(h.value_at_quantile(p) as f64);
            let _ = writeln!(
                out,
                "{:<8} {:>10} responses  p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ms",
                op.name(),
                h.len(),
                q(0.5),
                q(0.99),
                q(0.999),
                ms(h.max() as f64)
            );
        }
    }
    out
}

fn op_latency(op: &str, h: &Histogram<u64>) -> OpLatency {
    if h.is_empty() {
        return OpLatency {
            op: op.to_string(),
            ..OpLatency::default()
        };
    }
    let us = |ns: f64| ns / 1e3;
    let q = |p: f64| us(h.value_at_quantile(p) as f64);
    // Buckets growing by 2^(1/4): fine enough to draw, small enough to store.
    let mut histogram = Vec::new();
    for v in h.iter_log(1000, 2f64.powf(0.25)) {
        if v.count_since_last_iteration() > 0 {
            histogram.push((
                us(v.value_iterated_to() as f64),
                v.count_since_last_iteration(),
            ));
        }
    }
    OpLatency {
        op: op.to_string(),
        count: h.len(),
        mean_us: us(h.mean()),
        stddev_us: us(h.stdev()),
        min_us: us(h.min() as f64),
        p50_us: q(0.5),
        p90_us: q(0.9),
        p99_us: q(0.99),
        p999_us: q(0.999),
        p9999_us: q(0.9999),
        max_us: us(h.max() as f64),
        histogram,
    }
}

/// How long timeline interval `index` really lasted in a run of `elapsed`
/// seconds, or `None` to leave it out of the timeline. Every interval is
/// `interval` long but the last, which ends with the run: its rate must be
/// taken over its real length, or a run of 10.4 s draws its last 0.4 s as
/// throughput falling by 60%. A last interval shorter than a tenth of an
/// interval is left out, as is one that starts after the run ended (answers
/// read just after the deadline): a rate over a sliver is noise, not a trend.
pub fn interval_length(index: usize, interval: f64, elapsed: f64) -> Option<f64> {
    if interval.is_nan() || interval <= 0.0 {
        return None;
    }
    let start = index as f64 * interval;
    let length = (elapsed - start).min(interval);
    (length >= interval / 10.0).then_some(length)
}

/// The report shape of a run.
pub fn run_report(name: &str, workload: &Workload, m: &Measured) -> RunReport {
    let secs = m.elapsed.as_secs_f64().max(1e-9);
    let mut ops: Vec<OpLatency> = m
        .latency
        .iter()
        .map(|(op, h)| op_latency(op.name(), h))
        .collect();
    ops.push(op_latency("all", &combined(m)));
    let interval = workload.interval.as_secs_f64();
    let timeline = m
        .timeline
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            let length = interval_length(i, interval, secs)?;
            let q = |p: f64| {
                if h.is_empty() {
                    0.0
                } else {
                    h.value_at_quantile(p) as f64 / 1e3
                }
            };
            Some(TimelinePoint {
                t_secs: i as f64 * interval + length,
                throughput: h.len() as f64 / length,
                p50_us: q(0.5),
                p99_us: q(0.99),
                p999_us: q(0.999),
                max_us: if h.is_empty() {
                    0.0
                } else {
                    h.max() as f64 / 1e3
                },
            })
        })
        .collect();
    let (user, system) = (m.cpu_user_secs, m.cpu_system_secs);
    RunReport {
        name: name.to_string(),
        target: workload
            .servers
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(","),
        protocol: workload.protocol.name().to_string(),
        loop_kind: if workload.call_rate > 0.0 {
            "open"
        } else {
            "closed"
        }
        .to_string(),
        duration_secs: secs,
        connections: m.connections_opened,
        requests: m.requests,
        responses: m.responses,
        throughput: m.responses as f64 / secs,
        response_types: m
            .kinds
            .iter()
            .map(|(k, n)| (k.name().to_string(), *n))
            .collect(),
        hits: m.hits,
        misses: m.misses,
        errors: m.errors.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        ops,
        timeline,
        cpu_user_secs: user,
        cpu_system_secs: system,
        bytes_sent: m.bytes_sent,
        bytes_received: m.bytes_received,
        tls: m.tls_session.clone(),
    }
}

/// One line per scenario phase: throughput, µs per operation, percentiles.
pub fn scenario_line(run: &RunReport) -> String {
    let all = run
        .ops
        .iter()
        .find(|o| o.op == "all")
        .cloned()
        .unwrap_or_default();
    let errors: u64 = run.errors.iter().map(|(_, n)| n).sum();
    let mut line = format!(
        "{:<32} {:>10} responses {:>12.0} ops/s  {:>9.1} µs/op  p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} µs  errors {}",
        run.name, run.responses, run.throughput, all.mean_us, all.p50_us, all.p99_us, all.p999_us, all.max_us, errors
    );
    if let Some(ratio) = run.hit_ratio() {
        let _ = write!(line, "  {}", hits_text(run.hits, run.misses, ratio));
    }
    line
}

/// `hits 9,000 misses 1,000 (hit ratio 90.0%)`.
pub fn hits_text(hits: u64, misses: u64, ratio: f64) -> String {
    format!(
        "hits {hits} misses {misses} (hit ratio {:.1}%)",
        ratio * 100.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1..=1000 µs, each once: the percentiles are the values themselves.
    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut h = super::super::engine::latency_histogram();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let op = op_latency("get", &h);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.002 + 0.001;
        assert_eq!(op.count, 1000);
        assert!(close(op.mean_us, 500.5), "mean {}", op.mean_us);
        assert!(close(op.min_us, 1.0) && close(op.max_us, 1000.0));
        assert!(close(op.p50_us, 500.0), "p50 {}", op.p50_us);
        assert!(close(op.p90_us, 900.0), "p90 {}", op.p90_us);
        assert!(close(op.p99_us, 990.0), "p99 {}", op.p99_us);
        assert!(close(op.p999_us, 999.0), "p99.9 {}", op.p999_us);
        assert_eq!(op.histogram.iter().map(|(_, n)| n).sum::<u64>(), 1000);
        // Stddev of a discrete uniform 1..=1000: sqrt((1000² - 1) / 12).
        assert!(
            (op.stddev_us - 288.67).abs() < 1.0,
            "stddev {}",
            op.stddev_us
        );
    }

    #[test]
    fn the_last_interval_is_measured_over_its_real_length() {
        // Full intervals are a whole interval long.
        assert_eq!(interval_length(0, 1.0, 10.4), Some(1.0));
        assert_eq!(interval_length(9, 1.0, 10.4), Some(1.0));
        // The last one ends with the run.
        let last = interval_length(10, 1.0, 10.4).unwrap();
        assert!((last - 0.4).abs() < 1e-9, "{last}");
        // Answers read just after the deadline of a 10 s run start an 11th
        // interval that has no length: left out, not drawn as a fall to zero.
        assert_eq!(interval_length(10, 1.0, 10.0), None);
        // A sliver shorter than a tenth of an interval is left out too.
        assert_eq!(interval_length(10, 1.0, 10.05), None);
        assert!(interval_length(10, 1.0, 10.15).is_some());
        assert_eq!(interval_length(0, 0.0, 10.0), None);
    }

    /// A steady 1,000 responses/s over 10.4 s, plus 3 answers read after the
    /// deadline: every point of the timeline says 1,000/s.
    #[test]
    fn a_steady_run_has_a_flat_timeline_to_its_end() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            load: super::super::LoadArgs,
        }
        let cli = <Cli as clap::Parser>::parse_from(["kura-bench", "--duration", "10.4s"]);
        let workload = cli.load.workload().unwrap();
        let mut m = Measured::new(std::time::Instant::now());
        m.elapsed = std::time::Duration::from_secs_f64(10.4);
        let mut counts = vec![1000u64; 10];
        counts.extend([400, 3]);
        for n in counts {
            let mut h = super::super::engine::latency_histogram();
            h.record_n(100_000, n).unwrap();
            m.timeline.push(h);
        }
        let report = run_report("steady", &workload, &m);
        let points: Vec<(f64, f64)> = report
            .timeline
            .iter()
            .map(|p| (p.t_secs, p.throughput))
            .collect();
        assert_eq!(points.len(), 11, "{points:?}");
        for (t, rate) in &points {
            assert!(
                (rate - 1000.0).abs() < 1e-6,
                "{rate}/s at {t} s: {points:?}"
            );
        }
        assert!((points[10].0 - 10.4).abs() < 1e-9, "{points:?}");
    }

    #[test]
    fn an_empty_histogram_reports_zeros() {
        let op = op_latency("set", &super::super::engine::latency_histogram());
        assert_eq!((op.count, op.p99_us, op.max_us), (0, 0.0, 0.0));
    }
}
