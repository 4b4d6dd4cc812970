//! Running a scenario over seeds: one seed decides a whole simulated run, and a failing
//! run prints its seed and the exact command that replays it.
//!
//! Which seeds run is decided by the environment:
//! - nothing set: the scenario's fixed seeds, plus `LEDGER_SIM_RANDOM_SEEDS=<n>` seeds
//!   drawn from the wall clock (what CI runs; each is printed, and a failure prints the
//!   command that replays it);
//! - `MADSIM_TEST_SEED=<s>` (and optionally `MADSIM_TEST_NUM=<n>`): seeds `s..s+n`, to
//!   replay a failure;
//! - `LEDGER_SIM_SEEDS=<n>` (and optionally `LEDGER_SIM_SEED_START=<s>`, default 1): a
//!   sweep over seeds `s..s+n` that runs every seed and prints a summary before failing;
//! - `MADSIM_TEST_CHECK_DETERMINISM=1`: a sample (the first [`CHECKED_SEEDS_MAX`] fixed
//!   seeds, or the seeds asked for) each runs three times in this process: madsim's check (two runs that must draw the same random numbers at the same
//!   moments) and one more run whose final ledger and trace must equal the others';
//! - `MADSIM_TEST_TIME_LIMIT=<seconds>`: a run whose simulated time exceeds this fails
//!   (default 900 s), so a livelock cannot hang CI.
//!
//! Each run gets a fresh runtime on a fresh thread, as madsim's own test macro does, so
//! thread-local state does not leak from one seed into the next.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use madsim::runtime::Runtime;
use madsim::Config;

/// Simulated time a run may take by default.
const TIME_LIMIT: Duration = Duration::from_secs(900);
/// Fixed seeds per scenario whose determinism is checked by default.
pub const CHECKED_SEEDS_MAX: usize = 3;

/// A scenario as the seed driver knows it.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// The integration test binary (file name under `tests/`, without `.rs`).
    pub test_binary: &'static str,
    /// The test function.
    pub test_name: &'static str,
    /// The seeds run when no environment variable says otherwise.
    pub default_seeds: &'static [u64],
}

impl Scenario {
    /// The command that replays `seed` of this scenario.
    pub fn replay_command(&self, seed: u64) -> String {
        format!(
            "MADSIM_TEST_SEED={seed} RUSTFLAGS=\"--cfg madsim\" CARGO_TARGET_DIR=target-sim \
             cargo test -p ledger-sim-tests --test {} -- {} --exact --nocapture",
            self.test_binary, self.test_name
        )
    }
}

/// What a passing run reports.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    /// One line of figures (answers, log index, faults).
    pub summary: String,
    /// A hash of the final ledger and the trace: equal for two runs of one seed.
    pub fingerprint: u64,
    /// The run's trace.
    pub trace: Vec<String>,
    /// Named figures of the run (answers, operations checked, faults by kind), summed by
    /// the sweep's table.
    pub metrics: BTreeMap<String, u64>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a non-negative integer"))
    })
}

/// The seeds to run, and whether this is a sweep.
fn selected_seeds(scenario: &Scenario, check_determinism: bool) -> (Vec<u64>, bool) {
    if let Some(seed) = env_u64("MADSIM_TEST_SEED") {
        let count = env_u64("MADSIM_TEST_NUM").unwrap_or(1);
        return ((seed..seed + count).collect(), false);
    }
    if let Some(count) = env_u64("LEDGER_SIM_SEEDS") {
        let start = env_u64("LEDGER_SIM_SEED_START").unwrap_or(1);
        return ((start..start + count).collect(), true);
    }
    if check_determinism {
        let sample = scenario.default_seeds.iter().take(CHECKED_SEEDS_MAX);
        return (sample.copied().collect(), false);
    }
    let mut seeds = scenario.default_seeds.to_vec();
    let random = random_seeds(env_u64("LEDGER_SIM_RANDOM_SEEDS").unwrap_or(0));
    if !random.is_empty() {
        println!("{}: random seeds {random:?}", scenario.test_name);
    }
    seeds.extend(random);
    (seeds, false)
}

/// `count` seeds drawn from the wall clock and the process id, outside any simulation.
fn random_seeds(count: u64) -> Vec<u64> {
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut state = now_ns ^ (u64::from(std::process::id()) << 32);
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Small enough to type; large enough to leave the fixed seeds alone.
            1_000_000 + (state >> 33) % 1_000_000_000
        })
        .collect()
}

fn time_limit() -> Duration {
    std::env::var("MADSIM_TEST_TIME_LIMIT")
        .ok()
        .map(|v| {
            Duration::from_secs_f64(
                v.parse()
                    .unwrap_or_else(|_| panic!("MADSIM_TEST_TIME_LIMIT={v} is not seconds")),
            )
        })
        .unwrap_or(TIME_LIMIT)
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic".into()
    }
}

