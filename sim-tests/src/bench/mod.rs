//! The effect-safety benchmark (DESIGN.md section 9): faults at every boundary between an
//! agent, its tool servers and the providers, each on its own and mixed, met by seven
//! strategies on the same seeds, judged by the providers' state.
//!
//! - [`plan`]: a seed's episodes: fault point, provider, faults, timings, intents;
//! - [`run`]: one strategy on one seed, in one simulated world (with the real cluster and
//!   `EffectRunner` for the ledger strategies);
//! - [`judge`]: what each declared effect came to, from the agents' answers, the
//!   providers' state and the ledger's records;
//! - [`metrics`]: per declared effect: extras, missing, false deduplication, unresolved
//!   (with reasons, and needless escalations), latency, time unknown, ledger commands and
//!   stored bytes; and sums;
//! - [`report`]: markdown, CSV and JSON;
//! - [`opcount`]: ledger commands per effect, counted from the nodes' log spans;
//! - [`driver`]: many runs on a few threads, results in a fixed order.
//!
//! `src/bin/effect-bench.rs` runs it over many seeds and writes the report.

pub mod driver;
pub mod judge;
pub mod metrics;
pub mod opcount;
pub mod plan;
pub mod report;
pub mod run;

use std::collections::BTreeSet;

use crate::actors::Strategy;
use metrics::EffectResult;

/// Runs `strategy` on `seed` on a runtime of its own; the error is the run's panic.
pub fn run_seed(seed: u64, strategy: Strategy) -> Result<Vec<EffectResult>, String> {
    crate::seeds::run_isolated(seed, move || run::run(seed, strategy))
}

/// How many strategies `results` cover.
pub fn strategies_in(results: &[EffectResult]) -> usize {
    results
        .iter()
        .map(|r| r.strategy)
        .collect::<BTreeSet<_>>()
        .len()
}
