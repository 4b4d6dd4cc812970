//! What `ledger-load` measures and how it prints it: latency samples and failure counts
//! per operation, nearest-rank percentiles, and the table or JSON object of one run.

use std::time::Duration;

use serde_json::{json, Value};

/// Latencies in microseconds and failed calls, per operation; one per client task,
/// merged at the end so that no lock sits on the measured path.
#[derive(Default)]
pub struct Samples {
    /// Whole claim + report pairs.
    pub effect: Vec<u64>,
    /// Claims alone.
    pub claim: Vec<u64>,
    /// Reports alone.
    pub report: Vec<u64>,
    /// Reference calls (leader RPC).
    pub status: Vec<u64>,
    /// With `--rate`: how long after its scheduled start each operation began, which
    /// its latencies include; a load generator short of CPU shows here, not in the
    /// system's own time.
    pub start_lag: Vec<u64>,
    /// Calls answered `RESOURCE_EXHAUSTED`.
    pub back_pressure: u64,
    /// Calls failed otherwise.
    pub failures: u64,
    /// What one of those failures was (the first that the first failing client met), so
    /// that a run that fails says why.
    pub first_failure: Option<String>,
}

impl Samples {
    /// Adds another task's samples to these.
    pub fn merge(&mut self, other: Samples) {
        self.effect.extend(other.effect);
        self.claim.extend(other.claim);
        self.report.extend(other.report);
        self.status.extend(other.status);
        self.start_lag.extend(other.start_lag);
        self.back_pressure += other.back_pressure;
        self.failures += other.failures;
        if self.first_failure.is_none() {
            self.first_failure = other.first_failure;
        }
    }

    /// Counts one claim + report pair: its claim's and its whole latency, or why it did
    /// not finish.
    pub fn count_effect(&mut self, done: Result<(Duration, Duration), Failure>) {
        match done {
            Ok((claim, total)) => {
                self.claim.push(claim.as_micros() as u64);
                self.report.push((total - claim).as_micros() as u64);
                self.effect.push(total.as_micros() as u64);
            }
            Err(f) => self.fail(f),
        }
    }

    /// Counts one etcd put (kept with the effects): its latency, or why it failed.
    pub fn count_put(&mut self, done: Result<Duration, Failure>) {
        match done {
            Ok(took) => self.effect.push(took.as_micros() as u64),
            Err(f) => self.fail(f),
        }
    }

    /// Counts a failed call in its kind.
    pub fn fail(&mut self, failure: Failure) {
        match failure {
            Failure::BackPressure => self.back_pressure += 1,
            Failure::Other(what) => {
                self.failures += 1;
                self.first_failure.get_or_insert(what);
            }
        }
    }
}

/// Why one claim+report pair did not finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The node answered `RESOURCE_EXHAUSTED`.
    BackPressure,
    /// Anything else: unavailable, timed out, refused, or a claim that did not proceed;
    /// what it was.
    Other(String),
}

/// What the preload phase did.
pub struct Preloaded {
    /// Effects claimed and reported committed.
    pub records: u64,
    /// How long it took.
    pub seconds: f64,
    /// Pairs cut short by back-pressure.
    pub back_pressure: u64,
    /// Pairs that failed otherwise.
    pub failures: u64,
    /// The first of them.
    pub first_failure: Option<String>,
}

/// Count, rate and nearest-rank percentiles (ms) of one operation's latencies.
struct Row {
    count: usize,
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
}

impl Row {
    fn of(samples: &mut [u64], seconds: f64) -> Row {
        samples.sort_unstable();
        let pct = |p: f64| -> f64 {
            if samples.is_empty() {
                return 0.0;
            }
            let i = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i] as f64 / 1000.0
        };
        Row {
            count: samples.len(),
            per_s: if seconds > 0.0 {
                samples.len() as f64 / seconds
            } else {
                0.0
            },
            p50_ms: pct(0.50),
            p99_ms: pct(0.99),
            p999_ms: pct(0.999),
        }
    }

    fn json(&self) -> Value {
        json!({
            "count": self.count,
            "per_s": round2(self.per_s),
            "p50_ms": round2(self.p50_ms),
            "p99_ms": round2(self.p99_ms),
            "p999_ms": round2(self.p999_ms),
        })
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// What was loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The ledger: claim + report pairs.
    Ledger,
    /// etcd: puts of new keys (`samples.effect` holds them).
    Etcd,
}

/// Everything one run prints.
pub struct Summary {
    /// What was loaded.
    pub target: Target,
    /// Concurrent clients measured (with `rate`, the most in flight).
    pub clients: u32,
    /// The open loop's schedule, effects (or puts) started a second; none for a closed
    /// loop.
    pub rate: Option<u32>,
    /// Endpoints the clients were given.
    pub nodes: usize,
    /// Whether the reference row was measured.
    pub reference: bool,
    /// The preload phase, if there was one.
    pub preload: Option<Preloaded>,
    /// Wall time of the claim + report phase.
    pub effects_s: f64,
    /// The load generator's own CPU time (every thread) during that phase; NaN when
    /// unknown.
    pub cpu_s: f64,
    /// Wall time of the reference phase.
    pub reference_s: f64,
}

