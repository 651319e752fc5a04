//! `kura bench --html`: the report as one self-contained HTML5 page.
//!
//! Everything is inline: the stylesheet sits in a `<style>` element and the
//! charts are SVG drawn here. No scripts, fonts, images or other files, so the
//! page opens offline. Every chart is an `<svg class="chart">` whose first child
//! is a `<title>`. Every string from the report is escaped. NaN and infinite
//! figures are left out of the charts (and of log axes, zeros too) and shown as
//! "–" in the tables.
//!
//! Charts: three per run (throughput over time, latency percentiles over time,
//! latency distribution per operation); two more when there are several runs
//! (throughput and p99 latency by run); one more with a comparison (median
//! ratios). A chart with nothing to draw is still drawn, saying "no data", so
//! the count only depends on the number of runs and on the comparison.

use std::fmt::Write as _;

use super::results::{Comparison, OpLatency, Report, RunReport};

/// Writing into a `String` cannot fail.
macro_rules! w {
    ($dst:expr, $($arg:tt)*) => {{
        let _ = write!($dst, $($arg)*);
    }};
}

/// The whole report as an HTML document.
pub fn render(report: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024 + report.runs.len() * 48 * 1024);
    let title = if report.title.trim().is_empty() {
        "kura bench"
    } else {
        report.title.as_str()
    };
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    w!(out, "<title>{}</title>\n", esc(title));
    out.push_str("<style>\n");
    out.push_str(CSS);
    out.push_str("</style>\n</head>\n<body>\n");

    header(&mut out, report, title);
    summary(&mut out, &report.runs);
    if report.runs.len() >= 2 {
        across_runs(&mut out, &report.runs);
    }
    for (i, c) in report.comparisons.iter().enumerate() {
        comparison(&mut out, c, i);
    }
    for (i, run) in report.runs.iter().enumerate() {
        run_section(&mut out, i, run);
    }
    out.push_str("</body>\n</html>\n");
    out
}