/// Runs one seed on a fresh runtime and thread; the error is the panic message.
fn run_once<F>(seed: u64, scenario: fn() -> F) -> Result<RunOutcome, String>
where
    F: Future<Output = RunOutcome> + 'static,
{
    run_isolated(seed, scenario)
}

/// Runs the future `make` builds on a fresh runtime seeded with `seed`, on a thread of its
/// own (so thread-local state never leaks between runs), within the simulated time limit;
/// the error is the panic message.
pub fn run_isolated<T, F, M>(seed: u64, make: M) -> Result<T, String>
where
    M: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    let limit = time_limit();
    std::thread::Builder::new()
        .name(format!("sim-seed-{seed}"))
        .spawn(move || {
            let mut runtime = Runtime::with_seed_and_config(seed, Config::default());
            runtime.set_time_limit(limit);
            runtime.block_on(make())
        })
        .expect("a thread for the run")
        .join()
        .map_err(|p| panic_text(p.as_ref()))
}

/// Runs one seed three times in this process: once as usual, then twice under madsim's
/// check, which fails at the first random draw that differs between its two runs. That
/// check cannot see state that differs without changing any draw (an id built from a
/// process-global counter, say), so the ledger and trace of the first run must also
/// equal those of the last.
fn run_checked<F>(seed: u64, scenario: fn() -> F) -> Result<RunOutcome, String>
where
    F: Future<Output = RunOutcome> + 'static,
{
    let first = run_once(seed, scenario)?;
    let last =
        std::panic::catch_unwind(|| Runtime::check_determinism(seed, Config::default(), scenario))
            .map_err(|p| panic_text(p.as_ref()))?;
    if first.fingerprint == last.fingerprint {
        return Ok(last);
    }
    let trace_difference = first
        .trace
        .iter()
        .zip(&last.trace)
        .find(|(a, b)| a != b)
        .map_or_else(
            || "traces are equal, so the ledgers differ".to_string(),
            |(a, b)| format!("traces first differ at {a:?} vs {b:?}"),
        );
    Err(format!(
        "non-determinism: two runs of seed {seed} in one process ended differently \
         (fingerprint {:016x}: {}; then {:016x}: {}); {trace_difference}",
        first.fingerprint, first.summary, last.fingerprint, last.summary
    ))
}

/// Runs one seed, checked for determinism or not.
fn run_seed<F>(
    seed: u64,
    check_determinism: bool,
    scenario: fn() -> F,
) -> Result<RunOutcome, String>
where
    F: Future<Output = RunOutcome> + 'static,
{
    if check_determinism {
        run_checked(seed, scenario)
    } else {
        run_once(seed, scenario)
    }
}

/// Runs `scenario` for every selected seed, prints one line per seed and a summary, and
/// panics, naming each failed seed with its replay command, if any run failed.
pub fn run<F>(spec: &Scenario, scenario: fn() -> F)
where
    F: Future<Output = RunOutcome> + 'static,
{
    crate::init_logging();
    let check_determinism = std::env::var("MADSIM_TEST_CHECK_DETERMINISM").is_ok();
    let (seeds, sweep) = selected_seeds(spec, check_determinism);
    let started = Instant::now();
    let mut failures = Vec::new();
    for &seed in &seeds {
        let run_started = Instant::now();
        let result = run_seed(seed, check_determinism, scenario);
        let wall = run_started.elapsed().as_secs_f64();
        match result {
            Ok(outcome) => {
                for line in &outcome.trace {
                    println!("seed={seed} {line}");
                }
                println!(
                    "{} seed={seed} ok wall={wall:.1}s fingerprint={:016x} {}{}",
                    spec.test_name,
                    outcome.fingerprint,
                    outcome.summary,
                    if check_determinism {
                        " (determinism checked)"
                    } else {
                        ""
                    },
                );
            }
            Err(message) => {
                eprintln!(
                    "{} seed={seed} FAILED after {wall:.1}s: {message}",
                    spec.test_name
                );
                eprintln!("replay: {}", spec.replay_command(seed));
                failures.push(seed);
                if !sweep && seeds.len() == 1 {
                    break;
                }
            }
        }
    }
    println!(
        "{}: {} seeds ({}..={}), {} passed, {} failed, {:.1}s{}",
        spec.test_name,
        seeds.len(),
        seeds.first().copied().unwrap_or(0),
        seeds.last().copied().unwrap_or(0),
        seeds.len() - failures.len(),
        failures.len(),
        started.elapsed().as_secs_f64(),
        if check_determinism {
            ", determinism checked"
        } else {
            ""
        },
    );
    if !failures.is_empty() {
        let replays: Vec<String> = failures.iter().map(|s| spec.replay_command(*s)).collect();
        panic!(
            "{} failed for seeds {failures:?}; replay with:\n{}",
            spec.test_name,
            replays.join("\n")
        );
    }
}
