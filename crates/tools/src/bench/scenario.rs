//! Scenarios (`bench/scenarios/*.toml`): named phases, each a set of
//! `kura bench` options, with parameters that can be overridden. And
//! `kura bench compare`, which runs a scenario against several targets in
//! turn, round after round, and reports the ratios.
//!
//! ```toml
//! name = "004 one serial client, 10 KB values"
//! metric = "us_per_op"            # or "throughput" (the default)
//! [params]
//! count = 100000
//! [[phase]]
//! name = "write"
//! options = { method = "set", sizes = "d10240", num-conns = 1, num-calls = "{count}", key-pattern = "sequential", keys = "{count}" }
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Parser};
use serde::Deserialize;

use super::results::{Comparison, Report, RunReport};
use super::{check_report_paths, load_phase, measure, usage, write_reports, BenchError, LoadArgs};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// "throughput" (ops/s, higher is better) or "us_per_op" (lower is better).
    #[serde(default = "default_metric")]
    pub metric: String,
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
    #[serde(rename = "phase")]
    pub phases: Vec<Phase>,
}

fn default_metric() -> String {
    "throughput".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub name: String,
    /// `kura bench` long options without their dashes.
    pub options: BTreeMap<String, toml::Value>,
}

/// Where a scenario runs: a name for the report and an address.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub server: String,
    pub port: u16,
    pub protocol: String,
}

impl std::str::FromStr for Target {
    type Err = String;

    /// `name=host:port[:protocol]`, e.g. `redis=127.0.0.1:6379:resp`.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("bad target '{text}' (name=host:port[:protocol])");
        let (name, address) = text.split_once('=').ok_or_else(bad)?;
        let parts: Vec<&str> = address.split(':').collect();
        let (host, port, protocol) = match parts.as_slice() {
            [host, port] => (*host, *port, "text"),
            [host, port, protocol] => (*host, *port, *protocol),
            _ => return Err(bad()),
        };
        Ok(Target {
            name: name.to_string(),
            server: host.to_string(),
            port: port.parse().map_err(|_| bad())?,
            protocol: protocol.to_string(),
        })
    }
}

#[derive(Parser)]
struct PhaseCommandLine {
    #[command(flatten)]
    load: LoadArgs,
}