const CSS: &str = r#":root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1480px; padding: 20px 28px 48px; background: #f4f6f9; color: #1f2933;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 24px; margin: 0 0 10px; }
h2 { font-size: 18px; margin: 30px 0 12px; padding-bottom: 6px; border-bottom: 1px solid #d5dbe2; }
h2 .idx { color: #7b8794; font-weight: 500; margin-right: 6px; }
h3 { font-size: 13px; margin: 4px 0 6px; color: #3e4c59; text-transform: uppercase; letter-spacing: .04em; }
a { color: #2f6690; text-decoration: none; }
a:hover { text-decoration: underline; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; margin: 0; }
dl.meta dt { color: #616e7c; }
dl.meta dd { margin: 0; min-width: 0; }
code { font: 12.5px/1.5 ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  background: #e9edf2; padding: 1px 6px; border-radius: 4px; white-space: pre-wrap; word-break: break-all; }
nav { margin-top: 12px; display: flex; flex-wrap: wrap; gap: 6px 8px; align-items: baseline; }
nav a { background: #fff; border: 1px solid #d5dbe2; border-radius: 14px; padding: 1px 10px; font-size: 13px; }
p.note, p.facts { color: #52606d; margin: 0 0 12px; }
.facts b { color: #1f2933; font-weight: 600; }
.box { background: #fff; border: 1px solid #d5dbe2; border-radius: 8px; overflow-x: auto; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(560px, 100%), 1fr)); gap: 16px; align-items: start; }
.panel { background: #fff; border: 1px solid #d5dbe2; border-radius: 8px; padding: 10px 12px; margin: 0; min-width: 0; overflow-x: auto; }
svg.chart { display: block; width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 13px; width: 100%; }
th, td { padding: 5px 9px; border-bottom: 1px solid #e4e7eb; text-align: right; white-space: nowrap; }
th { font-weight: 600; color: #3e4c59; background: #f0f3f7; }
td { font-variant-numeric: tabular-nums; }
tr > :first-child { text-align: left; }
td.l, th.l { text-align: left; }
tbody tr:hover td { background: #f8fafc; }
tr.total td { font-weight: 600; border-top: 1px solid #c5ccd3; }
tfoot th, tfoot td { font-weight: 600; background: #f7f9fb; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
.ratio { color: #7b8794; font-size: 12px; margin-left: 4px; }
.bad { color: #c62828; font-weight: 600; }
.good { color: #2e7d32; }
.muted { color: #7b8794; }
.two { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; margin-top: 14px; }
.two > div { min-width: 0; overflow-x: auto; }
.two table { width: 100%; }
.scroll { max-width: 100%; overflow-x: auto; }
table.lat { font-size: 12px; }
table.lat th, table.lat td { padding: 4px 6px; }
p.warn { background: #fff4e5; border: 1px solid #f0b45a; border-radius: 6px; padding: 8px 12px; color: #7a4100; font-weight: 600; }
"#;

// ---------------------------------------------------------------------------
// Sections

fn header(out: &mut String, report: &Report, title: &str) {
    out.push_str("<header>\n");
    w!(out, "<h1>{}</h1>\n<dl class=\"meta\">\n", esc(title));
    if !report.command.is_empty() {
        w!(
            out,
            "<dt>Command</dt><dd><code>{}</code></dd>\n",
            esc(&report.command)
        );
    }
    if !report.machine.is_empty() {
        w!(out, "<dt>Machine</dt><dd>{}</dd>\n", esc(&report.machine));
    }
    w!(out, "<dt>Runs</dt><dd>{}</dd>\n</dl>\n", report.runs.len());
    if report.runs.len() > 1 || !report.comparisons.is_empty() {
        out.push_str("<nav><span class=\"muted\">Jump to:</span>");
        if report.runs.len() > 1 {
            out.push_str("<a href=\"#across-runs\">across runs</a>");
        }
        if !report.comparisons.is_empty() {
            out.push_str("<a href=\"#comparison-0\">comparison</a>");
        }
        for (i, run) in report.runs.iter().enumerate() {
            w!(
                out,
                "<a href=\"#run-{}\"><span class=\"swatch\" style=\"background:{}\"></span>{}</a>",
                i + 1,
                color(i),
                esc(&trunc(&run_name(run, i), 40))
            );
        }
        out.push_str("</nav>\n");
    }
    out.push_str("</header>\n");
}

fn summary(out: &mut String, runs: &[RunReport]) {
    out.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n");
    if runs.is_empty() {
        out.push_str("<p class=\"note\">No runs were recorded.</p>\n</section>\n");
        return;
    }
    out.push_str(
        "<p class=\"note\">Latency percentiles are those of all operations together.</p>\n",
    );
    out.push_str(
        "<div class=\"box\"><table>\n<thead><tr><th>Run</th><th class=\"l\">Target</th>\
         <th class=\"l\">Protocol</th><th class=\"l\">Loop</th><th>Connections</th>\
         <th>Duration</th><th>Responses</th><th>Throughput (ops/s)</th><th>p50</th>\
         <th>p99</th><th>p99.9</th><th>max</th><th>Errors</th></tr></thead>\n<tbody>\n",
    );
    for (i, run) in runs.iter().enumerate() {
        let all = op_all(run);
        let lat = |f: fn(&OpLatency) -> f64| all.map_or_else(|| "–".to_string(), |o| fmt_lat(f(o)));
        let errors = errors_total(run);
        w!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span><a href=\"#run-{}\" title=\"{}\">{}</a></td>\
             <td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{}>{}</td></tr>\n",
            color(i),
            i + 1,
            esc(&run_name(run, i)),
            esc(&trunc(&run_name(run, i), 32)),
            esc(&run.target),
            esc(&run.protocol),
            esc(&run.loop_kind),
            fmt_int(run.connections),
            fmt_secs(run.duration_secs),
            fmt_int(run.responses),
            fmt_rate(run.throughput),
            lat(|o| o.p50_us),
            lat(|o| o.p99_us),
            lat(|o| o.p999_us),
            lat(|o| o.max_us),
            if errors > 0 { " class=\"bad\"" } else { "" },
            fmt_int(errors),
        );
    }
    out.push_str("</tbody></table></div>\n</section>\n");
}

fn across_runs(out: &mut String, runs: &[RunReport]) {
    out.push_str("<section id=\"across-runs\">\n<h2>Across runs</h2>\n<div class=\"grid\">\n");
    let labels: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| run_name(r, i))
        .collect();
    let colors: Vec<&'static str> = (0..runs.len()).map(color).collect();

    out.push_str("<figure class=\"panel\">\n");
    bar_chart(
        out,
        &BarChart {
            title: "Throughput by run".into(),
            desc: "Throughput by run, in responses per second".into(),
            labels: labels.clone(),
            values: runs.iter().map(|r| r.throughput).collect(),
            colors: colors.clone(),
            value_label: |v| format!("{}/s", fmt_rate(v)),
            tick: tick_si,
            x_label: "responses per second".into(),
            reference: None,
        },
    );
    out.push_str("</figure>\n<figure class=\"panel\">\n");
    bar_chart(
        out,
        &BarChart {
            title: "p99 latency by run".into(),
            desc: "p99 latency of all operations by run".into(),
            labels,
            values: runs
                .iter()
                .map(|r| op_all(r).map_or(f64::NAN, |o| o.p99_us))
                .collect(),
            colors,
            value_label: fmt_lat,
            tick: tick_lat,
            x_label: "p99 latency, all operations".into(),
            reference: None,
        },
    );
    out.push_str("</figure>\n</div>\n</section>\n");
}

fn comparison(out: &mut String, c: &Comparison, index: usize) {
    let n_targets = c
        .targets
        .len()
        .max(c.medians.len())
        .max(c.median_ratios.len())
        .max(c.rounds.iter().map(Vec::len).max().unwrap_or(0));
    let target = |t: usize| {
        c.targets
            .get(t)
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| format!("target {}", t + 1))
    };
    w!(out, "<section id=\"comparison-{index}\">\n");
    if c.workload.is_empty() {
        out.push_str("<h2>Comparison</h2>\n");
    } else {
        w!(out, "<h2>Comparison: {}</h2>\n", esc(&c.workload));
    }
    w!(
        out,
        "<p class=\"note\">Metric: <b>{}</b>. Targets ran in turn, round by round; ratios are \
         target ÷ baseline, the baseline being <b>{}</b>.</p>\n",
        if c.metric.is_empty() {
            "–".to_string()
        } else {
            esc(&c.metric)
        },
        esc(&target(0)),
    );
    if let Some(warning) = c.hit_ratio_warning() {
        w!(out, "<p class=\"warn\">{}</p>\n", esc(&warning));
    }
    out.push_str("<div class=\"grid\">\n<div class=\"panel\">\n<table>\n<thead><tr><th>Round</th>");
    for t in 0..n_targets {
        w!(out, "<th>{}</th>", esc(&trunc(&target(t), 40)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (r, row) in c.rounds.iter().enumerate() {
        w!(out, "<tr><td>{}</td>", r + 1);
        let base = row.first().copied().unwrap_or(f64::NAN);
        for t in 0..n_targets {
            match row.get(t) {
                Some(&v) => {
                    w!(out, "<td>{}", fmt_num(v));
                    if t > 0 {
                        let ratio = v / base;
                        if ratio.is_finite() {
                            w!(out, "<span class=\"ratio\">{}</span>", fmt_ratio(ratio));
                        }
                    }
                    out.push_str("</td>");
                }
                None => out.push_str("<td class=\"muted\">–</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n<tfoot>\n<tr><th>Median</th>");
    for t in 0..n_targets {
        w!(
            out,
            "<td>{}</td>",
            c.medians.get(t).map_or_else(|| "–".into(), |&v| fmt_num(v))
        );
    }
    out.push_str("</tr>\n<tr><th>Median ratio</th>");
    for t in 0..n_targets {
        w!(
            out,
            "<td>{}</td>",
            c.median_ratios
                .get(t)
                .map_or_else(|| "–".into(), |&v| fmt_ratio(v))
        );
    }
    let hit_ratios = c.hit_ratios();
    if hit_ratios.iter().any(Option::is_some) {
        out.push_str("</tr>\n<tr><th>Read hit ratio</th>");
        for t in 0..n_targets {
            match hit_ratios.get(t).copied().flatten() {
                Some(r) => w!(
                    out,
                    "<td>{}<span class=\"ratio\">{} / {}</span></td>",
                    fmt_pct(r * 100.0),
                    fmt_int(c.hits[t]),
                    fmt_int(c.misses[t])
                ),
                None => out.push_str("<td class=\"muted\">–</td>"),
            }
        }
    }
    out.push_str("</tr>\n</tfoot>\n</table>\n</div>\n<figure class=\"panel\">\n");
    let labels: Vec<String> = (0..c.median_ratios.len()).map(target).collect();
    let colors: Vec<&'static str> = (0..labels.len())
        .map(|t| if t == 0 { BASELINE_GREY } else { color(t) })
        .collect();
    bar_chart(
        out,
        &BarChart {
            title: "Median ratio to the baseline".into(),
            desc: format!(
                "Median ratio of {} to the baseline {}",
                or_dash(&c.metric),
                target(0)
            ),
            labels,
            values: c.median_ratios.clone(),
            colors,
            value_label: fmt_ratio,
            tick: tick_ratio,
            x_label: format!("target ÷ {}", trunc(&target(0), 30)),
            reference: Some((1.0, "baseline".into())),
        },
    );
    out.push_str("</figure>\n</div>\n</section>\n");
}

fn run_section(out: &mut String, i: usize, run: &RunReport) {
    let name = run_name(run, i);
    w!(
        out,
        "<section class=\"run\" id=\"run-{}\">\n<h2><span class=\"swatch\" style=\"background:{}\"></span>\
         <span class=\"idx\">Run {}</span>{}</h2>\n",
        i + 1,
        color(i),
        i + 1,
        esc(&name)
    );
    let mut facts: Vec<String> = Vec::new();
    if !run.target.is_empty() {
        facts.push(format!("target <b>{}</b>", esc(&run.target)));
    }
    if !run.protocol.is_empty() {
        facts.push(format!("protocol <b>{}</b>", esc(&run.protocol)));
    }
    if !run.loop_kind.is_empty() {
        facts.push(format!("<b>{}</b> loop", esc(&run.loop_kind)));
    }
    facts.push(format!("<b>{}</b> connections", fmt_int(run.connections)));
    facts.push(format!("<b>{}</b>", fmt_secs(run.duration_secs)));
    facts.push(format!(
        "<b>{}</b> requests, <b>{}</b> responses",
        fmt_int(run.requests),
        fmt_int(run.responses)
    ));
    facts.push(format!("<b>{}</b> ops/s", fmt_rate(run.throughput)));
    if let Some(ratio) = run.hit_ratio() {
        facts.push(format!(
            "reads: <b>{}</b> hits, <b>{}</b> misses (hit ratio <b>{}</b>)",
            fmt_int(run.hits),
            fmt_int(run.misses),
            fmt_pct(ratio * 100.0)
        ));
    }
    facts.push(format!(
        "sent <b>{}</b>, received <b>{}</b>",
        fmt_bytes(run.bytes_sent),
        fmt_bytes(run.bytes_received)
    ));
    facts.push(format!(
        "generator CPU <b>{}</b> user, <b>{}</b> system",
        fmt_secs(run.cpu_user_secs),
        fmt_secs(run.cpu_system_secs)
    ));
    w!(
        out,
        "<p class=\"facts\">{}</p>\n<div class=\"grid\">\n",
        facts.join(" · ")
    );

    out.push_str("<figure class=\"panel\">\n");
    throughput_chart(out, run, &name);
    out.push_str("</figure>\n<figure class=\"panel\">\n");
    latency_timeline_chart(out, run, &name);
    out.push_str("</figure>\n<figure class=\"panel\">\n");
    distribution_chart(out, run, &name);
    out.push_str("</figure>\n<div class=\"panel\">\n");
    run_tables(out, run);
    out.push_str("</div>\n</div>\n</section>\n");
}

fn run_tables(out: &mut String, run: &RunReport) {
    out.push_str("<h3>Latency by operation</h3>\n");
    if run.ops.is_empty() {
        out.push_str("<p class=\"note\">No latencies were recorded.</p>\n");
    } else {
        out.push_str(
            "<div class=\"scroll\"><table class=\"lat\">\n<thead><tr><th>Op</th><th>Count</th>\
             <th>Mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>p99.99</th>\
             <th>Max</th></tr></thead>\n<tbody>\n",
        );
        for op in &run.ops {
            w!(
                out,
                "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>\n",
                if op.op == "all" && run.ops.len() > 1 {
                    " class=\"total\""
                } else {
                    ""
                },
                esc(&op.op),
                fmt_int(op.count),
                fmt_lat(op.mean_us),
                fmt_lat(op.p50_us),
                fmt_lat(op.p90_us),
                fmt_lat(op.p99_us),
                fmt_lat(op.p999_us),
                fmt_lat(op.p9999_us),
                fmt_lat(op.max_us),
            );
        }
        out.push_str("</tbody>\n</table></div>\n");
    }

    out.push_str("<div class=\"two\">\n<div>\n<h3>Responses</h3>\n");
    let responses: u64 = run
        .response_types
        .iter()
        .fold(0u64, |a, (_, n)| a.saturating_add(*n));
    if run.response_types.is_empty() {
        out.push_str("<p class=\"note\">None recorded.</p>\n");
    } else {
        out.push_str(
            "<table>\n<thead><tr><th>Type</th><th>Count</th><th>Share</th></tr></thead>\n<tbody>\n",
        );
        for (kind, n) in &run.response_types {
            let share = if responses > 0 {
                *n as f64 * 100.0 / responses as f64
            } else {
                f64::NAN
            };
            let bad = matches!(kind.as_str(), "error" | "client_error" | "server_error") && *n > 0;
            w!(
                out,
                "<tr><td{}>{}</td><td>{}</td><td>{}</td></tr>\n",
                if bad { " class=\"bad\"" } else { "" },
                esc(kind),
                fmt_int(*n),
                fmt_pct(share)
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("</div>\n<div>\n<h3>Errors</h3>\n");
    let errors = errors_total(run);
    if errors == 0 {
        out.push_str("<p class=\"note good\">No errors.</p>\n");
    } else {
        out.push_str("<table>\n<thead><tr><th>Kind</th><th>Count</th></tr></thead>\n<tbody>\n");
        for (kind, n) in run.errors.iter().filter(|(_, n)| *n > 0) {
            w!(
                out,
                "<tr><td>{}</td><td class=\"bad\">{}</td></tr>\n",
                esc(kind),
                fmt_int(*n)
            );
        }
        w!(
            out,
            "</tbody>\n<tfoot><tr><th>Total</th><td class=\"bad\">{}</td></tr></tfoot>\n</table>\n",
            fmt_int(errors)
        );
    }
    out.push_str("</div>\n</div>\n");
}

// ---------------------------------------------------------------------------
// The three charts of a run

fn throughput_chart(out: &mut String, run: &RunReport, name: &str) {
    let pts: Vec<(f64, f64)> = run
        .timeline
        .iter()
        .filter(|p| p.t_secs.is_finite() && p.throughput.is_finite())
        .map(|p| (p.t_secs, p.throughput))
        .collect();
    let mean = run.throughput;
    let draw_mean = !pts.is_empty() && mean.is_finite() && mean > 0.0;
    let (x, y) = if pts.is_empty() {
        (
            linear_axis(0.0, 1.0, tick_plain),
            linear_axis(0.0, 1.0, tick_si),
        )
    } else {
        let (x0, x1) = min_max(pts.iter().map(|p| p.0).chain([0.0]));
        let mut ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
        ys.push(0.0);
        if draw_mean {
            ys.push(mean);
        }
        let (y0, y1) = min_max(ys.into_iter());
        (
            linear_axis(x0, x1, tick_plain),
            linear_axis(y0, y1 * 1.04, tick_si),
        )
    };
    let mut series = Vec::new();
    if draw_mean {
        let (x0, x1) = min_max(pts.iter().map(|p| p.0));
        series.push(Series {
            name: format!("whole run: {}/s", fmt_rate(mean)),
            color: "#8a949e",
            dashed: true,
            points: vec![(x0, mean), (x1, mean)],
        });
    }
    series.push(Series {
        name: "per interval".into(),
        color: color(0),
        dashed: false,
        points: pts,
    });
    series.reverse();
    line_chart(
        out,
        &LineChart {
            title: "Throughput over time".into(),
            desc: format!("Throughput over time, {name}"),
            x,
            y,
            x_label: "time since the start of the measured phase (s)".into(),
            y_label: "responses per second".into(),
            series,
        },
    );
}

fn latency_timeline_chart(out: &mut String, run: &RunReport, name: &str) {
    type Pick = fn(&super::results::TimelinePoint) -> f64;
    let defs: [(&str, &'static str, bool, Pick); 4] = [
        ("p50", "#4e79a7", false, |p| p.p50_us),
        ("p99", "#f28e2b", false, |p| p.p99_us),
        ("p99.9", "#e15759", false, |p| p.p999_us),
        ("max", "#6b7480", true, |p| p.max_us),
    ];
    let series: Vec<Series> = defs
        .iter()
        .map(|(label, col, dashed, pick)| Series {
            name: (*label).into(),
            color: col,
            dashed: *dashed,
            points: run
                .timeline
                .iter()
                .map(|p| (p.t_secs, pick(p)))
                .filter(|&(t, v)| t.is_finite() && v.is_finite() && v > 0.0)
                .collect(),
        })
        .collect();
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x = if all().next().is_none() {
        linear_axis(0.0, 1.0, tick_plain)
    } else {
        let (x0, x1) = min_max(all().map(|p| p.0).chain([0.0]));
        linear_axis(x0, x1, tick_plain)
    };
    let y = match min_max_opt(all().map(|p| p.1)) {
        Some((lo, hi)) => log_axis(lo, hi, tick_lat),
        None => log_axis(1.0, 1000.0, tick_lat),
    };
    line_chart(
        out,
        &LineChart {
            title: "Latency percentiles over time".into(),
            desc: format!("Latency percentiles over time (log scale), {name}"),
            x,
            y,
            x_label: "time since the start of the measured phase (s)".into(),
            y_label: "latency (log scale)".into(),
            series,
        },
    );
}

/// Cumulative distribution from the histogram buckets: (latency µs, fraction
/// of responses at or below it), starting at (min, 0). Also the total count.
fn cdf(op: &OpLatency) -> (Vec<(f64, f64)>, f64) {
    let mut buckets: Vec<(f64, u64)> = op
        .histogram
        .iter()
        .copied()
        .filter(|&(ub, n)| ub.is_finite() && ub > 0.0 && n > 0)
        .collect();
    if buckets.is_empty() {
        return (Vec::new(), 0.0);
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = buckets.iter().map(|&(_, n)| n as f64).sum();
    let first = buckets[0].0;
    let start = if op.min_us.is_finite() && op.min_us > 0.0 && op.min_us < first {
        op.min_us
    } else {
        first
    };
    let mut pts = Vec::with_capacity(buckets.len() + 1);
    pts.push((start, 0.0));
    let mut cum = 0.0;
    for (ub, n) in buckets {
        cum += n as f64;
        pts.push((ub, (cum / total).min(1.0)));
    }
    (pts, total)
}

fn distribution_chart(out: &mut String, run: &RunReport, name: &str) {
    let mut series = Vec::new();
    let mut max_total: f64 = 0.0;
    let mut n_other = 0;
    for op in &run.ops {
        let (points, total) = cdf(op);
        max_total = max_total.max(total);
        let is_all = op.op == "all" && run.ops.len() > 1;
        let col = if is_all {
            "#3e4c59"
        } else {
            n_other += 1;
            color(n_other - 1)
        };
        series.push(Series {
            name: op.op.clone(),
            color: col,
            dashed: is_all,
            points,
        });
    }
    let x = match min_max_opt(series.iter().flat_map(|s| s.points.iter().map(|p| p.0))) {
        Some((lo, hi)) => log_axis(lo, hi, tick_lat),
        None => log_axis(1.0, 1000.0, tick_lat),
    };
    let top = if max_total >= 1.0 {
        max_total.log10().ceil().clamp(2.0, 6.0) as u32
    } else {
        3
    };
    line_chart(
        out,
        &LineChart {
            title: "Latency distribution by operation".into(),
            desc: format!(
                "Latency distribution by operation: share of responses at or below a latency \
                 (log latency axis, percentile axis in nines), {name}"
            ),
            x,
            y: nines_axis(top),
            x_label: "latency (log scale)".into(),
            y_label: "responses at or below".into(),
            series,
        },
    );
}

// ---------------------------------------------------------------------------
// Axes

#[derive(Clone, Copy, PartialEq)]
enum Scale {
    Linear,
    Log,
    /// Percentiles: fraction p drawn at -log10(1 - p), capped at `hi`.
    Nines,
}

struct Axis {
    scale: Scale,
    /// Ends, in transformed units (log10 for `Log`).
    lo: f64,
    hi: f64,
    /// Labelled ticks, in data units.
    ticks: Vec<(f64, String)>,
    /// Unlabelled grid lines, in data units.
    minor: Vec<f64>,
}

impl Axis {
    fn transform(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => v,
            Scale::Log if v > 0.0 => v.log10(),
            Scale::Log => f64::NAN,
            Scale::Nines => {
                if v.is_nan() || v < 0.0 {
                    f64::NAN
                } else if v >= 1.0 {
                    self.hi
                } else {
                    (-(1.0 - v).log10()).min(self.hi)
                }
            }
        }
    }

    /// Where `v` falls along the axis, 0 to 1; None when it cannot be drawn.
    fn pos(&self, v: f64) -> Option<f64> {
        if !v.is_finite() {
            return None;
        }
        let t = self.transform(v);
        if !t.is_finite() {
            return None;
        }
        let span = self.hi - self.lo;
        if span.is_nan() || span <= 0.0 {
            return Some(0.5);
        }
        Some(((t - self.lo) / span).clamp(0.0, 1.0))
    }
}

fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 2.5 {
        2.5
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn linear_axis(min: f64, max: f64, fmt: fn(f64) -> String) -> Axis {
    let (mut min, mut max) = if min.is_finite() && max.is_finite() {
        (min, max)
    } else {
        (0.0, 1.0)
    };
    if max < min {
        std::mem::swap(&mut min, &mut max);
    }
    if max - min <= 1e-12 * max.abs().max(min.abs()) {
        if max == 0.0 {
            max = 1.0;
        } else {
            let d = max.abs() * 0.1;
            min -= d;
            max += d;
        }
    }
    let mut step = nice_step((max - min) / 6.0);
    if !(step.is_finite() && step > 0.0) {
        (min, max, step) = (0.0, 1.0, 0.2);
    }
    // A hair inwards, so that an end on a tick stays on it.
    let (lo_i, hi_i) = ((min / step + 1e-9).floor(), (max / step - 1e-9).ceil());
    let n = ((hi_i - lo_i) as i64).clamp(1, 40);
    let ticks = (0..=n)
        .map(|i| {
            let v = (lo_i + i as f64) * step;
            let v = if v.abs() < step * 1e-9 { 0.0 } else { v };
            (v, fmt(v))
        })
        .collect();
    Axis {
        scale: Scale::Linear,
        lo: lo_i * step,
        hi: (lo_i + n as f64) * step,
        ticks,
        minor: Vec::new(),
    }
}

fn log_axis(min: f64, max: f64, fmt: fn(f64) -> String) -> Axis {
    let ok = |v: f64| v.is_finite() && v > 0.0;
    let (mut min, mut max) = if ok(min) && ok(max) {
        (min, max)
    } else {
        (1.0, 1000.0)
    };
    if max < min {
        std::mem::swap(&mut min, &mut max);
    }
    let e_lo = (min.log10().floor() as i32).clamp(-15, 20);
    let e_hi = (max.log10().ceil() as i32).clamp(e_lo, 21);
    let decade = |e: i32| 10f64.powi(e);
    // Try 1-2-5 steps first: finer ends and more labels for narrow ranges.
    let mut cands = Vec::new();
    for e in (e_lo - 1)..=(e_hi + 1) {
        for m in [1.0, 2.0, 5.0] {
            cands.push(m * decade(e));
        }
    }
    let lo_i = cands
        .iter()
        .rposition(|&c| c <= min * (1.0 + 1e-9))
        .unwrap_or(0);
    let hi_i = cands
        .iter()
        .position(|&c| c >= max * (1.0 - 1e-9))
        .unwrap_or(cands.len() - 1);
    let (lo_i, hi_i) = if hi_i <= lo_i {
        (lo_i.saturating_sub(1), (lo_i + 1).min(cands.len() - 1))
    } else {
        (lo_i, hi_i)
    };
    if hi_i - lo_i <= 7 {
        let ticks: Vec<(f64, String)> = cands[lo_i..=hi_i].iter().map(|&v| (v, fmt(v))).collect();
        let (lo, hi) = (cands[lo_i], cands[hi_i]);
        let mut minor = Vec::new();
        for e in (e_lo - 1)..=(e_hi + 1) {
            for m in [3.0, 4.0, 6.0, 7.0, 8.0, 9.0] {
                let v = m * decade(e);
                if v > lo && v < hi {
                    minor.push(v);
                }
            }
        }
        return Axis {
            scale: Scale::Log,
            lo: lo.log10(),
            hi: hi.log10(),
            ticks,
            minor,
        };
    }
    let e_hi = e_hi.max(e_lo + 1);
    let ticks = (e_lo..=e_hi).map(|e| (decade(e), fmt(decade(e)))).collect();
    let mut minor = Vec::new();
    if e_hi - e_lo <= 6 {
        for e in e_lo..e_hi {
            for m in 2..=9 {
                minor.push(m as f64 * decade(e));
            }
        }
    }
    Axis {
        scale: Scale::Log,
        lo: e_lo as f64,
        hi: e_hi as f64,
        ticks,
        minor,
    }
}

fn nines_axis(top: u32) -> Axis {
    let mut ticks = vec![(0.0, "0%".to_string()), (0.5, "50%".to_string())];
    for k in 1..=top {
        let label = match k {
            1 => "90%".to_string(),
            2 => "99%".to_string(),
            _ => format!("99.{}%", "9".repeat(k as usize - 2)),
        };
        ticks.push((1.0 - 10f64.powi(-(k as i32)), label));
    }
    Axis {
        scale: Scale::Nines,
        lo: 0.0,
        hi: top as f64,
        ticks,
        minor: Vec::new(),
    }
}

// ---------------------------------------------------------------------------
// SVG drawing

const CW: f64 = 640.0;
const CH: f64 = 320.0;
const FONT: &str = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif";
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
    "#ff9da7", "#bab0ac",
];
const BASELINE_GREY: &str = "#9aa5b1";
const GRID: &str = "#e6e9ed";
const GRID_MINOR: &str = "#f3f4f6";
const AXIS: &str = "#9aa5b1";
const LABEL: &str = "#52606d";

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Rough width of a text in a sans-serif font of `px` pixels.
fn text_w(s: &str, px: f64) -> f64 {
    s.chars()
        .map(|c| match c {
            'i' | 'l' | 'j' | '.' | ',' | ':' | ';' | '|' | '!' | '\'' => 0.3,
            't' | 'f' | 'r' | ' ' | '(' | ')' | '[' | ']' | '/' => 0.4,
            'm' | 'w' | 'M' | 'W' | '%' | '@' | '…' => 0.92,
            'A'..='Z' | '&' | '#' | '<' | '>' | '=' | '+' | '~' | '×' | '÷' => 0.72,
            _ => 0.6,
        })
        .sum::<f64>()
        * px
}

struct Series {
    name: String,
    color: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

struct LineChart {
    /// Shown above the chart.
    title: String,
    /// The `<title>`: what the chart shows, in full.
    desc: String,
    x: Axis,
    y: Axis,
    x_label: String,
    y_label: String,
    series: Vec<Series>,
}

fn svg_open(out: &mut String, w: f64, h: f64, desc: &str, title: &str) {
    w!(
        out,
        "<svg class=\"chart\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" \
         font-family=\"{FONT}\" font-size=\"11\">\n<title>{}</title>\n\
         <rect width=\"{w}\" height=\"{h}\" fill=\"#fff\"/>\n\
         <text x=\"4\" y=\"17\" font-size=\"14\" font-weight=\"600\" fill=\"#1f2933\">{}</text>\n",
        esc(desc),
        esc(&fit(title, w - 8.0, 14.0 * 1.05)),
    );
}

/// Legend items laid out in rows from `x0` to `x1`: (x, row) per item, rows.
fn legend_layout(names: &[&str], x0: f64, x1: f64) -> (Vec<(f64, usize)>, usize) {
    let mut pos = Vec::with_capacity(names.len());
    let (mut x, mut row) = (x0, 0);
    for name in names {
        let w = 24.0 + text_w(name, 11.0) + 16.0;
        if x > x0 && x + w > x1 {
            x = x0;
            row += 1;
        }
        pos.push((x, row));
        x += w;
    }
    let rows = if names.is_empty() { 0 } else { row + 1 };
    (pos, rows)
}

fn dash_attr(dashed: bool) -> &'static str {
    if dashed {
        " stroke-dasharray=\"6 4\""
    } else {
        ""
    }
}

fn line_chart(out: &mut String, c: &LineChart) {
    // The legend names the series that have something to draw.
    let shown: Vec<&Series> = c
        .series
        .iter()
        .filter(|s| {
            s.points
                .iter()
                .any(|&(x, y)| c.x.pos(x).is_some() && c.y.pos(y).is_some())
        })
        .collect();
    let names: Vec<String> = shown.iter().map(|s| trunc(&s.name, 40)).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let legend = shown.len() > 1;
    let y_label_w =
        c.y.ticks
            .iter()
            .map(|(_, l)| text_w(l, 11.0))
            .fold(0.0, f64::max);
    let ml = (24.0 + y_label_w + 8.0).round().max(50.0);
    let mr = 22.0;
    let (legend_pos, rows) = if legend {
        legend_layout(&name_refs, ml, CW - mr)
    } else {
        (Vec::new(), 0)
    };
    let top = if rows > 0 {
        44.0 + rows as f64 * 16.0
    } else {
        36.0
    };
    let mb = 46.0;
    let (pw, ph) = (CW - ml - mr, CH - top - mb);
    let px = |v: f64| c.x.pos(v).map(|p| ml + p * pw);
    let py = |v: f64| c.y.pos(v).map(|p| top + ph - p * ph);

    svg_open(out, CW, CH, &c.desc, &c.title);

    // Legend.
    for ((x, row), (s, name)) in legend_pos.iter().zip(shown.iter().zip(&names)) {
        let y = 36.0 + *row as f64 * 16.0;
        w!(
            out,
            "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{}\" stroke-width=\"2.5\"{}/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#3e4c59\">{}</text>\n",
            x,
            x + 18.0,
            s.color,
            dash_attr(s.dashed),
            x + 24.0,
            y + 4.0,
            esc(name)
        );
    }

    // Grid.
    out.push_str("<g stroke-width=\"1\" shape-rendering=\"crispEdges\">\n");
    for &v in &c.x.minor {
        if let Some(x) = px(v) {
            w!(out, "<line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{GRID_MINOR}\"/>\n", top + ph);
        }
    }
    for &v in &c.y.minor {
        if let Some(y) = py(v) {
            w!(out, "<line x1=\"{ml:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{GRID_MINOR}\"/>\n", ml + pw);
        }
    }
    for (v, _) in &c.x.ticks {
        if let Some(x) = px(*v) {
            w!(out, "<line x1=\"{x:.1}\" y1=\"{top:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{GRID}\"/>\n", top + ph + 4.0);
        }
    }
    for (v, _) in &c.y.ticks {
        if let Some(y) = py(*v) {
            w!(
                out,
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{GRID}\"/>\n",
                ml - 4.0,
                ml + pw
            );
        }
    }
    w!(
        out,
        "<path d=\"M{ml:.1} {top:.1}V{:.1}H{:.1}\" fill=\"none\" stroke=\"{AXIS}\"/>\n</g>\n",
        top + ph,
        ml + pw
    );

    // Tick labels, leaving out those that would overlap the previous one.
    w!(out, "<g fill=\"{LABEL}\">\n");
    let mut last_right = f64::NEG_INFINITY;
    for (v, label) in &c.x.ticks {
        let Some(x) = px(*v) else { continue };
        let half = text_w(label, 11.0) / 2.0;
        let x = x.clamp(half + 2.0, CW - half - 2.0);
        if x - half < last_right + 8.0 {
            continue;
        }
        last_right = x + half;
        w!(
            out,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            top + ph + 16.0,
            esc(label)
        );
    }
    let mut last_y = f64::INFINITY;
    for (v, label) in &c.y.ticks {
        let Some(y) = py(*v) else { continue };
        if last_y - y < 13.0 {
            continue;
        }
        last_y = y;
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            ml - 7.0,
            y + 4.0,
            esc(label)
        );
    }
    out.push_str("</g>\n");
    w!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#3e4c59\">{}</text>\n",
        ml + pw / 2.0,
        CH - 8.0,
        esc(&fit(&c.x_label, pw, 11.0))
    );
    w!(
        out,
        "<text transform=\"translate(13 {:.1}) rotate(-90)\" text-anchor=\"middle\" fill=\"#3e4c59\">{}</text>\n",
        top + ph / 2.0,
        esc(&fit(&c.y_label, ph, 11.0))
    );

    // Series.
    let mut drawn = false;
    for s in &c.series {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, y)| Some((px(x)?, py(y)?)))
            .collect();
        let pts = thin(pts, pw);
        match pts.len() {
            0 => continue,
            1 => w!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{}\"/>\n",
                pts[0].0,
                pts[0].1,
                s.color
            ),
            _ => {
                w!(
                    out,
                    "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" stroke-linejoin=\"round\" \
                     stroke-linecap=\"round\"{} points=\"",
                    s.color,
                    dash_attr(s.dashed)
                );
                for (i, (x, y)) in pts.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    w!(out, "{x:.1},{y:.1}");
                }
                out.push_str("\"/>\n");
            }
        }
        drawn = true;
    }
    if !drawn {
        no_data(out, ml + pw / 2.0, top + ph / 2.0);
    }
    out.push_str("</svg>\n");
}

fn no_data(out: &mut String, x: f64, y: f64) {
    w!(
        out,
        "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\" font-size=\"13\" fill=\"#9aa5b1\">no data</text>\n"
    );
}

/// Keeps long series drawable: per pixel column, the first, lowest, highest
/// and last points, in order.
fn thin(pts: Vec<(f64, f64)>, width: f64) -> Vec<(f64, f64)> {
    if pts.len() as f64 <= width * 2.0 {
        return pts;
    }
    let mut out = Vec::with_capacity(width as usize * 4);
    let mut i = 0;
    while i < pts.len() {
        let col = pts[i].0.floor();
        let mut j = i;
        let (mut lo, mut hi) = (i, i);
        while j < pts.len() && pts[j].0.floor() == col {
            if pts[j].1 < pts[lo].1 {
                lo = j;
            }
            if pts[j].1 > pts[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let mut keep = [i, lo, hi, j - 1];
        keep.sort_unstable();
        let mut prev = usize::MAX;
        for k in keep {
            if k != prev {
                out.push(pts[k]);
                prev = k;
            }
        }
        i = j;
    }
    out
}

struct BarChart {
    title: String,
    desc: String,
    labels: Vec<String>,
    values: Vec<f64>,
    colors: Vec<&'static str>,
    value_label: fn(f64) -> String,
    tick: fn(f64) -> String,
    x_label: String,
    /// A dashed vertical line at this value, with its name.
    reference: Option<(f64, String)>,
}

/// Horizontal bars, one per label, so that long names stay readable.
fn bar_chart(out: &mut String, c: &BarChart) {
    let labels: Vec<String> = c.labels.iter().map(|l| fit(l, CW * 0.3, 12.0)).collect();
    let values: Vec<String> = c
        .values
        .iter()
        .map(|&v| {
            if v.is_finite() {
                (c.value_label)(v)
            } else {
                "n/a".to_string()
            }
        })
        .collect();
    let label_w = labels.iter().map(|l| text_w(l, 12.0)).fold(0.0, f64::max);
    let value_w = values.iter().map(|l| text_w(l, 11.0)).fold(0.0, f64::max);
    let ml = (label_w + 18.0).max(60.0).round();
    let mr = (value_w + 16.0).max(30.0).round();
    let top = if c.reference.is_some() { 52.0 } else { 36.0 };
    let (band, bar) = (28.0, 18.0);
    let n = labels.len();
    let ph = band * n.max(1) as f64;
    let mb = 46.0;
    let h = top + ph + mb;
    let pw = CW - ml - mr;

    let finite: Vec<f64> = c.values.iter().copied().filter(|v| v.is_finite()).collect();
    let (mut lo, mut hi) = min_max_opt(finite.iter().copied()).unwrap_or((0.0, 1.0));
    if let Some((r, _)) = &c.reference {
        if r.is_finite() {
            lo = lo.min(*r);
            hi = hi.max(*r);
        }
    }
    let x = linear_axis(lo.min(0.0), hi.max(0.0) * 1.05, c.tick);
    let px = |v: f64| x.pos(v).map(|p| ml + p * pw);

    svg_open(out, CW, h, &c.desc, &c.title);
    out.push_str("<g stroke-width=\"1\" shape-rendering=\"crispEdges\">\n");
    for (v, _) in &x.ticks {
        if let Some(xx) = px(*v) {
            w!(out, "<line x1=\"{xx:.1}\" y1=\"{top:.1}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"{GRID}\"/>\n", top + ph + 4.0);
        }
    }
    w!(
        out,
        "<path d=\"M{ml:.1} {:.1}H{:.1}\" stroke=\"{AXIS}\"/>\n</g>\n",
        top + ph,
        ml + pw
    );
    w!(out, "<g fill=\"{LABEL}\">\n");
    let mut last_right = f64::NEG_INFINITY;
    for (v, label) in &x.ticks {
        let Some(xx) = px(*v) else { continue };
        let half = text_w(label, 11.0) / 2.0;
        if xx - half < last_right + 8.0 {
            continue;
        }
        last_right = xx + half;
        w!(
            out,
            "<text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            top + ph + 16.0,
            esc(label)
        );
    }
    out.push_str("</g>\n");
    w!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#3e4c59\">{}</text>\n",
        ml + pw / 2.0,
        h - 8.0,
        esc(&fit(&c.x_label, pw, 11.0))
    );

    let zero = px(0.0).unwrap_or(ml);
    for (i, label) in labels.iter().enumerate() {
        let y = top + band * i as f64 + (band - bar) / 2.0;
        let full = c.labels.get(i).map_or("", String::as_str);
        let tip = if label.as_str() != full {
            format!("<title>{}</title>", esc(full))
        } else {
            String::new()
        };
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12\" fill=\"#1f2933\">{tip}{}</text>\n",
            ml - 8.0,
            y + bar / 2.0 + 4.0,
            esc(label)
        );
        let v = c.values.get(i).copied().unwrap_or(f64::NAN);
        let end = match px(v) {
            Some(end) => {
                let (x0, x1) = if end >= zero {
                    (zero, end)
                } else {
                    (end, zero)
                };
                w!(
                    out,
                    "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bar:.1}\" rx=\"2\" fill=\"{}\"/>\n",
                    (x1 - x0).max(1.0),
                    c.colors.get(i).copied().unwrap_or(PALETTE[0])
                );
                x1
            }
            None => zero,
        };
        w!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#3e4c59\">{}</text>\n",
            end + 5.0,
            y + bar / 2.0 + 4.0,
            esc(values.get(i).map_or("", String::as_str))
        );
    }
    if let Some((r, name)) = &c.reference {
        if let Some(xx) = px(*r) {
            w!(
                out,
                "<line x1=\"{xx:.1}\" y1=\"{:.1}\" x2=\"{xx:.1}\" y2=\"{:.1}\" stroke=\"#3e4c59\" \
                 stroke-width=\"1.2\" stroke-dasharray=\"5 4\"/>\n\
                 <text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#3e4c59\">{}</text>\n",
                top - 8.0,
                top + ph,
                top - 12.0,
                esc(name)
            );
        }
    }
    if n == 0 || finite.is_empty() {
        no_data(out, ml + pw / 2.0, top + ph / 2.0 + 4.0);
    }
    out.push_str("</svg>\n");
}

// ---------------------------------------------------------------------------
// Helpers

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            '\n' | '\t' => o.push(c),
            c if c.is_control() => {}
            c => o.push(c),
        }
    }
    o
}

/// At most `max` characters, with an ellipsis when cut.
fn trunc(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Cut to fit in `width` pixels at `px`.
fn fit(s: &str, width: f64, px: f64) -> String {
    if text_w(s, px) <= width {
        return s.to_string();
    }
    let mut t = String::new();
    for c in s.chars() {
        t.push(c);
        if text_w(&t, px) + px > width {
            t.pop();
            break;
        }
    }
    t.push('…');
    t
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "–"
    } else {
        s
    }
}

fn run_name(run: &RunReport, i: usize) -> String {
    if run.name.trim().is_empty() {
        format!("run {}", i + 1)
    } else {
        run.name.clone()
    }
}

/// The "all" operation, or the only one.
fn op_all(run: &RunReport) -> Option<&OpLatency> {
    run.ops
        .iter()
        .find(|o| o.op == "all")
        .or(match run.ops.as_slice() {
            [only] => Some(only),
            _ => None,
        })
}

fn errors_total(run: &RunReport) -> u64 {
    run.errors
        .iter()
        .fold(0u64, |a, (_, n)| a.saturating_add(*n))
}

fn min_max_opt(it: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    it.filter(|v| v.is_finite()).fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

fn min_max(it: impl Iterator<Item = f64>) -> (f64, f64) {
    min_max_opt(it).unwrap_or((0.0, 1.0))
}

fn group(n: u64) -> String {
    let s = n.to_string();
    let head = match s.len() % 3 {
        0 => s.len().min(3),
        r => r,
    };
    let mut o = String::with_capacity(s.len() + s.len() / 3);
    o.push_str(&s[..head]);
    for chunk in s.as_bytes()[head..].chunks(3) {
        o.push(',');
        o.push_str(std::str::from_utf8(chunk).unwrap_or_default());
    }
    o
}

fn fmt_int(n: u64) -> String {
    group(n)
}

/// Rounded, with thousands separators; small figures keep decimals.
fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let a = v.abs();
    let sign = if v < 0.0 { "-" } else { "" };
    if (1000.0..1e18).contains(&a) {
        format!("{sign}{}", group(a.round() as u64))
    } else if a >= 1000.0 {
        format!("{v:.3e}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a == 0.0 {
        "0".into()
    } else {
        format!("{v:.3}")
    }
}

fn fmt_rate(v: f64) -> String {
    if v.is_finite() && v.abs() < 100.0 && v != 0.0 {
        format!("{v:.1}")
    } else {
        fmt_num(v)
    }
}

fn fmt_ratio(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}×")
    } else {
        "–".into()
    }
}

fn fmt_pct(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v > 0.0 && v < 0.1 {
        "&lt;0.1%".into()
    } else {
        format!("{v:.1}%")
    }
}

fn fmt_secs(v: f64) -> String {
    if !v.is_finite() || v < 0.0 {
        "–".into()
    } else if v < 10.0 {
        format!("{v:.2} s")
    } else if v < 100.0 {
        format!("{v:.1} s")
    } else {
        format!("{} s", group(v.round() as u64))
    }
}

fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// Latency with three significant digits and a fitting unit.
fn fmt_lat(us: f64) -> String {
    if !us.is_finite() || us < 0.0 {
        return "–".into();
    }
    if us == 0.0 {
        return "0".into();
    }
    let (v, unit) = if us >= 999_500.0 {
        (us / 1e6, "s")
    } else if us >= 999.5 {
        (us / 1e3, "ms")
    } else if us >= 0.9995 {
        (us, "µs")
    } else {
        (us * 1e3, "ns")
    };
    let s = if v >= 99.95 {
        format!("{v:.0}")
    } else if v >= 9.995 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    format!("{s} {unit}")
}

/// The shortest of 0 to 3 decimals that shows `x` (nearly) exactly.
fn short(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    for d in 0..3 {
        let s = 10f64.powi(d);
        if ((x * s).round() - x * s).abs() < 1e-6 * (x.abs() * s).max(1.0) {
            return format!("{:.*}", d as usize, x);
        }
    }
    format!("{x:.3}")
}

fn scaled(v: f64, units: &[(f64, &str)]) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let (u, name) = units
        .iter()
        .copied()
        .find(|(u, _)| v.abs() >= *u * 0.9999)
        .unwrap_or(units[units.len() - 1]);
    format!("{}{name}", short(v / u))
}

fn tick_lat(v: f64) -> String {
    scaled(v, &[(1e6, " s"), (1e3, " ms"), (1.0, " µs"), (1e-3, " ns")])
}

fn tick_si(v: f64) -> String {
    scaled(v, &[(1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")])
}

fn tick_plain(v: f64) -> String {
    short(v)
}

fn tick_ratio(v: f64) -> String {
    format!("{}×", short(v))
}

#[cfg(test)]
mod tests {
    use super::super::results::{Comparison, OpLatency, Report, RunReport, TimelinePoint};
    use super::render;

    /// Deterministic noise in [0, 1).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A log-normal body plus a slower tail, in buckets of 20 per decade.
    fn histogram(median_us: f64, count: u64) -> Vec<(f64, u64)> {
        let mut weights = Vec::new();
        for i in 0..=140 {
            let ub = 10f64.powf(i as f64 / 20.0);
            let mid = ub / 10f64.powf(0.025);
            let x = (mid / median_us).ln();
            let body = (-x * x / (2.0 * 0.25 * 0.25)).exp();
            let xt = (mid / (median_us * 6.0)).ln();
            let tail = 0.004 * (-xt * xt / (2.0 * 0.7 * 0.7)).exp();
            weights.push((ub, body + tail));
        }
        let sum: f64 = weights.iter().map(|w| w.1).sum();
        weights
            .into_iter()
            .map(|(ub, w)| (ub, (w / sum * count as f64).round() as u64))
            .filter(|&(_, n)| n > 0)
            .collect()
    }

    fn op(name: &str, histogram: Vec<(f64, u64)>) -> OpLatency {
        let count: u64 = histogram.iter().map(|b| b.1).sum();
        let pct = |q: f64| {
            let mut cum = 0;
            for &(ub, n) in &histogram {
                cum += n;
                if cum as f64 >= q * count as f64 {
                    return ub;
                }
            }
            histogram.last().map_or(0.0, |b| b.0)
        };
        let mean = histogram.iter().map(|&(ub, n)| ub * n as f64).sum::<f64>() / count as f64;
        OpLatency {
            op: name.into(),
            count,
            mean_us: mean,
            stddev_us: mean * 0.4,
            min_us: histogram.first().map_or(0.0, |b| b.0 * 0.9),
            p50_us: pct(0.5),
            p90_us: pct(0.9),
            p99_us: pct(0.99),
            p999_us: pct(0.999),
            p9999_us: pct(0.9999),
            max_us: histogram.last().map_or(0.0, |b| b.0),
            histogram,
        }
    }

    fn merge(a: &[(f64, u64)], b: &[(f64, u64)]) -> Vec<(f64, u64)> {
        let mut all: Vec<(f64, u64)> = a.iter().chain(b).copied().collect();
        all.sort_by(|x, y| x.0.total_cmp(&y.0));
        let mut out: Vec<(f64, u64)> = Vec::new();
        for (ub, n) in all {
            match out.last_mut() {
                Some(last) if last.0 == ub => last.1 += n,
                _ => out.push((ub, n)),
            }
        }
        out
    }

    fn run(name: &str, port: u16, rate: f64, median_us: f64, seed: u64) -> RunReport {
        let mut rng = Lcg(seed);
        let secs = 30;
        let responses = (rate * secs as f64) as u64;
        let gets = histogram(median_us, responses * 9 / 10);
        let sets = histogram(median_us * 1.3, responses / 10);
        let all = merge(&gets, &sets);
        let timeline = (1..=secs)
            .map(|t| {
                let dip = if t == 17 { 0.62 } else { 1.0 };
                let wobble = 1.0 + 0.04 * (t as f64 / 3.0).sin() + 0.03 * (rng.next() - 0.5);
                let slow = 1.0 / dip;
                TimelinePoint {
                    t_secs: t as f64,
                    throughput: rate * dip * wobble,
                    p50_us: median_us * (0.95 + 0.1 * rng.next()) * slow.sqrt(),
                    p99_us: median_us * (3.0 + 0.6 * rng.next()) * slow,
                    p999_us: median_us * (7.0 + 2.0 * rng.next()) * slow * slow,
                    max_us: median_us * (15.0 + 40.0 * rng.next()) * slow * slow * slow,
                }
            })
            .collect();
        RunReport {
            name: name.into(),
            target: format!("127.0.0.1:{port}"),
            protocol: "memcached text".into(),
            loop_kind: "closed".into(),
            duration_secs: secs as f64,
            connections: 64,
            requests: responses + 12,
            responses,
            throughput: rate,
            response_types: vec![
                ("value".into(), responses * 8 / 10),
                ("end".into(), responses * 9 / 10),
                ("stored".into(), responses / 10),
            ],
            hits: responses * 8 / 10,
            misses: responses / 10,
            errors: vec![("timeout".into(), seed % 3), ("connreset".into(), 0)],
            ops: vec![op("get", gets), op("set", sets), op("all", all)],
            timeline,
            cpu_user_secs: 11.2,
            cpu_system_secs: 17.9,
            bytes_sent: responses * 60,
            bytes_received: responses * 140,
            tls: None,
        }
    }

    fn sample() -> Report {
        let rounds = vec![
            vec![412_000.0, 351_000.0],
            vec![405_500.0, 349_800.0],
            vec![418_200.0, 356_100.0],
            vec![409_900.0, 347_300.0],
            vec![414_700.0, 352_600.0],
        ];
        Report {
            title: "kura vs memcached — mixed 90/10".into(),
            command: "kura bench compare --targets kura=127.0.0.1:11211,memcached=127.0.0.1:11212 \
                      --workload mixed --connections 64 --duration 30s --html report.html"
                .into(),
            machine: "bench-01, 2 cores, Linux 6.12.0".into(),
            runs: vec![
                run("kura", 11211, 412_345.0, 140.0, 7),
                run("memcached", 11212, 351_234.0, 168.0, 11),
            ],
            comparisons: vec![Comparison {
                workload: "mixed 90/10 get/set".into(),
                targets: vec!["kura".into(), "memcached".into()],
                metric: "throughput (ops/s)".into(),
                rounds,
                medians: vec![412_000.0, 351_000.0],
                median_ratios: vec![1.0, 0.8519],
                hits: vec![9_896_280, 8_430_000],
                misses: vec![1_237_035, 1_053_000],
            }],
        }
    }

    fn charts(html: &str) -> usize {
        html.matches("<svg class=\"chart\"").count()
    }

    fn check_document(html: &str) {
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.trim_end().ends_with("</html>"));
        for attr in ["src=", "href="] {
            for quote in ["\"", "'", ""] {
                for scheme in ["http:", "https:", "//"] {
                    let bad = format!("{attr}{quote}{scheme}");
                    assert!(
                        !html.to_ascii_lowercase().contains(&bad),
                        "external reference {bad}"
                    );
                }
            }
        }
        assert!(!html.contains("<script"), "no scripts");
        assert!(!html.contains("<link"), "no linked resources");
        assert!(!html.contains("url("), "no CSS resources");
        assert!(!html.contains("@import"));
        assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
        // Every chart starts with its <title>.
        for part in html.split("<svg class=\"chart\"").skip(1) {
            let after = &part[part.find('>').unwrap() + 1..];
            assert!(
                after.trim_start().starts_with("<title>"),
                "chart without a leading <title>"
            );
        }
        // No broken numbers in the drawing.
        assert!(!html.contains("NaN"));
        assert!(!html.contains("inf"));
    }

    #[test]
    fn full_report() {
        let report = sample();
        let html = render(&report);
        check_document(&html);
        assert!(!html.contains("http://") && !html.contains("https://"));
        // 3 per run, 2 across runs, 1 for the comparison.
        assert_eq!(charts(&html), 3 * 2 + 2 + 1);
        assert!(html.contains("412,345"));
        assert!(html.contains("0.852×"));
        assert!(html.contains("memcached"));
        assert!(html.contains("127.0.0.1:11212"));
        // JSON round trip renders the same.
        let json = serde_json::to_string(&report).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(render(&back), html);
    }

    /// A comparison in which one server evicted most of the data says so above
    /// its table, and shows each target's read hit ratio.
    #[test]
    fn comparison_warns_when_hit_ratios_differ() {
        let mut report = sample();
        let html = render(&report);
        assert!(html.contains("Read hit ratio") && html.contains("88.9%"));
        assert!(!html.contains("class=\"warn\""));
        report.comparisons[0].hits = vec![100_000, 10_312];
        report.comparisons[0].misses = vec![0, 89_688];
        let html = render(&report);
        check_document(&html);
        assert!(html.contains("<p class=\"warn\">WARNING: mixed 90/10 get/set: hit ratios differ"));
        assert!(html.contains("10.3%"));
    }

    /// Nine latency columns overflowed a two-column card: the table scrolls
    /// in its own wrapper, with smaller cells, rather than spilling out.
    #[test]
    fn latency_table_sits_in_a_scrolling_wrapper() {
        let html = render(&sample());
        assert_eq!(
            html.matches("<div class=\"scroll\"><table class=\"lat\">")
                .count(),
            2
        );
        assert!(html.contains(".scroll { max-width: 100%; overflow-x: auto; }"));
    }

    #[test]
    fn escapes_strings() {
        let mut report = sample();
        report.runs[0].name = "<script>alert(\"x\")</script> & 'co'".into();
        report.runs[1].ops[0].op = "<b>get</b>".into();
        report.command = "kura bench --name '<img src=x onerror=alert(1)>'".into();
        report.comparisons[0].targets[1] = "<i>mc</i>".into();
        let html = render(&report);
        check_document(&html);
        assert!(!html.contains("<script>"));
        assert!(!html.contains("<img"));
        assert!(!html.contains("<b>get"));
        assert!(!html.contains("<i>mc"));
        assert!(
            html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;co&#39;")
        );
        assert_eq!(charts(&html), 9);
    }

    #[test]
    fn empty_report() {
        let html = render(&Report::default());
        check_document(&html);
        assert_eq!(charts(&html), 0);
        assert!(html.contains("No runs"));
    }

    #[test]
    fn one_run_empty_timeline() {
        let mut r = run("solo", 11211, 1000.0, 100.0, 1);
        r.timeline.clear();
        let html = render(&Report {
            runs: vec![r],
            ..Report::default()
        });
        check_document(&html);
        assert_eq!(charts(&html), 3);
        assert!(html.contains("no data"));
    }

    #[test]
    fn one_run_nothing_at_all() {
        let html = render(&Report {
            runs: vec![RunReport::default()],
            ..Report::default()
        });
        check_document(&html);
        assert_eq!(charts(&html), 3);
    }

    #[test]
    fn single_point_and_flat_values() {
        let mut r = run("single", 11211, 1000.0, 100.0, 1);
        r.timeline.truncate(1);
        r.ops.truncate(1);
        r.ops[0].histogram = vec![(250.0, 10)];
        r.ops[0].min_us = 250.0;
        let html = render(&Report {
            runs: vec![r.clone()],
            ..Report::default()
        });
        check_document(&html);
        assert_eq!(charts(&html), 3);
        assert!(html.contains("<circle"));

        // Everything equal, everything zero.
        for p in &mut r.timeline {
            *p = TimelinePoint::default();
        }
        r.ops[0] = OpLatency {
            op: "get".into(),
            histogram: vec![(0.0, 3)],
            ..OpLatency::default()
        };
        r.throughput = 0.0;
        let html = render(&Report {
            runs: vec![r.clone(), r],
            ..Report::default()
        });
        check_document(&html);
        assert_eq!(charts(&html), 8);
    }

    #[test]
    fn nan_and_infinite_values_are_skipped() {
        let mut report = sample();
        let r = &mut report.runs[0];
        r.throughput = f64::NAN;
        r.duration_secs = f64::INFINITY;
        r.timeline[3].throughput = f64::NAN;
        r.timeline[4].p99_us = f64::INFINITY;
        r.timeline[5].t_secs = f64::NEG_INFINITY;
        r.timeline[6].p50_us = 0.0;
        r.timeline[7].max_us = -5.0;
        r.ops[0].p99_us = f64::NAN;
        r.ops[0].histogram.push((f64::INFINITY, 5));
        r.ops[0].histogram.push((f64::NAN, 5));
        r.ops[0].histogram.push((-1.0, 5));
        r.ops[1].histogram = vec![(f64::NAN, 1)];
        report.runs[1].ops.clear();
        let c = &mut report.comparisons[0];
        c.rounds[1][1] = f64::NAN;
        c.rounds.push(vec![f64::INFINITY]);
        c.medians.clear();
        c.median_ratios = vec![1.0, f64::NAN, 2.0];
        let html = render(&report);
        check_document(&html);
        assert_eq!(charts(&html), 9);
    }

    #[test]
    fn many_runs_and_long_timelines() {
        let mut runs = Vec::new();
        for i in 0..12 {
            let mut r = run(
                &format!("kura / {i:03} a rather long scenario step name"),
                11211,
                1e5 * (i + 1) as f64,
                50.0,
                i,
            );
            let p = r.timeline[0].clone();
            r.timeline = (0..20_000)
                .map(|k| TimelinePoint {
                    t_secs: k as f64 * 0.01,
                    throughput: p.throughput * (1.0 + (k as f64).sin() * 0.1),
                    ..p.clone()
                })
                .collect();
            runs.push(r);
        }
        let html = render(&Report {
            runs,
            ..Report::default()
        });
        check_document(&html);
        assert_eq!(charts(&html), 3 * 12 + 2);
        // Long series are thinned.
        assert!(html.len() < 12 * 200_000, "{} bytes", html.len());
    }

    /// `KURA_BENCH_HTML_SAMPLE=/tmp/report.html cargo test` writes the sample
    /// report there, to look at in a browser.
    #[test]
    fn write_sample_when_asked() {
        if let Ok(path) = std::env::var("KURA_BENCH_HTML_SAMPLE") {
            std::fs::write(path, render(&sample())).unwrap();
        }
    }
}