impl Summary {
    fn rows(&self, s: &mut Samples) -> [(&'static str, Row); 4] {
        [
            (
                "effect (claim + report)",
                Row::of(&mut s.effect, self.effects_s),
            ),
            (
                "  claim (replicated)",
                Row::of(&mut s.claim, self.effects_s),
            ),
            (
                "  report (replicated)",
                Row::of(&mut s.report, self.effects_s),
            ),
            (
                "reference: leader RPC (no Raft)",
                Row::of(&mut s.status, self.reference_s),
            ),
        ]
    }

    /// How late the open loop's operations began (for etcd too).
    fn start_lag(&self, s: &mut Samples) -> Row {
        Row::of(&mut s.start_lag, self.effects_s)
    }

    /// Prints the human-readable table.
    pub fn print_table(&self, s: &mut Samples) {
        if let Some(p) = &self.preload {
            println!(
                "preloaded {} effects in {:.1} s ({:.0}/s; back-pressure {}, failures {})",
                p.records,
                p.seconds,
                p.records as f64 / p.seconds.max(f64::MIN_POSITIVE),
                p.back_pressure,
                p.failures
            );
        }
        let (what, on) = match self.target {
            Target::Ledger => ("claim+report", "node(s)"),
            Target::Etcd => ("puts", "etcd member(s)"),
        };
        match self.rate {
            Some(rate) => println!(
                "{rate}/s offered (at most {} in flight), {:.1} s of {what} on {} {on}\n",
                self.clients, self.effects_s, self.nodes
            ),
            None => println!(
                "{} clients, {:.1} s of {what} on {} {on}\n",
                self.clients, self.effects_s, self.nodes
            ),
        }
        println!(
            "{:<34} {:>8} {:>10} {:>9} {:>9} {:>9}",
            "operation", "count", "per s", "p50 ms", "p99 ms", "p999 ms"
        );
        let rows: Vec<_> = match self.target {
            Target::Ledger => self
                .rows(s)
                .into_iter()
                .filter(|(name, _)| self.reference || !name.starts_with("reference"))
                .collect(),
            Target::Etcd => vec![(
                "etcd put (replicated)",
                Row::of(&mut s.effect, self.effects_s),
            )],
        };
        let lag = self
            .rate
            .map(|_| ("  start lag (open loop)", self.start_lag(s)));
        for (name, r) in rows.into_iter().chain(lag) {
            println!(
                "{:<34} {:>8} {:>10.0} {:>9.2} {:>9.2} {:>9.2}",
                name, r.count, r.per_s, r.p50_ms, r.p99_ms, r.p999_ms
            );
        }
        let done = s.effect.len() as f64;
        if self.cpu_s.is_finite() && done > 0.0 {
            println!(
                "\nload generator CPU: {:.2} s, {:.1} us per {}",
                self.cpu_s,
                self.cpu_s * 1e6 / done,
                match self.target {
                    Target::Ledger => "effect",
                    Target::Etcd => "put",
                }
            );
        }
        print_failures(s);
    }

    /// The run as one JSON object; with `--etcd`, `effect` holds the puts.
    pub fn json(&self, s: &mut Samples) -> Value {
        let [effect, claim, report, reference] = self.rows(s);
        json!({
            "target": match self.target {
                Target::Ledger => "ledger",
                Target::Etcd => "etcd",
            },
            "clients": self.clients,
            "rate": self.rate,
            "seconds": round2(self.effects_s),
            "cpu_s": self.cpu_s.is_finite().then(|| round2(self.cpu_s)),
            "nodes": self.nodes,
            "preload": self.preload.as_ref().map(|p| json!({
                "records": p.records,
                "seconds": round2(p.seconds),
                "back_pressure": p.back_pressure,
                "failures": p.failures,
                "first_failure": p.first_failure,
            })),
            "effect": effect.1.json(),
            "claim": claim.1.json(),
            "report": report.1.json(),
            "reference": self.reference.then(|| reference.1.json()),
            "start_lag": self.rate.map(|_| self.start_lag(s).json()),
            "back_pressure": s.back_pressure,
            "failures": s.failures,
            "first_failure": s.first_failure,
        })
    }
}

fn print_failures(s: &Samples) {
    println!(
        "\nback-pressure (RESOURCE_EXHAUSTED): {}\nfailures: {}",
        s.back_pressure, s.failures
    );
    if let Some(first) = &s.first_failure {
        println!("first failure: {first}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples: Vec<u64> = (1..=1000).map(|ms| ms * 1000).collect();
        let row = Row::of(&mut samples, 2.0);
        assert_eq!(row.count, 1000);
        assert_eq!(row.per_s, 500.0);
        assert_eq!((row.p50_ms, row.p99_ms, row.p999_ms), (500.0, 990.0, 999.0));
    }
}