fn value_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Scenario {
    /// Reads a scenario and applies `name=value` overrides to its parameters.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, BenchError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("cannot read scenario {}: {e}", path.display())))?;
        let mut scenario: Scenario = toml::from_str(&text)
            .map_err(|e| usage(format!("scenario {}: {e}", path.display())))?;
        for item in overrides {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| usage(format!("bad --param '{item}' (name=value)")))?;
            if !scenario.params.contains_key(key) {
                return Err(usage(format!(
                    "scenario {} has no parameter '{key}'",
                    scenario.name
                )));
            }
            scenario
                .params
                .insert(key.to_string(), toml::Value::String(value.to_string()));
        }
        Ok(scenario)
    }

    fn substitute(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (key, value) in &self.params {
            out = out.replace(&format!("{{{key}}}"), &value_text(value));
        }
        out
    }

    /// The options of a phase against a target, as `kura bench` parses them.
    fn phase_args(
        &self,
        phase: &Phase,
        target: &Target,
        quiet: bool,
    ) -> Result<LoadArgs, BenchError> {
        let mut argv = vec!["kura-bench".to_string()];
        // The target's settings, unless the phase sets its own (002 picks the protocol).
        let defaults = [
            ("server", target.server.clone()),
            ("port", target.port.to_string()),
            ("protocol", target.protocol.clone()),
            ("name", format!("{} / {}", target.name, phase.name)),
        ];
        for (key, value) in defaults {
            if !phase.options.contains_key(key) {
                argv.push(format!("--{key}={value}"));
            }
        }
        if quiet {
            argv.push("--quiet".into());
        }
        for (key, value) in &phase.options {
            match value {
                toml::Value::Boolean(true) => argv.push(format!("--{key}")),
                toml::Value::Boolean(false) => {}
                _ => argv.push(format!("--{key}={}", self.substitute(&value_text(value)))),
            }
        }
        PhaseCommandLine::try_parse_from(&argv)
            .map(|cli| cli.load)
            .map_err(|e| {
                usage(format!(
                    "scenario {} phase {}: {}",
                    self.name,
                    phase.name,
                    e.to_string().lines().next().unwrap_or("")
                ))
            })
    }

    /// Runs every phase against one target; one report per phase.
    pub fn run(&self, target: &Target, quiet: bool) -> Result<Vec<RunReport>, BenchError> {
        let mut runs = Vec::new();
        for phase in &self.phases {
            let args = self.phase_args(phase, target, quiet)?;
            let workload = args.workload()?;
            if args.load {
                load_phase(&workload)?;
            }
            // Interrupted while loading: this phase measures nothing.
            if super::ctrl_c::pressed() {
                break;
            }
            let name = args.name.clone().unwrap_or_default();
            let (run, measured) = measure(&name, &workload, quiet)?;
            super::answered_some(&target.server, &measured)?;
            runs.push(run);
            if super::ctrl_c::pressed() {
                break;
            }
        }
        Ok(runs)
    }

    /// The figure compared: throughput, or mean µs per operation.
    fn figure(&self, run: &RunReport) -> f64 {
        if self.metric == "us_per_op" {
            run.ops
                .iter()
                .find(|o| o.op == "all")
                .map_or(0.0, |o| o.mean_us)
        } else {
            run.throughput
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// A target: name=host:port[:protocol] (text, meta, binary, resp). Give two or more.
    #[arg(long = "target", required = true)]
    pub targets: Vec<String>,
    /// Rounds (each runs every target once, in alternating order).
    #[arg(long = "rounds", default_value_t = 3)]
    pub rounds: usize,
    /// Override a scenario parameter, e.g. --param count=10000.
    #[arg(long = "param")]
    pub params: Vec<String>,
    #[arg(long = "json")]
    pub json: Option<PathBuf>,
    #[arg(long = "html")]
    pub html: Option<PathBuf>,
    /// The scenario file.
    pub scenario: PathBuf,
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// `kura bench compare`: prints the rounds and the table, writes the reports.
pub fn compare(args: &CompareArgs) -> Result<(), BenchError> {
    check_report_paths([args.json.as_ref(), args.html.as_ref()])?;
    let report = compare_to(args, &mut std::io::stdout().lock())?;
    write_reports(&report, args.json.as_ref(), args.html.as_ref())
}

/// Runs a comparison, printing its rounds and table to `out`, and returns
/// the report. Beside each figure: the targets' read hits and misses, and a
/// warning where their hit ratios differ (their figures measured different
/// work: a miss is cheaper than a hit).
pub fn compare_to(args: &CompareArgs, out: &mut impl Write) -> Result<Report, BenchError> {
    let targets: Vec<Target> = args
        .targets
        .iter()
        .map(|t| t.parse().map_err(usage))
        .collect::<Result<_, _>>()?;
    if targets.len() < 2 {
        return Err(usage("compare needs at least two --target"));
    }
    if args.rounds == 0 {
        return Err(usage("--rounds must be at least 1"));
    }
    let scenario = Scenario::load(&args.scenario, &args.params)?;
    let unit = if scenario.metric == "us_per_op" {
        "µs/op"
    } else {
        "ops/s"
    };
    writeln!(
        out,
        "# {} — {} rounds, figure: {unit}",
        scenario.name, args.rounds
    )?;
    let phases = scenario.phases.len();
    // figures[round][phase][target]
    let mut figures = vec![vec![vec![0.0; targets.len()]; phases]; args.rounds];
    // reads[phase][target] = (hits, misses) over all rounds
    let mut reads = vec![vec![(0u64, 0u64); targets.len()]; phases];
    let mut all_runs = Vec::new();
    for (round, round_figures) in figures.iter_mut().enumerate() {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..targets.len()).collect()
        } else {
            (0..targets.len()).rev().collect()
        };
        // round_runs[phase][target]
        let mut round_runs = vec![vec![None; targets.len()]; phases];
        for &t in &order {
            let runs = scenario.run(&targets[t], true)?;
            // Ratios of cut-short runs would mislead: nothing is compared.
            if super::ctrl_c::pressed() {
                return Err(std::io::Error::other("interrupted: no comparison").into());
            }
            for (phase, run) in runs.iter().enumerate() {
                round_figures[phase][t] = scenario.figure(run);
                reads[phase][t].0 += run.hits;
                reads[phase][t].1 += run.misses;
                round_runs[phase][t] = Some(run.clone());
            }
            all_runs.extend(runs);
        }
        for (phase, p) in scenario.phases.iter().enumerate() {
            let row: Vec<String> = targets
                .iter()
                .enumerate()
                .map(|(t, target)| {
                    let hit = round_runs[phase][t]
                        .as_ref()
                        .and_then(RunReport::hit_ratio)
                        .map_or(String::new(), |r| format!(" (hit ratio {:.1}%)", r * 100.0));
                    format!("{} {:.1}{hit}", target.name, round_figures[phase][t])
                })
                .collect();
            writeln!(out, "round {} {:<16} {}", round + 1, p.name, row.join("  "))?;
        }
    }
    let mut comparisons = Vec::new();
    writeln!(
        out,
        "\n{:<18} {}",
        "phase",
        targets
            .iter()
            .map(|t| format!("{:>14}", t.name))
            .collect::<String>()
            + "   ratios to the first (median of rounds)"
    )?;
    for (phase, p) in scenario.phases.iter().enumerate() {
        let rounds: Vec<Vec<f64>> = figures.iter().map(|r| r[phase].clone()).collect();
        let medians: Vec<f64> = (0..targets.len())
            .map(|t| median(&mut rounds.iter().map(|r| r[t]).collect::<Vec<_>>()))
            .collect();
        let ratios: Vec<f64> = (0..targets.len())
            .map(|t| {
                median(
                    &mut rounds
                        .iter()
                        .filter(|r| r[0] > 0.0)
                        .map(|r| r[t] / r[0])
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        writeln!(
            out,
            "{:<18} {}   {}",
            p.name,
            medians
                .iter()
                .map(|m| format!("{m:>14.1}"))
                .collect::<String>(),
            ratios
                .iter()
                .map(|r| format!("{r:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        )?;
        comparisons.push(Comparison {
            workload: format!("{} / {}", scenario.name, p.name),
            targets: targets.iter().map(|t| t.name.clone()).collect(),
            metric: unit.to_string(),
            rounds,
            medians,
            median_ratios: ratios,
            hits: reads[phase].iter().map(|r| r.0).collect(),
            misses: reads[phase].iter().map(|r| r.1).collect(),
        });
    }
    let read_phases: Vec<(&Phase, &Comparison)> = scenario
        .phases
        .iter()
        .zip(&comparisons)
        .filter(|(_, c)| c.hit_ratios().iter().any(Option::is_some))
        .collect();
    if !read_phases.is_empty() {
        writeln!(
            out,
            "\nreads: hits / misses (hit ratio), all rounds together"
        )?;
        for (p, c) in &read_phases {
            let cells: Vec<String> = c
                .targets
                .iter()
                .enumerate()
                .map(|(t, name)| match c.hit_ratios()[t] {
                    Some(r) => {
                        format!("{name} {} / {} ({:.1}%)", c.hits[t], c.misses[t], r * 100.0)
                    }
                    None => format!("{name} no reads"),
                })
                .collect();
            writeln!(out, "{:<18} {}", p.name, cells.join("   "))?;
        }
        for (_, c) in &read_phases {
            if let Some(warning) = c.hit_ratio_warning() {
                writeln!(out, "{warning}")?;
            }
        }
    }
    Ok(Report {
        title: format!("kura bench compare: {}", scenario.name),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: String::new(),
        runs: all_runs,
        comparisons,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        let t: Target = "redis=127.0.0.1:6379:resp".parse().unwrap();
        assert_eq!(
            (t.name.as_str(), t.port, t.protocol.as_str()),
            ("redis", 6379, "resp")
        );
        let t: Target = "kura=localhost:11211".parse().unwrap();
        assert_eq!(t.protocol, "text");
        assert!("nameless".parse::<Target>().is_err());
    }

    #[test]
    fn every_shipped_scenario_parses_into_workloads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "toml") {
                continue;
            }
            let scenario = Scenario::load(&path, &[]).unwrap();
            let target: Target = "t=127.0.0.1:11211".parse().unwrap();
            for phase in &scenario.phases {
                let args = scenario.phase_args(phase, &target, true).unwrap();
                args.workload()
                    .unwrap_or_else(|e| panic!("{}: {}: {e}", path.display(), phase.name));
            }
            count += 1;
        }
        assert!(
            count >= 5,
            "expected the five seed scenarios, found {count}"
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
