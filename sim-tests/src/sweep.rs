//! The summary of a long seed sweep: how many seeds passed, which failed (with the
//! commands that replay them), how long runs took, and what the runs covered: cluster
//! sizes, faults by kind, operations checked for linearizability, what agents were told,
//! mutations at the providers. Sums of each run's [`RunOutcome::metrics`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;

use crate::seeds::{RunOutcome, Scenario};

/// One seed's run.
#[derive(Debug)]
pub struct SeedResult {
    /// The seed.
    pub seed: u64,
    /// Its wall-clock time (s).
    pub wall_s: f64,
    /// What it came to; the error is the failure.
    pub outcome: Result<RunOutcome, String>,
}

/// The sweep's figures.
#[derive(Debug, Default)]
pub struct Summary {
    /// Seeds run.
    pub seeds: usize,
    /// First and last seed.
    pub range: (u64, u64),
    /// Seeds that failed, with the first line of the failure.
    pub failed: Vec<(u64, String)>,
    /// Per-run wall time (s), sorted.
    pub wall_s: Vec<f64>,
    /// Per-run simulated time (s), sorted.
    pub sim_s: Vec<f64>,
    /// Metrics summed over the passing runs.
    pub totals: BTreeMap<String, u64>,
}

/// The violated properties a failure names (lines `- property (n):`), or its first line.
fn headline(failure: &str) -> String {
    let properties: Vec<&str> = failure
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .collect();
    if properties.is_empty() {
        failure.lines().next().unwrap_or_default().to_owned()
    } else {
        properties.join("; ")
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Summary {
    /// Sums `results`.
    pub fn of(results: &[SeedResult]) -> Summary {
        let mut summary = Summary {
            seeds: results.len(),
            range: (
                results.first().map_or(0, |r| r.seed),
                results.last().map_or(0, |r| r.seed),
            ),
            ..Summary::default()
        };
        for r in results {
            summary.wall_s.push(r.wall_s);
            match &r.outcome {
                Ok(o) => {
                    let sim_ms = o.metrics.get("sim_ms").copied().unwrap_or(0);
                    summary.sim_s.push(sim_ms as f64 / 1000.0);
                    for (k, v) in &o.metrics {
                        *summary.totals.entry(k.clone()).or_default() += v;
                    }
                }
                Err(e) => summary.failed.push((r.seed, headline(e))),
            }
        }
        summary.wall_s.sort_by(f64::total_cmp);
        summary.sim_s.sort_by(f64::total_cmp);
        summary
    }

    /// The table in markdown, with how it was made.
    pub fn markdown(&self, command: &str, machine: &str, wall_s: f64, spec: &Scenario) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Simulation sweep: {}\n", spec.test_name);
        let _ = writeln!(out, "Command: `{command}`  ");
        let _ = writeln!(out, "Machine: {machine}; wall time {wall_s:.0} s.\n");
        let _ = writeln!(out, "| figure | value |\n|---|---|");
        let passed = self.seeds - self.failed.len();
        let rows = [
            (
                "seeds".to_owned(),
                format!("{} ({}..={})", self.seeds, self.range.0, self.range.1),
            ),
            ("passed".into(), passed.to_string()),
            ("failed".into(), self.failed.len().to_string()),
            (
                "wall time per run p50 / p99 / max (s)".into(),
                format!(
                    "{:.1} / {:.1} / {:.1}",
                    quantile(&self.wall_s, 0.5),
                    quantile(&self.wall_s, 0.99),
                    quantile(&self.wall_s, 1.0)
                ),
            ),
            (
                "simulated time per run p50 / max (s)".into(),
                format!(
                    "{:.0} / {:.0}",
                    quantile(&self.sim_s, 0.5),
                    quantile(&self.sim_s, 1.0)
                ),
            ),
        ];
        for (figure, value) in rows {
            let _ = writeln!(out, "| {figure} | {value} |");
        }
        for (name, total) in &self.totals {
            if name != "sim_ms" {
                let _ = writeln!(out, "| {name} (total) | {total} |");
            }
        }
        if !self.failed.is_empty() {
            let _ = writeln!(out, "\n## Failed seeds\n");
            for (seed, first) in &self.failed {
                let _ = writeln!(
                    out,
                    "- seed {seed}: {first}  \n  `{}`",
                    spec.replay_command(*seed)
                );
            }
        }
        out
    }

    /// The figures as JSON.
    pub fn json(&self, command: &str, machine: &str, wall_s: f64) -> String {
        let document = json!({
            "command": command,
            "machine": machine,
            "wall_s": wall_s,
            "seeds": self.seeds,
            "first_seed": self.range.0,
            "last_seed": self.range.1,
            "failed": self.failed.iter().map(|(s, e)| json!({"seed": s, "failure": e})).collect::<Vec<_>>(),
            "wall_s_p50": quantile(&self.wall_s, 0.5),
            "wall_s_p99": quantile(&self.wall_s, 0.99),
            "sim_s_p50": quantile(&self.sim_s, 0.5),
            "totals": self.totals,
        });
        serde_json::to_string_pretty(&document).expect("JSON of plain values")
    }
}
